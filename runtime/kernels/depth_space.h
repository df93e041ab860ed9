// DepthToSpace and SpaceToDepth (opsets 1 to 13, both DepthToSpace modes) as the spec defines them: a
// reshape to 6-D, a transpose and a reshape back to 4-D, which is one strided copy. Shared by the CPU and
// CUDA kernels: `view` is the output seen as the transposed 6-D array, `strides` the input's element strides
// along its axes; out[i] = in[sum(c_k * strides[k])] for the coordinates c of i in `view`.
#pragma once
#include <cstdint>
#include <vector>

#include "graph/error.h"
#include "graph/ir.h"
#include "graph/tensor.h"

namespace graphrun::runtime {

struct DepthSpaceCopy {
  Shape out;                     // the 4-D output
  Shape view;                    // the output as the 6-D transposed array
  std::vector<int64_t> strides;  // the input's strides along view's axes
};

inline DepthSpaceCopy depth_space_copy(const Node& node, const Shape& x, bool to_space) {
  const char* what = to_space ? "DepthToSpace" : "SpaceToDepth";
  GR_CHECK(x.size() == 4, what << ": input must be 4-D, got " << shape_str(x));
  const int64_t b = node.attr_i("blocksize", 0);
  GR_CHECK(b > 0, what << ": attribute 'blocksize' must be positive");
  const int64_t n = x[0], c = x[1], h = x[2], w = x[3];
  Shape tmp;
  std::vector<int64_t> perm;
  DepthSpaceCopy r;
  if (to_space) {
    GR_CHECK(c % (b * b) == 0, what << ": channels " << c << " are not divisible by blocksize^2 = " << b * b);
    if (node.attr_s("mode", "DCR") == "CRD") {
      tmp = {n, c / (b * b), b, b, h, w};
      perm = {0, 1, 4, 2, 5, 3};
    } else {
      tmp = {n, b, b, c / (b * b), h, w};
      perm = {0, 3, 4, 1, 5, 2};
    }
    r.out = {n, c / (b * b), h * b, w * b};
  } else {
    GR_CHECK(h % b == 0 && w % b == 0, what << ": spatial size " << h << "x" << w << " is not divisible by " << b);
    tmp = {n, c, h / b, b, w / b, b};
    perm = {0, 3, 5, 1, 2, 4};
    r.out = {n, c * b * b, h / b, w / b};
  }
  std::vector<int64_t> ts(6, 1);
  for (int k = 4; k >= 0; --k) ts[k] = ts[k + 1] * tmp[k + 1];
  r.view.resize(6);
  r.strides.resize(6);
  for (int k = 0; k < 6; ++k) {
    r.view[k] = tmp[perm[k]];
    r.strides[k] = ts[perm[k]];
  }
  return r;
}

}  // namespace graphrun::runtime

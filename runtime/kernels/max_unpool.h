// ONNX MaxUnpool (opset 11): the output shape and where an index lands, shared by the CPU kernel
// (runtime/kernels/cpu/unpool.cc) and the CUDA kernel (runtime/kernels/cuda/unpool.cu). The indices are flat into the
// unpooled shape, each spatial dimension MaxPool's input size back, (in - 1) * stride - pad_begin - pad_end + kernel.
// With output_shape, that result is padded with zeros at the end of each spatial axis to it (as ONNX's test and ONNX
// Runtime read it); its batch and channels must be X's and its spatial dimensions within a stride above the unpooled
// ones (the sizes a pooling could have come from, as torch's max_unpool2d output_size): a file cannot ask for an
// output larger than the pooling explains.
#pragma once
#include <cstdint>

#ifdef __CUDACC__
#define GR_UNPOOL_HD __host__ __device__
#else
#define GR_UNPOOL_HD
#endif

namespace graphrun::runtime {

// Unpooled dims and output dims (rank <= 8): where flat index `i` of the unpooled shape lands in the output.
struct UnpoolMap {
  int rank = 0;
  int64_t from[8] = {}, to[8] = {};
  GR_UNPOOL_HD int64_t at(int64_t i) const {
    int64_t out = 0, scale = 1;
    for (int d = rank - 1; d >= 0; --d) {
      out += (i % from[d]) * scale;
      i /= from[d];
      scale *= to[d];
    }
    return out;
  }
};

}  // namespace graphrun::runtime

#include <string>
#include <vector>

#include "graph/error.h"
#include "graph/ir.h"
#include "graph/tensor.h"

namespace graphrun::runtime {

// The unpooled shape (the indices' range) in `unpooled`; returns the output shape.
inline Shape max_unpool_shape(const Node& n, const Shape& x, const std::vector<int64_t>* output_shape,
                              Shape* unpooled = nullptr) {
  const auto r = static_cast<int64_t>(x.size());
  GR_CHECK(r >= 3 && r <= 8, "MaxUnpool: X must be [N, C, spatial...] of rank 3 to 8, got " << shape_str(x));
  const std::vector<int64_t> kernel = n.attr_ints("kernel_shape");
  const auto sd = static_cast<size_t>(r - 2);
  GR_CHECK(kernel.size() == sd, "MaxUnpool: kernel_shape must have " << sd << " entries");
  std::vector<int64_t> strides = n.attr_ints("strides", std::vector<int64_t>(sd, 1));
  std::vector<int64_t> pads = n.attr_ints("pads", std::vector<int64_t>(2 * sd, 0));
  GR_CHECK(strides.size() == sd && pads.size() == 2 * sd, "MaxUnpool: strides and pads do not fit " << sd << " spatial axes");
  Shape y = x;
  for (size_t d = 0; d < sd; ++d) {
    GR_CHECK(kernel[d] >= 1 && kernel[d] <= 65536 && strides[d] >= 1 && strides[d] <= 65536 && pads[d] >= 0 &&
                 pads[d + sd] >= 0 && pads[d] <= 65536 && pads[d + sd] <= 65536,
             "MaxUnpool: kernel_shape, strides and pads must be in range (kernel and strides in [1, 65536], pads in [0, "
             "65536])");
    y[d + 2] = (x[d + 2] - 1) * strides[d] - pads[d] - pads[d + sd] + kernel[d];
    GR_CHECK(y[d + 2] >= 0, "MaxUnpool: the pads leave spatial axis " << d << " no size");
  }
  if (unpooled) *unpooled = y;
  if (!output_shape) return y;
  GR_CHECK(output_shape->size() == x.size(), "MaxUnpool: output_shape has " << output_shape->size()
                                                                             << " entries for an X of rank " << r);
  for (size_t d = 0; d < x.size(); ++d) {
    const int64_t v = (*output_shape)[d];
    const bool ok = d < 2 ? v == x[d] : v >= y[d] && v < y[d] + strides[d - 2];
    GR_CHECK(ok, "MaxUnpool: output_shape " << shape_str(Shape(output_shape->begin(), output_shape->end()))
                                            << " does not fit X " << shape_str(x) << " (spatial sizes from "
                                            << shape_str(y) << " to a stride above)");
  }
  return Shape(output_shape->begin(), output_shape->end());
}

inline UnpoolMap unpool_map(const Shape& unpooled, const Shape& out) {
  UnpoolMap m;
  m.rank = static_cast<int>(out.size());
  for (size_t d = 0; d < out.size(); ++d) m.from[d] = unpooled[d], m.to[d] = out[d];
  return m;
}

}  // namespace graphrun::runtime

// LRN (LocalResponseNormalization, opsets 1 and 13) as the spec defines it, shared by the CPU and CUDA
// kernels: for X [N, C, D1, ...] and each element,
//   square_sum = sum of X[n, c', d]^2 over c' from c - floor((size - 1) / 2) to c + ceil((size - 1) / 2),
//                the channels outside [0, C) left out,
//   Y = X / (bias + alpha / size * square_sum) ^ beta.
// (torch's F.local_response_norm pads size / 2 channels before and (size - 1) / 2 after: for the odd
// sizes everyone uses, the same window.) The gradient is graph nodes (autodiff/rules/lrn.cc).
#pragma once
#include <math.h>

#include <cstdint>

#include "graph/error.h"
#include "graph/ir.h"
#include "graph/tensor.h"

#ifdef __CUDACC__
#define GR_LRN_HD __host__ __device__
#else
#define GR_LRN_HD
#endif

namespace graphrun::runtime::lrn {

struct Params {
  int64_t channels = 0, inner = 1;  // C, and the elements of one channel of one example (D1 * ...)
  int64_t size = 1;
  double alpha = 1e-4, beta = 0.75, bias = 1;
};

// Y at element i of X (flat, [N, C, inner] order), the sums in double.
template <class T>
GR_LRN_HD T value(const T* x, int64_t i, const Params& p) {
  const int64_t c = (i / p.inner) % p.channels, base = i - c * p.inner;
  const int64_t before = (p.size - 1) / 2, after = p.size - 1 - before;
  const int64_t lo = c - before < 0 ? 0 : c - before, hi = c + after >= p.channels ? p.channels - 1 : c + after;
  double sum = 0;
  for (int64_t k = lo; k <= hi; ++k) {
    const double v = static_cast<double>(x[base + k * p.inner]);
    sum += v * v;
  }
  return static_cast<T>(static_cast<double>(x[i]) * pow(p.bias + p.alpha / static_cast<double>(p.size) * sum, -p.beta));
}

// The window and coefficients of LRN node `node` on X; an Error naming the node for what the spec refuses.
inline Params params(const Node& node, const Tensor& x) {
  GR_CHECK(x.rank() >= 3, node.describe() << ": X must have shape [N, C, D1, ...] (rank >= 3), got "
                                          << shape_str(x.shape()));
  GR_CHECK(node.has_attr("size"), node.describe() << ": LRN needs its attribute 'size'");
  Params p;
  p.size = node.attr_i("size", 1);
  GR_CHECK(p.size >= 1, node.describe() << ": LRN's size must be at least 1, got " << p.size);
  p.alpha = node.attr_f("alpha", 1e-4f);
  p.beta = node.attr_f("beta", 0.75f);
  p.bias = node.attr_f("bias", 1.f);
  p.channels = x.dim(1);
  for (int i = 2; i < x.rank(); ++i) p.inner *= x.dim(i);
  return p;
}

}  // namespace graphrun::runtime::lrn

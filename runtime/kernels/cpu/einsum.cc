// CPU kernel of Einsum (opset 12+). Two operands that are plain strided views of their labels (no
// diagonal) go through GEMM, as torch.einsum goes through bmm: an attention score or a projection costs
// what the MatMul costs. Anything else (one or three operands, diagonals, empty ranges) runs one loop
// over every label's range (runtime/kernels/einsum_plan.h: any number of operands, "...", repeated
// labels) with each operand's stride per label, summing in double.
#include <algorithm>
#include <utility>

#include "runtime/kernels/cpu/gemm.h"
#include "runtime/kernels/cpu/math_common.h"
#include "runtime/kernels/einsum_plan.h"

namespace graphrun::runtime::cpu {
namespace {

// Calls f(offset) for every index of labels with these ranges (the last fastest), offset being the sum
// of index * stride; once with 0 for no labels.
template <class F>
void for_each_offset(const std::vector<int64_t>& dims, const std::vector<int64_t>& strides, F&& f) {
  const size_t n = dims.size();
  std::vector<int64_t> c(n, 0);
  int64_t off = 0;
  for (;;) {
    f(off);
    size_t k = n;
    for (; k-- > 0;) {
      off += strides[k];
      if (++c[k] < dims[k]) break;
      off -= strides[k] * dims[k];
      c[k] = 0;
    }
    if (k == static_cast<size_t>(-1)) return;
  }
}

// Operand i's labels of range > 1 in memory order (by stride) make up its elements exactly, one stride
// each: no diagonal (a repeated label's stride is the sum of two) and no gap.
bool plain_layout(const EinsumPlan& plan, int i, int64_t numel) {
  std::vector<std::pair<int64_t, int64_t>> st;  // (stride, range)
  for (size_t k = 0; k < plan.dims.size(); ++k)
    if (plan.dims[k] > 1 && plan.strides[i][k] != 0) st.emplace_back(plan.strides[i][k], plan.dims[k]);
  std::sort(st.begin(), st.end());
  int64_t expect = 1;
  for (const auto& [stride, range] : st) {
    if (stride != expect) return false;
    expect *= range;
  }
  return expect == numel;
}

// The GEMM form of a two-operand Einsum. Each label of range > 1 is a batch label (both operands and the
// output), a contracted one (both operands, not the output), a free label of A or of B (that operand
// and the output) or one summed within its operand. A is gathered as [batch, freeA, contracted], B as
// [batch, contracted, freeB], their own summed labels added up on the way (in double); one GEMM per batch
// gives [batch, freeA, freeB], which is scattered into the output's label order. False (nothing written)
// where the operands are not plain views of their labels or a range is empty.
template <class T>
bool einsum_gemm(KernelContext& ctx, const EinsumPlan& plan, Tensor& y) {
  const std::vector<int64_t>& dims = plan.dims;
  const int L = static_cast<int>(dims.size());
  if (std::find(dims.begin(), dims.end(), 0) != dims.end()) return false;
  for (int i = 0; i < 2; ++i)
    if (!plain_layout(plan, i, ctx.input(i).numel())) return false;
  std::vector<int> batch, contracted, free_a, free_b, sum_a, sum_b;
  for (int k = 0; k < L; ++k) {
    if (dims[k] == 1) continue;
    const bool a = plan.strides[0][k] != 0, b = plan.strides[1][k] != 0, out = k < plan.out_labels;
    if (a && b) (out ? batch : contracted).push_back(k);
    else if (a) (out ? free_a : sum_a).push_back(k);
    else if (b) (out ? free_b : sum_b).push_back(k);
    else return false;
  }
  std::vector<int64_t> out_stride(plan.out_labels, 0);  // the output is row-major in its labels' order
  int64_t acc = 1;
  for (int k = plan.out_labels; k-- > 0;) {
    out_stride[k] = acc;
    acc *= dims[k];
  }
  auto range_of = [&](const std::vector<int>& ls) {
    int64_t r = 1;
    for (int k : ls) r *= dims[k];
    return r;
  };
  const int64_t NB = range_of(batch), M = range_of(free_a), N = range_of(free_b), K = range_of(contracted);
  // A, B and C in one scratch buffer, each starting on a 64-byte boundary as a tensor of their own would.
  constexpr int64_t kAlign = 64 / sizeof(T);
  auto up = [](int64_t v) { return (v + kAlign - 1) / kAlign * kAlign; };
  const int64_t na = up(NB * M * K), nb = up(NB * K * N);
  T* scratch = static_cast<T*>(ctx.scratch(sizeof(T) * static_cast<size_t>(na + nb + NB * M * N)));
  T *a = scratch, *b = a + na, *c = b + nb;
  // dst[j] for the j-th index of `outer` (the last fastest): the operand summed over `summed`.
  auto gather = [&](int i, const std::vector<int>& outer, const std::vector<int>& summed, T* dst) {
    std::vector<int64_t> od, os, sd, ss;
    for (int k : outer) od.push_back(dims[k]), os.push_back(plan.strides[i][k]);
    for (int k : summed) sd.push_back(dims[k]), ss.push_back(plan.strides[i][k]);
    const T* src = ptr<T>(ctx.input(i));
    if (summed.empty()) {
      for_each_offset(od, os, [&](int64_t o) { *dst++ = src[o]; });
      return;
    }
    for_each_offset(od, os, [&](int64_t o) {
      double sum = 0;
      for_each_offset(sd, ss, [&](int64_t p) { sum += static_cast<double>(src[o + p]); });
      *dst++ = static_cast<T>(sum);
    });
  };
  auto cat = [](std::vector<int> x, const std::vector<int>& z, const std::vector<int>& w) {
    x.insert(x.end(), z.begin(), z.end());
    x.insert(x.end(), w.begin(), w.end());
    return x;
  };
  gather(0, cat(batch, free_a, contracted), sum_a, a);
  gather(1, cat(batch, contracted, free_b), sum_b, b);
  // Row-major C[M, N] = A[M, K] B[K, N] per batch (column-major C^T = B^T A^T), as MatMul runs them.
  for_each_product(NB, M * N * K, ctx.threads(), [&](int64_t n, int threads) {
    gemm(false, false, N, M, K, T(1), b + n * K * N, N, a + n * M * K, K, T(0), c + n * M * N, N, threads);
  });
  std::vector<int64_t> cd, cs;
  for (int k : cat(batch, free_a, free_b)) cd.push_back(dims[k]), cs.push_back(out_stride[k]);
  T* py = ptr<T>(y);
  const T* src = c;
  for_each_offset(cd, cs, [&](int64_t o) { py[o] = *src++; });
  return true;
}

template <class T>
void einsum_typed(KernelContext& ctx) {
  std::vector<Shape> shapes;
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    GR_CHECK(ctx.input(i).dtype() == ctx.input(0).dtype(), "Einsum: operands differ in element type");
    shapes.push_back(ctx.input(i).shape());
  }
  const EinsumPlan plan = plan_einsum(ctx.node().attr_s("equation", ""), shapes);
  const int n = ctx.num_inputs(), L = static_cast<int>(plan.dims.size());
  const std::vector<int64_t>& dims = plan.dims;
  const std::vector<std::vector<int64_t>>& strides = plan.strides;
  Tensor& y = ctx.output(0, plan.out_shape, ctx.input(0).dtype());
  if (n == 2 && einsum_gemm<T>(ctx, plan, y)) return;
  const int64_t out_n = y.numel();
  int64_t inner = 1;
  for (int k = plan.out_labels; k < L; ++k) inner *= dims[k];
  std::vector<const T*> p(n);
  for (int i = 0; i < n; ++i) p[i] = ptr<T>(ctx.input(i));
  T* py = ptr<T>(y);
  std::vector<int64_t> c(L, 0), off(n, 0);
  for (int64_t o = 0; o < out_n; ++o) {
    double acc = 0;
    for (int64_t s = 0; s < inner; ++s) {
      double prod = 1;
      for (int i = 0; i < n; ++i) prod *= static_cast<double>(p[i][off[i]]);
      acc += prod;
      // Advance the odometer (the output's labels too, when the summed ones wrap).
      for (int k = L; k-- > 0;) {
        for (int i = 0; i < n; ++i) off[i] += strides[i][k];
        if (++c[k] < dims[k]) break;
        for (int i = 0; i < n; ++i) off[i] -= strides[i][k] * dims[k];
        c[k] = 0;
      }
    }
    py[o] = static_cast<T>(acc);
    if (inner == 0)  // an empty summed range: the output labels still advance
      for (int k = plan.out_labels; k-- > 0;) {
        for (int i = 0; i < n; ++i) off[i] += strides[i][k];
        if (++c[k] < dims[k]) break;
        for (int i = 0; i < n; ++i) off[i] -= strides[i][k] * dims[k];
        c[k] = 0;
      }
  }
}

void einsum_kernel(KernelContext& ctx) {
  GR_CHECK(ctx.num_inputs() >= 1, "Einsum: needs at least one operand");
  dispatch_float(ctx.input(0).dtype(), "Einsum", [&](auto tag) { einsum_typed<decltype(tag)>(ctx); });
}

}  // namespace

GR_REGISTER_OPS(einsum) {
  ops.op("Einsum").cpu(einsum_kernel);
}

}  // namespace graphrun::runtime::cpu

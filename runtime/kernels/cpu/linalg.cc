// CPU kernels of the linear-algebra family: Gemm and MatMul (numpy broadcasting of batch axes): float
// and double on gemm.h (oneDNN for float), integers on Eigen's GEMM.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // false positives inside Eigen's AVX-512 code
#include <Eigen/Core>
#include <algorithm>
#include <type_traits>

#include "runtime/kernel.h"
#include "runtime/kernels/cpu/gemm.h"
#include "runtime/kernels/cpu/half_compute.h"

namespace graphrun::runtime::cpu {
namespace {

template <class T> using RMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Stride = Eigen::OuterStride<>;
template <class T> using MapR = Eigen::Map<RMat<T>>;
template <class T> using MapCR = Eigen::Map<const RMat<T>, 0, Stride>;

// Row-major Y[M, N] = alpha * op(A) op(B) + beta * Y, A and B stored row-major with lda, ldb elements
// per row: column-major, that is Y^T = alpha * op(B)^T op(A)^T.
template <class T>
void row_major_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* a, int64_t lda, const T* b,
                    int64_t ldb, T beta, T* y, int threads) {
  if constexpr (std::is_floating_point_v<T>) {
    gemm(tb, ta, N, M, K, alpha, b, ldb, a, lda, beta, y, N, threads);
  } else {
    MapR<T> Y(y, M, N);
    MapCR<T> A(a, ta ? K : M, ta ? M : K, Stride(lda)), B(b, tb ? N : K, tb ? K : N, Stride(ldb));
    if (beta == T(0)) Y.setZero();
    auto run = [&](const auto& opA, const auto& opB) { Y.noalias() += alpha * (opA * opB); };
    if (!ta && !tb) run(A, B);
    else if (ta && !tb) run(A.transpose(), B);
    else if (!ta && tb) run(A, B.transpose());
    else run(A.transpose(), B.transpose());
  }
}

bool gemm_dtype_ok(DType t) { return t == DType::F32 || t == DType::F64 || t == DType::I32 || t == DType::I64; }

// Y = alpha * op(A) * op(B) + beta * C, C broadcast to [M, N]; kFused (FusedGemm): then Relu, applied
// right after the product while Y is in cache.
template <class T, bool kFused = false>
void gemm_kernel(KernelContext& ctx) {
  const Node& n = ctx.node();
  if constexpr (kFused) check_fused_activation(n);
  const Tensor &a = ctx.input(0), &b = ctx.input(1);
  GR_CHECK(a.rank() == 2 && b.rank() == 2,
           "A " << shape_str(a.shape()) << " and B " << shape_str(b.shape()) << " must both be 2-D");
  const bool ta = n.attr_i("transA", 0) != 0, tb = n.attr_i("transB", 0) != 0;
  const T alpha = static_cast<T>(n.attr_f("alpha", 1.f)), beta = static_cast<T>(n.attr_f("beta", 1.f));
  const int64_t M = ta ? a.dim(1) : a.dim(0), K = ta ? a.dim(0) : a.dim(1);
  const int64_t Kb = tb ? b.dim(1) : b.dim(0), N = tb ? b.dim(0) : b.dim(1);
  GR_CHECK(K == Kb, "op(A) is [" << M << "," << K << "] but op(B) is [" << Kb << "," << N
                                 << "]: inner dimensions differ (transA=" << ta << ", transB=" << tb << ")");
  Tensor& y = ctx.output(0, {M, N}, a.dtype());
  T* yp = y.data<T>();
  const bool use_c = ctx.has_input(2) && beta != T(0);
  if (ctx.has_input(2)) {
    const Tensor& c = ctx.input(2);
    GR_CHECK(c.dtype() == a.dtype(), "C is " << dtype_name(c.dtype()) << " but A is " << dtype_name(a.dtype()));
    GR_CHECK(c.rank() <= 2, "C " << shape_str(c.shape()) << " must have rank 0 to 2");
    const int64_t cm = c.rank() == 2 ? c.dim(0) : 1, cn = c.rank() >= 1 ? c.dim(-1) : 1;
    GR_CHECK((cm == M || cm == 1) && (cn == N || cn == 1),
             "C " << shape_str(c.shape()) << " does not broadcast to [" << M << "," << N << "]");
    if (use_c) {
      const T* cp = c.data<T>();
      const int64_t sm = cm == 1 ? 0 : cn, sn = cn == 1 ? 0 : 1;
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) yp[i * N + j] = beta * cp[i * sm + j * sn];
    }
  }
  if (M == 0 || N == 0) return;
  if (K == 0) {
    if (!use_c) std::fill(yp, yp + M * N, T(0));
  } else {
    row_major_gemm(ta, tb, M, N, K, alpha, a.data<T>(), a.dim(1), b.data<T>(), b.dim(1), use_c ? T(1) : T(0), yp,
                   ctx.threads());
  }
  if constexpr (kFused) relu_in_place(yp, M * N);
}

// FusedMatMul(A [..., M, K], B [K, N], bias [N]) = Relu(MatMul(A, B) + bias) (pass fuse_relu_epilogue):
// the one GEMM MatMul runs for these shapes, then bias and Relu in one pass over Y while it is in cache:
// each element rounds as MatMul, Add and Relu round it.
template <class T>
void fused_matmul_kernel(KernelContext& ctx) {
  check_fused_activation(ctx.node());
  const Tensor &a = ctx.input(0), &b = ctx.input(1);
  GR_CHECK(a.rank() >= 2 && b.rank() == 2,
           "A " << shape_str(a.shape()) << " must have rank >= 2 and B " << shape_str(b.shape()) << " rank 2");
  const int64_t K = a.dim(-1), N = b.dim(1), rows = shape_numel(Shape(a.shape().begin(), a.shape().end() - 1));
  GR_CHECK(b.dim(0) == K, "A " << shape_str(a.shape()) << " and B " << shape_str(b.shape()) << ": inner dimensions "
                               << K << " and " << b.dim(0) << " differ");
  const T* bias = nullptr;
  if (ctx.has_input(2)) {
    const Tensor& c = ctx.input(2);
    GR_CHECK(c.dtype() == a.dtype() && c.rank() >= 1 && c.numel() == N && c.dim(-1) == N,
             "bias " << shape_str(c.shape()) << " (" << dtype_name(c.dtype()) << ") must hold " << N << " "
                     << dtype_name(a.dtype()) << " values along its last axis");
    bias = c.data<T>();
  }
  Shape ys = a.shape();
  ys.back() = N;
  Tensor& y = ctx.output(0, ys, a.dtype());
  T* yp = y.data<T>();
  if (rows == 0 || N == 0) return;
  if (K == 0) std::fill(yp, yp + rows * N, T(0));
  else row_major_gemm(false, false, rows, N, K, T(1), a.data<T>(), K, b.data<T>(), N, T(0), yp, ctx.threads());
  const int threads = rows * N >= (int64_t{1} << 16) ? static_cast<int>(std::min<int64_t>(ctx.threads(), rows)) : 1;
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
  for (int64_t i = 0; i < rows; ++i) {
    T* r = yp + i * N;
    if (bias) {
#pragma omp simd
      for (int64_t j = 0; j < N; ++j) r[j] = relu_of(r[j] + bias[j]);
    } else {
      relu_in_place(r, N);
    }
  }
}

// Row-major strides of `shape` right-aligned into `rank` axes, 0 where the axis is broadcast (size 1).
std::vector<int64_t> broadcast_strides(const Shape& shape, int rank, const Shape& out) {
  std::vector<int64_t> st(rank, 0);
  int64_t s = 1;
  for (int i = static_cast<int>(shape.size()) - 1, j = rank - 1; i >= 0; --i, --j) {
    st[j] = (shape[i] == 1 && out[j] != 1) ? 0 : s;
    s *= shape[i];
  }
  return st;
}

template <class T>
void matmul_kernel(KernelContext& ctx) {
  const Tensor &a = ctx.input(0), &b = ctx.input(1);
  GR_CHECK(a.rank() >= 1 && b.rank() >= 1,
           "A " << shape_str(a.shape()) << " and B " << shape_str(b.shape()) << " must have rank >= 1");
  // numpy: a 1-D A is a row [1, K], a 1-D B a column [K, 1]; the added axis is dropped from Y.
  Shape as = a.shape(), bs = b.shape();
  if (a.rank() == 1) as.insert(as.begin(), 1);
  if (b.rank() == 1) bs.push_back(1);
  const int64_t M = as[as.size() - 2], K = as.back(), N = bs.back();
  GR_CHECK(bs[bs.size() - 2] == K, "A " << shape_str(a.shape()) << " and B " << shape_str(b.shape())
                                        << ": inner dimensions " << K << " and " << bs[bs.size() - 2] << " differ");
  const Shape abatch(as.begin(), as.end() - 2), bbatch(bs.begin(), bs.end() - 2);
  const int rank = static_cast<int>(std::max(abatch.size(), bbatch.size()));
  Shape batch(rank, 1);
  for (int j = 0; j < rank; ++j) {
    const int ia = j - (rank - static_cast<int>(abatch.size())), ib = j - (rank - static_cast<int>(bbatch.size()));
    const int64_t da = ia >= 0 ? abatch[ia] : 1, db = ib >= 0 ? bbatch[ib] : 1;
    GR_CHECK(da == db || da == 1 || db == 1, "batch axes of A " << shape_str(a.shape()) << " and B "
                                                                << shape_str(b.shape()) << " do not broadcast");
    batch[j] = da == 1 ? db : da;
  }
  Shape ys = batch;
  if (a.rank() > 1) ys.push_back(M);
  if (b.rank() > 1) ys.push_back(N);
  Tensor& y = ctx.output(0, ys, a.dtype());
  T* yp = y.data<T>();
  const T *ap = a.data<T>(), *bp = b.data<T>();
  const int64_t nbatch = shape_numel(batch);
  if (nbatch == 0 || M == 0 || N == 0) return;
  if (K == 0) {
    std::fill(yp, yp + nbatch * M * N, T(0));
    return;
  }
  // B shared by every batch and A's batches contiguous: one GEMM with the batch folded into M.
  if (shape_numel(bbatch) == 1 && shape_numel(abatch) == nbatch) {
    row_major_gemm(false, false, nbatch * M, N, K, T(1), ap, K, bp, N, T(0), yp, ctx.threads());
    return;
  }
  const std::vector<int64_t> sa = broadcast_strides(abatch, rank, batch), sb = broadcast_strides(bbatch, rank, batch);
  auto one = [&](int64_t i, int threads) {
    int64_t oa = 0, ob = 0, rem = i;
    for (int j = rank - 1; j >= 0; --j) {
      const int64_t idx = rem % batch[j];
      rem /= batch[j];
      oa += idx * sa[j];
      ob += idx * sb[j];
    }
    row_major_gemm(false, false, M, N, K, T(1), ap + oa * M * K, K, bp + ob * K * N, N, T(0), yp + i * M * N, threads);
  };
  for_each_product(nbatch, M * N * K, ctx.threads(), one);
}

template <template <class> class K>
void by_dtype(KernelContext& ctx) {
  const Tensor &a = ctx.input(0), &b = ctx.input(1);
  GR_CHECK(gemm_dtype_ok(a.dtype()), "A must be f32, f64, i32 or i64, got " << dtype_name(a.dtype()));
  GR_CHECK(a.dtype() == b.dtype(), "A is " << dtype_name(a.dtype()) << " but B is " << dtype_name(b.dtype()));
  switch (a.dtype()) {
    case DType::F32: K<float>::run(ctx); break;
    case DType::F64: K<double>::run(ctx); break;
    case DType::I32: K<int32_t>::run(ctx); break;
    default: K<int64_t>::run(ctx); break;
  }
}

template <class T> struct Gemm { static void run(KernelContext& c) { gemm_kernel<T>(c); } };
template <class T> struct MatMul { static void run(KernelContext& c) { matmul_kernel<T>(c); } };

// The fused ops take floats only (pass fuse_relu_epilogue fuses no other type).
template <void (*F32)(KernelContext&), void (*F64)(KernelContext&)>
void by_float(KernelContext& ctx) {
  const Tensor &a = ctx.input(0), &b = ctx.input(1);
  GR_CHECK(a.dtype() == DType::F32 || a.dtype() == DType::F64, "A must be f32 or f64, got " << dtype_name(a.dtype()));
  GR_CHECK(a.dtype() == b.dtype(), "A is " << dtype_name(a.dtype()) << " but B is " << dtype_name(b.dtype()));
  if (a.dtype() == DType::F32) F32(ctx);
  else F64(ctx);
}

OpSchemaSpec fused_schema(const char* doc, const char* bias_doc) {
  OpSchemaSpec s(doc);
  s.input("A", "as the unfused op", "T").input("B", "as the unfused op", "T");
  s.input("C", bias_doc, "T", OpSchemaSpec::Arity::Optional).output("Y", "the activation of the result", "T");
  s.attr("activation", "the activation: Relu", Attribute::Str("Relu"));
  s.type("T", {"tensor(float)", "tensor(double)"}, "f32 or f64");
  return s;
}

}  // namespace

GR_REGISTER_OPS(linalg) {
  ops.op("Gemm").cpu(via_f32<by_dtype<Gemm>>);
  ops.op("MatMul").cpu(via_f32<by_dtype<MatMul>>);
  ops.op(kGraphrunDomain, "FusedGemm")
      .cpu(by_float<gemm_kernel<float, true>, gemm_kernel<double, true>>)
      .schema(fused_schema("`Relu(Gemm(A, B, C))` in one kernel, the Relu applied right after the product "
                           "(internal: pass fuse_relu_epilogue makes it of Gemm + Relu; exported graphs keep those)",
                           "as Gemm's C")
                  .attr("alpha", "as Gemm", Attribute::Float(1.f))
                  .attr("beta", "as Gemm", Attribute::Float(1.f))
                  .attr("transA", "as Gemm", Attribute::Int(0))
                  .attr("transB", "as Gemm", Attribute::Int(0)));
  ops.op(kGraphrunDomain, "FusedMatMul")
      .cpu(by_float<fused_matmul_kernel<float>, fused_matmul_kernel<double>>)
      .schema(fused_schema("`Relu(MatMul(A, B) + C)` for A [..., M, K], B [K, N], C [N]: one GEMM, then bias and "
                           "Relu in one pass over Y while it is in cache (internal: pass fuse_relu_epilogue makes it "
                           "of MatMul + Add + Relu, PyTorch's Linear + ReLU; exported graphs keep those)",
                           "the bias added to each row, N values"));
}

}  // namespace graphrun::runtime::cpu

// CUDA kernels: linalg family (the CPU's linalg.cc op set): Gemm and MatMul through cuBLAS.
// Row-major trick: a row-major [m, n] matrix is a column-major [n, m] one, so Y = A B is computed
// as the column-major product Y^T = B^T A^T, with no copies.
#include "runtime/kernels/cuda/common.cuh"
#include "runtime/kernels/cuda/fused.cuh"

namespace graphrun::runtime::cuda {

void broadcast_copy(KernelContext& ctx, const Tensor& X, Tensor& Y);  // elementwise.cu

namespace {

// Row-major Y[m, n] = alpha * op(A) op(B) + beta * Y, op(A) [m, k], op(B) [k, n];
// A is stored [m, k] (or [k, m] when trans_a), B [k, n] (or [n, k] when trans_b).
void gemm_row_major(cublasHandle_t h, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                    const float* A, const float* B, float beta, float* Y, int batch = 1, int64_t stride_a = 0,
                    int64_t stride_b = 0, int64_t stride_y = 0) {
  GR_CHECK(m <= INT32_MAX && n <= INT32_MAX && k <= INT32_MAX, "matrix too large for cuBLAS");
  int lda = static_cast<int>(trans_a ? m : k), ldb = static_cast<int>(trans_b ? k : n);
  cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (batch == 1)
    GR_CUBLAS_CHECK(cublasSgemm(h, op_b, op_a, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha, B, ldb,
                                A, lda, &beta, Y, static_cast<int>(n)));
  else
    GR_CUBLAS_CHECK(cublasSgemmStridedBatched(h, op_b, op_a, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k),
                                              &alpha, B, ldb, stride_b, A, lda, stride_a, &beta, Y, static_cast<int>(n),
                                              stride_y, batch));
}

// Gemm's Y (FusedGemm's before its Relu).
Tensor& gemm_product(KernelContext& ctx) {
  const Tensor& A = ctx.input(0);
  const Tensor& B = ctx.input(1);
  const Node& node = ctx.node();
  GR_CHECK(A.rank() == 2 && B.rank() == 2, "Gemm: A and B must be matrices, got " << shape_str(A.shape()) << " and "
                                                                                   << shape_str(B.shape()));
  GR_CHECK(A.dtype() == DType::F32 && B.dtype() == DType::F32, "Gemm on CUDA takes f32");
  bool ta = node.attr_i("transA", 0) != 0, tb = node.attr_i("transB", 0) != 0;
  float alpha = node.attr_f("alpha", 1.f), beta = node.attr_f("beta", 1.f);
  int64_t m = ta ? A.dim(1) : A.dim(0), k = ta ? A.dim(0) : A.dim(1);
  int64_t kb = tb ? B.dim(1) : B.dim(0), n = tb ? B.dim(0) : B.dim(1);
  GR_CHECK(k == kb, "Gemm: inner dimensions differ: " << shape_str(A.shape()) << (ta ? "^T" : "") << " x "
                                                      << shape_str(B.shape()) << (tb ? "^T" : ""));
  Tensor& Y = ctx.output(0, {m, n}, DType::F32);
  bool has_c = ctx.has_input(2) && beta != 0.f;
  if (ctx.has_input(2)) {
    // C is checked as on the CPU (rank 0 to 2, unidirectional broadcast) even when beta = 0 ignores it.
    const Tensor& C = ctx.input(2);
    GR_CHECK(C.dtype() == DType::F32, "Gemm: C must be f32");
    GR_CHECK(C.rank() <= 2, "Gemm: C " << shape_str(C.shape()) << " must have rank 0 to 2");
    Shape bc = broadcast_shapes({C.shape(), Y.shape()});
    GR_CHECK(bc == Y.shape(), "Gemm: C " << shape_str(C.shape()) << " does not broadcast to " << shape_str(Y.shape()));
  }
  if (has_c) broadcast_copy(ctx, ctx.input(2), Y);
  if (m == 0 || n == 0) return Y;
  if (k == 0) {
    if (!has_c) GR_CUDA_CHECK(cudaMemsetAsync(Y.raw(), 0, Y.nbytes(), stream_of(ctx)));
    else if (beta != 1.f) {
      GR_CHECK(m * n <= INT32_MAX, "Gemm: output too large for cuBLAS");
      GR_CUBLAS_CHECK(cublasSscal(ctx_device(ctx).cublas, static_cast<int>(m * n), &beta, dptr<float>(Y), 1));
    }
    return Y;
  }
  gemm_row_major(ctx_device(ctx).cublas, ta, tb, m, n, k, alpha, dptr<float>(A), dptr<float>(B), has_c ? beta : 0.f,
                 dptr<float>(Y));
  return Y;
}

void gemm_op(KernelContext& ctx) { gemm_product(ctx); }

void fused_gemm_op(KernelContext& ctx) {
  check_fused_activation(ctx.node());
  Tensor& Y = gemm_product(ctx);
  bias_relu_in_place(ctx, dptr<float>(Y), Y.numel(), nullptr, 1, 1);
}

// FusedMatMul(A [..., M, K], B [K, N], C [N]) = Relu(A B + C): one cuBLAS GEMM over A's rows, then the
// epilogue adds the bias and applies the Relu in one pass.
void fused_matmul_op(KernelContext& ctx) {
  check_fused_activation(ctx.node());
  const Tensor& A = ctx.input(0);
  const Tensor& B = ctx.input(1);
  GR_CHECK(A.dtype() == DType::F32 && B.dtype() == DType::F32, "FusedMatMul on CUDA takes f32");
  GR_CHECK(A.rank() >= 2 && B.rank() == 2 && B.dim(0) == A.dim(-1),
           "FusedMatMul: A " << shape_str(A.shape()) << " and B " << shape_str(B.shape()) << " must be [..., M, K] and [K, N]");
  const int64_t k = A.dim(-1), n = B.dim(1), rows = shape_numel(Shape(A.shape().begin(), A.shape().end() - 1));
  const float* bias = nullptr;
  if (ctx.has_input(2)) {
    const Tensor& C = ctx.input(2);
    GR_CHECK(C.dtype() == DType::F32 && C.rank() >= 1 && C.numel() == n && C.dim(-1) == n,
             "FusedMatMul: bias " << shape_str(C.shape()) << " must hold " << n << " f32 values along its last axis");
    bias = dptr<float>(C);
  }
  Shape ys = A.shape();
  ys.back() = n;
  Tensor& Y = ctx.output(0, ys, DType::F32);
  if (Y.numel() == 0) return;
  if (k == 0) GR_CUDA_CHECK(cudaMemsetAsync(Y.raw(), 0, Y.nbytes(), stream_of(ctx)));
  else gemm_row_major(ctx_device(ctx).cublas, false, false, rows, n, k, 1.f, dptr<float>(A), dptr<float>(B), 0.f, dptr<float>(Y));
  bias_relu_in_place(ctx, dptr<float>(Y), Y.numel(), bias, 1, n);
}

void matmul_op(KernelContext& ctx) {
  const Tensor& A = ctx.input(0);
  const Tensor& B = ctx.input(1);
  GR_CHECK(A.dtype() == DType::F32 && B.dtype() == DType::F32, "MatMul on CUDA takes f32");
  GR_CHECK(A.rank() >= 1 && B.rank() >= 1, "MatMul: inputs must have rank >= 1");
  // numpy semantics: 1-D operands become a row (A) or a column (B), removed again from the result.
  Shape a = A.shape(), b = B.shape();
  bool a_vec = a.size() == 1, b_vec = b.size() == 1;
  if (a_vec) a.insert(a.begin(), 1);
  if (b_vec) b.push_back(1);
  int64_t m = a[a.size() - 2], k = a.back(), n = b.back();
  GR_CHECK(b[b.size() - 2] == k, "MatMul: inner dimensions differ: " << shape_str(A.shape()) << " x " << shape_str(B.shape()));
  Shape ba(a.begin(), a.end() - 2), bb(b.begin(), b.end() - 2);
  Shape batch = broadcast_shapes({ba, bb});
  Shape out = batch;
  if (!a_vec) out.push_back(m);
  if (!b_vec) out.push_back(n);
  Tensor& Y = ctx.output(0, out, DType::F32);
  int64_t nbatch = shape_numel(batch);
  if (Y.numel() == 0) return;
  cublasHandle_t h = ctx_device(ctx).cublas;
  if (k == 0) {
    GR_CUDA_CHECK(cudaMemsetAsync(Y.raw(), 0, Y.nbytes(), stream_of(ctx)));
    return;
  }
  // Batch offsets of A and B for each output batch index (broadcast dims have stride 0).
  IndexMap map = make_index_map(batch, {ba, bb});
  auto offsets = [&](int64_t i, int64_t* oa, int64_t* ob) {
    int64_t off[3];
    map_offsets(map, i, 2, off);
    *oa = off[0] * m * k;
    *ob = off[1] * k * n;
  };
  int64_t na = shape_numel(ba), nb = shape_numel(bb);
  bool a_full = na == nbatch && ba.size() == batch.size(), b_full = nb == nbatch && bb.size() == batch.size();
  if (nbatch == 1) {
    gemm_row_major(h, false, false, m, n, k, 1.f, dptr<float>(A), dptr<float>(B), 0.f, dptr<float>(Y));
  } else if ((a_full || na == 1) && (b_full || nb == 1) && nbatch <= INT32_MAX) {
    // Each side either has the whole batch laid out densely or one matrix shared by all.
    gemm_row_major(h, false, false, m, n, k, 1.f, dptr<float>(A), dptr<float>(B), 0.f, dptr<float>(Y),
                   static_cast<int>(nbatch), na == 1 ? 0 : m * k, nb == 1 ? 0 : k * n, m * n);
  } else {
    for (int64_t i = 0; i < nbatch; ++i) {
      int64_t oa, ob;
      offsets(i, &oa, &ob);
      gemm_row_major(h, false, false, m, n, k, 1.f, dptr<float>(A) + oa, dptr<float>(B) + ob, 0.f, dptr<float>(Y) + i * m * n);
    }
  }
}

}  // namespace

GR_REGISTER_OPS(linalg) {
  ops.op("Gemm").cuda(locked<gemm_op>);
  ops.op("MatMul").cuda(locked<matmul_op>);
  ops.op(kGraphrunDomain, "FusedGemm").cuda(locked<fused_gemm_op>);
  ops.op(kGraphrunDomain, "FusedMatMul").cuda(locked<fused_matmul_op>);
}

}  // namespace graphrun::runtime::cuda

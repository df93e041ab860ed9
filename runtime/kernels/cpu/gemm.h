// The GEMM the CPU conv and linear-algebra kernels call (column-major, BLAS conventions): float on
// oneDNN's GEMM, which measured fastest at the shapes graphrun runs (bench/bench_gemm,
// docs/kernels.md), or on Eigen's in a build with GRAPHRUN_ONEDNN=OFF; double on Eigen's.
#pragma once
#include <algorithm>
#include <cstdint>

namespace graphrun {
struct Node;
}

namespace graphrun::runtime::cpu {

// C[m, n] = alpha * op(A) op(B) + beta * C, column-major with leading dimensions lda, ldb, ldc;
// op(X) is X, or its transpose where trans_X. beta == 0 overwrites C (NaNs in it do not survive).
// `threads` > 1 splits C's columns over that many OpenMP threads (when the product is big enough
// and the caller is not already inside a parallel region); every element is reduced over k on one
// thread in an order fixed by the shape, so the same inputs give the same bits on every call.
void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc, int threads = 1);
void dgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t lda,
           const double* b, int64_t ldb, double beta, double* c, int64_t ldc, int threads = 1);

// oneDNN compiles its GEMM kernels for this CPU on the first call (about 45 ms of one core, most of it
// for the first transposition case): calling this once, on a thread of its own while a command loads
// its model and data, keeps that out of the first training step. Safe to run alongside sgemm calls.
void warm_up_sgemm();

// "oneDNN" or "Eigen": which library this build's sgemm runs on (their roundings differ: tests that
// pin trained bits pin one value per library).
const char* sgemm_library();
// The instruction-set class sgemm runs on: "avx2", "avx512", "avx512+amx" (also "avx", "sse41",
// "sse2", "avx512_mic"). oneDNN picks its kernels when it runs, by the CPU (dnnl_get_effective_cpu_isa);
// Eigen's are fixed when compiled, so for Eigen this is compiled_isa(). Rounding follows the kernels.
const char* sgemm_isa();
// The class the CPU kernels were compiled for (GRAPHRUN_NATIVE: the build machine's, -march=native):
// the im2col rows, the direct convolution and every a * b + c the compiler fuses into an FMA.
const char* compiled_isa();

inline void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                 const float* b, int64_t ldb, float beta, float* c, int64_t ldc, int threads = 1) {
  sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, threads);
}
inline void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t lda,
                 const double* b, int64_t ldb, double beta, double* c, int64_t ldc, int threads = 1) {
  dgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, threads);
}

// Runs one(i, threads) for each of `count` independent products of `macs` multiply-adds each: small ones
// (under 2^21, where a second thread costs more than it saves) one per thread, larger ones in turn on all
// `threads`. Either way a product's bits are the same (a GEMM splits C's columns, never the reduction).
// MatMul's batches and Einsum's share it.
template <class F>
void for_each_product(int64_t count, int64_t macs, int threads, F&& one) {
  const int t = static_cast<int>(std::min<int64_t>(threads, count));
  if (t > 1 && macs < (int64_t{1} << 21)) {
#pragma omp parallel for num_threads(t) schedule(dynamic, 16)
    for (int64_t i = 0; i < count; ++i) one(i, 1);
  } else {
    for (int64_t i = 0; i < count; ++i) one(i, threads);
  }
}

// The fused producers of pass fuse_relu_epilogue (FusedConv, FusedGemm, FusedMatMul) apply their
// activation attribute to each output block as they finish it. Only "Relu" exists: anything else is
// an Error naming the node.
void check_fused_activation(const Node& n);
// Relu as the Relu kernel computes it (v < 0 ? 0 : v: NaN and -0 pass through), so a fused result is
// bit for bit the unfused one.
template <class T>
inline T relu_of(T v) {
  return v < T(0) ? T(0) : v;
}
template <class T>
inline void relu_in_place(T* y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] = relu_of(y[i]);
}

}  // namespace graphrun::runtime::cpu

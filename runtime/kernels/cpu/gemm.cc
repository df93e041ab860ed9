// GEMM for the CPU kernels: float on oneDNN's dnnl_sgemm (up to 97% of the FMA peak at the conv and
// fully connected shapes of LeNet, SimpleCNN and ResNet-18, where Eigen reaches 50-65%; docs/kernels.md),
// double on Eigen. Threads split C's columns, never the reduction, so results do not depend on timing.
// False positives inside Eigen's AVX-512 code (GCC 12: `__m256d __Y = __Y;` in its intrinsics).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include "runtime/kernels/cpu/gemm.h"

#ifdef GRAPHRUN_ONEDNN
#include <oneapi/dnnl/dnnl.h>
#endif
#include <omp.h>

#include <Eigen/Core>
#include <algorithm>

#include "graph/ir.h"

namespace graphrun::runtime::cpu {
namespace {

// Below this many multiply-adds a second thread costs more than it saves.
constexpr int64_t kParallelMacs = int64_t{1} << 21;

template <class T>
void eigen_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda, const T* b,
                int64_t ldb, T beta, T* c, int64_t ldc) {
  using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;
  using S = Eigen::OuterStride<>;
  Eigen::Map<const Mat, 0, S> A(a, ta ? k : m, ta ? m : k, S(lda)), B(b, tb ? n : k, tb ? k : n, S(ldb));
  Eigen::Map<Mat, 0, S> C(c, m, n, S(ldc));
  if (beta == T(0)) C.setZero();
  else if (beta != T(1)) C *= beta;
  if (k == 0 || alpha == T(0)) return;
  if (!ta && !tb) C.noalias() += alpha * (A * B);
  else if (ta && !tb) C.noalias() += alpha * (A.transpose() * B);
  else if (!ta) C.noalias() += alpha * (A * B.transpose());
  else C.noalias() += alpha * (A.transpose() * B.transpose());
}

// Runs f with OpenMP's thread count for new parallel regions at 1: outside a parallel region
// oneDNN and Eigen would start omp_get_max_threads() threads of their own (inside one they stay on
// the caller), and the threads here are split_columns' to deal.
template <class F>
void on_this_thread(F&& f) {
  const bool outer = !omp_in_parallel();
  const int before = outer ? omp_get_max_threads() : 1;
  if (before != 1) omp_set_num_threads(1);
  f();
  if (before != 1) omp_set_num_threads(before);
}

void sgemm_1(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
             const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
#ifdef GRAPHRUN_ONEDNN
  // oneDNN's GEMM is row-major: column-major C = op(A) op(B) is row-major C^T = op(B)^T op(A)^T.
  dnnl_status_t st = dnnl_success;
  on_this_thread([&] { st = dnnl_sgemm(tb ? 'T' : 'N', ta ? 'T' : 'N', n, m, k, alpha, b, ldb, a, lda, beta, c, ldc); });
  GR_CHECK(st == dnnl_success, "oneDNN sgemm failed (status " << static_cast<int>(st) << ") for m=" << m
                                                               << " n=" << n << " k=" << k);
#else  // built with GRAPHRUN_ONEDNN=OFF
  on_this_thread([&] { eigen_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc); });
#endif
}

// Splits C's n columns into `threads` blocks of whole columns and runs f(j0, nj) on each.
template <class F>
void split_columns(int64_t m, int64_t n, int64_t k, int threads, F&& f) {
  const int nt = static_cast<int>(std::min<int64_t>(threads, n));
  if (nt <= 1 || omp_in_parallel() || m * n * k < kParallelMacs) {
    f(0, n);
    return;
  }
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int t = 0; t < nt; ++t) {
    const int64_t j0 = n * t / nt, j1 = n * (t + 1) / nt;
    f(j0, j1 - j0);
  }
}

}  // namespace

void sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc, int threads) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0 || alpha == 0.f) {  // C = beta * C, which BLAS conventions leave to the caller here
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < m; ++i) c[j * ldc + i] = beta == 0.f ? 0.f : beta * c[j * ldc + i];
    return;
  }
  split_columns(m, n, k, threads, [&](int64_t j0, int64_t nj) {
    const float* bj = tb ? b + j0 : b + j0 * ldb;  // column j of op(B): B's column j, or B's row j
    sgemm_1(ta, tb, m, nj, k, alpha, a, lda, bj, ldb, beta, c + j0 * ldc, ldc);
  });
}

void dgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t lda,
           const double* b, int64_t ldb, double beta, double* c, int64_t ldc, int threads) {
  if (m <= 0 || n <= 0) return;
  split_columns(m, n, k, threads, [&](int64_t j0, int64_t nj) {
    const double* bj = tb ? b + j0 : b + j0 * ldb;
    on_this_thread([&] { eigen_gemm(ta, tb, m, nj, k, alpha, a, lda, bj, ldb, beta, c + j0 * ldc, ldc); });
  });
}

void check_fused_activation(const Node& n) {
  const std::string a = n.attr_s("activation", "");
  GR_CHECK(a == "Relu", n.describe() << ": activation '" << a << "' is not supported (Relu)");
}

void warm_up_sgemm() {
  // Each transposition case on a small product: the first call JIT-compiles the kernels, a case first
  // met later adds a few ms of its own.
  float a[64 * 64] = {}, b[64 * 64] = {}, c[64 * 64] = {};
  for (int t = 0; t < 4; ++t) sgemm_1(t & 1, t & 2, 64, 64, 64, 1.f, a, 64, b, 64, 0.f, c, 64);
}

const char* sgemm_library() {
#ifdef GRAPHRUN_ONEDNN
  return "oneDNN";
#else
  return "Eigen";
#endif
}

const char* compiled_isa() {
#if defined(__AVX512F__)
  return "avx512";
#elif defined(__AVX2__) && defined(__FMA__)
  return "avx2";
#elif defined(__AVX__)
  return "avx";
#else
  return "sse2";
#endif
}

const char* sgemm_isa() {
#ifdef GRAPHRUN_ONEDNN
  // oneDNN's ISA values are bit supersets of the ones below them.
  const unsigned isa = dnnl_get_effective_cpu_isa();
  const auto has = [isa](dnnl_cpu_isa_t bits) { return (isa & bits) == static_cast<unsigned>(bits); };
  if (has(dnnl_cpu_isa_avx512_core_amx)) return "avx512+amx";
  if (has(dnnl_cpu_isa_avx512_core)) return "avx512";
  if (has(dnnl_cpu_isa_avx512_mic)) return "avx512_mic";
  if (has(dnnl_cpu_isa_avx2)) return "avx2";
  if (has(dnnl_cpu_isa_avx)) return "avx";
  return "sse41";
#else
  return compiled_isa();
#endif
}

}  // namespace graphrun::runtime::cpu

// The CPU kernels' GEMM (runtime/kernels/cpu/gemm.h, oneDNN for float, Eigen for double) against a
// float64 reference: every transpose pair, odd sizes, padded leading dimensions, alpha/beta, k = 0,
// NaNs in C under beta = 0, split columns over threads; and the same bits on every repeated call.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "runtime/kernels/cpu/gemm.h"

namespace graphrun::testing {
namespace {

struct Problem {
  bool ta, tb;
  int64_t m, n, k, lda, ldb, ldc;
  double alpha, beta;
};

std::vector<double> random_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> d(-1, 1);
  std::vector<double> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// Column-major C = alpha op(A) op(B) + beta C, in double with the terms in plain order.
std::vector<double> reference(const Problem& p, const std::vector<double>& a, const std::vector<double>& b,
                              std::vector<double> c) {
  for (int64_t j = 0; j < p.n; ++j)
    for (int64_t i = 0; i < p.m; ++i) {
      double s = 0;
      for (int64_t l = 0; l < p.k; ++l)
        s += (p.ta ? a[i * p.lda + l] : a[l * p.lda + i]) * (p.tb ? b[l * p.ldb + j] : b[j * p.ldb + l]);
      double& cij = c[j * p.ldc + i];
      cij = p.alpha * s + (p.beta == 0 ? 0 : p.beta * cij);
    }
  return c;
}

Problem problem(bool ta, bool tb, int64_t m, int64_t n, int64_t k, int64_t pad, double alpha, double beta) {
  return {ta, tb, m, n, k, (ta ? k : m) + pad, (tb ? n : k) + pad, m + pad, alpha, beta};
}

template <class T>
void check(const Problem& p, int threads, double tol) {
  const size_t na = p.lda * (p.ta ? p.m : p.k), nb = p.ldb * (p.tb ? p.k : p.n), nc = p.ldc * p.n;
  const std::vector<double> a = random_values(na, 1), b = random_values(nb, 2), c0 = random_values(nc, 3);
  std::vector<T> af(a.begin(), a.end()), bf(b.begin(), b.end()), cf(c0.begin(), c0.end());
  // Under beta = 0, C is output only: what it held (NaN here) must not leak into the result.
  if (p.beta == 0) std::fill(cf.begin(), cf.end(), std::numeric_limits<T>::quiet_NaN());
  std::vector<double> want = reference(p, a, b, c0);
  runtime::cpu::gemm(p.ta, p.tb, p.m, p.n, p.k, static_cast<T>(p.alpha), af.data(), p.lda, bf.data(), p.ldb,
                     static_cast<T>(p.beta), cf.data(), p.ldc, threads);
  double worst = 0, scale = 1e-30;
  for (int64_t j = 0; j < p.n; ++j)
    for (int64_t i = 0; i < p.m; ++i) {
      const double w = want[j * p.ldc + i], g = cf[j * p.ldc + i];
      ASSERT_FALSE(std::isnan(g)) << "C(" << i << "," << j << ")";
      worst = std::max(worst, std::abs(g - w));
      scale = std::max(scale, std::abs(w));
    }
  // Rows of C beyond m (padding of ldc) are not C's: they keep what they held.
  for (int64_t j = 0; j < p.n; ++j)
    for (int64_t i = p.m; i < p.ldc; ++i)
      if (p.beta != 0) {
        ASSERT_EQ(static_cast<double>(cf[j * p.ldc + i]), static_cast<double>(static_cast<T>(c0[j * p.ldc + i])));
      }
  EXPECT_LT(worst / scale, tol) << "ta " << p.ta << " tb " << p.tb << " m " << p.m << " n " << p.n << " k " << p.k
                                << " alpha " << p.alpha << " beta " << p.beta << " threads " << threads;
}

TEST(Gemm, MatchesFloat64ReferenceOnOddShapes) {
  const std::vector<std::array<int64_t, 3>> sizes = {{1, 1, 1},   {3, 5, 7},    {17, 9, 33},  {64, 50, 500},
                                                     {81, 20, 9}, {130, 3, 257}, {9, 128, 2}, {1, 40, 13}};
  for (const auto& [m, n, k] : sizes)
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb)
        for (int64_t pad : {0, 3})
          for (auto [alpha, beta] : {std::pair<double, double>{1, 0}, {1, 1}, {-0.5, 0.25}}) {
            const Problem p = problem(ta, tb, m, n, k, pad, alpha, beta);
            check<float>(p, 1, 1e-5);
            check<double>(p, 1, 1e-12);
          }
}

TEST(Gemm, ThreadsSplitColumnsAndAgreeWithTheReference) {
  // Large enough (m n k >= 2^21) for the column split; n not a multiple of the thread count.
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      const Problem p = problem(ta, tb, 131, 129, 127, 1, 1, 1);
      check<float>(p, 2, 1e-5);
      check<double>(p, 2, 1e-12);
      check<float>(p, 3, 1e-5);
    }
}

TEST(Gemm, EmptyReductionScalesC) {
  for (double beta : {0.0, 1.0, 2.0}) {
    check<float>(problem(false, false, 4, 3, 0, 2, 1, beta), 1, 1e-7);
    check<double>(problem(true, true, 4, 3, 0, 0, 1, beta), 1, 1e-15);
  }
}

// The trainer's bitwise checkpoint-resume and replica tests rely on this: at a fixed thread count,
// the same inputs give the same bits, call after call (and under other buffer alignments).
TEST(Gemm, RepeatedCallsGiveTheSameBits) {
  const Problem p = problem(false, true, 243, 500, 50, 0, 1, 0);
  const std::vector<double> a = random_values(p.lda * p.k, 4), b = random_values(p.ldb * p.k, 5);
  std::vector<float> af(a.begin(), a.end()), bf(b.begin(), b.end());
  for (int threads : {1, 2}) {
    std::vector<float> first;
    for (int rep = 0; rep < 3; ++rep) {
      // Shift the operands by rep floats: a GEMM must not pick its arithmetic by alignment.
      std::vector<float> as(rep + af.size()), bs(rep + bf.size()), c(rep + p.ldc * p.n);
      std::copy(af.begin(), af.end(), as.begin() + rep);
      std::copy(bf.begin(), bf.end(), bs.begin() + rep);
      runtime::cpu::sgemm(p.ta, p.tb, p.m, p.n, p.k, 1.f, as.data() + rep, p.lda, bs.data() + rep, p.ldb, 0.f,
                          c.data() + rep, p.ldc, threads);
      std::vector<float> got(c.begin() + rep, c.end());
      if (rep == 0) first = got;
      else EXPECT_EQ(0, std::memcmp(first.data(), got.data(), sizeof(float) * got.size())) << "threads " << threads;
    }
  }
}

}  // namespace
}  // namespace graphrun::testing

// Gemm and MatMul on the CPU against direct loops in double: transA/transB, alpha/beta, every C
// broadcast, 1-D operands, batched and broadcast batch axes, f32/f64/i64.
#include <gtest/gtest.h>

#include "tests/nn_test_util.h"

namespace graphrun::testing {
namespace {

// Y[i,j] = alpha * sum_k opA[i,k] opB[k,j] + beta * C broadcast.
Tensor ref_gemm(const Tensor& A, const Tensor& B, const Tensor& C, bool ta, bool tb, double alpha, double beta) {
  auto a = A.as_doubles(), b = B.as_doubles();
  const int64_t M = ta ? A.dim(1) : A.dim(0), K = ta ? A.dim(0) : A.dim(1), N = tb ? B.dim(0) : B.dim(1);
  Tensor Y(DType::F64, {M, N});
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k)
        s += (ta ? a[k * M + i] : a[i * K + k]) * (tb ? b[j * K + k] : b[k * N + j]);
      double c = 0;
      if (C.defined()) {
        auto cv = C.as_doubles();
        const int64_t cm = C.rank() == 2 ? C.dim(0) : 1, cn = C.rank() >= 1 ? C.dim(-1) : 1;
        c = cv[(cm == 1 ? 0 : i) * cn + (cn == 1 ? 0 : j)];
      }
      Y.data<double>()[i * N + j] = alpha * s + beta * c;
    }
  return Y;
}

class Linalg : public ::testing::TestWithParam<DType> {};

TEST_P(Linalg, GemmMatchesDirectLoops) {
  const DType dt = GetParam();
  const int64_t M = 5, K = 7, N = 6;
  int seed = 1;
  const std::vector<Shape> c_shapes = {{}, {N}, {1, N}, {M, 1}, {M, N}, {1, 1}};
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb)
      for (int ci = -1; ci < static_cast<int>(c_shapes.size()); ++ci) {
        Tensor a = as_dtype(random_tensor(ta ? Shape{K, M} : Shape{M, K}, seed++), dt);
        Tensor b = as_dtype(random_tensor(tb ? Shape{N, K} : Shape{K, N}, seed++), dt);
        Tensor c = ci < 0 ? Tensor() : as_dtype(random_tensor(c_shapes[ci], seed++), dt);
        const float alpha = 0.5f + ta, beta = ci == 2 ? 0.f : 1.5f;
        Attrs at{{"transA", int1(ta)}, {"transB", int1(tb)}, {"alpha", flt(alpha)}, {"beta", flt(beta)}};
        Tensor got = run_node("Gemm", {a, b, c}, at)[0];
        Tensor want = ref_gemm(a, b, c, ta, tb, alpha, beta);
        ASSERT_EQ(got.shape(), want.shape());
        EXPECT_LT(max_rel_diff(got, want), dt == DType::F64 ? 1e-12 : 1e-5)
            << "transA " << ta << " transB " << tb << " C " << (ci < 0 ? "none" : shape_str(c_shapes[ci]));
      }
}

// numpy matmul written out: broadcast batch axes, 1-D promotion and removal.
Tensor ref_matmul(const Tensor& A, const Tensor& B) {
  Shape as = A.shape(), bs = B.shape();
  if (as.size() == 1) as.insert(as.begin(), 1);
  if (bs.size() == 1) bs.push_back(1);
  const int64_t M = as[as.size() - 2], K = as.back(), N = bs.back();
  const size_t rank = std::max(as.size(), bs.size()) - 2;
  while (as.size() - 2 < rank) as.insert(as.begin(), 1);
  while (bs.size() - 2 < rank) bs.insert(bs.begin(), 1);
  Shape batch(rank);
  for (size_t j = 0; j < rank; ++j) batch[j] = std::max(as[j], bs[j]);
  Shape ys = batch;
  if (A.rank() > 1) ys.push_back(M);
  if (B.rank() > 1) ys.push_back(N);
  auto a = A.as_doubles(), b = B.as_doubles();
  Tensor Y(DType::F64, ys);
  const int64_t nb = shape_numel(batch);
  for (int64_t i = 0; i < nb; ++i) {
    int64_t rem = i, ia = 0, ib = 0, fa = 1, fb = 1;
    for (int j = static_cast<int>(rank) - 1; j >= 0; --j) {
      const int64_t idx = rem % batch[j];
      rem /= batch[j];
      ia += (as[j] == 1 ? 0 : idx) * fa;
      ib += (bs[j] == 1 ? 0 : idx) * fb;
      fa *= as[j];
      fb *= bs[j];
    }
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k) s += a[(ia * M + m) * K + k] * b[(ib * K + k) * N + n];
        Y.data<double>()[(i * M + m) * N + n] = s;
      }
  }
  return Y;
}

TEST_P(Linalg, MatMulMatchesNumpySemantics) {
  const DType dt = GetParam();
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{4}, {4}},          {{4}, {4, 3}},          {{3, 4}, {4}},       {{3, 4}, {4, 5}},
      {{2, 3, 4}, {4, 5}}, {{4}, {2, 4, 5}},       {{2, 3, 4}, {4}},    {{3, 4}, {2, 4, 5}},
      {{2, 1, 3, 4}, {3, 4, 5}}, {{2, 3, 4}, {2, 4, 5}}, {{1, 3, 4}, {6, 4, 2}}, {{3, 0}, {0, 2}},
  };
  int seed = 50;
  for (const auto& [sa, sb] : cases) {
    Tensor a = as_dtype(random_tensor(sa, seed++), dt), b = as_dtype(random_tensor(sb, seed++), dt);
    Tensor want = ref_matmul(a, b);
    for (int threads : {1, 2}) {
      Tensor got = run_node_ex("MatMul", {a, b}, {}, {true}, threads)[0];
      ASSERT_EQ(got.shape(), want.shape()) << shape_str(sa) << " x " << shape_str(sb);
      EXPECT_LT(max_rel_diff(got, want), dt == DType::F64 ? 1e-12 : 1e-5) << shape_str(sa) << " x " << shape_str(sb);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, Linalg, ::testing::Values(DType::F32, DType::F64),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(Linalg, IntegerMatMulAndLargeGemm) {
  Tensor a = random_int_tensor({2, 3, 4}, 1, -5, 5), b = random_int_tensor({4, 2}, 2, -5, 5);
  Tensor got = run_node("MatMul", {a, b})[0];
  EXPECT_EQ(got.dtype(), DType::I64);
  EXPECT_EQ(max_abs_diff(got, ref_matmul(a, b)), 0);
  // Large enough for Eigen's own threading; both thread counts agree with the reference.
  Tensor x = random_tensor({256, 800}, 3), w = random_tensor({128, 800}, 4), c = random_tensor({128}, 5);
  Tensor want = ref_gemm(x, w, c, false, true, 1, 1);
  for (int threads : {1, 2})
    EXPECT_LT(max_rel_diff(run_node_ex("Gemm", {x, w, c}, {{"transB", int1(1)}}, {true}, threads)[0], want), 1e-5);
}

TEST(Linalg, BadShapesGiveClearErrors) {
  auto expect_error = [](const std::string& op, const std::vector<Tensor>& in, const Attrs& at, const std::string& part) {
    try {
      run_node(op, in, at);
      ADD_FAILURE() << "expected an error containing '" << part << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  expect_error("Gemm", {random_tensor({3, 4}, 1), random_tensor({5, 2}, 2)}, {}, "inner dimensions");
  expect_error("Gemm", {random_tensor({3, 4}, 1), random_tensor({4, 2}, 2), random_tensor({3, 3}, 3)}, {}, "broadcast");
  expect_error("Gemm", {random_tensor({3, 4, 1}, 1), random_tensor({4, 2}, 2)}, {}, "2-D");
  expect_error("MatMul", {random_tensor({3, 4}, 1), random_tensor({5, 2}, 2)}, {}, "inner dimensions");
  expect_error("MatMul", {random_tensor({2, 3, 4}, 1), random_tensor({3, 4, 2}, 2)}, {}, "broadcast");
  expect_error("MatMul", {random_tensor({3, 4}, 1), to_f64(random_tensor({4, 2}, 2))}, {}, "f64");
}

}  // namespace
}  // namespace graphrun::testing

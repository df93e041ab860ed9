// Reduce-family CPU kernels against numpy (evaluated at test time): Reduce* with axes as attribute
// or input (opset 13 ReduceSum), keepdims, noop_with_empty_axes; ArgMax/ArgMin; Softmax and
// LogSoftmax under both axis conventions (2-D coercion before opset 13), and their stability.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "runtime/kernels/cpu/exp_f32.h"
#include "runtime/kernels/cpu/exp_f64.h"
#include "tests/math_test_util.h"

namespace graphrun {
namespace {

using mathtest::as_f64;
using mathtest::expect_close;
using mathtest::expect_error;
using mathtest::i64s;
using mathtest::make;
using mathtest::numpy_eval;
using mathtest::py_sin;
using mathtest::run_op;
using mathtest::sin_tensor;

struct ReduceCase {
  const char* op;
  const char* np;  // numpy of `x`, with AXES and KEEP substituted
  std::vector<int64_t> axes;
  bool keepdims;
};

std::string substitute(std::string s, const std::string& key, const std::string& v) {
  for (size_t p; (p = s.find(key)) != std::string::npos;) s.replace(p, key.size(), v);
  return s;
}

TEST(Reduce, ReduceOpsMatchNumpyForEveryAxisSetAndKeepdims) {
  const Shape shape = {3, 4, 5};
  Tensor x = sin_tensor(shape, 2);
  Tensor xpos = make(DType::F64, shape, [&] {
    auto v = x.as_doubles();
    for (double& e : v) e = std::fabs(e) + 0.1;
    return v;
  }());
  const std::string px = py_sin(shape, 2), ppos = "(np.abs(" + px + ") + 0.1)";
  const std::vector<std::pair<const char*, std::string>> ops = {
      {"ReduceSum", "np.sum(X, axis=AXES, keepdims=KEEP)"},
      {"ReduceMean", "np.mean(X, axis=AXES, keepdims=KEEP)"},
      {"ReduceMax", "np.max(X, axis=AXES, keepdims=KEEP)"},
      {"ReduceMin", "np.min(X, axis=AXES, keepdims=KEEP)"},
      {"ReduceProd", "np.prod(X, axis=AXES, keepdims=KEEP)"},
      {"ReduceSumSquare", "np.sum(X * X, axis=AXES, keepdims=KEEP)"},
      {"ReduceL1", "np.sum(np.abs(X), axis=AXES, keepdims=KEEP)"},
      {"ReduceL2", "np.sqrt(np.sum(X * X, axis=AXES, keepdims=KEEP))"},
      {"ReduceLogSum", "np.log(np.sum(P, axis=AXES, keepdims=KEEP))"},
      {"ReduceLogSumExp", "np.log(np.sum(np.exp(X), axis=AXES, keepdims=KEEP))"},
  };
  const std::vector<std::vector<int64_t>> axis_sets = {{}, {0}, {-1}, {1}, {0, 2}, {2, 0, 1}, {-2, -1}};
  std::vector<std::string> exprs;
  for (const auto& [op, np] : ops)
    for (const auto& axes : axis_sets)
      for (bool keep : {true, false}) {
        std::string ax = "None";
        if (!axes.empty()) {
          ax = "(";
          for (int64_t a : axes) ax += std::to_string(a) + ",";
          ax += ")";
        }
        std::string e = substitute(substitute(substitute(np, "AXES", ax), "KEEP", keep ? "True" : "False"), "X", px);
        exprs.push_back(substitute(e, "P", ppos));
      }
  auto want = numpy_eval(exprs, "reduce");
  ASSERT_EQ(want.size(), exprs.size());
  size_t k = 0;
  for (const auto& [op, np] : ops)
    for (const auto& axes : axis_sets)
      for (bool keep : {true, false}) {
        const Tensor& in = std::string(op) == "ReduceLogSum" ? xpos : x;
        std::map<std::string, Attribute> attrs = {{"keepdims", Attribute::Int(keep)}};
        std::string what = std::string(op) + " axes " + shape_str(axes) + (keep ? " keepdims" : "");
        // Opset 11: axes attribute for every op.
        if (!axes.empty()) attrs["axes"] = Attribute::Ints(axes);
        expect_close(run_op(op, {in}, attrs, 1, 11)[0], want[k], 1e-12, what + " (opset 11)");
        // f32 against the same numbers (accumulated in double, so only rounding of inputs and outputs).
        Tensor in32 = make(DType::F32, in.shape(), in.as_doubles());
        double scale = 1;
        for (double v : want[k].as_doubles()) scale = std::max(scale, std::fabs(v));
        expect_close(as_f64(run_op(op, {in32}, attrs, 1, 11)[0]), want[k], 1e-6 * scale, what + " f32");
        // Opset 13: ReduceSum takes axes as an input; the others keep the attribute.
        if (std::string(op) == "ReduceSum") {
          attrs.erase("axes");
          expect_close(run_op(op, {in, axes.empty() ? Tensor() : i64s(axes)}, attrs, 1, 13)[0], want[k], 1e-12,
                       what + " (opset 13)");
        } else {
          expect_close(run_op(op, {in}, attrs, 1, 13)[0], want[k], 1e-12, what + " (opset 13)");
        }
        ++k;
      }
}

TEST(Reduce, EmptyAxesNoopAndIntegerReductions) {
  Tensor x = sin_tensor({2, 3});
  // Opset 13 ReduceSum with no axes: all axes, unless noop_with_empty_axes.
  expect_close(run_op("ReduceSum", {x, Tensor()}, {{"noop_with_empty_axes", Attribute::Int(1)}}, 1, 13)[0], x, 0);
  expect_close(run_op("ReduceSum", {x, i64s({})}, {{"noop_with_empty_axes", Attribute::Int(1)}}, 1, 13)[0], x, 0);
  EXPECT_EQ(run_op("ReduceSum", {x, i64s({})}, {{"keepdims", Attribute::Int(0)}}, 1, 13)[0].shape(), Shape{});
  Tensor xi = make(DType::I64, {2, 3}, {1, 2, 3, 4, 5, 6});
  expect_close(run_op("ReduceSum", {xi, i64s({1})}, {{"keepdims", Attribute::Int(0)}}, 1, 13)[0], i64s({6, 15}), 0);
  expect_close(run_op("ReduceMax", {xi}, {{"axes", Attribute::Ints({0})}})[0], make(DType::I64, {1, 3}, {4, 5, 6}), 0);
  expect_close(run_op("ReduceProd", {make(DType::I32, {2, 2}, {1, 2, 3, 4})}, {{"keepdims", Attribute::Int(0)}})[0],
               make(DType::I32, {}, {24}), 0);
  expect_error([&] { run_op("ReduceSum", {x, i64s({2})}, {}, 1, 13); }, {"axis 2", "rank 2"});
  expect_error([&] { run_op("ReduceMean", {x}, {{"axes", Attribute::Ints({1, -1})}}); }, {"twice"});
  // LogSumExp does not overflow for large inputs.
  Tensor big = make(DType::F32, {2}, {1000, 1000});
  expect_close(run_op("ReduceLogSumExp", {big}, {{"keepdims", Attribute::Int(0)}})[0],
               make(DType::F32, {}, {1000 + std::log(2.0)}), 1e-3);
}

TEST(Reduce, ArgMaxArgMinWithKeepdimsAndLastIndex) {
  // Ties on purpose: select_last_index decides between them.
  Tensor x = make(DType::F32, {2, 3, 2}, {1, 5, 5, 2, 5, 2, 0, 0, -1, 3, 0, 3});
  std::string px = "np.array([1, 5, 5, 2, 5, 2, 0, 0, -1, 3, 0, 3], dtype=np.float64).reshape(2, 3, 2)";
  auto want = numpy_eval({"np.argmax(" + px + ", axis=1)", "np.argmin(" + px + ", axis=-1)[..., None]",
                          "2 - np.argmax(" + px + "[:, ::-1, :], axis=1)", "1 - np.argmin(" + px + "[:, :, ::-1], axis=2)",
                          "np.argmax(" + px + ", axis=0)[None]"},
                         "argmax");
  ASSERT_EQ(want.size(), 5u);
  auto attrs = [](int64_t axis, int64_t keep, int64_t last) {
    return std::map<std::string, Attribute>{{"axis", Attribute::Int(axis)}, {"keepdims", Attribute::Int(keep)},
                                            {"select_last_index", Attribute::Int(last)}};
  };
  expect_close(as_f64(run_op("ArgMax", {x}, attrs(1, 0, 0))[0]), want[0], 0, "argmax axis 1");
  expect_close(as_f64(run_op("ArgMin", {x}, attrs(-1, 1, 0))[0]), want[1], 0, "argmin axis -1 keepdims");
  expect_close(as_f64(run_op("ArgMax", {x}, attrs(1, 0, 1))[0]), want[2], 0, "argmax last");
  expect_close(as_f64(run_op("ArgMin", {x}, attrs(2, 0, 1))[0]), want[3], 0, "argmin last");
  Tensor d = run_op("ArgMax", {x})[0];  // axis 0, keepdims 1 by default
  EXPECT_EQ(d.dtype(), DType::I64);
  expect_close(as_f64(d), want[4], 0, "argmax defaults");
}

TEST(Reduce, CumSumTopKMatchNumpy) {
  Tensor x = sin_tensor({2, 3, 4}, 3);
  std::string px = py_sin({2, 3, 4}, 3);
  auto want = numpy_eval({"np.cumsum(" + px + ", axis=1)", "np.flip(np.cumsum(np.flip(" + px + ", 1), axis=1), 1) - " + px,
                          "-np.sort(-" + px + ", axis=1)[:, :2]", "np.argsort(-" + px + ", axis=1, kind='stable')[:, :2]",
                          "np.sort(" + px + ", axis=-1)[..., :3]"},
                         "cumsum");
  ASSERT_EQ(want.size(), 5u);
  expect_close(run_op("CumSum", {x, make(DType::I64, {}, {1})})[0], want[0], 1e-12, "CumSum");
  expect_close(run_op("CumSum", {x, make(DType::I32, {}, {-2})}, {{"exclusive", Attribute::Int(1)}, {"reverse", Attribute::Int(1)}})[0],
               want[1], 1e-12, "CumSum exclusive reverse");
  auto top = run_op("TopK", {x, i64s({2})}, {{"axis", Attribute::Int(1)}}, 2);
  expect_close(top[0], want[2], 0, "TopK values");
  expect_close(as_f64(top[1]), want[3], 0, "TopK indices");
  expect_close(run_op("TopK", {x, i64s({3})}, {{"largest", Attribute::Int(0)}}, 2)[0], want[4], 0, "TopK smallest");
  // Ties: the lower index first.
  auto tie = run_op("TopK", {make(DType::F32, {4}, {1, 3, 3, 2}), i64s({2})}, {}, 2);
  expect_close(tie[1], i64s({1, 2}), 0, "TopK ties");
  expect_error([&] { run_op("TopK", {x, i64s({5})}, {}, 2); }, {"k = 5"});
}

// NaN is the largest value, as in torch.topk (torch.tensor([1, nan, 3, 3, nan]).topk(3) gives indices 1, 4, 2;
// smallest first, it comes last) and numpy's argmax (Hardmax marks the first NaN). Without an order for NaN
// the sort's comparison was no strict weak order, and where NaN went depended on the sort.
TEST(Reduce, TopKAndHardmaxTakeNaNAsTheLargest) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (DType dt : {DType::F32, DType::F64}) {
    const Tensor x = make(dt, {5}, {1, nan, 3, 3, nan});
    auto big = run_op("TopK", {x, i64s({3})}, {}, 2);
    expect_close(big[1], i64s({1, 4, 2}), 0, "TopK largest indices");
    EXPECT_TRUE(std::isnan(big[0].as_doubles()[0]) && std::isnan(big[0].as_doubles()[1]));
    EXPECT_EQ(big[0].as_doubles()[2], 3);
    auto small = run_op("TopK", {x, i64s({4})}, {{"largest", Attribute::Int(0)}}, 2);
    expect_close(small[1], i64s({0, 2, 3, 1}), 0, "TopK smallest indices");
    expect_close(as_f64(run_op("Hardmax", {x}, {}, 1, 13)[0]), make(DType::F64, {5}, {0, 1, 0, 0, 0}), 0, "Hardmax NaN");
  }
  // Hardmax: the first of equal largest values; before opset 13 over the flattened axes from `axis`.
  const Tensor t = make(DType::F32, {2, 2, 2}, {1, 5, 5, 2, 0, 0, 0, 0});
  expect_close(as_f64(run_op("Hardmax", {t}, {}, 1, 13)[0]), make(DType::F64, {2, 2, 2}, {0, 1, 1, 0, 1, 0, 1, 0}), 0,
               "Hardmax opset 13");
  expect_close(as_f64(run_op("Hardmax", {t}, {}, 1, 11)[0]), make(DType::F64, {2, 2, 2}, {0, 1, 0, 0, 1, 0, 0, 0}), 0,
               "Hardmax opset 11");
}

TEST(Reduce, SoftmaxAndLogSoftmaxInBothAxisConventions) {
  const Shape shape = {2, 3, 4};
  Tensor x = sin_tensor(shape, 3);
  std::string px = py_sin(shape, 3);
  auto sm = [&](const std::string& v, const std::string& axis) {
    return "np.exp(" + v + " - np.max(" + v + ", axis=" + axis + ", keepdims=True)) / np.sum(np.exp(" + v +
           " - np.max(" + v + ", axis=" + axis + ", keepdims=True)), axis=" + axis + ", keepdims=True)";
  };
  // Opset < 13: coerce to 2-D at axis (default 1); opset 13: along axis (default -1).
  std::string flat1 = px + ".reshape(2, 12)", flat0 = px + ".reshape(1, 24)", flat2 = px + ".reshape(6, 4)";
  auto want = numpy_eval({"(" + sm(flat1, "1") + ").reshape(2, 3, 4)", "(" + sm(flat0, "1") + ").reshape(2, 3, 4)",
                          "(" + sm(flat2, "1") + ").reshape(2, 3, 4)", sm(px, "-1"), sm(px, "1"), sm(px, "0")},
                         "softmax");
  ASSERT_EQ(want.size(), 6u);
  auto ax = [](int64_t a) { return std::map<std::string, Attribute>{{"axis", Attribute::Int(a)}}; };
  auto check = [&](const std::map<std::string, Attribute>& attrs, int64_t opset, const Tensor& w, const std::string& what) {
    for (DType dt : {DType::F64, DType::F32}) {
      Tensor in = make(dt, shape, x.as_doubles());
      double tol = dt == DType::F64 ? 1e-14 : 1e-6;
      expect_close(as_f64(run_op("Softmax", {in}, attrs, 1, opset)[0]), w, tol, "Softmax " + what);
      std::vector<double> lw = w.as_doubles();
      for (double& v : lw) v = std::log(v);
      expect_close(as_f64(run_op("LogSoftmax", {in}, attrs, 1, opset)[0]), make(DType::F64, shape, lw), tol * 10,
                   "LogSoftmax " + what);
    }
  };
  check({}, 11, want[0], "opset 11 default axis");
  check(ax(0), 11, want[1], "opset 11 axis 0");
  check(ax(-1), 11, want[2], "opset 11 axis -1");
  check({}, 13, want[3], "opset 13 default axis");
  check(ax(1), 13, want[4], "opset 13 axis 1");
  check(ax(-3), 13, want[5], "opset 13 axis -3");
  // Stable for large logits; parallel path gives identical numbers.
  Tensor big = make(DType::F32, {1, 3}, {1000, 1001, 1002});
  Tensor lsm = run_op("LogSoftmax", {big})[0];
  EXPECT_NEAR(lsm.as_doubles()[2], -std::log(1 + std::exp(-1.0) + std::exp(-2.0)), 1e-5);
  Tensor wide = make(DType::F32, {256, 160}, sin_tensor({256, 160}, 5).as_doubles());
  EXPECT_EQ(testing::max_abs_diff(run_op("Softmax", {wide}, {}, 1, 17, "", 2)[0], run_op("Softmax", {wide})[0]), 0.0);
  expect_error([&] { run_op("Softmax", {x}, ax(3)); }, {"axis 3"});
}

// Softmax in f32 takes its exponentials from exp_f32 (vectorized): within 2 ulp of the exact value over
// the whole finite range, exact at 0, and the edges as the library's (NaN, inf, 0 for -inf); a masked
// attention row (-inf scores) still gives 0 there and sums to 1.
TEST(Reduce, VectorizedExpIsWithinTwoUlpAndSoftmaxKeepsItsMasks) {
  double worst = 0;
  float at = 0;
  for (int64_t k = -87 * 4096; k <= 88 * 4096; ++k) {
    const float x = static_cast<float>(k) / 4096.f;
    const double exact = std::exp(static_cast<double>(x));
    const float got = runtime::cpu::exp_f32(x);
    const double ulp = std::nextafter(static_cast<float>(exact), HUGE_VALF) - static_cast<float>(exact);
    const double err = std::abs(got - exact) / ulp;
    if (err > worst) worst = err, at = x;
  }
  EXPECT_LE(worst, 2.0) << "at x = " << at;
  EXPECT_EQ(runtime::cpu::exp_f32(0.f), 1.f);
  EXPECT_TRUE(std::isnan(runtime::cpu::exp_f32(std::nanf(""))));
  EXPECT_EQ(runtime::cpu::exp_f32(89.f), HUGE_VALF);
  EXPECT_EQ(runtime::cpu::exp_f32(-HUGE_VALF), 0.f);
  EXPECT_EQ(runtime::cpu::exp_f32(-100.f), 0.f);
  const float inf = -std::numeric_limits<float>::infinity();
  Tensor scores = make(DType::F32, {2, 4}, {0.5, inf, -1, 2, inf, 3, inf, inf});
  const std::vector<double> p = run_op("Softmax", {scores})[0].as_doubles();
  const double s0 = std::exp(0.5) + std::exp(-1.0) + std::exp(2.0);
  const std::vector<double> want = {std::exp(0.5) / s0, 0, std::exp(-1.0) / s0, std::exp(2.0) / s0, 0, 1, 0, 0};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(p[i], want[i], 1e-6) << i;
}

// Softmax along a contiguous axis takes its maximum and sum in 16 chains (reduce.cc line_max, lane_sum): the
// bits are those of that order, written out here in plain scalar code, whatever the processor's vectors (a
// compiler that reassociated differently, or a sum left in one chain, fails), and within float rounding of
// the double softmax; a NaN makes its line NaN, a line of -inf masks keeps its finite entries.
TEST(Reduce, ContiguousSoftmaxSumsInSixteenFixedChains) {
  for (int64_t n : {1, 15, 16, 17, 64, 100, 515}) {
    SCOPED_TRACE("n = " + std::to_string(n));
    Tensor x = testing::random_tensor({3, n}, 90 + n, -8.f, 8.f);
    const Tensor y = run_op("Softmax", {x})[0];
    for (int64_t r = 0; r < 3; ++r) {
      const float* xr = x.data<float>() + r * n;
      float m[16], s[16] = {}, mx = -HUGE_VALF, sum = 0;
      for (float& v : m) v = -HUGE_VALF;
      int64_t j = 0;
      for (; j + 16 <= n; j += 16)
        for (int l = 0; l < 16; ++l) m[l] = std::max(m[l], xr[j + l]);
      for (float v : m) mx = std::max(mx, v);
      for (; j < n; ++j) mx = std::max(mx, xr[j]);
      std::vector<float> e(n);
      double exact_sum = 0;
      for (int64_t k = 0; k < n; ++k) e[k] = runtime::cpu::exp_f32(xr[k] - mx), exact_sum += std::exp(double(xr[k]));
      for (j = 0; j + 16 <= n; j += 16)
        for (int l = 0; l < 16; ++l) s[l] += e[j + l];
      for (float v : s) sum += v;
      for (; j < n; ++j) sum += e[j];
      for (int64_t k = 0; k < n; ++k) {
        const float got = y.data<float>()[r * n + k];
        ASSERT_EQ(got, e[k] * (1.f / sum)) << "row " << r << " element " << k;
        ASSERT_NEAR(got, std::exp(double(xr[k])) / exact_sum, 1e-6) << "row " << r << " element " << k;
      }
    }
  }
  Tensor x = testing::random_tensor({2, 40}, 97);
  x.data<float>()[37] = std::nanf("");
  const Tensor y = run_op("Softmax", {x})[0];
  for (int64_t k = 0; k < 40; ++k) {
    EXPECT_TRUE(std::isnan(y.data<float>()[k])) << k;
    EXPECT_FALSE(std::isnan(y.data<float>()[40 + k])) << k;
  }
}

// ReduceSum and ReduceMean along the innermost axis add each row in lane_sum's 16 chains (in double), then
// onto what earlier rows of the same output left: f64 input shows the order bit for bit (a single chain
// fails), and reducing axes (0, 2) of [2, 3, 40] adds the two rows of each output in order.
TEST(Reduce, InnermostSumsAddEachRowInSixteenFixedChains) {
  auto lanes = [](const double* x, int64_t n) {
    double s[16] = {}, sum = 0;
    int64_t j = 0;
    for (; j + 16 <= n; j += 16)
      for (int l = 0; l < 16; ++l) s[l] += x[j + l];
    for (double v : s) sum += v;
    for (; j < n; ++j) sum += x[j];
    return sum;
  };
  for (int64_t n : {7, 16, 100, 515}) {
    Tensor x(DType::F64, {3, n});
    const Tensor r = testing::random_tensor({3, n}, 120 + n, -1e3f, 1e3f);
    for (int64_t i = 0; i < 3 * n; ++i) x.data<double>()[i] = r.data<float>()[i] * (1.0 + 1e-9 * i);
    const Tensor sum = run_op("ReduceSum", {x, Tensor::from_vector<int64_t>({1}, {1})}, {{"keepdims", Attribute::Int(0)}})[0];
    const Tensor mean = run_op("ReduceMean", {x}, {{"axes", Attribute::Ints({1})}, {"keepdims", Attribute::Int(0)}})[0];
    for (int64_t row = 0; row < 3; ++row) {
      const double want = lanes(x.data<double>() + row * n, n);
      EXPECT_EQ(sum.data<double>()[row], want) << "n " << n << " row " << row;
      EXPECT_EQ(mean.data<double>()[row], want / static_cast<double>(n)) << "n " << n << " row " << row;
    }
  }
  Tensor x(DType::F64, {2, 3, 40});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<double>()[i] = std::sin(0.37 * i) * 1e3;
  const Tensor y = run_op("ReduceSum", {x, Tensor::from_vector<int64_t>({2}, {0, 2})}, {{"keepdims", Attribute::Int(0)}})[0];
  for (int64_t c = 0; c < 3; ++c)
    EXPECT_EQ(y.data<double>()[c], (0.0 + lanes(x.data<double>() + c * 40, 40)) + lanes(x.data<double>() + (3 + c) * 40, 40)) << c;
}

// exp_f64 (the cross-entropy kernels' exponentials) against the library's exp in ulps of the result, every
// 1/8192 of its normal range, and its edges: NaN, infinities, overflow, and 0 below the normal range.
TEST(Reduce, VectorizedDoubleExpIsWithinOneUlpOfTheLibrarys) {
  int64_t worst = 0;
  double at = 0;
  for (int64_t k = -708 * 8192; k <= 709 * 8192 + 5000; ++k) {
    const double x = static_cast<double>(k) / 8192.0, got = runtime::cpu::exp_f64(x), want = std::exp(x);
    int64_t a, b;
    std::memcpy(&a, &got, 8);
    std::memcpy(&b, &want, 8);
    if (std::abs(a - b) > worst) worst = std::abs(a - b), at = x;
  }
  EXPECT_LE(worst, 1) << "at x = " << at;
  EXPECT_EQ(runtime::cpu::exp_f64(0.0), 1.0);
  EXPECT_DOUBLE_EQ(runtime::cpu::exp_f64(1.0), std::exp(1.0));
  EXPECT_TRUE(std::isnan(runtime::cpu::exp_f64(std::nan(""))));
  EXPECT_EQ(runtime::cpu::exp_f64(709.79), HUGE_VAL);
  EXPECT_EQ(runtime::cpu::exp_f64(HUGE_VAL), HUGE_VAL);
  EXPECT_EQ(runtime::cpu::exp_f64(-HUGE_VAL), 0.0);
  EXPECT_EQ(runtime::cpu::exp_f64(-709.0), 0.0);  // the library's is a denormal
  // Past 709.44 the exponent 1024 is taken as 1023 and a factor 2.
  EXPECT_NEAR(runtime::cpu::exp_f64(709.7) / std::exp(709.7), 1.0, 1e-15);
}

}  // namespace
}  // namespace graphrun

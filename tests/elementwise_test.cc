// Elementwise CPU kernels against naive references: broadcasting arithmetic in float, double and
// integers, variadic ops, unary math, comparisons and logic, Where, Clip (both opset forms), Cast.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "tests/math_test_util.h"

namespace graphrun {
namespace {

using mathtest::broadcast_source;
using mathtest::expect_close;
using mathtest::expect_error;
using mathtest::make;
using mathtest::rand;
using mathtest::run_op;
using mathtest::unravel;

// Reference for a broadcasting binary op: out[i] = f(a[src_a(i)], b[src_b(i)]).
Tensor naive_binary(const Tensor& a, const Tensor& b, const Shape& out, DType dt,
                    const std::function<double(double, double)>& f) {
  auto va = a.as_doubles(), vb = b.as_doubles();
  std::vector<double> r(shape_numel(out));
  for (int64_t i = 0; i < static_cast<int64_t>(r.size()); ++i) {
    auto idx = unravel(i, out);
    r[i] = f(va[broadcast_source(idx, a.shape())], vb[broadcast_source(idx, b.shape())]);
  }
  return make(dt, out, r);
}

struct BroadcastCase {
  Shape a, b, out;
};

const std::vector<BroadcastCase> kBroadcastCases = {
    {{2, 3, 4}, {2, 3, 4}, {2, 3, 4}},  // equal
    {{6, 128}, {128}, {6, 128}},        // bias
    {{128}, {6, 128}, {6, 128}},        // bias on the left
    {{2, 5, 3, 3}, {}, {2, 5, 3, 3}},   // scalar
    {{}, {2, 5}, {2, 5}},
    {{2, 5, 3, 3}, {5, 1, 1}, {2, 5, 3, 3}},  // per channel
    {{2, 3, 4}, {3, 1}, {2, 3, 4}},
    {{1, 3, 1}, {2, 1, 4}, {2, 3, 4}},  // both sides broadcast
    {{5, 1, 4, 1}, {3, 1, 6}, {5, 3, 4, 6}},
    {{1}, {1}, {1}},
    {{0, 3}, {3}, {0, 3}},  // empty
};

TEST(Elementwise, ArithmeticBroadcastsLikeNumpyInFloatAndDouble) {
  struct Op {
    const char* name;
    std::function<double(double, double)> f;
  };
  const std::vector<Op> ops = {
      {"Add", [](double x, double y) { return x + y; }},
      {"Sub", [](double x, double y) { return x - y; }},
      {"Mul", [](double x, double y) { return x * y; }},
      {"Div", [](double x, double y) { return x / y; }},
      {"Max", [](double x, double y) { return std::max(x, y); }},
      {"Min", [](double x, double y) { return std::min(x, y); }},
      {"Sum", [](double x, double y) { return x + y; }},
      {"Mean", [](double x, double y) { return (x + y) / 2; }},
  };
  for (DType dt : {DType::F32, DType::F64})
    for (const auto& op : ops)
      for (size_t c = 0; c < kBroadcastCases.size(); ++c) {
        const auto& bc = kBroadcastCases[c];
        Tensor a = rand(dt, bc.a, 10 + c), b = rand(dt, bc.b, 100 + c, 0.5, 2.0);
        Tensor got = run_op(op.name, {a, b})[0];
        expect_close(got, naive_binary(a, b, bc.out, dt, op.f), dt == DType::F32 ? 1e-6 : 1e-14,
                     std::string(op.name) + " " + shape_str(bc.a) + " " + shape_str(bc.b) + " " + dtype_name(dt));
      }
}

TEST(Elementwise, IntegerArithmeticAndPow) {
  for (DType dt : {DType::I64, DType::I32, DType::U8, DType::I8}) {
    Tensor a = rand(dt, {3, 4}, 1), b = make(dt, {4}, {1, 2, 3, 4});
    expect_close(run_op("Add", {a, b})[0], naive_binary(a, b, {3, 4}, dt, [](double x, double y) { return x + y; }), 0);
    expect_close(run_op("Mul", {a, b})[0], naive_binary(a, b, {3, 4}, dt, [](double x, double y) { return x * y; }), 0);
    expect_close(run_op("Div", {a, b})[0],
                 naive_binary(a, b, {3, 4}, dt, [](double x, double y) { return std::trunc(x / y); }), 0);
  }
  // Pow with an integer exponent on a float base, and integer ** integer (ONNX's test_pow_types).
  Tensor base = make(DType::F32, {3}, {1, 2, 3}), e = make(DType::I64, {3}, {4, 5, 6});
  expect_close(run_op("Pow", {base, e})[0], make(DType::F32, {3}, {1, 32, 729}), 0);
  expect_close(run_op("Pow", {make(DType::I64, {3}, {1, 2, 3}), e})[0], make(DType::I64, {3}, {1, 32, 729}), 0);
  Tensor x = rand(DType::F64, {2, 3}, 3, 0.1, 2), y = rand(DType::F64, {3}, 4, -2, 2);
  expect_close(run_op("Pow", {x, y})[0], naive_binary(x, y, {2, 3}, DType::F64, [](double p, double q) { return std::pow(p, q); }),
               1e-14);
  expect_error([&] { run_op("Div", {make(DType::I64, {2}, {1, 2}), make(DType::I64, {2}, {1, 0})}); }, {"division by zero"});
}

TEST(Elementwise, VariadicOpsBroadcastAllInputs) {
  Tensor a = rand(DType::F32, {2, 1, 4}, 1), b = rand(DType::F32, {3, 1}, 2), c = rand(DType::F32, {4}, 3);
  Shape out = {2, 3, 4};
  auto ab = naive_binary(a, b, out, DType::F32, [](double x, double y) { return x + y; });
  expect_close(run_op("Sum", {a, b, c})[0], naive_binary(ab, c, out, DType::F32, [](double x, double y) { return x + y; }),
               1e-6);
  expect_close(run_op("Mean", {a, b, c})[0],
               naive_binary(ab, c, out, DType::F32, [](double x, double y) { return (x + y) / 3; }), 1e-6);
  auto mab = naive_binary(a, b, out, DType::F32, [](double x, double y) { return std::max(x, y); });
  expect_close(run_op("Max", {a, b, c})[0],
               naive_binary(mab, c, out, DType::F32, [](double x, double y) { return std::max(x, y); }), 0);
  // One input: a copy.
  expect_close(run_op("Min", {a})[0], a, 0);
}

TEST(Elementwise, NonBroadcastableShapesNameBothShapes) {
  expect_error([] { run_op("Add", {rand(DType::F32, {2, 3}, 1), rand(DType::F32, {4}, 2)}); }, {"[2,3]", "[4]", "broadcast"});
  expect_error([] { run_op("Add", {rand(DType::F32, {2}, 1), rand(DType::F64, {2}, 2)}); }, {"f32", "f64"});
}

TEST(Elementwise, LargeTensorsUseThreadsAndGiveTheSameResult) {
  Tensor a = rand(DType::F32, {96, 1024}, 1), b = rand(DType::F32, {1024}, 2), s = rand(DType::F32, {}, 3);
  for (const Tensor* rhs : {&b, &s, &a}) {
    Tensor one = run_op("Mul", {a, *rhs})[0];
    Tensor two = run_op("Mul", {a, *rhs}, {}, 1, 17, "", 2)[0];
    EXPECT_EQ(testing::max_abs_diff(one, two), 0.0);
    expect_close(one, naive_binary(a, *rhs, a.shape(), DType::F32, [](double x, double y) { return x * y; }), 1e-6);
  }
  Tensor r = run_op("Relu", {a}, {}, 1, 17, "", 2)[0];
  auto va = a.as_doubles(), vr = r.as_doubles();
  for (size_t i = 0; i < va.size(); ++i) ASSERT_EQ(vr[i], static_cast<float>(std::max(0.0, va[i])));
}

TEST(Elementwise, UnaryMathMatchesTheStandardLibrary) {
  struct Op {
    const char* name;
    std::function<double(double)> f;
    double lo, hi;
  };
  const std::vector<Op> ops = {
      {"Neg", [](double x) { return -x; }, -3, 3},
      {"Abs", [](double x) { return std::fabs(x); }, -3, 3},
      {"Exp", [](double x) { return std::exp(x); }, -3, 3},
      {"Log", [](double x) { return std::log(x); }, 0.01, 3},
      {"Sqrt", [](double x) { return std::sqrt(x); }, 0, 3},
      {"Reciprocal", [](double x) { return 1 / x; }, 0.5, 3},
      {"Relu", [](double x) { return x > 0 ? x : 0; }, -3, 3},
      {"Sigmoid", [](double x) { return 1 / (1 + std::exp(-x)); }, -30, 30},
      {"Tanh", [](double x) { return std::tanh(x); }, -3, 3},
      {"Sign", [](double x) { return x > 0 ? 1.0 : (x < 0 ? -1.0 : 0.0); }, -3, 3},
      {"Floor", [](double x) { return std::floor(x); }, -3, 3},
      {"Ceil", [](double x) { return std::ceil(x); }, -3, 3},
      {"Erf", [](double x) { return std::erf(x); }, -3, 3},
      {"Identity", [](double x) { return x; }, -3, 3},
      {"Softplus", [](double x) { return std::log1p(std::exp(x)); }, -20, 20},
      {"Sin", [](double x) { return std::sin(x); }, -3, 3},
      {"Cos", [](double x) { return std::cos(x); }, -3, 3},
      {"Tan", [](double x) { return std::tan(x); }, -1, 1},
      {"Asin", [](double x) { return std::asin(x); }, -0.9, 0.9},
      {"Acos", [](double x) { return std::acos(x); }, -0.9, 0.9},
      {"Atan", [](double x) { return std::atan(x); }, -3, 3},
      {"Sinh", [](double x) { return std::sinh(x); }, -3, 3},
      {"Cosh", [](double x) { return std::cosh(x); }, -3, 3},
      {"Asinh", [](double x) { return std::asinh(x); }, -3, 3},
      {"Acosh", [](double x) { return std::acosh(x); }, 1, 3},
      {"Atanh", [](double x) { return std::atanh(x); }, -0.9, 0.9},
      {"Softsign", [](double x) { return x / (1 + std::fabs(x)); }, -3, 3},
      {"HardSwish", [](double x) { return x * std::clamp(x / 6 + 0.5, 0.0, 1.0); }, -5, 5},
  };
  for (DType dt : {DType::F32, DType::F64})
    for (const auto& op : ops) {
      Tensor x = rand(dt, {3, 7}, 5, op.lo, op.hi);
      std::vector<double> v = x.as_doubles();
      for (double& e : v) e = op.f(e);
      Tensor want = make(dt, x.shape(), v);
      double tol = dt == DType::F32 ? 1e-5 * std::max(1.0, testing::max_abs_diff(want, make(dt, x.shape(), std::vector<double>(v.size(), 0)))) : 1e-12;
      expect_close(run_op(op.name, {x})[0], want, tol, std::string(op.name) + " " + dtype_name(dt));
    }
  // Sigmoid stays finite and exact at the extremes.
  Tensor big = make(DType::F32, {2}, {-1000, 1000});
  expect_close(run_op("Sigmoid", {big})[0], make(DType::F32, {2}, {0, 1}), 0);
  // Integer Neg/Abs/Relu/Sign.
  Tensor i = make(DType::I64, {4}, {-3, 0, 2, -1});
  expect_close(run_op("Neg", {i})[0], make(DType::I64, {4}, {3, 0, -2, 1}), 0);
  expect_close(run_op("Abs", {i})[0], make(DType::I64, {4}, {3, 0, 2, 1}), 0);
  expect_close(run_op("Relu", {i})[0], make(DType::I64, {4}, {0, 0, 2, 0}), 0);
  expect_close(run_op("Sign", {i})[0], make(DType::I64, {4}, {-1, 0, 1, -1}), 0);
  expect_error([] { run_op("Exp", {make(DType::I64, {1}, {1})}); }, {"Exp", "i64"});
}

// Float Tanh is Eigen's vectorised approximation: within 3e-7 of the exact value (5 ulp near 1; PyTorch's Sleef tanh is
// within 1 ulp) over a fine sweep through the range where it moves, in vectors and tails alike, with one and two
// threads giving the same bits; NaN, the infinities and -0 as std::tanh gives them.
TEST(Elementwise, FloatTanhIsWithinAFewUlpOfTheExactValue) {
  const int64_t n = 1 << 20;
  Tensor x(DType::F32, {n + 3});  // a tail past the vectors
  for (int64_t i = 0; i < n + 3; ++i)
    x.data<float>()[i] = -10.0f + 20.0f * static_cast<float>(i) / static_cast<float>(n);
  const Tensor one = run_op("Tanh", {x})[0], two = run_op("Tanh", {x}, {}, 1, 17, "", 2)[0];
  EXPECT_EQ(testing::max_abs_diff(one, two), 0.0);
  double worst = 0;
  for (int64_t i = 0; i < n + 3; ++i)
    worst = std::max(worst, std::fabs(one.data<float>()[i] - std::tanh(static_cast<double>(x.data<float>()[i]))));
  EXPECT_LT(worst, 3e-7);
  EXPECT_GT(worst, 0.0);  // not exact: the approximation, measured
  const float inf = std::numeric_limits<float>::infinity();
  Tensor special = make(DType::F32, {5}, {std::nan(""), inf, -inf, -0.0, 1e-30});
  const Tensor got = run_op("Tanh", {special})[0];
  EXPECT_TRUE(std::isnan(got.data<float>()[0]));
  EXPECT_EQ(got.data<float>()[1], 1.0f);
  EXPECT_EQ(got.data<float>()[2], -1.0f);
  EXPECT_TRUE(got.data<float>()[3] == 0.0f && std::signbit(got.data<float>()[3]));
  EXPECT_EQ(got.data<float>()[4], 1e-30f);
}

// Softplus on float: within 5 ulp of the exact value over [-87, 90] (2.3 built for AVX2; 4.4 for AVX-512, whose exp
// loses digits as |x| grows, worst at x = -84 where the value is 4e-37) (log1p(exp(-|x|)) keeps its digits where it is
// tiny beside max(x, 0) or alone), below 3e-39 under it, the same bits on 1 and 2 threads, NaN and +inf kept.
TEST(Elementwise, FloatSoftplusIsWithinAFewUlpOfTheExactValue) {
  const int64_t n = 1 << 20;
  Tensor x(DType::F32, {n + 3});  // a tail past the vectors
  for (int64_t i = 0; i < n + 3; ++i)
    x.data<float>()[i] = -90.0f + 180.0f * static_cast<float>(i) / static_cast<float>(n);
  const Tensor one = run_op("Softplus", {x})[0], two = run_op("Softplus", {x}, {}, 1, 17, "", 2)[0];
  EXPECT_EQ(testing::max_abs_diff(one, two), 0.0);
  double worst = 0;  // in ulps of the exact value
  for (int64_t i = 0; i < n + 3; ++i) {
    const double v = x.data<float>()[i], exact = std::max(v, 0.0) + std::log1p(std::exp(-std::fabs(v)));
    if (exact < 1e-37) continue;  // (Eigen's exp flushes to 0 where exp(-|x|) would be subnormal: x below -87.3)
    const double ulp = std::nextafter(static_cast<float>(exact), INFINITY) - static_cast<float>(exact);
    worst = std::max(worst, std::fabs(one.data<float>()[i] - exact) / ulp);
  }
  EXPECT_LT(worst, 5.0);
  const float inf = std::numeric_limits<float>::infinity();
  const Tensor got = run_op("Softplus", {make(DType::F32, {4}, {std::nan(""), inf, -inf, 0})})[0];
  EXPECT_TRUE(std::isnan(got.data<float>()[0]));
  EXPECT_EQ(got.data<float>()[1], inf);
  EXPECT_LT(got.data<float>()[2], 3e-39f);  // Eigen's exp stops at exp(-88.4) = 2.9e-39, a subnormal: 0 in all but name
  EXPECT_GE(got.data<float>()[2], 0.0f);
  EXPECT_NEAR(got.data<float>()[3], std::log(2.0), 1e-7);
}

TEST(Elementwise, LeakyReluAndClipInBothOpsetForms) {
  Tensor x = make(DType::F32, {5}, {-2, -0.5, 0, 0.5, 2});
  expect_close(run_op("LeakyRelu", {x}, {{"alpha", Attribute::Float(0.1f)}})[0],
               make(DType::F32, {5}, {-0.2, -0.05, 0, 0.5, 2}), 1e-7);
  expect_close(run_op("LeakyRelu", {x})[0], make(DType::F32, {5}, {-0.02, -0.005, 0, 0.5, 2}), 1e-7);
  // Opset 6: min/max attributes.
  expect_close(run_op("Clip", {x}, {{"min", Attribute::Float(-1)}, {"max", Attribute::Float(1)}}, 1, 6)[0],
               make(DType::F32, {5}, {-1, -0.5, 0, 0.5, 1}), 0);
  expect_close(run_op("Clip", {x}, {{"max", Attribute::Float(0.25f)}}, 1, 6)[0],
               make(DType::F32, {5}, {-2, -0.5, 0, 0.25, 0.25}), 0);
  // Opset 11+: optional inputs; min absent.
  expect_close(run_op("Clip", {x, make(DType::F32, {}, {-1}), make(DType::F32, {}, {1})})[0],
               make(DType::F32, {5}, {-1, -0.5, 0, 0.5, 1}), 0);
  expect_close(run_op("Clip", {x, Tensor(), make(DType::F32, {}, {0})})[0], make(DType::F32, {5}, {-2, -0.5, 0, 0, 0}), 0);
  // min > max: everything becomes max.
  expect_close(run_op("Clip", {x, make(DType::F32, {}, {1}), make(DType::F32, {}, {-1})})[0],
               make(DType::F32, {5}, {-1, -1, -1, -1, -1}), 0);
  expect_close(run_op("Clip", {make(DType::I64, {3}, {-5, 1, 9}), make(DType::I64, {}, {0}), make(DType::I64, {}, {4})})[0],
               make(DType::I64, {3}, {0, 1, 4}), 0);
}

TEST(Elementwise, ActivationsWithAttributesModAndPRelu) {
  Tensor x = make(DType::F64, {6}, {-3, -1, -0.25, 0, 0.5, 2});
  auto map = [&](const std::function<double(double)>& f) {
    auto v = x.as_doubles();
    for (double& e : v) e = f(e);
    return make(DType::F64, x.shape(), v);
  };
  expect_close(run_op("HardSigmoid", {x}, {{"alpha", Attribute::Float(0.5f)}, {"beta", Attribute::Float(0.6f)}})[0],
               map([](double v) { return std::clamp(0.5 * v + static_cast<double>(0.6f), 0.0, 1.0); }), 1e-7);
  expect_close(run_op("Selu", {x}, {{"alpha", Attribute::Float(2)}, {"gamma", Attribute::Float(3)}})[0],
               map([](double v) { return v > 0 ? 3 * v : 3 * (2 * std::exp(v) - 2); }), 1e-12);
  expect_close(run_op("ThresholdedRelu", {x}, {{"alpha", Attribute::Float(0.25f)}})[0],
               map([](double v) { return v > 0.25 ? v : 0; }), 0);
  expect_close(run_op("Celu", {x})[0], map([](double v) { return std::max(0.0, v) + std::min(0.0, std::exp(v) - 1); }), 1e-12);
  expect_close(run_op("Elu", {x}, {{"alpha", Attribute::Float(2)}})[0], map([](double v) { return v >= 0 ? v : 2 * (std::exp(v) - 1); }),
               1e-12);
  expect_close(run_op("Shrink", {x}, {{"lambd", Attribute::Float(0.5f)}, {"bias", Attribute::Float(0.25f)}})[0],
               map([](double v) { return v < -0.5 ? v + 0.25 : (v > 0.5 ? v - 0.25 : 0); }), 0);
  // Mod: Python's sign convention for integers, C's with fmod=1.
  Tensor a = make(DType::I64, {4}, {-7, 7, -7, 7}), b = make(DType::I64, {4}, {3, -3, -3, 3});
  expect_close(run_op("Mod", {a, b})[0], make(DType::I64, {4}, {2, -2, -1, 1}), 0);
  expect_close(run_op("Mod", {a, b}, {{"fmod", Attribute::Int(1)}})[0], make(DType::I64, {4}, {-1, 1, -1, 1}), 0);
  expect_close(run_op("Mod", {make(DType::F32, {2}, {-7.5, 7.5}), make(DType::F32, {}, {2})}, {{"fmod", Attribute::Int(1)}})[0],
               make(DType::F32, {2}, {-1.5, 1.5}), 0);
  // PRelu with a per-channel slope.
  Tensor px = rand(DType::F32, {2, 3, 2}, 4), slope = make(DType::F32, {3, 1}, {0.1, 0.2, 0.3});
  expect_close(run_op("PRelu", {px, slope})[0],
               naive_binary(px, slope, px.shape(), DType::F32, [](double v, double s) { return v < 0 ? s * v : v; }), 1e-7);
  Tensor inf = make(DType::F32, {3}, {-INFINITY, 1, INFINITY});
  expect_close(run_op("IsInf", {inf}, {{"detect_negative", Attribute::Int(0)}})[0], make(DType::Bool, {3}, {0, 0, 1}), 0);
  expect_close(run_op("CastLike", {inf, make(DType::F64, {1}, {0})})[0], make(DType::F64, {3}, {-INFINITY, 1, INFINITY}), 0);
}

TEST(Elementwise, ComparisonsLogicAndWhere) {
  Tensor a = make(DType::F32, {2, 3}, {1, 2, 3, 4, 5, 6}), b = make(DType::F32, {3}, {2, 2, 7});
  expect_close(run_op("Equal", {a, b})[0], make(DType::Bool, {2, 3}, {0, 1, 0, 0, 0, 0}), 0);
  expect_close(run_op("Greater", {a, b})[0], make(DType::Bool, {2, 3}, {0, 0, 0, 1, 1, 0}), 0);
  expect_close(run_op("GreaterOrEqual", {a, b})[0], make(DType::Bool, {2, 3}, {0, 1, 0, 1, 1, 0}), 0);
  expect_close(run_op("Less", {a, b})[0], make(DType::Bool, {2, 3}, {1, 0, 1, 0, 0, 1}), 0);
  expect_close(run_op("LessOrEqual", {a, b})[0], make(DType::Bool, {2, 3}, {1, 1, 1, 0, 0, 1}), 0);
  expect_close(run_op("Equal", {make(DType::I64, {2}, {3, 4}), make(DType::I64, {}, {4})})[0], make(DType::Bool, {2}, {0, 1}), 0);
  Tensor p = make(DType::Bool, {4}, {0, 0, 1, 1}), q = make(DType::Bool, {4}, {0, 1, 0, 1});
  expect_close(run_op("And", {p, q})[0], make(DType::Bool, {4}, {0, 0, 0, 1}), 0);
  expect_close(run_op("Or", {p, q})[0], make(DType::Bool, {4}, {0, 1, 1, 1}), 0);
  expect_close(run_op("Xor", {p, q})[0], make(DType::Bool, {4}, {0, 1, 1, 0}), 0);
  expect_close(run_op("Not", {p})[0], make(DType::Bool, {4}, {1, 1, 0, 0}), 0);
  expect_error([&] { run_op("And", {a, a}); }, {"bool", "f32"});
  // Where broadcasts all three inputs.
  const std::vector<std::vector<Shape>> where_shapes = {{{3, 1, 4}, {2, 4}, {1}, {3, 2, 4}},  {{2, 4}, {2, 4}, {2, 4}, {2, 4}},
                                                       {{2, 4}, {}, {2, 4}, {2, 4}},          {{2, 4}, {}, {}, {2, 4}},
                                                       {{}, {2, 4}, {4}, {2, 4}},             {{2, 1}, {1, 4}, {2, 4}, {2, 4}}};
  for (DType dt : {DType::F32, DType::F64, DType::I64})
  for (const auto& ws : where_shapes) {
    Tensor c = rand(DType::Bool, ws[0], 1), x = rand(dt, ws[1], 2), y = rand(dt, ws[2], 3);
    Shape out = ws[3];
    auto vc = c.as_doubles(), vx = x.as_doubles(), vy = y.as_doubles();
    std::vector<double> r(shape_numel(out));
    for (int64_t i = 0; i < shape_numel(out); ++i) {
      auto idx = unravel(i, out);
      r[i] = vc[broadcast_source(idx, c.shape())] ? vx[broadcast_source(idx, x.shape())] : vy[broadcast_source(idx, y.shape())];
    }
    expect_close(run_op("Where", {c, x, y})[0], make(dt, out, r), 0);
  }
}

TEST(Elementwise, CastBetweenNumericTypesAndBool) {
  Tensor f = make(DType::F32, {5}, {-2.7, -0.5, 0, 1.5, 3.9});
  auto cast = [](const Tensor& x, DType to) { return run_op("Cast", {x}, {{"to", Attribute::Int(static_cast<int64_t>(to))}})[0]; };
  expect_close(cast(f, DType::I64), make(DType::I64, {5}, {-2, 0, 0, 1, 3}), 0);
  expect_close(cast(f, DType::I32), make(DType::I32, {5}, {-2, 0, 0, 1, 3}), 0);
  expect_close(cast(f, DType::Bool), make(DType::Bool, {5}, {1, 1, 0, 1, 1}), 0);
  expect_close(cast(f, DType::F64), make(DType::F64, {5}, f.as_doubles()), 0);
  expect_close(cast(make(DType::I64, {3}, {-1, 0, 7}), DType::F32), make(DType::F32, {3}, {-1, 0, 7}), 0);
  expect_close(cast(make(DType::Bool, {3}, {1, 0, 1}), DType::F32), make(DType::F32, {3}, {1, 0, 1}), 0);
  expect_close(cast(make(DType::I32, {2}, {300, -1}), DType::U8), make(DType::U8, {2}, {44, 255}), 0);
  expect_close(cast(make(DType::F64, {2}, {1e300, 0.1}), DType::F32),
               make(DType::F32, {2}, {std::numeric_limits<double>::infinity(), 0.1}), 0);
  // float16: known bit patterns, rounding to nearest even, subnormals, and the round trip.
  Tensor h = cast(make(DType::F32, {6}, {1.0, -2.0, 65504.0, 1e-7, 1.0 + 1.0 / 2048, 1e6}), DType::F16);
  const uint16_t* hb = static_cast<const uint16_t*>(h.raw());
  EXPECT_EQ(hb[0], 0x3c00);
  EXPECT_EQ(hb[1], 0xc000);
  EXPECT_EQ(hb[2], 0x7bff);
  EXPECT_EQ(hb[3], 0x0002);  // 1e-7 / 2^-24 = 1.68 -> 2
  EXPECT_EQ(hb[4], 0x3c00);  // a tie rounds to even
  EXPECT_EQ(hb[5], 0x7c00);  // overflow -> inf
  Tensor back = cast(h, DType::F32);
  auto vb = back.as_doubles();
  EXPECT_EQ(vb[0], 1.0);
  EXPECT_EQ(vb[2], 65504.0);
  EXPECT_NEAR(vb[3], 2.0 / 16777216.0, 1e-12);
  Tensor bf = cast(make(DType::F32, {2}, {1.0, -3.0}), DType::BF16);
  EXPECT_EQ(static_cast<const uint16_t*>(bf.raw())[0], 0x3f80);
  expect_close(cast(bf, DType::F64), make(DType::F64, {2}, {1.0, -3.0}), 0);
  expect_error([&] { run_op("Cast", {f}); }, {"'to'"});
}

}  // namespace
}  // namespace graphrun

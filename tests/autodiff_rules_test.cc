// One numeric gradient check per rule: forward + backward in double precision through the executor,
// compared with central differences, for broadcasting and every attribute that changes the math.
#include "graph/passes/remove_internal_noops.h"
#include "tests/grad_check.h"

namespace graphrun::testing {
namespace {

using A = Attribute;

// ---- elementwise

TEST(GradRules, AddSubMulDivWithBroadcasting) {
  for (const char* op : {"Add", "Sub", "Mul", "Div"}) {
    for (ShapeInfo si : {ShapeInfo::Static, ShapeInfo::RankOnly}) {
      SCOPED_TRACE(std::string(op) + (si == ShapeInfo::Static ? " static" : " dynamic (SumToShape)"));
      TestGraph t;
      std::string a = t.param("a", {2, 3, 4}, 1, 0.5, 1.5);
      std::string b = t.param("b", {3, 1}, 2, 0.5, 1.5);  // broadcast on axes 0 (missing) and 2 (size 1)
      std::string s = t.param("s", {}, 3, 0.5, 1.5);      // scalar
      std::string y = t.node(op, {a, b});
      std::string z = t.node(op, {s, y});
      check_gradients(t, z, shapes(si));
    }
  }
}

TEST(GradRules, PowBothOperands) {
  TestGraph t;
  std::string a = t.param("a", {3, 4}, 1, 0.5, 2.0);
  std::string b = t.param("b", {4}, 2, 0.5, 2.5);
  check_gradients(t, t.node("Pow", {a, b}));
}

TEST(GradRules, PowConstantExponent) {
  TestGraph t;
  std::string a = t.param("a", {3, 4}, 1, -2, 2);
  t.g.initializers["two"] = Tensor::scalar<double>(2.0);
  check_gradients(t, t.node("Pow", {a, "two"}), wrt({"a"}));
}

TEST(GradRules, UnaryActivations) {
  struct Case { const char* op; double lo, hi; std::map<std::string, A> attrs; };
  std::vector<Case> cases = {
      {"Neg", -1, 1, {}},       {"Relu", -1, 1, {}},        {"LeakyRelu", -1, 1, {{"alpha", A::Float(0.2f)}}},
      {"Sigmoid", -2, 2, {}},   {"Tanh", -2, 2, {}},        {"Exp", -1, 1, {}},
      {"Log", 0.5, 2, {}},      {"Sqrt", 0.5, 2, {}},       {"Reciprocal", 0.5, 2, {}},
      {"Abs", -1, 1, {}},       {"Identity", -1, 1, {}},    {"Erf", -1, 1, {}},
      {"Softplus", -2, 2, {}},  {"Elu", -1, 1, {{"alpha", A::Float(0.7f)}}}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.op);
    TestGraph t;
    std::string x = t.param("x", {3, 5}, 7, c.lo, c.hi);
    check_gradients(t, t.node(c.op, {x}, c.attrs));
  }
}

TEST(GradRules, MoreUnaryFunctions) {
  struct Case { const char* op; double lo, hi; std::map<std::string, A> attrs; };
  std::vector<Case> cases = {
      {"Sin", -2, 2, {}},       {"Cos", -2, 2, {}},        {"Tan", -1, 1, {}},
      {"Asin", -0.8, 0.8, {}},  {"Acos", -0.8, 0.8, {}},   {"Atan", -2, 2, {}},
      {"Sinh", -2, 2, {}},      {"Cosh", -2, 2, {}},       {"Asinh", -2, 2, {}},
      {"Acosh", 1.2, 3, {}},    {"Atanh", -0.8, 0.8, {}},  {"Softsign", -2, 2, {}},
      {"HardSigmoid", -4, 4, {{"alpha", A::Float(0.3f)}, {"beta", A::Float(0.4f)}}},
      {"HardSwish", -5, 5, {}}, {"Selu", -2, 2, {}},        {"Celu", -2, 2, {{"alpha", A::Float(1.5f)}}},
      {"ThresholdedRelu", -2, 2, {{"alpha", A::Float(0.3f)}}}, {"Shrink", -2, 2, {{"lambd", A::Float(0.6f)}, {"bias", A::Float(0.2f)}}}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.op);
    TestGraph t;
    std::string x = t.param("x", {4, 6}, 11, c.lo, c.hi);
    check_gradients(t, t.node(c.op, {x}, c.attrs));
  }
}

TEST(GradRules, PReluWithBroadcastSlope) {
  TestGraph t;
  std::string x = t.param("x", {2, 3, 4}, 1);
  std::string s = t.param("slope", {3, 1}, 2, 0.1, 0.5);
  check_gradients(t, t.node("PRelu", {x, s}));
}

TEST(GradRules, MoreReductions) {
  for (const char* op : {"ReduceMax", "ReduceMin", "ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceLogSumExp", "ReduceLogSum"}) {
    for (int keep = 0; keep < 2; ++keep) {
      SCOPED_TRACE(std::string(op) + " keepdims " + std::to_string(keep));
      TestGraph t;
      std::string x = t.param("x", {2, 3, 4}, 1, 0.2, 1.5);
      check_gradients(t, t.node(op, {x}, {{"axes", A::Ints({0, -1})}, {"keepdims", A::Int(keep)}}));
      TestGraph all;
      check_gradients(all, all.node(op, {all.param("x", {2, 3}, 2, 0.2, 1.5)}, {{"keepdims", A::Int(keep)}}));
    }
  }
}

TEST(GradRules, GlobalMaxPoolTrilTileCumSum) {
  {
    TestGraph t;
    check_gradients(t, t.node("GlobalMaxPool", {t.param("x", {2, 3, 4, 5}, 1)}));
  }
  for (int upper = 0; upper < 2; ++upper) {
    TestGraph t;
    t.g.initializers["k"] = Tensor::scalar<int64_t>(1);
    check_gradients(t, t.node("Trilu", {t.param("x", {2, 4, 5}, 1), "k"}, {{"upper", A::Int(upper)}}));
  }
  // Tile with static, symbolic and no shapes (torch's x.expand(...).repeat(...) leaves the shape
  // unknown), and with repeats computed at run time: the view [r0, d0, r1, d1, ...] is then built by
  // interleaving the repeats with Shape(x) (a Concat), since only the rank must be known.
  for (ShapeInfo si : {ShapeInfo::Static, ShapeInfo::RankOnly, ShapeInfo::None})
    for (int runtime_reps = 0; runtime_reps < 2; ++runtime_reps) {
      SCOPED_TRACE(std::to_string(static_cast<int>(si)) + (runtime_reps ? " runtime repeats" : ""));
      TestGraph t;
      t.g.initializers["reps"] = i64s({2, 1, 3});
      std::string reps = "reps";
      if (runtime_reps) reps = t.node("Identity", {"reps"});
      std::string x = t.node("Identity", {t.param("x", {2, 3, 2}, 1)});
      Graph bg = check_gradients(t, t.node("Tile", {x, reps}), shapes(si));
      EXPECT_EQ(count_ops(bg, "Concat") > 0, si != ShapeInfo::Static || runtime_reps == 1);
    }
  for (int rev = 0; rev < 2; ++rev)
    for (int excl = 0; excl < 2; ++excl) {
      TestGraph t;
      t.g.initializers["axis"] = Tensor::scalar<int64_t>(1);
      check_gradients(t, t.node("CumSum", {t.param("x", {3, 5}, 1), "axis"},
                                {{"reverse", A::Int(rev)}, {"exclusive", A::Int(excl)}}));
    }
}

TEST(GradRules, ClipWithMinMaxInputs) {
  TestGraph t;
  std::string x = t.param("x", {4, 5}, 7, -2, 2);
  t.g.initializers["lo"] = Tensor::scalar<double>(-0.8);
  t.g.initializers["hi"] = Tensor::scalar<double>(0.9);
  check_gradients(t, t.node("Clip", {x, "lo", "hi"}), wrt({"x"}));
}

// Bounds a model computes (torch.clamp(x, min=t.mean(), max=...) exports Clip reading them) get torch's clamp
// gradient: one-sided, two-sided, and bounds crossed (min > max: Clip is max everywhere, all of dY goes to max).
TEST(GradRules, ClipBoundsAreDifferentiable) {
  struct Case {
    double lo, hi;
    bool has_lo, has_hi;
  };
  for (const Case& c : {Case{-0.8, 0.9, true, true}, Case{-0.5, 0, true, false}, Case{0, 0.4, false, true},
                        Case{0.6, -0.3, true, true}}) {
    SCOPED_TRACE(std::to_string(c.lo) + " " + std::to_string(c.hi));
    TestGraph t;
    std::string x = t.param("x", {4, 5}, 7, -2, 2);
    std::string lo = c.has_lo ? t.param("lo", {}, 8, c.lo, c.lo) : "";
    std::string hi = c.has_hi ? t.param("hi", {}, 9, c.hi, c.hi) : "";
    check_gradients(t, t.node("Clip", {x, lo, hi}));
  }
}

TEST(GradRules, WhereSumMeanMaxMin) {
  TestGraph t;
  std::string a = t.param("a", {3, 4}, 1);
  std::string b = t.param("b", {4}, 2);
  std::string c = t.param("c", {3, 1}, 3);
  std::string cond = t.node("Greater", {a, c});
  std::string w = t.node("Where", {cond, a, b});
  std::string s = t.node("Sum", {w, b, c});
  std::string m = t.node("Mean", {s, a});
  std::string mx = t.node("Max", {m, b});
  std::string mn = t.node("Min", {mx, c});
  check_gradients(t, mn);
}

// Ties: max(x, x) is x, and the maximum of [x, x] along an axis is the maximum of x, so each gradient is
// dY where the max is, once. A rule that gives every tied element all of dY doubles it (the numeric check
// fails); torch shares it evenly (torch.maximum halves it, amax divides it by the count).
TEST(GradRules, TiedMaxAndMinShareTheGradientEvenly) {
  for (const char* op : {"Max", "Min"}) {
    SCOPED_TRACE(op);
    TestGraph t;
    std::string x = t.param("x", {3, 4}, 1);
    std::string y = t.param("y", {4}, 2);
    check_gradients(t, t.node(op, {x, x, y}));
  }
  for (const char* op : {"ReduceMax", "ReduceMin"})
    for (int all = 0; all < 2; ++all) {
      SCOPED_TRACE(std::string(op) + (all ? " over every axis" : " over axis 1"));
      TestGraph t;
      std::string x = t.param("x", {3, 4}, 3);
      std::string twice = t.node("Concat", {x, x}, {{"axis", A::Int(1)}});
      check_gradients(t, all ? t.node(op, {twice}, {{"keepdims", A::Int(0)}})
                             : t.node(op, {twice}, {{"axes", A::Ints({1})}, {"keepdims", A::Int(0)}}));
    }
}

TEST(GradRules, CastRoundTrip) {
  TestGraph t;
  std::string x = t.param("x", {3, 4}, 1);
  std::string f = t.node("Cast", {x}, {{"to", A::Int(1)}});
  std::string d = t.node("Cast", {f}, {{"to", A::Int(11)}});
  CheckOptions o;  // through f32: a wide step keeps float rounding out of the (linear) differences
  o.eps = 1e-2;
  o.tol = 1e-4;
  check_gradients(t, d, o);
}

// CastLike(constant, x): x gives only a type, so nothing needs a gradient from the CastLike (its rule used to
// build one for the constant and stop the backward pass); x's gradient comes through the Mul alone.
TEST(GradRules, CastLikeOfAConstantToAParametersType) {
  TestGraph t;
  std::string x = t.param("x", {3, 4}, 1);
  Tensor c(DType::F32, {});
  c.data<float>()[0] = 2.5f;
  std::string k = t.node("CastLike", {t.input("c", c), x});
  check_gradients(t, t.node("Mul", {x, k}));
}

// ---- linalg

TEST(GradRules, GemmEveryTransposeAlphaBeta) {
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb)
      for (Shape cs : {Shape{3, 4}, Shape{4}, Shape{3, 1}, Shape{}}) {
        SCOPED_TRACE("transA=" + std::to_string(ta) + " transB=" + std::to_string(tb) + " C" + shape_str(cs));
        TestGraph t(13);
        std::string a = t.param("a", ta ? Shape{5, 3} : Shape{3, 5}, 1);
        std::string b = t.param("b", tb ? Shape{4, 5} : Shape{5, 4}, 2);
        std::string c = t.param("c", cs, 3);
        check_gradients(t, t.node("Gemm", {a, b, c}, {{"transA", A::Int(ta)}, {"transB", A::Int(tb)},
                                                      {"alpha", A::Float(0.7f)}, {"beta", A::Float(1.3f)}}));
      }
}

TEST(GradRules, GemmWithoutC) {
  TestGraph t;
  check_gradients(t, t.node("Gemm", {t.param("a", {3, 5}, 1), t.param("b", {4, 5}, 2)}, {{"transB", A::Int(1)}}));
}

TEST(GradRules, MatMulShapes) {
  std::vector<std::pair<Shape, Shape>> cases = {
      {{3, 4}, {4, 5}},       {{2, 3, 4}, {4, 5}},    {{3, 4}, {2, 4, 5}}, {{2, 1, 3, 4}, {3, 4, 5}},
      {{4}, {4, 5}},          {{3, 4}, {4}},          {{4}, {4}},          {{4}, {2, 4, 5}},
      {{2, 3, 4}, {4}},       {{2, 3, 4}, {2, 4, 5}}};
  for (const auto& [sa, sb] : cases) {
    for (ShapeInfo si : {ShapeInfo::Static, ShapeInfo::RankOnly}) {
      SCOPED_TRACE(shape_str(sa) + " @ " + shape_str(sb) + (si == ShapeInfo::Static ? "" : " dynamic"));
      TestGraph t;
      check_gradients(t, t.node("MatMul", {t.param("a", sa, 1), t.param("b", sb, 2)}), shapes(si));
    }
  }
}

TEST(GradRules, MatMulWithInputOfUnknownRank) {
  // As after a Reshape whose target shape the importer could not infer (older opsets).
  for (Shape sa : {Shape{2, 3, 4}, Shape{3, 4}, Shape{4}}) {
    SCOPED_TRACE(shape_str(sa));
    TestGraph t(11);
    std::string a = t.node("Identity", {t.param("a", sa, 1)});
    check_gradients(t, t.node("MatMul", {a, t.param("b", {4, 5}, 2)}), shapes(ShapeInfo::None));
  }
}

// ---- nn

TEST(GradRules, ConvAttributes) {
  struct Case { Shape x, w; std::map<std::string, A> attrs; bool bias; };
  std::vector<Case> cases = {
      {{2, 3, 7, 7}, {4, 3, 3, 3}, {}, true},
      {{2, 3, 8, 7}, {4, 3, 3, 2}, {{"strides", A::Ints({2, 1})}, {"pads", A::Ints({1, 0, 2, 1})}}, true},
      {{1, 2, 9, 9}, {3, 2, 3, 3}, {{"dilations", A::Ints({2, 2})}, {"pads", A::Ints({1, 1, 1, 1})}}, false},
      {{2, 4, 6, 6}, {6, 2, 3, 3}, {{"group", A::Int(2)}, {"strides", A::Ints({2, 2})}}, true},
      {{2, 4, 6, 6}, {4, 1, 3, 3}, {{"group", A::Int(4)}, {"auto_pad", A::Str("SAME_UPPER")}}, true},
      {{2, 3, 10}, {2, 3, 3}, {{"strides", A::Ints({3})}, {"pads", A::Ints({2, 1})}}, true}};
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i));
    const auto& c = cases[i];
    TestGraph t;
    std::vector<std::string> ins{t.param("x", c.x, 1), t.param("w", c.w, 2)};
    if (c.bias) ins.push_back(t.param("b", {c.w[0]}, 3));
    check_gradients(t, t.node("Conv", ins, c.attrs));
  }
}

struct ConvCase {
  Shape x, w;
  std::map<std::string, A> attrs;
};

// `grad` (ConvGrad or ConvTransposeGrad, the gradient op of `fwd`) differentiated: dX, dW and dB, each read by the
// loss, w.r.t. dY, X and W against central differences. Returns the backward graph.
Graph check_conv_grad_grad(const char* fwd, const char* grad, const ConvCase& c) {
  // dY in the convolution's output shape.
  TestGraph probe;
  const std::string y = probe.node(fwd, {probe.param("x", c.x, 1), probe.param("w", c.w, 2)}, c.attrs);
  runtime::ExecOptions o;
  o.fetch = {y};
  const Shape dys = runtime::Executor(probe.g, o).run({}).at(y).shape();
  TestGraph t;
  const std::string dy = t.param("dy", dys, 3), x = t.param("x", c.x, 1), w = t.param("w", c.w, 2);
  const auto d = t.node_n(grad, {dy, x, w}, 3, c.attrs, kGraphrunDomain);
  const std::string flat = t.node("Constant", {}, {{"value", A::Tens(Tensor::from_vector<int64_t>({1}, {-1}))}});
  const std::string all =
      t.node("Concat", {t.node("Reshape", {d[0], flat}), t.node("Reshape", {d[1], flat}), d[2]}, {{"axis", A::Int(0)}});
  return check_gradients(t, all);
}

// ConvGrad's own gradient (second derivatives through a convolution), in every attribute case of ConvAttributes.
TEST(GradRules, ConvGradOfEveryConvAttributes) {
  const std::vector<ConvCase> cases = {
      {{2, 3, 7, 7}, {4, 3, 3, 3}, {}},
      {{2, 3, 8, 7}, {4, 3, 3, 2}, {{"strides", A::Ints({2, 1})}, {"pads", A::Ints({1, 0, 2, 1})}}},
      {{1, 2, 9, 9}, {3, 2, 3, 3}, {{"dilations", A::Ints({2, 2})}, {"pads", A::Ints({1, 1, 1, 1})}}},
      {{2, 4, 6, 6}, {6, 2, 3, 3}, {{"group", A::Int(2)}, {"strides", A::Ints({2, 2})}}},
      {{2, 4, 6, 6}, {4, 1, 3, 3}, {{"group", A::Int(4)}, {"auto_pad", A::Str("SAME_UPPER")}}},
      {{2, 3, 10}, {2, 3, 3}, {{"strides", A::Ints({3})}, {"pads", A::Ints({2, 1})}}}};
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i));
    Graph bg = check_conv_grad_grad("Conv", "ConvGrad", cases[i]);
    EXPECT_GE(count_ops(bg, "Conv"), 2);      // dY's from dX and from dW
    EXPECT_GE(count_ops(bg, "ConvGrad"), 3);  // the forward ConvGrad, then X's and W's
  }
}

// ConvTransposeGrad's own rule (a penalty through a generator or a decoder), with strides, pads, output_padding,
// groups and dilations.
TEST(GradRules, ConvTransposeGradOfSecondOrder) {
  const std::vector<ConvCase> cases = {
      {{2, 3, 4, 4}, {3, 2, 3, 3}, {}},
      {{1, 4, 3, 3},
       {4, 3, 3, 3},
       {{"strides", A::Ints({2, 2})}, {"pads", A::Ints({1, 1, 1, 1})}, {"output_padding", A::Ints({1, 1})}}},
      {{1, 4, 3, 3}, {4, 1, 2, 2}, {{"group", A::Int(2)}, {"dilations", A::Ints({2, 2})}}}};
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i));
    Graph bg = check_conv_grad_grad("ConvTranspose", "ConvTransposeGrad", cases[i]);
    EXPECT_GE(count_ops(bg, "ConvTranspose"), 2);
    EXPECT_GE(count_ops(bg, "ConvTransposeGrad"), 3);
  }
}

TEST(GradRules, ConvTransposeAttributes) {
  struct Case { Shape x, w; std::map<std::string, A> attrs; };
  std::vector<Case> cases = {
      {{2, 3, 4, 4}, {3, 2, 3, 3}, {}},
      {{1, 4, 3, 3}, {4, 3, 3, 3}, {{"strides", A::Ints({2, 2})}, {"pads", A::Ints({1, 1, 1, 1})},
                                     {"output_padding", A::Ints({1, 1})}}},
      {{1, 4, 3, 3}, {4, 1, 2, 2}, {{"group", A::Int(2)}, {"dilations", A::Ints({2, 2})}}}};
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i));
    const auto& c = cases[i];
    TestGraph t;
    int64_t group = c.attrs.count("group") ? c.attrs.at("group").i : 1;
    std::vector<std::string> ins{t.param("x", c.x, 1), t.param("w", c.w, 2), t.param("b", {c.w[1] * group}, 3)};
    check_gradients(t, t.node("ConvTranspose", ins, c.attrs));
  }
}

TEST(GradRules, MaxPoolAttributes) {
  std::vector<std::map<std::string, A>> cases = {
      {{"kernel_shape", A::Ints({2, 2})}, {"strides", A::Ints({2, 2})}},
      {{"kernel_shape", A::Ints({3, 3})}, {"strides", A::Ints({2, 2})}, {"pads", A::Ints({1, 1, 1, 1})}},
      {{"kernel_shape", A::Ints({3, 2})}, {"strides", A::Ints({2, 2})}, {"ceil_mode", A::Int(1)}},
      {{"kernel_shape", A::Ints({2, 2})}, {"dilations", A::Ints({2, 2})}}};
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i));
    TestGraph t;
    Graph bg = check_gradients(t, t.node("MaxPool", {t.param("x", {2, 3, 7, 7}, 1)}, cases[i]));
    EXPECT_EQ(count_ops(bg, "MaxPoolGrad"), 1);
  }
}

TEST(GradRules, AveragePoolAttributes) {
  std::vector<std::map<std::string, A>> cases = {
      {{"kernel_shape", A::Ints({2, 2})}, {"strides", A::Ints({2, 2})}},
      {{"kernel_shape", A::Ints({3, 3})}, {"strides", A::Ints({2, 2})}, {"pads", A::Ints({1, 1, 1, 1})}},
      {{"kernel_shape", A::Ints({3, 3})}, {"strides", A::Ints({2, 2})}, {"pads", A::Ints({1, 1, 1, 1})},
       {"count_include_pad", A::Int(1)}},
      {{"kernel_shape", A::Ints({3, 2})}, {"strides", A::Ints({2, 2})}, {"ceil_mode", A::Int(1)}},
      {{"kernel_shape", A::Ints({3, 3})}, {"strides", A::Ints({2, 2})}, {"ceil_mode", A::Int(1)},
       {"pads", A::Ints({1, 0, 1, 0})}, {"count_include_pad", A::Int(1)}}};
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i));
    TestGraph t;
    check_gradients(t, t.node("AveragePool", {t.param("x", {2, 3, 7, 7}, 1)}, cases[i]));
  }
}

// The output shape of `op` on x (a probe run), for a dY of that shape.
Shape probe_shape(const std::string& op, const Shape& x, const std::map<std::string, A>& attrs) {
  TestGraph probe;
  const std::string y = probe.node(op, {probe.param("x", x, 1)}, attrs);
  runtime::ExecOptions o;
  o.fetch = {y};
  return runtime::Executor(probe.g, o).run({}).at(y).shape();
}

std::string const_i64(TestGraph& t, const std::string& name, const std::vector<int64_t>& v) {
  t.g.initializers[name] = Tensor::from_vector<int64_t>({static_cast<int64_t>(v.size())}, v);
  return name;
}

// Second derivatives through the pooling gradients (a gradient penalty through a pooled network): MaxPoolGrad and
// AveragePoolGrad differentiated w.r.t. dY (linear) and X (no gradient: the numeric check sees none either), with
// overlapping windows, pads, count_include_pad and ceil_mode, at static shapes and at symbolic ones.
TEST(GradRules, PoolingGradientsOfSecondOrder) {
  const std::vector<std::map<std::string, A>> cases = {
      {{"kernel_shape", A::Ints({2, 2})}, {"strides", A::Ints({2, 2})}},
      {{"kernel_shape", A::Ints({3, 3})}, {"strides", A::Ints({2, 2})}, {"pads", A::Ints({1, 1, 1, 1})}},
      {{"kernel_shape", A::Ints({3, 3})},
       {"strides", A::Ints({2, 2})},
       {"pads", A::Ints({1, 1, 1, 1})},
       {"count_include_pad", A::Int(1)}},
      {{"kernel_shape", A::Ints({3, 2})}, {"strides", A::Ints({2, 1})}, {"ceil_mode", A::Int(1)}}};
  const Shape xs{2, 3, 7, 7};
  for (size_t i = 0; i < cases.size(); ++i)
    for (ShapeInfo si : {ShapeInfo::Static, ShapeInfo::RankOnly}) {
      SCOPED_TRACE("case " + std::to_string(i) + (si == ShapeInfo::Static ? ", static" : ", symbolic"));
      auto max_attrs = cases[i];
      max_attrs.erase("count_include_pad");
      {
        TestGraph t;
        const std::string x = t.param("x", xs, 1), dy = t.param("dy", probe_shape("MaxPool", xs, max_attrs), 2);
        const auto pooled = t.node_n("MaxPool", {x}, 2, max_attrs);
        const std::string dx = t.node_n("MaxPoolGrad", {dy, pooled[1], x}, 1, {}, kGraphrunDomain)[0];
        Graph bg = check_gradients(t, dx, shapes(si));
        EXPECT_EQ(count_ops(bg, "Gather"), 1);
      }
      {
        TestGraph t;
        const std::string x = t.param("x", xs, 1), dy = t.param("dy", probe_shape("AveragePool", xs, cases[i]), 2);
        const std::string dx = t.node_n("AveragePoolGrad", {dy, x}, 1, cases[i], kGraphrunDomain)[0];
        Graph bg = check_gradients(t, dx, shapes(si));
        EXPECT_EQ(count_ops(bg, "AveragePool"), 1);
      }
    }
}

// Second derivatives through graphrun's reverse ops of broadcasting, slicing and gathering (what first derivatives
// at symbolic shapes and below opset 16 are made of): SumToShape, SliceGrad (steps, negative steps, omitted axes),
// GatherElementsGrad with repeated indices, GatherNDGrad with batch_dims.
TEST(GradRules, ReverseOpsOfSecondOrder) {
  {
    TestGraph t;
    const std::string x = t.param("x", {2, 3, 4}, 1);
    check_gradients(t, t.node_n("SumToShape", {x, const_i64(t, "to", {3, 1})}, 1, {}, kGraphrunDomain)[0]);
  }
  struct SliceCase {
    std::vector<int64_t> starts, ends, axes, steps;
  };
  for (const SliceCase& c : {SliceCase{{1, 0}, {3, 6}, {0, 2}, {1, 2}}, SliceCase{{4, -1}, {0, -5}, {1, 2}, {-2, -1}},
                             SliceCase{{1}, {3}, {}, {}}}) {
    TestGraph t;
    const Shape xs{4, 5, 6};
    std::vector<std::string> bounds{const_i64(t, "starts", c.starts), const_i64(t, "ends", c.ends)};
    if (!c.axes.empty()) bounds.push_back(const_i64(t, "axes", c.axes));
    if (!c.steps.empty()) bounds.push_back(const_i64(t, "steps", c.steps));
    TestGraph probe;
    std::vector<std::string> pin{probe.param("x", xs, 1)};
    for (const auto& b : bounds) pin.push_back(const_i64(probe, b, t.g.initializers.at(b).as_int64s()));
    const std::string py = probe.node("Slice", pin);
    runtime::ExecOptions o;
    o.fetch = {py};
    const Shape dys = runtime::Executor(probe.g, o).run({}).at(py).shape();
    std::vector<std::string> ins{t.param("dy", dys, 2), const_i64(t, "shape", xs)};
    ins.insert(ins.end(), bounds.begin(), bounds.end());
    Graph bg = check_gradients(t, t.node_n("SliceGrad", ins, 1, {}, kGraphrunDomain)[0]);
    EXPECT_EQ(count_ops(bg, "Slice"), 1);
  }
  {
    TestGraph t;
    const std::string dy = t.param("dy", {3, 2}, 1);
    t.g.initializers["idx"] = Tensor::from_vector<int64_t>({3, 2}, {0, 3, 2, 2, 1, 0});
    check_gradients(t, t.node_n("GatherElementsGrad", {dy, "idx", const_i64(t, "shape", {3, 4})}, 1,
                                {{"axis", A::Int(1)}}, kGraphrunDomain)[0]);
  }
  for (int64_t batch_dims : {0, 1}) {
    TestGraph t;
    const std::string dy = t.param("dy", batch_dims ? Shape{2, 4} : Shape{3, 4}, 1);
    t.g.initializers["idx"] = batch_dims ? Tensor::from_vector<int64_t>({2, 1}, {2, 0})
                                         : Tensor::from_vector<int64_t>({3, 2}, {1, 2, 0, 0, 1, 2});
    check_gradients(t, t.node_n("GatherNDGrad", {dy, "idx", const_i64(t, "shape", {2, 3, 4})}, 1,
                                {{"batch_dims", A::Int(batch_dims)}}, kGraphrunDomain)[0]);
  }
}

// Second derivatives through the loss gradients (double backprop): SoftmaxCrossEntropyLossGrad w.r.t. dloss and,
// through the forward's log_prob, the scores; NegativeLogLikelihoodLossGrad w.r.t. dloss. Every reduction, class
// weights, an ignored label, and positions after the class axis.
TEST(GradRules, LossGradientsOfSecondOrder) {
  for (const char* reduction : {"mean", "sum", "none"})
    for (bool spatial : {false, true}) {
      SCOPED_TRACE(std::string(reduction) + (spatial ? ", [N, C, D]" : ", [N, C]"));
      const Shape xs = spatial ? Shape{3, 4, 2} : Shape{5, 4};
      const Shape ls = spatial ? Shape{3, 2} : Shape{5};
      const std::vector<int64_t> labels =
          spatial ? std::vector<int64_t>{0, 3, -1, 2, 1, 1} : std::vector<int64_t>{2, -1, 0, 3, 3};
      const std::map<std::string, A> attrs{{"reduction", A::Str(reduction)}, {"ignore_index", A::Int(-1)}};
      const Shape dls = std::string(reduction) == "none" ? ls : Shape{};
      {
        TestGraph t;
        const std::string x = t.param("x", xs, 1, -2, 2), dloss = t.param("dloss", dls, 2, 0.5, 1.5);
        t.g.initializers["labels"] = Tensor::from_vector<int64_t>(ls, labels);
        t.g.initializers["w"] = random_f64({4}, 3, 0.5, 1.5);
        const auto fwd = t.node_n("SoftmaxCrossEntropyLoss", {x, "labels", "w"}, 2, attrs);
        const std::string dx =
            t.node_n("SoftmaxCrossEntropyLossGrad", {dloss, fwd[1], "labels", "w"}, 1, attrs, kGraphrunDomain)[0];
        Graph bg = check_gradients(t, dx, wrt({"x", "dloss"}));
        EXPECT_EQ(count_ops(bg, "NegativeLogLikelihoodLossGrad"), 1);
      }
      {
        TestGraph t;
        const std::string x = t.param("x", xs, 1, -2, 2), dloss = t.param("dloss", dls, 2, 0.5, 1.5);
        t.g.initializers["labels"] = Tensor::from_vector<int64_t>(ls, labels);
        t.g.initializers["w"] = random_f64({4}, 3, 0.5, 1.5);
        check_gradients(
            t, t.node_n("NegativeLogLikelihoodLossGrad", {dloss, x, "labels", "w"}, 1, attrs, kGraphrunDomain)[0],
            wrt({"x", "dloss"}));
      }
    }
}

TEST(GradRules, GlobalAveragePool) {
  for (ShapeInfo si : {ShapeInfo::Static, ShapeInfo::RankOnly}) {
    TestGraph t;
    check_gradients(t, t.node("GlobalAveragePool", {t.param("x", {2, 3, 4, 5}, 1)}), shapes(si));
  }
}

TEST(GradRules, BatchNormalizationTraining) {
  TestGraph t(15);
  std::string x = t.param("x", {4, 3, 3, 2}, 1, -2, 2);
  std::string s = t.param("scale", {3}, 2, 0.5, 1.5);
  std::string b = t.param("bias", {3}, 3);
  t.g.initializers["mean"] = random_f64({3}, 4);
  t.g.initializers["var"] = random_f64({3}, 5, 0.5, 1.5);
  auto outs = t.node_n("BatchNormalization", {x, s, b, "mean", "var"}, 3,
                       {{"training_mode", A::Int(1)}, {"epsilon", A::Float(1e-3f)}, {"momentum", A::Float(0.9f)}});
  Graph bg = check_gradients(t, outs[0], wrt({"x", "scale", "bias"}));
  EXPECT_EQ(count_ops(bg, "BatchNormalizationGrad"), 1);
}

TEST(GradRules, BatchNormalizationInference) {
  TestGraph t(15);
  std::string x = t.param("x", {2, 3, 4}, 1);
  std::string s = t.param("scale", {3}, 2, 0.5, 1.5);
  std::string b = t.param("bias", {3}, 3);
  t.g.initializers["mean"] = random_f64({3}, 4);
  t.g.initializers["var"] = random_f64({3}, 5, 0.5, 1.5);
  check_gradients(t, t.node("BatchNormalization", {x, s, b, "mean", "var"}), wrt({"x", "scale", "bias"}));
}

// Second derivatives through the normalisation gradients: BatchNormalizationGrad (training mode, statistics from X),
// InstanceNormalizationGrad (the same per image and channel) and LayerNormalizationGrad (statistics from the forward
// LayerNormalization, whose Mean and InvStdDev are X's): every output's gradient w.r.t. dY, X and the scale,
// numerically, at static and symbolic shapes.
TEST(GradRules, NormalizationGradientsOfSecondOrder) {
  auto flat_concat = [](TestGraph& t, const std::vector<std::string>& parts) {
    const std::string flat = t.node("Constant", {}, {{"value", A::Tens(Tensor::from_vector<int64_t>({1}, {-1}))}});
    std::vector<std::string> r;
    for (const auto& p : parts) r.push_back(t.node("Reshape", {p, flat}));
    return t.node("Concat", r, {{"axis", A::Int(0)}});
  };
  for (ShapeInfo si : {ShapeInfo::Static, ShapeInfo::RankOnly}) {
    SCOPED_TRACE(si == ShapeInfo::Static ? "static" : "symbolic");
    {
      TestGraph t;
      const std::string dy = t.param("dy", {4, 3, 3, 2}, 1), x = t.param("x", {4, 3, 3, 2}, 2, -2, 2),
                        s = t.param("scale", {3}, 3, 0.5, 1.5);
      const auto d = t.node_n("BatchNormalizationGrad", {dy, x, s}, 3, {{"epsilon", A::Float(1e-3f)}}, kGraphrunDomain);
      check_gradients(t, flat_concat(t, d), shapes(si));
      // dX alone, and dscale alone (a penalty on one of them).
      check_gradients(t, d[0], shapes(si));
      check_gradients(t, d[1], shapes(si));
    }
    for (const Shape& xs : {Shape{2, 3, 3, 2}, Shape{2, 3, 5}}) {
      TestGraph t;
      const std::string dy = t.param("dy", xs, 1), x = t.param("x", xs, 2, -2, 2),
                        s = t.param("scale", {3}, 3, 0.5, 1.5);
      const auto d =
          t.node_n("InstanceNormalizationGrad", {dy, x, s}, 3, {{"epsilon", A::Float(1e-3f)}}, kGraphrunDomain);
      check_gradients(t, flat_concat(t, d), shapes(si));
    }
    for (int64_t axis : {-1, 1, 0}) {
      SCOPED_TRACE("axis " + std::to_string(axis));
      TestGraph t(17);
      const Shape xs{2, 3, 4};
      const Shape ps(xs.begin() + (axis < 0 ? axis + 3 : axis), xs.end());
      const std::string x = t.param("x", xs, 1, -2, 2), s = t.param("scale", ps, 2, 0.5, 1.5),
                        b = t.param("bias", ps, 3), dy = t.param("dy", xs, 4);
      const auto f = t.node_n("LayerNormalization", {x, s, b}, 3,
                              {{"axis", A::Int(axis)}, {"epsilon", A::Float(1e-3f)}, {"stash_type", A::Int(11)}});
      const auto d =
          t.node_n("LayerNormalizationGrad", {dy, x, s, f[1], f[2]}, 3, {{"axis", A::Int(axis)}}, kGraphrunDomain);
      check_gradients(t, flat_concat(t, d), CheckOptions{si, {"dy", "x", "scale"}});
      check_gradients(t, d[0], CheckOptions{si, {"dy", "x", "scale"}});
    }
  }
}

TEST(GradRules, LayerNormalizationReusesTheForwardStatistics) {
  for (ShapeInfo si : {ShapeInfo::Static, ShapeInfo::RankOnly, ShapeInfo::None})
    for (int64_t axis : {-1, 1}) {
      TestGraph t(17);
      std::string x = t.param("x", {2, 3, 4}, 1, -2, 2);
      const Shape ps = axis == -1 ? Shape{4} : Shape{3, 4};
      std::string s = t.param("scale", ps, 2, 0.5, 1.5);
      std::string b = t.param("bias", ps, 3);
      std::string y = t.node("LayerNormalization", {x, s, b},
                             {{"axis", A::Int(axis)}, {"epsilon", A::Float(1e-3f)}, {"stash_type", A::Int(11)}});
      CheckOptions o = shapes(si);
      Graph bg = check_gradients(t, y, o);
      EXPECT_EQ(count_ops(bg, "LayerNormalizationGrad"), 1);
      EXPECT_EQ(count_ops(bg, "LayerNormalization"), 1) << "the statistics are computed once";
    }
  // Without B, and with only X needing a gradient.
  TestGraph t(17);
  std::string x = t.param("x", {3, 5}, 4);
  t.g.initializers["scale"] = random_f64({5}, 5);
  std::string y = t.node("LayerNormalization", {x, "scale"}, {{"stash_type", A::Int(11)}});
  check_gradients(t, y, wrt({"x"}));
}

TEST(GradRules, InstanceNormalization) {
  for (ShapeInfo si : {ShapeInfo::Static, ShapeInfo::RankOnly, ShapeInfo::None}) {
    TestGraph t(17);
    std::string x = t.param("x", {2, 3, 4}, 1, -2, 2);
    std::string s = t.param("scale", {3}, 2, 0.5, 1.5);
    std::string b = t.param("bias", {3}, 3);
    std::string y = t.node("InstanceNormalization", {x, s, b}, {{"epsilon", A::Float(1e-3f)}});
    Graph bg = check_gradients(t, y, shapes(si));
    EXPECT_EQ(count_ops(bg, "InstanceNormalizationGrad"), 1);
  }
}

// nn.GroupNorm as torch 1.13 exports it (opsets 13-17): Reshape to [N, G, -1], InstanceNormalization with
// constant unit scale and zero bias, Reshape back to Shape(x), then the affine Mul and Add per channel.
TEST(GradRules, GroupNormAsTorchExportsIt) {
  for (int64_t opset : {13, 17})
    for (ShapeInfo si : {ShapeInfo::Static, ShapeInfo::RankOnly}) {
      TestGraph t(opset);
      std::string x = t.param("x", {2, 4, 3, 3}, 1, -2, 2);
      std::string w = t.param("weight", {4, 1, 1}, 2, 0.5, 1.5);
      std::string b = t.param("bias", {4, 1, 1}, 3);
      t.g.initializers["groups"] = i64s({0, 2, -1});
      t.g.initializers["ones"] = Tensor::from_vector<double>({2}, {1, 1});
      t.g.initializers["zeros"] = Tensor::from_vector<double>({2}, {0, 0});
      std::string r = t.node("Reshape", {x, "groups"});
      std::string in = t.node("InstanceNormalization", {r, "ones", "zeros"}, {{"epsilon", A::Float(1e-5f)}});
      std::string back = t.node("Reshape", {in, t.node("Shape", {x})});
      std::string y = t.node("Add", {t.node("Mul", {back, w}), b});
      CheckOptions o = shapes(si);
      o.wrt = {"x", "weight", "bias"};
      check_gradients(t, y, o);
    }
}

// Resize as F.interpolate / nn.Upsample export it (scales or sizes; nearest with torch's floor, linear with
// half_pixel / align_corners / pytorch_half_pixel), and the other modes ONNX defines, up and down.
TEST(GradRules, ResizeEveryModeWithScalesOrSizes) {
  struct Case { const char* mode; const char* coord; const char* nearest; };
  const std::vector<Case> cases = {
      {"nearest", "asymmetric", "floor"},          {"nearest", "half_pixel", "round_prefer_floor"},
      {"nearest", "align_corners", "round_prefer_ceil"}, {"nearest", "pytorch_half_pixel", "ceil"},
      {"nearest", "tf_half_pixel_for_nn", "floor"}, {"linear", "half_pixel", ""},
      {"linear", "align_corners", ""},             {"linear", "pytorch_half_pixel", ""},
      {"linear", "asymmetric", ""},                {"cubic", "half_pixel", ""}};
  for (const Case& c : cases)
    for (bool by_sizes : {false, true})
      for (bool up : {true, false})
        for (ShapeInfo si : {ShapeInfo::Static, ShapeInfo::RankOnly, ShapeInfo::None}) {
          SCOPED_TRACE(std::string(c.mode) + " " + c.coord + " " + c.nearest + (by_sizes ? " sizes" : " scales") +
                       (up ? " up" : " down") + " shapes " + std::to_string(static_cast<int>(si)));
          TestGraph t(13);
          std::string x = t.param("x", {1, 2, 4, 5}, 1, -2, 2);
          std::map<std::string, A> attrs{{"mode", A::Str(c.mode)}, {"coordinate_transformation_mode", A::Str(c.coord)}};
          if (*c.nearest) attrs["nearest_mode"] = A::Str(c.nearest);
          std::vector<std::string> ins{x, ""};
          if (by_sizes) {
            t.g.initializers["sizes"] = up ? i64s({1, 2, 7, 10}) : i64s({1, 2, 3, 2});
            ins.insert(ins.end(), {"", "sizes"});
          } else {
            Tensor s(DType::F32, {4});
            const std::vector<float> v = up ? std::vector<float>{1, 1, 2, 1.5f} : std::vector<float>{1, 1, 0.5f, 0.6f};
            std::copy(v.begin(), v.end(), s.data<float>());
            t.g.initializers["scales"] = s;
            ins.push_back("scales");
          }
          Graph bg = check_gradients(t, t.node("Resize", ins, attrs), shapes(si));
          EXPECT_EQ(count_ops(bg, "ResizeGrad"), 1);
        }
}

// ResizeGrad's own gradient (second derivatives through an upsampling network): Resize of the incoming gradient at
// the same scales, or at dY's size where the forward gave sizes, at opsets 11 and 13 (whose Resize takes an empty
// roi and scales where 11 needs empty tensors).
TEST(GradRules, ResizeGradOfSecondOrder) {
  struct Case {
    const char* mode;
    const char* coord;
  };
  for (const Case& c : {Case{"nearest", "asymmetric"}, Case{"nearest", "half_pixel"}, Case{"linear", "half_pixel"},
                        Case{"linear", "align_corners"}, Case{"cubic", "pytorch_half_pixel"}})
    for (int64_t opset : {11, 13})
      for (bool by_sizes : {false, true})
        for (bool up : {true, false}) {
          SCOPED_TRACE(std::string(c.mode) + " " + c.coord + " opset " + std::to_string(opset) +
                       (by_sizes ? " sizes" : " scales") + (up ? " up" : " down"));
          TestGraph t(opset);
          const Shape dys = up ? Shape{1, 2, 8, 7} : Shape{1, 2, 2, 3};
          std::map<std::string, A> attrs{{"mode", A::Str(c.mode)}, {"coordinate_transformation_mode", A::Str(c.coord)}};
          std::vector<std::string> ins{t.param("dy", dys, 1, -2, 2), const_i64(t, "shape", {1, 2, 4, 5})};
          if (!by_sizes) {
            Tensor s(DType::F32, {4});
            const std::vector<float> v = up ? std::vector<float>{1, 1, 2, 1.5f} : std::vector<float>{1, 1, 0.5f, 0.6f};
            std::copy(v.begin(), v.end(), s.data<float>());
            t.g.initializers["scales"] = s;
            ins.insert(ins.end(), {"", "scales"});
          }
          Graph bg = check_gradients(t, t.node_n("ResizeGrad", ins, 1, attrs, kGraphrunDomain)[0]);
          EXPECT_EQ(count_ops(bg, "Resize"), 1);
        }
}

// GridSample: every mode, padding and corner convention, the grid partly outside [-1, 1] so that every padding
// acts; the gradients of X and of the grid against central differences (nearest's grid gradient is zero, as the
// differences say: the samples stay on their pixels).
TEST(GradRules, GridSampleEveryModeAndPadding) {
  for (const char* mode : {"bilinear", "nearest", "bicubic"})
    for (const char* padding : {"zeros", "border", "reflection"})
      for (int align : {0, 1})
        for (ShapeInfo si : {ShapeInfo::Static, ShapeInfo::RankOnly}) {
          SCOPED_TRACE(std::string(mode) + " " + padding + " align_corners " + std::to_string(align));
          TestGraph t(16);
          std::string x = t.param("x", {2, 3, 4, 5}, 7, -2, 2);
          std::string grid = t.param("grid", {2, 3, 4, 2}, 8, -1.4, 1.4);
          Graph bg = check_gradients(t, t.node("GridSample", {x, grid}, {{"mode", A::Str(mode)},
                                                                         {"padding_mode", A::Str(padding)},
                                                                         {"align_corners", A::Int(align)}}),
                                     shapes(si));
          EXPECT_EQ(count_ops(bg, "GridSampleGrad"), 1);
        }
}

// GridSample of a volume (opset 20; torch's 5-D F.grid_sample): trilinear and nearest, every padding and corner
// convention, the grid partly outside [-1, 1]; the gradients of X and of the grid (its x, y and z) against central
// differences.
TEST(GradRules, GridSampleOfAVolume) {
  for (const char* mode : {"bilinear", "nearest"})
    for (const char* padding : {"zeros", "border", "reflection"})
      for (int align : {0, 1})
        for (ShapeInfo si : {ShapeInfo::Static, ShapeInfo::RankOnly}) {
          SCOPED_TRACE(std::string(mode) + " " + padding + " align_corners " + std::to_string(align));
          TestGraph t(16);
          std::string x = t.param("x", {2, 2, 3, 4, 5}, 7, -2, 2);
          std::string grid = t.param("grid", {2, 2, 3, 2, 3}, 8, -1.4, 1.4);
          Graph bg = check_gradients(t, t.node("GridSample", {x, grid}, {{"mode", A::Str(mode)},
                                                                         {"padding_mode", A::Str(padding)},
                                                                         {"align_corners", A::Int(align)}}),
                                     shapes(si));
          EXPECT_EQ(count_ops(bg, "GridSampleGrad"), 1);
        }
}

// RoiAlign: the gradient of X against central differences, in modes avg and max (the largest weighted tap), in both
// coordinate modes, with a fixed and an adaptive sampling grid, regions partly outside the image (their outside
// samples read 0, the border ones clamp) and two regions on one image; the regions and batch indices are inputs, as
// torchvision differentiates neither.
TEST(GradRules, RoiAlignBothModesBothCoordinateModes) {
  for (const char* mode : {"avg", "max"})
    for (const char* ct : {"half_pixel", "output_half_pixel"})
      for (int64_t ratio : {2, 0})
        for (ShapeInfo si : {ShapeInfo::Static, ShapeInfo::RankOnly}) {
          SCOPED_TRACE(std::string(mode) + " " + ct + " sampling_ratio " + std::to_string(ratio));
          TestGraph t(16);
          std::string x = t.param("x", {2, 3, 6, 5}, 9, -2, 2);
          // Box corners off the sampling points' pixel boundaries, so that the differences stay within one tap.
          std::string rois = t.input("rois", Tensor::from_vector<double>({3, 4}, {0.3, 0.6, 4.1, 5.3, -1.7, 1.2, 3.3,
                                                                                  7.4, 2.2, 0.9, 2.9, 2.6}));
          std::string batch = t.input("batch", i64s({0, 1, 0}));
          Graph bg = check_gradients(t,
                                     t.node("RoiAlign", {x, rois, batch},
                                            {{"output_height", A::Int(2)},
                                             {"output_width", A::Int(3)},
                                             {"sampling_ratio", A::Int(ratio)},
                                             {"spatial_scale", A::Float(0.9f)},
                                             {"coordinate_transformation_mode", A::Str(ct)},
                                             {"mode", A::Str(mode)}}),
                                     shapes(si));
          EXPECT_EQ(count_ops(bg, "RoiAlignGrad"), 1);
        }
}

// RoiAlignGrad's own gradient (mode avg, linear in dY): RoiAlign of the incoming gradient over the same regions,
// against central differences in dY, in both coordinate modes at opset 16 and at opset 10 (no coordinate mode:
// output_half_pixel), with a fixed and an adaptive sampling grid; X's values do not enter it (a zero gradient, as
// the differences say). Mode max has no rule: one line naming the node.
TEST(GradRules, RoiAlignGradOfSecondOrder) {
  struct Case {
    int64_t opset;
    const char* ct;
  };
  for (const Case& c : {Case{16, "half_pixel"}, Case{16, "output_half_pixel"}, Case{10, "output_half_pixel"}})
    for (int64_t ratio : {2, 0}) {
      SCOPED_TRACE(std::string(c.ct) + " opset " + std::to_string(c.opset) + " sampling_ratio " +
                   std::to_string(ratio));
      TestGraph t(c.opset);
      std::string dy = t.param("dy", {3, 3, 2, 3}, 4, -2, 2);
      std::string x = t.param("x", {2, 3, 6, 5}, 9, -2, 2);
      std::string rois = t.input(
          "rois", Tensor::from_vector<double>({3, 4}, {0.3, 0.6, 4.1, 5.3, -1.7, 1.2, 3.3, 7.4, 2.2, 0.9, 2.9, 2.6}));
      std::string batch = t.input("batch", i64s({0, 1, 0}));
      Graph bg = check_gradients(t, t.node_n("RoiAlignGrad", {dy, x, rois, batch}, 1,
                                             {{"output_height", A::Int(2)},
                                              {"output_width", A::Int(3)},
                                              {"sampling_ratio", A::Int(ratio)},
                                              {"spatial_scale", A::Float(0.9f)},
                                              {"coordinate_transformation_mode", A::Str(c.ct)},
                                              {"mode", A::Str("avg")}},
                                             kGraphrunDomain)[0]);
      EXPECT_EQ(count_ops(bg, "RoiAlign"), 1);
    }
  TestGraph t(16);
  std::string dy = t.param("dy", {1, 1, 1, 1}, 4);
  std::string rois = t.input("rois", Tensor::from_vector<double>({1, 4}, {0, 0, 2, 2}));
  std::string out = t.node_n("RoiAlignGrad", {dy, t.param("x", {1, 1, 3, 3}, 9), rois, t.input("batch", i64s({0}))}, 1,
                             {{"mode", A::Str("max")}}, kGraphrunDomain)[0];
  try {
    check_gradients(t, out);
    ADD_FAILURE() << "mode max differentiated";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("a rule in mode avg only"), std::string::npos) << e.what();
  }
}

// MaxRoiPool: the gradient of X against central differences (dY at each bin's maximum): bins that overlap, a region
// reaching past the image, one thinner than a bin (its bins repeat rows), two regions on one image; the regions are
// an input, as torchvision differentiates none.
TEST(GradRules, MaxRoiPoolAtEachBinsMaximum) {
  for (ShapeInfo si : {ShapeInfo::Static, ShapeInfo::RankOnly}) {
    TestGraph t(16);
    std::string x = t.param("x", {2, 3, 7, 6}, 21, -2, 2);
    std::string rois = t.input("rois", Tensor::from_vector<double>({3, 5}, {0, 0.4, 1.1, 5.2, 6.3, 1, -2.6, 3.2, 9.4,
                                                                            12.1, 0, 2.2, 0.6, 2.4, 7.3}));
    Graph bg = check_gradients(
        t, t.node("MaxRoiPool", {x, rois}, {{"pooled_shape", A::Ints({2, 3})}, {"spatial_scale", A::Float(0.8f)}}),
        shapes(si));
    EXPECT_EQ(count_ops(bg, "MaxRoiPoolGrad"), 1);
  }
}

// DFT: the adjoint (the transform the other way, unscaled) against central differences: a real input onesided with
// dft_length padding, a real input truncated by dft_length along an inner axis, a complex input inverse along a
// negative axis. The transformed axis and the last dimension are static; the batch may be symbolic.
TEST(GradRules, DftRealOnesidedPaddedTruncatedAndInverse) {
  struct Case {
    Shape x;
    int64_t axis, length, inverse, onesided;
  };
  for (const Case& c : {Case{{2, 6, 1}, 1, 9, 0, 1}, Case{{2, 3, 7, 1}, 2, 4, 0, 0}, Case{{2, 5, 3, 2}, -3, -1, 1, 0},
                        Case{{3, 8, 1}, 1, -1, 0, 1}}) {
    SCOPED_TRACE(shape_str(c.x) + " axis " + std::to_string(c.axis));
    TestGraph t(17);
    std::string x = t.param("x", c.x, 31, -2, 2);
    std::vector<std::string> ins{x};
    if (c.length > 0)
      ins.push_back(t.node("Constant", {}, {{"value", A::Tens(Tensor::from_vector<int64_t>({}, {c.length}))}}));
    Graph bg = check_gradients(t, t.node("DFT", ins, {{"axis", A::Int(c.axis)}, {"inverse", A::Int(c.inverse)},
                                                      {"onesided", A::Int(c.onesided)}}));
    EXPECT_GE(count_ops(bg, "DFT"), 2);  // the forward and its adjoint
  }
}

// STFT: the signal's gradient (each frame's adjoint, windowed, added back where the frame was read: frames overlap)
// and the window's, against central differences; a real signal onesided with a window, one with frame_length and no
// window, a complex signal two-sided.
TEST(GradRules, StftSignalAndWindow) {
  for (int form = 0; form < 3; ++form) {
    SCOPED_TRACE("form " + std::to_string(form));
    TestGraph t(17);
    std::string x = t.param("x", {2, 21, form == 2 ? 2 : 1}, 41 + form, -1, 1);
    std::string step = t.node("Constant", {}, {{"value", A::Tens(Tensor::from_vector<int64_t>({}, {3}))}});
    std::vector<std::string> ins{x, step};
    if (form == 1) {
      ins.push_back("");
      ins.push_back(t.node("Constant", {}, {{"value", A::Tens(Tensor::from_vector<int64_t>({}, {8}))}}));
    } else {
      ins.push_back(t.param("window", {8}, 51 + form, 0.2, 1));
    }
    check_gradients(t, t.node("STFT", ins, {{"onesided", A::Int(form == 2 ? 0 : 1)}}));
  }
}

// MaxUnpool: each X element's gradient is dY where its index put it, against central differences; with output_shape
// too (the unpooled result padded at the end of each spatial axis, so the index lands elsewhere in Y).
TEST(GradRules, MaxUnpoolGathersDyAtTheIndices) {
  for (bool with_shape : {false, true}) {
    SCOPED_TRACE(with_shape ? "output_shape" : "default shape");
    TestGraph t(17);
    std::string x = t.param("x", {1, 2, 2, 3}, 61, -2, 2);
    std::vector<int64_t> at;  // a maximum in each 2x2 window of the [1, 2, 4, 6] unpooled tensor, as MaxPool's
    for (int64_t c = 0; c < 2; ++c)
      for (int64_t i = 0; i < 2; ++i)
        for (int64_t j = 0; j < 3; ++j) at.push_back(c * 24 + (2 * i + (i + j + c) % 2) * 6 + 2 * j + (j + c) % 2);
    std::vector<std::string> ins{x, t.node("Constant", {}, {{"value", A::Tens(Tensor::from_vector<int64_t>({1, 2, 2, 3}, at))}})};
    if (with_shape)
      ins.push_back(t.node("Constant", {}, {{"value", A::Tens(Tensor::from_vector<int64_t>({4}, {1, 2, 5, 7}))}}));
    check_gradients(t, t.node("MaxUnpool", ins, {{"kernel_shape", A::Ints({2, 2})}, {"strides", A::Ints({2, 2})}}));
  }
}

// Det: the cofactor matrix, on a batch, a 1x1, and on singular matrices (rank n-1: cofactors from the minors;
// rank n-2: all zero), where the numeric gradient is as well defined as anywhere (det is a polynomial).
TEST(GradRules, DetOnABatchAndOnSingularMatrices) {
  for (const Shape& s : {Shape{2, 3, 3}, Shape{1, 1}, Shape{4, 4}, Shape{2, 1, 5, 5}}) {
    SCOPED_TRACE(shape_str(s));
    TestGraph t(11);
    Graph bg = check_gradients(t, t.node("Det", {t.param("x", s, 21, -2, 2)}));
    EXPECT_EQ(count_ops(bg, "DetGrad"), 1);
  }
  const std::vector<std::vector<double>> singular = {
      {1, 2, 3, 4, 5, 6, 5, 7, 9},           // row 3 = row 1 + row 2 (rank 2)
      {0.3, -1.1, 2, 0.6, -2.2, 4, 1, 0.5, -0.25},  // row 2 = 2 row 1
      {1, 2, 3, 2, 4, 6, -1, -2, -3},        // rank 1: every cofactor 0
      // row 3 = 0.3 row 1 + 0.7 row 2 in rounded decimals: its last pivot is rounding, not 0
      {0.1, 0.7, 0.3, 0.2, 0.4, 0.9, 0.3 * 0.1 + 0.7 * 0.2, 0.3 * 0.7 + 0.7 * 0.4, 0.3 * 0.3 + 0.7 * 0.9}};
  for (const auto& v : singular) {
    TestGraph t(11);
    Tensor x(DType::F64, {3, 3});
    std::copy(v.begin(), v.end(), x.data<double>());
    check_gradients(t, t.node("Det", {t.param("x", x)}));
  }
}

// LRN: odd and even windows (the spec's window is floor((size - 1) / 2) channels before, the rest after), a
// window wider than the channels, size 1, 3-D to 5-D inputs, with every dimension symbolic too.
TEST(GradRules, LrnEveryWindow) {
  for (ShapeInfo si : {ShapeInfo::Static, ShapeInfo::RankOnly})
    for (const auto& [shape, size] : std::vector<std::pair<Shape, int64_t>>{
             {{2, 5, 3, 2}, 3}, {{1, 4, 6}, 2}, {{2, 3, 2, 2, 2}, 7}, {{1, 6, 2, 3}, 4}, {{2, 3, 4}, 1}}) {
      SCOPED_TRACE(shape_str(shape) + " size " + std::to_string(size));
      TestGraph t(13);
      check_gradients(t,
                      t.node("LRN", {t.param("x", shape, 31, -2, 2)},
                             {{"size", A::Int(size)}, {"alpha", A::Float(0.4f)}, {"beta", A::Float(0.7f)},
                              {"bias", A::Float(1.2f)}}),
                      shapes(si));
    }
}

TEST(GradRules, ResizeOpset10AndUpsample) {
  for (const char* mode : {"nearest", "linear"}) {
    SCOPED_TRACE(mode);
    Tensor s(DType::F32, {4});
    const std::vector<float> v{1, 1, 2, 3};
    std::copy(v.begin(), v.end(), s.data<float>());
    TestGraph t10(10);
    t10.g.initializers["scales"] = s;
    check_gradients(t10, t10.node("Resize", {t10.param("x", {1, 2, 3, 2}, 1), "scales"}, {{"mode", A::Str(mode)}}));
    TestGraph t9(9);
    t9.g.initializers["scales"] = s;
    check_gradients(t9, t9.node("Upsample", {t9.param("x", {1, 2, 3, 2}, 1), "scales"}, {{"mode", A::Str(mode)}}));
    TestGraph t7(7);
    check_gradients(t7, t7.node("Upsample", {t7.param("x", {1, 2, 3, 2}, 1)},
                                {{"mode", A::Str(mode)}, {"scales", A::Floats(v)}}));
  }
}

// Duplicate and negative indices: the gradient adds every gathered copy back (ScatterElements with reduction
// add from opset 16, GatherElementsGrad before).
TEST(GradRules, GatherElementsAddsDuplicates) {
  for (int64_t opset : {13, 16})
    for (int64_t axis : {0, 1, -1})
      for (ShapeInfo si : {ShapeInfo::Static, ShapeInfo::RankOnly, ShapeInfo::None}) {
        SCOPED_TRACE("opset " + std::to_string(opset) + " axis " + std::to_string(axis));
        TestGraph t(opset);
        std::string x = t.param("x", {3, 4}, 1);
        t.g.initializers["idx"] = axis == 0 ? i64s({0, 2, 2, -1, 1, 1, 0, 0}, {2, 4}) : i64s({3, 3, -1, 0, 1, 1}, {3, 2});
        Graph bg = check_gradients(t, t.node("GatherElements", {x, "idx"}, {{"axis", A::Int(axis)}}), shapes(si));
        EXPECT_EQ(count_ops(bg, opset >= 16 ? "ScatterElements" : "GatherElementsGrad"), 1);
      }
}

TEST(GradRules, ScatterElementsAndScatterND) {
  for (ShapeInfo si : {ShapeInfo::Static, ShapeInfo::RankOnly, ShapeInfo::None}) {
    for (int64_t opset : {13, 16}) {
      // reduction none: unique indices.
      TestGraph t(opset);
      std::string d = t.param("data", {3, 4}, 1), u = t.param("upd", {2, 4}, 2);
      t.g.initializers["idx"] = i64s({1, 0, 2, -3, 2, 2, 1, 1}, {2, 4});
      check_gradients(t, t.node("ScatterElements", {d, "idx", u}, {{"axis", A::Int(0)}}), shapes(si));
      TestGraph nd(opset);
      std::string d2 = nd.param("data", {4, 3}, 3), u2 = nd.param("upd", {2, 3}, 4);
      nd.g.initializers["idx"] = i64s({2, -1}, {2, 1});
      check_gradients(nd, nd.node("ScatterND", {d2, "idx", u2}), shapes(si));
    }
    // reduction add (opset 16): duplicates add up.
    TestGraph t(16);
    std::string d = t.param("data", {3, 4}, 1), u = t.param("upd", {3, 2}, 2);
    t.g.initializers["idx"] = i64s({1, 1, 0, 3, 2, 2}, {3, 2});
    check_gradients(t, t.node("ScatterElements", {d, "idx", u}, {{"axis", A::Int(1)}, {"reduction", A::Str("add")}}),
                    shapes(si));
    TestGraph nd(16);
    std::string d2 = nd.param("data", {2, 3, 2}, 3), u2 = nd.param("upd", {3, 2}, 4);
    nd.g.initializers["idx"] = i64s({0, 1, 0, 1, 1, 2}, {3, 2});
    check_gradients(nd, nd.node("ScatterND", {d2, "idx", u2}, {{"reduction", A::Str("add")}}), shapes(si));
  }
  // reduction none with updates that collide (torch's scatter_add below opset 16 and index_put export
  // this): they apply in index order, so only each element's last writer has a gradient. With constant
  // indices (-1 and 3 are one target) and with indices computed at run time (through Identity, which
  // the rule cannot read); constant indices without collisions need no mask.
  for (ShapeInfo si : {ShapeInfo::Static, ShapeInfo::RankOnly, ShapeInfo::None})
  for (bool runtime : {false, true}) {
    TestGraph t(13);
    std::string d = t.param("data", {2, 4}, 1), u = t.param("upd", {2, 3}, 2);
    t.g.initializers["idx"] = i64s({0, 3, -1, 2, 2, 2}, {2, 3});
    std::string idx = runtime ? t.node("Identity", {"idx"}) : "idx";
    Graph bg = check_gradients(t, t.node("ScatterElements", {d, idx, u}, {{"axis", A::Int(1)}}), shapes(si));
    EXPECT_EQ(count_ops(bg, "Equal"), 1);
    TestGraph nd(13);
    std::string d2 = nd.param("data", {3, 2}, 3), u2 = nd.param("upd", {4, 2}, 4);
    nd.g.initializers["idx"] = i64s({2, 0, -1, 2}, {4, 1});
    std::string idx2 = runtime ? nd.node("Identity", {"idx"}) : "idx";
    bg = check_gradients(nd, nd.node("ScatterND", {d2, idx2, u2}), shapes(si));
    EXPECT_EQ(count_ops(bg, "Equal"), 1);
  }
  {
    TestGraph t(13);
    std::string d = t.param("data", {3, 4}, 1), u = t.param("upd", {2, 4}, 2);
    t.g.initializers["idx"] = i64s({1, 0, 2, -3, 2, 2, 1, 1}, {2, 4});
    Graph bg = check_gradients(t, t.node("ScatterElements", {d, "idx", u}, {{"axis", A::Int(0)}}));
    EXPECT_EQ(count_ops(bg, "Equal"), 0);
  }
  TestGraph t(16);
  std::string d = t.param("data", {3}, 1), u = t.param("upd", {1}, 2);
  t.g.initializers["idx"] = i64s({1});
  try {
    check_gradients(t, t.node("ScatterElements", {d, "idx", u}, {{"reduction", A::Str("mul")}}));
    ADD_FAILURE() << "expected an error for reduction mul";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("reduction 'mul'"), std::string::npos) << e.what();
  }
}

struct EinsumCase { const char* eq; std::vector<Shape> shapes; };

// Each equation's numeric check with static, rank-only and unknown shapes.
void check_einsum_gradients(const std::vector<EinsumCase>& cases) {
  for (const EinsumCase& c : cases)
    for (ShapeInfo si : {ShapeInfo::Static, ShapeInfo::RankOnly, ShapeInfo::None}) {
      SCOPED_TRACE(c.eq);
      TestGraph t(13);
      std::vector<std::string> ins;
      for (size_t i = 0; i < c.shapes.size(); ++i)
        ins.push_back(t.param("x" + std::to_string(i), c.shapes[i], 10 + i));
      check_gradients(t, t.node("Einsum", ins, {{"equation", A::Str(c.eq)}}), shapes(si));
    }
}

// The contractions torch models write (attention scores and their weighted sum, bilinear forms, batched
// matmul with "..." broadcast), a transpose, and a label summed away by the forward.
TEST(GradRules, EinsumContractions) {
  const std::vector<EinsumCase> cases = {
      {"bhid,bhjd->bhij", {{2, 2, 3, 4}, {2, 2, 5, 4}}},
      {"bhij,bhjd->bhid", {{2, 2, 3, 5}, {2, 2, 5, 4}}},
      {"ij,jk", {{3, 4}, {4, 2}}},
      {"bi,ij,bj->b", {{2, 3}, {3, 4}, {2, 4}}},
      {"...ij,...jk->...ik", {{2, 3, 4}, {4, 5}}},
      {"...ij,...jk->...ik", {{1, 3, 4}, {2, 4, 5}}},
      {"ij->ji", {{3, 4}}},
      {"ijk,k->i", {{2, 3, 4}, {4}}},
      {"i,j->ij", {{3}, {4}}}};
  check_einsum_gradients(cases);
  TestGraph t(13);
  std::string x = t.param("x", {2, 3, 3}, 1);
  try {
    check_gradients(t, t.node("Einsum", {x}, {{"equation", A::Str("...ii->...i")}}));
    ADD_FAILURE() << "expected an error for a diagonal beside '...'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("repeats"), std::string::npos) << e.what();
  }
}

// Operands with a repeated label reach the output only through their diagonal: the gradient is zero
// off it (a numeric check perturbs those elements too).
TEST(GradRules, EinsumDiagonals) {
  const std::vector<EinsumCase> cases = {{"ii->i", {{3, 3}}},
                                         {"bii->bi", {{2, 3, 3}}},
                                         {"ii->", {{3, 3}}},                    // the trace: i summed away
                                         {"iii->i", {{2, 2, 2}}},
                                         {"bii,bij->bj", {{2, 3, 3}, {2, 3, 4}}},
                                         {"ij,jj->i", {{3, 4}, {4, 4}}},
                                         {"iji->j", {{3, 2, 3}}}};
  check_einsum_gradients(cases);
}

TEST(GradRules, DropoutUsesTheForwardMask) {
  TestGraph t(13);
  std::string x = t.param("x", {4, 6}, 1);
  t.g.initializers["ratio"] = Tensor::scalar<double>(0.25);
  t.g.initializers["training"] = Tensor::scalar<bool>(true);
  std::string y = t.node("Dropout", {x, "ratio", "training"});
  // The mask is random: compare with the same forward run's mask instead of central differences.
  Graph g = t.g;
  g.outputs = {y};
  g.nodes.push_back(Node{"sum", "ReduceSum", "", {y}, {"loss"}, {{"keepdims", A::Int(0)}}});
  autodiff::BackwardOptions bo;
  bo.params = {"x"};
  Graph bg = autodiff::backward(g, bo);
  const Node* drop = nullptr;
  for (const Node& n : bg.nodes)
    if (n.op_type == "Dropout") drop = &n;
  ASSERT_TRUE(drop && drop->has_output(1)) << "the forward Dropout must save its mask";
  runtime::ExecOptions eo;
  eo.fetch = {"x_grad", drop->outputs[1]};
  runtime::Executor ex(bg, eo);
  auto r = ex.run({});
  const bool* mask = r.at(drop->outputs[1]).data<bool>();
  const double* dx = r.at("x_grad").data<double>();
  int kept = 0;
  for (int i = 0; i < 24; ++i) {
    EXPECT_DOUBLE_EQ(dx[i], mask[i] ? 1 / 0.75 : 0.0) << i;
    kept += mask[i];
  }
  EXPECT_GT(kept, 0);
  EXPECT_LT(kept, 24);
}

// torch exports nn.Dropout(0.0) in training mode as Dropout(x, 0.0, true): the gradient is dY itself, the
// forward saves no mask, and the executor's graph drops the node (remove_internal_noops).
TEST(GradRules, DropoutOfRatioZeroInTrainingIsIdentityWithoutAMask) {
  TestGraph t(13);
  std::string x = t.param("x", {3, 4}, 1);
  t.g.initializers["ratio"] = Tensor::scalar<float>(0.f);
  t.g.initializers["training"] = Tensor::scalar<bool>(true);
  const std::string y = t.node("Dropout", {x, "ratio", "training"});
  check_gradients(t, y);
  Graph g = t.g;
  g.outputs = {"loss"};
  g.nodes.push_back(Node{"sum", "ReduceSum", "", {y}, {"loss"}, {{"keepdims", A::Int(0)}}});
  autodiff::BackwardOptions bo;
  bo.params = {"x"};
  const Graph bg = autodiff::backward(g, bo);
  for (const Node& n : bg.nodes) {
    if (n.op_type == "Dropout") {
      EXPECT_FALSE(n.has_output(1)) << "a mask saved for nothing";
    }
    EXPECT_NE(n.op_type, "Cast") << n.describe();
  }
  const Graph ex = passes::remove_internal_noops(bg);
  for (const Node& n : ex.nodes) EXPECT_NE(n.op_type, "Dropout");
}

TEST(GradRules, DropoutInferenceIsIdentity) {
  TestGraph t(13);
  check_gradients(t, t.node("Dropout", {t.param("x", {3, 4}, 1)}));
}

// ---- shape

TEST(GradRules, ReshapeFlattenSqueezeUnsqueeze) {
  for (int64_t opset : {11, 13}) {
    TestGraph t(opset);
    std::string x = t.param("x", {2, 3, 4}, 1);
    t.g.initializers["shape"] = i64s({4, 1, 6});
    std::string r = t.node("Reshape", {x, "shape"});
    std::string s, u;
    if (opset >= 13) {
      t.g.initializers["ax1"] = i64s({1});
      t.g.initializers["ax0"] = i64s({0, 3});
      s = t.node("Squeeze", {r, "ax1"});
      u = t.node("Unsqueeze", {s, "ax0"});
    } else {
      s = t.node("Squeeze", {r}, {{"axes", A::Ints({1})}});
      u = t.node("Unsqueeze", {s}, {{"axes", A::Ints({0, 3})}});
    }
    std::string f = t.node("Flatten", {u}, {{"axis", A::Int(2)}});
    for (ShapeInfo si : {ShapeInfo::Static, ShapeInfo::RankOnly}) check_gradients(t, f, shapes(si));
  }
}

TEST(GradRules, Transpose) {
  TestGraph t;
  std::string x = t.param("x", {2, 3, 4}, 1);
  std::string y = t.node("Transpose", {x}, {{"perm", A::Ints({1, 2, 0})}});
  check_gradients(t, t.node("Transpose", {y}));
}

TEST(GradRules, ConcatAndSplit) {
  for (int64_t opset : {11, 13}) {
    TestGraph t(opset);
    std::string a = t.param("a", {2, 3, 4}, 1), b = t.param("b", {2, 2, 4}, 2), c = t.param("c", {2, 1, 4}, 3);
    std::string cat = t.node("Concat", {a, b, c}, {{"axis", A::Int(-2)}});
    std::vector<std::string> parts;
    if (opset >= 13) {
      t.g.initializers["split"] = i64s({1, 4, 1});
      parts = t.node_n("Split", {cat, "split"}, 3, {{"axis", A::Int(1)}});
    } else {
      parts = t.node_n("Split", {cat}, 3, {{"axis", A::Int(1)}, {"split", A::Ints({1, 4, 1})}});
    }
    // Only two of the three parts reach the loss: the third gets a zero gradient.
    check_gradients(t, t.node("Mul", {parts[0], parts[2]}));
  }
}

TEST(GradRules, ConcatOnlyOneInputNeedsGradient) {
  TestGraph t;
  std::string a = t.param("a", {2, 3}, 1);
  std::string x = t.input("x", random_f64({2, 5}, 2));
  Graph bg = check_gradients(t, t.node("Concat", {x, a}, {{"axis", A::Int(1)}}));
  EXPECT_EQ(count_ops(bg, "Slice"), 1);  // none for the input x
}

TEST(GradRules, SliceStepsAndNegativeIndices) {
  struct Case { std::vector<int64_t> starts, ends, axes, steps; };
  std::vector<Case> cases = {
      {{1}, {4}, {1}, {1}},
      {{0, 1}, {INT64_MAX, -1}, {2, 1}, {2, 1}},
      {{-1}, {-100}, {1}, {-2}},
      {{5, 0}, {0, 6}, {2, 0}, {-1, 3}},
      {{1}, {INT64_MAX}, {-1}, {1}}};
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i));
    TestGraph t;
    std::string x = t.param("x", {3, 5, 7}, 1);
    const auto& c = cases[i];
    t.g.initializers["st"] = i64s(c.starts);
    t.g.initializers["en"] = i64s(c.ends);
    t.g.initializers["ax"] = i64s(c.axes);
    t.g.initializers["sp"] = i64s(c.steps);
    check_gradients(t, t.node("Slice", {x, "st", "en", "ax", "sp"}));
  }
}

// torch's chunk: bounds computed from Shape at run time; the gradient is SliceGrad, and
// Concat's gradient slices by run-time sizes when the sliced sizes are symbolic.
TEST(GradRules, SliceWithBoundsComputedAtRunTimeAndConcatOfThem) {
  for (ShapeInfo si : {ShapeInfo::Static, ShapeInfo::RankOnly}) {
    TestGraph t(17);
    std::string y = t.node("Neg", {t.param("x", {2, 6, 3}, 1)});
    t.g.initializers["one"] = i64s({1});
    t.g.initializers["two"] = i64s({2});
    t.g.initializers["zero"] = i64s({0});
    t.g.initializers["big"] = i64s({INT64_MAX});
    std::string half = t.node("Div", {t.node("Gather", {t.node("Shape", {y}), "one"}, {{"axis", A::Int(0)}}), "two"});
    std::string first = t.node("Slice", {y, "zero", half, "one"});
    std::string second = t.node("Slice", {y, half, t.node("Mul", {half, "two"}), "one"});
    std::string tail = t.node("Slice", {y, t.node("Neg", {half}), "big", "one"});  // negative start: the last half
    std::string cat = t.node("Concat", {second, tail, first}, {{"axis", A::Int(1)}});
    Graph bg = check_gradients(t, t.node("Mul", {cat, cat}), shapes(si));
    EXPECT_EQ(count_ops(bg, "SliceGrad"), 3);
  }
}

// Every Slice the ONNX spec allows, with its bounds as constants and as values computed at run time (graph inputs,
// as Swin's window slicing computes them from the padded shape), with static, symbolic and no shapes: the standard
// ops where the bounds are constants and the sizes they need known, ai.graphrun SliceGrad elsewhere.
TEST(GradRules, SliceWithBoundsAtRunTimeNegativeStepsClampingAndAxesOmitted) {
  struct Case {
    std::vector<int64_t> starts, ends, axes, steps;  // axes or steps empty: the input is left out
  };
  const std::vector<Case> cases = {
      {{4}, {-100}, {1}, {-2}},                          // negative step, end clamped to -1: rows 4, 2, 0
      {{5, 0}, {0, 6}, {2, 0}, {-1, 3}},                 // a negative and a positive step
      {{-100, 2}, {100, -1}, {-1, 1}, {}},               // clamped start and end, negative axis, steps left out
      {{1, -4}, {INT64_MAX, -1}, {}, {}},                // axes and steps left out
      {{2, 0}, {0, 5}, {}, {-1, 2}},                     // axes left out, steps given
      {{INT64_MAX, -1}, {INT64_MIN, -8}, {0, 2}, {-1, -3}},  // from the end to the front, INT64_MIN as torch writes it
      {{-2}, {-1}, {2}, {1}},                            // negative start and end, step 1
  };
  for (size_t i = 0; i < cases.size(); ++i)
    for (bool runtime : {false, true})
      for (ShapeInfo si : {ShapeInfo::Static, ShapeInfo::RankOnly, ShapeInfo::None}) {
        SCOPED_TRACE("case " + std::to_string(i) + (runtime ? ", bounds at run time" : ", constant bounds") +
                     ", shapes " + std::to_string(static_cast<int>(si)));
        const Case& c = cases[i];
        TestGraph t(17);
        std::string x = t.node("Neg", {t.param("x", {3, 5, 7}, 1)});
        auto bound = [&](const std::string& name, const std::vector<int64_t>& v) -> std::string {
          if (v.empty()) return "";
          if (runtime) return t.input(name, i64s(v));
          t.g.initializers[name] = i64s(v);
          return name;
        };
        std::vector<std::string> ins{x, bound("st", c.starts), bound("en", c.ends), bound("ax", c.axes),
                                     bound("sp", c.steps)};
        while (ins.back().empty()) ins.pop_back();
        Graph bg = check_gradients(t, t.node("Slice", ins), shapes(si));
        bool strided = false;
        for (int64_t k : c.steps) strided |= k != 1;
        const bool standard = !runtime && si != ShapeInfo::None && (si == ShapeInfo::Static || !strided);
        EXPECT_EQ(count_ops(bg, "SliceGrad"), standard ? 0 : 1);
      }
}

// Gather on a value of symbolic shape (ViT's x[:, 0]): the one-hot product built from Shape and Range.
TEST(GradRules, GatherOnSymbolicShapes) {
  struct Case { Tensor idx; int64_t axis; };
  std::vector<Case> cases = {{Tensor::scalar<int64_t>(0), 1},
                             {i64s({0, -1, 2, 2}, {2, 2}), 1},
                             {i64s({3, 0}), 0},
                             {i64s({-1}), 2}};
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i));
    TestGraph t(17);
    std::string data = t.node("Neg", {t.param("x", {4, 3, 5}, 1)});
    t.g.initializers["idx"] = cases[i].idx;
    std::string y = t.node("Gather", {data, "idx"}, {{"axis", A::Int(cases[i].axis)}});
    Graph bg = check_gradients(t, y, shapes(ShapeInfo::RankOnly));
    EXPECT_EQ(count_ops(bg, "Range"), 1);
  }
}

TEST(GradRules, PadModes) {
  for (const char* mode : {"constant", "edge", "reflect"}) {
    SCOPED_TRACE(mode);
    TestGraph t;
    std::string x = t.param("x", {2, 3, 5}, 1);
    t.g.initializers["pads"] = i64s({0, 2, 1, 0, 1, 3});
    check_gradients(t, t.node("Pad", {x, "pads"}, {{"mode", A::Str(mode)}}));
  }
  TestGraph t;  // negative pads crop
  std::string x = t.param("x", {3, 5}, 1);
  t.g.initializers["pads"] = i64s({1, -2, -1, 2});
  check_gradients(t, t.node("Pad", {x, "pads"}));
}

// Pads computed at run time (Swin pads each window by sizes taken from the shape): in constant mode dX is dY
// padded by the negated pads, crops (negative pads) and a constant value included; with static, symbolic and no
// shapes; at opset 18 also with axes. Edge and reflect modes refuse them in one line naming the node.
TEST(GradRules, PadWithPadsComputedAtRunTime) {
  const std::vector<std::vector<int64_t>> cases = {
      {0, 2, 1, 0, 1, 3}, {1, -2, 0, -1, 2, -3}, {-1, 0, -6, 0, 0, 0}, {0, 0, 0, 0, 0, 0}};
  for (size_t i = 0; i < cases.size(); ++i)
    for (ShapeInfo si : {ShapeInfo::Static, ShapeInfo::RankOnly, ShapeInfo::None}) {
      SCOPED_TRACE("case " + std::to_string(i) + ", shapes " + std::to_string(static_cast<int>(si)));
      TestGraph t(17);
      std::string x = t.node("Neg", {t.param("x", {2, 3, 7}, 1)});
      t.g.initializers["v"] = Tensor::scalar<double>(0.5);
      // pads = given + 0 * Shape(x)[0]: computed at run time, as exporters build them.
      std::string zero = t.node("Mul", {t.node("Shape", {x}, {{"start", A::Int(0)}, {"end", A::Int(1)}}), t.input("z", i64s({0}))});
      std::string pads = t.node("Add", {t.input("p", i64s(cases[i])), zero});
      CheckOptions o = shapes(si);
      o.wrt = {"x"};  // the constant value gets no gradient (as with constant pads)
      Graph bg = check_gradients(t, t.node("Pad", {x, pads, "v"}), o);
      EXPECT_EQ(count_ops(bg, "Pad"), 2);  // the forward's and the gradient's
    }
  for (ShapeInfo si : {ShapeInfo::Static, ShapeInfo::None}) {  // opset 18: pads for the axes given
    TestGraph t(18);
    std::string x = t.param("x", {2, 3, 7}, 1);
    t.g.initializers["axes"] = i64s({-1, 1});
    check_gradients(t, t.node("Pad", {x, t.input("p", i64s({2, -1, -3, 1})), "", "axes"}), shapes(si));
  }
  for (const char* mode : {"edge", "reflect"}) {
    TestGraph t(17);
    std::string x = t.param("x", {2, 3, 7}, 1);
    Graph g = t.g;
    g.inputs.push_back("p");
    g.values["p"] = ValueInfo{DType::I64, true, {Dim(6)}};
    g.nodes.push_back(Node{"the_pad", "Pad", "", {x, "p"}, {"y"}, {{"mode", A::Str(mode)}}});
    g.nodes.push_back(Node{"the_sum", "ReduceSum", "", {"y"}, {"loss"}, {{"keepdims", A::Int(0)}}});
    g.values["loss"] = ValueInfo{DType::F64, true, {}};
    g.outputs = {"loss"};
    autodiff::BackwardOptions bo;
    bo.params = {"x"};
    try {
      autodiff::backward(g, bo);
      ADD_FAILURE() << mode << ": no error";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("the_pad"), std::string::npos) << m;
      EXPECT_NE(m.find(mode), std::string::npos) << m;
      EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    }
  }
}

TEST(GradRules, GatherAxesAndNegativeIndices) {
  for (int64_t axis : {0, 1, -1}) {
    SCOPED_TRACE("axis " + std::to_string(axis));
    TestGraph t;
    std::string x = t.param("x", {4, 5, 3}, 1);
    t.g.initializers["idx"] = i64s({0, 2, -1, 2, 1, 0}, {2, 3});  // repeated indices add up
    check_gradients(t, t.node("Gather", {x, "idx"}, {{"axis", A::Int(axis)}}));
  }
  TestGraph t;  // scalar index
  std::string x = t.param("x", {4, 5}, 1);
  t.g.initializers["idx"] = Tensor::scalar<int64_t>(3);
  check_gradients(t, t.node("Gather", {x, "idx"}, {{"axis", A::Int(1)}}));
}

TEST(GradRules, Expand) {
  TestGraph t;
  std::string x = t.param("x", {3, 1}, 1);
  t.g.initializers["shape"] = i64s({2, 3, 4});
  check_gradients(t, t.node("Expand", {x, "shape"}));
}

// ---- reduce

TEST(GradRules, ReduceSumAndMeanAxesKeepdims) {
  for (int64_t opset : {11, 13}) {
    for (const char* op : {"ReduceSum", "ReduceMean"}) {
      for (int keep = 0; keep < 2; ++keep) {
        for (std::vector<int64_t> axes : {std::vector<int64_t>{1}, std::vector<int64_t>{0, -1}, std::vector<int64_t>{}}) {
          for (ShapeInfo si : {ShapeInfo::Static, ShapeInfo::RankOnly}) {
            SCOPED_TRACE(std::string(op) + " opset " + std::to_string(opset) + " keepdims " + std::to_string(keep) +
                         " axes " + std::to_string(axes.size()));
            TestGraph t(opset);
            std::string x = t.param("x", {2, 3, 4}, 1);
            std::map<std::string, A> attrs{{"keepdims", A::Int(keep)}};
            std::vector<std::string> ins{x};
            if (std::string(op) == "ReduceSum" && opset >= 13) {
              if (!axes.empty()) {
                t.g.initializers["axes"] = i64s(axes);
                ins.push_back("axes");
              }
            } else if (!axes.empty()) {
              attrs["axes"] = A::Ints(axes);
            }
            check_gradients(t, t.node(op, ins, attrs), shapes(si));
          }
        }
      }
    }
  }
}

TEST(GradRules, SoftmaxAndLogSoftmaxAxes) {
  for (int64_t opset : {11, 13}) {
    for (const char* op : {"Softmax", "LogSoftmax"}) {
      for (int64_t axis : {0, 1, -1}) {
        SCOPED_TRACE(std::string(op) + " opset " + std::to_string(opset) + " axis " + std::to_string(axis));
        TestGraph t(opset);
        check_gradients(t, t.node(op, {t.param("x", {2, 3, 4}, 1, -2, 2)}, {{"axis", A::Int(axis)}}));
      }
    }
  }
}

// ---- loss

TEST(GradRules, SoftmaxCrossEntropyLoss) {
  for (const char* red : {"mean", "sum"}) {
    SCOPED_TRACE(red);
    TestGraph t(13);
    std::string x = t.param("x", {5, 4}, 1, -2, 2);
    t.g.initializers["labels"] = i64s({0, 3, 1, 1, 2});
    auto outs = t.node_n("SoftmaxCrossEntropyLoss", {x, "labels"}, 1, {{"reduction", A::Str(red)}});
    Graph bg = check_gradients(t, outs[0]);
    EXPECT_EQ(count_ops(bg, "SoftmaxCrossEntropyLossGrad"), 1);
  }
}

// Every reduction, with and without class weights and ignore_index (a label equal to it is skipped, even
// when out of range), on [N, C] and per-position [N, C, d1, d2] inputs, after LogSoftmax as torch writes it.
TEST(GradRules, NegativeLogLikelihoodLoss) {
  for (const char* red : {"mean", "sum", "none"})
    for (bool weighted : {false, true})
      for (bool spatial : {false, true})
        for (ShapeInfo si : {ShapeInfo::Static, ShapeInfo::RankOnly, ShapeInfo::None}) {
          SCOPED_TRACE(std::string(red) + (weighted ? " weighted" : "") + (spatial ? " spatial" : ""));
          TestGraph t(13);
          std::string x = t.param("x", spatial ? Shape{2, 3, 2, 2} : Shape{5, 3}, 1, -2, 2);
          t.g.initializers["labels"] = spatial ? i64s({0, 2, -100, 1, 1, 1, 2, 0}, {2, 2, 2}) : i64s({0, 2, 1, -100, 2});
          t.g.initializers["weight"] = Tensor::from_vector<double>({3}, {0.5, 2.0, 1.5});
          std::vector<std::string> ins{t.node("LogSoftmax", {x}, {{"axis", A::Int(1)}}), "labels"};
          if (weighted) ins.push_back("weight");
          std::string y = t.node("NegativeLogLikelihoodLoss", ins,
                                 {{"reduction", A::Str(red)}, {"ignore_index", A::Int(-100)}});
          CheckOptions o = shapes(si);
          o.wrt = {"x"};
          Graph bg = check_gradients(t, y, o);
          EXPECT_EQ(count_ops(bg, "NegativeLogLikelihoodLossGrad"), 1);
        }
}

TEST(GradRules, MseLossMatchesDefinition) {
  // attach_loss(mse) then backward: d/dy mean((y - t)^2) = 2 (y - t) / n.
  TestGraph t;
  std::string x = t.param("x", {3, 4}, 1);
  std::string y = t.node("Identity", {x});
  Graph g = t.g;
  g.outputs = {y};
  g.values[y] = ValueInfo{DType::F64, true, {Dim(3), Dim(4)}};
  autodiff::LossOptions lo;
  lo.kind = autodiff::LossKind::MSE;
  Graph bg = autodiff::backward(autodiff::attach_loss(g, lo));
  runtime::Executor ex(bg);
  Tensor target = random_f64({3, 4}, 9);
  auto r = ex.run({{"labels", target}});
  const Tensor& dx = r.at("x_grad");
  for (int i = 0; i < 12; ++i)
    EXPECT_NEAR(dx.data<double>()[i], 2 * (g.initializers["x"].data<double>()[i] - target.data<double>()[i]) / 12, 1e-12);
}

}  // namespace
}  // namespace graphrun::testing

namespace graphrun::testing {
namespace {

// Data-parallel replicas feed the loss gradient: every parameter gradient scales with it.
TEST(GradRules, LossGradInputScalesEveryGradient) {
  TestGraph t;
  std::string w = t.param("w", {3, 4}, 1);
  std::string b = t.param("b", {4}, 2);
  std::string y = t.node("Relu", {t.node("Add", {w, b})});
  Graph g = t.g;
  g.outputs = {y};
  g.nodes.push_back(Node{"s", "ReduceSum", "", {y}, {"loss"}, {{"keepdims", A::Int(0)}}});
  Graph one = autodiff::backward(g);
  autodiff::BackwardOptions o;
  o.loss_grad_input = "loss_grad";
  Graph fed = autodiff::backward(g, o);
  runtime::Executor e1(one), e2(fed);
  auto r1 = e1.run({});
  // The loss is f64 here (TestGraph's parameters are), so the fed scale is f64 too (an f32 loss's is f32).
  ASSERT_EQ(fed.info("loss_grad")->dtype, DType::F64);
  auto r2 = e2.run({{"loss_grad", Tensor::scalar<double>(0.25)}});
  for (const char* p : {"w_grad", "b_grad"}) {
    Tensor expect = r1.at(p).clone();
    for (int64_t i = 0; i < expect.numel(); ++i) expect.data<double>()[i] *= 0.25;
    EXPECT_LE(max_abs_diff(r2.at(p), expect), 1e-15) << p;
  }
}

// ---- gradients of ops that only move or select elements, and ReduceProd through zeros

// GatherND: duplicate and negative index tuples add up (ScatterND with reduction add into zeros from opset
// 16; GatherNDGrad before, and with batch_dims at any opset).
TEST(GradRules, GatherNDAddsDuplicates) {
  struct Case { Shape idx_shape; std::vector<int64_t> idx; int64_t batch_dims; };
  std::vector<Case> cases = {{{4, 1}, {2, 0, 2, -1}, 0},                 // whole [4, 2] slices, row 2 twice
                             {{2, 3, 2}, {0, 1, 2, 3, 0, 1, -1, -4, 1, 2, 0, 1}, 0},  // [2] rows, (0, 1) thrice
                             {{5, 3}, {0, 0, 0, 1, 2, 1, 0, 0, 0, 2, 3, 1, -1, -1, -1}, 0},  // single elements
                             {{3, 2, 1}, {1, 1, 0, 3, -1, 2}, 1},         // per batch row, one twice
                             {{3, 2, 2}, {0, 1, 0, 1, 3, 0, 2, 1, 2, 1, 1, 1}, 1}};
  for (int64_t opset : {13, 16, 18})
    for (const Case& c : cases)
      for (ShapeInfo si : {ShapeInfo::Static, ShapeInfo::RankOnly, ShapeInfo::None}) {
        SCOPED_TRACE("opset " + std::to_string(opset) + " k " + std::to_string(c.idx_shape.back()) + " batch_dims " +
                     std::to_string(c.batch_dims));
        TestGraph t(opset);
        std::string x = t.param("x", {3, 4, 2}, 1);
        t.g.initializers["idx"] = i64s(c.idx, c.idx_shape);
        Graph bg = check_gradients(t, t.node("GatherND", {x, "idx"}, {{"batch_dims", A::Int(c.batch_dims)}}), shapes(si));
        const bool standard = opset >= 16 && c.batch_dims == 0;
        EXPECT_EQ(count_ops(bg, "ScatterND"), standard ? 1 : 0);
        EXPECT_EQ(count_ops(bg, "GatherNDGrad"), standard ? 0 : 1);
      }
}

TEST(GradRules, DepthToSpaceAndSpaceToDepthBothModes) {
  for (int64_t opset : {11, 13})
    for (ShapeInfo si : {ShapeInfo::Static, ShapeInfo::RankOnly, ShapeInfo::None}) {
      for (const char* mode : {"DCR", "CRD"}) {
        SCOPED_TRACE(std::string(mode) + " opset " + std::to_string(opset));
        TestGraph t(opset);
        std::string x = t.param("x", {2, 12, 2, 3}, 1);  // C = 3, blocksize 2
        check_gradients(t, t.node("DepthToSpace", {x}, {{"blocksize", A::Int(2)}, {"mode", A::Str(mode)}}), shapes(si));
      }
      TestGraph t(opset);
      std::string x = t.param("x", {2, 3, 4, 6}, 2);
      Graph bg = check_gradients(t, t.node("SpaceToDepth", {x}, {{"blocksize", A::Int(2)}}), shapes(si));
      EXPECT_EQ(count_ops(bg, "DepthToSpace"), 1);
    }
  TestGraph t9(9);  // no mode attribute before opset 11 (DCR)
  check_gradients(t9, t9.node("DepthToSpace", {t9.param("x", {1, 8, 2, 2}, 3)}, {{"blocksize", A::Int(2)}}));
}

// TopK: dY lands at the selected positions; the indices output carries no gradient.
TEST(GradRules, TopKValues) {
  for (int64_t opset : {10, 11, 17})
    for (int64_t axis : {0, -1})
      for (int largest = 0; largest < 2; ++largest)
        for (ShapeInfo si : {ShapeInfo::Static, ShapeInfo::RankOnly, ShapeInfo::None}) {
          if (opset < 11 && !largest) continue;  // largest arrived in opset 11
          SCOPED_TRACE("opset " + std::to_string(opset) + " axis " + std::to_string(axis) + " largest " +
                       std::to_string(largest));
          TestGraph t(opset);
          std::string x = t.param("x", {4, 5}, 1);
          t.g.initializers["k"] = i64s({3});
          std::map<std::string, A> attrs{{"axis", A::Int(axis)}};
          if (opset >= 11) attrs["largest"] = A::Int(largest);
          std::vector<std::string> y = t.node_n("TopK", {x, "k"}, 2, attrs);
          Graph bg = check_gradients(t, y[0], shapes(si));
          EXPECT_EQ(count_ops(bg, opset >= 11 ? "ScatterElements" : "Scatter"), 1);
        }
}

// Unique: dY lands at each value's first occurrence; also when the node did not output `indices` (the rule
// names that output). Values are distinct here (a tie moved by the numeric step would change Y's shape).
TEST(GradRules, UniqueValues) {
  for (ShapeInfo si : {ShapeInfo::Static, ShapeInfo::RankOnly}) {
    for (int64_t sorted : {0, 1}) {
      TestGraph t(11);
      std::string x = t.param("x", {3, 4}, 5);
      std::vector<std::string> y = t.node_n("Unique", {x}, 1, {{"sorted", A::Int(sorted)}});
      Graph bg = check_gradients(t, y[0], shapes(si));
      EXPECT_EQ(count_ops(bg, "ScatterElements"), 1);
    }
    TestGraph t(13);
    std::string x = t.param("x", {2, 5, 3}, 6);
    std::vector<std::string> y = t.node_n("Unique", {x}, 4, {{"axis", A::Int(-2)}});
    check_gradients(t, y[0], shapes(si));
  }
}

// DequantizeLinear, Y = (X - zero_point) * scale: the scale's gradient, per tensor and per axis (X and the zero
// point are integers: no gradient).
TEST(GradRules, DequantizeLinearScale) {
  for (ShapeInfo si : {ShapeInfo::Static, ShapeInfo::RankOnly}) {
    // Per tensor (a scalar, or one value in 1-D whatever `axis` says) and per axis.
    for (const Shape& ss : {Shape{}, Shape{1}, Shape{3}}) {
      SCOPED_TRACE("scale " + shape_str(ss));
      TestGraph t(13);
      Tensor q(DType::U8, {2, 3, 4}), zp(DType::U8, ss);
      for (int64_t i = 0; i < q.numel(); ++i) static_cast<uint8_t*>(q.raw())[i] = static_cast<uint8_t>((37 * i + 11) % 256);
      for (int64_t i = 0; i < zp.numel(); ++i) static_cast<uint8_t*>(zp.raw())[i] = static_cast<uint8_t>(120 + 5 * i);
      const std::string x = t.input("q", q), z = t.input("zp", zp);
      const std::string scale = t.param("s", ss, 7, 0.01, 0.1);
      std::map<std::string, A> attrs;
      if (!ss.empty()) attrs["axis"] = A::Int(-2);
      check_gradients(t, t.node("DequantizeLinear", {x, scale, z}, attrs), shapes(si));
    }
  }
}

// Mod on floats (fmod 1): dA = dY, dB = -dY * trunc(A / B), B broadcast. A / B keeps 0.3 or 0.6 away
// from an integer (where Mod jumps) and takes both signs.
TEST(GradRules, ModOnFloats) {
  Tensor a(DType::F64, {3, 4}), b(DType::F64, {4});
  const double bs[] = {0.7, -1.3, 2.1, -0.45};
  for (int j = 0; j < 4; ++j) b.data<double>()[j] = bs[j];
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) a.data<double>()[i * 4 + j] = bs[j] * ((i - 1) * 2 + ((i + j) % 2 ? 0.3 : 0.6) - j % 3);
  for (int64_t opset : {10, 13})
    for (ShapeInfo si : {ShapeInfo::Static, ShapeInfo::RankOnly, ShapeInfo::None}) {
      SCOPED_TRACE("opset " + std::to_string(opset));
      TestGraph t(opset);
      std::string x = t.param("a", a.clone()), y = t.param("b", b.clone());
      check_gradients(t, t.node("Mod", {x, y}, {{"fmod", A::Int(1)}}), shapes(si));
    }
}

// Compress with an axis (a condition shorter than the axis too) and without one (flattened): dY lands
// on the kept slices, zeros elsewhere. Scatter before opset 11.
TEST(GradRules, CompressWithAndWithoutAxis) {
  auto cond = [](std::vector<int> v) {
    Tensor c(DType::Bool, {static_cast<int64_t>(v.size())});
    for (size_t i = 0; i < v.size(); ++i) c.data<bool>()[i] = v[i] != 0;
    return c;
  };
  for (int64_t opset : {9, 11, 13})
    for (ShapeInfo si : {ShapeInfo::Static, ShapeInfo::RankOnly, ShapeInfo::None}) {
      SCOPED_TRACE("opset " + std::to_string(opset));
      for (int64_t axis : {0, 1, -1}) {
        TestGraph t(opset);
        std::string x = t.param("x", {3, 5}, 1);
        t.g.initializers["c"] = axis == 0 ? cond({1, 0, 1}) : cond({0, 1, 1, 0});  // 4 of 5 columns covered
        Graph bg = check_gradients(t, t.node("Compress", {x, "c"}, {{"axis", A::Int(axis)}}), shapes(si));
        EXPECT_EQ(count_ops(bg, opset >= 11 ? "ScatterElements" : "Scatter"), 1);
      }
      TestGraph t(opset);
      std::string x = t.param("x", {2, 3}, 2);
      t.g.initializers["c"] = cond({1, 0, 0, 1, 1});
      check_gradients(t, t.node("Compress", {x, "c"}), shapes(si));
    }
}

// ReverseSequence, time-major and batch-major, lengths from 1 to the full length.
TEST(GradRules, ReverseSequenceBothLayouts) {
  for (ShapeInfo si : {ShapeInfo::Static, ShapeInfo::RankOnly, ShapeInfo::None})
    for (int batch_axis = 0; batch_axis < 2; ++batch_axis) {
      TestGraph t(13);
      const Shape s = batch_axis ? Shape{4, 3, 2} : Shape{3, 4, 2};  // time 4, batch 3
      std::string x = t.param("x", s, 1);
      t.g.initializers["len"] = i64s({4, 1, 3});
      check_gradients(t, t.node("ReverseSequence", {x, "len"},
                                {{"batch_axis", A::Int(batch_axis)}, {"time_axis", A::Int(1 - batch_axis)}}),
                      shapes(si));
    }
}

// Scatter (opset 9/10): ScatterElements' old name, the same gradients.
TEST(GradRules, ScatterBeforeOpset11) {
  for (ShapeInfo si : {ShapeInfo::Static, ShapeInfo::RankOnly, ShapeInfo::None}) {
    TestGraph t(10);
    std::string d = t.param("data", {3, 4}, 1), u = t.param("upd", {2, 4}, 2);
    t.g.initializers["idx"] = i64s({1, 0, 2, 0, 2, 2, 1, 1}, {2, 4});
    Graph bg = check_gradients(t, t.node("Scatter", {d, "idx", u}, {{"axis", A::Int(0)}}), shapes(si));
    EXPECT_EQ(count_ops(bg, "ScatterElements"), 0);
  }
}

// ReduceProd with no, one and two zeros in a group: the product of the others, never 0/0.
TEST(GradRules, ReduceProdThroughZeros) {
  Tensor x0 = random_f64({2, 3, 4}, 1, 0.5, 1.5);
  double* v = x0.data<double>();
  v[0 * 12 + 0 * 4 + 1] = 0;                                // one zero in group (n 0, w 1) over axis 1
  v[1 * 12 + 0 * 4 + 2] = 0, v[1 * 12 + 2 * 4 + 2] = 0;    // two zeros in group (n 1, w 2)
  v[1 * 12 + 1 * 4 + 3] = -v[1 * 12 + 1 * 4 + 3];           // a negative
  for (int64_t opset : {13, 18})
    for (int keep = 0; keep < 2; ++keep)
      for (std::vector<int64_t> axes : {std::vector<int64_t>{1}, std::vector<int64_t>{0, -1}, std::vector<int64_t>{}})
        for (ShapeInfo si : {ShapeInfo::Static, ShapeInfo::RankOnly}) {
          SCOPED_TRACE("opset " + std::to_string(opset) + " keepdims " + std::to_string(keep) + " axes " +
                       std::to_string(axes.size()));
          TestGraph t(opset);
          std::string x = t.param("x", x0.clone());
          std::map<std::string, A> attrs{{"keepdims", A::Int(keep)}};
          std::vector<std::string> ins{x};
          if (!axes.empty() && opset >= 18) {
            t.g.initializers["axes"] = i64s(axes);
            ins.push_back("axes");
          } else if (!axes.empty()) {
            attrs["axes"] = A::Ints(axes);
          }
          Graph bg = check_gradients(t, t.node("ReduceProd", ins, attrs), shapes(si));
          EXPECT_EQ(count_ops(bg, "Div"), 1);
        }
  // The gradient at zeros by hand: x = (2, 0, 3) -> d/dx = (0, 6, 0); x = (0, 0, 5) -> 0 everywhere.
  for (auto [in, want] : {std::pair<std::vector<double>, std::vector<double>>{{2, 0, 3}, {0, 6, 0}},
                          {{0, 0, 5}, {0, 0, 0}}, {{2, 4, 3}, {12, 6, 8}}}) {
    TestGraph t;
    t.param("x", Tensor::from_vector<double>({3}, in));
    Graph g = t.g;
    g.nodes.push_back(Node{"p", "ReduceProd", "", {"x"}, {"loss"}, {{"keepdims", A::Int(0)}}});
    g.outputs = {"loss"};
    autodiff::BackwardOptions o;
    o.params = {"x"};
    runtime::ExecOptions eo;
    eo.fetch = {"x_grad"};
    runtime::Executor ex(autodiff::backward(g, o), eo);
    Tensor got = ex.run({}).at("x_grad");
    for (int i = 0; i < 3; ++i) EXPECT_EQ(got.data<double>()[i], want[i]) << i;
  }
}

}  // namespace
}  // namespace graphrun::testing

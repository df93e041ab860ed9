// unroll_rnn (graph/passes/unroll_rnn.h): an LSTM, GRU or RNN node written as its time steps computes what the
// node's kernel computes (every direction, both layouts, biases, initial states, peepholes, sequence_lens, clip,
// GRU's linear_before_reset, RNN's activations), and its second derivatives, which the fused node's gradient op
// cannot give, match central differences (float64). The way users reach it, a gradient penalty on a recurrent
// critic through ONNX's Gradient op, is checked against torch in tests/gradient_op_test.cc.
#include <gtest/gtest.h>

#include "graph/onnx_io.h"
#include "graph/passes/unroll_rnn.h"
#include "tests/grad_check.h"

namespace graphrun::testing {
namespace {

using A = Attribute;

struct Case {
  std::string op;  // LSTM, GRU, RNN
  std::string direction;
  int64_t layout = 0;
  bool bias = false, initial = false, peephole = false, lens = false, clip = false;
  int64_t lbr = 0;                // GRU
  std::vector<std::string> acts;  // RNN
  std::string name() const {
    std::string s = op + " " + direction + " layout " + std::to_string(layout) + (bias ? " B" : "") +
                    (initial ? " initial" : "") + (peephole ? " P" : "") + (lens ? " lens" : "") +
                    (clip ? " clip" : "") + (lbr ? " lbr" : "");
    for (const auto& a : acts) s += " " + a;
    return s;
  }
};

Case mk(std::string op, std::string direction, int64_t layout, bool bias = false, bool initial = false,
        bool peephole = false, bool lens = false, bool clip = false, int64_t lbr = 0,
        std::vector<std::string> acts = {}) {
  return Case{std::move(op), std::move(direction), layout, bias, initial, peephole, lens, clip, lbr, std::move(acts)};
}

std::vector<Case> cases() {
  std::vector<Case> r;
  for (const char* op : {"LSTM", "GRU", "RNN"})
    for (const char* dir : {"forward", "reverse", "bidirectional"})
      for (int64_t layout : {0, 1}) r.push_back(mk(op, dir, layout, true, true, std::string(op) == "LSTM"));
  r.push_back(mk("LSTM", "forward", 0));
  r.push_back(mk("LSTM", "bidirectional", 1, true, true, true, true, true));
  r.push_back(mk("LSTM", "reverse", 0, true, false, true, true, false));
  for (int64_t lbr : {0, 1}) {
    r.push_back(mk("GRU", "forward", 0, false, false, false, false, false, lbr));
    r.push_back(mk("GRU", "bidirectional", 0, true, true, false, true, true, lbr));
    r.push_back(mk("GRU", "reverse", 1, true, false, false, true, false, lbr));
    r.push_back(mk("GRU", "forward", 1, true, true, false, false, true, lbr));
  }
  r.push_back(mk("RNN", "forward", 0, false, false, false, false, false, 0, {"Relu"}));
  r.push_back(mk("RNN", "bidirectional", 1, true, true, false, true, true, 0, {"Sigmoid", "relu"}));
  return r;
}

struct Built {
  TestGraph t;
  std::vector<std::string> outs;
};

// The node with random float64 inputs (X among the parameters), its value infos static.
Built build(const Case& c) {
  const bool lstm = c.op == "LSTM";
  const int64_t T = 4, N = 3, I = 2, H = 3, D = c.direction == "bidirectional" ? 2 : 1,
                G = lstm            ? 4
                    : c.op == "GRU" ? 3
                                    : 1;
  Built b{TestGraph(14), {}};
  TestGraph& t = b.t;
  const Shape xs = c.layout ? Shape{N, T, I} : Shape{T, N, I}, ss = c.layout ? Shape{N, D, H} : Shape{D, N, H};
  std::vector<std::string> ins{t.param("X", xs, 1),
                               t.param("W", {D, G * H, I}, 2, -0.7, 0.7),
                               t.param("R", {D, G * H, H}, 3, -0.7, 0.7),
                               "",
                               "",
                               "",
                               "",
                               ""};
  if (c.bias) ins[3] = t.param("B", {D, 2 * G * H}, 4, -0.5, 0.5);
  if (c.lens) ins[4] = t.param("lens", Tensor::from_vector<int32_t>({N}, {4, 2, 0}));
  if (c.initial) ins[5] = t.param("h0", ss, 5);
  if (lstm && c.initial) ins[6] = t.param("c0", ss, 6);
  if (lstm && c.peephole) ins[7] = t.param("P", {D, 3 * H}, 7, -0.5, 0.5);
  ins.resize(lstm ? 8 : 6);
  std::map<std::string, A> attrs{
      {"direction", A::Str(c.direction)}, {"hidden_size", A::Int(H)}, {"layout", A::Int(c.layout)}};
  if (c.clip) attrs["clip"] = A::Float(0.6f);
  if (c.op == "GRU") attrs["linear_before_reset"] = A::Int(c.lbr);
  if (!c.acts.empty()) attrs["activations"] = A::Strs(c.acts);
  b.outs = t.node_n(c.op, ins, lstm ? 3 : 2, attrs);
  fill_value_infos(t.g, t.feeds, ShapeInfo::Static);
  return b;
}

size_t unroll_all(Graph& g) {
  size_t n = 0;
  for (size_t i = g.nodes.size(); i-- > 0;)
    if (passes::is_recurrent(g.nodes[i])) passes::unroll_rnn(g, i, "test"), ++n;
  g.topo_sort();
  return n;
}

std::map<std::string, Tensor> run(Graph g, const std::vector<std::string>& outs) {
  g.outputs = outs;
  runtime::Executor ex(g);
  return ex.run({});
}

TEST(UnrollRnn, StepsComputeWhatTheNodeComputes) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name());
    Built b = build(c);
    const auto fused = run(b.t.g, b.outs);
    Graph g = b.t.g;
    ASSERT_EQ(unroll_all(g), 1u);
    EXPECT_EQ(count_ops(g, c.op), 0);
    const auto steps = run(g, b.outs);
    for (const auto& o : b.outs) {
      ASSERT_TRUE(steps.count(o)) << o;
      EXPECT_EQ(steps.at(o).shape(), fused.at(o).shape()) << o;
      EXPECT_LT(max_abs_diff(steps.at(o), fused.at(o)), 1e-13) << o;
    }
    // The first derivatives of the steps, by their ops' rules, against central differences.
    b.t.g = g;
    std::vector<std::string> parts;
    b.t.g.initializers["flat"] = i64s({-1});
    for (const auto& o : b.outs) parts.push_back(b.t.node("Reshape", {o, "flat"}));
    check_gradients(b.t, b.t.node("Concat", parts, {{"axis", A::Int(0)}}));
  }
}

// The gradient of the node's output (weighted by fixed random values) with respect to X and W, and those
// gradients' own derivatives with respect to every input (the second derivatives a penalty on dX trains by).
TEST(UnrollRnn, SecondDerivativesMatchNumeric) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name());
    Built b = build(c);
    TestGraph& t = b.t;
    unroll_all(t.g);
    t.g.initializers["flat"] = i64s({-1});
    std::vector<std::string> parts;
    for (size_t k = 0; k < b.outs.size(); ++k) {
      const ValueInfo* vi = t.g.info(b.outs[k]);
      ASSERT_TRUE(vi && vi->fully_known()) << b.outs[k];
      const std::string wk = "weights" + std::to_string(k);
      t.g.nodes.push_back(Node{wk, "Constant", "", {}, {wk}, {{"value", A::Tens(random_f64(vi->concrete(), 50 + k))}}});
      parts.push_back(t.node("Reshape", {t.node("Mul", {b.outs[k], wk}), "flat"}));
    }
    const std::string s =
        t.node("ReduceSum", {t.node("Concat", parts, {{"axis", A::Int(0)}})}, {{"keepdims", A::Int(0)}});
    t.g.nodes.push_back(Node{"one", "Constant", "", {}, {"one"}, {{"value", A::Tens(Tensor::scalar<double>(1.0))}}});
    autodiff::Differentiation d;
    d.roots = {"X", "W"};
    d.cut = {"X", "W"};
    d.y = s;
    d.seed = "one";
    infer_shapes(t.g);
    const auto grads = autodiff::differentiate(t.g, d);
    std::vector<std::string> flat;
    for (const auto& g : grads) {
      ASSERT_FALSE(g.empty());
      flat.push_back(t.node("Reshape", {g.size() == 1 ? g[0] : t.node("Sum", g), "flat"}));
    }
    const Graph bg = check_gradients(t, t.node("Concat", flat, {{"axis", A::Int(0)}}));
    EXPECT_EQ(count_ops(bg, c.op + "Grad"), 0);
  }
}

// What the steps cannot be built from is one line naming the node: a number of steps unknown when loading.
TEST(UnrollRnn, AnUnknownNumberOfStepsIsOneLine) {
  TestGraph t(14);
  t.g.inputs = {"X"};
  t.g.values["X"] = ValueInfo{DType::F32, true, {Dim(std::string("T")), Dim(2), Dim(2)}};
  t.param("W", Tensor(DType::F32, {1, 8, 2}));
  t.param("R", Tensor(DType::F32, {1, 8, 2}));
  t.node_n("LSTM", {"X", "W", "R"}, 3, {{"hidden_size", A::Int(2)}});
  try {
    passes::unroll_rnn(t.g, 0, "m.onnx");
    ADD_FAILURE() << "unrolled";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    for (const char* w : {"m.onnx", "LSTM_0", "f32[T,2,2]"}) EXPECT_NE(m.find(w), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace graphrun::testing

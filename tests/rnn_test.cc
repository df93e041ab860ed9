// LSTM, GRU and RNN: numeric gradient checks of LSTMGrad / GRUGrad / RNNGrad (float64, static and symbolic shapes,
// every direction, both layouts, with biases, initial states, peepholes, sequence_lens and clip or without, RNN's
// activations), and the clear refusals; `graphrun run` on torch's nn.LSTM / nn.GRU / nn.RNN exports against torch.
#include <gtest/gtest.h>

#include "graph/tensor_io.h"
#include "tests/grad_check.h"

namespace graphrun::testing {
namespace {

using A = Attribute;

struct Case {
  bool lstm;
  std::string direction;
  int64_t layout;
  bool bias, initial, peephole, lens, clip;
  int64_t lbr;  // GRU
  int used;     // outputs that reach the loss: 1 only Y, 2 only Y_h, 7 all (bits)
};

// The RNN op: a Case with lstm false, and its activations attribute when given (none: the default).
struct RnnOp {
  std::vector<std::string> acts;
};

const char* op_of(const Case& c, const RnnOp* rnn) { return c.lstm ? "LSTM" : rnn ? "RNN" : "GRU"; }

std::string name_of(const Case& c, const RnnOp* rnn = nullptr) {
  std::string acts;
  for (const auto& a : rnn ? rnn->acts : std::vector<std::string>{}) acts += " " + a;
  return std::string(op_of(c, rnn)) + acts + " " + c.direction + " layout " + std::to_string(c.layout) +
         (c.bias ? " B" : "") + (c.initial ? " initial" : "") + (c.peephole ? " P" : "") + (c.lens ? " lens" : "") +
         (c.clip ? " clip" : "") + " lbr " + std::to_string(c.lbr) + " used " + std::to_string(c.used);
}

// Builds the node with random float64 parameters, concatenates the flattened used outputs into one value
// and checks every parameter's gradient against central differences.
Graph check_case(const Case& c, ShapeInfo si, const RnnOp* rnn = nullptr) {
  const int64_t T = 4, N = 3, I = 2, H = 3, D = c.direction == "bidirectional" ? 2 : 1,
                G = c.lstm ? 4 : rnn ? 1 : 3;
  TestGraph t(14);
  const Shape xs = c.layout ? Shape{N, T, I} : Shape{T, N, I}, ss = c.layout ? Shape{N, D, H} : Shape{D, N, H};
  std::vector<std::string> ins{t.param("X", xs, 1), t.param("W", {D, G * H, I}, 2, -0.7, 0.7),
                               t.param("R", {D, G * H, H}, 3, -0.7, 0.7), "", "", "", "", ""};
  if (c.bias) ins[3] = t.param("B", {D, 2 * G * H}, 4, -0.5, 0.5);
  if (c.lens) ins[4] = t.param("lens", Tensor::from_vector<int32_t>({N}, {4, 2, 3}));
  if (c.initial) ins[5] = t.param("h0", ss, 5);
  if (c.lstm && c.initial) ins[6] = t.param("c0", ss, 6);
  if (c.lstm && c.peephole) ins[7] = t.param("P", {D, 3 * H}, 7, -0.5, 0.5);
  ins.resize(c.lstm ? 8 : 6);
  std::map<std::string, A> attrs{{"direction", A::Str(c.direction)}, {"hidden_size", A::Int(H)},
                                 {"layout", A::Int(c.layout)}};
  if (c.clip) attrs["clip"] = A::Float(0.9f);
  if (!c.lstm && !rnn) attrs["linear_before_reset"] = A::Int(c.lbr);
  if (rnn && !rnn->acts.empty()) attrs["activations"] = A::Strs(rnn->acts);
  auto outs = t.node_n(op_of(c, rnn), ins, c.lstm ? 3 : 2, attrs);
  t.g.initializers["flat"] = i64s({-1});
  std::vector<std::string> parts;
  for (size_t k = 0; k < outs.size(); ++k)
    if (c.used & (1 << k)) parts.push_back(t.node("Reshape", {outs[k], "flat"}));
  const std::string y = parts.size() == 1 ? parts[0] : t.node("Concat", parts, {{"axis", A::Int(0)}});
  return check_gradients(t, y, shapes(si));
}

TEST(Rnn, LstmGradientsMatchNumeric) {
  std::vector<Case> cases;
  for (const char* dir : {"forward", "reverse", "bidirectional"})
    for (int64_t layout : {0, 1}) cases.push_back({true, dir, layout, true, true, true, false, false, 0, 7});
  cases.push_back({true, "forward", 0, false, false, false, false, false, 0, 7});
  cases.push_back({true, "bidirectional", 0, true, true, false, true, false, 0, 7});
  cases.push_back({true, "bidirectional", 1, true, true, true, true, true, 0, 7});
  cases.push_back({true, "reverse", 0, true, false, false, false, false, 0, 1});
  cases.push_back({true, "forward", 1, true, true, false, false, false, 0, 2});
  cases.push_back({true, "forward", 0, true, true, false, false, false, 0, 4});
  for (const Case& c : cases)
    for (ShapeInfo si : {ShapeInfo::Static, ShapeInfo::RankOnly, ShapeInfo::None}) {
      if (si == ShapeInfo::None && (c.used & (c.used - 1))) continue;  // the test's Concat needs ranks
      SCOPED_TRACE(name_of(c) + " shapes " + std::to_string(static_cast<int>(si)));
      Graph bg = check_case(c, si);
      EXPECT_EQ(count_ops(bg, "LSTMGrad"), 1);
    }
}

TEST(Rnn, GruGradientsMatchNumeric) {
  std::vector<Case> cases;
  for (int64_t lbr : {0, 1})
    for (const char* dir : {"forward", "reverse", "bidirectional"})
      for (int64_t layout : {0, 1}) cases.push_back({false, dir, layout, true, true, false, false, false, lbr, 3});
  for (int64_t lbr : {0, 1}) {
    cases.push_back({false, "bidirectional", 0, true, true, false, true, true, lbr, 3});
    cases.push_back({false, "forward", 0, false, false, false, false, false, lbr, 1});
    cases.push_back({false, "reverse", 1, true, false, false, true, false, lbr, 2});
  }
  for (const Case& c : cases)
    for (ShapeInfo si : {ShapeInfo::Static, ShapeInfo::RankOnly, ShapeInfo::None}) {
      if (si == ShapeInfo::None && (c.used & (c.used - 1))) continue;  // the test's Concat needs ranks
      SCOPED_TRACE(name_of(c) + " shapes " + std::to_string(static_cast<int>(si)));
      Graph bg = check_case(c, si);
      EXPECT_EQ(count_ops(bg, "GRUGrad"), 1);
    }
}

TEST(Rnn, RnnGradientsMatchNumeric) {
  std::vector<std::pair<Case, RnnOp>> cases;
  for (const char* dir : {"forward", "reverse", "bidirectional"})
    for (int64_t layout : {0, 1}) cases.push_back({{false, dir, layout, true, true, false, false, false, 0, 3}, {}});
  cases.push_back({{false, "forward", 0, false, false, false, false, false, 0, 1}, {{"Relu"}}});
  cases.push_back({{false, "reverse", 1, true, true, false, true, false, 0, 3}, {{"Sigmoid"}}});
  cases.push_back({{false, "bidirectional", 0, true, true, false, true, true, 0, 3}, {{"Relu", "Sigmoid"}}});
  cases.push_back({{false, "bidirectional", 1, true, false, false, true, true, 0, 2}, {{"tanh"}}});
  for (const auto& [c, rnn] : cases)
    for (ShapeInfo si : {ShapeInfo::Static, ShapeInfo::RankOnly, ShapeInfo::None}) {
      if (si == ShapeInfo::None && (c.used & (c.used - 1))) continue;  // the test's Concat needs ranks
      SCOPED_TRACE(name_of(c, &rnn) + " shapes " + std::to_string(static_cast<int>(si)));
      Graph bg = check_case(c, si, &rnn);
      EXPECT_EQ(count_ops(bg, "RNNGrad"), 1);
    }
}

// Activations other than the defaults and LSTM's coupled gates are refused with a line naming the attribute.
TEST(Rnn, RefusesWhatItLacks) {
  for (const auto& [attr, value] : std::vector<std::pair<std::string, A>>{
           {"activations", A::Strs({"Relu", "Tanh", "Tanh"})}, {"input_forget", A::Int(1)}}) {
    TestGraph t(14);
    std::vector<std::string> ins{t.param("X", {2, 1, 2}, 1), t.param("W", {1, 8, 2}, 2), t.param("R", {1, 8, 2}, 3)};
    auto outs = t.node_n("LSTM", ins, 3, {{"hidden_size", A::Int(2)}, {attr, value}});
    t.g.outputs = {outs[0]};
    runtime::Executor ex(t.g);
    try {
      ex.run({});
      ADD_FAILURE() << attr << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("'" + attr + "'"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("LSTM"), std::string::npos) << e.what();
    }
  }
}

// RNN takes Tanh, Relu and Sigmoid; another activation, or a list of the wrong length, is refused in one line
// naming the node and the attribute.
TEST(Rnn, RnnRefusesOtherActivations) {
  for (const auto& acts : std::vector<std::vector<std::string>>{{"Elu"}, {"Tanh", "Relu"}}) {
    TestGraph t(14);
    std::vector<std::string> ins{t.param("X", {2, 1, 2}, 1), t.param("W", {1, 2, 2}, 2), t.param("R", {1, 2, 2}, 3)};
    auto outs = t.node_n("RNN", ins, 2, {{"hidden_size", A::Int(2)}, {"activations", A::Strs(acts)}});
    t.g.outputs = {outs[0]};
    runtime::Executor ex(t.g);
    try {
      ex.run({});
      ADD_FAILURE() << acts[0] << " was accepted";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_EQ(m.find('\n'), std::string::npos) << m;
      for (const char* w : {"'activations'", "RNN_0"}) EXPECT_NE(m.find(w), std::string::npos) << m;
    }
  }
}

// The CUDA kernel table runs LSTM, GRU and their gradients (runtime/kernels/cuda/rnn.cu; their parity cases are
// tests/gpu_kernels_test.cc's LstmGruAndGrads): a device graph with them passes the check every GPU executor makes.
TEST(Rnn, CudaKernelTableAcceptsTheRecurrentOps) {
  const runtime::KernelTable& cuda = runtime::KernelTable::of_device(Device::Kind::CUDA);
  if (cuda.ops().empty()) GTEST_SKIP() << "graphrun was built without CUDA";
  TestGraph t(14);
  std::vector<std::string> ins{t.param("X", {2, 1, 2}, 1), t.param("W", {1, 8, 2}, 2), t.param("R", {1, 8, 2}, 3)};
  std::vector<std::string> gru{ins[0], t.param("Wg", {1, 6, 2}, 4), t.param("Rg", {1, 6, 2}, 5)};
  t.node_n("LSTM", ins, 3, {{"hidden_size", A::Int(2)}});
  t.node_n("GRU", gru, 2, {{"hidden_size", A::Int(2)}});
  t.node_n("LSTMGrad", ins, 7, {}, kGraphrunDomain);
  t.node_n("GRUGrad", gru, 5, {}, kGraphrunDomain);
  EXPECT_NO_THROW(runtime::check_supported(t.g, cuda, "graph 'test'"));
}

// torch's nn.LSTM (2 bidirectional layers, batch_first) and nn.GRU (2 bidirectional layers, time first; torch
// exports linear_before_reset = 1), nn.RNN (Tanh, 2 bidirectional layers, batch_first) and nn.RNN (Relu, 1 layer,
// time first) through `graphrun run`: the eval export's logits against torch in float64.
TEST(Rnn, GraphrunRunMatchesTorchExports) {
  if (run_command(python() + " -c 'import torchvision' 2>&1").exit_code != 0)
    GTEST_SKIP() << python() << " lacks torchvision (python3-torchvision)";
  for (const char* model : {"lstm", "gru", "rnn", "rnn_relu1"}) {
    SCOPED_TRACE(model);
    const std::string dir = temp_dir(std::string("rnn_run_") + model);
    auto py = run_command(python() + " " + source_dir() + "/tests/zoo_parity.py " + model + " " + dir +
                          " --opset 14 --size 8 --batch 3 2>&1");
    ASSERT_EQ(py.exit_code, 0) << py.output;
    auto r = run_command(graphrun_cli() + " run " + dir + "/eval.onnx --input image=" + dir + "/image.npy --output-dir " +
                         dir + "/out 2>&1");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const Tensor got = read_npy(dir + "/out/logits.npy"), want = read_npy(dir + "/logits.npy");
    ASSERT_EQ(shape_str(got.shape()), shape_str(want.shape()));
    double scale = 1;
    for (double v : want.as_doubles()) scale = std::max(scale, std::fabs(v));
    EXPECT_LE(max_abs_diff(got, want), 1e-5 * scale);
  }
}

}  // namespace
}  // namespace graphrun::testing

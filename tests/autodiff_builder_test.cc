// The backward builder's graph, inspected without running it: which nodes it emits and which it must not
// (frozen parameters, integer and image inputs), fan-out sums, dead-node removal, opset-aware emission, errors.
#include <fstream>
#include <set>
#include <sstream>

#include "autodiff/autodiff.h"
#include "tests/grad_check.h"

namespace graphrun::testing {
namespace {

using A = Attribute;

// x (image input) -> Conv(w1,b1) -> Relu -> MaxPool -> Flatten -> Gemm(w2,b2) -> logits
TestGraph small_cnn(int64_t opset = 17) {
  TestGraph t(opset);
  t.g.inputs.push_back("image");
  t.g.values["image"] = ValueInfo{DType::F32, true, {Dim(std::string("N")), Dim(1), Dim(6), Dim(6)}};
  t.g.initializers["w1"] = random_tensor({2, 1, 3, 3}, 1);
  t.g.initializers["b1"] = random_tensor({2}, 2);
  t.g.initializers["w2"] = random_tensor({3, 8}, 3);
  t.g.initializers["b2"] = random_tensor({3}, 4);
  t.g.nodes.push_back(Node{"conv1", "Conv", "", {"image", "w1", "b1"}, {"c1"}, {}});
  t.g.nodes.push_back(Node{"relu1", "Relu", "", {"c1"}, {"r1"}, {}});
  t.g.nodes.push_back(Node{"pool1", "MaxPool", "", {"r1"}, {"p1"},
                           {{"kernel_shape", A::Ints({2, 2})}, {"strides", A::Ints({2, 2})}}});
  t.g.nodes.push_back(Node{"flat", "Flatten", "", {"p1"}, {"f"}, {}});
  t.g.nodes.push_back(Node{"fc", "Gemm", "", {"f", "w2", "b2"}, {"logits"}, {{"transB", A::Int(1)}}});
  t.g.outputs = {"logits"};
  t.g.values["logits"] = ValueInfo{DType::F32, true, {Dim(std::string("N")), Dim(3)}};
  return t;
}

const Node* find_op(const Graph& g, const std::string& op) {
  for (const Node& n : g.nodes)
    if (n.op_type == op) return &n;
  return nullptr;
}

TEST(Backward, CrossEntropyGraphHasOneGradientPerParameter) {
  Graph g = autodiff::backward(autodiff::attach_loss(small_cnn().g));
  EXPECT_TRUE(g.is_input("image"));
  EXPECT_TRUE(g.is_input("labels"));
  EXPECT_EQ(g.info("labels")->dtype, DType::I64);
  for (const char* o : {"logits", "loss", "w1_grad", "b1_grad", "w2_grad", "b2_grad"}) EXPECT_TRUE(g.is_output(o)) << o;
  EXPECT_EQ(g.info("w1_grad")->str(), "f32[2,1,3,3]");
  const Node* sce = find_op(g, "SoftmaxCrossEntropyLoss");
  ASSERT_TRUE(sce);
  EXPECT_TRUE(sce->has_output(1)) << "log_prob is kept for the backward";
  const Node* pool = find_op(g, "MaxPool");
  ASSERT_TRUE(pool && pool->has_output(1)) << "MaxPool's Indices are added for MaxPoolGrad";
  const Node* mpg = find_op(g, "MaxPoolGrad");
  ASSERT_TRUE(mpg);
  EXPECT_EQ(mpg->domain, kGraphrunDomain);
  EXPECT_EQ(mpg->inputs[1], pool->outputs[1]);
  EXPECT_EQ(g.opset(kGraphrunDomain), 1);
  EXPECT_TRUE(find_op(g, "SoftmaxCrossEntropyLossGrad"));
  // The relu gradient is standard ops.
  EXPECT_TRUE(find_op(g, "Where"));
  EXPECT_TRUE(find_op(g, "Greater"));
}

TEST(Backward, NoGradientForTheImageInput) {
  Graph g = autodiff::backward(autodiff::attach_loss(small_cnn().g));
  const Node* cg = find_op(g, "ConvGrad");
  ASSERT_TRUE(cg);
  ASSERT_EQ(cg->outputs.size(), 3u);
  EXPECT_EQ(cg->outputs[0], "") << "dX of the first convolution would be the image's gradient";
  EXPECT_EQ(cg->outputs[1], "w1_grad");
  EXPECT_EQ(cg->outputs[2], "b1_grad");
}

TEST(Backward, FrozenParametersGetNoGradientNodes) {
  autodiff::BackwardOptions o;
  o.freeze = {"w1", "b1"};
  Graph g = autodiff::backward(autodiff::attach_loss(small_cnn().g), o);
  EXPECT_FALSE(g.is_output("w1_grad"));
  EXPECT_FALSE(g.is_output("b1_grad"));
  EXPECT_TRUE(g.is_output("w2_grad"));
  // Nothing below the Gemm needs a gradient: no ConvGrad, no pooling or relu gradient, no dX of the Gemm.
  EXPECT_FALSE(find_op(g, "ConvGrad"));
  EXPECT_FALSE(find_op(g, "MaxPoolGrad"));
  EXPECT_FALSE(find_op(g, "Where"));
  for (const Node& n : g.nodes) EXPECT_NE(n.op_type, "Reshape") << n.describe();
  int gemms = count_ops(g, "Gemm");
  EXPECT_EQ(gemms, 2) << "the forward Gemm and dW; no dX";
}

TEST(Backward, FreezingOnlyTheWeightKeepsTheBiasGradient) {
  autodiff::BackwardOptions o;
  o.freeze = {"w1"};
  Graph g = autodiff::backward(autodiff::attach_loss(small_cnn().g), o);
  const Node* cg = find_op(g, "ConvGrad");
  ASSERT_TRUE(cg);
  EXPECT_EQ(cg->outputs[0], "");
  EXPECT_EQ(cg->outputs[1], "");
  EXPECT_EQ(cg->outputs[2], "b1_grad");
}

TEST(Backward, UnknownFreezeNameListsTheParameters) {
  autodiff::BackwardOptions o;
  o.freeze = {"conv9.weight"};
  try {
    autodiff::backward(autodiff::attach_loss(small_cnn().g), o);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("'conv9.weight'"), std::string::npos) << m;
    EXPECT_NE(m.find("b1, b2, w1, w2"), std::string::npos) << m;
  }
}

TEST(Backward, OpWithoutRuleNamesOpAndNode) {
  TestGraph t = small_cnn();
  t.g.nodes[1].op_type = "Foo";
  t.g.nodes[1].name = "bar";
  try {
    autodiff::backward(autodiff::attach_loss(t.g));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "no gradient rule for op 'Foo' (node 'bar')");
  }
}

TEST(Backward, OpWithoutRuleOffThePathIsFine) {
  TestGraph t = small_cnn();
  // A side branch from the image only: it needs no gradient, so no rule is asked for.
  t.g.nodes.push_back(Node{"side", "Foo", "", {"image"}, {"side_out"}, {}});
  t.g.outputs.push_back("side_out");
  Graph g = autodiff::backward(autodiff::attach_loss(t.g));
  EXPECT_TRUE(g.is_output("w1_grad"));
}

TEST(Backward, FanOutGradientsAreSummed) {
  TestGraph t;
  std::string w = t.param("w", {3}, 1);
  std::string a = t.node("Relu", {w});
  std::string b = t.node("Sigmoid", {w});
  std::string c = t.node("Add", {a, b});
  t.g.outputs = {c};
  t.g.nodes.push_back(Node{"s", "ReduceSum", "", {c}, {"loss"}, {{"keepdims", A::Int(0)}}});
  Graph g = autodiff::backward(t.g);
  EXPECT_EQ(count_ops(g, "Sum"), 1);
  int p = g.producer("w_grad");
  ASSERT_GE(p, 0);
  EXPECT_EQ(g.nodes[p].op_type, "Sum");
}

TEST(Backward, DeadNodesAreRemoved) {
  TestGraph t;
  std::string w = t.param("w", {3}, 1);
  std::string a = t.node("Relu", {w});
  t.node("Exp", {w});  // feeds nothing
  t.g.outputs = {a};
  t.g.nodes.push_back(Node{"s", "ReduceSum", "", {a}, {"loss"}, {{"keepdims", A::Int(0)}}});
  Graph g = autodiff::backward(t.g);
  EXPECT_EQ(count_ops(g, "Exp"), 0);
}

TEST(Backward, IntegerInputsGetNoGradient) {
  TestGraph t;
  std::string w = t.param("w", {5, 3}, 1);
  t.g.inputs.push_back("idx");
  t.g.values["idx"] = ValueInfo{DType::I64, true, {Dim(4)}};
  std::string e = t.node("Gather", {w, "idx"});
  std::string c = t.node("Cast", {"idx"}, {{"to", A::Int(11)}});
  std::string m = t.node("Mul", {t.node("ReduceSum", {e}, {{"keepdims", A::Int(0)}}), t.node("ReduceSum", {c}, {{"keepdims", A::Int(0)}})});
  t.g.outputs = {m};
  t.g.nodes.push_back(Node{"id", "Identity", "", {m}, {"loss"}, {}});
  Graph g = autodiff::backward(t.g);
  EXPECT_TRUE(g.is_output("w_grad"));
  EXPECT_EQ(count_ops(g, "Cast"), 2) << "the forward Cast and the one-hot Cast; none for the indices";
}

TEST(Backward, UnusedParameterGetsZeros) {
  TestGraph t;
  std::string w = t.param("w", {3}, 1);
  t.param("unused", {2, 2}, 2);
  std::string a = t.node("Relu", {w});
  t.g.outputs = {a};
  t.g.nodes.push_back(Node{"s", "ReduceSum", "", {a}, {"loss"}, {{"keepdims", A::Int(0)}}});
  Graph g = autodiff::backward(t.g);
  int p = g.producer("unused_grad");
  ASSERT_GE(p, 0);
  EXPECT_EQ(g.nodes[p].op_type, "ConstantOfShape");
}

TEST(Backward, LossGradInputReplacesTheConstantSeed) {
  autodiff::BackwardOptions o;
  o.loss_grad_input = "loss_grad";
  Graph g = autodiff::backward(autodiff::attach_loss(small_cnn().g), o);
  EXPECT_TRUE(g.is_input("loss_grad"));
  EXPECT_EQ(g.info("loss_grad")->str(), "f32[]");
  const Node* sg = find_op(g, "SoftmaxCrossEntropyLossGrad");
  ASSERT_TRUE(sg);
  EXPECT_EQ(sg->inputs[0], "loss_grad");
}

TEST(Backward, BatchNormTrainingKeepsRunningStatistics) {
  TestGraph t(15);
  t.g.inputs.push_back("x");
  t.g.values["x"] = ValueInfo{DType::F32, true, {Dim(std::string("N")), Dim(3), Dim(4), Dim(4)}};
  for (const char* p : {"scale", "bias", "mean", "var"}) t.g.initializers[p] = random_tensor({3}, 1, 0.5f, 1.f);
  t.g.nodes.push_back(Node{"bn", "BatchNormalization", "", {"x", "scale", "bias", "mean", "var"},
                           {"y", "running_mean", "running_var"}, {{"training_mode", A::Int(1)}}});
  t.g.nodes.push_back(Node{"gap", "GlobalAveragePool", "", {"y"}, {"g"}, {}});
  t.g.nodes.push_back(Node{"fl", "Flatten", "", {"g"}, {"logits"}, {}});
  t.g.outputs = {"logits"};
  t.g.values["logits"] = ValueInfo{DType::F32, true, {Dim(std::string("N")), Dim(3)}};
  auto params = autodiff::trainable_params(t.g, {});
  EXPECT_EQ(params, (std::vector<std::string>{"bias", "scale"})) << "running statistics are state, not parameters";
  Graph g = autodiff::backward(autodiff::attach_loss(t.g));
  const Node* bn = find_op(g, "BatchNormalization");
  ASSERT_TRUE(bn);
  EXPECT_EQ(bn->outputs[1], "running_mean");
  EXPECT_EQ(bn->outputs[2], "running_var");
  const Node* bg = find_op(g, "BatchNormalizationGrad");
  ASSERT_TRUE(bg);
  EXPECT_EQ(bg->outputs[0], "") << "x is an input: no dX";
  EXPECT_FALSE(g.is_output("mean_grad"));
}

TEST(Backward, EmissionFollowsTheOpset) {
  for (int64_t opset : {11, 13}) {
    TestGraph t(opset);
    std::string w = t.param("w", {3, 4}, 1);
    std::string b = t.param("b", {4}, 2);
    std::string a = t.node("Add", {w, b});
    t.g.values[a] = ValueInfo{DType::F64, true, {Dim(3), Dim(4)}};
    t.g.outputs = {a};
    t.g.nodes.push_back(Node{"s", "ReduceSum", "", {a}, {"loss"}, {{"keepdims", A::Int(0)}}});
    Graph g = autodiff::backward(t.g);
    const Node* rs = nullptr;
    for (const Node& n : g.nodes)
      if (n.op_type == "ReduceSum" && n.name != "s") rs = &n;
    ASSERT_TRUE(rs) << "b's gradient is dY summed over axis 0";
    if (opset >= 13) {
      EXPECT_EQ(rs->inputs.size(), 2u);
      EXPECT_FALSE(rs->has_attr("axes"));
    } else {
      EXPECT_EQ(rs->inputs.size(), 1u);
      EXPECT_EQ(rs->attr_ints("axes"), std::vector<int64_t>{0});
    }
  }
}

TEST(Backward, DynamicBroadcastUsesSumToShape) {
  TestGraph t;
  std::string w = t.param("w", {4}, 1);
  t.g.inputs.push_back("x");
  t.g.values["x"] = ValueInfo{DType::F64, true, {Dim(), Dim(4)}};
  std::string a = t.node("Mul", {"x", w});
  t.g.outputs = {a};
  t.g.nodes.push_back(Node{"s", "ReduceSum", "", {a}, {"loss"}, {{"keepdims", A::Int(0)}}});
  Graph g = autodiff::backward(t.g);
  // Without the output's shape the builder cannot tell which axes broadcast.
  const Node* sts = find_op(g, "SumToShape");
  ASSERT_TRUE(sts);
  EXPECT_EQ(sts->domain, kGraphrunDomain);
}

TEST(AttachLoss, MseAddsTargetOfTheOutputsShape) {
  autodiff::LossOptions lo;
  lo.kind = autodiff::LossKind::MSE;
  Graph g = autodiff::attach_loss(small_cnn().g, lo);
  EXPECT_EQ(g.info("labels")->str(), "f32[N,3]");
  EXPECT_EQ(g.info("loss")->str(), "f32[]");
  EXPECT_TRUE(g.is_output("logits"));
  EXPECT_TRUE(g.is_output("loss"));
  EXPECT_TRUE(find_op(g, "ReduceMean"));
}

// --loss output: no labels input; a scalar output is the loss as it is (Identity), any other is averaged
// (ReduceMean over every axis), and its gradient reaches the parameters; an integer output is refused.
TEST(AttachLoss, OutputKindAveragesTheModelsOwnLossWithoutLabels) {
  autodiff::LossOptions lo;
  lo.kind = autodiff::LossKind::Output;
  const Graph cnn = small_cnn().g;
  Graph g = autodiff::attach_loss(cnn, lo);
  EXPECT_EQ(g.inputs, cnn.inputs);
  EXPECT_FALSE(g.info("labels"));
  EXPECT_EQ(g.info("loss")->str(), "f32[]");
  const int p = g.producer("loss");
  ASSERT_GE(p, 0);
  EXPECT_EQ(g.nodes[p].op_type, "ReduceMean");
  EXPECT_EQ(g.nodes[p].inputs, std::vector<std::string>{"logits"});
  EXPECT_EQ(g.nodes[p].attrs.at("keepdims").i, 0);
  EXPECT_FALSE(g.nodes[p].attrs.count("axes"));
  const Graph bw = autodiff::backward(g);
  for (const char* o : {"w1_grad", "b1_grad", "w2_grad", "b2_grad"}) EXPECT_TRUE(bw.is_output(o)) << o;

  // A model whose output already is its scalar loss.
  Graph own = autodiff::attach_loss(cnn, lo);
  own.outputs = {"loss"};
  lo.loss = "loss2";
  Graph h = autodiff::attach_loss(own, lo);
  const int q = h.producer("loss2");
  ASSERT_GE(q, 0);
  EXPECT_EQ(h.nodes[q].op_type, "Identity");
  EXPECT_EQ(h.nodes[q].inputs, std::vector<std::string>{"loss"});

  Graph ints = cnn;
  ints.nodes.push_back(Node{"am", "ArgMax", "", {"logits"}, {"best"}, {}});
  ints.values["best"] = ValueInfo{DType::I64, true, {Dim(std::string("N")), Dim(1)}};
  ints.outputs = {"best"};
  EXPECT_THROW(
      {
        try {
          autodiff::attach_loss(ints, lo);
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("output 'best' is i64, not a float tensor"), std::string::npos)
              << e.what();
          throw;
        }
      },
      Error);
  EXPECT_STREQ(autodiff::loss_kind_name(autodiff::LossKind::Output), "output");
  autodiff::LossKind k{};
  EXPECT_TRUE(autodiff::parse_loss_kind("mse", &k) && k == autodiff::LossKind::MSE);
  EXPECT_FALSE(autodiff::parse_loss_kind("hinge", &k));
}

// The ops docs/ops.md's table lists with a CUDA kernel.
std::set<std::string> ops_with_cuda_kernels() {
  std::ifstream f(source_dir() + "/docs/ops.md");
  std::set<std::string> ops;
  bool table = false;
  for (std::string line; std::getline(f, line);) {
    if (line.rfind("| op | CPU | CUDA |", 0) == 0) table = true;
    if (!table || line.rfind("| `", 0) != 0) continue;
    std::vector<std::string> cells;
    std::stringstream row(line);
    for (std::string c; std::getline(row, c, '|');) cells.push_back(c);
    if (cells.size() < 4) continue;
    auto trim = [](std::string c) {
      c.erase(0, c.find_first_not_of(" `"));
      c.erase(c.find_last_not_of(" `") + 1);
      return c;
    };
    if (!trim(cells[3]).empty()) ops.insert(trim(cells[1]));
  }
  return ops;
}

// --label-smoothing: the loss is built of named standard nodes (SoftmaxCrossEntropyLoss's NLL and its
// log_prob's ReduceMean, each scaled by a Constant, added into `loss`), each with a gradient rule; 0
// leaves the graph exactly as it was; mse or an EPS outside [0, 1) is an error.
TEST(AttachLoss, LabelSmoothingAddsNamedNodesAndZeroLeavesTheGraphAsItWas) {
  autodiff::LossOptions lo;
  lo.label_smoothing = 0.1;
  Graph g = autodiff::attach_loss(small_cnn().g, lo);
  const Node* sce = find_op(g, "SoftmaxCrossEntropyLoss");
  ASSERT_TRUE(sce);
  EXPECT_EQ(sce->outputs[0], "loss_nll");
  const int add = g.producer("loss");
  ASSERT_GE(add, 0);
  EXPECT_EQ(g.nodes[add].op_type, "Add");
  EXPECT_EQ(g.nodes[add].name, "loss_label_smoothing");
  const Node* sum = find_op(g, "ReduceSum");
  ASSERT_TRUE(sum);
  EXPECT_EQ(sum->name, "loss_smoothing_sum");
  EXPECT_EQ(sum->inputs[0], sce->outputs[1]) << "the smoothing term reads SoftmaxCrossEntropyLoss's log_prob";
  ASSERT_GE(g.producer("loss_smoothing_mean"), 0);
  EXPECT_EQ(g.nodes[g.producer("loss_smoothing_mean")].op_type, "Div");
  EXPECT_EQ(g.info("loss")->str(), "f32[]");
  int constants = 0;
  for (const Node& n : g.nodes)
    if (n.op_type == "Constant") {
      ++constants;
      const double v = n.attr("value")->t.as_doubles()[0];
      EXPECT_TRUE(v == double(0.9f) || v == double(-0.1f)) << n.name << " " << v;
    }
  EXPECT_EQ(constants, 2);
  Graph b = autodiff::backward(g);
  for (const char* o : {"w1_grad", "b1_grad", "w2_grad", "b2_grad"}) EXPECT_TRUE(b.is_output(o)) << o;
  // Every op of the training graph has a CUDA kernel (docs/ops.md's column, from a CUDA build), so GPU
  // training keeps working; and no ConstantOfShape, as ReduceMean's gradient would count a symbolic batch with
  // (a tensor of ones summed, where Size(X) / Size(Y) is two scalars).
  const std::set<std::string> cuda = ops_with_cuda_kernels();
  ASSERT_TRUE(cuda.count("Add"));
  for (const Node& n : b.nodes) EXPECT_TRUE(cuda.count(n.op_key())) << n.op_key() << " (node " << n.name << ")";
  EXPECT_FALSE(find_op(b, "ConstantOfShape"));

  autodiff::LossOptions zero;
  zero.label_smoothing = 0;
  const Graph plain = autodiff::attach_loss(small_cnn().g), z = autodiff::attach_loss(small_cnn().g, zero);
  ASSERT_EQ(plain.nodes.size(), z.nodes.size());
  for (size_t i = 0; i < plain.nodes.size(); ++i) {
    EXPECT_EQ(plain.nodes[i].name, z.nodes[i].name);
    EXPECT_EQ(plain.nodes[i].outputs, z.nodes[i].outputs);
  }
  EXPECT_FALSE(find_op(z, "ReduceSum"));

  for (double bad : {-0.1, 1.0}) {
    autodiff::LossOptions b2;
    b2.label_smoothing = bad;
    EXPECT_THROW(autodiff::attach_loss(small_cnn().g, b2), Error) << bad;
  }
  autodiff::LossOptions mse;
  mse.kind = autodiff::LossKind::MSE;
  mse.label_smoothing = 0.1;
  EXPECT_THROW(autodiff::attach_loss(small_cnn().g, mse), Error);
}

// Means over symbolic dimensions count them at run time as Size(X) / Size(Y) (Size, Div, Cast: ops
// every device runs, two scalars), not by summing a tensor of ones from ConstantOfShape (which had no
// CUDA kernel then: --loss mse over a symbolic batch, and a global average pool over a symbolic image
// size, could not train on a GPU; it has one now, and the count stays the cheap one).
TEST(AttachLoss, MeansOverSymbolicDimensionsUseOnlyOpsWithCudaKernels) {
  const std::set<std::string> cuda = ops_with_cuda_kernels();
  ASSERT_TRUE(cuda.count("Size"));
  autodiff::LossOptions mse;
  mse.kind = autodiff::LossKind::MSE;
  const Graph b = autodiff::backward(autodiff::attach_loss(small_cnn().g, mse));
  for (const Node& n : b.nodes) EXPECT_TRUE(cuda.count(n.op_key())) << n.op_key() << " (node " << n.name << ")";
  EXPECT_FALSE(find_op(b, "ConstantOfShape"));

  Graph g;
  g.name = "gap";
  g.opsets[""] = 17;
  g.inputs = {"x"};
  g.values["x"] = ValueInfo{DType::F32, true, {Dim(std::string("N")), Dim(3), Dim(std::string("H")), Dim(std::string("W"))}};
  g.initializers["w"] = testing::random_tensor({3, 3, 1, 1}, 5);
  g.nodes.push_back(Node{"conv", "Conv", "", {"x", "w"}, {"c"}, {}});
  g.nodes.push_back(Node{"gap", "GlobalAveragePool", "", {"c"}, {"p"}, {}});
  g.nodes.push_back(Node{"mean", "ReduceMean", "", {"p"}, {"loss"}, {{"keepdims", Attribute::Int(0)}}});
  g.outputs = {"loss"};
  const Graph gb = autodiff::backward(g);
  EXPECT_FALSE(find_op(gb, "ConstantOfShape"));
  EXPECT_TRUE(find_op(gb, "Size"));
}

TEST(AttachLoss, UnknownOutputIsAnError) {
  autodiff::LossOptions lo;
  lo.output = "nope";
  EXPECT_THROW(autodiff::attach_loss(small_cnn().g, lo), Error);
}

}  // namespace
}  // namespace graphrun::testing

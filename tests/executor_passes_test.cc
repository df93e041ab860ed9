// The executor-only passes (remove_internal_noops, fuse_relu_grad, fuse_relu_epilogue): each graph before
// and after, the numbers bit for bit unchanged, and train's pipeline running them while exported graphs
// stay standard.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <limits>

#include "graph/onnx_io.h"
#include "graph/passes/fold_constants.h"
#include "graph/passes/fuse_relu_epilogue.h"
#include "graph/passes/fuse_relu_grad.h"
#include "graph/passes/remove_internal_noops.h"
#include "runtime/executor.h"
#include "runtime/pipeline.h"
#include "tests/test_util.h"

namespace graphrun {
namespace {

using testing::random_tensor;

std::vector<std::string> ops_of(const Graph& g) {
  std::vector<std::string> r;
  for (const Node& n : g.nodes) r.push_back(n.op_type);
  return r;
}

int count_op(const Graph& g, const std::string& op) {
  int c = 0;
  for (const Node& n : g.nodes) c += n.op_type == op;
  return c;
}

Node constant(const std::string& out, Tensor t) {
  Node n{out + "_node", "Constant", "", {}, {out}, {}};
  n.attrs["value"] = Attribute::Tens(std::move(t));
  return n;
}

ValueInfo info(DType t, std::vector<Dim> dims) {
  ValueInfo v;
  v.dtype = t;
  v.has_shape = true;
  v.shape = std::move(dims);
  return v;
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// Runs both graphs on the same feeds (twice: planning run and planned run) and compares every output.
void expect_same_numbers(const Graph& before, const Graph& after, const std::map<std::string, Tensor>& feeds) {
  runtime::Executor a(before), b(after);
  for (int run = 0; run < 2; ++run) {
    auto ra = a.run(feeds), rb = b.run(feeds);
    for (const auto& o : before.outputs)
      EXPECT_TRUE(bitwise_equal(ra.at(o), rb.at(o))) << o << " (run " << run << "): " << ra.at(o).str() << " vs "
                                                     << rb.at(o).str();
  }
}

// ---- remove_internal_noops ----

Graph noop_graph() {
  Graph g;
  g.name = "noops";
  g.opsets[""] = 17;
  g.inputs = {"x"};
  g.values["x"] = info(DType::F32, {Dim("N"), 8});
  g.initializers["ratio0"] = Tensor::scalar<float>(0.f);
  g.initializers["ratio"] = Tensor::scalar<float>(0.5f);
  Tensor f = Tensor(DType::Bool, {});
  *static_cast<uint8_t*>(f.raw()) = 0;
  g.initializers["no"] = f;
  g.initializers["same"] = Tensor::from_vector<int64_t>({2}, {0, -1});
  g.initializers["other"] = Tensor::from_vector<int64_t>({3}, {0, 2, 4});
  g.nodes = {
      Node{"d_eval", "Dropout", "", {"x", "ratio", "no"}, {"d1"}, {}},       // training_mode false
      Node{"d_zero", "Dropout", "", {"d1", "ratio0"}, {"d2"}, {}},          // no training_mode: inference
      Node{"cast_same", "Cast", "", {"d2"}, {"c1"}, {{"to", Attribute::Int(1)}}},
      Node{"reshape_same", "Reshape", "", {"c1", "same"}, {"r1"}, {}},
      Node{"relu", "Relu", "", {"r1"}, {"y"}, {}},
      Node{"cast_f64", "Cast", "", {"y"}, {"y64"}, {{"to", Attribute::Int(11)}}},  // a real conversion: kept
      Node{"reshape_other", "Reshape", "", {"y", "other"}, {"y3"}, {}},             // another shape: kept
      Node{"id_out", "Identity", "", {"y"}, {"out"}, {}},                            // a graph output: kept
  };
  g.values["d1"] = g.values["d2"] = g.values["c1"] = g.values["r1"] = g.values["y"] = g.values["x"];
  g.outputs = {"y64", "y3", "out"};
  return g;
}

TEST(RemoveInternalNoops, DropsPassThroughDropoutSameTypeCastAndSameShapeReshape) {
  const Graph g = noop_graph();
  const Graph r = passes::remove_internal_noops_pass().run(g);
  EXPECT_EQ(ops_of(r), (std::vector<std::string>{"Relu", "Cast", "Reshape", "Identity"}));
  EXPECT_EQ(r.nodes[0].inputs[0], "x");  // rewired through the whole chain
  EXPECT_EQ(r.outputs, g.outputs);
  std::map<std::string, Tensor> feeds{{"x", random_tensor({4, 8}, 1)}};
  expect_same_numbers(g, r, feeds);
}

TEST(RemoveInternalNoops, KeepsWhatItCannotProveIsANoop) {
  Graph g = noop_graph();
  g.nodes[0].inputs[2] = "x_is_not_constant";  // training_mode from a value the graph computes: unknown
  g.inputs.push_back("x_is_not_constant");
  g.nodes[1].outputs.push_back("mask");         // a mask someone may read
  g.values.erase("d2");                         // Cast's input type unknown
  g.values.erase("c1");                         // Reshape's input shape unknown
  const Graph r = passes::remove_internal_noops(g);
  EXPECT_EQ(count_op(r, "Dropout"), 2);
  EXPECT_EQ(count_op(r, "Cast"), 2);
  EXPECT_EQ(count_op(r, "Reshape"), 2);
  Graph training = noop_graph();
  Tensor yes = Tensor(DType::Bool, {});
  *static_cast<uint8_t*>(yes.raw()) = 1;
  training.initializers["no"] = yes;  // training Dropout with ratio 0.5 draws masks: kept
  EXPECT_EQ(count_op(passes::remove_internal_noops(training), "Dropout"), 1);
}

// ---- fold_constants ----

// The pass as train's pipeline binds it (the CPU kernels evaluate).
passes::Pass bound_fold_constants() {
  runtime::PipelineOptions po;
  po.executor_passes = true;
  const passes::Pipeline train = runtime::training_pipeline(load_onnx(testing::source_dir() + "/models/lenet.onnx"), po);
  for (const passes::Pass& p : train.passes())
    if (p.name() == "fold_constants") return p;
  ADD_FAILURE() << "fold_constants is not in train's pipeline";
  return passes::fold_constants_pass({});
}

Graph fold_graph() {
  Graph g;
  g.name = "fold";
  g.opsets[""] = 17;
  g.inputs = {"x"};
  g.initializers["axes"] = Tensor::from_vector<int64_t>({1}, {0});
  g.initializers["w"] = random_tensor({4}, 6);        // a float initializer: a parameter, never folded
  g.initializers["count"] = Tensor::scalar<int64_t>(3);  // a state update's target: changes every step
  g.initializers["big"] = Tensor::from_vector<int64_t>({1}, {100000});
  g.state_updates = {{"count_next", "count"}};
  g.nodes = {constant("minus1", Tensor::scalar<int64_t>(-1)),
             Node{"unsq", "Unsqueeze", "", {"minus1", "axes"}, {"m1"}, {}},         // folds
             Node{"cat", "Concat", "", {"axes", "m1"}, {"shape"}, {{"axis", Attribute::Int(0)}}},  // folds next
             Node{"reshape", "Reshape", "", {"x", "shape"}, {"y"}, {}},               // reads x: stays
             Node{"scale", "Mul", "", {"w", "w"}, {"w2"}, {}},                        // a parameter: stays
             Node{"next", "Add", "", {"count", "minus1"}, {"count_next"}, {}},        // state: stays
             Node{"fill", "ConstantOfShape", "", {"big"}, {"zeros"}, {}}};            // 800 KB: stays
  g.outputs = {"y", "w2", "count_next", "zeros"};
  return g;
}

TEST(FoldConstants, ComputesAllConstantChainsOnceAndLeavesWhatMayChange) {
  const Graph g = fold_graph();
  const Graph r = bound_fold_constants().run(g);
  EXPECT_EQ(ops_of(r), (std::vector<std::string>{"Constant", "Constant", "Reshape", "Mul", "Add", "ConstantOfShape"}));
  EXPECT_EQ(r.nodes[1].outputs[0], "shape");
  EXPECT_EQ(r.nodes[1].attr("value")->t.as_int64s(), (std::vector<int64_t>{0, -1}));
  std::map<std::string, Tensor> feeds{{"x", random_tensor({3, 2, 2}, 7)}};
  expect_same_numbers(g, r, feeds);
}

// ---- fuse_relu_grad ----

Graph relu_grad_graph(bool mask_read_twice) {
  Graph g;
  g.name = "relu_grad";
  g.opsets[""] = 17;
  g.inputs = {"x", "dy"};
  g.nodes = {Node{"relu", "Relu", "", {"x"}, {"y"}, {}}, constant("zero", Tensor::scalar<float>(0.f)),
             Node{"gt", "Greater", "", {"y", "zero"}, {"mask"}, {}},
             Node{"where", "Where", "", {"mask", "dy", "zero"}, {"dx"}, {}}};
  g.outputs = {"dx"};
  if (mask_read_twice) {
    g.nodes.push_back(Node{"not", "Not", "", {"mask"}, {"off"}, {}});
    g.outputs.push_back("off");
  }
  return g;
}

std::map<std::string, Tensor> relu_grad_feeds() {
  Tensor x = random_tensor({3, 5, 7}, 2), dy = random_tensor({3, 5, 7}, 3);
  // The edges a select keeps and a product would not: -0 and NaN in dY, Y exactly 0, NaN in X.
  float* px = x.data<float>();
  float* pd = dy.data<float>();
  px[0] = 0.f;
  pd[0] = 1.f;
  px[1] = 1.f;
  pd[1] = -0.f;
  px[2] = -1.f;
  pd[2] = std::numeric_limits<float>::quiet_NaN();
  px[3] = std::numeric_limits<float>::quiet_NaN();
  pd[3] = 2.f;
  px[4] = 2.f;
  pd[4] = std::numeric_limits<float>::quiet_NaN();
  return {{"x", x}, {"dy", dy}};
}

TEST(FuseReluGrad, GreaterAndWhereBecomeOneReluGradBitForBit) {
  const Graph g = relu_grad_graph(false);
  const Graph r = passes::fuse_relu_grad_pass().run(g);
  EXPECT_EQ(ops_of(r), (std::vector<std::string>{"Relu", "ReluGrad"}));  // the zero Constant is dead too
  EXPECT_EQ(r.nodes[1].domain, kGraphrunDomain);
  EXPECT_EQ(r.nodes[1].inputs, (std::vector<std::string>{"dy", "y"}));
  EXPECT_EQ(r.nodes[1].outputs, (std::vector<std::string>{"dx"}));
  expect_same_numbers(g, r, relu_grad_feeds());
}

TEST(FuseReluGrad, KeepsTheMaskOthersReadAndLeavesOtherWheres) {
  const Graph shared = passes::fuse_relu_grad(relu_grad_graph(true));
  EXPECT_EQ(ops_of(shared), (std::vector<std::string>{"Relu", "Constant", "Greater", "ReluGrad", "Not"}));
  expect_same_numbers(relu_grad_graph(true), shared, relu_grad_feeds());
  Graph not_relu = relu_grad_graph(false);
  not_relu.nodes[0].op_type = "Neg";  // the mask of another op's output: Where stays Where
  EXPECT_EQ(count_op(passes::fuse_relu_grad(not_relu), "ReluGrad"), 0);
  Graph nonzero = relu_grad_graph(false);
  nonzero.nodes[1] = constant("zero", Tensor::scalar<float>(1.f));
  EXPECT_EQ(count_op(passes::fuse_relu_grad(nonzero), "ReluGrad"), 0);
}

TEST(FuseReluGrad, DifferentShapesAreAnErrorNamingTheNode) {
  Graph g;
  g.opsets[""] = 17;
  g.opsets[kGraphrunDomain] = 1;
  g.inputs = {"dy", "y"};
  g.nodes = {Node{"fused", "ReluGrad", kGraphrunDomain, {"dy", "y"}, {"dx"}, {}}};
  g.outputs = {"dx"};
  runtime::Executor ex(g);
  try {
    ex.run({{"dy", random_tensor({2, 3}, 4)}, {"y", random_tensor({3, 2}, 5)}});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fused"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("differ in shape"), std::string::npos) << e.what();
  }
}

// ---- in the pipeline ----

TEST(ExecutorPasses, TrainRunsThemAndTheExportedGraphsStayStandard) {
  const Graph model = load_onnx(testing::source_dir() + "/models/lenet.onnx");
  runtime::PipelineOptions po;
  const runtime::TrainingGraphs exported = runtime::build_training_graphs(model, po);
  po.executor_passes = true;
  const std::vector<passes::Pass> train = runtime::training_pipeline(model, po).passes();
  ASSERT_GE(train.size(), 3u);
  EXPECT_EQ(train[train.size() - 5].name(), "state_updates");  // after every standard pass
  EXPECT_EQ(train[train.size() - 4].name(), "fold_constants");
  EXPECT_EQ(train[train.size() - 3].name(), "remove_internal_noops");
  EXPECT_EQ(train[train.size() - 2].name(), "fuse_relu_grad");
  EXPECT_EQ(train.back().name(), "fuse_relu_epilogue");
  const runtime::TrainingGraphs internal = runtime::build_training_graphs(model, po);
  const Graph &e = exported.replicas[0].graph, &i = internal.replicas[0].graph;
  EXPECT_EQ(count_op(e, "ReluGrad"), 0);
  EXPECT_EQ(count_op(e, "Where"), 3);
  EXPECT_EQ(count_op(i, "ReluGrad"), 3);  // LeNet's three Relus
  EXPECT_EQ(count_op(i, "Where"), 0);
  EXPECT_EQ(count_op(i, "Greater"), 0);
  EXPECT_EQ(count_op(e, "Relu"), 3);
  EXPECT_EQ(count_op(i, "Relu"), 0);  // all three fused into their producers
  EXPECT_EQ(count_op(i, "FusedConv"), 2);
  EXPECT_EQ(count_op(i, "FusedMatMul"), 1);  // fc1's MatMul + Add; fc2's (the logits) has no Relu
  EXPECT_EQ(count_op(i, "MatMul"), 1);
  EXPECT_EQ(i.outputs, e.outputs);
  EXPECT_EQ(internal.replicas[0].state_updates, exported.replicas[0].state_updates);

  auto r = testing::run_command(testing::graphrun_cli() + " show " + testing::source_dir() +
                                "/models/lenet.onnx --dump-after fuse_relu_grad 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.rfind("# graph after pass fuse_relu_grad\n", 0), 0u) << r.output;
  EXPECT_NE(r.output.find("ai.graphrun.ReluGrad"), std::string::npos) << r.output;
  r = testing::run_command(testing::graphrun_cli() + " show " + testing::source_dir() +
                           "/models/lenet.onnx --devices 2 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("ReluGrad"), std::string::npos) << r.output;
  r = testing::run_command(testing::graphrun_cli() + " show " + testing::source_dir() +
                           "/models/lenet.onnx --dump-after remove_internal_noops 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.rfind("# graph after pass remove_internal_noops\n", 0), 0u) << r.output;
}

// ---- fuse_relu_epilogue ----

// x -> producer (node "p", output "pre") [-> Add(pre, bias) "add", output "sum"] -> Relu -> "y", with
// the recorded types the pass reads; `also_read` makes "pre" a graph output too.
Graph epilogue_graph(Node producer, const std::vector<Tensor>& params, DType t, bool also_read = false) {
  Graph g;
  g.name = "epilogue";
  g.opsets[""] = 17;
  g.inputs = {"x"};
  for (size_t i = 0; i < params.size(); ++i) g.initializers["p" + std::to_string(i)] = params[i];
  producer.name = "p";
  producer.outputs = {"pre"};
  g.nodes = {producer};
  std::string relu_in = "pre";
  g.values["pre"] = info(t, {});
  g.values["pre"].has_shape = false;
  g.nodes.push_back(Node{"relu", "Relu", "", {relu_in}, {"y"}, {}});
  g.outputs = {"y"};
  if (also_read) g.outputs.push_back("pre");
  return g;
}

Tensor with_edges(Tensor x) {
  // NaN must pass through the fused Relu as through Relu.
  if (x.dtype() == DType::F32) x.data<float>()[1] = std::numeric_limits<float>::quiet_NaN();
  else x.data<double>()[1] = std::numeric_limits<double>::quiet_NaN();
  return x;
}

Tensor random_of(DType t, const Shape& s, uint64_t seed) {
  Tensor r = random_tensor(s, seed);
  if (t == DType::F32) return r;
  Tensor d(DType::F64, s);
  for (int64_t i = 0; i < r.numel(); ++i) d.data<double>()[i] = r.data<float>()[i];
  return d;
}

Graph conv_relu_graph(DType t, const Shape& w, bool bias, bool also_read = false) {
  Node conv{"", "Conv", "", {"x", "p0"}, {}, {{"pads", Attribute::Ints({1, 1, 1, 1})}}};
  std::vector<Tensor> params{random_of(t, w, 11)};
  if (bias) conv.inputs.push_back("p1"), params.push_back(random_of(t, {w[0]}, 12));
  return epilogue_graph(conv, params, t, also_read);
}

TEST(FuseReluEpilogue, ConvAndReluBecomeOneFusedConvBitForBit) {
  // The three CPU paths: direct kernel (one input channel), one GEMM per image (>= 256 pixels), and
  // chunks of images (few pixels); f32 and f64 (the GEMM paths alone), with and without a bias.
  struct Case {
    DType t;
    Shape x, w;
    bool bias;
  };
  const std::vector<Case> cases = {{DType::F32, {3, 1, 12, 12}, {6, 1, 3, 3}, true},
                                   {DType::F32, {2, 3, 20, 20}, {4, 3, 3, 3}, true},
                                   {DType::F32, {5, 4, 6, 6}, {5, 4, 3, 3}, true},
                                   {DType::F32, {5, 4, 6, 6}, {5, 4, 3, 3}, false},
                                   {DType::F64, {2, 3, 20, 20}, {4, 3, 3, 3}, true},
                                   {DType::F64, {5, 1, 6, 6}, {5, 1, 3, 3}, true}};
  for (const Case& c : cases) {
    SCOPED_TRACE(shape_str(c.x) + " * " + shape_str(c.w) + " " + dtype_name(c.t));
    const Graph g = conv_relu_graph(c.t, c.w, c.bias);
    const Graph r = passes::fuse_relu_epilogue_pass().run(g);
    ASSERT_EQ(ops_of(r), (std::vector<std::string>{"FusedConv"}));
    EXPECT_EQ(r.nodes[0].domain, kGraphrunDomain);
    EXPECT_EQ(r.nodes[0].attr_s("activation", ""), "Relu");
    EXPECT_EQ(r.nodes[0].outputs, (std::vector<std::string>{"y"}));
    EXPECT_EQ(r.nodes[0].attr_ints("pads"), (std::vector<int64_t>{1, 1, 1, 1}));
    EXPECT_EQ(r.values.count("pre"), 0u);
    for (int threads : {1, 2}) {
      runtime::ExecOptions o;
      o.threads = threads;
      runtime::Executor a(g, o), b(r, o);
      const std::map<std::string, Tensor> feeds{{"x", with_edges(random_of(c.t, c.x, 13))}};
      const Tensor ya = a.run(feeds).at("y"), yb = b.run(feeds).at("y");
      EXPECT_TRUE(bitwise_equal(ya, yb)) << threads << " threads";
    }
  }
}

TEST(FuseReluEpilogue, GemmAndMatMulWithBiasBecomeFusedBitForBit) {
  Node gemm{"", "Gemm", "", {"x", "p0", "p1"}, {}, {{"transB", Attribute::Int(1)}, {"alpha", Attribute::Float(0.5f)}}};
  const Graph g = epilogue_graph(gemm, {random_tensor({6, 9}, 21), random_tensor({6}, 22)}, DType::F32);
  const Graph r = passes::fuse_relu_epilogue(g);
  ASSERT_EQ(ops_of(r), (std::vector<std::string>{"FusedGemm"}));
  EXPECT_EQ(r.nodes[0].attr_i("transB", 0), 1);
  expect_same_numbers(g, r, {{"x", with_edges(random_tensor({7, 9}, 23))}});

  // PyTorch's Linear + ReLU at opset 13+: MatMul(X, W^T stored [K, N]) + bias [N], either operand order,
  // X of rank 3 (the batch folds into the GEMM's rows).
  for (DType t : {DType::F32, DType::F64})
    for (int side = 0; side < 2; ++side) {
      Graph m = epilogue_graph(Node{"", "MatMul", "", {"x", "p0"}, {}, {}}, {random_of(t, {9, 6}, 24), random_of(t, {6}, 25)}, t);
      m.values["x"] = info(t, {Dim("N"), 4, 9});
      m.values["p0"] = info(t, {9, 6});
      m.values["p1"] = info(t, {6});
      m.values["pre"] = m.values["sum"] = info(t, {Dim("N"), 4, 6});
      Node add{"add", "Add", "", {"pre", "p1"}, {"sum"}, {}};
      if (side) std::swap(add.inputs[0], add.inputs[1]);
      m.nodes.insert(m.nodes.begin() + 1, add);
      m.nodes[2].inputs = {"sum"};
      const Graph f = passes::fuse_relu_epilogue(m);
      ASSERT_EQ(ops_of(f), (std::vector<std::string>{"FusedMatMul"})) << side;
      EXPECT_EQ(f.nodes[0].inputs, (std::vector<std::string>{"x", "p0", "p1"}));
      EXPECT_EQ(f.values.count("sum") + f.values.count("pre"), 0u);
      expect_same_numbers(m, f, {{"x", with_edges(random_of(t, {3, 4, 9}, 26))}});
    }
}

TEST(FuseReluEpilogue, LeavesPreActivationsOthersReadAndOtherShapes) {
  // The pre-activation is a graph output (or read by another node): it must exist, so nothing fuses.
  EXPECT_EQ(ops_of(passes::fuse_relu_epilogue(conv_relu_graph(DType::F32, {4, 3, 3, 3}, true, true))),
            (std::vector<std::string>{"Conv", "Relu"}));
  Graph two = conv_relu_graph(DType::F32, {4, 3, 3, 3}, true);
  two.nodes.push_back(Node{"neg", "Neg", "", {"pre"}, {"z"}, {}});
  two.outputs.push_back("z");
  EXPECT_EQ(count_op(passes::fuse_relu_epilogue(two), "FusedConv"), 0);
  // Not a float (or no recorded type): left alone.
  Graph untyped = conv_relu_graph(DType::F32, {4, 3, 3, 3}, true);
  untyped.values.erase("pre");
  EXPECT_EQ(count_op(passes::fuse_relu_epilogue(untyped), "FusedConv"), 0);
  // MatMul + Add where the Add is no row bias ([M, N] addend) or B has batch axes: unfused.
  for (const std::vector<Dim>& bias : {std::vector<Dim>{4, 6}, std::vector<Dim>{6, 1}}) {
    Graph m = epilogue_graph(Node{"", "MatMul", "", {"x", "p0"}, {}, {}}, {random_tensor({9, 6}, 24)}, DType::F32);
    m.inputs.push_back("b");
    m.values["x"] = info(DType::F32, {4, 9});
    m.values["p0"] = info(DType::F32, {9, 6});
    m.values["b"] = info(DType::F32, bias);
    m.values["pre"] = m.values["sum"] = info(DType::F32, {4, 6});
    m.nodes.insert(m.nodes.begin() + 1, Node{"add", "Add", "", {"pre", "b"}, {"sum"}, {}});
    m.nodes[2].inputs = {"sum"};
    EXPECT_EQ(count_op(passes::fuse_relu_epilogue(m), "FusedMatMul"), 0) << shape_str(m.values["b"].concrete());
  }
}

TEST(FuseReluEpilogue, AnUnknownActivationIsAnErrorNamingTheNode) {
  Graph g = passes::fuse_relu_epilogue(conv_relu_graph(DType::F32, {4, 3, 3, 3}, true));
  ASSERT_EQ(g.nodes.size(), 1u);
  g.nodes[0].attrs["activation"] = Attribute::Str("Tanh");
  runtime::Executor ex(g);
  try {
    ex.run({{"x", random_tensor({1, 3, 5, 5}, 3)}});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'p'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("Tanh"), std::string::npos) << e.what();
  }
}

// How often the pass fires on the models graphrun ships (and ResNet-18, which has no Conv -> Relu:
// its Relus follow BatchNormalization or the residual Add).
TEST(FuseReluEpilogue, FiresOnLeNetSimpleCnnNotResNet18) {
  const std::string resnet = testing::binary_dir() + "/models/resnet18.onnx";
  struct Model {
    std::string path;
    int conv, matmul;
  };
  const std::vector<Model> models = {{testing::source_dir() + "/models/lenet.onnx", 2, 1},
                                     {testing::source_dir() + "/models/simplecnn.onnx", 1, 0},
                                     {resnet, 0, 0}};
  for (const Model& m : models) {
    if (!std::filesystem::exists(m.path)) {
      std::cout << "skipping " << m.path << ": not generated\n";
      continue;
    }
    runtime::PipelineOptions po;
    po.executor_passes = true;
    const Graph g = runtime::build_training_graphs(load_onnx(m.path), po).replicas[0].graph;
    EXPECT_EQ(count_op(g, "FusedConv"), m.conv) << m.path;
    EXPECT_EQ(count_op(g, "FusedMatMul"), m.matmul) << m.path;
    EXPECT_EQ(count_op(g, "FusedGemm"), 0) << m.path;  // their Gemms are the logits
    EXPECT_EQ(count_op(g, "Relu"), m.path == resnet ? 17 : 0) << m.path;
  }
}

TEST(FuseReluEpilogue, SkipPassesLeavesItOutAndNamesTheValidOnes) {
  const Graph model = load_onnx(testing::source_dir() + "/models/lenet.onnx");
  runtime::PipelineOptions po;
  po.executor_passes = true;
  setenv("GRAPHRUN_SKIP_PASSES", "fuse_relu_epilogue,fuse_relu_grad", 1);
  std::vector<std::string> names;
  const passes::Pipeline pipeline = runtime::training_pipeline(model, po);
  for (const passes::Pass& p : pipeline.passes()) names.push_back(p.name());
  EXPECT_EQ(names.back(), "remove_internal_noops");
  setenv("GRAPHRUN_SKIP_PASSES", "backward", 1);
  try {
    runtime::training_pipeline(model, po);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'backward' is no executor-only pass"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("fuse_relu_epilogue"), std::string::npos) << e.what();
  }
  unsetenv("GRAPHRUN_SKIP_PASSES");
}

}  // namespace
}  // namespace graphrun

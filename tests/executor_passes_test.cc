// The executor-only passes (remove_internal_noops, fuse_relu_grad, fuse_relu_epilogue, fold_transposes,
// fuse_relu_bn_add, fuse_pool_relu_grad, recompute_maxpool_argmax): each graph before
// and after, the numbers bit for bit unchanged, and train's pipeline running them while exported graphs
// stay standard.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <limits>
#include <set>

#include "graph/onnx_io.h"
#include "graph/passes/fold_constants.h"
#include "graph/passes/fold_transposes.h"
#include "graph/passes/fuse_pool_relu_grad.h"
#include "graph/passes/recompute_maxpool_argmax.h"
#include "graph/passes/fuse_relu_bn_add.h"
#include "graph/passes/fuse_relu_epilogue.h"
#include "graph/passes/fuse_relu_grad.h"
#include "graph/passes/remove_internal_noops.h"
#include "runtime/executor.h"
#include "runtime/pipeline.h"
#include "runtime/trainer.h"
#include "tests/test_util.h"
#include "tests/trainer_test_util.h"

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
  g.nodes[1].outputs.push_back("mask");         // a mask the graph returns
  g.outputs.push_back("mask");
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
  // A mask nothing reads keeps nothing (torch's dropout=0.0 in training mode, masks named by the export).
  Graph unread = noop_graph();
  unread.nodes[1].outputs.push_back("unread_mask");
  EXPECT_EQ(count_op(passes::remove_internal_noops(unread), "Dropout"), 0);
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

// ---- fuse_pool_relu_grad ----

// x -> Relu -> y -> pooling -> p; the backward of both as autodiff and fuse_relu_grad leave it:
// PoolGrad(dp, [Indices,] y) -> dy, ReluGrad(dy, y) -> dx. `dy_read_twice` makes dy a graph output too.
Graph pool_relu_grad_graph(bool max, bool dy_read_twice) {
  Graph g;
  g.name = "pool_relu_grad";
  g.opsets[""] = 17;
  g.opsets[kGraphrunDomain] = 1;
  g.inputs = {"x", "dp"};
  const std::map<std::string, Attribute> at{{"kernel_shape", Attribute::Ints({3, 3})}, {"strides", Attribute::Ints({2, 2})},
                                            {"pads", Attribute::Ints({1, 1, 1, 1})}};
  g.nodes.push_back(Node{"relu", "Relu", "", {"x"}, {"y"}, {}});
  if (max) {
    g.nodes.push_back(Node{"pool", "MaxPool", "", {"y"}, {"p", "idx"}, at});
    g.nodes.push_back(Node{"pool_grad", "MaxPoolGrad", kGraphrunDomain, {"dp", "idx", "y"}, {"dy"}, {}});
  } else {
    g.nodes.push_back(Node{"pool", "AveragePool", "", {"y"}, {"p"}, at});
    g.nodes.push_back(Node{"pool_grad", "AveragePoolGrad", kGraphrunDomain, {"dp", "y"}, {"dy"}, at});
  }
  g.nodes.push_back(Node{"relu_grad", "ReluGrad", kGraphrunDomain, {"dy", "y"}, {"dx"}, {}});
  g.outputs = {"p", "dx"};
  if (dy_read_twice) g.outputs.push_back("dy");
  return g;
}

TEST(FusePoolReluGrad, PoolingAndReluGradientsBecomeOneNodeBitForBit) {
  Tensor x = random_tensor({2, 3, 9, 9}, 6), dp = random_tensor({2, 3, 5, 5}, 7);
  x.data<float>()[0] = std::numeric_limits<float>::quiet_NaN();
  dp.data<float>()[1] = std::numeric_limits<float>::quiet_NaN();
  for (bool max : {false, true}) {
    const Graph g = pool_relu_grad_graph(max, false);
    const Graph r = passes::fuse_pool_relu_grad_pass().run(g);
    EXPECT_EQ(ops_of(r), (std::vector<std::string>{"Relu", max ? "MaxPool" : "AveragePool",
                                                   max ? "MaxPoolGrad" : "AveragePoolGrad"}));
    EXPECT_EQ(r.nodes[2].attr_i("relu", 0), 1);
    EXPECT_EQ(r.nodes[2].outputs, (std::vector<std::string>{"dx"}));
    EXPECT_FALSE(r.values.count("dy"));
    expect_same_numbers(g, r, {{"x", x}, {"dp", dp}});
  }
}

TEST(FusePoolReluGrad, LeavesAGradientOthersReadAndAnotherTensorsMask) {
  for (bool max : {false, true}) {
    const Graph shared = passes::fuse_pool_relu_grad(pool_relu_grad_graph(max, true));
    EXPECT_EQ(count_op(shared, "ReluGrad"), 1);
    Graph other = pool_relu_grad_graph(max, false);
    other.inputs.push_back("z");  // the Relu gradient of another tensor than the pooling's input
    other.nodes.back().inputs[1] = "z";
    EXPECT_EQ(count_op(passes::fuse_pool_relu_grad(other), "ReluGrad"), 1);
  }
}

// LeNet (AveragePool after both convolutions' Relus) and SimpleCNN (MaxPool after its Relu) fuse every
// pooling gradient, and train to the same bits with the pass and without (GRAPHRUN_SKIP_PASSES).
TEST(FusePoolReluGrad, FiresOnLeNetAndSimpleCnnAndTrainsToTheSameBits) {
  if (!testing::have_data()) GTEST_SKIP() << "Fashion-MNIST is not installed (Debian package dataset-fashion-mnist)";
  for (auto [model, fused] : {std::pair<std::string, int>{"lenet", 2}, {"simplecnn", 1}}) {
    const Graph m = load_onnx(testing::source_dir() + "/models/" + model + ".onnx");
    runtime::PipelineOptions po;
    po.executor_passes = true;
    int relu = 0;
    const runtime::TrainingGraphs tg = runtime::build_training_graphs(m, po);
    for (const Node& n : tg.replicas[0].graph.nodes)
      relu += n.op_type.find("PoolGrad") != std::string::npos && n.attr_i("relu", 0) == 1;
    EXPECT_EQ(relu, fused) << model;
    runtime::TrainOptions o = testing::quick(2, 32, 6, 64);
    runtime::Trainer with(m, o);
    with.train_epoch(0);
    setenv("GRAPHRUN_SKIP_PASSES", "fuse_pool_relu_grad", 1);
    runtime::Trainer without(m, o);
    without.train_epoch(0);
    unsetenv("GRAPHRUN_SKIP_PASSES");
    for (const auto& [name, v] : with.replica(0).states())
      EXPECT_TRUE(bitwise_equal(runtime::to_host(v), runtime::to_host(without.replica(0).states().at(name))))
          << model << ": " << name;
  }
}

// ---- recompute_maxpool_argmax ----

// x -> Relu -> y -> MaxPool (2x2, stride 2) -> p, Indices; MaxPoolGrad(dp, Indices, y) -> dy, then
// ReluGrad(dy, y) -> dx.
Graph maxpool_grad_graph(const std::map<std::string, Attribute>& at) {
  Graph g;
  g.name = "maxpool_grad";
  g.opsets[""] = 17;
  g.opsets[kGraphrunDomain] = 1;
  g.inputs = {"x", "dp"};
  g.nodes.push_back(Node{"relu", "Relu", "", {"x"}, {"y"}, {}});
  g.nodes.push_back(Node{"pool", "MaxPool", "", {"y"}, {"p", "idx"}, at});
  g.nodes.push_back(Node{"pool_grad", "MaxPoolGrad", kGraphrunDomain, {"dp", "idx", "y"}, {"dy"}, {}});
  g.nodes.push_back(Node{"relu_grad", "ReluGrad", kGraphrunDomain, {"dy", "y"}, {"dx"}, {}});
  g.outputs = {"p", "dy", "dx"};
  return g;
}

TEST(RecomputeMaxPoolArgmax, DropsTheIndicesOfPlainWindowsBitForBit) {
  const std::map<std::string, Attribute> plain{{"kernel_shape", Attribute::Ints({2, 2})},
                                               {"strides", Attribute::Ints({2, 2})}, {"pads", Attribute::Ints({0, 0, 0, 0})}};
  Tensor x = random_tensor({2, 3, 9, 8}, 6), dp = random_tensor({2, 3, 4, 4}, 7);
  float* xv = x.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) xv[i] = std::round(xv[i] * 2) / 2;  // ties
  xv[0] = std::numeric_limits<float>::quiet_NaN();
  dp.data<float>()[1] = -0.f;
  const Graph g = maxpool_grad_graph(plain);
  for (bool fused : {false, true}) {  // with fuse_pool_relu_grad first, as the pipeline runs them
    const Graph before = fused ? passes::fuse_pool_relu_grad(g) : g;
    const Graph r = passes::recompute_maxpool_argmax_pass().run(before);
    const Node& pool = r.nodes[1];
    const Node& grad = r.nodes[2];
    EXPECT_EQ(pool.outputs, (std::vector<std::string>{"p", ""}));
    EXPECT_EQ(grad.inputs[1], "");
    EXPECT_EQ(grad.attr_ints("kernel_shape"), (std::vector<int64_t>{2, 2}));
    EXPECT_FALSE(r.values.count("idx"));
    expect_same_numbers(before, r, {{"x", x}, {"dp", dp}});
  }
}

TEST(RecomputeMaxPoolArgmax, LeavesOtherWindowsAndIndicesOthersRead) {
  auto unchanged = [](const Graph& g) {
    const Graph r = passes::recompute_maxpool_argmax(g);
    return r.nodes[1].outputs.size() == 2 && r.nodes[1].outputs[1] == "idx" && r.nodes[2].inputs[1] == "idx";
  };
  const std::map<std::string, Attribute> plain{{"kernel_shape", Attribute::Ints({2, 2})}, {"strides", Attribute::Ints({2, 2})}};
  EXPECT_FALSE(unchanged(maxpool_grad_graph(plain)));
  for (auto [name, value] : std::vector<std::pair<std::string, Attribute>>{
           {"kernel_shape", Attribute::Ints({3, 3})}, {"strides", Attribute::Ints({1, 1})},
           {"pads", Attribute::Ints({0, 0, 1, 1})}, {"ceil_mode", Attribute::Int(1)},
           {"dilations", Attribute::Ints({2, 2})}, {"storage_order", Attribute::Int(1)},
           {"auto_pad", Attribute::Str("SAME_UPPER")}}) {
    auto at = plain;
    at[name] = value;
    EXPECT_TRUE(unchanged(maxpool_grad_graph(at))) << name;
  }
  Graph out = maxpool_grad_graph(plain);
  out.outputs.push_back("idx");  // the user fetches the Indices
  EXPECT_TRUE(unchanged(out));
  Graph other = maxpool_grad_graph(plain);
  other.inputs.push_back("z");  // a MaxPoolGrad of another X
  other.nodes[2].inputs[2] = "z";
  EXPECT_TRUE(unchanged(other));
  Graph also = maxpool_grad_graph(plain);
  also.nodes.push_back(Node{"cast", "Cast", "", {"idx"}, {"idx_f"}, {{"to", Attribute::Int(1)}}});
  also.outputs.push_back("idx_f");
  EXPECT_TRUE(unchanged(also));
}

// SimpleCNN (MaxPool 2x2 after its Relu) trains to the same bits with the pass and without; LeNet has
// no MaxPool.
TEST(RecomputeMaxPoolArgmax, FiresOnSimpleCnnAndTrainsToTheSameBits) {
  if (!testing::have_data()) GTEST_SKIP() << "Fashion-MNIST is not installed (Debian package dataset-fashion-mnist)";
  const Graph m = load_onnx(testing::source_dir() + "/models/simplecnn.onnx");
  runtime::PipelineOptions po;
  po.executor_passes = true;
  const runtime::TrainingGraphs tg = runtime::build_training_graphs(m, po);
  int recomputed = 0;
  for (const Node& n : tg.replicas[0].graph.nodes) recomputed += n.op_type == "MaxPoolGrad" && n.inputs[1].empty();
  EXPECT_EQ(recomputed, 1);
  runtime::TrainOptions o = testing::quick(2, 32, 6, 64);
  runtime::Trainer with(m, o);
  with.train_epoch(0);
  setenv("GRAPHRUN_SKIP_PASSES", "recompute_maxpool_argmax", 1);
  runtime::Trainer without(m, o);
  without.train_epoch(0);
  unsetenv("GRAPHRUN_SKIP_PASSES");
  for (const auto& [name, v] : with.replica(0).states())
    EXPECT_TRUE(bitwise_equal(runtime::to_host(v), runtime::to_host(without.replica(0).states().at(name)))) << name;
}

// ---- in the pipeline ----

TEST(ExecutorPasses, TrainRunsThemAndTheExportedGraphsStayStandard) {
  const Graph model = load_onnx(testing::source_dir() + "/models/lenet.onnx");
  runtime::PipelineOptions po;
  const runtime::TrainingGraphs exported = runtime::build_training_graphs(model, po);
  po.executor_passes = true;
  const std::vector<passes::Pass> train = runtime::training_pipeline(model, po).passes();
  ASSERT_GE(train.size(), 3u);
  EXPECT_EQ(train[train.size() - 9].name(), "state_updates");  // after every standard pass
  EXPECT_EQ(train[train.size() - 8].name(), "fold_constants");
  EXPECT_EQ(train[train.size() - 7].name(), "remove_internal_noops");
  EXPECT_EQ(train[train.size() - 6].name(), "fuse_relu_grad");
  EXPECT_EQ(train[train.size() - 5].name(), "fuse_relu_epilogue");
  EXPECT_EQ(train[train.size() - 4].name(), "fold_transposes");
  EXPECT_EQ(train[train.size() - 3].name(), "fuse_relu_bn_add");
  EXPECT_EQ(train[train.size() - 2].name(), "fuse_pool_relu_grad");
  EXPECT_EQ(train.back().name(), "recompute_maxpool_argmax");
  const runtime::TrainingGraphs internal = runtime::build_training_graphs(model, po);
  const Graph &e = exported.replicas[0].graph, &i = internal.replicas[0].graph;
  EXPECT_EQ(count_op(e, "ReluGrad"), 0);
  EXPECT_EQ(count_op(e, "Where"), 3);
  EXPECT_EQ(count_op(i, "ReluGrad"), 1);  // LeNet's three Relus: fc1's, and two in the pooling gradients
  EXPECT_EQ(count_op(i, "AveragePoolGrad"), 2);
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
// its Relus follow BatchNormalization or the residual Add, pass fuse_relu_bn_add's).
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
    EXPECT_EQ(count_op(g, "Relu"), 0) << m.path;
  }
}

TEST(FuseReluEpilogue, SkipPassesLeavesItOutAndNamesTheValidOnes) {
  const Graph model = load_onnx(testing::source_dir() + "/models/lenet.onnx");
  runtime::PipelineOptions po;
  po.executor_passes = true;
  setenv("GRAPHRUN_SKIP_PASSES",
         "fuse_relu_epilogue,fuse_relu_grad,fold_transposes,fuse_relu_bn_add,fuse_pool_relu_grad,recompute_maxpool_argmax",
         1);
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

// ---- fold_transposes ----

// The states after training `model` as `o` says, with every executor pass and with `pass` left out.
std::pair<std::map<std::string, Tensor>, std::map<std::string, Tensor>> states_with_and_without(
    const Graph& model, const runtime::TrainOptions& o, const char* pass) {
  auto with = testing::states_after_fit(model, o);
  setenv("GRAPHRUN_SKIP_PASSES", pass, 1);
  auto without = testing::states_after_fit(model, o);
  unsetenv("GRAPHRUN_SKIP_PASSES");
  return {std::move(with), std::move(without)};
}

Node transpose(const std::string& name, const std::string& in, const std::string& out, std::vector<int64_t> perm) {
  return Node{name, "Transpose", "", {in}, {out}, {{"perm", Attribute::Ints(std::move(perm))}}};
}

// x [N, 3, 4, 5] through pairs of Transposes: t1 then t2 undo each other (y1 = Relu(x)); t3 then t4 compose
// to one permutation (y2); t5 then t6 undo each other but t5 is also read (y3 and y5); t7 then t8 undo each
// other into a graph output (y4, which must stay a value of its own).
Graph transpose_pairs_graph() {
  Graph g;
  g.name = "transposes";
  g.opsets[""] = 17;
  g.inputs = {"x"};
  g.values["x"] = info(DType::F32, {Dim("N"), 3, 4, 5});
  g.nodes = {transpose("t1", "x", "a1", {1, 2, 3, 0}), transpose("t2", "a1", "b1", {3, 0, 1, 2}),
             Node{"relu", "Relu", "", {"b1"}, {"y1"}, {}},
             transpose("t3", "x", "a2", {0, 2, 1, 3}), transpose("t4", "a2", "y2", {3, 0, 2, 1}),
             transpose("t5", "x", "a3", {0, 1, 3, 2}), transpose("t6", "a3", "b3", {0, 1, 3, 2}),
             Node{"neg", "Neg", "", {"b3"}, {"y3"}, {}}, Node{"abs", "Abs", "", {"a3"}, {"y5"}, {}},
             transpose("t7", "x", "a4", {2, 1, 0, 3}), transpose("t8", "a4", "y4", {2, 1, 0, 3})};
  g.outputs = {"y1", "y2", "y3", "y4", "y5"};
  return g;
}

TEST(FoldTransposes, PairsOfTransposesBecomeOneOrNoneBitForBit) {
  const Graph g = transpose_pairs_graph();
  const Graph f = passes::fold_transposes(g);
  // t1/t2 and t5/t6 vanish (t5 stays for abs), t3/t4 become one, t7/t8 one identity Transpose into y4.
  EXPECT_EQ(ops_of(f), (std::vector<std::string>{"Relu", "Transpose", "Transpose", "Neg", "Abs", "Transpose"}));
  for (const Node& n : f.nodes) {
    if (n.op_type == "Relu" || n.op_type == "Neg") {
      EXPECT_EQ(n.inputs[0], "x") << n.name;
    }
    if (n.name == "t4") {
      EXPECT_EQ(n.inputs[0], "x");
      // a2 axis k = x axis [0,2,1,3][k]; y2 axis k = a2 axis [3,0,2,1][k] = x axis [3,0,1,2][k].
      EXPECT_EQ(n.attr_ints("perm"), (std::vector<int64_t>{3, 0, 1, 2}));
    }
    if (n.name == "t8") {
      EXPECT_EQ(n.inputs[0], "x");
      EXPECT_EQ(n.attr_ints("perm"), (std::vector<int64_t>{0, 1, 2, 3}));
    }
  }
  EXPECT_EQ(f.values.count("a1") + f.values.count("b1") + f.values.count("b3") + f.values.count("a2"), 0u);
  expect_same_numbers(g, f, {{"x", random_tensor({2, 3, 4, 5}, 61)}});
  // Nothing left to fold: the pass changes nothing more.
  EXPECT_EQ(ops_of(passes::fold_transposes(f)), ops_of(f));
}

// y = Transpose(Gemm(a, b)) for a [M, K] (or [K, M] when transA) and b [K, N] (or [N, K]), alpha 0.5.
Graph transposed_gemm_graph(DType t, bool ta, bool tb, bool with_c = false, bool also_read = false) {
  Graph g;
  g.name = "tgemm";
  g.opsets[""] = 17;
  g.inputs = {"a", "b"};
  g.values["a"] = info(t, ta ? std::vector<Dim>{7, Dim("M")} : std::vector<Dim>{Dim("M"), 7});
  g.values["b"] = info(t, tb ? std::vector<Dim>{5, 7} : std::vector<Dim>{7, 5});
  Node gemm{"gemm", "Gemm", "", {"a", "b"}, {"p"}, {}};
  gemm.attrs["alpha"] = Attribute::Float(0.5f);
  if (ta) gemm.attrs["transA"] = Attribute::Int(1);
  if (tb) gemm.attrs["transB"] = Attribute::Int(1);
  if (with_c) {
    g.initializers["c"] = random_of(t, {5}, 62);
    gemm.inputs.push_back("c");
  }
  g.values["p"] = info(t, {Dim("M"), 5});
  g.nodes = {gemm, transpose("t", "p", "y", {1, 0})};
  g.outputs = {"y"};
  if (also_read) g.outputs.push_back("p");
  return g;
}

TEST(FoldTransposes, ATransposedGemmBecomesTheGemmOfItsOperandsSwapped) {
  for (DType t : {DType::F32, DType::F64})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        SCOPED_TRACE(std::string(dtype_name(t)) + " transA " + std::to_string(ta) + " transB " + std::to_string(tb));
        const Graph g = transposed_gemm_graph(t, ta, tb);
        const Graph f = passes::fold_transposes(g);
        ASSERT_EQ(ops_of(f), (std::vector<std::string>{"Gemm"}));
        const Node& n = f.nodes[0];
        EXPECT_EQ(n.inputs, (std::vector<std::string>{"b", "a"}));
        EXPECT_EQ(n.outputs, (std::vector<std::string>{"y"}));
        EXPECT_EQ(n.attr_i("transA", 0), tb ? 0 : 1);
        EXPECT_EQ(n.attr_i("transB", 0), ta ? 0 : 1);
        EXPECT_EQ(n.attr_f("alpha", 1.f), 0.5f);
        EXPECT_EQ(f.values.count("p"), 0u);
        const std::map<std::string, Tensor> feeds = {{"a", random_of(t, ta ? Shape{7, 9} : Shape{9, 7}, 63)},
                                                     {"b", random_of(t, tb ? Shape{5, 7} : Shape{7, 5}, 64)}};
        runtime::Executor before(g), after(f);
        const Tensor want = before.run(feeds).at("y").clone(), got = after.run(feeds).at("y").clone();
        ASSERT_EQ(got.shape(), (Shape{5, 9}));
        // The same products summed, perhaps in another order: within the type's rounding of 7 terms.
        EXPECT_LE(testing::max_abs_diff(got, want), t == DType::F32 ? 1e-6 : 1e-15);
      }
}

TEST(FoldTransposes, LeavesGemmsWithABiasOrAnotherReaderAndOtherPermutations) {
  EXPECT_EQ(ops_of(passes::fold_transposes(transposed_gemm_graph(DType::F32, false, true, true))),
            (std::vector<std::string>{"Gemm", "Transpose"}));
  EXPECT_EQ(ops_of(passes::fold_transposes(transposed_gemm_graph(DType::F32, false, true, false, true))),
            (std::vector<std::string>{"Gemm", "Transpose"}));
  Graph g = transposed_gemm_graph(DType::F32, false, false);
  g.nodes[1].attrs.erase("perm");  // the default: reversed axes, [1, 0] for a matrix
  EXPECT_EQ(ops_of(passes::fold_transposes(g)), (std::vector<std::string>{"Gemm"}));
  g.values.erase("p");  // no recorded rank: the default permutation is unknown, nothing folds
  EXPECT_EQ(ops_of(passes::fold_transposes(g)), (std::vector<std::string>{"Gemm", "Transpose"}));
}

// Fashion-MNIST images read as 28 rows of 28 pixels, each row through two of torch's Linear on a 3-D input
// (MatMul by the transposed weight, as torch.onnx exports it without constant folding; then + bias and Relu),
// flattened into a Gemm: the pattern of every transformer's projections.
std::string row_linear_model_path() {
  static const std::string path = [] {
    Graph g;
    g.name = "rowlinear";
    g.opsets[""] = 17;
    g.inputs = {"image"};
    g.outputs = {"logits"};
    g.values["image"] = info(DType::F32, {Dim("N"), 1, 28, 28});
    g.initializers["rows.shape"] = Tensor::from_vector<int64_t>({3}, {-1, 28, 28});
    g.initializers["flat.shape"] = Tensor::from_vector<int64_t>({2}, {0, -1});
    g.initializers["fc.w"] = random_tensor({10, 224}, 73, -0.05f, 0.05f);
    g.initializers["fc.b"] = random_tensor({10}, 74, -0.05f, 0.05f);
    g.nodes = {Node{"rows", "Reshape", "", {"image", "rows.shape"}, {"r0"}, {}}};
    const std::vector<std::pair<int64_t, int64_t>> layers = {{28, 16}, {16, 8}};
    for (size_t k = 0; k < layers.size(); ++k) {
      const std::string l = "lin" + std::to_string(k + 1), in = "r" + std::to_string(k), out = "r" + std::to_string(k + 1);
      g.initializers[l + ".w"] = random_tensor({layers[k].second, layers[k].first}, 71 + k, -0.2f, 0.2f);
      g.initializers[l + ".b"] = random_tensor({layers[k].second}, 75 + k, -0.1f, 0.1f);
      g.nodes.push_back(transpose(l + ".t", l + ".w", l + ".wt", {1, 0}));
      g.nodes.push_back(Node{l, "MatMul", "", {in, l + ".wt"}, {l + ".h"}, {}});
      g.nodes.push_back(Node{l + ".add", "Add", "", {l + ".h", l + ".b"}, {l + ".hb"}, {}});
      g.nodes.push_back(Node{l + ".relu", "Relu", "", {l + ".hb"}, {out}, {}});
    }
    g.nodes.push_back(Node{"flat", "Reshape", "", {"r2", "flat.shape"}, {"f"}, {}});
    g.nodes.push_back(Node{"fc", "Gemm", "", {"f", "fc.w", "fc.b"}, {"logits"}, {{"transB", Attribute::Int(1)}}});
    const std::string file = testing::temp_dir("fold_transposes") + "/rowlinear.onnx";
    save_onnx(g, file);
    return file;
  }();
  return path;
}

// The backward pass of MatMul(X, Transpose(W)) transposes the transposed weight back for dX and computes
// dW's transpose: both folded away; 8 SGD steps with momentum train to the unfolded graph's weights.
TEST(FoldTransposes, FiresOnLinearOfA3dInputAndTrainsAsWithoutIt) {
  if (!testing::have_data()) GTEST_SKIP() << "Fashion-MNIST is not installed (Debian package dataset-fashion-mnist)";
  const Graph model = load_onnx(row_linear_model_path());
  runtime::PipelineOptions po;
  po.executor_passes = true;
  const Graph on = runtime::build_training_graphs(model, po).replicas[0].graph;
  setenv("GRAPHRUN_SKIP_PASSES", "fold_transposes", 1);
  const Graph off = runtime::build_training_graphs(model, po).replicas[0].graph;
  unsetenv("GRAPHRUN_SKIP_PASSES");
  // Off: each layer's forward W^T and dW^T's transpose into dW, and lin2's W^T^T for its dX. On: the forward
  // ones alone.
  EXPECT_EQ(count_op(off, "Transpose"), 5);
  EXPECT_EQ(count_op(on, "Transpose"), 2);
  EXPECT_EQ(count_op(on, "Gemm"), count_op(off, "Gemm"));
  for (const auto& [replicas, threads] : std::vector<std::pair<int, int>>{{1, 1}, {2, 1}, {1, 2}}) {
    SCOPED_TRACE(std::to_string(replicas) + " replicas, " + std::to_string(threads) + " threads");
    runtime::TrainOptions o = testing::quick(replicas, 16, 8, 32);
    o.threads = threads;
    o.lr = 0.05;
    o.pipeline.optimizer.momentum = 0.9f;
    const auto [folded, plain] = states_with_and_without(model, o, "fold_transposes");
    ASSERT_EQ(folded.size(), plain.size());
    for (const auto& [name, t] : plain) {
      ASSERT_TRUE(folded.count(name)) << name;
      EXPECT_LE(testing::max_rel_diff(folded.at(name), t), 1e-5) << name;
    }
  }
}

// ---- fuse_relu_bn_add ----

// x -> BatchNormalization "p" (training mode: outputs pre, running mean and var, which are graph outputs
// as state updates are) -> Relu -> y. Inference mode: the first output alone.
Graph bn_relu_graph(DType t, int64_t c, bool training) {
  Graph g;
  g.name = "bn_relu";
  g.opsets[""] = 17;
  g.inputs = {"x"};
  g.initializers["scale"] = random_of(t, {c}, 31);
  g.initializers["bias"] = random_of(t, {c}, 32);
  g.initializers["mean"] = random_of(t, {c}, 33);
  Tensor var = random_of(t, {c}, 34);
  for (int64_t i = 0; i < c; ++i)
    if (t == DType::F32) var.data<float>()[i] = std::fabs(var.data<float>()[i]) + 0.5f;
    else var.data<double>()[i] = std::fabs(var.data<double>()[i]) + 0.5;
  g.initializers["var"] = var;
  Node bn{"p", "BatchNormalization", "", {"x", "scale", "bias", "mean", "var"}, {"pre"}, {}};
  bn.attrs["epsilon"] = Attribute::Float(1e-3f);
  if (training) {
    bn.attrs["training_mode"] = Attribute::Int(1);
    bn.attrs["momentum"] = Attribute::Float(0.8f);
    bn.outputs = {"pre", "rm", "rv"};
  }
  g.nodes = {bn, Node{"relu", "Relu", "", {"pre"}, {"y"}, {}}};
  g.values["pre"] = info(t, {});
  g.values["pre"].has_shape = false;
  g.outputs = {"y"};
  if (training) g.outputs.insert(g.outputs.end(), {"rm", "rv"});
  return g;
}

// x, z -> Add -> "pre" -> Relu -> y.
Graph add_relu_graph(DType t) {
  Graph g;
  g.name = "add_relu";
  g.opsets[""] = 17;
  g.inputs = {"x", "z"};
  g.nodes = {Node{"p", "Add", "", {"x", "z"}, {"pre"}, {}}, Node{"relu", "Relu", "", {"pre"}, {"y"}, {}}};
  g.values["pre"] = info(t, {});
  g.values["pre"].has_shape = false;
  g.outputs = {"y"};
  return g;
}

// Runs both graphs with 1 and 2 threads (planning run and planned run); every output bitwise equal.
void expect_same_bits_threads(const Graph& before, const Graph& after, const std::map<std::string, Tensor>& feeds) {
  for (int threads : {1, 2}) {
    runtime::ExecOptions o;
    o.threads = threads;
    runtime::Executor a(before, o), b(after, o);
    for (int run = 0; run < 2; ++run) {
      auto ra = a.run(feeds), rb = b.run(feeds);
      for (const auto& out : before.outputs)
        EXPECT_TRUE(bitwise_equal(ra.at(out), rb.at(out))) << out << ", " << threads << " threads, run " << run;
    }
  }
}

TEST(FuseReluBnAdd, BatchNormAndReluBecomeOneFusedBatchNormalizationBitForBit) {
  // Training (batch statistics, running statistics out) and inference mode; f32 and f64; rows of 1, 7,
  // 49 and 400 positions (the vector loop's remainders and its long rows), NaN in X.
  struct Case {
    DType t;
    Shape x;
    bool training;
  };
  const std::vector<Case> cases = {{DType::F32, {4, 3, 7, 7}, true},  {DType::F32, {5, 6, 20, 20}, true},
                                   {DType::F32, {8, 5}, true},        {DType::F32, {3, 4, 7}, false},
                                   {DType::F64, {4, 3, 7, 7}, true},  {DType::F64, {2, 6, 20, 20}, false}};
  for (const Case& c : cases) {
    SCOPED_TRACE(shape_str(c.x) + " " + dtype_name(c.t) + (c.training ? " training" : " inference"));
    const Graph g = bn_relu_graph(c.t, c.x[1], c.training);
    const Graph r = passes::fuse_relu_bn_add_pass().run(g);
    ASSERT_EQ(ops_of(r), (std::vector<std::string>{"FusedBatchNormalization"}));
    EXPECT_EQ(r.nodes[0].domain, kGraphrunDomain);
    EXPECT_EQ(r.nodes[0].name, "p");
    EXPECT_EQ(r.nodes[0].attr_s("activation", ""), "Relu");
    EXPECT_EQ(r.nodes[0].attr_f("epsilon", 0), 1e-3f);
    EXPECT_EQ(r.nodes[0].inputs, g.nodes[0].inputs);
    EXPECT_EQ(r.nodes[0].outputs[0], "y");
    EXPECT_EQ(r.nodes[0].outputs.size(), g.nodes[0].outputs.size());
    EXPECT_EQ(r.values.count("pre"), 0u);
    // A NaN in one feature: its statistics and every output of that feature are NaN (training), as unfused.
    Tensor x = random_of(c.t, c.x, 35);
    if (!c.training) x = with_edges(x);
    expect_same_bits_threads(g, r, {{"x", x}});
  }
  // Training mode with a NaN: the whole feature's Y is NaN, and stays NaN through the Relu.
  const Graph g = bn_relu_graph(DType::F32, 3, true);
  expect_same_bits_threads(g, passes::fuse_relu_bn_add(g), {{"x", with_edges(random_tensor({4, 3, 5, 5}, 36))}});
}

TEST(FuseReluBnAdd, AddAndReluBecomeOneFusedAddBitForBit) {
  // Equal shapes (the residual join), above the threads' threshold and below, and a broadcast addend.
  for (DType t : {DType::F32, DType::F64})
    for (const auto& [xs, zs] : std::vector<std::pair<Shape, Shape>>{
             {{4, 8, 30, 30}, {4, 8, 30, 30}}, {{3, 5, 7}, {3, 5, 7}}, {{4, 8, 30, 30}, {8, 1, 1}}}) {
      SCOPED_TRACE(shape_str(xs) + " + " + shape_str(zs) + " " + dtype_name(t));
      const Graph g = add_relu_graph(t);
      const Graph r = passes::fuse_relu_bn_add_pass().run(g);
      ASSERT_EQ(ops_of(r), (std::vector<std::string>{"FusedAdd"}));
      EXPECT_EQ(r.nodes[0].domain, kGraphrunDomain);
      EXPECT_EQ(r.nodes[0].inputs, (std::vector<std::string>{"x", "z"}));
      EXPECT_EQ(r.nodes[0].outputs, (std::vector<std::string>{"y"}));
      EXPECT_EQ(r.values.count("pre"), 0u);
      Tensor z = random_of(t, zs, 38);
      // -0 + -0 = -0 passes the Relu (it is not < 0); NaN passes.
      if (t == DType::F32) z.data<float>()[0] = -0.f;
      else z.data<double>()[0] = -0.0;
      Tensor x = with_edges(random_of(t, xs, 37));
      if (t == DType::F32) x.data<float>()[0] = -0.f;
      else x.data<double>()[0] = -0.0;
      expect_same_bits_threads(g, r, {{"x", x}, {"z", z}});
    }
}

TEST(FuseReluBnAdd, LeavesPreActivationsOthersReadAndOtherProducers) {
  const auto ops = [](const Graph& g) { return ops_of(passes::fuse_relu_bn_add(g)); };
  Graph out = bn_relu_graph(DType::F32, 3, true);
  out.outputs.push_back("pre");  // a graph output: must exist
  EXPECT_EQ(ops(out), (std::vector<std::string>{"BatchNormalization", "Relu"}));
  Graph two = add_relu_graph(DType::F32);
  two.nodes.push_back(Node{"neg", "Neg", "", {"pre"}, {"w"}, {}});  // read by another node too
  two.outputs.push_back("w");
  EXPECT_EQ(ops(two), (std::vector<std::string>{"Add", "Relu", "Neg"}));
  Graph state = add_relu_graph(DType::F32);
  state.state_updates = {{"pre", "x"}};  // a state update's source
  EXPECT_EQ(ops(state), (std::vector<std::string>{"Add", "Relu"}));
  Graph untyped = add_relu_graph(DType::F32);
  untyped.values.erase("pre");
  EXPECT_EQ(ops(untyped), (std::vector<std::string>{"Add", "Relu"}));
  Graph ints = add_relu_graph(DType::I64);
  EXPECT_EQ(ops(ints), (std::vector<std::string>{"Add", "Relu"}));
  Graph running = bn_relu_graph(DType::F32, 3, true);  // the Relu of a running statistic, not of Y
  running.nodes[1].inputs = {"rm"};
  running.values["rm"] = info(DType::F32, {3});
  EXPECT_EQ(ops(running), (std::vector<std::string>{"BatchNormalization", "Relu"}));
  Graph sub = add_relu_graph(DType::F32);
  sub.nodes[0].op_type = "Sub";
  EXPECT_EQ(ops(sub), (std::vector<std::string>{"Sub", "Relu"}));
}

TEST(FuseReluBnAdd, AnUnknownActivationIsAnErrorNamingTheNode) {
  for (bool bn : {true, false}) {
    Graph g = passes::fuse_relu_bn_add(bn ? bn_relu_graph(DType::F32, 3, false) : add_relu_graph(DType::F32));
    ASSERT_EQ(g.nodes.size(), 1u);
    g.nodes[0].attrs["activation"] = Attribute::Str("Tanh");
    runtime::Executor ex(g);
    try {
      std::map<std::string, Tensor> feeds{{"x", random_tensor({2, 3, 4}, 3)}};
      if (!bn) feeds["z"] = random_tensor({2, 3, 4}, 4);
      ex.run(feeds);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("'p'"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("Tanh"), std::string::npos) << e.what();
    }
  }
}

// dy, y -> ReluGrad -> "g" -> BatchNormalizationGrad(g, x, scale) -> dx, dscale, db.
Graph relu_bn_grad_graph(DType t, int64_t c) {
  Graph g;
  g.name = "relu_bn_grad";
  g.opsets[""] = 17;
  g.opsets[kGraphrunDomain] = 1;
  g.inputs = {"dy", "y", "x"};
  g.initializers["scale"] = random_of(t, {c}, 51);
  g.nodes = {Node{"rg", "ReluGrad", kGraphrunDomain, {"dy", "y"}, {"g"}, {}},
             Node{"bng", "BatchNormalizationGrad", kGraphrunDomain, {"g", "x", "scale"}, {"dx", "dscale", "db"},
                  {{"epsilon", Attribute::Float(1e-3f)}}}};
  g.values["g"] = info(t, {});
  g.values["g"].has_shape = false;
  g.values["y"] = g.values["g"];
  g.outputs = {"dx", "dscale", "db"};
  return g;
}

TEST(FuseReluBnAdd, ReluGradIntoBatchNormalizationGradBitForBit) {
  // Rows of 1, 7, 49 and 400 positions: rows start at every offset within a cache line, where Eigen's
  // vectorised sums start their aligned part; NaN and -0 in dY, Y exactly 0 and NaN.
  struct Case {
    DType t;
    Shape x;
  };
  const std::vector<Case> cases = {{DType::F32, {4, 3, 7, 7}},  {DType::F32, {5, 6, 20, 20}}, {DType::F32, {9, 5}},
                                   {DType::F32, {3, 4, 7}},     {DType::F64, {4, 3, 7, 7}},   {DType::F64, {3, 5, 7}}};
  for (const Case& c : cases) {
    SCOPED_TRACE(shape_str(c.x) + " " + dtype_name(c.t));
    const Graph g = relu_bn_grad_graph(c.t, c.x[1]);
    const Graph r = passes::fuse_relu_bn_add_pass().run(g);
    ASSERT_EQ(ops_of(r), (std::vector<std::string>{"FusedBatchNormalizationGrad"}));
    EXPECT_EQ(r.nodes[0].name, "bng");
    EXPECT_EQ(r.nodes[0].inputs, (std::vector<std::string>{"dy", "y", "x", "scale"}));
    EXPECT_EQ(r.nodes[0].outputs, g.nodes[1].outputs);
    EXPECT_EQ(r.nodes[0].attr_f("epsilon", 0), 1e-3f);
    EXPECT_EQ(r.values.count("g"), 0u);
    Tensor dy = random_of(c.t, c.x, 52), y = random_of(c.t, c.x, 53);
    if (c.t == DType::F32) {
      y.data<float>()[0] = 0.f;
      y.data<float>()[3] = std::numeric_limits<float>::quiet_NaN();
      dy.data<float>()[4] = -0.f;
    } else {
      y.data<double>()[0] = 0.0;
      y.data<double>()[3] = std::numeric_limits<double>::quiet_NaN();
      dy.data<double>()[4] = -0.0;
    }
    expect_same_bits_threads(g, r, {{"dy", dy}, {"y", y}, {"x", random_of(c.t, c.x, 54)}});
    // NaN in dY where Y > 0 reaches the feature's sums, as unfused.
    Tensor nan = dy.clone();
    if (c.t == DType::F32) y.data<float>()[1] = 1.f, nan.data<float>()[1] = std::numeric_limits<float>::quiet_NaN();
    else y.data<double>()[1] = 1.0, nan.data<double>()[1] = std::numeric_limits<double>::quiet_NaN();
    expect_same_bits_threads(g, r, {{"dy", nan}, {"y", y}, {"x", random_of(c.t, c.x, 54)}});
  }
  // The ReluGrad's output read by something else too (or a graph output): it stays.
  Graph out = relu_bn_grad_graph(DType::F32, 3);
  out.outputs.push_back("g");
  EXPECT_EQ(ops_of(passes::fuse_relu_bn_add(out)), (std::vector<std::string>{"ReluGrad", "BatchNormalizationGrad"}));
  Graph other = relu_bn_grad_graph(DType::F32, 3);
  other.nodes[1].inputs = {"dy", "g", "scale"};  // read as X, not as dY
  EXPECT_EQ(ops_of(passes::fuse_relu_bn_add(other)), (std::vector<std::string>{"ReluGrad", "BatchNormalizationGrad"}));
}

// ResNet-18 as train runs it: all 17 Relus fused (the stem's and each block's first follow a
// BatchNormalization, each block's last the residual Add), 9 ReluGrads folded into the BatchNorm gradients
// they feed, and the backward pass reads no pre-activation: each BatchNorm gradient reads its forward's X
// (the fused node's input), each Relu gradient the Relu's output (the fused node's output).
TEST(FuseReluBnAdd, FusesEveryReluOfResNet18AndTheBackwardReadsNoPreActivation) {
  const std::string path = testing::resnet_path();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not generated (needs torch and onnx)";
  runtime::PipelineOptions po;
  po.executor_passes = true;
  const Graph model = load_onnx(path);
  const int bns = count_op(model, "BatchNormalization");
  ASSERT_EQ(count_op(model, "Relu"), 17);
  const Graph g = runtime::build_training_graphs(model, po).replicas[0].graph;
  EXPECT_EQ(count_op(g, "Relu"), 0);
  EXPECT_EQ(count_op(g, "FusedBatchNormalization"), 9);
  EXPECT_EQ(count_op(g, "FusedAdd"), 8);
  EXPECT_EQ(count_op(g, "BatchNormalization"), bns - 9);  // those before the residual Add
  EXPECT_EQ(count_op(g, "FusedBatchNormalizationGrad"), 9);  // the ReluGrads of the fused BatchNorms' Relus
  EXPECT_EQ(count_op(g, "BatchNormalizationGrad"), bns - 9);
  EXPECT_EQ(count_op(g, "ReluGrad"), 8);                      // the residual joins': dY feeds both branches
  std::set<std::string> bn_x, fused_y;
  for (const Node& n : g.nodes)
    if (n.op_type == "FusedBatchNormalization" || n.op_type == "BatchNormalization") bn_x.insert(n.inputs[0]);
  for (const Node& n : g.nodes)
    if (n.op_type == "FusedBatchNormalization" || n.op_type == "FusedAdd") fused_y.insert(n.outputs[0]);
  int bn_grads = 0, relu_grads = 0;
  for (const Node& n : g.nodes) {
    if (n.op_type == "BatchNormalizationGrad") bn_grads += bn_x.count(n.inputs[1]) > 0;
    if (n.op_type == "FusedBatchNormalizationGrad") bn_grads += bn_x.count(n.inputs[2]) > 0;
    if (n.op_type == "ReluGrad" || n.op_type == "FusedBatchNormalizationGrad") relu_grads += fused_y.count(n.inputs[1]) > 0;
  }
  EXPECT_EQ(bn_grads, bns);
  EXPECT_EQ(relu_grads, 17);
}

// A small residual BatchNorm CNN: conv -> BN -> Relu (r1) -> conv -> BN -> Add(r1) -> Relu -> MaxPool ->
// Gemm, as a user's onnx.helper model would be saved.
std::string residual_model_path() {
  static const std::string path = [] {
    Graph g;
    g.name = "rescnn";
    g.opsets[""] = 17;
    g.inputs = {"image"};
    g.outputs = {"logits"};
    g.values["image"] = info(DType::F32, {Dim("N"), 1, 28, 28});
    g.initializers["c1.w"] = random_tensor({4, 1, 3, 3}, 41, -0.3f, 0.3f);
    g.initializers["c2.w"] = random_tensor({4, 4, 3, 3}, 42, -0.3f, 0.3f);
    for (int k : {1, 2}) {
      const std::string b = "bn" + std::to_string(k);
      g.initializers[b + ".scale"] = random_tensor({4}, 43 + k, 0.5f, 1.5f);
      g.initializers[b + ".bias"] = random_tensor({4}, 45 + k, -0.1f, 0.1f);
      g.initializers[b + ".mean"] = Tensor::from_vector<float>({4}, {0, 0, 0, 0});
      g.initializers[b + ".var"] = Tensor::from_vector<float>({4}, {1, 1, 1, 1});
    }
    g.initializers["fc.w"] = random_tensor({10, 784}, 48, -0.05f, 0.05f);
    g.initializers["fc.b"] = random_tensor({10}, 49, -0.05f, 0.05f);
    g.initializers["flat.shape"] = Tensor::from_vector<int64_t>({2}, {0, -1});
    const Attribute pads = Attribute::Ints({1, 1, 1, 1});
    g.nodes = {Node{"c1", "Conv", "", {"image", "c1.w"}, {"a1"}, {{"pads", pads}}},
               Node{"bn1", "BatchNormalization", "", {"a1", "bn1.scale", "bn1.bias", "bn1.mean", "bn1.var"}, {"n1"}, {}},
               Node{"relu1", "Relu", "", {"n1"}, {"r1"}, {}},
               Node{"c2", "Conv", "", {"r1", "c2.w"}, {"a2"}, {{"pads", pads}}},
               Node{"bn2", "BatchNormalization", "", {"a2", "bn2.scale", "bn2.bias", "bn2.mean", "bn2.var"}, {"n2"}, {}},
               Node{"join", "Add", "", {"n2", "r1"}, {"s"}, {}},
               Node{"relu2", "Relu", "", {"s"}, {"r2"}, {}},
               Node{"pool", "MaxPool", "", {"r2"}, {"p"},
                    {{"kernel_shape", Attribute::Ints({2, 2})}, {"strides", Attribute::Ints({2, 2})}}},
               Node{"flat", "Reshape", "", {"p", "flat.shape"}, {"f"}, {}},
               Node{"fc", "Gemm", "", {"f", "fc.w", "fc.b"}, {"logits"}, {{"transB", Attribute::Int(1)}}}};
    const std::string file = testing::temp_dir("fuse_relu_bn_add") + "/rescnn.onnx";
    save_onnx(g, file);
    return file;
  }();
  return path;
}

// 8 SGD steps with momentum: weights, optimizer state and BatchNorm statistics (every replica's: the
// end-of-epoch copy of replica 0's running statistics finds the fused BatchNorms too) bitwise equal with the
// pass on and off, one replica and two.
TEST(FuseReluBnAdd, TrainedWeightsAreBitwiseThoseOfTheUnfusedGraph) {
  if (!testing::have_data()) GTEST_SKIP() << "Fashion-MNIST is not installed (Debian package dataset-fashion-mnist)";
  const Graph model = load_onnx(residual_model_path());
  {
    runtime::PipelineOptions po;
    po.executor_passes = true;
    const Graph g = runtime::build_training_graphs(model, po).replicas[0].graph;
    ASSERT_EQ(count_op(g, "FusedBatchNormalization"), 1);  // bn1's; bn2 feeds the Add
    ASSERT_EQ(count_op(g, "FusedAdd"), 1);
    ASSERT_EQ(count_op(g, "FusedBatchNormalizationGrad"), 1);
  }
  // One thread per replica: with 2 intra-op threads this model's unfused training already differs from run
  // to run in the last bits (so no bitwise comparison can hold there); the kernel tests above compare 1 and 2
  // threads bit for bit.
  for (const auto& [replicas, threads] : std::vector<std::pair<int, int>>{{1, 1}, {2, 1}}) {
    SCOPED_TRACE(std::to_string(replicas) + " replicas, " + std::to_string(threads) + " threads");
    runtime::TrainOptions o = testing::quick(replicas, 16, 8, 32);
    o.threads = threads;
    o.lr = 0.05;
    o.pipeline.optimizer.momentum = 0.9f;
    const auto [on, off] = states_with_and_without(model, o, "fuse_relu_bn_add");
    ASSERT_EQ(on.size(), off.size());
    for (const auto& [name, t] : off) {
      ASSERT_TRUE(on.count(name)) << name;
      EXPECT_TRUE(bitwise_equal(on.at(name), t)) << name;
    }
    EXPECT_GT(on.size(), 10u);
  }
}

}  // namespace
}  // namespace graphrun

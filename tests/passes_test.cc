// The pass infrastructure and each pass alone: the registry, the pipeline each command runs (and its
// listing), the trainable-parameter rule, the one topological sort, and --passes / --dump-after
// from the command line.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "autodiff/autodiff.h"
#include "graph/onnx_io.h"
#include "graph/printer.h"
#include "graph/passes/add_metrics.h"
#include "graph/passes/add_optimizer.h"
#include "graph/passes/bucket_allreduce.h"
#include "graph/passes/eliminate_dead_nodes.h"
#include "graph/passes/make_batch_symbolic.h"
#include "graph/passes/remove_noops.h"
#include "graph/passes/state_updates.h"
#include "graph/passes/train_mode.h"
#include "runtime/executor.h"
#include "runtime/pipeline.h"
#include "tests/test_util.h"

namespace graphrun {
namespace {

using passes::Pass;
using passes::Pipeline;

std::string lenet() { return testing::source_dir() + "/models/lenet.onnx"; }

ValueInfo f32(std::vector<Dim> dims) {
  ValueInfo v;
  v.dtype = DType::F32;
  v.has_shape = true;
  v.shape = std::move(dims);
  return v;
}

std::vector<std::string> names_of(const Pipeline& p) {
  std::vector<std::string> r;
  for (const Pass& pass : p.passes()) r.push_back(pass.name());
  return r;
}

std::vector<std::string> node_names(const Graph& g) {
  std::vector<std::string> r;
  for (const Node& n : g.nodes) r.push_back(n.name);
  return r;
}

// y = x W with its gradient written out: W_grad = xT (y - t); the "backward pass" of a linear model
// with two parameters whose gradients are produced in the order b, W.
Graph linear_gradients() {
  Graph g;
  g.name = "linear";
  g.opsets[""] = 17;
  g.inputs = {"x", "xT", "t"};
  g.values["x"] = f32({Dim("N"), 3});
  g.values["xT"] = f32({3, Dim("N")});
  g.values["t"] = f32({Dim("N"), 2});
  g.initializers["W"] = testing::random_tensor({3, 2}, 1);
  g.initializers["b"] = testing::random_tensor({1, 2}, 2);
  g.nodes = {testing::make_node("mm", "MatMul", {"x", "W"}, {"y"}),
             testing::make_node("add", "Add", {"y", "b"}, {"pred"}),
             testing::make_node("diff", "Sub", {"pred", "t"}, {"d"}),
             testing::make_node("gb", "ReduceSum", {"d"}, {"b_grad"}),
             testing::make_node("gw", "MatMul", {"xT", "d"}, {"W_grad"})};
  g.outputs = {"pred", "W_grad", "b_grad"};
  return g;
}

// ---- the registry and the pipelines ----

TEST(PassRegistry, EveryPipelinePassIsRegisteredOnceWithADescription) {
  const Graph model = load_onnx(lenet());
  const Pipeline p = runtime::training_pipeline(model, runtime::PipelineOptions{});
  std::set<std::string> seen;
  for (const auto& info : passes::registered_passes()) {
    EXPECT_TRUE(seen.insert(info.name).second) << info.name;
    EXPECT_FALSE(info.description.empty()) << info.name;
    EXPECT_EQ(info.description.find('\n'), std::string::npos) << info.name << ": one line";
  }
  for (const Pass& pass : p.passes()) {
    EXPECT_TRUE(seen.count(pass.name())) << pass.name();
    EXPECT_EQ(passes::find_pass(pass.name()), pass.info);
  }
  EXPECT_EQ(passes::find_pass("no_such_pass"), nullptr);
}

TEST(Pipeline, TrainGradAndShowBuildTheirPassesInOneFunction) {
  const Graph model = load_onnx(lenet());
  runtime::PipelineOptions po;
  EXPECT_EQ(names_of(runtime::training_pipeline(model, po)),
            (std::vector<std::string>{"convert_opset", "remove_noops", "to_training", "fold_pads", "make_batch_symbolic",
                                      "unbiased_running_var", "fake_quantize", "attach_loss", "backward", "bucket_allreduce",
                                      "add_optimizer", "state_updates"}));
  po.data_parallel = false;  // grad, show --backward
  EXPECT_EQ(names_of(runtime::training_pipeline(model, po)),
            (std::vector<std::string>{"convert_opset", "remove_noops", "to_training", "fold_pads", "unbiased_running_var",
                                      "fake_quantize", "attach_loss", "backward"}));
  EXPECT_EQ(names_of(runtime::training_pipeline(model, po).until("to_training")),
            (std::vector<std::string>{"convert_opset", "remove_noops", "to_training"}));
}

TEST(Pipeline, ListingNamesEachPassWithItsOptionsAndDescription) {
  const Graph model = load_onnx(lenet());
  runtime::PipelineOptions po;
  po.freeze = {"conv1.bias"};
  po.optimizer.kind = "adam";
  const std::string listing = runtime::training_pipeline(model, po).listing();
  std::istringstream lines(listing);
  std::vector<std::string> got;
  for (std::string l; std::getline(lines, l);) got.push_back(l);
  ASSERT_EQ(got.size(), 12u) << listing;
  EXPECT_EQ(got[0].rfind("convert_opset ", 0), 0u) << got[0];
  EXPECT_EQ(got[1].rfind("remove_noops ", 0), 0u) << got[1];
  EXPECT_EQ(got[3].rfind("fold_pads ", 0), 0u) << got[3];
  EXPECT_NE(got[4].find("input=image "), std::string::npos) << got[4];
  EXPECT_EQ(got[4].find("dim="), std::string::npos) << got[4];  // the symbol depends on the model
  EXPECT_EQ(got[5].rfind("unbiased_running_var ", 0), 0u) << got[5];
  EXPECT_EQ(got[6].rfind("fake_quantize ", 0), 0u) << got[6];
  EXPECT_NE(got[7].find("loss=cross-entropy output=logits labels=labels"), std::string::npos) << got[7];
  EXPECT_NE(got[8].find("seed=loss_scale freeze=conv1.bias"), std::string::npos) << got[8];
  EXPECT_NE(got[9].find("bucket_bytes=4194304"), std::string::npos) << got[9];
  EXPECT_NE(got[10].find("optimizer=adam beta1=0.9 beta2=0.999 eps=1e-08"), std::string::npos) << got[10];
  for (const auto& l : got)
    EXPECT_NE(l.find(passes::find_pass(l.substr(0, l.find(' ')))->description), std::string::npos) << l;
}

TEST(Pipeline, RunShowsTheGraphAfterEachPassAndBuildGraphsDumpsOne) {
  const Graph model = load_onnx(lenet());
  runtime::PipelineOptions po;
  std::vector<std::string> seen;
  Graph after_backward;
  const Graph last = runtime::training_pipeline(model, po).run(model, [&](const Pass& p, const Graph& g) {
    seen.push_back(p.name());
    if (p.name() == "backward") after_backward = g;
  });
  EXPECT_EQ(seen.size(), 12u);
  std::ostringstream dump;
  po.dump_after = "backward";
  po.dump = &dump;
  const runtime::TrainingGraphs tg = runtime::build_training_graphs(model, po);
  EXPECT_EQ(print_text(tg.training), print_text(after_backward));
  ASSERT_EQ(tg.replicas.size(), 1u);
  Graph named = last;
  named.name = "lenet.cpu_0";  // each replica's copy is named after its device
  EXPECT_EQ(print_text(tg.replicas[0].graph), print_text(named));
  EXPECT_EQ(tg.replicas[0].state_updates, last.state_updates);
  EXPECT_EQ(dump.str().rfind("# graph after pass backward\n", 0), 0u);
  EXPECT_NE(dump.str().find("%conv1.weight_grad"), std::string::npos);
  EXPECT_EQ(tg.params, (std::vector<std::string>{"conv1.bias", "conv1.weight", "conv2.bias", "conv2.weight", "fc1.bias",
                                                 "fc1.weight", "fc2.bias", "fc2.weight"}));
  po.dump_after = "nope";
  try {
    runtime::build_training_graphs(model, po);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown pass 'nope' (passes: add_optimizer, attach_loss, backward"),
              std::string::npos)
        << e.what();
  }
  po.dump_after = "to_inference";  // registered, not in this pipeline
  try {
    runtime::build_training_graphs(model, po);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'to_inference' is not in this pipeline (its passes: convert_opset, remove_noops, "),
              std::string::npos)
        << e.what();
  }
}

// ---- the passes of the forward graph ----

TEST(RemoveNoops, DropsZeroPadsAndIdentitiesOnly) {
  Graph g;
  g.opsets[""] = 17;
  g.inputs = {"x"};
  g.outputs = {"out", "kept"};
  g.initializers["nonzero"] = Tensor::from_vector<int64_t>({4}, {0, 1, 0, 1});
  Node zeros{"zeros", "Constant", "", {}, {"z"}, {}};
  zeros.attrs["value"] = Attribute::Tens(Tensor::from_vector<int64_t>({4}, {0, 0, 0, 0}));
  g.nodes = {zeros,
             Node{"pad0", "Pad", "", {"x", "z"}, {"p0"}, {}},
             Node{"id", "Identity", "", {"p0"}, {"i0"}, {}},
             Node{"relu", "Relu", "", {"i0"}, {"r"}, {}},
             Node{"pad1", "Pad", "", {"r", "nonzero"}, {"out"}, {}},
             Node{"keep", "Identity", "", {"r"}, {"kept"}, {}}};
  Graph r = passes::remove_noops_pass().run(g);
  EXPECT_EQ(node_names(r), (std::vector<std::string>{"relu", "pad1", "keep"}));  // the zero Constant is dead too
  EXPECT_EQ(r.nodes[0].inputs[0], "x");
  EXPECT_EQ(r.outputs, g.outputs);
}

TEST(TrainMode, BatchNormAndDropoutForms) {
  Graph g;
  g.opsets[""] = 13;
  g.inputs = {"x"};
  g.outputs = {"z"};
  for (const char* p : {"s", "bb", "m", "v"}) g.initializers[p] = Tensor(DType::F32, {4});
  g.nodes = {Node{"bn", "BatchNormalization", "", {"x", "s", "bb", "m", "v"}, {"y"}, {}},
             Node{"drop", "Dropout", "", {"y"}, {"z"}, {}}};
  Graph t = passes::to_training_pass().run(g);
  EXPECT_EQ(t.opset(""), 15);
  EXPECT_EQ(t.nodes[0].attr_i("training_mode", 0), 1);
  ASSERT_EQ(t.nodes[0].outputs.size(), 3u);
  auto ups = passes::batchnorm_state_updates(t);
  ASSERT_EQ(ups.size(), 2u);
  EXPECT_EQ(ups[0].second, "m");
  EXPECT_EQ(ups[1].second, "v");
  ASSERT_EQ(t.nodes[1].inputs.size(), 3u);
  EXPECT_TRUE(t.initializers.at(t.nodes[1].inputs[2]).data<bool>()[0]);
  Graph e = passes::to_inference_pass().run(t);
  EXPECT_EQ(e.nodes[0].attr_i("training_mode", 1), 0);
  EXPECT_EQ(e.nodes[0].outputs.size(), 1u);
  EXPECT_EQ(e.nodes[1].op_type, "Dropout");
  EXPECT_EQ(e.nodes[1].inputs.size(), 1u);
  EXPECT_TRUE(passes::batchnorm_state_updates(e).empty());
}

TEST(EliminateDeadNodes, KeepsWhatTheOutputsReadAndTheInterface) {
  Graph g = linear_gradients();
  g.outputs = {"pred"};
  Graph r = eliminate_dead_nodes_pass().run(g);
  EXPECT_EQ(node_names(r), (std::vector<std::string>{"mm", "add"}));
  EXPECT_EQ(r.inputs, g.inputs);
  EXPECT_EQ(r.initializers.size(), 2u);
  EXPECT_FALSE(r.values.count("W_grad"));
}

TEST(MakeBatchSymbolic, TheFirstDimensionOfTheInputBecomesN) {
  Graph g = linear_gradients();
  g.values["x"] = f32({64, 3});
  Graph r = passes::make_batch_symbolic_pass({"x"}).run(g);
  EXPECT_EQ(r.values.at("x").str(), "f32[N,3]");
  EXPECT_EQ(r.values.at("xT").str(), "f32[3,N]");  // other inputs are left alone
  EXPECT_EQ(passes::make_batch_symbolic(g).values.at("x").str(), "f32[N,3]");  // default: the first input
  EXPECT_THROW(passes::make_batch_symbolic(g, "nope"), Error);
  // A model of several inputs (tokens and their mask): each one's batch dimension.
  g.values["xT"] = f32({64, 5});
  r = passes::make_batch_symbolic_pass({"x", "xT"}).run(g);
  EXPECT_EQ(r.values.at("x").str(), "f32[N,3]");
  EXPECT_EQ(r.values.at("xT").str(), "f32[N,5]");
}

// The batch's symbol is never one the model uses otherwise, and never replaces the model's own: a sequence
// model x: [batch, N] (N its length) was saved as x: [N, N] with logits [batch, 10] (the batch equal to the
// length, and parted from the output's); a torch export's [batch, 1, 28, 28] became [N, 1, 28, 28].
Graph sequence_model(Dim batch) {
  Graph g;
  g.name = "seq";
  g.opsets[""] = 17;
  g.inputs = {"x"};
  g.values["x"] = f32({batch, Dim("N")});
  g.initializers["W"] = testing::random_tensor({1, 10}, 1);
  g.values["W"] = f32({1, 10});
  Node pool = testing::make_node("pool", "ReduceMax", {"x"}, {"pooled"});
  pool.attrs["axes"] = Attribute::Ints({1});
  g.nodes = {pool, testing::make_node("fc", "MatMul", {"pooled", "W"}, {"logits"})};
  g.values["pooled"] = f32({batch, 1});
  g.values["logits"] = f32({batch, 10});
  g.outputs = {"logits"};
  return g;
}

TEST(MakeBatchSymbolic, ASymbolicBatchKeepsItsNameAndAFixedOneTakesAnUnusedSymbol) {
  // Symbolic already: kept, the output's with it.
  Graph r = passes::make_batch_symbolic(sequence_model(Dim("batch")));
  EXPECT_EQ(r.values.at("x").str(), "f32[batch,N]");
  EXPECT_EQ(r.values.at("logits").str(), "f32[batch,10]");
  // Fixed: N is the model's length, so the batch is N_1, in every value inference reaches.
  r = passes::make_batch_symbolic(sequence_model(Dim(8)));
  EXPECT_EQ(r.values.at("x").str(), "f32[N_1,N]");
  EXPECT_EQ(r.values.at("pooled").str(), "f32[N_1,1]");
  EXPECT_EQ(r.values.at("logits").str(), "f32[N_1,10]");
  Graph taken = sequence_model(Dim(8));
  taken.values["pooled"].shape[1] = Dim("N_1");  // (a symbol inference forgets: only choosing matters here)
  EXPECT_EQ(passes::make_batch_symbolic(taken).values.at("x").str(), "f32[N_2,N]");
  // Unknown: a symbol too, carried to the output.
  Graph unknown = sequence_model(Dim());
  r = passes::make_batch_symbolic(unknown);
  EXPECT_EQ(r.values.at("x").str(), "f32[N_1,N]");
  EXPECT_EQ(r.values.at("logits").str(), "f32[N_1,10]");
  // The training pipeline and the forward graph train evaluates and --save writes.
  const runtime::TrainingGraphs tg = runtime::build_training_graphs(sequence_model(Dim("batch")), {});
  EXPECT_EQ(tg.forward.values.at("x").str(), "f32[batch,N]");
  EXPECT_EQ(tg.forward.values.at("logits").str(), "f32[batch,10]");
  EXPECT_EQ(tg.training.values.at("x").str(), "f32[batch,N]");
  EXPECT_EQ(tg.training.values.at("labels").str(), "i64[batch]");
  const runtime::TrainingGraphs fixed = runtime::build_training_graphs(sequence_model(Dim(8)), {});
  EXPECT_EQ(fixed.forward.values.at("x").str(), "f32[N_1,N]");
  EXPECT_EQ(fixed.forward.values.at("logits").str(), "f32[N_1,10]");
  EXPECT_EQ(fixed.training.values.at("labels").str(), "i64[N_1]");
  // The evaluation's labels (add_metrics) take the scores' batch, not a literal N.
  passes::Metrics m;
  const Graph eval = passes::add_metrics(fixed.forward, "logits", &m);
  EXPECT_EQ(eval.values.at(m.labels).str(), "i64[N_1]");
}

// Inputs share one batch: a fixed one takes the symbol another input's batch has, and fixed ones all take one.
TEST(MakeBatchSymbolic, TheInputsOfAModelShareOneBatchSymbol) {
  Graph g;
  g.name = "two";
  g.opsets[""] = 17;
  g.inputs = {"tokens", "mask"};
  g.values["tokens"] = f32({Dim("batch"), Dim("N")});
  g.values["mask"] = f32({8, Dim("N")});
  g.nodes = {testing::make_node("mul", "Mul", {"tokens", "mask"}, {"y"})};
  g.values["y"] = f32({8, Dim("N")});
  g.outputs = {"y"};
  Graph r = passes::make_batch_symbolic_pass({"tokens", "mask"}).run(g);
  EXPECT_EQ(r.values.at("tokens").str(), "f32[batch,N]");
  EXPECT_EQ(r.values.at("mask").str(), "f32[batch,N]");
  g.values["tokens"] = f32({8, Dim("N")});
  r = passes::make_batch_symbolic_pass({"tokens", "mask"}).run(g);
  EXPECT_EQ(r.values.at("tokens").str(), "f32[N_1,N]");
  EXPECT_EQ(r.values.at("mask").str(), "f32[N_1,N]");
  EXPECT_EQ(r.values.at("y").str(), "f32[N_1,N]");
  // As the trainer calls it too, one input at a time.
  r = passes::make_batch_symbolic(passes::make_batch_symbolic(g, "tokens"), "mask");
  EXPECT_EQ(r.values.at("mask").str(), "f32[N_1,N]");
}

// ---- attach_loss and backward as passes ----

TEST(AutodiffPasses, AttachLossAndBackwardAreThePassesOfTheirFunctions) {
  const Graph model = load_onnx(lenet());
  autodiff::LossOptions lo;
  autodiff::BackwardOptions bo;
  bo.freeze = {"fc2.bias"};
  const Graph with_loss = autodiff::attach_loss_pass(lo).run(model);
  EXPECT_TRUE(with_loss.is_input("labels"));
  EXPECT_TRUE(with_loss.is_output("loss"));
  const Graph bg = autodiff::backward_pass(bo).run(with_loss);
  EXPECT_EQ(print_text(bg), print_text(autodiff::backward(autodiff::attach_loss(model, lo), bo)));
  EXPECT_TRUE(bg.is_output("fc2.weight_grad"));
  EXPECT_FALSE(bg.is_output("fc2.bias_grad"));
}

// What is trained: every float initializer (any width) but BatchNorm running statistics, Dropout's
// ratio and training_mode, tensors holding -inf or NaN, and the frozen ones.
TEST(TrainableParams, EveryFloatInitializerButStateSettingsAndFrozen) {
  Graph g;
  g.opsets[""] = 15;
  g.inputs = {"x"};
  g.outputs = {"z"};
  for (const char* p : {"scale", "bias", "mean", "var"}) g.initializers[p] = Tensor(DType::F32, {4});
  g.initializers["w64"] = Tensor(DType::F64, {4});
  g.initializers["ratio"] = Tensor::scalar<float>(0.5f);
  g.initializers["mode"] = Tensor::scalar<bool>(true);
  g.initializers["shape"] = Tensor::from_vector<int64_t>({1}, {4});
  g.nodes = {Node{"bn", "BatchNormalization", "", {"x", "scale", "bias", "mean", "var"}, {"y"}, {}},
             Node{"drop", "Dropout", "", {"y", "ratio", "mode"}, {"z"}, {}}};
  EXPECT_EQ(autodiff::trainable_params(g, {}), (std::vector<std::string>{"bias", "scale", "w64"}));
  EXPECT_EQ(autodiff::trainable_params(g, {"w64"}), (std::vector<std::string>{"bias", "scale"}));
  // A buffer of -inf (torch's causal mask, exported as an initializer like the weights) is a constant.
  g.initializers["causal"] = Tensor::from_vector<float>({2}, {0.f, -INFINITY});
  g.initializers["nan64"] = Tensor::from_vector<double>({1}, {NAN});
  EXPECT_EQ(autodiff::trainable_params(g, {}), (std::vector<std::string>{"bias", "scale", "w64"}));
  g.initializers.erase("causal");
  g.initializers.erase("nan64");
  try {
    autodiff::trainable_params(g, {"nope"});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "--freeze: no parameter named 'nope' (parameters: bias, scale, w64)");
  }
}

// --freeze fc1 (a module, as torch's model.fc1.parameters()) freezes fc1.weight and fc1.bias, not fc10.*
// nor fc1 itself's namesakes elsewhere; a name that begins parameter names but not before a '.' is unknown.
TEST(TrainableParams, FreezeAModulePrefixFreezesItsParameters) {
  Graph g;
  g.opsets[""] = 15;
  for (const char* p : {"fc1.weight", "fc1.bias", "fc10.weight", "block.fc1.weight", "fc2.weight"})
    g.initializers[p] = Tensor(DType::F32, {2});
  EXPECT_EQ(autodiff::trainable_params(g, {"fc1"}), (std::vector<std::string>{"block.fc1.weight", "fc10.weight", "fc2.weight"}));
  EXPECT_EQ(autodiff::trainable_params(g, {"fc1", "fc2.weight"}), (std::vector<std::string>{"block.fc1.weight", "fc10.weight"}));
  EXPECT_EQ(autodiff::trainable_params(g, {"block"}), (std::vector<std::string>{"fc1.bias", "fc1.weight", "fc10.weight", "fc2.weight"}));
  for (const char* bad : {"fc", "fc1.", "fc1.w"}) {
    try {
      autodiff::trainable_params(g, {bad});
      ADD_FAILURE() << "expected an error for " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("no parameter named '") + bad + "' (parameters: block.fc1.weight, "),
                std::string::npos)
          << e.what();
    }
  }
}

// ---- the data-parallel passes, each alone ----

TEST(BucketAllReduce, OneNodePerBucketRightAfterItsLastGradient) {
  const Graph g = linear_gradients();
  passes::BucketAllReduceOptions o;
  o.bucket_bytes = 1;  // one bucket per gradient
  Graph r = passes::bucket_allreduce_pass(o).run(g);
  // b_grad comes first in the backward order, so its bucket is first, right after its producer.
  EXPECT_EQ(node_names(r), (std::vector<std::string>{"mm", "add", "diff", "gb", "allreduce_0", "gw", "allreduce_1"}));
  EXPECT_EQ(r.nodes[4].inputs, std::vector<std::string>{"b_grad"});
  EXPECT_EQ(r.nodes[4].outputs, std::vector<std::string>{"b_grad.sum"});
  EXPECT_EQ(r.nodes[4].domain, kGraphrunDomain);
  EXPECT_EQ(r.nodes[4].attr_s("reduction", ""), "sum");
  EXPECT_EQ(r.values.at("W_grad.sum").str(), "f32[3,2]");
  EXPECT_EQ(r.outputs, g.outputs);  // the gradients stay outputs until state_updates
  EXPECT_EQ(r.opset(kGraphrunDomain), 1);
  const auto buckets = passes::reduced_gradients(r);
  ASSERT_EQ(buckets.size(), 2u);
  EXPECT_EQ(buckets[1][0].param, "W");
  EXPECT_EQ(buckets[1][0].sum, "W_grad.sum");

  o.bucket_bytes = 1 << 20;  // everything in one bucket, after the last gradient
  r = passes::bucket_allreduce(g, o);
  EXPECT_EQ(node_names(r), (std::vector<std::string>{"mm", "add", "diff", "gb", "gw", "allreduce_0"}));
  EXPECT_EQ(r.nodes[5].inputs, (std::vector<std::string>{"b_grad", "W_grad"}));
  EXPECT_EQ(passes::gradient_params(g), (std::vector<std::string>{"W", "b"}));

  // f64 parameters train too (a float64 model), but never share a bucket with f32 ones.
  Graph f64 = g;
  f64.initializers["b"] = Tensor(DType::F64, {1, 2});
  r = passes::bucket_allreduce(f64, o);
  EXPECT_EQ(node_names(r), (std::vector<std::string>{"mm", "add", "diff", "gb", "allreduce_0", "gw", "allreduce_1"}));
  Graph f16 = g;
  f16.initializers["b"] = Tensor(DType::F16, {1, 2});
  try {
    passes::bucket_allreduce(f16, o);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("parameter 'b' is f16; graphrun trains f32 (or f64) parameters only (--freeze b"),
              std::string::npos)
        << e.what();
  }
  o.params = {"W", "nope"};
  EXPECT_THROW(passes::bucket_allreduce(g, o), Error);
}

TEST(AddOptimizer, UpdatesEveryBucketAfterAllOtherNodes) {
  passes::BucketAllReduceOptions bo;
  bo.bucket_bytes = 1;
  const Graph reduced = passes::bucket_allreduce(linear_gradients(), bo);
  passes::AddOptimizerOptions o;
  o.optimizer.weight_decay = 0.1f;
  Graph r = passes::add_optimizer_pass(o).run(reduced);
  std::vector<std::string> tail(r.nodes.size() - reduced.nodes.size());
  for (size_t i = 0; i < tail.size(); ++i) tail[i] = r.nodes[reduced.nodes.size() + i].name;
  EXPECT_EQ(tail, (std::vector<std::string>{"sgd_decay_b", "sgd_l2_b", "sgd_scale_b", "sgd_update_b", "sgd_decay_W",
                                            "sgd_l2_W", "sgd_scale_W", "sgd_update_W"}));
  const Node& l2 = r.nodes[reduced.nodes.size() + 1];
  EXPECT_EQ(l2.inputs, (std::vector<std::string>{"b_grad.sum", "b.decay"}));  // G + wd * X, on the sum
  EXPECT_EQ(r.nodes[reduced.nodes.size() + 2].inputs, (std::vector<std::string>{"lr", "b.grad_l2"}));
  EXPECT_TRUE(r.is_input("lr"));
  EXPECT_FALSE(r.is_input("step"));
  EXPECT_EQ(r.state_updates, (std::vector<std::pair<std::string, std::string>>{{"b.new", "b"}, {"W.new", "W"}}));

  o.optimizer = {};
  o.optimizer.kind = "adamw";
  o.optimizer.weight_decay = 0.01f;
  r = passes::add_optimizer(reduced, o);
  // Step-wide values come first; then the graph; then Adam per bucket and AdamW's decoupled decay.
  EXPECT_EQ(r.nodes[0].name, "adam_count");
  EXPECT_EQ(r.nodes[1].name, "adamw_lr_decay");
  EXPECT_EQ(r.nodes.back().name, "adamw_update_W");
  EXPECT_TRUE(r.is_input("step"));
  EXPECT_EQ(r.initializers.count("W.adam_m") + r.initializers.count("W.adam_v"), 2u);
  EXPECT_EQ(r.state_updates.size(), 6u);  // W, b and their two moments each

  try {
    passes::add_optimizer(linear_gradients(), o);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("has no AllReduce node"), std::string::npos) << e.what();
  }
  o.optimizer.kind = "lion";
  EXPECT_THROW(passes::add_optimizer(reduced, o), Error);
}

TEST(StateUpdates, TheStateReplacesTheGradientsAsOutputs) {
  Graph g = linear_gradients();
  // A training-form BatchNorm after the prediction, with running statistics to keep.
  g.initializers["m"] = Tensor(DType::F32, {2});
  g.initializers["v"] = Tensor(DType::F32, {2});
  g.initializers["s"] = Tensor(DType::F32, {2});
  g.initializers["o"] = Tensor(DType::F32, {2});
  Node bn{"bn", "BatchNormalization", "", {"pred", "s", "o", "m", "v"}, {"normed", "m.updated", "v.updated"}, {}};
  bn.attrs["training_mode"] = Attribute::Int(1);
  g.nodes.insert(g.nodes.begin() + 2, bn);
  const Graph reduced = passes::add_optimizer(passes::bucket_allreduce(g, {}), {});
  Graph r = passes::state_updates_pass().run(reduced);
  EXPECT_EQ(r.outputs, (std::vector<std::string>{"pred", "b.new", "W.new", "m.updated", "v.updated"}));
  EXPECT_EQ(r.state_updates.back(), (std::pair<std::string, std::string>{"v.updated", "v"}));
}

// ---- the one topological sort ----

TEST(TopologicalOrder, StableAndNamesTheProblemNode) {
  Graph g = linear_gradients();
  std::reverse(g.nodes.begin(), g.nodes.end());
  g.topo_sort();
  EXPECT_EQ(node_names(g), (std::vector<std::string>{"mm", "add", "diff", "gw", "gb"}));  // lowest index first
  auto order = [](const std::vector<std::vector<std::string>>& ins, const std::vector<std::vector<std::string>>& outs) {
    return topological_order(
        ins.size(), [&](size_t i) { return ins[i]; }, [&](size_t i) { return outs[i]; }, {"in"});
  };
  TopoOrder t = order({{"b"}, {"in"}}, {{"c"}, {"b"}});
  EXPECT_EQ(t.order, (std::vector<int>{1, 0}));
  EXPECT_FALSE(t.already_sorted);
  EXPECT_TRUE(order({{"in"}, {"b"}}, {{"b"}, {"c"}}).already_sorted);
  t = order({{"in"}, {"nowhere"}}, {{"b"}, {"c"}});
  EXPECT_EQ(t.undefined_node, 1);
  EXPECT_EQ(t.undefined_input, "nowhere");
  t = order({{"in"}, {"c"}, {"b"}}, {{"a"}, {"b"}, {"c"}});
  EXPECT_EQ(t.cycle_node, 1);
  Graph cyc = linear_gradients();
  cyc.nodes[0].inputs[0] = "pred";
  try {
    cyc.topo_sort();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "graph has a cycle through node 'mm' (MatMul)");
  }
}

// ---- from the command line ----

testing::CommandResult graphrun(const std::string& args) {
  return testing::run_command(testing::graphrun_cli() + " " + args);
}

void expect_one_line_error(const std::string& args, const std::string& what) {
  auto r = graphrun(args);
  EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.output;
  std::string out = r.output;
  while (!out.empty() && out.back() == '\n') out.pop_back();
  EXPECT_EQ(out.find('\n'), std::string::npos) << "more than one line for: " << args << "\n" << r.output;
  EXPECT_NE(out.find(what), std::string::npos) << args << "\n" << r.output;
}

TEST(PassesCli, ShowPassesListsThePipelineOfTheCommand) {
  auto r = graphrun("show " + lenet() + " --passes");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<std::string> order = {"convert_opset", "remove_noops", "to_training", "fold_pads", "make_batch_symbolic", "unbiased_running_var",
                                          "fake_quantize", "attach_loss", "backward", "bucket_allreduce", "add_optimizer", "state_updates"};
  size_t at = 0;
  for (const auto& p : order) {
    at = r.output.find("\n" + p + " ", at);
    ASSERT_NE(at, std::string::npos) << p << " missing or out of order:\n" << r.output;
  }
  EXPECT_NE(r.output.find("optimizer=sgd"), std::string::npos) << r.output;
  r = graphrun("show " + lenet() + " --passes --devices 2 --optimizer adam --freeze fc2.bias");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("optimizer=adam"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("freeze=fc2.bias"), std::string::npos) << r.output;
  r = graphrun("show " + lenet() + " --backward --passes");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("\nbackward "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("seed=1"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("bucket_allreduce"), std::string::npos) << r.output;
  EXPECT_NE(graphrun("show --help").output.find("--dump-after PASS"), std::string::npos);
}

TEST(PassesCli, DumpAfterPrintsTheGraphAfterThatPass) {
  auto r = graphrun("show " + lenet() + " --backward --dump-after attach_loss");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.rfind("# graph after pass attach_loss\n", 0), 0u) << r.output;
  EXPECT_NE(r.output.find("%labels: i64[N]"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("_grad"), std::string::npos) << r.output;  // no backward yet
  r = graphrun("show " + lenet() + " --dump-after bucket_allreduce");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("ai.graphrun.AllReduce"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("sgd_update"), std::string::npos) << r.output;  // the optimizer comes next
  r = graphrun("show " + lenet() + " --dump-after remove_noops --format dot");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.rfind("digraph", 0), 0u) << r.output;

  const std::string d = testing::temp_dir("passes_cli_grad");
  r = graphrun("grad " + lenet() + " --dump-after to_training -o " + d + "/g.onnx");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.rfind("# graph after pass to_training\n", 0), 0u) << r.output;
  EXPECT_NE(r.output.find("wrote " + d + "/g.onnx"), std::string::npos) << r.output;
  r = graphrun("grad " + lenet() + " --devices 2 --dump-after add_optimizer -o " + d + "/dp.onnx");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("sgd_update"), std::string::npos) << r.output;
}

// An MNIST-format folder of n training and n test images (raw idx files).
std::string tiny_dataset(const std::string& dir, int n) {
  auto write = [&](const std::string& name, std::vector<int> dims, int value_mod) {
    std::ofstream f(dir + "/" + name, std::ios::binary);
    const unsigned char magic[4] = {0, 0, 0x08, static_cast<unsigned char>(dims.size())};
    f.write(reinterpret_cast<const char*>(magic), 4);
    int64_t count = 1;
    for (int d : dims) {
      const unsigned char be[4] = {static_cast<unsigned char>(d >> 24), static_cast<unsigned char>(d >> 16),
                                   static_cast<unsigned char>(d >> 8), static_cast<unsigned char>(d)};
      f.write(reinterpret_cast<const char*>(be), 4);
      count *= d;
    }
    for (int64_t i = 0; i < count; ++i) f.put(static_cast<char>((i * 7) % value_mod));
  };
  for (const char* split : {"train", "t10k"}) {
    write(std::string(split) + "-images-idx3-ubyte", {n, 28, 28}, 256);
    write(std::string(split) + "-labels-idx1-ubyte", {n}, 10);
  }
  return dir;
}

TEST(PassesCli, TrainDumpsAfterAPassToo) {
  const std::string data = tiny_dataset(testing::temp_dir("passes_cli_train"), 8);
  auto r = graphrun("train " + lenet() + " --data " + data +
                    " --devices cpu:1 --epochs 1 --batch-size 8 --dump-after state_updates");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.rfind("# graph after pass state_updates\n", 0), 0u) << r.output;
  EXPECT_NE(r.output.find("%conv1.weight.new"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("test acc:"), std::string::npos) << r.output;
}

TEST(PassesCli, AnUnknownPassIsOneLineListingTheValidNames) {
  const std::string names = "(passes: add_optimizer, attach_loss, backward, bucket_allreduce";
  expect_one_line_error("show " + lenet() + " --dump-after nope", "--dump-after: unknown pass 'nope' " + names);
  expect_one_line_error("grad " + lenet() + " --dump-after nope -o /dev/null", "unknown pass 'nope' " + names);
  expect_one_line_error("train " + lenet() + " --dump-after nope", "unknown pass 'nope' " + names);
  expect_one_line_error("show " + lenet() + " --backward --dump-after add_optimizer",
                        "pass 'add_optimizer' is not in this pipeline (its passes: convert_opset, remove_noops, to_training, fold_pads, "
                        "unbiased_running_var, fake_quantize, attach_loss, backward)");
  expect_one_line_error("show " + lenet() + " --passes --format dot", "--passes");
}

}  // namespace
}  // namespace graphrun

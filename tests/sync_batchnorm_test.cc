// --sync-bn (pass sync_batchnorm, ReplicaSum): BatchNorm over the global batch. 2 and 3 replicas,
// shards of unequal size, equal one replica on the whole batch (parameters and running statistics);
// without --sync-bn they do not; the graph says what it does.
#include <gtest/gtest.h>
#include <unistd.h>

#include <iostream>
#include <map>

#include "graph/float64.h"
#include "graph/onnx_io.h"
#include "graph/passes/sync_batchnorm.h"
#include "graph/passes/train_mode.h"
#include "runtime/kernel.h"
#include "runtime/pipeline.h"
#include "runtime/trainer.h"
#include "tests/sim_backend.h"
#include "tests/test_util.h"
#include "tests/trainer_test_util.h"

namespace graphrun {
namespace {

using runtime::TrainOptions;

// A small BatchNorm CNN for Fashion-MNIST: Conv 5x5 (4 channels) -> BatchNorm -> Relu -> MaxPool ->
// Gemm, written and saved the way a user's onnx.helper model would be (then loaded back, inferred).
std::string bn_model_path() {
  static const std::string path = [] {
    Graph g;
    g.name = "bncnn";
    g.opsets[""] = 17;
    g.inputs = {"image"};
    g.outputs = {"logits"};
    ValueInfo in;
    in.dtype = DType::F32;
    in.has_shape = true;
    in.shape = {Dim("N"), Dim(1), Dim(28), Dim(28)};
    g.values["image"] = in;
    g.initializers["conv.w"] = testing::random_tensor({4, 1, 5, 5}, 1, -0.3f, 0.3f);
    g.initializers["conv.b"] = testing::random_tensor({4}, 2, -0.1f, 0.1f);
    g.initializers["bn.scale"] = testing::random_tensor({4}, 3, 0.5f, 1.5f);
    g.initializers["bn.bias"] = testing::random_tensor({4}, 4, -0.1f, 0.1f);
    g.initializers["bn.mean"] = Tensor::from_vector<float>({4}, {0, 0, 0, 0});
    g.initializers["bn.var"] = Tensor::from_vector<float>({4}, {1, 1, 1, 1});
    g.initializers["fc.w"] = testing::random_tensor({10, 576}, 5, -0.05f, 0.05f);
    g.initializers["fc.b"] = testing::random_tensor({10}, 6, -0.05f, 0.05f);
    g.initializers["pool.shape"] = Tensor::from_vector<int64_t>({2}, {0, -1});
    g.nodes = {Node{"conv", "Conv", "", {"image", "conv.w", "conv.b"}, {"c"}, {}},
               Node{"bn", "BatchNormalization", "", {"c", "bn.scale", "bn.bias", "bn.mean", "bn.var"}, {"n"}, {}},
               Node{"relu", "Relu", "", {"n"}, {"r"}, {}},
               Node{"pool", "MaxPool", "", {"r"}, {"p"},
                    {{"kernel_shape", Attribute::Ints({2, 2})}, {"strides", Attribute::Ints({2, 2})}}},
               Node{"flat", "Reshape", "", {"p", "pool.shape"}, {"f"}, {}},
               Node{"fc", "Gemm", "", {"f", "fc.w", "fc.b"}, {"logits"}, {{"transB", Attribute::Int(1)}}}};
    // A folder per test process: ctest runs this file's tests side by side, and temp_dir empties the
    // folder it names, so a shared one let one test's model vanish or be half-written under another.
    const std::string file = testing::temp_dir("sync_bn_" + std::to_string(::getpid())) + "/bncnn.onnx";
    save_onnx(g, file);
    return file;
  }();
  return path;
}

int count_ops(const Graph& g, const std::string& op) {
  int n = 0;
  for (const Node& node : g.nodes) n += node.op_type == op;
  return n;
}

TEST(SyncBatchNorm, RewritesEveryTrainingBatchNormIntoReplicaSums) {
  const Graph model = load_onnx(bn_model_path());
  const int bns = count_ops(model, "BatchNormalization");
  ASSERT_GT(bns, 0);
  runtime::PipelineOptions po;
  po.devices = testing::quick(2, 8, 1).pipeline.devices;
  const runtime::TrainingGraphs plain = runtime::build_training_graphs(model, po);
  po.sync_bn = true;
  const runtime::TrainingGraphs synced = runtime::build_training_graphs(model, po);
  const Graph& g = synced.replicas[0].graph;
  EXPECT_EQ(count_ops(g, "BatchNormalization"), 0);
  EXPECT_EQ(count_ops(g, "BatchNormalizationGrad"), 0);
  // Forward: (sum, count) and the centred squares per BatchNorm; backward: their two gradients.
  EXPECT_EQ(count_ops(g, "ReplicaSum"), 4 * bns);
  // The same parameters are trained; the running statistics stay state, updated every step.
  EXPECT_EQ(synced.params, plain.params);
  int running = 0;
  for (const auto& [next, init] : synced.replicas[0].state_updates)
    for (const Node& n : model.nodes)
      if (n.op_type == "BatchNormalization" && (init == n.inputs[3] || init == n.inputs[4])) ++running;
  EXPECT_EQ(running, 2 * bns);
  // Without --sync-bn PyTorch's running variance comes from visible correction nodes after each
  // BatchNorm and the state update persists theirs; with it the global statistics give it directly
  // (never corrected twice).
  const auto corrections = [](const Graph& gr) {
    int k = 0;
    for (const Node& n : gr.nodes) k += n.name.find("/unbiased_running_var") != std::string::npos;
    return k;
  };
  EXPECT_GT(corrections(plain.replicas[0].graph), 0);
  EXPECT_EQ(corrections(g), 0);
  const Graph& pg = plain.replicas[0].graph;
  std::map<std::string, std::string> made_by;
  for (const Node& n : pg.nodes)
    for (const auto& o : n.outputs) made_by[o] = n.name;
  int corrected = 0;
  for (const auto& [next, init] : plain.replicas[0].state_updates)
    for (const Node& n : pg.nodes)
      if (n.op_type == "BatchNormalization" && init == n.inputs[4]) {
        EXPECT_EQ(made_by[next], passes::unbiased_running_var_node(n)) << init;
        ++corrected;
      }
  EXPECT_EQ(corrected, bns);
  const auto shown_backward = testing::run_command(testing::graphrun_cli() + " show " + bn_model_path() + " --backward");
  EXPECT_EQ(shown_backward.exit_code, 0) << shown_backward.output;
  EXPECT_NE(shown_backward.output.find("/unbiased_running_var"), std::string::npos) << shown_backward.output;
  // `grad -o` gives the step's running statistics as outputs named <initializer>.new, with or without
  // --devices (they were outputs under internal names, the running mean not at all).
  for (const std::string devices : {"", " --devices 2"}) {
    const std::string out = testing::temp_dir("sync_bn_grad_outputs") + "/g.onnx";
    const auto written = testing::run_command(testing::graphrun_cli() + " grad " + bn_model_path() + devices + " -o " + out);
    ASSERT_EQ(written.exit_code, 0) << written.output;
    const Graph gg = load_onnx(out);
    int named = 0;
    for (const Node& n : model.nodes)
      if (n.op_type == "BatchNormalization")
        for (int i : {3, 4})
          named += std::count(gg.outputs.begin(), gg.outputs.end(), n.inputs[i] + ".new") == 1;
    EXPECT_EQ(named, 2 * bns) << devices;
    for (const std::string& o : gg.outputs) EXPECT_EQ(o.find("BatchNormalization"), std::string::npos) << devices << ": " << o;
  }
  // Outside data parallelism there is nothing to synchronise: a usage error in the CLI, not a pass.
  const auto r = testing::run_command(testing::graphrun_cli() + " show " + bn_model_path() + " --backward --sync-bn");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--sync-bn needs --devices"), std::string::npos) << r.output;
  const auto shown = testing::run_command(testing::graphrun_cli() + " show " + bn_model_path() + " --devices 2 --sync-bn");
  EXPECT_EQ(shown.exit_code, 0) << shown.output;
  EXPECT_NE(shown.output.find("ReplicaSum"), std::string::npos);
}

// After `steps` steps: every replica's parameters and running statistics (of replica `d`).
std::map<std::string, Tensor> states_of(const Graph& model, const TrainOptions& o, int d) {
  runtime::Trainer t(model, o);
  t.train_epoch(0);
  std::map<std::string, Tensor> r;
  for (const auto& [name, v] : t.replica(d).states())
    if (model.initializers.count(name)) r[name] = runtime::to_host(v);
  return r;
}

double worst(const std::map<std::string, Tensor>& a, const std::map<std::string, Tensor>& b, std::string* where) {
  double w = 0;
  for (const auto& [name, t] : b) {
    const double d = testing::max_rel_diff(a.at(name), t);
    if (d > w) w = d, *where = name;
  }
  return w;
}

// train --sync-bn where it changes nothing says so on stderr (it was silent): a model without
// BatchNormalization, or one replica, whose shard is the whole batch. Two replicas of a BN model: no word.
TEST(SyncBatchNorm, TrainWarnsWhereSyncBnChangesNothing) {
  if (!testing::have_data()) GTEST_SKIP() << "Fashion-MNIST is not installed (Debian package dataset-fashion-mnist)";
  const std::string train = testing::graphrun_cli() + " train ";
  const std::string run = " --epochs 1 --max-steps 1 --batch-size 8 --threads 1 --sync-bn";
  auto r = testing::run_command(train + testing::lenet_path() + run + " --devices cpu:2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("warning: --sync-bn changes nothing: 'lenet' has no BatchNormalization"), std::string::npos)
      << r.output;
  r = testing::run_command(train + bn_model_path() + run + " --devices cpu:1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("warning: --sync-bn changes nothing on one replica"), std::string::npos) << r.output;
  r = testing::run_command(train + bn_model_path() + run + " --devices cpu:2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("warning"), std::string::npos) << r.output;
}

// Batch 10: shards of 5+5 and 4+3+3. 20 SGD steps with momentum. One replica without --sync-bn is
// the reference (BatchNorm over the whole batch); 2 and 3 replicas with --sync-bn equal it, on every
// replica, and differ from it without --sync-bn (each shard's own statistics).
TEST(SyncBatchNorm, TwoAndThreeReplicasEqualOneOnTheWholeBatch) {
  if (!testing::have_data()) GTEST_SKIP() << "Fashion-MNIST is not installed (Debian package dataset-fashion-mnist)";
  const Graph model = load_onnx(bn_model_path());
  TrainOptions o = testing::quick(1, 10, 20, 100);
  o.lr = 0.05;
  o.pipeline.optimizer.momentum = 0.9f;
  const auto whole = states_of(model, o, 0);
  std::string where;
  for (int D : {2, 3}) {
    TrainOptions od = o;
    od.pipeline.devices = testing::quick(D, 10, 20).pipeline.devices;
    od.pipeline.sync_bn = true;
    for (int d = 0; d < D; ++d) {
      const double w = worst(states_of(model, od, d), whole, &where);
      EXPECT_LE(w, 1e-5) << D << " replicas with --sync-bn, replica " << d << ": " << where;
      std::cout << D << " replicas, --sync-bn, replica " << d << ": max relative difference " << w << " (" << where
                << ")\n";
    }
    od.pipeline.sync_bn = false;
    const double w = worst(states_of(model, od, 0), whole, &where);
    EXPECT_GT(w, 1e-3) << D << " replicas without --sync-bn should differ (per-shard statistics)";
    std::cout << D << " replicas, without --sync-bn: max relative difference " << w << " (" << where << ")\n";
  }
}

// The same check in float64 (`graphrun train --float64`: graph/float64.h's copy of the model), with
// SGD and momentum (its buffers f64 too): where float32 rounding, amplified by the steps, would blur
// the comparison on a larger model (README: SyncBatchNorm at full size), float64 shows --sync-bn
// agreeing to rounding (~1e-14).
TEST(SyncBatchNorm, Float64TwoAndThreeReplicasEqualOneOnTheWholeBatch) {
  if (!testing::have_data()) GTEST_SKIP() << "Fashion-MNIST is not installed (Debian package dataset-fashion-mnist)";
  const Graph model = float64_copy(load_onnx(bn_model_path()));
  TrainOptions o = testing::quick(1, 10, 20, 100);
  o.lr = 0.05;
  o.pipeline.optimizer.momentum = 0.9f;
  const auto whole = states_of(model, o, 0);
  for (const auto& [name, t] : whole)
    if (t.dtype() != DType::I64) { EXPECT_EQ(t.dtype(), DType::F64) << name; }
  {
    int buffers = 0;
    runtime::Trainer t(model, o);
    for (const auto& [name, v] : t.replica(0).states())
      if (name.find(".momentum") != std::string::npos) {
        ++buffers;
        EXPECT_EQ(runtime::to_host(v).dtype(), DType::F64) << name;
      }
    EXPECT_GT(buffers, 0) << "no momentum buffer among the states";
  }
  std::string where;
  for (int D : {2, 3}) {
    TrainOptions od = o;
    od.pipeline.devices = testing::quick(D, 10, 20).pipeline.devices;
    od.pipeline.sync_bn = true;
    const double w = worst(states_of(model, od, D - 1), whole, &where);
    EXPECT_LE(w, 1e-10) << D << " replicas with --sync-bn: " << where;
    std::cout << "float64, " << D << " replicas, --sync-bn: max relative difference " << w << " (" << where << ")\n";
    od.pipeline.sync_bn = false;
    const double wn = worst(states_of(model, od, 0), whole, &where);
    EXPECT_GT(wn, 1e-3) << D << " replicas without --sync-bn should differ (per-shard statistics)";
    std::cout << "float64, " << D << " replicas, without --sync-bn: max relative difference " << wn << "\n";
  }
}

// --sync-bn on GPU replicas: the replica graph (with the executor's passes, as train runs it) counts each
// shard with Size, and the CUDA kernel table runs every node of it (the check each GPU executor makes first);
// on the simulated device two replicas of cuda:0 then train with it exactly as two CPU replicas do.
TEST(SyncBatchNorm, CudaReplicasRunTheSyncBnGraph) {
  const Graph model = load_onnx(bn_model_path());
  const Device gpu{Device::Kind::CUDA, 0};
  runtime::PipelineOptions po;
  po.devices = {gpu, gpu};
  po.sync_bn = true;
  po.executor_passes = true;
  const runtime::TrainingGraphs tg = runtime::build_training_graphs(model, po);
  ASSERT_EQ(tg.replicas.size(), 2u);
  EXPECT_GT(count_ops(tg.replicas[0].graph, "Size"), 0);
  const runtime::KernelTable& cuda = runtime::KernelTable::of_device(Device::Kind::CUDA);
  if (!cuda.ops().empty()) {
    for (const auto& r : tg.replicas) EXPECT_NO_THROW(runtime::check_supported(r.graph, cuda, "replica graph"));
  }
  if (!testing::have_data()) GTEST_SKIP() << "Fashion-MNIST is not installed (Debian package dataset-fashion-mnist)";
  testing::ScopedSimDevice sim;
  TrainOptions o = testing::quick(2, 10, 4, 100);
  o.pipeline.sync_bn = true;
  runtime::Trainer cpu(model, o);
  o.pipeline.devices = {gpu, gpu};
  runtime::Trainer dev(model, o);
  const auto sc = cpu.train_epoch(0), sd = dev.train_epoch(0);
  EXPECT_EQ(sd.loss, sc.loss);
  for (int d = 0; d < 2; ++d)
    for (const auto& [name, v] : cpu.replica(d).states())
      EXPECT_EQ(testing::max_abs_diff(runtime::to_host(dev.replica(d).states().at(name)), runtime::to_host(v)), 0)
          << "replica " << d << ": " << name;
}

// Evaluation on two GPUs: the copy on cuda:1 reads replica 1's parameters in place (replica 0's bit for
// bit) and copies replica 0's running statistics, so it gives CPU replicas' figures, also when replica
// 1's statistics differ from replica 0's, and holds no copy of the weights.
TEST(SyncBatchNorm, EvaluationOnASecondGpuReadsItsReplicasWeightsAndReplicaZerosStatistics) {
  if (!testing::have_data()) GTEST_SKIP() << "Fashion-MNIST is not installed (Debian package dataset-fashion-mnist)";
  const Graph model = load_onnx(bn_model_path());
  testing::ScopedSimDevice sim(2);
  TrainOptions o = testing::quick(2, 10, 4, 100);
  o.device_data_budget = 0;  // the data stays on the host: the devices hold the model alone
  runtime::Trainer cpu(model, o);
  o.pipeline.devices = {Device{Device::Kind::CUDA, 0}, Device{Device::Kind::CUDA, 1}};
  runtime::Trainer dev(model, o);
  // The replicas' tensors, the evaluation's totals and its copies of the running statistics on cuda:1,
  // in blocks of 512 bytes; not the weights (24 KB) again.
  size_t held = 0;
  for (int d = 0; d < 2; ++d)
    for (const auto& [_, t] : dev.replica(d).states()) held += (t.nbytes() + 511) / 512 * 512;
  EXPECT_LE(sim.backend().bytes_in_use(), held + 8 * 512);
  const auto sc = cpu.train_epoch(0), sd = dev.train_epoch(0);
  EXPECT_EQ(sd.loss, sc.loss);
  EXPECT_EQ(sd.test_acc, sc.test_acc);
  // Replica 1's statistics drift from replica 0's (as they do within an epoch): evaluation still reads
  // replica 0's.
  const Tensor mean = Tensor::from_vector<float>({4}, {5, -5, 5, -5});
  for (runtime::Trainer* t : {&cpu, &dev}) t->replica(1).set_state("bn.mean", mean);
  const auto ec = cpu.evaluate_stats(), ed = dev.evaluate_stats();
  EXPECT_EQ(ed.accuracy, ec.accuracy);
  EXPECT_EQ(ed.loss, ec.loss);
  EXPECT_EQ(ec.accuracy, sc.test_acc);
}

}  // namespace
}  // namespace graphrun

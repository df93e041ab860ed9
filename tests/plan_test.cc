// graphrun plan (runtime/plan.h): FLOPs against a hand count, buckets against the parameters, memory
// against what the trainer's executors allocate, and the ring-allreduce prediction's shape.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "graph/onnx_io.h"
#include "runtime/plan.h"
#include "runtime/trainer.h"
#include "tests/test_util.h"
#include "tests/trainer_test_util.h"

namespace graphrun {
namespace {

using runtime::make_plan;
using runtime::parse_link;
using runtime::Plan;
using runtime::PlanOptions;

PlanOptions static_options(int devices, int64_t batch) {
  PlanOptions o;
  o.devices = devices;
  o.batch_size = batch;
  o.predict = false;
  return o;
}

// Per image of models/lenet.onnx: conv1 20x1x3x3 -> 20x26x26, conv2 50x20x5x5 -> 50x9x9, fc 800->128->10.
// A multiply-add counts two. Backward: conv2 and both fc layers compute the input and the weight
// gradient (each costs the forward), conv1 the weight gradient only (the image needs none).
TEST(Plan, LenetFlopsMatchAHandCount) {
  if (!std::filesystem::exists(testing::lenet_path())) GTEST_SKIP() << "models/lenet.onnx is missing";
  const double conv1 = 2.0 * 20 * 26 * 26 * (1 * 3 * 3), conv2 = 2.0 * 50 * 9 * 9 * (20 * 5 * 5);
  const double fc1 = 2.0 * 800 * 128, fc2 = 2.0 * 128 * 10;
  const double forward = conv1 + conv2 + fc1 + fc2;
  const double backward = conv1 + 2 * conv2 + 2 * fc1 + 2 * fc2;
  EXPECT_EQ(forward + backward, 13258800.0);
  const Plan p = make_plan(load_onnx(testing::lenet_path()), static_options(2, 12));
  EXPECT_EQ(p.shard, 6);
  EXPECT_DOUBLE_EQ(p.flops_replica, 6 * (forward + backward));
  EXPECT_DOUBLE_EQ(p.flops_step, 12 * (forward + backward));
}

// --devices cpu:auto's candidates: every R dividing the cores, up to 4 and the batch; each timed, fastest first.
TEST(Plan, CpuPlacementsSplitTheCoresAndComeFastestFirst) {
  if (!std::filesystem::exists(testing::lenet_path())) GTEST_SKIP() << "models/lenet.onnx is missing";
  const Graph model = load_onnx(testing::lenet_path());
  PlanOptions o;
  o.batch_size = 8;
  o.measure_steps = 1;
  auto splits = [&](int cores) {
    std::set<std::pair<int, int>> s;
    const auto ranked = runtime::compare_cpu_placements(model, o, cores);
    for (size_t i = 0; i < ranked.size(); ++i) {
      EXPECT_GT(ranked[i].step_s, 0) << ranked[i].str();
      if (i > 0) { EXPECT_LE(ranked[i - 1].step_s, ranked[i].step_s); }
      s.insert({ranked[i].replicas, ranked[i].threads});
    }
    return s;
  };
  EXPECT_EQ(splits(1), (std::set<std::pair<int, int>>{{1, 1}}));
  EXPECT_EQ(splits(2), (std::set<std::pair<int, int>>{{1, 2}, {2, 1}}));
  EXPECT_EQ(splits(3), (std::set<std::pair<int, int>>{{1, 3}, {3, 1}}));
  EXPECT_EQ(splits(8), (std::set<std::pair<int, int>>{{1, 8}, {2, 4}, {4, 2}}));
  o.batch_size = 2;  // a replica needs an example
  EXPECT_EQ(splits(4), (std::set<std::pair<int, int>>{{1, 4}, {2, 2}}));
  EXPECT_EQ((runtime::CpuPlacement{2, 1, 0}.str()), "cpu:2 x 1 thread");
  EXPECT_EQ((runtime::CpuPlacement{1, 2, 0}.str()), "cpu:1 x 2 threads");
}

// Small buckets cut LeNet's gradients into several AllReduce nodes; together they carry every
// trained parameter exactly once.
TEST(Plan, BucketBytesSumToTheParameterBytes) {
  if (!std::filesystem::exists(testing::lenet_path())) GTEST_SKIP() << "models/lenet.onnx is missing";
  const Graph model = load_onnx(testing::lenet_path());
  size_t param_bytes = 0;
  for (const auto& [name, t] : model.initializers) param_bytes += t.nbytes();
  for (size_t cap : {size_t(4) << 20, size_t(100000), size_t(1000)}) {
    PlanOptions o = static_options(2, 8);
    o.pipeline.bucket_bytes = cap;
    const Plan p = make_plan(model, o);
    size_t sum = 0;
    int grads = 0;
    for (size_t b = 0; b < p.buckets.size(); ++b) {
      sum += p.buckets[b].bytes;
      grads += p.buckets[b].grads;
      if (b + 1 < p.buckets.size()) { EXPECT_GE(p.buckets[b].bytes, cap) << "bucket " << b << " closed early"; }
    }
    EXPECT_EQ(sum, param_bytes) << cap;
    EXPECT_EQ(p.allreduce_bytes, param_bytes);
    EXPECT_EQ(p.memory.params, param_bytes);
    EXPECT_EQ(grads, 8);
    EXPECT_EQ(p.buckets.size(), cap > param_bytes ? 1u : cap == 1000 ? 4u : 3u) << cap;
  }
}

// The plan's memory is the executor's: the arena and the state of a replica of a real training run
// (same shard, threads and optimizer), for SGD, momentum (one buffer per parameter) and Adam (two).
TEST(Plan, MemoryEqualsWhatTheTrainersExecutorAllocates) {
  REQUIRE_LENET_AND_DATA();
  const Graph model = load_onnx(testing::lenet_path());
  for (const std::string opt : {"sgd", "momentum", "adam"}) {
    runtime::TrainOptions t = testing::quick(2, 16, 1, 100);
    t.pipeline.optimizer.kind = opt == "adam" ? "adam" : "sgd";
    if (opt == "momentum") t.pipeline.optimizer.momentum = 0.9f;
    runtime::Trainer trainer(model, t);
    trainer.fit();
    const runtime::PlanStats real = trainer.replica(0).plan_stats();

    PlanOptions o = static_options(2, 16);
    o.pipeline.optimizer = t.pipeline.optimizer;
    o.threads = 1;
    const Plan p = make_plan(model, o);
    EXPECT_EQ(p.memory.arena, real.arena_bytes) << opt;
    EXPECT_EQ(p.memory.first_step, real.planning_peak_bytes) << opt;
    EXPECT_GT(p.memory.first_step, 0u) << opt;
    EXPECT_EQ(p.memory.peak(), std::max(p.memory.arena, p.memory.first_step) + p.memory.persistent()) << opt;
    EXPECT_EQ(p.memory.persistent(), real.persistent_bytes) << opt;
    const size_t per_param = opt == "sgd" ? 0 : opt == "momentum" ? 1 : 2;
    // Adam also keeps a step count (a scalar) per parameter group.
    EXPECT_GE(p.memory.optimizer, per_param * p.memory.params) << opt;
    EXPECT_LE(p.memory.optimizer, per_param * p.memory.params + 64) << opt;
    EXPECT_GT(p.memory.arena, p.memory.grads) << opt;
  }
}

TEST(Plan, RingAllreduceCost) {
  const runtime::LinkModel link{"test", 10, 0};
  EXPECT_EQ(runtime::ring_allreduce_seconds(1000000000, 1, link), 0);
  EXPECT_DOUBLE_EQ(runtime::ring_allreduce_seconds(1000000000, 4, link), 2.0 * 3 / 4 * 0.1);
  const runtime::LinkModel slow{"test", 10, 100};
  EXPECT_DOUBLE_EQ(runtime::ring_allreduce_seconds(0, 8, slow), 14 * 100e-6);
  EXPECT_EQ(parse_link("ethernet").gbytes_per_s, 1.25);
  EXPECT_EQ(parse_link("25").gbytes_per_s, 25);
  for (const char* bad : {"", "wifi", "0", "-3", "10x", "inf"}) EXPECT_THROW(parse_link(bad), Error) << bad;
}

// More bandwidth never makes the predicted step slower, with and without overlap; on a fast enough link
// the step is the compute alone; overlap never loses.
TEST(Plan, PredictionIsMonotoneInBandwidth) {
  if (!std::filesystem::exists(testing::lenet_path())) GTEST_SKIP() << "models/lenet.onnx is missing";
  PlanOptions o = static_options(4, 64);
  o.predict = true;
  o.device_tflops = 1;
  o.pipeline.bucket_bytes = 100000;  // three buckets: their order matters with overlap
  Plan p = make_plan(load_onnx(testing::lenet_path()), o);
  ASSERT_EQ(p.buckets.size(), 3u);
  for (bool overlap : {false, true}) {
    p.options.overlap = overlap;
    double last = 1e30, first = 0;
    for (double gbps : {0.01, 0.1, 1.0, 10.0, 100.0, 1e6}) {
      p.options.link = {"x", gbps, 5};
      runtime::predict_step(p, 4);
      if (first == 0) first = p.step_n;
      EXPECT_LE(p.step_n, last) << gbps << " GB/s, overlap " << overlap;
      EXPECT_GE(p.step_n, p.compute_n);
      EXPECT_NEAR(p.exposed_comm, p.step_n - p.compute_n, 1e-12);
      last = p.step_n;
    }
    EXPECT_LT(p.step_n, first / 10) << "overlap " << overlap;
    // Serial AllReduce adds all of its time; with overlap only what the backward pass cannot hide.
    if (overlap) EXPECT_LT(p.step_n, p.compute_n + p.comm_n);
    else EXPECT_NEAR(p.step_n, p.compute_n + p.comm_n, 1e-12);
  }
  p.options.link = parse_link("ethernet");
  p.options.overlap = false;
  runtime::predict_step(p, 4);
  const double serial = p.step_n;
  p.options.overlap = true;
  runtime::predict_step(p, 4);
  EXPECT_LE(p.step_n, serial);
  for (size_t b = 1; b < p.buckets.size(); ++b) EXPECT_GE(p.buckets[b].start_s, p.buckets[b - 1].end_s);
}

// The point of the plan: on Ethernet, 8 devices of 1 TFLOP/s barely help LeNet (little compute per
// byte of gradient, and per-node costs that do not shrink with the shard) but do help ResNet-18.
TEST(Plan, MoreDevicesHelpResnet18ButNotLenetOnEthernet) {
  if (!std::filesystem::exists(testing::lenet_path())) GTEST_SKIP() << "models/lenet.onnx is missing";
  if (!std::filesystem::exists(testing::resnet_path())) GTEST_SKIP() << "resnet18.onnx is not generated";
  PlanOptions o = static_options(8, 256);
  o.predict = true;
  o.device_tflops = 1;
  o.overlap = true;
  o.link = parse_link("ethernet");
  const Plan lenet = make_plan(load_onnx(testing::lenet_path()), o);
  const Plan resnet = make_plan(load_onnx(testing::resnet_path()), o);
  EXPECT_LT(lenet.efficiency(), 0.35) << lenet.speedup();
  EXPECT_LT(lenet.speedup(), 3);
  EXPECT_GT(resnet.efficiency(), 0.6) << resnet.speedup();
  EXPECT_GT(resnet.speedup(), 5);
}

// --sync-bn: every ReplicaSum of the replica graph (ResNet-18's BatchNorm statistics and their
// gradients) is a blocking ring allreduce in the prediction: nothing at one device, at N devices its
// ring time on the critical path, so the step grows by exactly that time when nothing overlaps.
TEST(Plan, SyncBnReplicaSumsAreBlockingAllreduces) {
  if (!std::filesystem::exists(testing::resnet_path())) GTEST_SKIP() << "resnet18.onnx is not generated";
  const Graph model = load_onnx(testing::resnet_path());
  int bns = 0;
  for (const Node& n : model.nodes) bns += n.op_type == "BatchNormalization";
  ASSERT_GT(bns, 10);
  PlanOptions o = static_options(8, 16);
  o.predict = true;
  o.device_tflops = 1;
  o.link = parse_link("ib");
  const Plan plain = make_plan(model, o);
  EXPECT_EQ(plain.sync_nodes, 0);
  EXPECT_EQ(plain.sync_n, 0);
  o.pipeline.sync_bn = true;
  Plan p = make_plan(model, o);
  // Forward: the (sum, count) pair and the squared deviations; backward: the gradients of both sums.
  EXPECT_EQ(p.sync_nodes, 4 * bns);
  size_t bytes = 0;
  double seconds = 0;
  int flagged = 0;
  for (const auto& n : p.nodes)
    if (n.sync) {
      ++flagged;
      EXPECT_EQ(n.op, "ReplicaSum");
      EXPECT_GT(n.sync_bytes, 0u) << n.name;
      bytes += n.sync_bytes;
      seconds += runtime::ring_allreduce_seconds(n.sync_bytes, 8, o.link);
    }
  EXPECT_EQ(flagged, p.sync_nodes);
  EXPECT_EQ(bytes, p.sync_bytes);
  // Per channel: sum, squares and their gradients, 4 bytes each, plus the count; ResNet-18 has
  // 64..512 channels per BatchNorm.
  EXPECT_GT(p.sync_bytes, size_t(4 * bns) * 64 * 4);
  EXPECT_NEAR(p.sync_n, seconds, 1e-12);
  EXPECT_EQ(p.allreduce_bytes, plain.allreduce_bytes);  // the gradients are the same
  EXPECT_NEAR(p.step_n, p.compute_n + p.comm_n + p.sync_n, 1e-12);  // overlap off: all of it serial
  // On one device a ReplicaSum costs nothing.
  runtime::predict_step(p, 1);
  EXPECT_EQ(p.sync_n, 0);
}

// --freeze: a frozen parameter gets no gradient, so no bucket carries it and no optimizer state is kept.
TEST(Plan, FrozenParametersLeaveTheBuckets) {
  if (!std::filesystem::exists(testing::lenet_path())) GTEST_SKIP() << "models/lenet.onnx is missing";
  const Graph model = load_onnx(testing::lenet_path());
  PlanOptions o = static_options(2, 8);
  o.pipeline.optimizer.momentum = 0.9f;
  const Plan all = make_plan(model, o);
  std::string frozen;
  size_t frozen_bytes = 0;
  for (const auto& [name, t] : model.initializers)
    if (t.nbytes() > frozen_bytes) frozen = name, frozen_bytes = t.nbytes();
  o.pipeline.freeze = {frozen};
  const Plan p = make_plan(model, o);
  EXPECT_EQ(p.allreduce_bytes, all.allreduce_bytes - frozen_bytes);
  EXPECT_EQ(p.memory.params, all.memory.params - frozen_bytes);
  EXPECT_EQ(p.memory.optimizer, all.memory.optimizer - frozen_bytes);  // no momentum buffer
  EXPECT_EQ(p.memory.other_state, all.memory.other_state + frozen_bytes);
}

}  // namespace
}  // namespace graphrun

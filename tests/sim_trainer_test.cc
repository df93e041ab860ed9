// The trainer's one step loop on the simulated CUDA device (tests/sim_backend.h): data resident on the
// device, shards gathered there, figures read a step late. Per step it allocates nothing, copies no
// images to the device and makes one host wait (an event, with the next step already queued); it
// gives the CPU replicas' figures, evaluation and parameters bit for bit, also when the data does not
// fit the budget, and it stops on a non-finite loss at the step the CPU names.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <sstream>

#include "graph/float64.h"
#include "graph/onnx_io.h"
#include "runtime/checkpoint.h"
#include "runtime/device.h"
#include "runtime/interrupt.h"
#include "runtime/trainer.h"
#include "tests/sim_backend.h"
#include "tests/test_util.h"
#include "tests/trainer_test_util.h"

namespace graphrun {
namespace {

using runtime::TrainOptions;
using runtime::Trainer;
using testing::ScopedSimDevice;
using testing::SimCounters;

const Device kSim{Device::Kind::CUDA, 0};

std::vector<Device> sim_replicas(int D) { return std::vector<Device>(D, kSim); }

TrainOptions with_devices(TrainOptions o, const std::vector<Device>& devices) {
  o.pipeline.devices = devices;
  return o;
}

void expect_same_states(Trainer& a, Trainer& b, const std::string& what) {
  for (int d = 0; d < a.replicas(); ++d)
    for (const auto& [name, v] : a.replica(d).states())
      EXPECT_EQ(testing::max_abs_diff(runtime::to_host(b.replica(d).state(name)), runtime::to_host(v)), 0)
          << what << ": replica " << d << " " << name;
}

void expect_same_epoch(const runtime::EpochStats& got, const runtime::EpochStats& want, const std::string& what) {
  EXPECT_EQ(got.loss, want.loss) << what;
  EXPECT_EQ(got.train_acc, want.train_acc) << what;
  EXPECT_EQ(got.test_acc, want.test_acc) << what;
  EXPECT_EQ(got.images, want.images) << what;
}

// The per-step log lines ("step N  epoch E  loss L  lr R") of a run.
std::string step_lines(const std::string& log) {
  std::istringstream is(log);
  std::string line, r;
  while (std::getline(is, line))
    if (line.rfind("step ", 0) == 0) r += line + "\n";
  return r;
}

TEST(SimTrainer, SteadyStateAllocatesNothingCopiesNoImagesAndWaitsOncePerStep) {
  REQUIRE_LENET_AND_DATA();
  ScopedSimDevice sim;
  const Graph model = load_onnx(testing::lenet_path());
  const int64_t S = 8;  // steps per epoch
  for (int D : {1, 2}) {
    TrainOptions o = testing::quick(D, 48, S, 200);
    o.epochs = 2;
    o.eval_batch = 100;  // evaluation batches of 100 / D on each device, accumulated there
    Trainer cpu(model, o);
    Trainer dev(model, with_devices(o, sim_replicas(D)));
    const std::string what = std::to_string(D) + " replica(s)";
    expect_same_epoch(dev.train_epoch(0), cpu.train_epoch(0), what + ", epoch 1");  // plans every shape
    const SimCounters before = sim.counters();
    const auto sd = dev.train_epoch(1);
    const SimCounters used = sim.counters() - before;
    expect_same_epoch(sd, cpu.train_epoch(1), what + ", epoch 2");
    expect_same_states(cpu, dev, what);

    // A whole epoch in the steady state, its evaluation included.
    EXPECT_EQ(used.allocations, 0) << what;
    // Per step and replica only the two scalar inputs (lr, loss_scale) travel, never images or labels;
    // per epoch the order once per replica; per evaluation the two accumulators' zeros on each device.
    EXPECT_EQ(used.host_to_device, 2 * S * D + D + 2 * D) << what;
    // No blocking read, no stream synchronisation: per step and replica two asynchronous copies (loss,
    // correct count) and one event wait, per evaluation and device two copies and one wait.
    EXPECT_EQ(used.device_to_host, 0) << what;
    EXPECT_EQ(used.synchronizations, 0) << what;
    EXPECT_EQ(used.async_device_to_host, 2 * S * D + 2 * D) << what;
    EXPECT_EQ(used.event_waits, S * D + D) << what;
    // Every step's figures but the last are read with the next step already enqueued.
    EXPECT_GE(used.deferred_event_waits, (S - 1) * D) << what;
  }
}

TEST(SimTrainer, EqualsCpuReplicasWithAdamNormalizationLoggingAndWithoutResidentData) {
  REQUIRE_LENET_AND_DATA();
  ScopedSimDevice sim;
  const Graph model = load_onnx(testing::lenet_path());
  TrainOptions o = testing::quick(2, 51, 6, 300);  // shards of 26 and 25
  o.train_limit = 51 * 5 + 41;                      // the last batch: 41, shards of 21 and 20
  o.pipeline.optimizer.kind = "adam";
  o.pipeline.optimizer.clip_grad_norm = 0.05f;  // --clip-grad-norm's nodes on the device too (LeNet's norm is larger)
  o.lr = 1e-3;
  o.normalize = true;
  o.norm_mean = 0.2860f;
  o.norm_std = 0.3530f;
  o.log_every = 2;
  o.eval_batch = 128;  // 300 test images: batches of 128, 128 and 44
  for (int64_t budget : {int64_t(1) << 30, int64_t(0)}) {
    const std::string what = budget ? "resident data" : "per-batch copies";
    std::ostringstream cpu_log, dev_log;
    TrainOptions oc = o, od = with_devices(o, sim_replicas(2));
    oc.log = &cpu_log;
    od.log = &dev_log;
    od.device_data_budget = budget;
    Trainer cpu(model, oc), dev(model, od);
    const SimCounters before = sim.counters();
    expect_same_epoch(dev.train_epoch(0), cpu.train_epoch(0), what);
    const SimCounters used = sim.counters() - before;
    expect_same_states(cpu, dev, what);
    EXPECT_EQ(step_lines(dev_log.str()), step_lines(cpu_log.str())) << what;
    EXPECT_FALSE(step_lines(cpu_log.str()).empty());
    const auto ec = cpu.evaluate_stats(), ed = dev.evaluate_stats();
    EXPECT_EQ(ed.accuracy, ec.accuracy) << what;
    EXPECT_EQ(ed.loss, ec.loss) << what;
    // Without resident data each step copies a shard's images and labels per replica (and the three
    // evaluation batches theirs): more than the scalars alone.
    if (!budget) {
      EXPECT_NE(dev_log.str().find("exceeds the device data budget"), std::string::npos) << dev_log.str();
      EXPECT_GE(used.host_to_device, 6 * 2 * 5) << what;  // lr, loss_scale, step, images, labels
    }
  }
}

// --loss output on the device: LeNet computing its own cross-entropy (its labels a model input, fed from the MNIST
// folder's array of that name) trains as the CPU replicas train it, bit for bit, on shards of different sizes; the
// inputs are read batch by batch (nothing resident: the model names its arrays), and the test loss is the same.
TEST(SimTrainer, AModelsOwnLossTrainsAsOnCpuReplicas) {
  REQUIRE_LENET_AND_DATA();
  ScopedSimDevice sim;
  Graph model = load_onnx(testing::lenet_path());
  model.inputs.push_back("labels");
  model.values["labels"] = ValueInfo{DType::I64, true, {Dim(std::string("N"))}};
  model.add_node(Node{"own_xent", "SoftmaxCrossEntropyLoss", "", {"logits", "labels"}, {"xent"}, {}});
  model.values["xent"] = ValueInfo{DType::F32, true, {}};
  model.outputs = {"xent"};
  TrainOptions o = testing::quick(2, 51, 4, 200);  // shards of 26 and 25
  o.pipeline.loss = autodiff::LossKind::Output;
  Trainer cpu(model, o), dev(model, with_devices(o, sim_replicas(2)));
  const runtime::EpochStats ec = cpu.train_epoch(0), ed = dev.train_epoch(0);
  expect_same_epoch(ed, ec, "own loss");
  expect_same_states(cpu, dev, "own loss");
  EXPECT_GT(ec.loss, 0.5);  // (a cross-entropy over 10 classes, early in training)
  EXPECT_EQ(ec.train_acc, 0);
  EXPECT_EQ(ed.test_loss, ec.test_loss);
  EXPECT_GT(ec.test_loss, 0.5);
}

TEST(SimTrainer, NonFiniteLossStopsAtTheStepTheCpuNames) {
  REQUIRE_LENET_AND_DATA();
  ScopedSimDevice sim;
  const Graph model = load_onnx(testing::lenet_path());
  for (bool checkpoints : {false, true}) {
    TrainOptions o = testing::quick(2, 32, 20, 200);
    o.lr = 1e6;
    if (checkpoints) {
      o.checkpoint_every = 1;
      o.keep_checkpoints = 100;
    }
    int64_t steps[2] = {0, 0};
    std::string dir[2];
    for (int dev = 0; dev < 2; ++dev) {
      TrainOptions r = dev ? with_devices(o, sim_replicas(2)) : o;
      if (checkpoints) r.checkpoint_dir = dir[dev] = testing::temp_dir(dev ? "sim_trainer_nan_dev" : "sim_trainer_nan_cpu");
      Trainer t(model, r);
      try {
        t.fit();
        ADD_FAILURE() << "a learning rate of 1e6 did not diverge";
      } catch (const runtime::DivergedError& e) {
        steps[dev] = e.step;
        EXPECT_NE(std::string(e.what()).find("step " + std::to_string(e.step)), std::string::npos) << e.what();
      }
    }
    ASSERT_GT(steps[0], 1);
    EXPECT_EQ(steps[1], steps[0]) << (checkpoints ? "with" : "without") << " checkpoints";
    if (checkpoints) {
      const std::string last = runtime::latest_checkpoint(dir[1]);
      ASSERT_FALSE(last.empty());
      EXPECT_EQ(runtime::load_checkpoint(last).meta.at("global_step"), std::to_string(steps[1] - 1));
    }
  }
}

// A stop on request (runtime/interrupt.h: Ctrl-C) on device replicas, whose host threads run a step
// ahead of the device: they stop at the step two CPU replicas stop at, and the checkpoint resumes on the
// device to bitwise the states of the uninterrupted CPU run.
TEST(SimTrainer, AStopOnRequestStopsWhereCpuReplicasStopAndResumes) {
  REQUIRE_LENET_AND_DATA();
  ScopedSimDevice sim;
  const Graph model = load_onnx(testing::lenet_path());
  TrainOptions o = testing::quick(2, 32, 8, 200);
  o.epochs = 2;
  o.keep_checkpoints = 10;
  const auto full = testing::states_after_fit(model, o);
  TrainOptions dev = with_devices(o, sim_replicas(2));
  dev.checkpoint_dir = testing::temp_dir("sim_trainer_stop");
  runtime::interrupt::request(SIGINT);
  int64_t step = -1;
  try {
    Trainer(model, dev).fit();
  } catch (const runtime::InterruptedError& e) {
    step = e.step;
  }
  runtime::interrupt::clear();
  EXPECT_EQ(step, 2);
  EXPECT_EQ(testing::expect_resume_ends_with(model, dev, full), 16);
}

// A float64 model (train --float64) hands the host its loss through the Cast to f32 that the training
// graph appends (passes::append_step_figures), so HostReadback reads f32 on the device as on the CPU:
// two device replicas train it bit for bit as two CPU replicas do, and read back the same figures.
// (The simulated AllReduce sums f64 for it; the CUDA backend's NCCL AllReduce is f32 only.)
TEST(SimTrainer, Float64ModelReadsItsLossThroughACastNodeAndEqualsCpuReplicas) {
  REQUIRE_LENET_AND_DATA();
  ScopedSimDevice sim;
  const Graph model = float64_copy(load_onnx(testing::lenet_path()));
  TrainOptions o = testing::quick(2, 30, 4, 100);  // shards of 15
  o.lr = 0.1;
  Trainer cpu(model, o), dev(model, with_devices(o, sim_replicas(2)));
  const SimCounters before = sim.counters();
  const auto sd = dev.train_epoch(0);
  const SimCounters used = sim.counters() - before;
  const auto sc = cpu.train_epoch(0);
  expect_same_epoch(sd, sc, "float64");
  EXPECT_TRUE(std::isfinite(sc.loss) && sc.loss > 0) << sc.loss;
  expect_same_states(cpu, dev, "float64");
  bool f64_weights = false;
  for (const auto& [name, v] : dev.replica(0).states()) f64_weights |= v.dtype() == DType::F64;
  EXPECT_TRUE(f64_weights);
  // Per step and replica two asynchronous f32 copies (loss, correct count), plus the evaluation's two
  // on each device.
  EXPECT_EQ(used.async_device_to_host, 2 * 4 * 2 + 2 * 2);
  for (Trainer* t : {&cpu, &dev}) {
    const Graph& g = t->replica(0).graph();
    const auto cast = std::find_if(g.nodes.begin(), g.nodes.end(), [](const Node& n) {
      return n.op_type == "Cast" && n.outputs[0].rfind("graphrun.loss_f32", 0) == 0;
    });
    ASSERT_NE(cast, g.nodes.end()) << "no Cast of the loss to f32 in the replica graph";
    EXPECT_EQ(cast->attr_i("to", 0), static_cast<int64_t>(DType::F32));
    const ValueInfo* in = g.info(cast->inputs[0]);
    ASSERT_NE(in, nullptr);
    EXPECT_EQ(in->dtype, DType::F64);
  }
  EXPECT_EQ(dev.evaluate_stats().loss, cpu.evaluate_stats().loss);
}

// The model as loaded is not held beside the device's copy: once set up, the host holds no copy of the
// weights (the trained model is read back from replica 0), and evaluation on replica 0's device reads
// that replica's tensors instead of a copy of its own.
TEST(SimTrainer, HoldsTheModelOnceOnTheDeviceAndNotOnTheHost) {
  REQUIRE_LENET_AND_DATA();
  ScopedSimDevice sim;
  TrainOptions o = testing::quick(1, 32, 3, 100);
  o.pipeline.optimizer.momentum = 0.9f;
  Graph model = load_onnx(testing::lenet_path());
  std::vector<Tensor> loaded;
  size_t params = 0;
  for (const auto& [_, t] : model.initializers)
    if (t.dtype() == DType::F32) {
      loaded.push_back(t);
      params += t.nbytes();
    }
  ASSERT_GT(params, size_t(128) << 10);
  Trainer cpu(load_onnx(testing::lenet_path()), o);
  TrainOptions od = with_devices(o, sim_replicas(1));
  od.device_data_budget = 0;  // the data stays on the host: the device holds the model alone
  Trainer dev(std::move(model), od);
  for (const Tensor& w : loaded) EXPECT_TRUE(w.sole_owner()) << "the host still holds a weight as loaded";
  size_t states = 0;
  for (const auto& [_, t] : dev.replica(0).states()) states += t.nbytes();
  EXPECT_GE(states, 2 * params);  // parameters and momentum
  // Replica 0's tensors and the evaluation's few totals, not a second copy of the parameters.
  EXPECT_LE(sim.backend().bytes_in_use(), states + (size_t(64) << 10));
  expect_same_epoch(dev.train_epoch(0), cpu.train_epoch(0), "one epoch");
  const Graph a = dev.trained_model(), b = cpu.trained_model();
  ASSERT_EQ(a.initializers.size(), b.initializers.size());
  for (const auto& [name, t] : b.initializers) {
    ASSERT_TRUE(a.initializers.count(name)) << name;
    const Tensor& got = a.initializers.at(name);
    ASSERT_TRUE(got.device().is_cpu()) << name;
    EXPECT_EQ(testing::max_abs_diff(got, t), 0) << name;
  }
}

// Replicas whose tensors cannot fit on their device are refused before anything is allocated there,
// with one line naming the device; a device just as large as the run needs is not refused.
TEST(SimTrainer, ReplicasThatCannotFitOnTheirDeviceAreRefusedUpFront) {
  REQUIRE_LENET_AND_DATA();
  const Graph model = load_onnx(testing::lenet_path());
  // One replica (its allocations come in one order): a device of the size the run took serves it again.
  const TrainOptions one = with_devices(testing::quick(1, 32, 2, 100), sim_replicas(1));
  size_t peak = 0;
  {
    ScopedSimDevice sim;
    Trainer t(model, one);
    t.train_epoch(0);
    peak = sim.backend().high_water();
  }
  {
    ScopedSimDevice sim(1, peak);
    Trainer t(model, one);
    EXPECT_NO_THROW(t.train_epoch(0));
  }
  const TrainOptions o = with_devices(testing::quick(2, 32, 2, 100), sim_replicas(2));
  ScopedSimDevice sim(1, size_t(256) << 10);
  std::string msg;
  try {
    Trainer t(model, o);
  } catch (const std::exception& e) {
    msg = e.what();
  }
  for (const char* want : {"training 'lenet' needs at least", "of memory on cuda:0 (2 replicas there", "is free there",
                           "put fewer replicas on it"})
    EXPECT_NE(msg.find(want), std::string::npos) << want << " in: " << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  EXPECT_EQ(sim.counters().allocations, 0);
}

// A batch whose activations cannot fit in what a GPU has left after the replicas' tensors stops before
// any kernel runs, counted from the values' shapes, with one line naming --batch-size and the device (it
// used to fail allocating partway through the first step). A batch that fits still trains there.
TEST(SimTrainer, ABatchTooLargeForTheDeviceStopsBeforeAnyKernel) {
  REQUIRE_LENET_AND_DATA();
  const Graph model = load_onnx(testing::lenet_path());
  TrainOptions big = with_devices(testing::quick(2, 2048, 1, 100), sim_replicas(2));
  big.device_data_budget = 0;  // batches come from the host: every kernel of the step is the replicas'
  ScopedSimDevice sim(1, size_t(96) << 20);
  std::string msg;
  int64_t before_the_step = -1;
  try {
    Trainer t(model, big);
    before_the_step = sim.counters().kernels;  // (setup ran some: the optimizer's zero fills, the broadcast)
    t.train_epoch(0);
  } catch (const std::exception& e) {
    msg = e.what();
  }
  for (const char* want : {"the first run needs more than", "by the shapes of its values, counted before it runs; by that count at most ",
                           " of its 1024 along 'N' could fit); "
                           "lower --batch-size (2048 over 2 replicas; cuda:0 had", "free for the activations of its 2)"})
    EXPECT_NE(msg.find(want), std::string::npos) << want << " in: " << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  EXPECT_EQ(sim.counters().kernels, before_the_step) << msg;
  const TrainOptions fits = with_devices(testing::quick(2, 64, 2, 100), sim_replicas(2));
  Trainer t(model, fits);
  EXPECT_NO_THROW(t.train_epoch(0));
}

// The evaluation after an epoch runs beside the replicas on the device: where its batch would not fit in
// what the device has left, it evaluates in smaller batches, sized by its own count from the values'
// shapes, and says so once, with the same figures as on a device with room (it used to run the device
// out of memory after the epoch). The simulated device gives its cached blocks back when it runs out, as
// the CUDA backend's caching allocator does.
TEST(SimTrainer, EvaluationShrinksItsBatchToWhatTheDeviceLeaves) {
  REQUIRE_LENET_AND_DATA();
  const Graph model = load_onnx(testing::lenet_path());
  for (int replicas : {1, 2}) {
    TrainOptions o = with_devices(testing::quick(replicas, 32, 2, 2048), sim_replicas(replicas));
    o.eval_batch = 2048;
    o.device_data_budget = 0;
    const auto run = [&](size_t pool, std::string* log) {
      ScopedSimDevice sim(1, pool);
      std::ostringstream out;
      TrainOptions with_log = o;
      with_log.log = &out;
      Trainer t(model, with_log);
      const runtime::EpochStats e = t.train_epoch(0);
      *log = out.str();
      return e;
    };
    const std::string what = std::to_string(replicas) + " replica(s)";
    std::string tight, ample;
    // 40 MiB: the replicas' tensors and arenas take a few; the evaluation of 2048 examples needs over 100.
    const runtime::EpochStats small = run(size_t(40) << 20, &tight);
    const runtime::EpochStats large = run(size_t(4) << 30, &ample);
    EXPECT_NE(tight.find(", not 2048: the memory cuda:0 has left beside the training ("), std::string::npos)
        << what << ": " << tight;
    EXPECT_EQ(tight.find("out of simulated device memory"), std::string::npos) << what << ": " << tight;
    EXPECT_EQ(ample.find("evaluating in batches"), std::string::npos) << what << ": " << ample;
    expect_same_epoch(small, large, what + ": 40 MiB against 4 GiB");
  }
}

// Where the count from the shapes lets a batch through that the device cannot serve after all (scratch,
// a library's workspace), the evaluation's first run at it runs out of memory: the part halves its batch
// and starts again from a clean plan, says so once with the line it ran into, and keeps that batch for
// the next evaluation. The figures are those of a device with room.
TEST(SimTrainer, EvaluationThatRunsOutOfDeviceMemoryHalvesItsBatch) {
  REQUIRE_LENET_AND_DATA();
  const Graph model = load_onnx(testing::lenet_path());
  TrainOptions o = with_devices(testing::quick(2, 32, 2, 2048), sim_replicas(2));
  o.eval_batch = 1024;
  o.device_data_budget = 0;
  std::ostringstream out;
  o.log = &out;
  runtime::EpochStats want;
  {
    ScopedSimDevice sim(1, size_t(4) << 30);
    Trainer t(model, o);
    want = t.train_epoch(0);
  }
  EXPECT_EQ(out.str().find("evaluating in batches"), std::string::npos) << out.str();
  out.str("");
  ScopedSimDevice sim(1, size_t(4) << 30);
  Trainer t(model, o);
  // Per example, the first convolution's output is 18.4 KiB, its scratch more: 1024 and 512 do not fit.
  sim.backend().fail_allocations_over(size_t(16) << 20);
  expect_same_epoch(t.train_epoch(0), want, "allocations of at most 16 MiB against none");
  const std::string first = out.str();
  for (const char* w : {"evaluating in batches of 512, not 1024: node '", "out of simulated device memory allocating "})
    EXPECT_NE(first.find(w), std::string::npos) << w << " in: " << first;
  EXPECT_EQ(first.find("evaluating in batches"), first.rfind("evaluating in batches")) << "said once: " << first;
  out.str("");
  const runtime::EpochStats again = t.train_epoch(1);
  EXPECT_EQ(out.str().find("evaluating in batches"), std::string::npos) << out.str();
  EXPECT_GT(again.test_acc, 0);
}

}  // namespace
}  // namespace graphrun

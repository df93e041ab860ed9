// The executor's and the trainer's device paths on the simulated CUDA device (tests/sim_backend.h):
// the LeNet training step equals the CPU executor's, fetched values copy back, the steady state
// allocates nothing, the Trainer on cuda:0 and cuda:0,cuda:0 equals cpu:1 and cpu:2, checkpoints.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include "autodiff/autodiff.h"
#include "graph/onnx_io.h"
#include "graph/op_table.h"
#include "graph/passes/place_shape_computations.h"
#include "graph/tensor_io.h"
#include "runtime/device.h"
#include "runtime/executor.h"
#include "runtime/trainer.h"
#include "tests/sim_backend.h"
#include "tests/test_util.h"
#include "tests/trainer_test_util.h"

namespace graphrun {
namespace {

using runtime::Executor;
using runtime::TrainOptions;
using runtime::Trainer;
using testing::ScopedSimDevice;
using testing::SimCounters;

const Device kSim{Device::Kind::CUDA, 0};

// ---- The simulated device itself ----

TEST(SimDevice, InstallsAsCudaAndCopiesRoundTrip) {
  std::string why;
  {
    ScopedSimDevice sim;
    EXPECT_TRUE(runtime::cuda_available(&why)) << why;
    EXPECT_EQ(runtime::backend_for(Device::Kind::CUDA), &sim.backend());
    Tensor h = testing::random_tensor({3, 5}, 1);
    Tensor d = runtime::to_device(h, kSim);
    EXPECT_EQ(d.device(), kSim);
    EXPECT_TRUE(sim.backend().is_device_memory(d.raw()));
    EXPECT_EQ(testing::max_abs_diff(runtime::to_host(d), h), 0);
    EXPECT_EQ(sim.counters().host_to_device, 1);
    EXPECT_EQ(sim.counters().device_to_host, 1);
    EXPECT_EQ(sim.counters().allocations, 1);
  }
  // Uninstalled: cuda:0 is what this build says again.
  EXPECT_EQ(dynamic_cast<testing::SimBackend*>(runtime::backend_for(Device::Kind::CUDA)), nullptr);
  EXPECT_EQ(runtime::cuda_available(&why), runtime::builtin_cuda_available(nullptr));
}

TEST(SimDeviceDeathTest, HostCodeTouchingDeviceMemorySegfaults) {
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  EXPECT_DEATH(
      {
        ScopedSimDevice sim;
        Tensor d = runtime::to_device(testing::random_tensor({4}, 1), kSim);
        volatile float x = static_cast<const float*>(d.raw())[0];  // a host read of device memory
        (void)x;
      },
      "");
}

// ---- The executor on the device: LeNet's training graph (forward, loss, backward, optimizer) ----

struct Batch {
  Tensor image, labels;
};
Batch random_batch(int64_t n, uint64_t seed) {
  return {testing::random_tensor({n, 1, 28, 28}, seed, 0.f, 1.f), testing::random_int_tensor({n}, seed + 1, 0, 10)};
}

runtime::TrainingGraphs lenet_training(const std::vector<Device>& devices, float momentum) {
  runtime::PipelineOptions po;
  po.devices = devices;
  po.optimizer.momentum = momentum;
  return runtime::build_training_graphs(load_onnx(testing::lenet_path()), po);
}

std::map<std::string, Tensor> step_inputs(const runtime::TrainingGraphs& tg, const Graph& g, const Batch& b, int64_t step) {
  std::map<std::string, Tensor> in{{tg.image, b.image},
                                   {tg.labels, b.labels},
                                   {tg.loss_scale, Tensor::scalar<float>(1.f)},
                                   {"lr", Tensor::scalar<float>(0.05f)}};
  if (g.is_input("step")) in["step"] = Tensor::scalar<int64_t>(step);
  return in;
}

// How many inputs of g's nodes `table` reads on the host.
int64_t host_read_inputs(const Graph& g, const runtime::KernelTable& table) {
  int64_t r = 0;
  for (const Node& n : g.nodes)
    for (int i : table.host_inputs(n.op_key())) r += n.has_input(static_cast<size_t>(i));
  return r;
}

TEST(SimDevice, LeNetTrainingStepsEqualTheCpuExecutor) {
  if (!std::filesystem::exists(testing::lenet_path())) GTEST_SKIP() << "models/lenet.onnx is missing";
  ScopedSimDevice sim;
  for (float momentum : {0.f, 0.9f}) {
    runtime::TrainingGraphs tg = lenet_training({kSim}, momentum);
    const runtime::DeviceGraph& dg = tg.replicas[0];
    runtime::ExecOptions co;
    co.fetch = {tg.loss, tg.logits};
    co.state_updates = dg.state_updates;
    runtime::ExecOptions so = co;
    so.device = kSim;
    Executor cpu(dg.graph, co);
    Executor dev(dg.graph, so);
    for (const auto& [name, t] : dev.states()) EXPECT_EQ(t.device(), kSim) << name;
    EXPECT_GE(host_read_inputs(dg.graph, sim.backend().kernels()), 4);  // 2 Pads, a Reshape, ReduceSums...

    SimCounters after_planning;
    for (int step = 0; step < 4; ++step) {
      const Batch b = random_batch(step == 3 ? 16 : 32, 10 + step);  // the last step: a second plan
      if (step == 1) after_planning = sim.counters();
      const SimCounters before = sim.counters();
      auto want = cpu.run(step_inputs(tg, dg.graph, b, step));
      auto got = dev.run(step_inputs(tg, dg.graph, b, step));
      const SimCounters used = sim.counters() - before;
      for (const std::string& f : {tg.loss, tg.logits}) {
        ASSERT_EQ(got.at(f).device(), kSim) << f;
        EXPECT_EQ(testing::max_abs_diff(runtime::to_host(got.at(f)), want.at(f)), 0)
            << f << " at step " << step << ", momentum " << momentum;
      }
      if (step == 1)
        std::cout << "LeNet training step on sim cuda:0 (momentum " << momentum << "): " << used.kernels
                  << " device kernels, " << used.host_read_inputs << " host-read inputs, "
                  << used.host_reads_of_device_values << " of them device values, " << used.allocations
                  << " allocations, " << used.host_to_device << " host->device copies\n";
      if (step == 1 || step == 2) {
        EXPECT_EQ(used.allocations, 0) << "step " << step << ": the steady state allocates nothing";
        EXPECT_EQ(used.host_to_device, static_cast<int64_t>(dg.graph.inputs.size())) << "step " << step;
        EXPECT_EQ(used.device_to_host, 0) << "step " << step << ": fetched values stay on the device";
        // Shapes, pads and axes (Reshape, Pad, ReduceSum, SumToShape...) are host values: no copy back, no wait.
        // (The two Pads' pads and the forward Reshape's shape at least; host-placed nodes such as the
        // Unsqueezes of the shape chain run with the CPU kernels, not on the device.)
        EXPECT_GE(used.host_read_inputs, 3) << "step " << step;
        EXPECT_EQ(used.host_reads_of_device_values, 0) << "step " << step;
        EXPECT_EQ(used.synchronizations, 0) << "step " << step;
      }
    }
    EXPECT_GT(sim.counters().kernels - after_planning.kernels, 0);
    for (const auto& [name, t] : cpu.states())
      EXPECT_EQ(testing::max_abs_diff(runtime::to_host(dev.state(name)), t), 0) << name << ", momentum " << momentum;
    EXPECT_GT(testing::max_abs_diff(cpu.state("conv1.weight"), dg.graph.initializers.at("conv1.weight")), 0);

    // set_state from the host and from another device tensor.
    Tensor w = testing::random_tensor(cpu.state("fc1.weight").shape(), 3);
    dev.set_state("fc1.weight", w);
    EXPECT_EQ(testing::max_abs_diff(runtime::to_host(dev.state("fc1.weight")), w), 0);
    dev.set_state("fc1.weight", runtime::to_device(cpu.state("fc1.weight"), kSim));
    EXPECT_EQ(testing::max_abs_diff(runtime::to_host(dev.state("fc1.weight")), cpu.state("fc1.weight")), 0);
  }
}

// A PyTorch-style shape chain built by hand: Shape -> Gather -> Unsqueeze -> Concat -> Reshape, an
// int initializer as a Reshape shape and a ReduceSum's axes, an int initializer used as Gather
// indices of data (a device value), and a shape that also feeds data (so it must live on the device).
Graph shape_chain_graph() {
  Graph g;
  g.name = "shape_chain";
  g.opsets[""] = 17;
  g.inputs = {"x"};
  g.values["x"].dtype = DType::F32;
  auto i64 = [](std::vector<int64_t> v, Shape s) { return Tensor::from_vector<int64_t>(std::move(s), v); };
  g.initializers["zero"] = i64({0}, {});
  g.initializers["axes0"] = i64({0}, {1});
  g.initializers["minus1"] = i64({-1}, {1});
  g.initializers["shape_2d"] = i64({-1, 12}, {2});
  g.initializers["rows"] = i64({1, 0}, {2});  // Gather indices into data: the device needs it
  g.initializers["scale"] = Tensor::from_vector<float>({}, {0.5f});
  auto node = [&](const std::string& op, std::vector<std::string> in, std::string out,
                  std::map<std::string, Attribute> attrs = {}) {
    Node n;
    n.name = out + "_node";
    n.op_type = op;
    n.inputs = std::move(in);
    n.outputs = {std::move(out)};
    n.attrs = std::move(attrs);
    g.nodes.push_back(n);
  };
  node("Mul", {"x", "scale"}, "xs");
  node("Shape", {"xs"}, "shape");
  node("Gather", {"shape", "zero"}, "batch", {{"axis", Attribute::Int(0)}});
  node("Unsqueeze", {"batch", "axes0"}, "batch1");
  node("Concat", {"batch1", "minus1"}, "flat_shape", {{"axis", Attribute::Int(0)}});
  node("Reshape", {"xs", "flat_shape"}, "flat");              // [N, 12]
  node("Reshape", {"xs", "shape_2d"}, "flat2");               // the same, from an initializer
  node("Gather", {"flat2", "rows"}, "picked", {{"axis", Attribute::Int(0)}});
  node("ReduceSum", {"flat", "axes0"}, "colsum", {{"keepdims", Attribute::Int(0)}});
  node("Shape", {"x"}, "x_shape");                            // feeds a Reshape and a float computation
  node("Reshape", {"flat", "x_shape"}, "back");
  node("Cast", {"x_shape"}, "x_shape_f", {{"to", Attribute::Int(static_cast<int64_t>(DType::F32))}});
  node("ReduceSum", {"x_shape_f"}, "numel_ish", {{"keepdims", Attribute::Int(0)}});
  g.outputs = {"flat", "picked", "colsum", "back", "numel_ish"};
  return g;
}

TEST(SimDevice, ShapeComputationsRunOnTheHost) {
  ScopedSimDevice sim;
  Graph g = shape_chain_graph();
  runtime::ExecOptions so;
  so.device = kSim;
  Executor cpu(g);
  Executor dev(g, so);
  // Shape-only int initializers stay on the host; the Gather indices of data go to the device.
  for (const char* name : {"zero", "axes0", "minus1", "shape_2d"}) EXPECT_TRUE(dev.state(name).device().is_cpu()) << name;
  EXPECT_EQ(dev.state("rows").device(), kSim);
  EXPECT_EQ(dev.state("scale").device(), kSim);
  for (int step = 0; step < 3; ++step) {
    Tensor x = testing::random_tensor({step == 2 ? 5 : 2, 3, 4}, 20 + step);
    const SimCounters before = sim.counters();
    auto want = cpu.run({{"x", x}});
    auto got = dev.run({{"x", x}});
    const SimCounters used = sim.counters() - before;
    for (const auto& [name, t] : want) {
      EXPECT_EQ(got.at(name).device(), kSim) << name;
      EXPECT_EQ(testing::max_abs_diff(runtime::to_host(got.at(name)), t), 0) << name << ", step " << step;
    }
    // Host reads: the shapes of three Reshapes and a ReduceSum's axes; only x_shape, which a device
    // Cast also reads, is a device value there.
    EXPECT_EQ(used.host_read_inputs, 4) << "step " << step;
    EXPECT_EQ(used.host_reads_of_device_values, 1) << "step " << step;
    if (step == 1) {
      EXPECT_EQ(used.allocations, 0);
    }
  }
}

// The gradient of a ScatterElements whose updates collide (torch's scatter_add below opset 16): the
// last-writer mask is built at run time from the op itself (Range and Size on the host, the scatter,
// gathers, Equal and Where on the device) and gives the CPU's gradients exactly.
TEST(SimDevice, CollidingScatterGradientEqualsTheCpu) {
  ScopedSimDevice sim;
  Graph g;
  g.name = "scatter_grad";
  g.opsets[""] = 13;
  g.inputs = {"x"};
  g.values["x"] = ValueInfo{DType::F32, true, {Dim(2), Dim(3)}};
  g.initializers["w"] = testing::random_tensor({2, 3}, 61);
  g.initializers["d"] = testing::random_tensor({2, 4}, 62);
  g.initializers["r"] = testing::random_tensor({2, 4}, 63);
  g.initializers["idx"] = Tensor::from_vector<int64_t>({2, 3}, {0, 3, 3, 1, 1, -3});
  auto add = [&](const std::string& op, std::vector<std::string> in, std::string out,
                 std::map<std::string, Attribute> attrs = {}) {
    g.nodes.push_back(Node{out + "_node", op, "", std::move(in), {out}, std::move(attrs)});
  };
  add("Mul", {"x", "w"}, "u");
  add("Identity", {"idx"}, "idx_run");  // not a constant the rule can read: the mask is built
  add("ScatterElements", {"d", "idx_run", "u"}, "y", {{"axis", Attribute::Int(1)}});
  add("Mul", {"y", "r"}, "yr");
  add("ReduceSum", {"yr"}, "loss", {{"keepdims", Attribute::Int(0)}});
  g.outputs = {"loss"};
  Graph bg = autodiff::backward(g);
  int equal = 0;
  for (const Node& n : bg.nodes) equal += n.op_type == "Equal";
  EXPECT_EQ(equal, 1);
  runtime::ExecOptions so;
  so.device = kSim;
  Executor cpu(bg), dev(bg, so);
  const Tensor x = testing::random_tensor({2, 3}, 64);
  auto want = cpu.run({{"x", x}});
  auto got = dev.run({{"x", x}});
  for (const char* grad : {"w_grad", "d_grad"}) {
    ASSERT_TRUE(want.count(grad)) << grad;
    EXPECT_EQ(testing::max_abs_diff(runtime::to_host(got.at(grad)), want.at(grad)), 0) << grad;
  }
  // Row 0: targets 0, 3, 3; only the second 3 wins: u's column 1 gets no gradient. Row 1: all three hit 1.
  const Tensor dw = want.at("w_grad");
  const float* v = dw.data<float>();
  EXPECT_EQ(v[1], 0.f);
  EXPECT_NE(v[2], 0.f);
  EXPECT_EQ(v[3], 0.f);
  EXPECT_EQ(v[4], 0.f);
  EXPECT_NE(v[5], 0.f);
}

// Training graphs of models users export, on the simulated device: every node of the forward and backward
// graph has a CUDA kernel or is a shape computation the host runs (no "unsupported op" when the executor
// plans), and the step gives the CPU's gradients bit for bit (the simulated device runs the CPU kernels:
// this proves the device path, not the CUDA code). MobileNet V2's ReLU6 is Clip (its gradient And, Less,
// Greater, Where), ViT's GELU Erf, ShuffleNet V2's channel split Split,
// MobileNet V3's HardSwish and HardSigmoid, a UNet's Resize and InstanceNormalization, LocalResponseNorm's padding
// through ConstantOfShape, a transformer's masks, an LSTM, a spatial transformer's GridSample, a flow's Det, a
// DCGAN-style decoder's ConvTranspose and LeakyRelu, a vanilla RNN, and pooling heads of TopK, CumSum, Trilu
// and boolean indexing (NonZero + GatherND, whose gradient is GatherNDGrad), nn.EmbeddingBag's loop computed without
// it, torch.jit.script's loops and list unrolled, torchvision's roi_pool (MaxRoiPool and its gradient).
// The training graph `bg` on the simulated device gives the CPU executor's outputs bitwise, and each of its nodes has a
// CUDA kernel or runs on the host (its shape computations).
void expect_device_equals_cpu(const Graph& bg, const std::map<std::string, Tensor>& feeds) {
  // The simulated device runs every op with the CPU's kernels; a GPU runs what has a CUDA kernel, and the
  // shape computations the executor keeps on the host. (A build without CUDA registers none: not checked.)
  bool cuda_kernels_registered = false;
  for (const auto& [key, f] : op_table().ops())
    cuda_kernels_registered = cuda_kernels_registered || f.kernel(Device::Kind::CUDA);
  if (cuda_kernels_registered) {
    std::set<std::string> pinned(bg.outputs.begin(), bg.outputs.end());
    for (const auto& [init, t] : bg.initializers) pinned.insert(init);
    const passes::HostPlacement host = passes::place_shape_computations(bg, pinned);
    std::set<std::string> missing;
    for (size_t i = 0; i < bg.nodes.size(); ++i) {
      const OpFacts* f = op_table().find(bg.nodes[i]);
      if (!host.host_nodes[i] && (!f || !f->kernel(Device::Kind::CUDA))) missing.insert(bg.nodes[i].op_key());
    }
    std::string list;
    for (const auto& op : missing) list += " " + op;
    EXPECT_TRUE(missing.empty()) << "no CUDA kernel for:" << list;
  }
  runtime::ExecOptions so;
  so.device = kSim;
  Executor cpu(bg);
  std::unique_ptr<Executor> dev;
  try {
    dev = std::make_unique<Executor>(bg, so);
  } catch (const Error& e) {
    ADD_FAILURE() << e.what();
    return;
  }
  auto want = cpu.run(feeds);
  auto got = dev->run(feeds);
  int compared = 0;
  for (const auto& [out, t] : want) {
    EXPECT_EQ(testing::max_abs_diff(runtime::to_host(got.at(out)), t), 0) << out;
    ++compared;
  }
  EXPECT_GT(compared, 3);
}

TEST(SimDevice, TorchvisionTrainingGraphsRunOnTheDeviceAsOnTheCpu) {
  if (testing::run_command(testing::python() + " -c 'import torchvision' 2>&1").exit_code != 0)
    GTEST_SKIP() << testing::python() << " lacks torchvision";
  ScopedSimDevice sim;
  for (const auto& [name, size] : std::vector<std::pair<std::string, int>>{{"mobilenet_v2", 32},
                                                                           {"mobilenet_v3_small", 32},
                                                                           {"vit", 32},
                                                                           {"shufflenet", 64},
                                                                           {"unet", 32},
                                                                           {"lrn", 16},
                                                                           {"text", 12},
                                                                           {"text_causal", 12},
                                                                           {"lstm", 8},
                                                                           {"rnn", 8},
                                                                           {"stn", 16},
                                                                           {"glow", 16},
                                                                           {"upsampling", 16},
                                                                           {"pooling_heads", 16},
                                                                           {"bag", 12},
                                                                           {"scripted_loops", 8},
                                                                           {"roi_pool", 16}}) {
    SCOPED_TRACE(name);
    const std::string dir = testing::temp_dir("sim_zoo_" + name);
    auto py = testing::run_command(testing::python() + " " + testing::source_dir() + "/tests/zoo_parity.py " + name +
                                   " " + dir + " --opset 17 --size " + std::to_string(size) + " --batch 2 2>&1");
    ASSERT_EQ(py.exit_code, 0) << py.output;
    Graph bg = autodiff::backward(autodiff::attach_loss(load_onnx(dir + "/train.onnx")));
    // The model's one input: an image, or token ids (the text classifiers).
    const std::string input = std::ifstream(dir + "/tokens.npy").good() ? "tokens" : "image";
    expect_device_equals_cpu(
        bg, {{input, read_npy(dir + "/" + input + ".npy")}, {"labels", read_npy(dir + "/labels.npy")}});
  }
}

// The training graph of a physics-informed network (tests/pinn_model.py): ONNX's Gradient op twice in the model, and
// the backward pass through the gradient nodes it became.
TEST(SimDevice, GradientOpTrainingGraphRunsOnTheDeviceAsOnTheCpu) {
  ScopedSimDevice sim;
  const std::string dir = testing::temp_dir("sim_pinn");
  auto py =
      testing::run_command(testing::python() + " " + testing::source_dir() + "/tests/pinn_model.py " + dir + " 2>&1");
  ASSERT_EQ(py.exit_code, 0) << py.output;
  autodiff::LossOptions lo;
  lo.kind = autodiff::LossKind::MSE;
  lo.output = "residual";
  Graph bg = autodiff::backward(autodiff::attach_loss(load_onnx(dir + "/pinn.onnx"), lo));
  const Tensor x = read_npy(dir + "/xt.npy");
  Tensor labels(DType::F32, {x.dim(0), 2});
  std::fill(labels.data<float>(), labels.data<float>() + labels.numel(), 0.5f);
  expect_device_equals_cpu(bg, {{"x", x}, {"labels", labels}});
}

// ---- The trainer on the device ----

std::map<std::string, Tensor> states_of(Trainer& t) {
  std::map<std::string, Tensor> r;
  for (int d = 0; d < t.replicas(); ++d)
    for (const auto& [name, v] : t.replica(d).states()) r["r" + std::to_string(d) + "/" + name] = runtime::to_host(v);
  return r;
}

void expect_same_states(Trainer& a, Trainer& b, const std::string& what) {
  auto sa = states_of(a), sb = states_of(b);
  ASSERT_EQ(sa.size(), sb.size()) << what;
  for (const auto& [name, v] : sa) EXPECT_EQ(testing::max_abs_diff(sb.at(name), v), 0) << what << ": " << name;
}

TrainOptions on(TrainOptions o, const std::vector<Device>& devices) {
  o.pipeline.devices = devices;
  return o;
}

// A replica that fails must not leave the others waiting forever in a reduction (the trainer aborts
// every device communicator of the group when one replica throws).
TEST(SimDevice, AbortWakesReplicasWaitingInAReduction) {
  ScopedSimDevice sim;
  auto comms = runtime::backend_for(Device::Kind::CUDA)->make_communicators({kSim, kSim, kSim});
  ASSERT_EQ(comms.size(), 3u);
  std::string errors[2];
  std::vector<std::thread> waiting;
  for (int r = 0; r < 2; ++r)
    waiting.emplace_back([&, r] {
      float x = 1.f;
      try {
        comms[r]->allreduce_sum(&x, 1);
      } catch (const Error& e) {
        errors[r] = e.what();
      }
    });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // both in the round (or about to enter it)
  comms[2]->abort();
  for (auto& t : waiting) t.join();
  for (const std::string& e : errors) EXPECT_NE(e.find("another replica failed"), std::string::npos) << e;
  EXPECT_THROW(comms[2]->barrier(), Error);  // the group stays unusable
}

TEST(SimDevice, TrainerOnCudaEqualsCpuReplicas) {
  REQUIRE_LENET_AND_DATA();
  ScopedSimDevice sim;
  Graph model = load_onnx(testing::lenet_path());
  for (int variant = 0; variant < 2; ++variant) {
    TrainOptions o = testing::quick(1, 48, 4, 200);
    o.lr = 0.1;
    if (variant == 1) {
      o.pipeline.optimizer.momentum = 0.9f;
      o.pipeline.optimizer.weight_decay = 1e-3f;
    }
    for (int D : {1, 2}) {
      Trainer cpu(model, on(o, testing::quick(D, 48, 4).pipeline.devices));
      Trainer dev(model, on(o, std::vector<Device>(D, kSim)));
      auto sc = cpu.train_epoch(0), sd = dev.train_epoch(0);
      const std::string what = std::to_string(D) + " replica(s), variant " + std::to_string(variant);
      EXPECT_EQ(sd.loss, sc.loss) << what;
      EXPECT_EQ(sd.train_acc, sc.train_acc) << what;
      EXPECT_EQ(sd.test_acc, sc.test_acc) << what;
      expect_same_states(cpu, dev, what);
      auto ec = cpu.evaluate_stats(), ed = dev.evaluate_stats();
      EXPECT_EQ(ed.accuracy, ec.accuracy) << what;
      // One metric graph on every device: the same summed cross-entropy, bit for bit.
      EXPECT_EQ(ed.loss, ec.loss) << what;
      // The saved model comes from device state.
      Graph tc = cpu.trained_model(), td = dev.trained_model();
      for (const auto& [name, t] : tc.initializers)
        EXPECT_EQ(testing::max_abs_diff(td.initializers.at(name), t), 0) << what << ": " << name;
      // Another epoch of the same shapes (training and evaluation): no device allocation, no host
      // read of a device value.
      const SimCounters before = sim.counters();
      dev.train_epoch(1);
      const SimCounters used = sim.counters() - before;
      EXPECT_EQ(used.allocations, 0) << what;
      EXPECT_EQ(used.host_reads_of_device_values, 0) << what;
      EXPECT_EQ(used.synchronizations, 0) << what;
    }
  }
}

TEST(SimDevice, TrainerCheckpointsSaveAndResumeFromTheDevice) {
  REQUIRE_LENET_AND_DATA();
  ScopedSimDevice sim;
  Graph model = load_onnx(testing::lenet_path());
  TrainOptions o = on(testing::quick(2, 32, 4, 200), {kSim, kSim});
  o.epochs = 2;
  o.lr = 0.05;
  o.pipeline.optimizer.momentum = 0.9f;
  o.checkpoint_dir = testing::temp_dir("sim_resume");
  o.checkpoint_every = 3;
  o.keep_checkpoints = 10;
  std::map<std::string, Tensor> full;
  {
    Trainer t(model, o);
    t.fit();
    full = states_of(t);
  }
  // Checkpoints at global steps 3, 4 (end of epoch 1), 6, 8 (end of 2); resume from step 6.
  namespace fs = std::filesystem;
  const std::vector<std::string> names = testing::checkpoint_files(o.checkpoint_dir);
  ASSERT_EQ(names.size(), 4u);
  fs::remove(o.checkpoint_dir + "/" + names[3]);
  TrainOptions r = o;
  r.resume = true;
  Trainer t(model, r);
  t.fit();
  auto resumed = states_of(t);
  ASSERT_EQ(resumed.size(), full.size());
  for (const auto& [name, v] : full) EXPECT_EQ(testing::max_abs_diff(resumed.at(name), v), 0) << name;
  EXPECT_EQ(t.global_step(), 8);

  // A device checkpoint restores into a CPU trainer of the same settings, and back.
  Trainer c(model, on(o, testing::quick(2, 32, 4).pipeline.devices));
  c.load_checkpoint(o.checkpoint_dir + "/" + names[2]);
  Trainer d(model, o);
  d.load_checkpoint(o.checkpoint_dir + "/" + names[2]);
  expect_same_states(c, d, "after load_checkpoint");
}

}  // namespace
}  // namespace graphrun

// The trainer a user can rely on: Adam/AdamW nodes equal torch.optim, schedules, frozen parameters,
// checkpoint/resume equivalence (bitwise), refused checkpoints, the NaN stop, --eval-only.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "graph/onnx_io.h"
#include "runtime/checkpoint.h"
#include "runtime/executor.h"
#include "runtime/replicate.h"
#include "runtime/trainer.h"
#include "tests/test_util.h"
#include "tests/trainer_test_util.h"

namespace graphrun {
namespace {

using runtime::TrainOptions;
using runtime::Trainer;
using testing::have_data;
using testing::lenet_path;
using testing::quick;


// A graph whose "gradient" of W is its input G: replicate() appends the optimizer nodes, so running
// it applies exactly the optimizer the trainer uses to gradients we choose.
Graph gradient_feed_graph(const Tensor& w) {
  Graph g;
  g.name = "feed";
  g.opsets[""] = 17;
  g.initializers["W"] = w.clone();
  ValueInfo vi;
  vi.dtype = DType::F32;
  vi.has_shape = true;
  for (int64_t d : w.shape()) vi.shape.push_back(Dim(d));
  g.values["W"] = vi;
  g.values["G"] = vi;
  g.values["W_grad"] = vi;
  g.inputs = {"G"};
  g.nodes.push_back(Node{"feed_grad", "Identity", "", {"G"}, {"W_grad"}, {}});
  g.outputs = {"W_grad"};
  return g;
}

void write_tensor(std::ostream& os, const Tensor& t) {
  os.precision(9);
  for (int64_t i = 0; i < t.numel(); ++i) os << t.data<float>()[i] << (i + 1 < t.numel() ? " " : "\n");
}

// Applies `steps` updates through replicate's optimizer nodes and through torch.optim; returns the
// largest difference of the weights after each step.
double optimizer_vs_torch(const std::string& kind, float wd, const std::string& torch_ctor) {
  const Shape shape{3, 5};
  const int steps = 6;
  Tensor w0 = testing::random_tensor(shape, 7);
  std::vector<Tensor> grads;
  std::vector<double> lrs;
  for (int s = 0; s < steps; ++s) {
    grads.push_back(testing::random_tensor(shape, 100 + s, -0.5f, 0.5f));
    lrs.push_back(0.01 * (s + 1) / steps + 0.002);  // a changing rate, as schedules feed it
  }
  runtime::ReplicateOptions ro;
  ro.params = {"W"};
  ro.optimizer.kind = kind;
  ro.optimizer.beta1 = 0.8f;
  ro.optimizer.beta2 = 0.95f;
  ro.optimizer.eps = 1e-8f;
  ro.optimizer.weight_decay = wd;
  auto reps = runtime::replicate(gradient_feed_graph(w0), ro);
  runtime::ExecOptions eo;
  eo.state_updates = reps[0].state_updates;
  eo.fetch = {};
  runtime::Executor ex(reps[0].graph, eo);

  const std::string dir = testing::temp_dir("optim_vs_torch_" + kind);
  {
    std::ofstream f(dir + "/in.txt");
    write_tensor(f, w0);
    for (int s = 0; s < steps; ++s) {
      f << lrs[s] << "\n";
      write_tensor(f, grads[s]);
    }
  }
  {
    std::ofstream py(dir + "/ref.py");
    py << "import torch\n"
          "lines = open('" << dir << "/in.txt').read().split('\\n')\n"
          "vec = lambda s: torch.tensor([float(x) for x in s.split()], dtype=torch.float32).reshape(3, 5)\n"
          "w = torch.nn.Parameter(vec(lines[0]))\n"
          "opt = " << torch_ctor << "\n"
          "out = open('" << dir << "/out.txt', 'w')\n"
          "for s in range(" << steps << "):\n"
          "    for group in opt.param_groups: group['lr'] = float(lines[1 + 2 * s])\n"
          "    w.grad = vec(lines[2 + 2 * s])\n"
          "    opt.step()\n"
          "    out.write(' '.join('%.9g' % v for v in w.detach().reshape(-1).tolist()) + '\\n')\n";
  }
  auto r = testing::run_command(testing::python() + " " + dir + "/ref.py");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::ifstream ref(dir + "/out.txt");
  double worst = 0, moved = 0;
  for (int s = 0; s < steps; ++s) {
    ex.run({{"G", grads[s]}, {"lr", Tensor::scalar<float>(float(lrs[s]))}, {"step", Tensor::scalar<int64_t>(s)}});
    const Tensor& w = ex.state("W");
    for (int64_t i = 0; i < w.numel(); ++i) {
      double v = std::nan("");
      ref >> v;
      worst = std::max(worst, std::isfinite(v) ? std::abs(v - w.data<float>()[i]) : 1e9);
      moved = std::max(moved, std::abs(double(w.data<float>()[i]) - w0.data<float>()[i]));
    }
  }
  EXPECT_GT(moved, 1e-3) << "the optimizer did not move the weights";
  return worst;
}

TEST(TrainerOptim, AdamEqualsTorchOptimAdam) {
  EXPECT_LE(optimizer_vs_torch("adam", 0.f, "torch.optim.Adam([w], lr=0.01, betas=(0.8, 0.95), eps=1e-8)"), 1e-6);
  EXPECT_LE(optimizer_vs_torch("adam", 0.05f,
                               "torch.optim.Adam([w], lr=0.01, betas=(0.8, 0.95), eps=1e-8, weight_decay=0.05)"),
            1e-6);
}

TEST(TrainerOptim, AdamWEqualsTorchOptimAdamW) {
  EXPECT_LE(optimizer_vs_torch("adamw", 0.5f,
                               "torch.optim.AdamW([w], lr=0.01, betas=(0.8, 0.95), eps=1e-8, weight_decay=0.5)"),
            1e-6);
}

TEST(TrainerOptim, AdamWGraphUsesStandardAdamAndExportsCheckerValid) {
  auto reps = [] {
    runtime::ReplicateOptions ro;
    ro.params = {"W"};
    ro.optimizer.kind = "adamw";
    ro.optimizer.weight_decay = 0.01f;
    return runtime::replicate(gradient_feed_graph(testing::random_tensor({2, 2}, 1)), ro);
  }();
  int adam = 0;
  for (const Node& n : reps[0].graph.nodes)
    if (n.op_type == "Adam" && n.domain == kTrainingDomain) {
      ++adam;
      EXPECT_EQ(n.attr_f("norm_coefficient", -1), 0.f);  // the decay is decoupled, not L2
    }
  EXPECT_EQ(adam, 1);
  const std::string path = testing::temp_dir("adamw_export") + "/adamw.onnx";
  save_onnx(reps[0].graph, path, true);
  auto r = testing::run_command(testing::python() + " -c \"import onnx; onnx.checker.check_model(onnx.load('" + path +
                                "'), full_check=True)\"");
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

TEST(TrainerOptim, GradAndShowWithDevicesCarryTheChosenOptimizer) {
  if (!std::filesystem::exists(lenet_path())) GTEST_SKIP() << "models/lenet.onnx is missing";
  const std::string out = testing::temp_dir("trainer2_grad") + "/lenet.dp.onnx";
  auto r = testing::run_command(testing::graphrun_cli() + " grad " + lenet_path() +
                                " --devices 2 --optimizer adamw --weight-decay 0.01 -o " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  Graph g = load_onnx(out);
  int adam = 0;
  for (const Node& n : g.nodes) adam += n.op_type == "Adam" && n.domain == kTrainingDomain;
  EXPECT_GE(adam, 1);
  r = testing::run_command(testing::python() + " -c \"import onnx; onnx.checker.check_model(onnx.load('" + out +
                           "'), full_check=True)\"");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  r = testing::run_command(testing::graphrun_cli() + " show " + lenet_path() + " --devices 2 --optimizer adam");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("Adam"), std::string::npos);
  r = testing::run_command(testing::graphrun_cli() + " grad " + lenet_path() + " --optimizer adam");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--optimizer needs --devices"), std::string::npos) << r.output;
}

TEST(TrainerOptim, ScheduleFeedsTheLearningRatePerStep) {
  runtime::LrSchedule s;
  s.kind = runtime::LrSchedule::Kind::Step;
  s.base_lr = 1.0;
  s.warmup_steps = 2;
  s.step_size = 3;
  s.gamma = 0.5;
  EXPECT_DOUBLE_EQ(runtime::learning_rate(s, 0), 0.5);
  EXPECT_DOUBLE_EQ(runtime::learning_rate(s, 2), 1.0);
  EXPECT_DOUBLE_EQ(runtime::learning_rate(s, 5), 0.5);
}

std::map<std::string, Tensor> params_of(Trainer& t) {
  std::map<std::string, Tensor> r;
  for (int d = 0; d < t.replicas(); ++d)
    for (const auto& [name, v] : t.replica(d).states()) r["r" + std::to_string(d) + "/" + name] = v.clone();
  return r;
}

TEST(Trainer2, FrozenParametersAreUnchangedAndNotReduced) {
  REQUIRE_LENET_AND_DATA();
  Graph model = load_onnx(lenet_path());
  TrainOptions o = quick(2, 32, 5, 200);
  o.lr = 0.05;
  o.pipeline.freeze = {"conv1.weight", "conv1.bias"};
  ASSERT_TRUE(model.initializers.count("conv1.weight"));
  Trainer t(model, o);
  for (const Node& n : t.graphs().replicas[0].graph.nodes)
    for (const auto& in : n.inputs) EXPECT_NE(in, "conv1.weight_grad") << n.name;
  t.train_epoch(0);
  for (int d = 0; d < 2; ++d) {
    EXPECT_EQ(testing::max_abs_diff(t.replica(d).state("conv1.weight"), model.initializers.at("conv1.weight")), 0);
    EXPECT_EQ(testing::max_abs_diff(t.replica(d).state("conv1.bias"), model.initializers.at("conv1.bias")), 0);
  }
  EXPECT_GT(testing::max_abs_diff(t.replica(0).state("conv2.weight"), model.initializers.at("conv2.weight")), 0);
}

// Resume equivalence: a run killed after a mid-epoch checkpoint and resumed by a new Trainer ends
// with bitwise the same state (weights, Adam moments) as the uninterrupted run, on two replicas.
TEST(Trainer2, ResumeFromCheckpointIsBitwiseTheUninterruptedRun) {
  REQUIRE_LENET_AND_DATA();
  Graph model = load_onnx(lenet_path());
  TrainOptions o = quick(2, 32, 5, 200);
  o.epochs = 2;
  o.lr = 2e-3;
  o.pipeline.optimizer.kind = "adamw";
  o.pipeline.optimizer.weight_decay = 0.01f;
  o.schedule.kind = runtime::LrSchedule::Kind::Cosine;
  o.schedule.warmup_steps = 2;
  o.checkpoint_dir = testing::temp_dir("trainer2_resume");
  o.checkpoint_every = 3;
  o.keep_checkpoints = 10;
  std::map<std::string, Tensor> full;
  {
    Trainer t(model, o);
    t.fit();
    full = params_of(t);
  }
  // Checkpoints at global steps 3 (epoch 1), 5 (end of 1), 6 (epoch 2), 9, 10 (end of 2).
  namespace fs = std::filesystem;
  const std::vector<std::string> names = testing::checkpoint_files(o.checkpoint_dir);
  ASSERT_EQ(names.size(), 5u);
  EXPECT_EQ(names[0], runtime::checkpoint_name(0, 3));
  // "Kill" after step 6: only the checkpoints up to it exist.
  for (size_t i = 3; i < names.size(); ++i) fs::remove(o.checkpoint_dir + "/" + names[i]);
  TrainOptions r = o;
  r.resume = true;
  Trainer t(model, r);
  t.fit();
  auto resumed = params_of(t);
  ASSERT_EQ(resumed.size(), full.size());
  for (const auto& [name, v] : full) EXPECT_EQ(testing::max_abs_diff(resumed.at(name), v), 0) << name;
  EXPECT_EQ(t.global_step(), 10);

  // Keep only the newest few.
  TrainOptions k = o;
  k.keep_checkpoints = 2;
  k.checkpoint_dir = testing::temp_dir("trainer2_keep");
  Trainer(model, k).fit();
  int count = 0;
  for (const auto& e : fs::directory_iterator(k.checkpoint_dir)) count += e.path().extension() == ".grck";
  EXPECT_EQ(count, 2);
}

// BatchNorm and Dropout: between the epoch-end broadcasts each replica has its own running
// statistics, and each its own dropout RNG; a mid-epoch checkpoint keeps both, so resuming is still
// bitwise the uninterrupted run. The model is written with onnx.helper at test time.
TEST(Trainer2, ResumeKeepsPerReplicaRunningStatisticsAndDropoutRng) {
  if (!have_data()) GTEST_SKIP() << "Fashion-MNIST is not installed";
  const std::string dir = testing::temp_dir("trainer2_bn_dropout");
  {
    std::ofstream py(dir + "/make.py");
    py << "import numpy as np, onnx\n"
          "from onnx import helper as h, TensorProto as T, numpy_helper as nh\n"
          "r = np.random.RandomState(0)\n"
          "f = lambda n, a: nh.from_array(a.astype(np.float32), n)\n"
          "inits = [f('conv.w', r.randn(4, 1, 3, 3) * 0.3), f('conv.b', np.zeros(4)), f('bn.scale', np.ones(4)),\n"
          "         f('bn.bias', np.zeros(4)), f('bn.mean', np.zeros(4)), f('bn.var', np.ones(4)),\n"
          "         f('fc.w', r.randn(10, 4 * 13 * 13) * 0.02), f('fc.b', np.zeros(10)),\n"
          "         f('drop.ratio', np.array(0.3))]\n"
          "nodes = [h.make_node('Conv', ['image', 'conv.w', 'conv.b'], ['c'], strides=[2, 2]),\n"
          "         h.make_node('BatchNormalization', ['c', 'bn.scale', 'bn.bias', 'bn.mean', 'bn.var'], ['n']),\n"
          "         h.make_node('Relu', ['n'], ['a']), h.make_node('Dropout', ['a', 'drop.ratio'], ['d']),\n"
          "         h.make_node('Flatten', ['d'], ['flat']), h.make_node('Gemm', ['flat', 'fc.w', 'fc.b'], ['logits'], transB=1)]\n"
          "g = h.make_graph(nodes, 'bn_dropout', [h.make_tensor_value_info('image', T.FLOAT, ['N', 1, 28, 28])],\n"
          "                 [h.make_tensor_value_info('logits', T.FLOAT, ['N', 10])], inits)\n"
          "m = h.make_model(g, opset_imports=[h.make_opsetid('', 15)])\n"
          "onnx.checker.check_model(m)\n"
          "onnx.save(m, '" << dir << "/bn_dropout.onnx')\n";
  }
  auto r = testing::run_command(testing::python() + " " + dir + "/make.py");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  Graph model = load_onnx(dir + "/bn_dropout.onnx");
  TrainOptions o = quick(2, 32, 5, 200);
  o.epochs = 2;
  o.lr = 0.05;
  o.pipeline.optimizer.momentum = 0.9f;
  o.checkpoint_dir = dir + "/ck";
  o.checkpoint_every = 3;
  o.keep_checkpoints = 10;
  std::map<std::string, Tensor> full;
  {
    Trainer t(model, o);
    t.fit();
    full = params_of(t);
  }
  // Lost: everything after the checkpoint at step 6 (mid-epoch 2, replicas' statistics differ).
  testing::remove_checkpoints_after(o.checkpoint_dir, runtime::checkpoint_name(1, 6));
  auto ck = runtime::load_checkpoint(runtime::latest_checkpoint(o.checkpoint_dir));
  EXPECT_EQ(ck.meta.at("global_step"), "6");
  EXPECT_TRUE(ck.tensors.count("replica1/bn.mean")) << "the replicas' running statistics should differ mid-epoch";
  TrainOptions re = o;
  re.resume = true;
  Trainer t(model, re);
  t.fit();
  auto resumed = params_of(t);
  ASSERT_EQ(resumed.size(), full.size());
  for (const auto& [name, v] : full) EXPECT_EQ(testing::max_abs_diff(resumed.at(name), v), 0) << name;
  EXPECT_GT(testing::max_abs_diff(full.at("r0/bn.mean"), model.initializers.at("bn.mean")), 0);
}

// The same through the command line: a run whose newest checkpoints are lost (killed after step 4)
// and resumed with --resume saves the same model, bit for bit, as an uninterrupted run.
TEST(Trainer2, CliResumeSavesTheSameModelAsAnUninterruptedRun) {
  REQUIRE_LENET_AND_DATA();
  const std::string dir = testing::temp_dir("trainer2_cli_resume");
  const std::string run = testing::graphrun_cli() + " train " + lenet_path() +
                          " --devices cpu:2 --threads 1 --batch-size 32 --max-steps 3 --epochs 2 --optimizer adam"
                          " --lr 1e-3 --lr-schedule cosine --checkpoint-every 2 --keep-checkpoints 10";
  auto r = testing::run_command(run + " --checkpoint-dir " + dir + "/ck --save " + dir + "/full.onnx");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  testing::remove_checkpoints_after(dir + "/ck", runtime::checkpoint_name(1, 4));
  ASSERT_EQ(runtime::latest_checkpoint(dir + "/ck"), dir + "/ck/" + runtime::checkpoint_name(1, 4));
  r = testing::run_command(run + " --checkpoint-dir " + dir + "/ck --resume --save " + dir + "/resumed.onnx");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("resumed from"), std::string::npos) << r.output;
  Graph a = load_onnx(dir + "/full.onnx"), b = load_onnx(dir + "/resumed.onnx");
  for (const auto& [name, t] : a.initializers) EXPECT_EQ(testing::max_abs_diff(b.initializers.at(name), t), 0) << name;
}

TEST(Trainer2, NanLossStopsNamingTheStepAndKeepsTheLastGoodCheckpoint) {
  REQUIRE_LENET_AND_DATA();
  TrainOptions o = quick(2, 32, 20, 200);
  o.lr = 1e6;
  o.checkpoint_dir = testing::temp_dir("trainer2_nan");
  o.checkpoint_every = 1;
  o.keep_checkpoints = 100;
  Trainer t(load_onnx(lenet_path()), o);
  int64_t step = 0;
  try {
    t.fit();
    FAIL() << "a learning rate of 1e6 did not diverge";
  } catch (const runtime::DivergedError& e) {
    step = e.step;
    std::string m = e.what();
    EXPECT_NE(m.find("step " + std::to_string(step)), std::string::npos) << m;
    EXPECT_NE(m.find("not finite"), std::string::npos) << m;
  }
  ASSERT_GT(step, 1);
  // The newest checkpoint is from before the bad step and loads.
  const std::string last = runtime::latest_checkpoint(o.checkpoint_dir);
  ASSERT_FALSE(last.empty());
  auto ck = runtime::load_checkpoint(last);
  EXPECT_EQ(ck.meta.at("global_step"), std::to_string(step - 1));
  for (const auto& [name, v] : ck.tensors)
    if (v.dtype() == DType::F32)
      for (int64_t i = 0; i < v.numel(); ++i) ASSERT_TRUE(std::isfinite(v.data<float>()[i])) << name;
}

TEST(Trainer2, CliRefusesCorruptAndForeignCheckpointsAndStopsOnNan) {
  REQUIRE_LENET_AND_DATA();
  const std::string simplecnn = testing::source_dir() + "/models/simplecnn.onnx";
  const std::string dir = testing::temp_dir("trainer2_cli");
  const std::string cli = testing::graphrun_cli() + " train ";
  const std::string common = " --devices cpu:1 --batch-size 32 --max-steps 2 --threads 1 --checkpoint-dir ";
  auto r = testing::run_command(cli + lenet_path() + common + dir + "/a --epochs 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string ck = runtime::latest_checkpoint(dir + "/a");
  ASSERT_FALSE(ck.empty());
  if (std::filesystem::exists(simplecnn)) {
    r = testing::run_command(cli + simplecnn + common + dir + "/a --resume --epochs 2");
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find("checkpoint of another model"), std::string::npos) << r.output;
  }
  // Flip one byte in the middle: the CRC catches it.
  {
    std::fstream f(ck, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(0, std::ios::end);
    const auto size = static_cast<std::streamoff>(f.tellg());
    f.seekg(size / 2);
    char c = 0;
    f.get(c);
    f.seekp(size / 2);
    f.put(static_cast<char>(c ^ 0x5a));
  }
  r = testing::run_command(cli + lenet_path() + common + dir + "/a --resume --epochs 2");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("corrupt"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(ck), std::string::npos) << r.output;

  r = testing::run_command(cli + lenet_path() + " --devices cpu:2 --batch-size 32 --max-steps 20 --threads 1 --lr 1e6");
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("not finite at step"), std::string::npos) << r.output;

  r = testing::run_command(cli + lenet_path() +
                           " --devices cpu:2 --batch-size 32 --max-steps 5 --threads 1 --epochs 1 --log-every 2"
                           " --optimizer adam --lr 1e-3 --lr-schedule step --lr-step-size 2 --lr-gamma 0.5"
                           " --normalize 0.1307,0.3081 --freeze conv1.weight");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (const char* line : {"step 2  epoch 1  loss ", "step 4  epoch 1  loss ", "step 5  epoch 1  loss "})
    EXPECT_NE(r.output.find(line), std::string::npos) << line << "\n" << r.output;
  EXPECT_NE(r.output.find("lr 0.00025\n"), std::string::npos) << r.output;  // step 5: 1e-3 * 0.5^2

  r = testing::run_command(cli + lenet_path() + " --eval-only --threads 1");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("test acc: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("test loss: 2.30"), std::string::npos) << r.output;  // d2l's untrained LeNet: ln 10

  for (const char* bad : {" --optimizer rmsprop", " --optimizer adam --momentum 0.9", " --beta1 0.9",
                          " --lr-schedule step", " --normalize 0.1", " --normalize 0.1,0", " --resume",
                          " --checkpoint-every 5", " --lr-schedule wavy"}) {
    r = testing::run_command(cli + lenet_path() + bad);
    EXPECT_EQ(r.exit_code, 2) << bad << "\n" << r.output;
  }
}

}  // namespace
}  // namespace graphrun

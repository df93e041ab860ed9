// The optimizer nodes replicate() appends: Adam and AdamW equal torch.optim, AdamW's graph is standard
// ONNX, grad/show --devices carry the chosen optimizer, schedules feed the rate per step, bad flags.
#include <gtest/gtest.h>

#include <tuple>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "graph/onnx_io.h"
#include "runtime/executor.h"
#include "runtime/optim/schedule.h"
#include "runtime/replicate.h"
#include "tests/test_util.h"
#include "tests/trainer_test_util.h"

namespace graphrun {
namespace {

using testing::lenet_path;

// A graph whose "gradients" of W and V are its inputs G and H: replicate() appends the optimizer
// nodes, so running it applies exactly the optimizer the trainer uses to gradients we choose. W and V
// are f32 or f64 (a float64 model's parameters, whose optimizer state is f64 too).
Graph gradient_feed_graph(const Tensor& w, const Tensor& v) {
  Graph g;
  g.name = "feed";
  g.opsets[""] = 17;
  for (const auto& [name, t, in] : {std::tuple{"W", &w, "G"}, std::tuple{"V", &v, "H"}}) {
    g.initializers[name] = t->clone();
    ValueInfo vi;
    vi.dtype = t->dtype();
    vi.has_shape = true;
    for (int64_t d : t->shape()) vi.shape.push_back(Dim(d));
    g.values[name] = g.values[in] = g.values[std::string(name) + "_grad"] = vi;
    g.inputs.push_back(in);
    g.nodes.push_back(Node{std::string("feed_") + name, "Identity", "", {in}, {std::string(name) + "_grad"}, {}});
    g.outputs.push_back(std::string(name) + "_grad");
  }
  return g;
}

void write_tensor(std::ostream& os, const Tensor& t) {
  os.precision(17);
  const auto v = t.as_doubles();
  for (size_t i = 0; i < v.size(); ++i) os << v[i] << (i + 1 < v.size() ? " " : "\n");
}

passes::OptimizerOptions adam_options(const std::string& kind, float wd) {
  passes::OptimizerOptions o;
  o.kind = kind;
  o.beta1 = 0.8f;
  o.beta2 = 0.95f;
  o.eps = 1e-8f;
  o.weight_decay = wd;
  return o;
}

// Applies `steps` updates through replicate's optimizer nodes and through torch.optim (torch_ctor on
// the parameters [w, v]; with opt.clip_grad_norm, torch.nn.utils.clip_grad_norm_ before each step),
// on weights of type `dt` (torch in the same type); returns the largest difference of the weights
// after each step.
double optimizer_vs_torch(const passes::OptimizerOptions& opt, const std::string& torch_ctor,
                          DType dt = DType::F32, bool torch_clips = true) {
  const Shape shape{3, 5}, vshape{4};
  const int steps = 6;
  const bool f64 = dt == DType::F64;
  auto typed = [&](const Tensor& t) { return f64 ? Tensor::from_vector<double>(t.shape(), t.as_doubles()) : t; };
  Tensor w0 = typed(testing::random_tensor(shape, 7)), v0 = typed(testing::random_tensor(vshape, 8));
  std::vector<Tensor> grads, vgrads;
  std::vector<float> lrs;  // the graph's learning rate input is f32 (cast to f64 for f64 parameters)
  for (int s = 0; s < steps; ++s) {
    grads.push_back(typed(testing::random_tensor(shape, 100 + s, -0.5f, 0.5f)));
    vgrads.push_back(typed(testing::random_tensor(vshape, 200 + s, -2.f, 2.f)));
    lrs.push_back(float(0.01 * (s + 1) / steps + 0.002));  // a changing rate, as schedules feed it
  }
  runtime::ReplicateOptions ro;
  ro.params = {"W", "V"};
  ro.optimizer = opt;
  auto reps = runtime::replicate(gradient_feed_graph(w0, v0), ro);
  runtime::ExecOptions eo;
  eo.state_updates = reps[0].state_updates;
  eo.fetch = {};
  runtime::Executor ex(reps[0].graph, eo);

  // A folder per test (ctest runs tests at once, and two of them compare SGD in float64).
  const std::string dir = testing::temp_dir(std::string("optim_vs_torch_") +
                                            ::testing::UnitTest::GetInstance()->current_test_info()->name() + "_" +
                                            opt.kind + (f64 ? "_f64" : ""));
  {
    std::ofstream f(dir + "/in.txt");
    write_tensor(f, w0);
    write_tensor(f, v0);
    for (int s = 0; s < steps; ++s) {
      f.precision(17);
      f << double(lrs[s]) << "\n";
      write_tensor(f, grads[s]);
      write_tensor(f, vgrads[s]);
    }
  }
  {
    std::ostringstream clip;
    clip.precision(17);
    if (opt.clip_grad_norm > 0 && torch_clips) clip << "    torch.nn.utils.clip_grad_norm_([w, v], " << double(opt.clip_grad_norm) << ")\n";
    std::string ctor = torch_ctor;
    ctor.replace(ctor.find("[w]"), 3, "[w, v]");
    std::ofstream py(dir + "/ref.py");
    py << "import torch\n"
          "lines = open('" << dir << "/in.txt').read().split('\\n')\n"
          "vec = lambda s: torch.tensor([float(x) for x in s.split()], dtype=torch." << (f64 ? "float64" : "float32") << ")\n"
          "w, v = torch.nn.Parameter(vec(lines[0]).reshape(3, 5)), torch.nn.Parameter(vec(lines[1]))\n"
          "opt = " << ctor << "\n"
          "out = open('" << dir << "/out.txt', 'w')\n"
          "for s in range(" << steps << "):\n"
          "    for group in opt.param_groups: group['lr'] = float(lines[2 + 3 * s])\n"
          "    w.grad = vec(lines[3 + 3 * s]).reshape(3, 5)\n"
          "    v.grad = vec(lines[4 + 3 * s])\n"
       << clip.str() <<
          "    opt.step()\n"
          "    out.write(' '.join('%.17g' % x for x in w.detach().reshape(-1).tolist() + v.detach().tolist()) + '\\n')\n";
  }
  auto r = testing::run_command(testing::python() + " " + dir + "/ref.py");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::ifstream ref(dir + "/out.txt");
  double worst = 0, moved = 0;
  auto w0d = w0.as_doubles();  // the initial weights, W's then V's, as wd below
  for (double x : v0.as_doubles()) w0d.push_back(x);
  for (int s = 0; s < steps; ++s) {
    std::map<std::string, Tensor> feeds{{"G", grads[s]}, {"H", vgrads[s]}, {"lr", Tensor::scalar<float>(lrs[s])}};
    if (reps[0].graph.is_input("step")) feeds["step"] = Tensor::scalar<int64_t>(s);  // stateful optimizers
    ex.run(feeds);
    const Tensor& w = ex.state("W");
    EXPECT_EQ(w.dtype(), dt);
    auto wd = w.as_doubles();
    for (double x : ex.state("V").as_doubles()) wd.push_back(x);
    for (size_t i = 0; i < wd.size(); ++i) {
      double v = std::nan("");
      ref >> v;
      worst = std::max(worst, std::isfinite(v) ? std::abs(v - wd[i]) : 1e9);
      moved = std::max(moved, std::abs(wd[i] - w0d[i]));
    }
  }
  EXPECT_GT(moved, 1e-3) << "the optimizer did not move the weights";
  std::string extra;
  EXPECT_FALSE(ref >> extra) << "torch wrote more values than the graph has: " << extra;
  return worst;
}

TEST(Optimizer, AdamEqualsTorchOptimAdam) {
  EXPECT_LE(optimizer_vs_torch(adam_options("adam", 0.f), "torch.optim.Adam([w], lr=0.01, betas=(0.8, 0.95), eps=1e-8)"),
            1e-6);
  // A large epsilon shows where it sits: on sqrt(v / (1 - beta2^T)) as torch (ai.graphrun.Adam), not on
  // sqrt(v) as ai.onnx.preview.training's Adam (1e-2 away here).
  passes::OptimizerOptions big = adam_options("adam", 0.f);
  big.eps = 0.125f;
  EXPECT_LE(optimizer_vs_torch(big, "torch.optim.Adam([w], lr=0.01, betas=(0.8, 0.95), eps=0.125)"), 1e-6);
  EXPECT_LE(optimizer_vs_torch(adam_options("adam", 0.05f),
                               "torch.optim.Adam([w], lr=0.01, betas=(0.8, 0.95), eps=1e-8, weight_decay=0.05)"),
            1e-6);
}

TEST(Optimizer, AdamWEqualsTorchOptimAdamW) {
  EXPECT_LE(optimizer_vs_torch(adam_options("adamw", 0.5f),
                               "torch.optim.AdamW([w], lr=0.01, betas=(0.8, 0.95), eps=1e-8, weight_decay=0.5)"),
            1e-6);
  passes::OptimizerOptions big = adam_options("adamw", 0.5f);
  big.eps = 0.125f;
  EXPECT_LE(optimizer_vs_torch(big, "torch.optim.AdamW([w], lr=0.01, betas=(0.8, 0.95), eps=0.125, weight_decay=0.5)"),
            1e-6);
}

// Adagrad (ai.onnx.preview.training's node): torch.optim.Adagrad with its defaults, with weight decay, with
// lr_decay (T, the updates before this one, is torch's step - 1) and a large epsilon, which shows where it sits.
TEST(Optimizer, AdagradEqualsTorchOptimAdagrad) {
  passes::OptimizerOptions o;
  o.kind = "adagrad";
  o.eps = 1e-10f;
  EXPECT_LE(optimizer_vs_torch(o, "torch.optim.Adagrad([w], lr=0.01)"), 1e-6);
  o.weight_decay = 0.05f;
  o.lr_decay = 0.25f;
  o.eps = 0.125f;
  EXPECT_LE(optimizer_vs_torch(o, "torch.optim.Adagrad([w], lr=0.01, lr_decay=0.25, weight_decay=0.05, eps=0.125)"), 1e-6);
  o.weight_decay = 0.0625f;  // (exact in float, as the f64 comparison needs: the attributes are float)
  EXPECT_LE(optimizer_vs_torch(o, "torch.optim.Adagrad([w], lr=0.01, lr_decay=0.25, weight_decay=0.0625, eps=0.125)",
                               DType::F64),
            1e-13);
}

// f64 parameters (train --float64) keep f64 optimizer state: every optimizer equals torch.optim in
// float64 to 1e-13, where an f32 state or update would be off by 1e-8 or more (the weights are near 1). The hyper-parameters
// are exact in float (ONNX attributes and the rate input are float); Adam's epsilon (2^-7, large enough
// to matter) sits where torch puts it, on the bias-corrected sqrt(v).
TEST(Optimizer, Float64ParametersKeepFloat64StateAndEqualTorchInFloat64) {
  auto sgd = [](float momentum, bool nesterov, float wd) {
    passes::OptimizerOptions o;
    o.momentum = momentum;
    o.nesterov = nesterov;
    o.weight_decay = wd;
    return o;
  };
  auto adam = [](const std::string& kind, float wd) {
    passes::OptimizerOptions o;
    o.kind = kind;
    o.beta1 = 0.75f;
    o.beta2 = 0.9375f;
    o.eps = std::ldexp(1.f, -7);
    o.weight_decay = wd;
    return o;
  };
  const double tol = 1e-13;
  EXPECT_LE(optimizer_vs_torch(sgd(0, false, 0.0625f), "torch.optim.SGD([w], lr=0.01, weight_decay=0.0625)",
                               DType::F64), tol);
  EXPECT_LE(optimizer_vs_torch(sgd(0.875f, false, 0.0625f),
                               "torch.optim.SGD([w], lr=0.01, momentum=0.875, weight_decay=0.0625)", DType::F64),
            tol);
  EXPECT_LE(optimizer_vs_torch(sgd(0.875f, true, 0), "torch.optim.SGD([w], lr=0.01, momentum=0.875, nesterov=True)",
                               DType::F64), tol);
  EXPECT_LE(optimizer_vs_torch(adam("adam", 0.125f),
                               "torch.optim.Adam([w], lr=0.01, betas=(0.75, 0.9375), eps=2**-7, weight_decay=0.125)",
                               DType::F64), tol);
  EXPECT_LE(optimizer_vs_torch(adam("adamw", 0.5f),
                               "torch.optim.AdamW([w], lr=0.01, betas=(0.75, 0.9375), eps=2**-7, weight_decay=0.5)",
                               DType::F64), tol);
}

// --clip-grad-norm: the global norm over every parameter's summed gradient (W's and V's here, the
// norms about 1.1 and 2.3), each scaled by min(1, max / (norm + 1e-6)) before weight decay and the
// step, as torch.nn.utils.clip_grad_norm_ before opt.step(): with plain SGD, momentum and AdamW, in
// float32 and float64; a max above the norms changes nothing.
TEST(Optimizer, ClipGradNormEqualsTorchClipGradNorm) {
  auto clip = [](passes::OptimizerOptions o, float max) {
    o.clip_grad_norm = max;
    return o;
  };
  passes::OptimizerOptions sgd, momentum;
  sgd.weight_decay = 0.0625f;
  momentum.momentum = 0.875f;
  EXPECT_LE(optimizer_vs_torch(clip(sgd, 0.5f), "torch.optim.SGD([w], lr=0.01, weight_decay=0.0625)"), 1e-7);
  EXPECT_LE(optimizer_vs_torch(clip(momentum, 0.5f), "torch.optim.SGD([w], lr=0.01, momentum=0.875)"), 1e-7);
  EXPECT_LE(optimizer_vs_torch(clip(adam_options("adamw", 0.5f), 0.25f),
                               "torch.optim.AdamW([w], lr=0.01, betas=(0.8, 0.95), eps=1e-8, weight_decay=0.5)"),
            1e-6);
  EXPECT_LE(optimizer_vs_torch(clip(momentum, 0.5f), "torch.optim.SGD([w], lr=0.01, momentum=0.875)", DType::F64), 1e-13);
  EXPECT_LE(optimizer_vs_torch(clip(sgd, 100.f), "torch.optim.SGD([w], lr=0.01, weight_decay=0.0625)", DType::F64), 1e-13);
  // The graph's clipping against torch's unclipped steps: far apart, so the comparisons above can fail.
  EXPECT_GT(optimizer_vs_torch(clip(momentum, 0.5f), "torch.optim.SGD([w], lr=0.01, momentum=0.875)", DType::F32,
                               /*torch_clips=*/false),
            1e-3);
}

TEST(Optimizer, AdamWGraphUsesGraphrunAdamAndExportsCheckerValid) {
  auto reps = [] {
    runtime::ReplicateOptions ro;
    ro.params = {"W", "V"};
    ro.optimizer.kind = "adamw";
    ro.optimizer.weight_decay = 0.01f;
    return runtime::replicate(gradient_feed_graph(testing::random_tensor({2, 2}, 1), testing::random_tensor({3}, 2)), ro);
  }();
  int adam = 0;
  for (const Node& n : reps[0].graph.nodes)
    if (n.op_type == "Adam" && n.domain == kGraphrunDomain) {
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

TEST(Optimizer, GradAndShowWithDevicesCarryTheChosenOptimizer) {
  if (!std::filesystem::exists(lenet_path())) GTEST_SKIP() << "models/lenet.onnx is missing";
  const std::string out = testing::temp_dir("optimizer_grad") + "/lenet.dp.onnx";
  auto r = testing::run_command(testing::graphrun_cli() + " grad " + lenet_path() +
                                " --devices 2 --optimizer adamw --weight-decay 0.01 -o " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  Graph g = load_onnx(out);
  int adam = 0;
  for (const Node& n : g.nodes) adam += n.op_type == "Adam" && n.domain == kGraphrunDomain;
  EXPECT_GE(adam, 1);
  r = testing::run_command(testing::python() + " -c \"import onnx; onnx.checker.check_model(onnx.load('" + out +
                           "'), full_check=True)\"");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  r = testing::run_command(testing::graphrun_cli() + " show " + lenet_path() + " --devices 2 --optimizer adam");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("Adam"), std::string::npos);
  // --weight-decay defaults as torch.optim's: 0.01 for AdamW, 0 for Adam.
  r = testing::run_command(testing::graphrun_cli() + " show " + lenet_path() + " --passes --devices 2 --optimizer adamw");
  EXPECT_NE(r.output.find("optimizer=adamw beta1=0.9 beta2=0.999 eps=1e-08 weight_decay=0.01"), std::string::npos)
      << r.output;
  r = testing::run_command(testing::graphrun_cli() + " show " + lenet_path() + " --passes --devices 2 --optimizer adam");
  EXPECT_EQ(r.output.find("weight_decay"), std::string::npos) << r.output;
  r = testing::run_command(testing::graphrun_cli() + " grad " + lenet_path() + " --optimizer adam");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--optimizer needs --devices"), std::string::npos) << r.output;
}

TEST(Optimizer, ScheduleFeedsTheLearningRatePerStep) {
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


// Contradictory optimizer and schedule flags: one line, exit code 2.
TEST(Optimizer, CliRefusesContradictoryOptimizerAndScheduleFlags) {
  if (!std::filesystem::exists(lenet_path())) GTEST_SKIP() << "models/lenet.onnx is missing";
  for (const char* bad : {" --optimizer rmsprop", " --optimizer adam --momentum 0.9", " --beta1 0.9",
                          " --optimizer adam --lr-decay 0.1", " --optimizer adagrad --beta2 0.9",
                          " --optimizer adagrad --lr-decay -1", " --optimizer adagrad --momentum 0.9",
                          " --lr-schedule step", " --lr-schedule wavy", " --lr-gamma 0.5", " --clip-grad-norm 0",
                          " --clip-grad-norm -1", " --clip-grad-norm inf", " --clip-grad-norm big"}) {
    auto r = testing::run_command(testing::graphrun_cli() + " train " + lenet_path() + bad);
    EXPECT_EQ(r.exit_code, 2) << bad << "\n" << r.output;
  }
  auto r = testing::run_command(testing::graphrun_cli() + " show " + lenet_path() + " --clip-grad-norm 1");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--clip-grad-norm needs --devices"), std::string::npos) << r.output;
  // The per-device graph shows the clipping nodes.
  r = testing::run_command(testing::graphrun_cli() + " show " + lenet_path() + " --devices 2 --clip-grad-norm 1");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("grad_clip_at_most_one"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace graphrun

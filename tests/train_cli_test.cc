// graphrun train from the command line: a short run's output, metrics and saved model; every kind of
// bad input gives one clear line and exit code 2.
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "graph/onnx_io.h"
#include "runtime/data/idx.h"
#include "runtime/device.h"
#include "tests/test_util.h"

namespace graphrun {
namespace {

std::string lenet() { return testing::source_dir() + "/models/lenet.onnx"; }
bool have_data() { return std::filesystem::exists(std::string(runtime::data::kDefaultDataDir) + "/t10k-images-idx3-ubyte.gz"); }

// Runs graphrun train with `args`; expects exit code 2 and one line naming `what`.
void expect_usage_error(const std::string& args, const std::string& what) {
  auto r = testing::run_command(testing::graphrun_cli() + " train " + args);
  EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.output;
  std::string out = r.output;
  while (!out.empty() && out.back() == '\n') out.pop_back();
  EXPECT_EQ(out.find('\n'), std::string::npos) << "more than one line for: " << args << "\n" << r.output;
  EXPECT_NE(out.find(what), std::string::npos) << args << "\n" << r.output;
}

TEST(TrainCli, NonsenseFlagsAreUsageErrors) {
  const std::string m = lenet();
  expect_usage_error(m + " --lr -0.5", "--lr");
  expect_usage_error(m + " --lr abc", "--lr");
  expect_usage_error(m + " --lr 1e40", "within float32's range");  // inf once fed as float32
  expect_usage_error(m + " --lr 1e-50", "within float32's range");  // 0 once fed as float32: trained nothing
  expect_usage_error(m + " --normalize 0.1,,0.3", "--normalize takes MEAN,STD");  // was taken as 0.1,0.3
  expect_usage_error(m + " --epochs 0", "--epochs");
  expect_usage_error(m + " --epochs 100001", "--epochs must be between 1 and 100000, got 100001");
  expect_usage_error(m + " --device-data-mb 99999999999", "--device-data-mb must be between 0 and 1073741824");
  expect_usage_error(m + " --batch-size 0", "--batch-size");
  expect_usage_error(m + " --devices cpu:4 --batch-size 3", "smaller than the number of replicas");
  expect_usage_error(m + " --devices tpu:0", "--devices");
  expect_usage_error(m + " --threads 0", "--threads");
  expect_usage_error(m + " --devices cpu:auto --threads 2", "--devices cpu:auto chooses the threads");
  expect_usage_error(m + " --momentum 1.5", "--momentum");
  expect_usage_error(m + " --nesterov", "--nesterov");
  expect_usage_error(m + " --loss mse", "class ids train with --loss cross-entropy");
  expect_usage_error(m + " --loss hinge", "choose cross-entropy");
  expect_usage_error(m + " --bogus", "unknown option --bogus");
  expect_usage_error(m + " --overlap-allreduce maybe", "--overlap-allreduce takes on or off");
  expect_usage_error(m + " --bucket-mb 0", "--bucket-mb");
  expect_usage_error(m + " --comm-timeout 0", "--comm-timeout must be a positive number of seconds");
  expect_usage_error(m + " --comm-timeout=inf", "--comm-timeout must be a positive number of seconds");
  expect_usage_error(m + " --comm-timeout", "--comm-timeout needs a value (S)");
  expect_usage_error("", "no model");
}

// --label-smoothing takes 0 <= EPS < 1 with cross-entropy: anything else is one line, exit 2, before
// any data is read; the same in grad, show, plan and check, which take it too.
TEST(TrainCli, LabelSmoothingBadValuesAreUsageErrors) {
  const std::string m = lenet();
  expect_usage_error(m + " --label-smoothing -0.1", "--label-smoothing must be in [0, 1), got -0.1");
  expect_usage_error(m + " --label-smoothing=-0.1", "--label-smoothing must be in [0, 1), got -0.1");
  expect_usage_error(m + " --label-smoothing 1", "--label-smoothing must be in [0, 1), got 1");
  expect_usage_error(m + " --label-smoothing nan", "--label-smoothing must be in [0, 1)");
  expect_usage_error(m + " --label-smoothing abc", "--label-smoothing must be a number, got 'abc'");
  expect_usage_error(m + " --label-smoothing", "--label-smoothing needs a value (EPS)");
  expect_usage_error(m + " --loss mse --label-smoothing 0.1", "--label-smoothing is for --loss cross-entropy, not --loss mse");
  expect_usage_error(m + " --eval-only --label-smoothing 0.1", "--eval-only's test loss is plain cross-entropy");
  // The flags of training: --eval-only ignored them, printing the same figures.
  for (const std::string f : {" --lr 0.5", " --epochs 5", " --optimizer adam", " --freeze conv1", " --augment",
                              " --clip-grad-norm 1", " --plan", " --dump-after backward"})
    expect_usage_error(m + " --eval-only" + f, "--eval-only trains nothing: it takes no " + f.substr(1, f.find(' ', 1) - 1));
  for (const std::string cmd : {" grad ", " show ", " plan ", " check "})
    for (const std::string bad : {" --label-smoothing 1", " --label-smoothing -0.1", " --label-smoothing abc"}) {
      const std::string args = cmd + m + bad + (cmd == " show " ? " --backward" : "");
      auto r = testing::run_command(testing::graphrun_cli() + args);
      EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.output;
      EXPECT_NE(r.output.find("--label-smoothing"), std::string::npos) << args << "\n" << r.output;
      EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << args << "\n" << r.output;
    }
  for (const std::string cmd : {" grad ", " plan "}) {
    auto r = testing::run_command(testing::graphrun_cli() + cmd + m + " --loss mse --label-smoothing 0.1");
    EXPECT_EQ(r.exit_code, 2) << cmd << "\n" << r.output;
    EXPECT_NE(r.output.find("not --loss mse"), std::string::npos) << cmd << "\n" << r.output;
  }
}

TEST(TrainCli, GpusFailWithOneClearLine) {
  std::string why;
  if (runtime::cuda_available(&why)) GTEST_SKIP() << "a GPU is present here: --gpus trains (tests/gpu_kernels_test.cc)";
  expect_usage_error(lenet() + " --gpus 2", "cannot train on cuda:0: " + why);
  expect_usage_error(lenet() + " --devices cuda:0,1", "cannot train on cuda:0: " + why);
  expect_usage_error(lenet() + " --devices cpu:0,cuda:0", "cuda:0");
}

// A model whose replicas cannot fit (their parameters, gradients and optimizer buffers alone exceed what the
// machine has) is refused in one line before any step, rather than killed by the kernel halfway through one;
// a batch whose activations cannot fit beside them, in one line before the first step.
// GRAPHRUN_MEM_AVAILABLE_MB stands in for the machine's available memory: LeNet's 0.49 MiB of parameters on
// two replicas need at least 2 x 2 x 0.49 MiB + 0.49 MiB of momentum (2.5 MiB).
TEST(TrainCli, ReplicasOrBatchesThatCannotFitInMemoryAreRefused) {
  if (!have_data()) GTEST_SKIP() << "Fashion-MNIST is not installed";
  auto r = testing::run_command("GRAPHRUN_MEM_AVAILABLE_MB=1 " + testing::graphrun_cli() + " train " + lenet() +
                                " --devices cpu:2 --momentum 0.9 --epochs 1 --max-steps 1");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("on 2 replicas on this machine needs at least"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("train on fewer replicas (--devices cpu:1)"), std::string::npos) << r.output;
  // Enough for them, not for the activations of a 128-example shard (6.6 MiB in the first convolution
  // alone): the first step stops before it runs, with one line naming --batch-size and the count of
  // what the shapes of its values need (15.3 MiB), before the machine runs out.
  r = testing::run_command("GRAPHRUN_MEM_AVAILABLE_MB=3 " + testing::graphrun_cli() + " train " + lenet() +
                           " --devices cpu:2 --momentum 0.9 --epochs 1 --max-steps 1");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("the first run needs more than"), std::string::npos) << r.output;
  // (Its parameters' gradients alone, of fixed size, take more than a replica's share.)
  EXPECT_NE(r.output.find("MiB by the shapes of its values, counted before it runs; by that count not even 1 along 'N' "
                          "fits: the values that do not grow with it need "),
            std::string::npos) << r.output;
  EXPECT_NE(r.output.find("); lower --batch-size (256 over 2 replicas"),
            std::string::npos) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 2) << r.output;  // the start line and the error
  // Enough for both: it trains.
  r = testing::run_command("GRAPHRUN_MEM_AVAILABLE_MB=60 " + testing::graphrun_cli() + " train " + lenet() +
                           " --devices cpu:2 --momentum 0.9 --epochs 1 --max-steps 1");
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

// The evaluation after an epoch runs beside the replicas' arenas (15.4 MiB each at LeNet's shard of 128):
// its batch of 128 gets what they leave of the budget. 60 MiB leave too little for 128 test images at the
// training step's bytes per example, so it evaluates in smaller batches, with the figures of the run with
// memory to spare (the correct count exactly; the summed loss in another order).
TEST(TrainCli, EvaluationShrinksItsBatchToTheMemoryTrainingLeaves) {
  if (!have_data()) GTEST_SKIP() << "Fashion-MNIST is not installed";
  const std::string d = testing::temp_dir("train_cli_eval_mem");
  auto run = [&](const std::string& env, const std::string& metrics) {
    auto r = testing::run_command(env + testing::graphrun_cli() + " train " + lenet() +
                                  " --devices cpu:2 --epochs 1 --max-steps 30 --optimizer adam --lr 0.003 --metrics " +
                                  d + "/" + metrics);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    std::ifstream f(d + "/" + metrics);
    std::string line;
    std::getline(f, line);
    return std::make_pair(r.output, line);
  };
  const auto [tight, tight_metrics] = run("GRAPHRUN_MEM_AVAILABLE_MB=60 ", "tight.jsonl");
  const auto [ample, ample_metrics] = run("", "ample.jsonl");
  EXPECT_NE(tight.find("evaluating in batches of "), std::string::npos) << tight;
  EXPECT_NE(tight.find(", not 128: the memory the training replicas leave (each holds "), std::string::npos) << tight;
  EXPECT_EQ(ample.find("evaluating in batches"), std::string::npos) << ample;
  auto field = [](const std::string& line, const std::string& key) {
    const size_t at = line.find("\"" + key + "\":");
    return at == std::string::npos ? -1.0 : std::stod(line.substr(at + key.size() + 3));
  };
  EXPECT_GT(field(ample_metrics, "test_acc"), 0.3) << ample_metrics;  // it learned: the counts mean something
  EXPECT_EQ(field(tight_metrics, "test_acc"), field(ample_metrics, "test_acc")) << tight_metrics << "\n" << ample_metrics;
  EXPECT_NEAR(field(tight_metrics, "test_loss"), field(ample_metrics, "test_loss"), 1e-5) << tight_metrics;
}

// Fewer training examples than replicas: no step could give each replica one, so it is one line (it
// trained no step, printed loss 0.0000 and saved the model unchanged, exit 0).
TEST(TrainCli, FewerExamplesThanReplicasIsAnError) {
  const std::string d = testing::temp_dir("train_cli_one_example");
  auto r = testing::run_command(testing::python() + " -c \"import numpy as np; "
                                "np.savez('" + d + "/one.npz', x=np.zeros((1, 1, 28, 28), np.float32), labels=np.zeros(1, np.int64)); "
                                "np.savez('" + d + "/two.npz', x=np.zeros((2, 1, 28, 28), np.float32), labels=np.zeros(2, np.int64))\"");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string base = testing::graphrun_cli() + " train " + lenet() + " --devices cpu:2 --epochs 1 --test-data " + d + "/two.npz";
  r = testing::run_command(base + " --data " + d + "/one.npz --save " + d + "/s.onnx");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("one.npz') has 1 example, fewer than the 2 replicas"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(d + "/s.onnx"));
  r = testing::run_command(base + " --data " + d + "/two.npz");
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

// Under an address-space limit too tight for any run (ulimit -v 400 MB), one line before anything
// starts: it crashed inside oneDNN's first GEMM (SIGSEGV) or aborted in the unwinder.
TEST(TrainCli, AnAddressSpaceLimitBelowTheFloorIsOneLine) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "sanitizers reserve terabytes of address space: no run starts under ulimit -v";
#else
  auto r = testing::run_command("(ulimit -v 400000 && " + testing::graphrun_cli() + " train " + lenet() +
                                " --epochs 1 --max-steps 1)");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(r.output.rfind("graphrun train: error: the address-space limit (ulimit -v) is 390 MiB: graphrun train "
                           "needs at least 640 MiB",
                           0),
            0u)
      << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
#endif
}

TEST(TrainCli, MissingOrCorruptDataIsAnError) {
  if (!std::filesystem::exists(lenet())) GTEST_SKIP() << "models/lenet.onnx is missing";
  std::string d = testing::temp_dir("train_cli_data");
  expect_usage_error(lenet() + " --data " + d + "/nowhere", "does not exist");
  expect_usage_error(lenet() + " --data " + d, "train-images-idx3-ubyte");
  if (!have_data()) return;
  // A copy of Fashion-MNIST whose training images are cut short.
  namespace fs = std::filesystem;
  for (const char* f : {"train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"})
    fs::copy_file(std::string(runtime::data::kDefaultDataDir) + "/" + f, d + "/" + f);
  gzFile out = gzopen((d + "/train-images-idx3-ubyte.gz").c_str(), "wb");
  std::string header = std::string{0, 0, 8, 3} + std::string{0, 0, char(0xea), 0x60} + std::string{0, 0, 0, 28} +
                       std::string{0, 0, 0, 28};
  gzwrite(out, header.data(), header.size());
  std::string pixels(1000, '\x10');
  gzwrite(out, pixels.data(), pixels.size());
  gzclose(out);
  expect_usage_error(lenet() + " --data " + d, "train-images-idx3-ubyte.gz");
  expect_usage_error(lenet() + " --data " + d, "truncated");
}

TEST(TrainCli, ModelWithFiveClassesIsRefused) {
  if (!std::filesystem::exists(lenet()) || !have_data()) GTEST_SKIP() << "needs models/lenet.onnx and Fashion-MNIST";
  Graph g = load_onnx(lenet());
  Shape ws = g.initializers.at("fc2.weight").shape();
  ws.back() = 5;
  g.initializers["fc2.weight"] = testing::random_tensor(ws, 3);
  g.initializers["fc2.bias"] = Tensor(DType::F32, {5});
  for (auto& [name, vi] : g.values)
    if (vi.has_shape && !vi.shape.empty() && vi.shape.back().size == 10) vi.shape.back() = Dim(5);
  std::string path = testing::temp_dir("train_cli_5") + "/lenet5.onnx";
  save_onnx(g, path);
  expect_usage_error(path, "5 classes");
}

TEST(TrainCli, ShortRunPrintsEpochLinesMetricsAndSavesTheModel) {
  if (!std::filesystem::exists(lenet()) || !have_data()) GTEST_SKIP() << "needs models/lenet.onnx and Fashion-MNIST";
  std::string d = testing::temp_dir("train_cli_run");
  auto r = testing::run_command(testing::graphrun_cli() + " train " + lenet() +
                                " --devices cpu:2 --threads 1 --epochs 2 --max-steps 20 --batch-size 64 --lr 0.05"
                                " --momentum 0.9 --metrics " + d + "/m.jsonl --save " + d + "/t.onnx");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("epoch 1/2"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("epoch 2/2"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("img/s"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("sec/epoch on [cpu:0, cpu:1]"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find('\r'), std::string::npos) << "progress bar written when stderr is not a terminal";
  std::ifstream m(d + "/m.jsonl");
  std::string line;
  int lines = 0;
  while (std::getline(m, line)) {
    ++lines;
    EXPECT_EQ(line.front(), '{');
    EXPECT_EQ(line.back(), '}');
    for (const char* key : {"\"epoch\"", "\"loss\"", "\"train_acc\"", "\"test_acc\"", "\"seconds\"", "\"images_per_sec\""})
      EXPECT_NE(line.find(key), std::string::npos) << line;
  }
  EXPECT_EQ(lines, 2);
  // The saved model is an ordinary ONNX model: graphrun show/run load it.
  Graph saved = load_onnx(d + "/t.onnx");
  EXPECT_EQ(saved.inputs, load_onnx(lenet()).inputs);
  std::string acc_line = r.output.substr(r.output.find("test acc: "));
  double printed = std::stod(acc_line.substr(10));
  EXPECT_GE(printed, 0.0);  // 40 steps do not get the d2l LeNet off its start; trainer_test checks accuracy
  EXPECT_LE(printed, 1.0);
}

// A spatial transformer as PyTorch's tutorial writes it for 28x28 images (the affine grid built by hand, since
// torch 1.13 cannot export F.affine_grid), exported at opset 16, trains on cpu:2 through GridSample: it learns,
// its frozen base grid (a buffer the export holds as an initializer) comes back unchanged, and the localisation
// net's last layer, which only the grid's gradient reaches, moves.
TEST(TrainCli, SpatialTransformerTrainsThroughGridSample) {
  if (!have_data()) GTEST_SKIP() << "needs Fashion-MNIST";
  const std::string d = testing::temp_dir("train_cli_stn");
  std::ofstream(d + "/export.py") << R"(import sys, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
class STN(nn.Module):
    def __init__(s):
        super().__init__()
        s.loc = nn.Sequential(nn.Conv2d(1, 8, 7), nn.MaxPool2d(2), nn.ReLU(), nn.Conv2d(8, 10, 5), nn.MaxPool2d(2),
                              nn.ReLU(), nn.Flatten(), nn.Linear(90, 32), nn.ReLU(), nn.Linear(32, 6))
        with torch.no_grad():
            s.loc[-1].weight.zero_()
            s.loc[-1].bias.copy_(torch.tensor([1., 0, 0, 0, 1, 0]))
        c = (torch.arange(28) * 2 + 1) / 28 - 1
        ys, xs = torch.meshgrid(c, c, indexing='ij')
        s.register_buffer('base', torch.stack([xs, ys, torch.ones_like(xs)], -1).reshape(-1, 3))
        s.cls = nn.Sequential(nn.Conv2d(1, 10, 5), nn.MaxPool2d(2), nn.ReLU(), nn.Conv2d(10, 20, 5), nn.MaxPool2d(2),
                              nn.ReLU(), nn.Flatten(), nn.Linear(320, 50), nn.ReLU(), nn.Linear(50, 10))
    def forward(s, x):
        grid = (s.base @ s.loc(x).view(-1, 2, 3).transpose(1, 2)).view(-1, 28, 28, 2)
        return s.cls(F.grid_sample(x, grid, align_corners=False))
torch.onnx.export(STN().train(), torch.randn(2, 1, 28, 28), sys.argv[1], opset_version=16,
                  training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False, input_names=['image'],
                  output_names=['logits'], dynamic_axes={'image': {0: 'N'}, 'logits': {0: 'N'}})
)";
  auto py = testing::run_command(testing::python() + " " + d + "/export.py " + d + "/stn.onnx 2>&1");
  ASSERT_EQ(py.exit_code, 0) << py.output;
  auto r = testing::run_command(testing::graphrun_cli() + " train " + d + "/stn.onnx --devices cpu:2 --threads 1" +
                                " --epochs 1 --max-steps 120 --optimizer adam --lr 0.003 --freeze base --save " + d +
                                "/trained.onnx 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const size_t at = r.output.find("test acc: ");
  ASSERT_NE(at, std::string::npos) << r.output;
  EXPECT_GT(std::stod(r.output.substr(at + 10)), 0.6) << r.output;  // 0.81 after 200 steps; chance is 0.1
  const Graph before = load_onnx(d + "/stn.onnx"), after = load_onnx(d + "/trained.onnx");
  EXPECT_EQ(testing::max_abs_diff(after.initializers.at("base"), before.initializers.at("base")), 0.0);
  EXPECT_GT(testing::max_abs_diff(after.initializers.at("loc.9.bias"), before.initializers.at("loc.9.bias")), 1e-4);
}

// --warmup-steps longer than the whole run (epochs x steps, --max-steps honoured) is one warning line on
// stderr, not an error: the rate never reaches --lr. As long as the run: no warning.
TEST(TrainCli, WarmupLongerThanTheRunIsAWarning) {
  if (!std::filesystem::exists(lenet()) || !have_data()) GTEST_SKIP() << "needs models/lenet.onnx and Fashion-MNIST";
  const std::string run = testing::graphrun_cli() + " train " + lenet() +
                          " --devices cpu:1 --threads 1 --epochs 2 --max-steps 2 --batch-size 32 --lr 0.1";
  // (stderr alone)
  auto r = testing::run_command("(" + run + " --warmup-steps 5 2>&1 >/dev/null)");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output,
            "graphrun train: warning: --warmup-steps 5 is longer than the run (4 steps): the learning rate never reaches "
            "--lr (its last step's is 0.08)\n");
  r = testing::run_command("(" + run + " --warmup-steps 4 --lr-schedule cosine 2>&1 >/dev/null)");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "");
}

// A model ending in Softmax, trained with cross-entropy (which applies softmax itself), gets one warning
// line on stderr naming the node (through an Identity too); LogSoftmax is fine (cross-entropy on
// log-probabilities is their NLL), and so is Softmax under --loss mse.
TEST(TrainCli, SoftmaxOutputUnderCrossEntropyIsAWarning) {
  const std::string d = testing::temp_dir("train_cli_softmax");
  std::ofstream(d + "/make.py") << "import numpy as np, onnx\n"
      "from onnx import helper as h, TensorProto as T, numpy_helper as nh\n"
      "r = np.random.RandomState(0)\n"
      "x = r.randn(64, 4).astype(np.float32)\n"
      "np.savez('" << d << "/d.npz', x=x, labels=(x[:, 0] > 0).astype(np.int64))\n"
      "np.savez('" << d << "/r.npz', x=x, labels=r.rand(64, 2).astype(np.float32))\n"
      "for op, extra in (('Softmax', True), ('LogSoftmax', False)):\n"
      "    nodes = [h.make_node('Gemm', ['x', 'w', 'b'], ['z'], transB=1), h.make_node(op, ['z'], ['p'], name='head', axis=1)]\n"
      "    if extra: nodes.append(h.make_node('Identity', ['p'], ['probs']))\n"
      "    g = h.make_graph(nodes, op, [h.make_tensor_value_info('x', T.FLOAT, ['N', 4])],\n"
      "                     [h.make_tensor_value_info('probs' if extra else 'p', T.FLOAT, ['N', 2])],\n"
      "                     [nh.from_array(r.randn(2, 4).astype(np.float32), 'w'), nh.from_array(np.zeros(2, np.float32), 'b')])\n"
      "    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid('', 13)]), '" << d << "/' + op + '.onnx')\n";
  auto r = testing::run_command(testing::python() + " " + d + "/make.py");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto train = [&](const std::string& model, const std::string& args) {  // stderr alone
    return testing::run_command("(" + testing::graphrun_cli() + " train " + d + "/" + model + " --devices cpu:1 --threads 1"
                                " --epochs 1 --batch-size 32 --lr 0.1 --val-split 0.25 " + args + " 2>&1 >/dev/null)");
  };
  r = train("Softmax.onnx", "--data " + d + "/d.npz");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output,
            "graphrun train: warning: the loss reads 'probs', the output of Softmax node 'head', and cross-entropy applies "
            "softmax itself, so it is applied twice; export the logits (or LogSoftmax: cross-entropy on log-probabilities "
            "is their NLL)\n");
  r = train("LogSoftmax.onnx", "--data " + d + "/d.npz");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "");
  r = train("Softmax.onnx", "--data " + d + "/r.npz --loss mse");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "");
}

// A model whose weights are in an external data file (how large models are exported) trains, and its trained
// weights are written beside the saved model the same way; run from another working directory.
TEST(TrainCli, ModelWithExternalDataTrainsAndIsSavedWithIt) {
  if (!std::filesystem::exists(lenet()) || !have_data()) GTEST_SKIP() << "needs models/lenet.onnx and Fashion-MNIST";
  const std::string d = testing::temp_dir("train_cli_external");
  Graph g = load_onnx(lenet());
  g.external_data = true;
  save_onnx(g, d + "/ext.onnx");
  ASSERT_TRUE(std::filesystem::exists(d + "/ext.onnx.data"));
  EXPECT_LT(std::filesystem::file_size(d + "/ext.onnx"), 64u << 10);  // the weights are not inside
  auto r = testing::run_command("cd / && " + testing::graphrun_cli() + " train " + d +
                                "/ext.onnx --epochs 1 --max-steps 5 --batch-size 64 --save " + d + "/t.onnx");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_TRUE(std::filesystem::exists(d + "/t.onnx.data")) << r.output;
  const Graph t = load_onnx(d + "/t.onnx");
  EXPECT_TRUE(t.external_data);
  EXPECT_GT(testing::max_abs_diff(t.initializers.at("conv1.weight"), g.initializers.at("conv1.weight")), 0);  // trained
}

}  // namespace
}  // namespace graphrun

namespace graphrun {
namespace {

TEST(TrainCli, ShowAndGradPrintAndExportTheDeviceGraphs) {
  if (!std::filesystem::exists(lenet())) GTEST_SKIP() << "models/lenet.onnx is missing";
  auto r = testing::run_command(testing::graphrun_cli() + " show " + lenet() + " --devices 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("ai.graphrun.AllReduce"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[cpu:0, cpu:1]"), std::string::npos);
  EXPECT_NE(r.output.find("conv1.weight.new"), std::string::npos);
  std::string d = testing::temp_dir("train_cli_grad");
  r = testing::run_command(testing::graphrun_cli() + " grad " + lenet() + " --devices 2 -o " + d + "/dp.onnx");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  Graph g = load_onnx(d + "/dp.onnx");  // checker-valid ONNX (save_onnx ran the full check)
  int allreduce = 0, updates = 0;
  for (const Node& n : g.nodes) {
    allreduce += n.op_type == "AllReduce" && n.domain == kGraphrunDomain;
    updates += n.op_type == "Sub" && n.outputs[0].size() > 4 && n.outputs[0].substr(n.outputs[0].size() - 4) == ".new";
  }
  EXPECT_GE(allreduce, 1);
  EXPECT_EQ(updates, 8);  // one SGD update per LeNet parameter
  EXPECT_TRUE(g.is_input("lr"));
  EXPECT_TRUE(g.is_input("loss_scale"));
  r = testing::run_command(testing::graphrun_cli() + " show " + lenet() + " --devices tpu:1");
  EXPECT_EQ(r.exit_code, 2) << r.output;
}

}  // namespace
}  // namespace graphrun

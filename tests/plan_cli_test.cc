// graphrun plan from the command line: the table, --json's figures, train --plan's block, and one line
// with exit code 2 for every kind of bad input.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "runtime/data/idx.h"
#include "runtime/plan.h"
#include "tests/test_util.h"

namespace graphrun {
namespace {

std::string lenet() { return testing::source_dir() + "/models/lenet.onnx"; }

testing::CommandResult plan(const std::string& args) {
  return testing::run_command(testing::graphrun_cli() + " plan " + args);
}

void expect_usage_error(const std::string& args, const std::string& what) {
  auto r = plan(args);
  EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.output;
  std::string out = r.output;
  while (!out.empty() && out.back() == '\n') out.pop_back();
  EXPECT_EQ(out.find('\n'), std::string::npos) << "more than one line for: " << args << "\n" << r.output;
  EXPECT_EQ(out.rfind("graphrun plan: error: ", 0), 0u) << r.output;
  EXPECT_NE(out.find(what), std::string::npos) << args << "\n" << r.output;
}

TEST(PlanCli, BadInputIsOneLineAndExit2) {
  const std::string m = lenet();
  expect_usage_error("", "no model given");
  expect_usage_error("no/such/model.onnx --devices 2", "no/such/model.onnx");
  expect_usage_error(m + " --devices 2 --link wifi", "--link 'wifi'");
  expect_usage_error(m + " --devices 2 --link 0", "--link");
  expect_usage_error(m + " --devices 0", "--devices");
  expect_usage_error(m + " --devices cpu:x", "--devices");
  expect_usage_error(m + " --gpus 0", "--gpus");
  expect_usage_error(m + " --gpus -3", "--gpus");
  expect_usage_error(m + " --gpus 2 --devices 2", "not both");
  expect_usage_error(m + " --devices 8 --batch-size 4", "smaller than the number of replicas");
  expect_usage_error(m + " --device-tflops 0", "--device-tflops");
  // Absurd figures printed 200-digit times that broke the table.
  expect_usage_error(m + " --devices 2 --link 1e-300 --device-tflops 1", "a bandwidth in GB/s from 0.001 to 1000000");
  expect_usage_error(m + " --devices 2 --device-tflops 1e-300", "--device-tflops must be between 1e-06 and 1e9");
  // --dims names a dimension of an input other than the batch: a typo was ignored.
  expect_usage_error(m + " --dims Q=5", "--dims Q=5: no input of the model has a dimension named 'Q' (it names none)");
  expect_usage_error(m + " --dims N=5", "--dims N=5: 'N' is the inputs' batch dimension");
  expect_usage_error(m + " --kernel-us 3", "--kernel-us needs --device-tflops");
  expect_usage_error(m + " --bucket-mb -1", "--bucket-mb");
  expect_usage_error(m + " --overlap-allreduce maybe", "--overlap-allreduce");
  expect_usage_error(m + " --optimizer lion", "--optimizer");
  expect_usage_error(m + " --bogus", "unknown option --bogus");
  expect_usage_error(m + " --devices cpu:auto --threads 2", "--devices cpu:auto chooses the threads");
  expect_usage_error(m + " --devices cpu:auto --link ib", "no --link or --device-tflops");
}

// plan runs the shard (and the one-device baseline) on this machine: a batch whose inputs or activations
// cannot fit in the memory available is one line naming --batch-size, not the out-of-memory killer.
// GRAPHRUN_MEM_AVAILABLE_MB stands in for that memory; LeNet's activations take about 15 MiB at 128
// examples, 31 MiB at 256, and its inputs 3 KiB an image.
TEST(PlanCli, BatchesTooLargeForThisMachineAreOneLine) {
  const std::string m = lenet();
  const auto with_mb = [&](int mb, const std::string& args) {
    return testing::run_command("GRAPHRUN_MEM_AVAILABLE_MB=" + std::to_string(mb) + " " + testing::graphrun_cli() +
                                " plan " + m + " " + args);
  };
  const auto expect_line = [](const testing::CommandResult& r, const std::vector<std::string>& what) {
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
    for (const auto& w : what) EXPECT_NE(r.output.find(w), std::string::npos) << w << "\n" << r.output;
  };
  expect_line(with_mb(1, "--devices 1 --batch-size 1000"),
              {"plan: the shard's inputs need at least 3.0 MiB and this machine has 1.0 MiB available; lower "
               "--batch-size (planning runs 1000 examples on this machine)"});
  expect_line(with_mb(4, "--devices 1 --batch-size 256"),
              {"the first run needs more than", "by the shapes of its values, counted before it runs; by that count at most 26 of "
               "its 256 along 'N' could fit); lower "
               "--batch-size (planning runs 256 examples on this machine)"});
  // The shard of 128 fits, the baseline's 256 does not (one copy of the shard runs: --link ib).
  expect_line(with_mb(25, "--devices 2 --batch-size 256 --link ib"),
              {"counted before it runs", "(planning runs 256 examples on this machine: the one-device baseline, which "
                                         "--device-tflops models instead)"});
  // The shard's activations are counted from its shapes before its random inputs are drawn: 2,000,000
  // LeNet images (6.3 GB of inputs, 227 GiB of activations) are refused by the count, within an address
  // space of 3 GB that the inputs alone would exceed (they used to be drawn first: out of memory, or 24 s).
  // (Sanitizers reserve terabytes of address space: there, no limit.)
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  const std::string address_limit;
#else
  const std::string address_limit = "ulimit -v 3000000; ";
#endif
  auto r = testing::run_command(address_limit + "GRAPHRUN_MEM_AVAILABLE_MB=8000 " + testing::graphrun_cli() + " plan " +
                                m + " --devices 1 --batch-size 2000000");
  expect_line(r, {"the first run needs more than", "of its 2000000 along 'N' could fit); lower --batch-size (planning runs 2000000"});
  r = with_mb(25, "--devices 2 --batch-size 256 --link ib --device-tflops 10");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  r = with_mb(60, "--devices 2 --batch-size 256 --link ib");
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

TEST(PlanCli, HelpExplainsTheModel) {
  auto r = plan("--help");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.rfind("usage: graphrun plan MODEL.onnx", 0), 0u) << r.output;
  for (const char* w : {"--link", "--device-tflops", "2(p-1)/p", "nvlink", "ethernet"})
    EXPECT_NE(r.output.find(w), std::string::npos) << w;
  auto top = testing::run_command(testing::graphrun_cli() + " --help");
  EXPECT_NE(top.output.find("  plan "), std::string::npos) << top.output;
}

// --json on paper (--device-tflops: nothing timed): LeNet's FLOPs (13258800 per image, the hand count
// of plan_test), its one bucket of every parameter, and a prediction that is the same on every run.
TEST(PlanCli, JsonHoldsTheFiguresOfTheTable) {
  const std::string args = lenet() + " --gpus 4 --batch-size 64 --link ethernet --device-tflops 2 --json";
  auto r = plan(args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["devices"].get<int>(), 4);
  EXPECT_EQ(j["shard"].get<int>(), 16);
  EXPECT_DOUBLE_EQ(j["flops_per_step"].get<double>(), 64 * 13258800.0);
  EXPECT_EQ(j["buckets"].size(), 1u);
  EXPECT_EQ(j["allreduce_bytes"].get<size_t>(), 129068u * 4);
  EXPECT_EQ(j["memory"]["params"].get<size_t>(), 129068u * 4);
  EXPECT_GT(j["memory"]["arena"].get<size_t>(), 0u);
  const auto& p = j["prediction"];
  EXPECT_EQ(p["link"].get<std::string>(), "ethernet");
  EXPECT_TRUE(p["overlap"].get<bool>());  // GPUs overlap by default, as train does
  EXPECT_GT(p["step_s"].get<double>(), p["compute_n_s"].get<double>());
  EXPECT_EQ(plan(args).output, r.output) << "a modelled plan is deterministic";

  auto table = plan(lenet() + " --gpus 4 --batch-size 64 --link ethernet --device-tflops 2");
  ASSERT_EQ(table.exit_code, 0) << table.output;
  for (const char* w : {"FLOPs per step", "activations arena", "allreduce_0", "scaling efficiency", "ethernet"})
    EXPECT_NE(table.output.find(w), std::string::npos) << w << "\n" << table.output;
}

// train --plan prints the static plan (one line) before training; without it the output is as before.
TEST(PlanCli, TrainPlanPrintsOneLineFirst) {
  if (!std::filesystem::exists(std::string(runtime::data::kDefaultDataDir) + "/t10k-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "Fashion-MNIST is not installed";
  const std::string base = testing::graphrun_cli() + " train " + lenet() +
                           " --devices cpu:2 --batch-size 32 --max-steps 2 --epochs 1 --threads 1";
  auto with = testing::run_command(base + " --plan");
  ASSERT_EQ(with.exit_code, 0) << with.output;
  EXPECT_EQ(with.output.rfind("plan: 0.42 GFLOP per step; per replica (shard 16): arena ", 0), 0u) << with.output;
  auto without = testing::run_command(base);
  ASSERT_EQ(without.exit_code, 0) << without.output;
  EXPECT_EQ(without.output.find("plan:"), std::string::npos) << without.output;
}

// A model over sequences, x[N, T, 8] -> MatMul 8x2 -> mean over T -> logits[N, 2]: the batch N is the
// shard, T is sized by --dims (plan) or by the data (train --plan, cpu:auto); never guessed (it was
// planned at T = the shard, whatever the data).
TEST(PlanCli, SymbolicDimensionsOtherThanTheBatchAreSizedByDimsOrTheData) {
  const std::string d = testing::temp_dir("plan_cli_dims");
  std::ofstream(d + "/make.py")
      << "import numpy as np, onnx\n"
         "from onnx import helper as h, TensorProto as T, numpy_helper as nh\n"
         "r = np.random.RandomState(0)\n"
         "x = r.randn(40, 5, 8).astype(np.float32)\n"
         "np.savez('" << d << "/seq.npz', x=x, labels=(x[:, 0, 0] > 0).astype(np.int64))\n"
         "g = h.make_graph([h.make_node('MatMul', ['x', 'w'], ['y']),\n"
         "                  h.make_node('ReduceMean', ['y'], ['logits'], axes=[1], keepdims=0)], 'seq',\n"
         "                 [h.make_tensor_value_info('x', T.FLOAT, ['N', 'T', 8])],\n"
         "                 [h.make_tensor_value_info('logits', T.FLOAT, ['N', 2])],\n"
         "                 [nh.from_array(r.randn(8, 2).astype(np.float32), 'w')])\n"
         "onnx.save(h.make_model(g, opset_imports=[h.make_opsetid('', 13)]), '" << d << "/seq.onnx')\n";
  auto r = testing::run_command(testing::python() + " " + d + "/make.py");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string m = d + "/seq.onnx";
  expect_usage_error(m + " --batch-size 4", "input 'x' has the symbolic dimension 'T' (axis 1): give its size with --dims T=SIZE");
  expect_usage_error(m + " --dims T=0", "--dims: 'T=0' is not NAME=SIZE");
  // MatMul's FLOPs: forward 2*T*8*2 per example, backward the weight gradient (the same; x needs none).
  auto flops = [&](const std::string& args) {
    auto p = plan(m + " --batch-size 4 --devices 2 --device-tflops 1 --json " + args);
    EXPECT_EQ(p.exit_code, 0) << p.output;
    return p.exit_code ? 0.0 : nlohmann::json::parse(p.output)["flops_per_step"].get<double>();
  };
  EXPECT_DOUBLE_EQ(flops("--dims T=5"), 4 * 2 * (2.0 * 5 * 8 * 2));
  EXPECT_DOUBLE_EQ(flops("--dims T=50"), 4 * 2 * (2.0 * 50 * 8 * 2));
  // train --plan sizes T from the data (5): its line gives the arena plan --dims T=5 gives, which differs
  // from T=50's (the FLOPs round to 0.00 GFLOP in that line).
  auto arena_of = [&](const std::string& dims) {
    auto p = plan(m + " --batch-size 4 --devices 2 --json --dims " + dims);
    EXPECT_EQ(p.exit_code, 0) << p.output;
    return p.exit_code ? std::string() : runtime::bytes_str(double(nlohmann::json::parse(p.output)["memory"]["arena"].get<size_t>()));
  };
  const std::string t5 = arena_of("T=5");
  EXPECT_NE(t5, arena_of("T=50"));
  auto t = testing::run_command(testing::graphrun_cli() + " train " + m + " --data " + d +
                                "/seq.npz --devices cpu:2 --threads 1 --batch-size 4 --max-steps 1 --epochs 1 --plan");
  ASSERT_EQ(t.exit_code, 0) << t.output;
  EXPECT_NE(t.output.find("(shard 2): arena " + t5 + " + "), std::string::npos) << t5 << "\n" << t.output;
  // Data that cannot size T (x[40, 5]: one dimension per example where the model has two) is named as
  // such; train has no --dims flag to point to.
  r = testing::run_command(testing::python() + " -c \"import numpy as np; np.savez('" + d +
                           "/flat.npz', x=np.zeros((40, 5), np.float32), labels=np.zeros(40, np.int64))\"");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  t = testing::run_command(testing::graphrun_cli() + " train " + m + " --data " + d +
                           "/flat.npz --devices cpu:2 --threads 1 --batch-size 4 --max-steps 1 --epochs 1 --plan");
  EXPECT_EQ(t.exit_code, 2) << t.output;
  EXPECT_NE(t.output.find("input 'x' has the symbolic dimension 'T' (axis 1), which the training data does not "
                          "size: that needs an array of 2 dimension(s) per example for 'x' (the data's has 1)"),
            std::string::npos) << t.output;
  EXPECT_EQ(t.output.find("--dims"), std::string::npos) << t.output;
}

// --devices cpu:auto times each split of the cores and trains on (plans) the one it names first.
TEST(PlanCli, AutoPlacementNamesTheSplitItTrainsOn) {
  const auto r = plan(lenet() + " --devices cpu:auto --batch-size 16 --steps 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_EQ(r.output.rfind("placement: cpu:", 0), 0u) << r.output;
  if (!std::filesystem::exists(std::string(runtime::data::kDefaultDataDir) + "/t10k-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "Fashion-MNIST is not installed";
  const auto t = testing::run_command(testing::graphrun_cli() + " train " + lenet() +
                                      " --devices cpu:auto --batch-size 32 --max-steps 2 --epochs 1");
  ASSERT_EQ(t.exit_code, 0) << t.output;
  ASSERT_EQ(t.output.rfind("placement: cpu:", 0), 0u) << t.output;
  // "placement: cpu:R x T thread(s) (...)": train says it runs R replicas of T threads.
  const int replicas = std::stoi(t.output.substr(15));
  const size_t x = t.output.find(" x ");
  ASSERT_NE(x, std::string::npos) << t.output;
  const int threads = std::stoi(t.output.substr(x + 3));
  std::string list = "[cpu:0";
  for (int i = 1; i < replicas; ++i) list += ", cpu:" + std::to_string(i);
  list += "] (" + std::to_string(threads) + " thread" + (threads > 1 ? "s" : "") + " per replica)";
  EXPECT_NE(t.output.find("training 'lenet' on " + list), std::string::npos) << list << "\n" << t.output;
}

}  // namespace
}  // namespace graphrun

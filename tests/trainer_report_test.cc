// What the trainer reports: the --metrics JSON (keys, order, values), --log-every lines, --eval-only.
#include <gtest/gtest.h>

#include <fstream>
#include <iomanip>
#include <sstream>
#include <nlohmann/json.hpp>

#include "graph/onnx_io.h"
#include "runtime/trainer.h"
#include "tests/test_util.h"
#include "tests/trainer_test_util.h"

namespace graphrun {
namespace {

using runtime::TrainOptions;
using runtime::Trainer;
using testing::lenet_path;

// The --metrics file: one JSON object per epoch, its keys in this order, its values the epoch's
// figures at the precision the file has always had.
TEST(TrainerReport, MetricsHoldOneJsonObjectPerEpochWithItsFigures) {
  REQUIRE_LENET_AND_DATA();
  TrainOptions o = testing::quick(2, 32, 3, 100);
  o.epochs = 2;
  o.lr = 0.05;
  o.metrics_path = testing::temp_dir("trainer_report_metrics") + "/m.jsonl";
  std::vector<runtime::EpochStats> all = Trainer(load_onnx(testing::lenet_path()), o).fit();
  ASSERT_EQ(all.size(), 2u);
  std::ifstream f(o.metrics_path);
  std::string line;
  size_t e = 0;
  for (; std::getline(f, line); ++e) {
    ASSERT_LT(e, all.size()) << line;
    const auto j = nlohmann::ordered_json::parse(line);
    std::vector<std::string> keys;
    for (const auto& [k, _] : j.items()) keys.push_back(k);
    EXPECT_EQ(keys, (std::vector<std::string>{"epoch", "steps", "loss", "train_acc", "test_acc", "test_loss", "seconds",
                                              "images_per_sec", "lr", "devices", "threads"}));
    const runtime::EpochStats& st = all[e];
    EXPECT_EQ(j["epoch"].get<int>(), st.epoch);
    EXPECT_EQ(j["steps"].get<int64_t>(), st.steps);
    EXPECT_NEAR(j["loss"].get<double>(), st.loss, 5e-7);
    EXPECT_NEAR(j["train_acc"].get<double>(), st.train_acc, 5e-7);
    EXPECT_NEAR(j["test_acc"].get<double>(), st.test_acc, 5e-7);
    EXPECT_NEAR(j["test_loss"].get<double>(), st.test_loss, 5e-7);
    EXPECT_GT(st.test_loss, 0);
    EXPECT_NEAR(j["seconds"].get<double>(), st.seconds, 5e-4);
    EXPECT_DOUBLE_EQ(j["lr"].get<double>(), 0.05);
    EXPECT_EQ(j["devices"].get<std::string>(), "[cpu:0, cpu:1]");
    EXPECT_EQ(j["threads"].get<int>(), 1);
  }
  EXPECT_EQ(e, all.size());
}

// --log-every: the mean loss of each block of steps and the rate the schedule gave its last step.
TEST(TrainerReport, CliLogEveryPrintsTheMeanLossAndTheScheduledRate) {
  REQUIRE_LENET_AND_DATA();
  auto r = testing::run_command(testing::graphrun_cli() + " train " + lenet_path() +
                                " --devices cpu:2 --batch-size 32 --max-steps 5 --threads 1 --epochs 1 --log-every 2"
                                " --optimizer adam --lr 1e-3 --lr-schedule step --lr-step-size 2 --lr-gamma 0.5"
                                " --normalize 0.1307,0.3081 --freeze conv1.weight");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (const char* line : {"step 2  epoch 1  loss ", "step 4  epoch 1  loss ", "step 5  epoch 1  loss "})
    EXPECT_NE(r.output.find(line), std::string::npos) << line << "\n" << r.output;
  EXPECT_NE(r.output.find("lr 0.00025\n"), std::string::npos) << r.output;  // step 5: 1e-3 * 0.5^2
  for (const char* bad : {" --normalize 0.1", " --normalize 0.1,0", " --log-every -1"}) {
    r = testing::run_command(testing::graphrun_cli() + " train " + lenet_path() + bad);
    EXPECT_EQ(r.exit_code, 2) << bad << "\n" << r.output;
  }
}

// --eval-only: the model as given, scored on the test set (the loss summed in f32 on every device).
TEST(TrainerReport, CliEvalOnlyPrintsTestAccuracyAndLoss) {
  REQUIRE_LENET_AND_DATA();
  auto r = testing::run_command(testing::graphrun_cli() + " train " + lenet_path() + " --eval-only --threads 1");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("test acc: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("test loss: 2.30"), std::string::npos) << r.output;  // d2l's untrained LeNet: ln 10
}

// --eval-only's line ends with a newline and counts "images" only where the model's input is an image
// (as the epoch lines' img/s), "examples" for tabular data; --metrics writes one JSON object for the
// evaluation, with an epoch's keys where they apply.
TEST(TrainerReport, CliEvalOnlyCountsExamplesAndWritesMetrics) {
  REQUIRE_LENET_AND_DATA();
  const std::string d = testing::temp_dir("trainer_report_eval_only");
  {
    std::ofstream py(d + "/make.py");
    py << "import numpy as np, onnx\n"
          "from onnx import helper as h, TensorProto as T, numpy_helper as nh\n"
          "r = np.random.RandomState(0)\n"
          "x = r.randn(50, 8).astype(np.float32)\n"
          "np.savez('" << d << "/tab.npz', features=x, labels=(x[:, 0] > 0).astype(np.int64) + (x[:, 1] > 0))\n"
          "g = h.make_graph([h.make_node('Gemm', ['x', 'w', 'b'], ['logits'], transB=1)], 'tab',\n"
          "                 [h.make_tensor_value_info('x', T.FLOAT, ['N', 8])], [h.make_tensor_value_info('logits', T.FLOAT, ['N', 3])],\n"
          "                 [nh.from_array(r.randn(3, 8).astype(np.float32), 'w'), nh.from_array(np.zeros(3, np.float32), 'b')])\n"
          "onnx.save(h.make_model(g, opset_imports=[h.make_opsetid('', 13)]), '" << d << "/tab.onnx')\n";
  }
  auto r = testing::run_command(testing::python() + " " + d + "/make.py");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = testing::run_command(testing::graphrun_cli() + " train " + d + "/tab.onnx --data " + d + "/tab.npz --test-data " + d +
                           "/tab.npz --eval-only --devices cpu:2 --threads 1 --metrics " + d + "/tab.jsonl");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(" (tab, 50 examples: '" + d + "/tab.npz')\n"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("images"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.back(), '\n') << r.output;
  std::ifstream f(d + "/tab.jsonl");
  std::string line, more;
  ASSERT_TRUE(std::getline(f, line)) << "no --metrics line";
  EXPECT_FALSE(std::getline(f, more)) << more;
  auto j = nlohmann::ordered_json::parse(line);
  std::vector<std::string> keys;
  for (const auto& [k, _] : j.items()) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"test_acc", "test_loss", "test_examples", "test_data", "devices", "threads"}))
      << line;
  EXPECT_EQ(j["test_examples"].get<int64_t>(), 50);
  EXPECT_EQ(j["devices"].get<std::string>(), "[cpu:0, cpu:1]");
  EXPECT_NE(r.output.find("test acc: " + [&] {
    std::ostringstream os;  // four decimals, as the metrics' six rounded
    os << std::fixed << std::setprecision(4) << j["test_acc"].get<double>();
    return os.str();
  }()), std::string::npos) << r.output << line;

  // An image model: "images"; --loss mse's line and metrics hold the mean squared error.
  r = testing::run_command(testing::graphrun_cli() + " train " + lenet_path() + " --eval-only --threads 1 --metrics " + d +
                           "/lenet.jsonl");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(" (lenet, 10000 images: the t10k split of "), std::string::npos) << r.output;
  EXPECT_EQ(r.output.back(), '\n') << r.output;
  std::ifstream g(d + "/lenet.jsonl");
  ASSERT_TRUE(std::getline(g, line));
  j = nlohmann::ordered_json::parse(line);
  EXPECT_NEAR(j["test_loss"].get<double>(), 2.30, 0.01) << line;
  EXPECT_FALSE(j.contains("test_data")) << line;  // the MNIST folder's own test split, as an epoch's
}

// d/tab.onnx, a linear two-class model of 8 features, and d/tab.npz, n examples for it (x, labels).
void write_two_class_table(const std::string& d, int n) {
  std::ofstream(d + "/make.py")
      << "import numpy as np, onnx\n"
         "from onnx import helper as h, TensorProto as T, numpy_helper as nh\n"
         "r = np.random.RandomState(0)\n"
         "x = r.randn(" << n << ", 8).astype(np.float32)\n"
         "np.savez('" << d << "/tab.npz', x=x, labels=(x[:, 0] > 0).astype(np.int64))\n"
         "g = h.make_graph([h.make_node('Gemm', ['x', 'w', 'b'], ['logits'], transB=1)], 'tab',\n"
         "                 [h.make_tensor_value_info('x', T.FLOAT, ['N', 8])], [h.make_tensor_value_info('logits', T.FLOAT, ['N', 2])],\n"
         "                 [nh.from_array(r.randn(2, 8).astype(np.float32), 'w'), nh.from_array(np.zeros(2, np.float32), 'b')])\n"
         "onnx.save(h.make_model(g, opset_imports=[h.make_opsetid('', 13)]), '" << d << "/tab.onnx')\n";
  auto r = testing::run_command(testing::python() + " " + d + "/make.py");
  ASSERT_EQ(r.exit_code, 0) << r.output;
}

// --eval-only --test-data reads the test data alone: a default training folder the model cannot take is
// never opened (it failed naming Fashion-MNIST's train split); --data alone evaluates the share training
// holds out, and the line says so.
TEST(TrainerReport, CliEvalOnlyReadsOnlyTheTestData) {
  const std::string d = testing::temp_dir("trainer_report_eval_only_test");
  write_two_class_table(d, 40);
  testing::CommandResult r;
  r = testing::run_command(testing::graphrun_cli() + " train " + d + "/tab.onnx --test-data " + d + "/tab.npz --eval-only --threads 1");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(" (tab, 40 examples: '" + d + "/tab.npz')\n"), std::string::npos) << r.output;
  r = testing::run_command(testing::graphrun_cli() + " train " + d + "/tab.onnx --data " + d + "/tab.npz --eval-only --threads 1");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(" (tab, 4 examples: 10% of '" + d + "/tab.npz' held out (seed 0))\n"), std::string::npos) << r.output;
}

// --resume keeps the --metrics lines of the epochs its checkpoint has done (the first run wrote them)
// and appends the rest: the file reads as the uninterrupted run's. A run with nothing left to train
// leaves the file alone (both truncated it: a resumed 4-epoch run kept epochs 3-4, a finished one none).
TEST(TrainerReport, ResumeKeepsTheMetricsOfTheEpochsDone) {
  const std::string d = testing::temp_dir("trainer_report_resume_metrics");
  write_two_class_table(d, 64);
  testing::CommandResult r;
  const std::string cmd = testing::graphrun_cli() + " train " + d + "/tab.onnx --data " + d + "/tab.npz --threads 1 " +
                          "--batch-size 16 --checkpoint-dir " + d + "/ck --metrics " + d + "/m.jsonl --epochs ";
  auto epochs = [&](const std::string& file) {
    std::ifstream f(file);
    std::vector<int> e;
    for (std::string line; std::getline(f, line);) e.push_back(nlohmann::json::parse(line)["epoch"].get<int>());
    return e;
  };
  r = testing::run_command(cmd + "2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream first(d + "/m.jsonl");
  std::string line1;
  std::getline(first, line1);
  r = testing::run_command(cmd + "4 --resume");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(epochs(d + "/m.jsonl"), (std::vector<int>{1, 2, 3, 4}));
  std::ifstream again(d + "/m.jsonl");
  std::string line;
  std::getline(again, line);
  EXPECT_EQ(line, line1);  // the first run's line, as it wrote it
  r = testing::run_command(cmd + "4 --resume");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("nothing left to train"), std::string::npos) << r.output;
  EXPECT_EQ(epochs(d + "/m.jsonl"), (std::vector<int>{1, 2, 3, 4}));
}

}  // namespace
}  // namespace graphrun

// Checkpoints and --resume: a resumed run ends bitwise where the uninterrupted one does (Adam moments,
// per-replica BatchNorm statistics and dropout RNG included); corrupt and foreign checkpoints are refused.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "graph/onnx_io.h"
#include "runtime/checkpoint.h"
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

// An epoch line without its timing ("epoch 2/2  loss ...  test acc ...", less "  S sec  R img/s").
std::string untimed(const std::string& line) { return line.substr(0, line.rfind("  ", line.find(" sec"))); }

// The line of `log` that starts with `prefix` ("" when none).
std::string line_of(const std::string& log, const std::string& prefix) {
  std::istringstream is(log);
  for (std::string l; std::getline(is, l);)
    if (l.rfind(prefix, 0) == 0) return l;
  return "";
}

// Resume equivalence: a run killed after a mid-epoch checkpoint and resumed by a new Trainer ends
// with bitwise the same state (weights, Adam moments) as the uninterrupted run, on two replicas; the
// resumed epoch's figures (loss, train accuracy, examples: the checkpoint holds those of its steps so
// far) and so its printed line and --metrics are the uninterrupted run's too.
TEST(TrainerResume, ResumeFromCheckpointIsBitwiseTheUninterruptedRun) {
  REQUIRE_LENET_AND_DATA();
  Graph model = load_onnx(lenet_path());
  TrainOptions o = quick(2, 32, 5, 200);
  o.epochs = 2;
  o.lr = 2e-3;
  o.pipeline.optimizer.kind = "adamw";
  o.pipeline.optimizer.weight_decay = 0.01f;
  o.schedule.kind = runtime::LrSchedule::Kind::Cosine;
  o.schedule.warmup_steps = 2;
  o.checkpoint_dir = testing::temp_dir("trainer_resume");
  o.checkpoint_every = 3;
  o.keep_checkpoints = 10;
  const std::string dir = testing::temp_dir("trainer_resume_metrics");
  std::ostringstream full_log, resumed_log;
  o.log = &full_log;
  o.metrics_path = dir + "/full.jsonl";
  std::vector<runtime::EpochStats> full_stats;
  std::map<std::string, Tensor> full;
  {
    Trainer t(model, o);
    full_stats = t.fit();
    full = testing::replica_states(t);
  }
  // Checkpoints at global steps 3 (epoch 1), 5 (end of 1), 6 (epoch 2), 9, 10 (end of 2).
  namespace fs = std::filesystem;
  const std::vector<std::string> names = testing::checkpoint_files(o.checkpoint_dir);
  ASSERT_EQ(names.size(), 5u);
  EXPECT_EQ(names[0], runtime::checkpoint_name(0, 3));
  // "Kill" after step 6: only the checkpoints up to it exist.
  for (size_t i = 3; i < names.size(); ++i) fs::remove(o.checkpoint_dir + "/" + names[i]);
  o.log = &resumed_log;
  o.metrics_path = dir + "/resumed.jsonl";
  EXPECT_EQ(testing::expect_resume_ends_with(model, o, full), 10);
  // Epoch 2 resumed after its first step reports the whole epoch, as the uninterrupted run does.
  const std::string a = line_of(full_log.str(), "epoch 2/2"), b = line_of(resumed_log.str(), "epoch 2/2");
  ASSERT_FALSE(a.empty()) << full_log.str();
  EXPECT_EQ(untimed(b), untimed(a)) << resumed_log.str();
  auto last_metrics = [](const std::string& path) {
    std::ifstream f(path);
    std::string line, last;
    while (std::getline(f, line)) last = line;
    auto j = nlohmann::ordered_json::parse(last);
    j.erase("seconds");
    j.erase("images_per_sec");
    return j;
  };
  const auto ma = last_metrics(dir + "/full.jsonl"), mb = last_metrics(dir + "/resumed.jsonl");
  EXPECT_EQ(mb.dump(), ma.dump());
  EXPECT_EQ(ma["epoch"].get<int>(), 2);
  // The checkpoint holds replica 1's figures of epoch 2's first step: its loss sum, exactly.
  const auto ck = runtime::load_checkpoint(o.checkpoint_dir + "/" + names[2]);
  ASSERT_TRUE(ck.meta.count("figures.1"));
  const std::string& f1 = ck.meta.at("figures.1");
  EXPECT_EQ(f1.substr(f1.rfind(' ')), " 16") << f1;  // its 16 examples

  // A checkpoint written before the figures were kept still resumes, reporting its own steps only.
  {
    runtime::Checkpoint old = ck;
    for (auto it = old.meta.begin(); it != old.meta.end();)
      it = it->first.rfind("figures.", 0) == 0 || it->first == "epoch_seconds" ? old.meta.erase(it) : std::next(it);
    runtime::save_checkpoint(o.checkpoint_dir + "/" + names[2], old);
    testing::remove_checkpoints_after(o.checkpoint_dir, names[2]);
    TrainOptions r = o;
    r.resume = true;
    r.log = nullptr;
    r.metrics_path.clear();
    const auto st = Trainer(model, r).fit();
    ASSERT_EQ(st.size(), 1u);
    EXPECT_EQ(st[0].steps, full_stats[1].steps);
    EXPECT_EQ(st[0].images, full_stats[1].images - 32);  // the first step's batch is not counted
  }

  // Keep only the newest few.
  TrainOptions k = o;
  k.keep_checkpoints = 2;
  k.checkpoint_dir = testing::temp_dir("trainer_resume_keep");
  Trainer(model, k).fit();
  int count = 0;
  for (const auto& e : fs::directory_iterator(k.checkpoint_dir)) count += e.path().extension() == ".grck";
  EXPECT_EQ(count, 2);
}

// BatchNorm and Dropout: between the epoch-end broadcasts each replica has its own running
// statistics, and each its own dropout RNG; a mid-epoch checkpoint keeps both, so resuming is still
// bitwise the uninterrupted run. The model is written with onnx.helper at test time.
TEST(TrainerResume, ResumeKeepsPerReplicaRunningStatisticsAndDropoutRng) {
  if (!have_data()) GTEST_SKIP() << "Fashion-MNIST is not installed";
  const std::string dir = testing::temp_dir("trainer_resume_bn_dropout");
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
  const auto full = testing::states_after_fit(model, o);
  // Lost: everything after the checkpoint at step 6 (mid-epoch 2, replicas' statistics differ).
  testing::remove_checkpoints_after(o.checkpoint_dir, runtime::checkpoint_name(1, 6));
  auto ck = runtime::load_checkpoint(runtime::latest_checkpoint(o.checkpoint_dir));
  EXPECT_EQ(ck.meta.at("global_step"), "6");
  EXPECT_TRUE(ck.tensors.count("replica1/bn.mean")) << "the replicas' running statistics should differ mid-epoch";
  testing::expect_resume_ends_with(model, o, full);
  EXPECT_GT(testing::max_abs_diff(full.at("r0/bn.mean"), model.initializers.at("bn.mean")), 0);
}

// The same through the command line: a run whose newest checkpoints are lost (killed after step 4)
// and resumed with --resume saves the same model, bit for bit, as an uninterrupted run.
TEST(TrainerResume, CliResumeSavesTheSameModelAsAnUninterruptedRun) {
  REQUIRE_LENET_AND_DATA();
  const std::string dir = testing::temp_dir("trainer_resume_cli_run");
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

// A --checkpoint-dir is checked before anything trains: one that cannot be created or written fails at
// once (it failed after the first epoch); a fresh run into a folder holding another run's checkpoints is
// refused (their names sort after its own, so pruning deleted the new run's, and --resume continued the
// other run); and a checkpoint past this run's --epochs is refused, not taken as "nothing left to train".
TEST(TrainerResume, CliRefusesACheckpointFolderItCannotUseAsItsOwn) {
  REQUIRE_LENET_AND_DATA();
  const std::string dir = testing::temp_dir("trainer_resume_cli_folder");
  const std::string run = testing::graphrun_cli() + " train " + lenet_path() +
                          " --devices cpu:1 --threads 1 --batch-size 32 --max-steps 2 --checkpoint-dir ";
  auto r = testing::run_command(run + dir + "/ck --epochs 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string ck = runtime::latest_checkpoint(dir + "/ck");
  ASSERT_EQ(ck, dir + "/ck/" + runtime::checkpoint_name(2, 4));
  r = testing::run_command(run + dir + "/ck --epochs 1");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--checkpoint-dir " + dir + "/ck holds the checkpoints of another run (newest " +
                          runtime::checkpoint_name(2, 4) + "): continue that run with --resume"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("epoch 1/"), std::string::npos) << r.output;  // refused before training
  EXPECT_EQ(runtime::latest_checkpoint(dir + "/ck"), ck);
  r = testing::run_command(run + dir + "/ck --epochs 1 --resume");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(ck + ": checkpoint at the end of epoch 2, past this run's --epochs 1"), std::string::npos)
      << r.output;
  r = testing::run_command(run + dir + "/ck --epochs 2 --resume");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("nothing left to train"), std::string::npos) << r.output;
  // --resume into an empty folder starts from the beginning (the requeue pattern: always --resume).
  r = testing::run_command(run + dir + "/fresh --epochs 1 --resume");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("starting from the beginning"), std::string::npos) << r.output;
  // A file where the folder should be: one line at once.
  { std::ofstream(dir + "/file") << "x"; }
  r = testing::run_command(run + dir + "/file --epochs 1");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--checkpoint-dir " + dir + "/file: cannot create the folder"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("training '"), std::string::npos) << r.output;
}


// A resumed run takes new values of the step's settings (--weight-decay, --clip-grad-norm: constants of
// the training graph that the checkpoint holds too, and that won over the command line) and says so;
// momentum turned on starts its buffers at zero. A change to what is trained (--normalize, --freeze,
// --float64, --label-smoothing, ...) is refused with one line naming the flag and both values.
TEST(TrainerResume, CliTakesNewStepSettingsAndRefusesOtherChanges) {
  REQUIRE_LENET_AND_DATA();
  const std::string dir = testing::temp_dir("trainer_resume_cli_settings");
  const std::string run = testing::graphrun_cli() + " train " + lenet_path() +
                          " --devices cpu:1 --threads 1 --batch-size 32 --max-steps 2 ";
  auto r = testing::run_command(run + "--epochs 1 --weight-decay 0.1 --checkpoint-dir " + dir + "/ck");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // The first run's --weight-decay unless `flags` give their own.
  auto resume = [&](const std::string& name, std::string flags) {
    if (flags.find("--weight-decay") == std::string::npos) flags += " --weight-decay 0.1";
    std::filesystem::remove_all(dir + "/" + name);
    std::filesystem::copy(dir + "/ck", dir + "/" + name);
    return testing::run_command(run + "--epochs 2 --resume --checkpoint-dir " + dir + "/" + name + " --save " + dir +
                                "/" + name + ".onnx " + flags);
  };
  r = resume("same", "");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // (Only the longer run is news: --epochs, whose cosine schedule would stretch.)
  EXPECT_NE(r.output.find("resuming with --epochs 2 (the checkpoint's run had 1)\n"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("resuming with --weight-decay"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("resuming with --clip-grad-norm"), std::string::npos) << r.output;
  r = resume("wd3", "--weight-decay 3");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("resuming with --weight-decay 3 (the checkpoint's run had 0.1)"), std::string::npos) << r.output;
  const Graph same = load_onnx(dir + "/same.onnx"), wd3 = load_onnx(dir + "/wd3.onnx");
  // Weight decay 3 at lr 0.2 shrinks every weight by 0.6 per step beyond its gradient's part.
  EXPECT_GT(testing::max_abs_diff(same.initializers.at("fc1.weight"), wd3.initializers.at("fc1.weight")), 1e-3);
  r = resume("clip", "--clip-grad-norm 0.001");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("resuming with --clip-grad-norm 0.001 (the checkpoint's run had 0)"), std::string::npos) << r.output;
  EXPECT_GT(testing::max_abs_diff(same.initializers.at("fc1.weight"), load_onnx(dir + "/clip.onnx").initializers.at("fc1.weight")),
            0);  // (the checkpoint's clipping-free graph gave bitwise the weights of "same")
  // Turned on at resume (clipping above too): their tensors are not in the checkpoint, which failed
  // with "checkpoint has no tensor ...".
  r = resume("on", "--weight-decay 0 --momentum 0.9 --nesterov");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("resuming with --momentum 0.9 (the checkpoint's run had 0; its buffers start at zero)"),
            std::string::npos)
      << r.output;
  for (const auto& [flags, says] : std::vector<std::pair<std::string, std::string>>{
           {"--normalize 0.5,0.25", "--normalize off, this run has 0.5,0.25"},
           {"--freeze conv1", "--freeze none, this run has conv1"},
           {"--float64", "--float64 off, this run has on"},
           {"--label-smoothing 0.1", "--label-smoothing 0, this run has 0.1"},
           {"--seed 7", "--seed 0, this run has 7"}}) {
    r = resume("refused", flags);
    EXPECT_EQ(r.exit_code, 2) << flags << "\n" << r.output;
    EXPECT_NE(r.output.find(": checkpoint was written with " + says + "; resume with the same settings (only --lr, "),
              std::string::npos)
        << flags << "\n" << r.output;
    EXPECT_EQ(r.output.find("epoch 2/2"), std::string::npos) << flags << "\n" << r.output;
  }
}

TEST(TrainerResume, CliRefusesCorruptAndForeignCheckpoints) {
  REQUIRE_LENET_AND_DATA();
  const std::string simplecnn = testing::source_dir() + "/models/simplecnn.onnx";
  const std::string dir = testing::temp_dir("trainer_resume_cli");
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
  for (const char* bad : {" --resume", " --checkpoint-every 5", " --keep-checkpoints 2"}) {
    r = testing::run_command(cli + lenet_path() + bad);
    EXPECT_EQ(r.exit_code, 2) << bad << "\n" << r.output;
    EXPECT_NE(r.output.find("--checkpoint-dir"), std::string::npos) << bad << "\n" << r.output;
  }
  // 2^32 + 1 is checked as given: narrowed to an int first it was 1, and kept one checkpoint.
  r = testing::run_command(cli + lenet_path() + common + dir + "/k --keep-checkpoints 4294967297");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--keep-checkpoints must be in 1..1000000, got 4294967297"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace graphrun

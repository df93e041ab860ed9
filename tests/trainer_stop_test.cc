// Stopping a run on request (runtime/interrupt.h): Ctrl-C, SIGTERM or SIGUSR1 stops every replica at
// the same step, writes a checkpoint of it, and the resumed run ends bitwise where the uninterrupted
// one does; a second signal ends the process at once.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <fstream>
#include <sstream>
#include <thread>

#include "graph/onnx_io.h"
#include "runtime/checkpoint.h"
#include "runtime/interrupt.h"
#include "runtime/trainer.h"
#include "tests/test_util.h"
#include "tests/trainer_test_util.h"

namespace graphrun {
namespace {

using runtime::InterruptedError;
using runtime::TrainOptions;
using runtime::Trainer;
namespace interrupt = runtime::interrupt;

// A log that asks to stop (as SIGINT would) when a line starting with `prefix` is written: the
// trainer's main thread prints it while the replicas run on, so the stop lands at a step after it.
class StopOnLine : public std::streambuf {
 public:
  explicit StopOnLine(std::string prefix) : prefix_(std::move(prefix)) {}
  std::string text;

 protected:
  int overflow(int c) override {
    if (c == EOF) return c;
    text.push_back(static_cast<char>(c));
    line_.push_back(static_cast<char>(c));
    if (c == '\n') {
      if (line_.rfind(prefix_, 0) == 0) interrupt::request(SIGINT);
      line_.clear();
    }
    return c;
  }

 private:
  std::string prefix_, line_;
};

// Runs fit() expecting a stop on request; returns it.
InterruptedError fit_until_stopped(const Graph& model, const TrainOptions& o) {
  try {
    Trainer(model, o).fit();
  } catch (const InterruptedError& e) {
    interrupt::clear();
    return e;
  }
  interrupt::clear();
  ADD_FAILURE() << "fit() was not stopped";
  return InterruptedError("", 0, -1);
}

TrainOptions two_epochs(int replicas, const std::string& name, int64_t steps = 6) {
  TrainOptions o = testing::quick(replicas, 30, steps, 200);
  o.epochs = 2;
  o.lr = 0.05;
  o.pipeline.optimizer.momentum = 0.9f;
  o.checkpoint_dir = testing::temp_dir(name);
  o.keep_checkpoints = 10;
  return o;
}

// The states of `o`'s run, not stopped, without writing checkpoints.
std::map<std::string, Tensor> uninterrupted(const Graph& model, TrainOptions o) {
  o.checkpoint_dir.clear();
  return testing::states_after_fit(model, o);
}

// A request before the first step: with peers a replica stops two steps on (each must learn it before it
// could pass that step), so two replicas both stop at step 2; the checkpoint resumes to bitwise the
// uninterrupted run's states, with momentum.
TEST(TrainerStop, TwoReplicasStopTogetherAndTheCheckpointResumesBitwise) {
  REQUIRE_LENET_AND_DATA();
  const Graph model = load_onnx(testing::lenet_path());
  TrainOptions o = two_epochs(2, "trainer_stop_two");
  const auto full = uninterrupted(model, o);
  interrupt::request(SIGINT);
  const InterruptedError e = fit_until_stopped(model, o);
  EXPECT_EQ(e.signal, SIGINT);
  EXPECT_EQ(e.step, 2);
  EXPECT_NE(std::string(e.what()).find("stopped by SIGINT at step 2 (epoch 1, step 2 of 6)"), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find("--resume"), std::string::npos) << e.what();
  EXPECT_EQ(testing::checkpoint_files(o.checkpoint_dir), std::vector<std::string>{runtime::checkpoint_name(0, 2)});
  EXPECT_EQ(testing::expect_resume_ends_with(model, o, full), 12);
}

// A request while the steps run, on one replica and on three: wherever it lands, the replicas stop at one
// step (their states agree, and the checkpoint resumes bitwise); nothing is saved without
// --checkpoint-dir, and the message says so.
TEST(TrainerStop, AStopMidEpochResumesBitwiseOnOneAndThreeReplicas) {
  REQUIRE_LENET_AND_DATA();
  const Graph model = load_onnx(testing::lenet_path());
  for (int replicas : {1, 3}) {
    SCOPED_TRACE(replicas);
    // Long enough (2 x 150 steps) that the line, printed up to 0.2 s after its step, comes before the end.
    const int64_t S = 150;
    TrainOptions o = two_epochs(replicas, "trainer_stop_mid" + std::to_string(replicas), S);
    o.checkpoint_every = 40;  // segments: the stop may land in any
    const auto full = uninterrupted(model, o);
    StopOnLine buf("step 2 ");
    std::ostream log(&buf);
    o.log = &log;
    o.log_every = 1;
    const InterruptedError e = fit_until_stopped(model, o);
    EXPECT_GE(e.step, 2) << buf.text;
    EXPECT_LT(e.step, 2 * S) << buf.text;
    // Mid-epoch k: (k, step); at the end of epoch k: (k + 1, step), written before the stop.
    EXPECT_EQ(runtime::latest_checkpoint(o.checkpoint_dir),
              o.checkpoint_dir + "/" + runtime::checkpoint_name(static_cast<int>(e.step / S), e.step))
        << e.what();
    o.log = nullptr;
    EXPECT_EQ(testing::expect_resume_ends_with(model, o, full), 2 * S);

    StopOnLine buf2("step 2 ");
    std::ostream log2(&buf2);
    TrainOptions plain = o;
    plain.checkpoint_dir.clear();
    plain.log = &log2;
    plain.log_every = 1;
    plain.save_path = testing::temp_dir("trainer_stop_save") + "/model.onnx";
    const InterruptedError n = fit_until_stopped(model, plain);
    EXPECT_NE(std::string(n.what()).find("nothing saved"), std::string::npos) << n.what();
    EXPECT_NE(std::string(n.what()).find("model.onnx was not"), std::string::npos) << n.what();
  }
}

// A request during an epoch's evaluation or report stops after that epoch, whose checkpoint is the one
// to resume from.
TEST(TrainerStop, ARequestAfterTheStepsOfAnEpochStopsAfterIt) {
  REQUIRE_LENET_AND_DATA();
  const Graph model = load_onnx(testing::lenet_path());
  TrainOptions o = two_epochs(2, "trainer_stop_epoch");
  o.epochs = 3;
  const auto full = uninterrupted(model, o);
  StopOnLine buf("epoch 1/3");
  std::ostream log(&buf);
  o.log = &log;
  const InterruptedError e = fit_until_stopped(model, o);
  EXPECT_EQ(e.step, 6);
  const std::string msg = e.what();
  EXPECT_NE(msg.find("stopped by SIGINT after epoch 1 of 3 (step 6): wrote the checkpoint " + o.checkpoint_dir + "/" +
                     runtime::checkpoint_name(1, 6)),
            std::string::npos)
      << msg;
  o.log = nullptr;
  EXPECT_EQ(testing::expect_resume_ends_with(model, o, full), 18);
}

// The command: a real SIGINT mid-run exits 130 with one line naming the checkpoint, and --resume then
// saves the uninterrupted run's model; two SIGTERMs end the process at once (killed by the signal).
class Child {
 public:
  Child(const std::string& cmd, const std::string& out) : out_(out) {
    pid_ = fork();
    if (pid_ == 0) {
      // As from a shell: the signals neither blocked nor ignored (a test run in the background inherits
      // an ignored SIGINT, which graphrun then leaves ignored).
      sigset_t none;
      sigemptyset(&none);
      sigprocmask(SIG_SETMASK, &none, nullptr);
      for (int sig : {SIGINT, SIGTERM, SIGUSR1}) ::signal(sig, SIG_DFL);
      execl("/bin/sh", "sh", "-c", ("exec " + cmd + " > " + out + " 2>&1").c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
  }
  // Waits (at most a minute) until the output holds `text`; false when the process ended first.
  bool wait_for(const std::string& text) {
    for (int i = 0; i < 6000; ++i) {
      if (output().find(text) != std::string::npos) return true;
      int st = 0;
      if (waitpid(pid_, &st, WNOHANG) == pid_) {
        status_ = st, pid_ = -1;
        return output().find(text) != std::string::npos;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }
  void signal(int sig) { kill(pid_, sig); }
  int wait() {
    if (pid_ > 0) waitpid(pid_, &status_, 0), pid_ = -1;
    return status_;
  }
  std::string output() const {
    std::ifstream f(out_);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }
  ~Child() {
    if (pid_ > 0) kill(pid_, SIGKILL), waitpid(pid_, nullptr, 0);
  }

 private:
  std::string out_;
  pid_t pid_ = -1;
  int status_ = 0;
};

// No signal may interrupt a compute thread: oneDNN's JIT GEMM kernels point the stack pointer into the
// heap while they run, so a signal frame pushed there corrupts the heap (a Ctrl-C during an evaluation
// of one replica aborted with "corrupted size vs. prev_size" before). Every thread started after
// take_signals() blocks the signals, and the one thread that takes them has them waiting.
TEST(TrainerStop, ThreadsStartedAfterTakingTheSignalsBlockThem) {
  // (The death test below reruns this test in a new process, where the signal thread starts again.)
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  interrupt::take_signals(false);
  sigset_t mask;
  std::thread([&] { pthread_sigmask(SIG_BLOCK, nullptr, &mask); }).join();
  for (int sig : {SIGINT, SIGTERM, SIGUSR1}) EXPECT_EQ(sigismember(&mask, sig), 1) << interrupt::name(sig);
  // Not armed: a signal still ends the process as it would without graphrun.
  EXPECT_EXIT(
      {
        kill(getpid(), SIGTERM);
        std::this_thread::sleep_for(std::chrono::seconds(30));  // the signal thread ends the process meanwhile
      },
      ::testing::KilledBySignal(SIGTERM), "");
}

TEST(TrainerStop, CtrlCStopsTheCommandWithACheckpointAndResumeFinishesTheRun) {
  REQUIRE_LENET_AND_DATA();
  const std::string dir = testing::temp_dir("trainer_stop_cli");
  const std::string run = testing::graphrun_cli() + " train " + testing::lenet_path() +
                          " --devices cpu:2 --threads 1 --batch-size 32 --max-steps 200 --epochs 2 --lr 0.05"
                          " --momentum 0.9 --log-every 1 --checkpoint-dir " + dir + "/ck";
  {
    Child c(run + " --save " + dir + "/stopped.onnx", dir + "/stopped.out");
    ASSERT_TRUE(c.wait_for("step 5 ")) << c.output();
    c.signal(SIGINT);
    const int st = c.wait();
    const std::string out = c.output();
    ASSERT_TRUE(WIFEXITED(st)) << out;
    ASSERT_EQ(WEXITSTATUS(st), 130) << out;
    EXPECT_NE(out.find("graphrun train: SIGINT: stopping after the steps under way"), std::string::npos) << out;
    EXPECT_NE(out.find("graphrun train: stopped by SIGINT at step "), std::string::npos) << out;
    EXPECT_NE(out.find("wrote the checkpoint " + dir + "/ck/"), std::string::npos) << out;
    EXPECT_FALSE(std::filesystem::exists(dir + "/stopped.onnx"));
  }
  auto r = testing::run_command(run + " --resume --save " + dir + "/resumed.onnx");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("resumed from"), std::string::npos) << r.output;
  std::string full_run = run;
  full_run.replace(full_run.find(" --checkpoint-dir"), std::string::npos, "");
  r = testing::run_command(full_run + " --save " + dir + "/full.onnx");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Graph a = load_onnx(dir + "/full.onnx"), b = load_onnx(dir + "/resumed.onnx");
  for (const auto& [name, t] : a.initializers) EXPECT_EQ(testing::max_abs_diff(b.initializers.at(name), t), 0) << name;

  // A second signal does what it would have done without graphrun.
  std::string long_run = full_run;
  long_run.replace(long_run.find("--epochs 2"), 10, "--epochs 50");
  Child c(long_run, dir + "/twice.out");
  ASSERT_TRUE(c.wait_for("step 5 ")) << c.output();
  c.signal(SIGTERM);
  ASSERT_TRUE(c.wait_for("stopping after the steps under way")) << c.output();
  c.signal(SIGTERM);
  const int st = c.wait();
  // (The first stop may win the race and exit 143 before the second signal lands.)
  EXPECT_TRUE((WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM) || (WIFEXITED(st) && WEXITSTATUS(st) == 143)) << c.output();
}

}  // namespace
}  // namespace graphrun

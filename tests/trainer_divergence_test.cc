// A NaN or Inf loss stops training: the error names the first bad step and the last good checkpoint,
// which is kept (graphrun train exits with code 3).
#include <gtest/gtest.h>

#include <cmath>

#include "graph/onnx_io.h"
#include "runtime/checkpoint.h"
#include "runtime/trainer.h"
#include "tests/test_util.h"
#include "tests/trainer_test_util.h"

namespace graphrun {
namespace {

using runtime::TrainOptions;
using runtime::Trainer;
using testing::lenet_path;
using testing::quick;

TEST(TrainerDivergence, NanLossStopsNamingTheStepAndKeepsTheLastGoodCheckpoint) {
  REQUIRE_LENET_AND_DATA();
  TrainOptions o = quick(2, 32, 20, 200);
  o.lr = 1e6;
  o.checkpoint_dir = testing::temp_dir("trainer_divergence");
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
  for (const auto& [name, v] : ck.tensors) {
    if (v.dtype() != DType::F32) continue;
    for (int64_t i = 0; i < v.numel(); ++i) ASSERT_TRUE(std::isfinite(v.data<float>()[i])) << name;
  }
}

TEST(TrainerDivergence, CliExitsWithCode3NamingTheStep) {
  REQUIRE_LENET_AND_DATA();
  auto r = testing::run_command(testing::graphrun_cli() + " train " + lenet_path() +
                                " --devices cpu:2 --batch-size 32 --max-steps 20 --threads 1 --lr 1e6");
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("not finite at step"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace graphrun

// Learning-rate schedules against their closed forms.
#include <gtest/gtest.h>

#include <cmath>

#include "graph/error.h"
#include "runtime/optim/schedule.h"

namespace graphrun::runtime {
namespace {

TEST(Schedule, ConstantWithWarmup) {
  LrSchedule s;
  s.base_lr = 0.4;
  s.warmup_steps = 4;
  EXPECT_DOUBLE_EQ(learning_rate(s, 0), 0.1);
  EXPECT_DOUBLE_EQ(learning_rate(s, 3), 0.4);
  EXPECT_DOUBLE_EQ(learning_rate(s, 1000), 0.4);
}

TEST(Schedule, StepDecay) {
  LrSchedule s;
  s.kind = LrSchedule::Kind::Step;
  s.base_lr = 1.0;
  s.step_size = 10;
  s.gamma = 0.5;
  EXPECT_DOUBLE_EQ(learning_rate(s, 9), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate(s, 10), 0.5);
  EXPECT_DOUBLE_EQ(learning_rate(s, 25), 0.25);
}

TEST(Schedule, CosineReachesMinimumAtTheEnd) {
  LrSchedule s;
  s.kind = LrSchedule::Kind::Cosine;
  s.base_lr = 0.2;
  s.min_lr = 0.0;
  s.total_steps = 100;
  EXPECT_DOUBLE_EQ(learning_rate(s, 0), 0.2);
  EXPECT_NEAR(learning_rate(s, 50), 0.1, 1e-12);
  EXPECT_NEAR(learning_rate(s, 100), 0.0, 1e-12);
  EXPECT_NEAR(learning_rate(s, 150), 0.0, 1e-12);
}

TEST(Schedule, UnknownKindIsAnError) { EXPECT_THROW(parse_schedule_kind("linear-ish"), Error); }

}  // namespace
}  // namespace graphrun::runtime

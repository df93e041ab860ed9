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

// The README's formulas, with warmup: (s + 1) / W for s < W, then the decay over s - W. The cosine's
// last step of a T-step run (s = T - 1) still trains: 0 comes only at s = T, after the run.
TEST(Schedule, ReadmeFormulasWithWarmup) {
  LrSchedule s;
  s.base_lr = 1.0;
  s.warmup_steps = 2;
  s.kind = LrSchedule::Kind::Step;
  s.step_size = 3;
  s.gamma = 0.5;
  EXPECT_DOUBLE_EQ(learning_rate(s, 0), 0.5);
  EXPECT_DOUBLE_EQ(learning_rate(s, 1), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate(s, 4), 1.0);   // floor((4 - 2) / 3) = 0
  EXPECT_DOUBLE_EQ(learning_rate(s, 5), 0.5);   // floor(3 / 3) = 1
  s.kind = LrSchedule::Kind::Cosine;
  s.warmup_steps = 0;
  s.total_steps = 6;
  EXPECT_NEAR(learning_rate(s, 5), 0.5 * (1 + std::cos(M_PI * 5 / 6)), 1e-15);  // 0.067: the last step
  EXPECT_NEAR(learning_rate(s, 5), 0.067, 1e-3);
  s.warmup_steps = 2;
  EXPECT_NEAR(learning_rate(s, 3), 0.5 * (1 + std::cos(M_PI * 1 / 4)), 1e-15);
}

TEST(Schedule, UnknownKindIsAnError) { EXPECT_THROW(parse_schedule_kind("linear-ish"), Error); }

}  // namespace
}  // namespace graphrun::runtime

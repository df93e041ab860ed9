// Learning-rate schedules (warmup, step decay, cosine), as PyTorch's LinearLR/StepLR/CosineAnnealingLR per step.
#include "runtime/optim/schedule.h"

#include <algorithm>
#include <cmath>

#include "graph/error.h"

namespace graphrun::runtime {

LrSchedule::Kind parse_schedule_kind(const std::string& s) {
  if (s == "constant" || s == "none") return LrSchedule::Kind::Constant;
  if (s == "step") return LrSchedule::Kind::Step;
  if (s == "cosine") return LrSchedule::Kind::Cosine;
  GR_FAIL("unknown learning-rate schedule '" << s << "' (choose constant, step or cosine)");
}

const char* schedule_kind_name(LrSchedule::Kind k) {
  switch (k) {
    case LrSchedule::Kind::Step:
      return "step";
    case LrSchedule::Kind::Cosine:
      return "cosine";
    default:
      return "constant";
  }
}

double learning_rate(const LrSchedule& s, int64_t step) {
  if (s.warmup_steps > 0 && step < s.warmup_steps)
    return s.base_lr * static_cast<double>(step + 1) / static_cast<double>(s.warmup_steps);
  int64_t t = step - s.warmup_steps;
  switch (s.kind) {
    case LrSchedule::Kind::Step:
      if (s.step_size <= 0) return s.base_lr;
      return s.base_lr * std::pow(s.gamma, static_cast<double>(t / s.step_size));
    case LrSchedule::Kind::Cosine: {
      int64_t span = std::max<int64_t>(1, s.total_steps - s.warmup_steps);
      double frac = std::min(1.0, static_cast<double>(t) / static_cast<double>(span));
      return s.min_lr + 0.5 * (s.base_lr - s.min_lr) * (1.0 + std::cos(M_PI * frac));
    }
    default:
      return s.base_lr;
  }
}

}  // namespace graphrun::runtime

// Learning-rate schedules: the rate a training step uses, from its global step number.
#pragma once
#include <cstdint>
#include <string>

namespace graphrun::runtime {

struct LrSchedule {
  enum class Kind { Constant, Step, Cosine };
  Kind kind = Kind::Constant;
  double base_lr = 0.1;
  int64_t warmup_steps = 0;    // linear ramp from base_lr/warmup_steps up to base_lr
  int64_t step_size = 0;       // Step: multiply by gamma every step_size steps (after warmup)
  double gamma = 0.1;          // Step
  int64_t total_steps = 0;     // Cosine: decays to min_lr at total_steps
  double min_lr = 0.0;         // Cosine
};

// Parses "constant", "step", "cosine"; throws Error otherwise.
LrSchedule::Kind parse_schedule_kind(const std::string& s);
// The name parse_schedule_kind reads: "constant", "step" or "cosine".
const char* schedule_kind_name(LrSchedule::Kind k);
// The learning rate of global step `step` (0-based).
double learning_rate(const LrSchedule& s, int64_t step);

}  // namespace graphrun::runtime

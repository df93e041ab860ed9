// What a training run is, as its flags: the one list that MPI ranks compare (check_world_agrees) and
// that a checkpoint records and --resume compares (trainer_checkpoint.cc).
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "runtime/checkpoint.h"
#include "runtime/trainer_parts.h"

namespace graphrun::runtime {

namespace {

// The shortest text that reads back as v (as a float where `as_float`): 0.9f is "0.9", not
// "0.89999997615814209".
std::string shortest(double v, bool as_float) {
  char buf[64];
  for (int p = 1; p <= 17; ++p) {
    std::snprintf(buf, sizeof buf, "%.*g", p, v);
    const double back = std::strtod(buf, nullptr);
    if (as_float ? static_cast<float>(back) == static_cast<float>(v) : back == v) break;
  }
  return buf;
}

std::string on_off(bool b) { return b ? "on" : "off"; }

}  // namespace

std::vector<RunSetting> run_settings(const TrainOptions& o, const Graph& model) {
  using R = RunSetting::Resume;
  const auto& p = o.pipeline;
  const auto& opt = p.optimizer;
  auto f = [](float v) { return shortest(v, true); };
  auto d = [](double v) { return shortest(v, false); };
  bool f64 = false;
  for (const auto& [_, t] : model.initializers) f64 |= t.dtype() == DType::F64;
  std::string normalize = "off";
  if (o.normalize) normalize = f(o.norm_mean) + "," + f(o.norm_std);
  if (!o.channel_norm.empty()) {
    auto list = [&](const std::vector<float>& v) {
      std::string s;
      for (float x : v) s += (s.empty() ? "" : ",") + f(x);
      return s;
    };
    normalize = list(o.channel_norm.mean) + "/" + list(o.channel_norm.std);
  }
  std::string freeze;
  for (const auto& name : p.freeze) freeze += (freeze.empty() ? "" : ",") + name;
  std::string output = p.output;
  if (output.empty() && !model.outputs.empty()) output = model.outputs[0];
  return {
      // What is trained, on what, from where: the same on every rank, and on resume.
      {"--float64", on_off(f64), R::Same},
      {"model", model.name + " " + shapes_signature(model.initializers),
       R::Unchecked},  // (checked against a checkpoint's "signature")
      {"--batch-size", std::to_string(o.batch_size), R::Same},
      {"--seed", std::to_string(o.seed), R::Same},
      {"--optimizer", opt.kind, R::Same},
      {"--loss", autodiff::loss_kind_name(p.loss), R::Same},
      {"--loss-output", output, R::Same},
      {"--label-smoothing", d(p.label_smoothing), R::Same},
      {"--labels", o.labels, R::Same},
      {"--normalize", normalize, R::Same},
      {"--augment", on_off(o.augment), R::Same},
      {"--freeze", freeze.empty() ? "none" : freeze, R::Same},
      {"--sync-bn", on_off(p.sync_bn), R::Same},
      // The step's size: a resumed run may take new values (as one lowers the lr by hand).
      {"--lr", d(o.lr), R::MayChange},
      {"--lr-schedule", schedule_kind_name(o.schedule.kind), R::MayChange},
      {"--warmup-steps", std::to_string(o.schedule.warmup_steps), R::MayChange},
      {"--lr-step-size", std::to_string(o.schedule.step_size), R::MayChange},
      {"--lr-gamma", d(o.schedule.gamma), R::MayChange},
      {"--momentum", f(opt.momentum), R::MayChange},
      {"--nesterov", on_off(opt.nesterov), R::MayChange},
      {"--weight-decay", f(opt.weight_decay), R::MayChange},
      {"--clip-grad-norm", f(opt.clip_grad_norm), R::MayChange},
      {"--beta1", f(opt.beta1), R::MayChange},
      {"--beta2", f(opt.beta2), R::MayChange},
      {"--eps", f(opt.eps), R::MayChange},
      // How long: a resumed run may be longer (a cosine schedule then spans the longer run).
      {"--epochs", std::to_string(o.epochs), R::MayChange},
      {"--max-steps", std::to_string(o.max_steps), R::MayChange},
      // On what share of the data (the checkpoint records the training set's size).
      {"--train-limit", std::to_string(o.train_limit), R::Unchecked},
      {"--test-limit", std::to_string(o.test_limit), R::Unchecked},
      {"--val-split", o.val_split < 0 ? std::string("default") : d(o.val_split), R::Unchecked},
      {"--resume", on_off(o.resume), R::Unchecked},
  };
}

}  // namespace graphrun::runtime

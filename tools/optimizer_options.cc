// Optimizer flags: parsed here for train, and for grad, show and plan (what `graphrun train` would put
// into the replica graph), so that every command reads and checks them alike.
#include "tools/optimizer_options.h"

#include <cmath>

namespace graphrun::cli {

std::vector<Option> optimizer_options() {
  return {
      {"optimizer", "NAME", "with --devices: the update nodes, sgd (default), adam, adamw or adagrad, as graphrun train"},
      {"momentum", "M", "with --devices: SGD momentum (an ai.onnx.preview.training Momentum node)"},
      {"nesterov", "", "with --devices: Nesterov momentum"},
      {"weight-decay", "WD", "with --devices: weight decay (L2; decoupled for adamw; default 0, 0.01 for adamw)"},
      {"beta1", "B1", "with --devices: adam/adamw beta1 (default 0.9)"},
      {"beta2", "B2", "with --devices: adam/adamw beta2 (default 0.999)"},
      {"eps", "EPS", "with --devices: adam/adamw epsilon (default 1e-8), adagrad's (default 1e-10)"},
      {"lr-decay", "D", "with --devices: adagrad's learning-rate decay, lr / (1 + step * D) (default 0)"},
      {"clip-grad-norm", "MAX", "with --devices: scale the summed gradients to a global L2 norm of at most MAX"},
  };
}

double default_weight_decay(const std::string& kind) { return kind == "adamw" ? 0.01 : 0; }

namespace {

// --clip-grad-norm MAX: 0 when not given; a usage error unless MAX is a positive number.
float parse_clip_grad_norm(const Args& args) {
  if (!args.has("clip-grad-norm")) return 0;
  const double v = args.get_double("clip-grad-norm", 0);
  if (!(v > 0) || !std::isfinite(v) || v > 3.4e38)
    throw Error(args.usage_error("--clip-grad-norm must be a positive number, got " + args.get("clip-grad-norm")));
  return static_cast<float>(v);
}

}  // namespace

runtime::OptimizerOptions parse_optimizer_options(const Args& args, bool data_parallel) {
  auto bad = [&](const std::string& msg) { return Error(args.usage_error(msg)); };
  for (const auto& o : optimizer_options())
    if (args.has(o.name) && !data_parallel) throw bad("--" + o.name + " needs --devices");
  runtime::OptimizerOptions opt;
  opt.kind = args.get("optimizer", "sgd");
  if (opt.kind != "sgd" && opt.kind != "adam" && opt.kind != "adamw" && opt.kind != "adagrad")
    throw bad("--optimizer '" + opt.kind + "': choose sgd, adam, adamw or adagrad");
  auto unit = [&](const char* f, double dflt) {
    const double v = args.get_double(f, dflt);
    if (!(v >= 0 && v < 1)) throw bad(std::string("--") + f + " must be in [0, 1), got " + args.get(f));
    return static_cast<float>(v);
  };
  opt.momentum = unit("momentum", 0);
  opt.nesterov = args.has("nesterov");
  if (opt.nesterov && opt.momentum == 0) throw bad("--nesterov needs a --momentum above 0");
  if (opt.kind != "sgd" && (opt.momentum > 0 || opt.nesterov)) throw bad("--momentum/--nesterov are for --optimizer sgd");
  if (opt.kind == "sgd")
    for (const char* f : {"beta1", "beta2", "eps"})
      if (args.has(f)) throw bad(std::string("--") + f + " is for --optimizer adam, adamw or adagrad");
  if (opt.kind == "adagrad")
    for (const char* f : {"beta1", "beta2"})
      if (args.has(f)) throw bad(std::string("--") + f + " is for --optimizer adam or adamw");
  if (args.has("lr-decay") && opt.kind != "adagrad") throw bad("--lr-decay is for --optimizer adagrad");
  const double lr_decay = args.get_double("lr-decay", 0);
  if (!(lr_decay >= 0) || !std::isfinite(lr_decay) || lr_decay > 3.4e38)
    throw bad("--lr-decay must be >= 0, got " + args.get("lr-decay"));
  opt.lr_decay = static_cast<float>(lr_decay);
  const double wd = args.get_double("weight-decay", default_weight_decay(opt.kind));
  if (!(wd >= 0) || !std::isfinite(wd)) throw bad("--weight-decay must be >= 0, got " + args.get("weight-decay"));
  opt.weight_decay = static_cast<float>(wd);
  opt.beta1 = unit("beta1", 0.9);
  opt.beta2 = unit("beta2", 0.999);
  const double eps = args.get_double("eps", opt.kind == "adagrad" ? 1e-10 : 1e-8);  // torch.optim's defaults
  if (!(eps > 0) || !std::isfinite(eps)) throw bad("--eps must be a positive number, got " + args.get("eps"));
  opt.eps = static_cast<float>(eps);
  opt.clip_grad_norm = parse_clip_grad_norm(args);
  return opt;
}

}  // namespace graphrun::cli

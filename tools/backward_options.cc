// The pipeline options `grad` and `show` share, read into runtime::PipelineOptions.
#include "tools/backward_options.h"

#include "runtime/trainer.h"
#include "tools/optimizer_options.h"

namespace graphrun::cli {

std::vector<Option> backward_options() {
  return {
      {"loss", "KIND",
       "cross-entropy (default; on logits, int64 labels [N]), mse (float target, output's\n"
       "                            shape) or output (the model computes its loss: the mean of --loss-output)"},
      {"freeze", "NAMES",
       "parameters that get no gradient (comma-separated or repeated); a module\n"
       "                            name (fc1) freezes its parameters (fc1.weight, fc1.bias)",
       true},
      {"loss-output", "NAME", "the model output the loss reads (default: the first output)"},
      label_smoothing_option(),
  };
}

Option label_smoothing_option() {
  return {"label-smoothing", "EPS", "cross-entropy with label smoothing EPS, 0 <= EPS < 1 (default 0: none), as\n"
                                    "                            torch.nn.CrossEntropyLoss(label_smoothing=EPS): (1 - EPS) x NLL\n"
                                    "                            + EPS x mean over examples of -(1/C) sum_c log_softmax(x)_c"};
}

autodiff::LossKind parse_loss(const Args& args) {
  autodiff::LossKind k = autodiff::LossKind::CrossEntropy;
  const std::string word = args.get("loss", "cross-entropy");
  if (!autodiff::parse_loss_kind(word, &k))
    throw Error(args.usage_error("--loss '" + word +
                                 "': choose cross-entropy (class labels), mse (float targets) or "
                                 "output (the model's own loss, no labels)"));
  return k;
}

double parse_label_smoothing(const Args& args, autodiff::LossKind loss) {
  if (!args.has("label-smoothing")) return 0;
  const double eps = args.get_double("label-smoothing", 0);  // not a number: a usage error
  if (!(eps >= 0 && eps < 1))
    throw Error(args.usage_error("--label-smoothing must be in [0, 1), got " + args.get("label-smoothing")));
  if (loss != autodiff::LossKind::CrossEntropy)
    throw Error(args.usage_error(std::string("--label-smoothing is for --loss cross-entropy, not --loss ") +
                                 autodiff::loss_kind_name(loss)));
  return eps;
}

Option dump_after_option() {
  return {"dump-after", "PASS", "print the graph after pass PASS of the pipeline, as text (the names:\n"
                                "                            graphrun show MODEL --passes)"};
}

void check_dump_after_option(const Args& args) {
  if (!args.has("dump-after")) return;
  try {
    passes::check_dump_after(args.get("dump-after"));
  } catch (const Error& e) {
    throw Error(args.usage_error(e.what()));
  }
}

Option sync_bn_option() {
  return {"sync-bn", "", "BatchNorm normalises over the global batch of all replicas (SyncBatchNorm: the\n"
                         "                            statistics summed by ReplicaSum nodes, running statistics alike)"};
}

runtime::PipelineOptions parse_pipeline_options(const Args& args, bool data_parallel) {
  runtime::PipelineOptions po;
  po.data_parallel = data_parallel;
  po.loss = parse_loss(args);
  po.output = args.get("loss-output");
  po.label_smoothing = parse_label_smoothing(args, po.loss);
  for (const auto& f : args.all("freeze")) po.freeze.insert(f);
  if (args.has("devices")) {
    try {
      po.devices = runtime::parse_devices(args.get("devices"));
    } catch (const Error& e) {
      throw Error(args.usage_error(std::string("--devices: ") + e.what()));
    }
  }
  po.optimizer = parse_optimizer_options(args, data_parallel);
  if (args.has("sync-bn") && !data_parallel) throw Error(args.usage_error("--sync-bn needs --devices"));
  po.sync_bn = args.has("sync-bn");
  check_dump_after_option(args);
  po.dump_after = args.get("dump-after");
  return po;
}

}  // namespace graphrun::cli

// Options shared by `graphrun grad` and `graphrun show --backward`, turned into the training graph.
#include "tools/backward_options.h"

namespace graphrun::cli {

std::vector<Option> backward_options() {
  return {
      {"loss", "KIND", "cross-entropy (default; on logits, int64 labels [N]) or mse (float target, output's shape)"},
      {"freeze", "NAMES", "parameters that get no gradient (comma-separated or repeated)", true},
      {"loss-output", "NAME", "the model output the loss reads (default: the first output)"},
  };
}

BackwardRequest parse_backward_options(const Args& args) {
  BackwardRequest r;
  const std::string loss = args.get("loss", "cross-entropy");
  if (loss == "cross-entropy") r.loss.kind = autodiff::LossKind::CrossEntropy;
  else if (loss == "mse") r.loss.kind = autodiff::LossKind::MSE;
  else throw Error(args.usage_error("--loss must be cross-entropy or mse, got '" + loss + "'"));
  r.loss.output = args.get("loss-output");
  for (const auto& f : args.all("freeze")) r.backward.freeze.insert(f);
  return r;
}

Graph build_backward_graph(const Graph& model, const BackwardRequest& req) {
  return autodiff::backward(autodiff::attach_loss(model, req.loss), req.backward);
}

}  // namespace graphrun::cli

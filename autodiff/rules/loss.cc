// Gradient rules of the losses: SoftmaxCrossEntropyLoss (ai.graphrun.SoftmaxCrossEntropyLossGrad from the
// forward's log_prob output, added to the forward node when the model did not ask for it) and
// NegativeLogLikelihoodLoss (ai.graphrun.NegativeLogLikelihoodLossGrad). Labels and weights get none.
#include "autodiff/rules/rules.h"

namespace graphrun::autodiff {

void softmax_cross_entropy_loss_grad(GradContext& ctx) {
  if (!ctx.needs(0)) return;
  const Node& n = ctx.fwd();
  std::string log_prob = ctx.fwd_output(1);
  std::string grad;
  if (!ctx.dy(0).empty()) {
    std::map<std::string, Attribute> attrs{{"reduction", Attribute::Str(n.attr_s("reduction", "mean"))}};
    if (const Attribute* a = n.attr("ignore_index")) attrs["ignore_index"] = *a;
    std::vector<std::string> ins{ctx.dy(0), log_prob, ctx.in(1)};
    if (n.has_input(2)) ins.push_back(ctx.in(2));
    grad = ctx.op("SoftmaxCrossEntropyLossGrad", ins, attrs, kGraphrunDomain);
  }
  if (!ctx.dy(1).empty()) {
    // log_prob = LogSoftmax(scores) over the class axis 1.
    const std::string& dlp = ctx.dy(1);
    std::string s = ctx.reduce_sum(dlp, {1}, true);
    std::string d = ctx.op("Sub", {dlp, ctx.op("Mul", {ctx.op("Exp", {log_prob}), s})});
    grad = grad.empty() ? d : ctx.op("Add", {grad, d});
  }
  ctx.set_dx(0, grad);
}

void nll_loss_grad(GradContext& ctx) {
  if (!ctx.needs(0) || ctx.dy().empty()) return;
  const Node& n = ctx.fwd();
  std::map<std::string, Attribute> attrs{{"reduction", Attribute::Str(n.attr_s("reduction", "mean"))}};
  if (const Attribute* a = n.attr("ignore_index")) attrs["ignore_index"] = *a;
  std::vector<std::string> ins{ctx.dy(), ctx.in(0), ctx.in(1)};
  if (n.has_input(2)) ins.push_back(ctx.in(2));
  ctx.set_dx(0, ctx.op("NegativeLogLikelihoodLossGrad", ins, attrs, kGraphrunDomain));
}

GR_REGISTER_OPS(loss) {
  ops.op("NegativeLogLikelihoodLoss").gradient(nll_loss_grad);
  ops.op("SoftmaxCrossEntropyLoss").gradient(softmax_cross_entropy_loss_grad);
}

}  // namespace graphrun::autodiff

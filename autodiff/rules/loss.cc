// Gradient rules of the losses: SoftmaxCrossEntropyLoss (ai.graphrun.SoftmaxCrossEntropyLossGrad from the
// forward's log_prob output, added to the forward node when the model did not ask for it) and
// NegativeLogLikelihoodLoss (ai.graphrun.NegativeLogLikelihoodLossGrad), and the rules of those two gradient ops
// for second derivatives. Labels and weights get none.
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

namespace {

// The loss gradient ops' attributes and inputs (dloss replaced by `dloss`): reduction, ignore_index, weights.
std::string loss_grad_again(GradContext& ctx, const char* op, const std::string& dloss, const std::string& x) {
  const Node& n = ctx.fwd();
  std::map<std::string, Attribute> attrs{{"reduction", Attribute::Str(n.attr_s("reduction", "mean"))}};
  if (const Attribute* a = n.attr("ignore_index")) attrs["ignore_index"] = *a;
  std::vector<std::string> ins{dloss, x, ctx.in(2)};
  if (n.has_input(3)) ins.push_back(ctx.in(3));
  return ctx.op(op, ins, attrs, kGraphrunDomain);
}

// Both loss gradients are linear in dloss: dX = dloss * K with K the gradient at dloss = 1 (ones per example for
// reduction 'none'), so d dloss = the sum of g * K, over everything for a scalar dloss, over the class axis for
// 'none'.
void d_dloss(GradContext& ctx, const char* op) {
  if (!ctx.needs(0) || ctx.dy().empty()) return;
  const std::string& x = ctx.in(1);
  const bool per_example = ctx.fwd().attr_s("reduction", "mean") == "none";
  std::string one = ctx.scalar(1, ctx.dtype(x));
  if (per_example) one = ctx.op("Expand", {one, ctx.shape_of(ctx.in(0))});
  const std::string gk = ctx.op("Mul", {ctx.dy(), loss_grad_again(ctx, op, one, x)});
  ctx.set_dx(
      0, per_example ? ctx.reduce_sum(gk, {1}, false) : ctx.op("ReduceSum", {gk}, {{"keepdims", Attribute::Int(0)}}));
}

}  // namespace

// Second derivatives through the loss gradients (double backprop: a penalty on the loss's gradient w.r.t. the
// input; meta-learning through an inner step). Labels and weights get none, as in the first derivatives.
// SoftmaxCrossEntropyLossGrad = F * (exp(log_prob) - onehot(label)), F per example (weight, ignore_index, the
// reduction's scale, dloss): d log_prob = g * exp(log_prob) * F, with F * onehot = -NegativeLogLikelihoodLossGrad
// of the same arguments, summed over the class axis to give F.
void softmax_cross_entropy_loss_grad_grad(GradContext& ctx) {
  d_dloss(ctx, "SoftmaxCrossEntropyLossGrad");
  if (!ctx.needs(1) || ctx.dy().empty()) return;
  const std::string& lp = ctx.in(1);
  const std::string minus_f =
      ctx.reduce_sum(loss_grad_again(ctx, "NegativeLogLikelihoodLossGrad", ctx.in(0), lp), {1}, true);
  ctx.set_dx(1, ctx.op("Neg", {ctx.op("Mul", {ctx.op("Mul", {ctx.dy(), ctx.op("Exp", {lp})}), minus_f})}));
}

// NegativeLogLikelihoodLossGrad does not depend on its input's values (it gives the shape).
void nll_loss_grad_grad(GradContext& ctx) { d_dloss(ctx, "NegativeLogLikelihoodLossGrad"); }

GR_REGISTER_OPS(loss) {
  ops.op("NegativeLogLikelihoodLoss").gradient(nll_loss_grad);
  ops.op("SoftmaxCrossEntropyLoss").gradient(softmax_cross_entropy_loss_grad);
  ops.op(kGraphrunDomain, "SoftmaxCrossEntropyLossGrad").gradient(softmax_cross_entropy_loss_grad_grad);
  ops.op(kGraphrunDomain, "NegativeLogLikelihoodLossGrad").gradient(nll_loss_grad_grad);
}

}  // namespace graphrun::autodiff

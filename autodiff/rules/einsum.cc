// Gradient rule of Einsum: operand k's gradient is the Einsum of dY with the other operands onto k's term
// ("bhid,bhjd->bhij": dA = "bhij,bhjd->bhid"), for any number of operands. Labels only operand k has (summed
// away by the forward) come back by Unsqueeze + Expand; broadcast "..." dims by SumToShape. Repeated labels
// within one operand (diagonals) have no rule.
#include "autodiff/rules/rules.h"
#include "graph/einsum_equation.h"

namespace graphrun::autodiff {
namespace {

void einsum_grad(GradContext& ctx) {
  const Node& n = ctx.fwd();
  if (ctx.dy().empty()) return;
  const EinsumEquation eq = parse_einsum(n.attr_s("equation", ""));
  const size_t ops = eq.inputs.size();
  GR_CHECK(ops == ctx.num_inputs(), n.describe() << ": the equation has " << ops << " operands, the node "
                                                 << ctx.num_inputs());
  size_t with_ellipsis = 0;
  for (const auto& t : eq.inputs) with_ellipsis += einsum_has_ellipsis(t);
  for (size_t k = 0; k < ops; ++k) {
    if (!ctx.needs(k)) continue;
    const std::string& term = eq.inputs[k];
    const std::string letters = einsum_letters(term);
    for (char c : letters)
      GR_CHECK(std::count(letters.begin(), letters.end(), c) == 1,
               n.describe() << ": no gradient for Einsum operand " << k << " ('" << term << "'): label '" << c
                            << "' repeats (a diagonal)");
    GR_CHECK(!einsum_has_ellipsis(term) || einsum_has_ellipsis(eq.output),
             n.describe() << ": no gradient for Einsum operand " << k << " ('" << term
                          << "'): its '...' dims are summed away");
    // The labels the gradient einsum can produce, and the ones only operand k had.
    std::string rest = eq.output;
    for (size_t j = 0; j < ops; ++j)
      if (j != k) rest += eq.inputs[j];
    std::string kept, before, after;  // before / after "...": where the dropped labels sit
    std::vector<int64_t> dropped_axes;
    const size_t dots = term.find("...");
    for (size_t i = 0; i < term.size(); ++i) {
      const char c = term[i];
      if (c == '.') {
        kept += "...";
        i += 2;
        continue;
      }
      if (rest.find(c) != std::string::npos) {
        kept += c;
        continue;
      }
      if (dots == std::string::npos || i < dots) {
        dropped_axes.push_back(static_cast<int64_t>(i));
      } else {
        // Counted from the end: the ellipsis' rank is not known here.
        const std::string tail = term.substr(dots + 3);
        dropped_axes.push_back(-static_cast<int64_t>(tail.size() - (i - dots - 3)));
      }
    }
    std::string geq = eq.output;
    std::vector<std::string> ins{ctx.dy()};
    for (size_t j = 0; j < ops; ++j)
      if (j != k) {
        geq += "," + eq.inputs[j];
        ins.push_back(ctx.in(j));
      }
    geq += "->" + kept;
    std::string g = ctx.op("Einsum", ins, {{"equation", Attribute::Str(geq)}});
    if (!dropped_axes.empty()) g = ctx.op("Expand", {ctx.unsqueeze(g, dropped_axes), ctx.shape_of(ctx.in(k))});
    if (einsum_has_ellipsis(term) && with_ellipsis > 1)
      g = ctx.op("SumToShape", {g, ctx.op("Shape", {ctx.in(k)})}, {}, kGraphrunDomain);
    ctx.set_dx(k, g);
  }
}

}  // namespace

GR_REGISTER_OPS(einsum) {
  ops.op("Einsum").gradient(einsum_grad);
}

}  // namespace graphrun::autodiff

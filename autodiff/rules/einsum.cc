// Gradient rule of Einsum: operand k's gradient is the Einsum of dY with the other operands onto k's term
// ("bhid,bhjd->bhij": dA = "bhij,bhjd->bhid"), for any number of operands. Labels only operand k has (summed
// away by the forward) come back by Unsqueeze + Expand; broadcast "..." dims by SumToShape. An operand with a
// repeated label ("ii->i", "bii->bi") enters only through its diagonal: the gradient of that diagonal (the
// term with each label once), laid back onto the diagonal by an Einsum with identity matrices.
#include "autodiff/rules/rules.h"
#include "graph/einsum_equation.h"

namespace graphrun::autodiff {
namespace {

// The identity [d, d] of axis `axis` of x (Range and Equal at run time: symbolic sizes need no constant).
std::string identity_of_axis(GradContext& ctx, const std::string& x, int64_t axis, DType t) {
  std::string d = ctx.op("Gather", {ctx.op("Shape", {x}), ctx.op("Constant", {}, {{"value", Attribute::Tens(Tensor::scalar<int64_t>(axis))}})},
                         {{"axis", Attribute::Int(0)}});
  std::string r = ctx.op("Range", {ctx.op("Constant", {}, {{"value", Attribute::Tens(Tensor::scalar<int64_t>(0))}}), d,
                                   ctx.op("Constant", {}, {{"value", Attribute::Tens(Tensor::scalar<int64_t>(1))}})});
  return ctx.op("Cast", {ctx.op("Equal", {ctx.unsqueeze(r, {1}), r})}, {{"to", Attribute::Int(static_cast<int64_t>(t))}});
}

// Labels no operand or output uses, for the second and later copies of a repeated label.
char unused_label(const EinsumEquation& eq, const std::string& taken) {
  std::string all = eq.output + taken;
  for (const auto& t : eq.inputs) all += t;
  for (char c = 'A'; c <= 'z'; ++c)
    if (std::isalpha(static_cast<unsigned char>(c)) && all.find(c) == std::string::npos) return c;
  GR_FAIL("no free Einsum label left for a diagonal's gradient");
}

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
    const std::string& full = eq.inputs[k];
    // The diagonal's term (each label once) and where each label first stands in the operand.
    std::string term;
    std::vector<int64_t> firsts;
    for (size_t i = 0; i < full.size(); ++i)
      if (full[i] != '.' && term.find(full[i]) == std::string::npos) {
        term += full[i];
        firsts.push_back(static_cast<int64_t>(i));
      }
    const bool diagonal = term.size() < einsum_letters(full).size();
    GR_CHECK(!diagonal || !einsum_has_ellipsis(full),
             n.describe() << ": no gradient for Einsum operand " << k << " ('" << full
                          << "'): a label repeats in a term with '...'");
    if (!diagonal) term = full;
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
    if (!dropped_axes.empty()) {
      std::string shape = ctx.shape_of(ctx.in(k));
      if (diagonal) shape = ctx.op("Gather", {ctx.op("Shape", {ctx.in(k)}), ctx.ints(firsts)}, {{"axis", Attribute::Int(0)}});
      g = ctx.op("Expand", {ctx.unsqueeze(g, dropped_axes), shape});
    }
    if (diagonal) {
      // dX = dDiag(i) * I(i, i') for each further copy i' of a label i: "bi,ij->bij" for "bii".
      std::string out, eqn = term;
      std::vector<std::string> eins{g};
      std::string taken;
      for (size_t i = 0; i < full.size(); ++i) {
        const char c = full[i];
        const size_t first = full.find(c);
        if (first == i) {
          out += c;
          continue;
        }
        const char fresh = unused_label(eq, taken);
        taken += fresh;
        out += fresh;
        eqn += std::string(",") + c + fresh;
        eins.push_back(identity_of_axis(ctx, ctx.in(k), static_cast<int64_t>(i), ctx.dtype(ctx.in(k))));
      }
      g = ctx.op("Einsum", eins, {{"equation", Attribute::Str(eqn + "->" + out)}});
    }
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

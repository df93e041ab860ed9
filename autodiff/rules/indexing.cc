// Gradient rules of the element-indexing ops: GatherElements (scatter-add of dY: ScatterElements with
// reduction add from opset 16, ai.graphrun GatherElementsGrad before), ScatterElements and ScatterND
// (reduction none or add: data's gradient is dY with the overwritten positions zeroed, the
// updates' the gather of dY at the indices), GatherND (ScatterND with reduction add from opset 16,
// ai.graphrun GatherNDGrad before), TopK's values (dY written back at the indices along the axis), Compress
// (dY written back where the condition holds), ReverseSequence (reversed again) and the old Scatter.
// Indices and conditions carry no gradient.
#include "autodiff/rules/rules.h"

namespace graphrun::autodiff {
namespace {

void gather_elements_grad(GradContext& ctx) {
  if (!ctx.needs(0) || ctx.dy().empty()) return;
  const Attribute axis = Attribute::Int(ctx.fwd().attr_i("axis", 0));
  if (ctx.opset() >= 16) {
    ctx.set_dx(0, ctx.op("ScatterElements", {ctx.zeros_like(ctx.in(0)), ctx.in(1), ctx.dy()},
                         {{"axis", axis}, {"reduction", Attribute::Str("add")}}));
    return;
  }
  ctx.set_dx(0, ctx.op("GatherElementsGrad", {ctx.dy(), ctx.in(1), ctx.shape_of(ctx.in(0))}, {{"axis", axis}},
                       kGraphrunDomain));
}

// Shared by ScatterElements (elements = true; `op` "Scatter" for its name before opset 11) and ScatterND:
// Y = data with updates written (or added) at indices.
void scatter_grad(GradContext& ctx, bool elements, const char* op = "ScatterElements") {
  const Node& n = ctx.fwd();
  if (ctx.dy().empty() || (!ctx.needs(0) && !ctx.needs(2))) return;
  const std::string red = n.attr_s("reduction", "none");
  GR_CHECK(red == "none" || red == "add", n.describe() << ": no gradient for " << n.op_type << " with reduction '"
                                                       << red << "' (none and add have one)");
  std::map<std::string, Attribute> axis;
  if (elements) axis["axis"] = Attribute::Int(n.attr_i("axis", 0));
  if (ctx.needs(0)) {
    // Positions the updates overwrote do not reach Y; with add, every position of data does.
    ctx.set_dx(0, red == "add" ? ctx.dy()
                               : ctx.op(elements ? op : "ScatterND", {ctx.dy(), ctx.in(1), ctx.zeros_like(ctx.in(2))}, axis));
  }
  if (ctx.needs(2)) ctx.set_dx(2, ctx.op(elements ? "GatherElements" : "GatherND", {ctx.dy(), ctx.in(1)}, axis));
}

// dData = zeros of data's shape with dY added at every gathered position: ScatterND with reduction add
// (opset 16) sums duplicate index tuples, which reduction none would leave undefined; below opset 16, or
// with batch_dims (which ScatterND lacks), ai.graphrun GatherNDGrad does the same.
void gather_nd_grad(GradContext& ctx) {
  if (!ctx.needs(0) || ctx.dy().empty()) return;
  const int64_t batch_dims = ctx.fwd().attr_i("batch_dims", 0);
  if (ctx.opset() >= 16 && batch_dims == 0) {
    ctx.set_dx(0, ctx.op("ScatterND", {ctx.zeros_like(ctx.in(0)), ctx.in(1), ctx.dy()},
                         {{"reduction", Attribute::Str("add")}}));
    return;
  }
  ctx.set_dx(0, ctx.op("GatherNDGrad", {ctx.dy(), ctx.in(1), ctx.shape_of(ctx.in(0))},
                       {{"batch_dims", Attribute::Int(batch_dims)}}, kGraphrunDomain));
}

// TopK's values are data gathered at its indices along the axis; the indices within one slice are
// distinct, so writing dY there (no reduction) is exact. Scatter before opset 11.
void topk_grad(GradContext& ctx) {
  if (!ctx.needs(0) || ctx.dy(0).empty()) return;
  const std::string indices = ctx.fwd_output(1);
  ctx.set_dx(0, ctx.op(ctx.opset() >= 11 ? "ScatterElements" : "Scatter", {ctx.zeros_like(ctx.in(0)), indices, ctx.dy(0)},
                       {{"axis", Attribute::Int(ctx.fwd().attr_i("axis", -1))}}));
}

// Compress: Y = the slices of X along `axis` (of flattened X without one) where the condition holds,
// in order. dX = zeros with dY written back there: ScatterElements (Scatter before opset 11) at the
// positions NonZero(condition) gives, broadcast over the other axes. They are distinct, so writing
// (no reduction) is exact; positions the condition does not cover, or covers with false, get zero.
void compress_grad(GradContext& ctx) {
  if (!ctx.needs(0) || ctx.dy().empty()) return;
  const Node& n = ctx.fwd();
  const std::string& x = ctx.in(0);
  const bool has_axis = n.has_attr("axis");
  const int r = has_axis ? ctx.rank(x) : 1;
  GR_CHECK(r >= 1, n.describe() << ": the Compress gradient needs the rank of '" << x << "'");
  const int64_t axis = has_axis ? norm_axis(n.attr_i("axis", 0), r, n) : 0;
  const std::string scatter = ctx.opset() >= 11 ? "ScatterElements" : "Scatter";
  std::vector<int64_t> view(static_cast<size_t>(r), 1);
  view[static_cast<size_t>(axis)] = -1;
  const std::string picked = ctx.reshape(ctx.op("NonZero", {ctx.in(1)}), ctx.ints(view));  // [1.., K, ..1]
  const std::string idx = ctx.op("Expand", {picked, ctx.op("Shape", {ctx.dy()})});
  const std::string base = has_axis ? x : ctx.reshape(x, ctx.ints({-1}));
  const std::string d = ctx.op(scatter, {ctx.zeros_like(base), idx, ctx.dy()}, {{"axis", Attribute::Int(axis)}});
  ctx.set_dx(0, has_axis ? d : ctx.reshape(d, ctx.shape_of(x)));
}

// ReverseSequence reverses the first sequence_lens[b] steps of each batch entry b: a permutation that is
// its own inverse, so dX is dY reversed the same way.
void reverse_sequence_grad(GradContext& ctx) {
  if (!ctx.needs(0) || ctx.dy().empty()) return;
  const Node& n = ctx.fwd();
  ctx.set_dx(0, ctx.op("ReverseSequence", {ctx.dy(), ctx.in(1)},
                       {{"batch_axis", Attribute::Int(n.attr_i("batch_axis", 1))},
                        {"time_axis", Attribute::Int(n.attr_i("time_axis", 0))}}));
}

void scatter_elements_grad(GradContext& ctx) { scatter_grad(ctx, true); }
// Scatter (opsets 9 and 10): ScatterElements' old name, without reduction.
void scatter_old_grad(GradContext& ctx) { scatter_grad(ctx, true, "Scatter"); }
void scatter_nd_grad(GradContext& ctx) { scatter_grad(ctx, false); }

}  // namespace

GR_REGISTER_OPS(indexing) {
  ops.op("GatherElements").gradient(gather_elements_grad);
  ops.op("ScatterElements").gradient(scatter_elements_grad);
  ops.op("ScatterND").gradient(scatter_nd_grad);
  ops.op("GatherND").gradient(gather_nd_grad);
  ops.op("TopK").gradient(topk_grad).output_dtype(1, DType::I64);
  ops.op("Compress").gradient(compress_grad);
  ops.op("ReverseSequence").gradient(reverse_sequence_grad);
  ops.op("Scatter").gradient(scatter_old_grad);
}

}  // namespace graphrun::autodiff

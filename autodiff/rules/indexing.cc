// Gradient rules of the element-indexing ops: GatherElements (scatter-add of dY: ScatterElements with
// reduction add from opset 16, ai.graphrun GatherElementsGrad before), ScatterElements and ScatterND
// (reduction none or add: data's gradient is dY with the overwritten positions zeroed, the
// updates' the gather of dY at the indices, masked to each element's last writer without reduction),
// GatherND (ScatterND with reduction add from opset 16, ai.graphrun GatherNDGrad before), TopK's values
// (dY written back at the indices along the axis), Compress (dY written back where the condition holds),
// ReverseSequence (reversed again) and the old Scatter.
// Indices and conditions carry no gradient.
#include <map>
#include <sstream>

#include "autodiff/autodiff.h"
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

// The data's dims as overwritten_scatter_updates reads them (-1 unknown), or {} without a rank.
Shape known_dims(const ValueInfo* vi) {
  Shape dims;
  if (vi && vi->has_shape)
    for (const Dim& d : vi->shape) dims.push_back(d.known() ? d.size : -1);
  return dims;
}

// Whether two updates of a ScatterElements or ScatterND can hit the same data element: false only for
// constant indices whose targets are all distinct.
bool may_collide(GradContext& ctx) {
  const ValueInfo vi = ctx.type_of(ctx.in(0));
  return overwritten_scatter_updates(ctx.fwd(), ctx.constant_value(ctx.in(1)), known_dims(&vi)) != 0;
}

// Shared by ScatterElements (elements = true; `op` "Scatter" for its name before opset 11) and ScatterND:
// Y = data with updates written (or added) at indices.
//
// Without reduction, updates that hit the same element are applied in index order, on the CPU and the
// device alike (ONNX leaves their order undefined; torch's scatter_add below opset 16 and index_put
// export exactly this), so only the last of them reaches Y: dUpdates is dY gathered at the indices where
// an update is its element's last writer, zero elsewhere. The last writer is found with the op itself:
// scattering every update's own position (Range over the updates, reshaped to their shape) into -1s
// leaves each element holding its last writer's position; gathering that back and comparing it with the
// positions gives the mask. Constant indices that cannot collide skip it.
void scatter_grad(GradContext& ctx, bool elements, const char* op = "ScatterElements") {
  const Node& n = ctx.fwd();
  if (ctx.dy().empty() || (!ctx.needs(0) && !ctx.needs(2))) return;
  const std::string red = n.attr_s("reduction", "none");
  GR_CHECK(red == "none" || red == "add", n.describe() << ": no gradient for " << n.op_type << " with reduction '"
                                                       << red << "' (none and add have one)");
  std::map<std::string, Attribute> axis;
  if (elements) axis["axis"] = Attribute::Int(n.attr_i("axis", 0));
  const std::string scatter = elements ? op : "ScatterND", gather = elements ? "GatherElements" : "GatherND";
  if (ctx.needs(0)) {
    // Positions the updates overwrote do not reach Y; with add, every position of data does.
    ctx.set_dx(0, red == "add" ? ctx.dy() : ctx.op(scatter, {ctx.dy(), ctx.in(1), ctx.zeros_like(ctx.in(2))}, axis));
  }
  if (!ctx.needs(2)) return;
  const std::string gathered = ctx.op(gather, {ctx.dy(), ctx.in(1)}, axis);
  if (red == "add" || !may_collide(ctx)) {
    ctx.set_dx(2, gathered);
    return;
  }
  const std::string& upd = ctx.in(2);
  const std::string pos = ctx.reshape(
      ctx.op("Range", {ctx.scalar(0, DType::I64), ctx.op("Size", {upd}), ctx.scalar(1, DType::I64)}), ctx.shape_of(upd));
  const std::string none = ctx.op("ConstantOfShape", {ctx.shape_of(ctx.in(0))},
                                  {{"value", Attribute::Tens(Tensor::from_vector<int64_t>({1}, {-1}))}});
  const std::string last = ctx.op(gather, {ctx.op(scatter, {none, ctx.in(1), pos}, axis), ctx.in(1)}, axis);
  ctx.set_dx(2, ctx.op("Where", {ctx.op("Equal", {last, pos}), gathered, ctx.scalar(0, ctx.dtype(ctx.dy()))}));
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

// Unique: Y is X (flattened without `axis`) gathered at each unique's first occurrence, the `indices` output
// (named on the forward node when it had none). dX = zeros with dY written there: the first occurrences are
// distinct, so writing is exact; the other occurrences of a value get no gradient, as Y does not read them.
// (PyTorch has no derivative for torch.unique.)
void unique_grad(GradContext& ctx) {
  if (!ctx.needs(0) || ctx.dy(0).empty()) return;
  const Node& n = ctx.fwd();
  const std::string& x = ctx.in(0);
  const std::string first = ctx.fwd_output(1);
  const std::string scatter = "ScatterElements";
  if (!n.has_attr("axis")) {
    const std::string base = ctx.reshape(x, ctx.ints({-1}));
    const std::string d = ctx.op(scatter, {ctx.zeros_like(base), first, ctx.dy(0)}, {{"axis", Attribute::Int(0)}});
    ctx.set_dx(0, ctx.reshape(d, ctx.shape_of(x)));
    return;
  }
  const int r = ctx.rank(x);
  GR_CHECK(r >= 1, n.describe() << ": the Unique gradient needs the rank of '" << x << "'");
  const int64_t axis = norm_axis(n.attr_i("axis", 0), r, n);
  std::vector<int64_t> view(static_cast<size_t>(r), 1);
  view[static_cast<size_t>(axis)] = -1;
  const std::string idx = ctx.op("Expand", {ctx.reshape(first, ctx.ints(view)), ctx.op("Shape", {ctx.dy(0)})});
  ctx.set_dx(0, ctx.op(scatter, {ctx.zeros_like(x), idx, ctx.dy(0)}, {{"axis", Attribute::Int(axis)}}));
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

int64_t overwritten_scatter_updates(const Node& n, const Tensor& idx, const Shape& data) {
  const bool elements = n.op_type != "ScatterND";
  if (!idx.defined() || data.empty() || (idx.dtype() != DType::I64 && idx.dtype() != DType::I32)) return -1;
  const Shape& is = idx.shape();
  const int64_t count = idx.numel();
  // Not worth a map of a million targets at load: the mask tells at run time.
  if (count > (int64_t(1) << 20)) return -1;
  auto at = [&](int64_t i) { return idx.dtype() == DType::I64 ? idx.data<int64_t>()[i] : idx.data<int32_t>()[i]; };
  bool unknown = false;  // a negative index along a dim of unknown size: its target cannot be told
  auto norm = [&](int64_t v, int64_t d) {
    unknown = unknown || (v < 0 && d < 0);
    return v < 0 ? v + d : v;
  };
  // Each target's number of writers; a target written k times loses k - 1 updates.
  std::map<std::vector<int64_t>, int64_t> writers;
  if (elements) {
    if (is.size() != data.size()) return -1;
    const int64_t axis = norm_axis(n.attr_i("axis", 0), static_cast<int>(data.size()), n);
    std::vector<int64_t> c(is.size(), 0);
    for (int64_t t = 0; t < count; ++t) {
      std::vector<int64_t> target = c;
      target[static_cast<size_t>(axis)] = norm(at(t), data[static_cast<size_t>(axis)]);
      ++writers[target];
      for (size_t a = is.size(); a-- > 0;)
        if (++c[a] < is[a]) break; else c[a] = 0;
    }
  } else {
    if (is.empty() || is.back() < 1 || is.back() > static_cast<int64_t>(data.size())) return -1;
    const int64_t m = is.back();
    for (int64_t k = 0; k < count / m; ++k) {
      std::vector<int64_t> tuple(static_cast<size_t>(m));
      for (int64_t a = 0; a < m; ++a) tuple[static_cast<size_t>(a)] = norm(at(k * m + a), data[static_cast<size_t>(a)]);
      ++writers[tuple];
    }
  }
  if (unknown) return -1;
  int64_t lost = 0;
  for (const auto& [target, k] : writers) lost += k - 1;
  return lost;
}

std::vector<std::string> colliding_scatter_notes(const Graph& g) {
  std::vector<std::string> notes;
  for (const Node& n : g.nodes) {
    if (!(n.domain.empty() || n.domain == "ai.onnx") || n.inputs.size() < 3 ||
        (n.op_type != "ScatterElements" && n.op_type != "ScatterND" && n.op_type != "Scatter") ||
        n.attr_s("reduction", "none") != "none")
      continue;
    Tensor idx;
    if (auto it = g.initializers.find(n.inputs[1]); it != g.initializers.end()) {
      idx = it->second;
    } else if (const int p = g.producer(n.inputs[1]); p >= 0 && g.nodes[p].op_type == "Constant") {
      if (const Attribute* a = g.nodes[p].attr("value")) idx = a->t;
    }
    const int64_t lost = idx.defined() ? overwritten_scatter_updates(n, idx, known_dims(g.info(n.inputs[0]))) : -1;
    if (lost <= 0) continue;
    std::ostringstream s;
    s << "node '" << n.name << "' (" << n.op_type << "): " << lost << " update" << (lost > 1 ? "s land" : " lands")
      << " where a later update overwrites " << (lost > 1 ? "them" : "it")
      << "; without a reduction ONNX leaves that order undefined, graphrun applies them in index order (the "
         "last wins) and differentiates that; where this comes from torch's scatter_add (below opset 16) or "
         "index_put(..., accumulate=True), PyTorch adds them instead";
    notes.push_back(s.str());
  }
  return notes;
}

// Second derivatives through graphrun's scatter-add gradients, linear in dY: d dY = the forward gather of g.
void gather_elements_grad_grad(GradContext& ctx) {
  if (!ctx.needs(0) || ctx.dy().empty()) return;
  ctx.set_dx(0,
             ctx.op("GatherElements", {ctx.dy(), ctx.in(1)}, {{"axis", Attribute::Int(ctx.fwd().attr_i("axis", 0))}}));
}

void gather_nd_grad_grad(GradContext& ctx) {
  if (!ctx.needs(0) || ctx.dy().empty()) return;
  const int64_t batch_dims = ctx.fwd().attr_i("batch_dims", 0);
  std::map<std::string, Attribute> attrs;
  if (batch_dims != 0) attrs["batch_dims"] = Attribute::Int(batch_dims);
  ctx.set_dx(0, ctx.op("GatherND", {ctx.dy(), ctx.in(1)}, attrs));
}

GR_REGISTER_OPS(indexing) {
  ops.op("GatherElements").gradient(gather_elements_grad);
  ops.op("ScatterElements").gradient(scatter_elements_grad);
  ops.op("ScatterND").gradient(scatter_nd_grad);
  ops.op("GatherND").gradient(gather_nd_grad);
  ops.op(kGraphrunDomain, "GatherElementsGrad").gradient(gather_elements_grad_grad);
  ops.op(kGraphrunDomain, "GatherNDGrad").gradient(gather_nd_grad_grad);
  ops.op("TopK").gradient(topk_grad).output_dtype(1, DType::I64);
  ops.op("Compress").gradient(compress_grad);
  ops.op("ReverseSequence").gradient(reverse_sequence_grad);
  ops.op("Unique")
      .gradient(unique_grad)
      .output_dtype(1, DType::I64)
      .output_dtype(2, DType::I64)
      .output_dtype(3, DType::I64);
  ops.op("Scatter").gradient(scatter_old_grad);
}

}  // namespace graphrun::autodiff

// Gradient rules of data-movement ops: Reshape-like ops (Reshape, Flatten, Squeeze, Unsqueeze), Transpose,
// Expand, Concat/Split, Slice (any steps; ai.graphrun SliceGrad where its bounds are computed at run time), Pad
// (constant, edge, reflect; pads computed at run time in constant mode), Gather, DepthToSpace and SpaceToDepth,
// with standard ops.
#include <algorithm>
#include <climits>

#include "autodiff/rules/rules.h"
#include "graph/slice_layout.h"

namespace graphrun::autodiff {

namespace {

int64_t static_dim(GradContext& ctx, const std::string& v, int64_t axis, const char* why) {
  const ValueInfo* vi = ctx.info(v);
  Shape s;
  if (ctx.static_shape(v, s)) return s.at(axis);
  GR_CHECK(vi && vi->has_shape && axis < static_cast<int64_t>(vi->shape.size()) && vi->shape[axis].known(),
           ctx.fwd().describe() << ": the gradient of " << why << " needs the size of axis " << axis << " of '" << v
                                << "' (shape " << (vi ? vi->str() : "unknown") << ")");
  return vi->shape[axis].size;
}

// A constant input's values, or the attribute of the same name (older opsets); `what` names it in errors.
std::vector<int64_t> const_ints(GradContext& ctx, size_t input, const char* attr, bool* present = nullptr) {
  const Node& n = ctx.fwd();
  if (present) *present = true;
  if (n.has_input(input)) {
    Tensor t = ctx.constant_value(ctx.in(input));
    GR_CHECK(t.defined(), n.describe() << ": its gradient needs input '" << ctx.in(input)
                                       << "' to be a constant (an initializer or Constant node)");
    return t.as_int64s();
  }
  if (n.has_attr(attr)) return n.attr_ints(attr);
  if (present) *present = false;
  return {};
}

// Zeros along one axis around g: g's values land at [before, before + size) of a larger axis.
std::vector<int64_t> pads_on_axis(int rank, int64_t axis, int64_t before, int64_t after) {
  std::vector<int64_t> p(2 * rank, 0);
  p[axis] = before;
  p[rank + axis] = after;
  return p;
}

// The gradient of one Slice axis: dX[idx_j] = g[j] for idx_j = start + j*step, zeros elsewhere;
// a zero Pad for step 1, a product with a 0/1 selection matrix for any other step.
std::string unslice_axis(GradContext& ctx, const std::string& g, int rank, int64_t axis, int64_t dim, int64_t start,
                         int64_t step, int64_t count) {
  if (step == 1) return ctx.pad(g, pads_on_axis(rank, axis, start, dim - start - count));
  DType t = ctx.dtype(g);
  Tensor sel(t, {count, dim});  // zero-filled
  for (int64_t j = 0; j < count; ++j) {
    int64_t idx = start + j * step;
    if (t == DType::F64) sel.data<double>()[j * dim + idx] = 1;
    else sel.data<float>()[j * dim + idx] = 1;
  }
  std::string selm = ctx.op("Constant", {}, {{"value", Attribute::Tens(sel)}});
  std::vector<int64_t> perm;
  for (int i = 0; i < rank; ++i)
    if (i != axis) perm.push_back(i);
  perm.push_back(axis);
  bool last = axis == rank - 1;
  std::string gt = last ? g : ctx.transpose(g, perm);
  std::string r = ctx.op("MatMul", {gt, selm});
  if (last) return r;
  std::vector<int64_t> inv(rank);
  for (int i = 0; i < rank; ++i) inv[perm[i]] = i;
  return ctx.transpose(r, inv);
}

// ---- shape computations for symbolic shapes (ONNX Runtime's dynamic path): i64 [1] values ----

// The size of `axis` of v at run time.
std::string runtime_dim(GradContext& ctx, const std::string& v, int64_t axis) {
  return ctx.slice(ctx.op("Shape", {v}), {axis}, {axis + 1}, {0});
}

// A Slice bound clamped to [0, d] as Slice does for step 1 (negative: from the end). Min first, so that
// INT64_MAX ("to the end") never overflows the Add.
std::string clamp_bound(GradContext& ctx, const std::string& b, const std::string& d) {
  std::string v = ctx.op("Min", {b, d});
  std::string zero = ctx.ints({0});
  v = ctx.op("Where", {ctx.op("Less", {v, zero}), ctx.op("Add", {v, d}), v});
  return ctx.op("Max", {v, zero});
}

// Zero Pad of g with `before`/`after` (i64 [1], computed at run time) on one axis.
std::string pad_axis_runtime(GradContext& ctx, const std::string& g, int rank, int64_t axis, const std::string& before,
                             const std::string& after) {
  GR_CHECK(ctx.opset() >= 11, ctx.fwd().describe() << ": its gradient with sizes known only at run time needs opset >= 11");
  std::vector<std::string> parts;
  for (int i = 0; i < 2 * rank; ++i)
    parts.push_back(i == axis ? before : i == rank + axis ? after : ctx.ints({0}));
  return ctx.op("Pad", {g, ctx.op("Concat", parts, {{"axis", Attribute::Int(0)}})});
}

}  // namespace

// Reshape, Flatten, Squeeze, Unsqueeze: the gradient takes the input's shape back.
void reshape_grad(GradContext& ctx) { ctx.set_dx(0, ctx.reshape(ctx.dy(), ctx.reshape_target(ctx.in(0)))); }

void transpose_grad(GradContext& ctx) {
  const Node& n = ctx.fwd();
  if (!n.has_attr("perm")) {  // reversed axes: its own inverse
    ctx.set_dx(0, ctx.op("Transpose", {ctx.dy()}));
    return;
  }
  std::vector<int64_t> perm = n.attr_ints("perm"), inv(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inv.at(perm[i]) = static_cast<int64_t>(i);
  ctx.set_dx(0, ctx.transpose(ctx.dy(), inv));
}

void expand_grad(GradContext& ctx) { ctx.set_dx(0, ctx.reduce_to(ctx.dy(), ctx.out(0), ctx.in(0))); }

// Each input gets its slab of dY along the axis.
void concat_grad(GradContext& ctx) {
  const Node& n = ctx.fwd();
  int r = ctx.rank(ctx.out(0));
  if (r < 0) r = ctx.rank(ctx.in(0));
  int64_t axis = norm_axis(n.attr_i("axis", 0), r, n);
  // The slabs' bounds: constants while every size before is known, then shape computations.
  int64_t offset = 0;
  std::string offset_rt;  // the offset at run time, once a size is symbolic
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    bool need = ctx.needs(i);
    bool later_need = false;
    for (size_t j = i + 1; j < ctx.num_inputs(); ++j) later_need |= ctx.needs(j);
    if (!need && !later_need) break;
    const ValueInfo vi = ctx.type_of(ctx.in(i));
    const bool known = vi.has_shape && axis < static_cast<int64_t>(vi.shape.size()) && vi.shape[axis].known();
    if (known && offset_rt.empty()) {
      int64_t size = vi.shape[axis].size;
      if (need) ctx.set_dx(i, ctx.slice(ctx.dy(), {offset}, {offset + size}, {axis}));
      offset += size;
      continue;
    }
    GR_CHECK(ctx.opset() >= 10, n.describe() << ": the Concat gradient with symbolic sizes needs opset >= 10");
    if (offset_rt.empty()) offset_rt = ctx.ints({offset});
    std::string size = known ? ctx.ints({vi.shape[axis].size}) : runtime_dim(ctx, ctx.in(i), axis);
    std::string end = ctx.op("Add", {offset_rt, size});
    if (need) ctx.set_dx(i, ctx.op("Slice", {ctx.dy(), offset_rt, end, ctx.ints({axis})}));
    offset_rt = end;
  }
}

// dX = Concat of the outputs' gradients (zeros for outputs no gradient reaches).
void split_grad(GradContext& ctx) {
  const Node& n = ctx.fwd();
  int r = ctx.rank(ctx.in(0));
  int64_t axis = norm_axis(n.attr_i("axis", 0), r, n);
  std::vector<std::string> parts;
  for (size_t i = 0; i < n.outputs.size(); ++i) parts.push_back(ctx.dy_or_zeros(i));
  ctx.set_dx(0, ctx.op("Concat", parts, {{"axis", Attribute::Int(axis)}}));
}

// A Slice bound input (starts 1, ends 2, axes 3, steps 4): whether the rule may read it as constants (given as a
// constant, or absent), and the value to hand SliceGrad (the input itself; opset 9's attributes as Constants).
bool slice_input_constant(GradContext& ctx, size_t i) {
  return ctx.opset() < 10 || !ctx.fwd().has_input(i) || ctx.constant_value(ctx.in(i)).defined();
}

std::string slice_input_value(GradContext& ctx, size_t i, const char* attr) {
  const Node& n = ctx.fwd();
  if (ctx.opset() >= 10) return n.has_input(i) ? ctx.in(i) : "";
  return n.has_attr(attr) ? ctx.ints(n.attr_ints(attr)) : "";
}

// dX = ai.graphrun SliceGrad(dY, Shape(X), starts, ends, axes, steps): zeros with dY written where the Slice took
// its elements, laid out at run time by the Slice kernel's own index function (graph/slice_layout.h). For bounds
// computed at run time, and where the standard ops below would need a rank or an axis size unknown here.
void slice_grad_op(GradContext& ctx) {
  std::vector<std::string> ins{ctx.dy(), ctx.shape_of(ctx.in(0)), slice_input_value(ctx, 1, "starts"),
                               slice_input_value(ctx, 2, "ends"), slice_input_value(ctx, 3, "axes"),
                               slice_input_value(ctx, 4, "steps")};
  while (ins.back().empty()) ins.pop_back();
  ctx.set_dx(0, ctx.op("SliceGrad", ins, {}, kGraphrunDomain));
}

void slice_grad(GradContext& ctx) {
  const Node& n = ctx.fwd();
  const std::string& x = ctx.in(0);
  const int r = ctx.rank(x);
  // Constant bounds on a value of known rank: standard ops (Pad, or a product with a 0/1 matrix for other steps,
  // which needs the axis size); anything else: SliceGrad.
  for (size_t i = 1; i <= 4; ++i)
    if (!slice_input_constant(ctx, i)) return slice_grad_op(ctx);
  if (r < 0) return slice_grad_op(ctx);
  std::vector<int64_t> starts, ends, axes, steps;
  bool has_axes = false, has_steps = false;
  if (ctx.opset() >= 10) {
    starts = const_ints(ctx, 1, "", nullptr);
    ends = const_ints(ctx, 2, "", nullptr);
    axes = const_ints(ctx, 3, "", &has_axes);
    steps = const_ints(ctx, 4, "", &has_steps);
  } else {
    starts = n.attr_ints("starts");
    ends = n.attr_ints("ends");
    has_axes = n.has_attr("axes");
    axes = n.attr_ints("axes");
  }
  if (!has_axes) {
    axes.clear();
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  }
  if (!has_steps) steps.assign(starts.size(), 1);
  GR_CHECK(starts.size() == ends.size() && axes.size() == starts.size() && steps.size() == starts.size(),
           n.describe() << ": starts, ends, axes and steps differ in length");
  const ValueInfo xi = ctx.type_of(x);
  for (size_t i = 0; i < axes.size(); ++i) {
    const int64_t a = norm_axis(axes[i], r, n);
    GR_CHECK(steps[i] != 0, n.describe() << ": Slice step 0");
    Shape xs;
    const bool known = ctx.static_shape(x, xs) || (xi.has_shape && xi.shape.at(a).known());
    if (steps[i] != 1 && !known) return slice_grad_op(ctx);
  }
  std::string g = ctx.dy();
  for (size_t i = 0; i < axes.size(); ++i) {
    int64_t a = norm_axis(axes[i], r, n);
    int64_t s = starts[i], e = ends[i], k = steps[i];
    // x[s:] with step 1 needs no size: nothing is cut after the slice.
    if (k == 1 && s >= 0 && e >= (int64_t{1} << 31)) {
      if (s > 0) g = ctx.pad(g, pads_on_axis(r, a, s, 0));
      continue;
    }
    if (k == 1 && !(xi.has_shape && xi.shape.at(a).known())) {
      std::string dim = runtime_dim(ctx, x, a);
      std::string cs = clamp_bound(ctx, ctx.ints({s}), dim), ce = clamp_bound(ctx, ctx.ints({e}), dim);
      g = pad_axis_runtime(ctx, g, r, a, cs, ctx.op("Sub", {dim, ctx.op("Max", {ce, cs})}));
      continue;
    }
    const int64_t d = static_dim(ctx, x, a, "Slice");
    const SliceRange range = slice_range(d, s, e, k);  // the kernels' own clamping
    if (range.count == 0) return ctx.set_dx(0, ctx.zeros_like(x));
    g = unslice_axis(ctx, g, r, a, d, range.first, k, range.count);
  }
  ctx.set_dx(0, g);
}

void pad_grad(GradContext& ctx) {
  const Node& n = ctx.fwd();
  const std::string& x = ctx.in(0);
  const std::string mode = n.attr_s("mode", "constant");
  const bool has_axes = ctx.opset() >= 18 && n.has_input(3);
  if (ctx.opset() >= 11 && (!ctx.constant_value(ctx.in(1)).defined() || has_axes)) {
    // Pads computed at run time (Swin pads its windows by sizes taken from the shape), or given for some axes: in
    // constant mode y[j] = x[j - begin] where that is inside x, so dX[i] = dY[i + begin] where that is inside dY:
    // a Pad of dY by the negated pads, which crops the added borders and puts zeros back where the forward
    // cropped (negative pads). One node for any rank, shape or sign.
    GR_CHECK(mode == "constant", n.describe() << ": no gradient for Pad mode '" << mode << "' with pads '" << ctx.in(1)
                                              << "' computed at run time or with axes (constant mode has one)");
    std::vector<std::string> ins{ctx.dy(), ctx.op("Neg", {ctx.in(1)})};
    if (has_axes) ins.insert(ins.end(), {"", ctx.in(3)});
    ctx.set_dx(0, ctx.op("Pad", ins, {{"mode", Attribute::Str("constant")}}));
    return;
  }
  std::vector<int64_t> pads = ctx.opset() >= 11 ? const_ints(ctx, 1, "pads") : n.attr_ints("pads");
  const int r = static_cast<int>(pads.size() / 2);
  std::string g = ctx.dy();
  if (mode == "constant") {
    // dY without the added borders; borders cropped by negative pads come back as zeros.
    std::vector<int64_t> st, en, ax, neg(2 * r, 0);
    bool any_neg = false;
    for (int a = 0; a < r; ++a) {
      int64_t b = pads[a], e = pads[r + a];
      if (b > 0 || e > 0) {
        st.push_back(std::max<int64_t>(b, 0));
        en.push_back(e > 0 ? -e : INT64_MAX);
        ax.push_back(a);
      }
      neg[a] = std::max<int64_t>(-b, 0);
      neg[r + a] = std::max<int64_t>(-e, 0);
      any_neg |= b < 0 || e < 0;
    }
    if (!ax.empty()) g = ctx.slice(g, st, en, ax);
    if (any_neg) g = ctx.pad(g, neg);
    ctx.set_dx(0, g);
    return;
  }
  GR_CHECK(mode == "edge" || mode == "reflect", n.describe() << ": no gradient for Pad mode '" << mode << "'");
  for (int a = 0; a < r; ++a) {
    int64_t b = pads[a], e = pads[r + a];
    if (b == 0 && e == 0) continue;
    GR_CHECK(b >= 0 && e >= 0, n.describe() << ": no gradient for negative pads in mode '" << mode << "'");
    int64_t d = static_dim(ctx, x, a, "Pad");
    std::string sum = ctx.slice(g, {b}, {b + d}, {a});
    auto add = [&](const std::string& part, int64_t before, int64_t after) {
      sum = ctx.op("Add", {sum, ctx.pad(part, pads_on_axis(r, a, before, after))});
    };
    if (mode == "edge") {
      // Every border element copies the edge element: their gradients add up there.
      if (b > 0) add(ctx.reduce_sum(ctx.slice(g, {0}, {b}, {a}), {a}, true), 0, d - 1);
      if (e > 0) add(ctx.reduce_sum(ctx.slice(g, {b + d}, {b + d + e}, {a}), {a}, true), d - 1, 0);
    } else {
      // Output b-1-t mirrors input t+1 (t < b); output b+d+j mirrors input d-2-j.
      GR_CHECK(b < d && e < d, n.describe() << ": reflect pads must be smaller than the axis size " << d);
      if (b > 0) add(ctx.slice(g, {b - 1}, {INT64_MIN}, {a}, {-1}), 1, d - 1 - b);
      if (e > 0) add(ctx.slice(g, {b + d + e - 1}, {b + d - 1}, {a}, {-1}), d - 1 - e, 1);
    }
    g = sum;
  }
  ctx.set_dx(0, g);
}

// The Gather gradient when data's shape is symbolic: dY viewed with the index axes flattened to one,
// that axis moved last, times the one-hot [P, V] of the indices (V = Range(size of the axis) at run
// time), moved back: data's shape without a constant in sight.
void gather_grad_runtime(GradContext& ctx) {
  const Node& n = ctx.fwd();
  const std::string &data = ctx.in(0), &indices = ctx.in(1);
  const int r = ctx.rank(data);
  GR_CHECK(r >= 1, n.describe() << ": the Gather gradient needs the rank of '" << data << "'");
  GR_CHECK(ctx.opset() >= 11, n.describe() << ": the Gather gradient with a symbolic shape needs opset >= 11");
  const int64_t axis = norm_axis(n.attr_i("axis", 0), r, n);
  const DType t = ctx.dtype(data);
  std::string shp = ctx.op("Shape", {data});
  std::vector<std::string> view;
  if (axis > 0) view.push_back(ctx.slice(shp, {0}, {axis}, {0}));
  view.push_back(ctx.ints({-1}));
  if (axis + 1 < r) view.push_back(ctx.slice(shp, {axis + 1}, {r}, {0}));
  std::string dyv = ctx.reshape(ctx.dy(), view.size() == 1 ? view[0] : ctx.op("Concat", view, {{"axis", Attribute::Int(0)}}));
  std::vector<int64_t> perm, inv(r);
  for (int i = 0; i < r; ++i)
    if (i != axis) perm.push_back(i);
  perm.push_back(axis);
  for (int i = 0; i < r; ++i) inv[perm[i]] = i;
  std::string dim = runtime_dim(ctx, data, axis);  // [1]
  std::string idx = indices;
  if (ctx.dtype(idx) != DType::I64) idx = ctx.op("Cast", {idx}, {{"to", Attribute::Int(static_cast<int64_t>(DType::I64))}});
  idx = ctx.reshape(idx, ctx.ints({-1, 1}));
  idx = ctx.op("Where", {ctx.op("Less", {idx, ctx.ints({0})}), ctx.op("Add", {idx, dim}), idx});
  std::string range = ctx.op("Range", {ctx.op("Constant", {}, {{"value", Attribute::Tens(Tensor::scalar<int64_t>(0))}}),
                                       ctx.squeeze(dim, {0}),
                                       ctx.op("Constant", {}, {{"value", Attribute::Tens(Tensor::scalar<int64_t>(1))}})});
  std::string onehot = ctx.op("Cast", {ctx.op("Equal", {idx, range})}, {{"to", Attribute::Int(static_cast<int64_t>(t))}});
  std::string moved = axis == r - 1 ? dyv : ctx.transpose(dyv, perm);  // [..., P]
  std::string d = ctx.op("MatMul", {moved, onehot});                       // [..., V]
  ctx.set_dx(0, axis == r - 1 ? d : ctx.transpose(d, inv));
}

// dData[.., v, ..] = sum of dY over the positions whose index is v: a product with the one-hot matrix
// of the indices (Equal against 0..V-1), in standard ops.
void gather_grad(GradContext& ctx) {
  const Node& n = ctx.fwd();
  const std::string &data = ctx.in(0), &indices = ctx.in(1);
  Shape ds;
  if (!ctx.static_shape(data, ds)) return gather_grad_runtime(ctx);
  const int r = static_cast<int>(ds.size());
  const int64_t axis = norm_axis(n.attr_i("axis", 0), r, n);
  int64_t before = 1, after = 1, v = ds[axis];
  for (int i = 0; i < axis; ++i) before *= ds[i];
  for (int i = axis + 1; i < r; ++i) after *= ds[i];
  DType t = ctx.dtype(data);
  std::string idx = indices;
  if (ctx.dtype(idx) != DType::I64) idx = ctx.op("Cast", {idx}, {{"to", Attribute::Int(static_cast<int64_t>(DType::I64))}});
  idx = ctx.reshape(idx, ctx.ints({-1, 1}));
  std::string zero = ctx.op("Constant", {}, {{"value", Attribute::Tens(Tensor::scalar<int64_t>(0))}});
  std::string vv = ctx.op("Constant", {}, {{"value", Attribute::Tens(Tensor::scalar<int64_t>(v))}});
  idx = ctx.op("Where", {ctx.op("Less", {idx, zero}), ctx.op("Add", {idx, vv}), idx});  // negative indices count from the end
  std::vector<int64_t> range(v);
  for (int64_t i = 0; i < v; ++i) range[i] = i;
  std::string onehot = ctx.op("Cast", {ctx.op("Equal", {idx, ctx.ints(range)})},
                              {{"to", Attribute::Int(static_cast<int64_t>(t))}});  // [P, V]
  std::string dy3 = ctx.reshape(ctx.dy(), ctx.ints({before, -1, after}));  // [A, P, B]
  std::string d = ctx.op("MatMul", {ctx.transpose(onehot, {1, 0}), dy3});  // [A, V, B]
  ctx.set_dx(0, ctx.reshape(d, ctx.ints(ds)));
}

}  // namespace graphrun::autodiff

namespace graphrun::autodiff {

// DepthToSpace and SpaceToDepth move elements without arithmetic: the gradient is the inverse permutation.
// SpaceToDepth inverts DepthToSpace in DCR mode exactly; CRD orders channels (C, block) where SpaceToDepth
// gives (block, C), so a Reshape/Transpose/Reshape swaps the two after it.
void depth_to_space_grad(GradContext& ctx) {
  if (!ctx.needs(0) || ctx.dy().empty()) return;
  const Node& n = ctx.fwd();
  const int64_t b = n.attr_i("blocksize", 0);
  std::string g = ctx.op("SpaceToDepth", {ctx.dy()}, {{"blocksize", Attribute::Int(b)}});
  if (n.attr_s("mode", "DCR") == "CRD") {
    const std::string& x = ctx.in(0);
    const ValueInfo* xi = ctx.info(x);
    std::string view;
    if (xi && xi->has_shape && xi->shape.size() == 4 && xi->shape[1].known()) {
      view = ctx.ints({0, b * b, xi->shape[1].size / (b * b), -1});
    } else {
      std::string c = ctx.op("Div", {runtime_dim(ctx, x, 1), ctx.ints({b * b})});
      view = ctx.op("Concat", {ctx.ints({0, b * b}), c, ctx.ints({-1})}, {{"axis", Attribute::Int(0)}});
    }
    g = ctx.reshape(ctx.transpose(ctx.reshape(g, view), {0, 2, 1, 3}), ctx.reshape_target(x));
  }
  ctx.set_dx(0, g);
}

void space_to_depth_grad(GradContext& ctx) {
  if (!ctx.needs(0) || ctx.dy().empty()) return;
  std::map<std::string, Attribute> a{{"blocksize", Attribute::Int(ctx.fwd().attr_i("blocksize", 0))}};
  if (ctx.opset() >= 11) a["mode"] = Attribute::Str("DCR");
  ctx.set_dx(0, ctx.op("DepthToSpace", {ctx.dy()}, a));
}

// Trilu keeps a triangle: its gradient keeps the same one.
void trilu_grad(GradContext& ctx) {
  std::vector<std::string> ins{ctx.dy()};
  if (ctx.fwd().has_input(1)) ins.push_back(ctx.in(1));
  std::map<std::string, Attribute> a;
  if (const Attribute* u = ctx.fwd().attr("upper")) a["upper"] = *u;
  ctx.set_dx(0, ctx.op("Trilu", ins, a));
}

// Tile: dY viewed as [r0, d0, r1, d1, ...], summed over the repeat axes. The view is a Constant
// where x's shape and the repeats are known; otherwise it is built at run time by interleaving the
// repeats with Shape(x). Where not even the rank is known, the axes are Range(0, 2 * Size(repeats), 2).
void tile_grad(GradContext& ctx) {
  if (!ctx.needs(0) || ctx.dy().empty()) return;
  const Node& n = ctx.fwd();
  const std::string& x = ctx.in(0);
  int64_t r = ctx.rank(x);
  if (r < 0) {
    const ValueInfo* ri = ctx.info(ctx.in(1));
    if (ri && ri->has_shape && ri->shape.size() == 1 && ri->shape[0].known()) r = ri->shape[0].size;
  }
  Tensor rt = ctx.constant_value(ctx.in(1));
  if (r < 0 && rt.defined()) r = rt.numel();
  if (r == 0) {
    ctx.set_dx(0, ctx.dy());
    return;
  }
  Shape xs;
  std::string view;
  if (ctx.static_shape(x, xs) && rt.defined()) {
    std::vector<int64_t> reps = rt.as_int64s(), v;
    for (int64_t i = 0; i < r; ++i) {
      v.push_back(reps.at(static_cast<size_t>(i)));
      v.push_back(xs[static_cast<size_t>(i)]);
    }
    view = ctx.ints(v);
  } else {
    std::string reps = ctx.unsqueeze(ctx.in(1), {1}), dims = ctx.unsqueeze(ctx.shape_of(x), {1});
    std::string pairs = ctx.op("Concat", {reps, dims}, {{"axis", Attribute::Int(1)}});
    view = ctx.reshape(pairs, ctx.ints({-1}));
  }
  std::string v = ctx.reshape(ctx.dy(), view);
  if (r > 0) {
    std::vector<int64_t> axes;
    for (int64_t i = 0; i < r; ++i) axes.push_back(2 * i);
    ctx.set_dx(0, ctx.reduce_sum(v, axes, false));
    return;
  }
  GR_CHECK(ctx.opset() >= 13, n.describe() << ": the Tile gradient needs the rank of its input below opset 13 "
                                              "(ReduceSum takes its axes at run time from opset 13)");
  std::string twice_r = ctx.op("Mul", {ctx.op("Size", {ctx.in(1)}), ctx.scalar(2, DType::I64)});
  std::string axes = ctx.op("Range", {ctx.scalar(0, DType::I64), twice_r, ctx.scalar(2, DType::I64)});
  // noop_with_empty_axes: a scalar's Tile (no axes) passes its gradient through unchanged.
  ctx.set_dx(0, ctx.op("ReduceSum", {v, axes}, {{"keepdims", Attribute::Int(0)}, {"noop_with_empty_axes", Attribute::Int(1)}}));
}

// Second derivatives through graphrun's reverse ops, each linear in its first input: d dY = the forward op again,
// applied to g (the gradient of their output). SumToShape(X, shape) summed X over broadcast axes: d X = g expanded
// back to X's shape.
void sum_to_shape_grad(GradContext& ctx) {
  if (!ctx.needs(0) || ctx.dy().empty()) return;
  ctx.set_dx(0, ctx.op("Expand", {ctx.dy(), ctx.shape_of(ctx.in(0))}));
}

// SliceGrad(dY, shape, starts, ends[, axes][, steps]) wrote dY where the Slice took its elements: d dY = the Slice of
// g (below opset 10, where SliceGrad's bounds are the Slice's attributes as Constants, the Slice takes them back).
void slice_grad_grad(GradContext& ctx) {
  if (!ctx.needs(0) || ctx.dy().empty()) return;
  const Node& n = ctx.fwd();
  if (ctx.opset() >= 10) {
    std::vector<std::string> ins{ctx.dy()};
    for (size_t i = 2; i < n.inputs.size(); ++i) ins.push_back(n.inputs[i]);
    ctx.set_dx(0, ctx.op("Slice", ins));
    return;
  }
  std::map<std::string, Attribute> attrs;
  const char* names[] = {"starts", "ends", "axes"};
  for (size_t i = 2; i < n.inputs.size() && i < 5; ++i) {
    if (n.inputs[i].empty()) continue;
    const Tensor v = ctx.constant_value(n.inputs[i]);
    GR_CHECK(v.defined(), n.describe() << ": below opset 10 the gradient needs constant Slice bounds");
    attrs[names[i - 2]] = Attribute::Ints(v.as_int64s());
  }
  ctx.set_dx(0, ctx.op("Slice", {ctx.dy()}, attrs));
}

GR_REGISTER_OPS(shape) {
  ops.op("Reshape").gradient(reshape_grad);
  ops.op("Flatten").gradient(reshape_grad);
  ops.op("Squeeze").gradient(reshape_grad);
  ops.op("Unsqueeze").gradient(reshape_grad);
  ops.op("Transpose").gradient(transpose_grad);
  ops.op("Expand").gradient(expand_grad);
  ops.op("Concat").gradient(concat_grad);
  ops.op("Split").gradient(split_grad);
  ops.op("Slice").gradient(slice_grad);
  ops.op("Pad").gradient(pad_grad);
  ops.op("Gather").gradient(gather_grad);
  ops.op("Trilu").gradient(trilu_grad);
  ops.op("Tile").gradient(tile_grad);
  ops.op("DepthToSpace").gradient(depth_to_space_grad);
  ops.op("SpaceToDepth").gradient(space_to_depth_grad);
  ops.op(kGraphrunDomain, "SumToShape").gradient(sum_to_shape_grad);
  ops.op(kGraphrunDomain, "SliceGrad").gradient(slice_grad_grad);
  // Shapes, sizes, indices and constants carry no gradient.
  ops.op("Shape").no_gradient().output_dtype(0, DType::I64);
  ops.op("Size").no_gradient().output_dtype(0, DType::I64);
  ops.op("Constant").no_gradient();
  ops.op("ConstantOfShape").no_gradient();
  ops.op("Range").no_gradient();
  ops.op("NonZero").no_gradient().output_dtype(0, DType::I64);
  ops.op("OneHot").no_gradient();
  ops.op("EyeLike").no_gradient();
}

}  // namespace graphrun::autodiff

// Gradient rules of reductions and normalizations over an axis: ReduceSum, ReduceMean (the gradient
// broadcast back over the reduced axes), Softmax and LogSoftmax (from their forward outputs), the other
// reductions (ReduceProd right where an element is zero) and CumSum.
#include <algorithm>

#include "autodiff/rules/rules.h"

namespace graphrun::autodiff {

namespace {

struct ReduceAxes {
  bool all = false;       // every axis reduced
  bool identity = false;  // noop_with_empty_axes with no axes
  std::vector<int64_t> axes;  // normalized, sorted
  bool keepdims = true;
};

ReduceAxes reduce_axes(GradContext& ctx) {
  const Node& n = ctx.fwd();
  ReduceAxes r;
  r.keepdims = n.attr_i("keepdims", 1) != 0;
  std::vector<int64_t> axes;
  const bool axes_input = n.op_type == "ReduceSum" ? ctx.opset() >= 13 : ctx.opset() >= 18;
  if (axes_input && n.has_input(1)) {
    Tensor t = ctx.constant_value(ctx.in(1));
    GR_CHECK(t.defined(), n.describe() << ": its gradient needs the axes input '" << ctx.in(1) << "' to be a constant");
    axes = t.as_int64s();
  } else if (!axes_input) {
    axes = n.attr_ints("axes");
  }
  if (axes.empty()) {
    if (axes_input && n.attr_i("noop_with_empty_axes", 0)) r.identity = true;
    else r.all = true;
    return r;
  }
  int rank = ctx.rank(ctx.in(0));
  for (int64_t a : axes) {
    if (a < 0) {
      GR_CHECK(rank >= 0, n.describe() << ": negative axes need the rank of the input");
      a += rank;
    }
    r.axes.push_back(a);
  }
  std::sort(r.axes.begin(), r.axes.end());
  return r;
}

// dY with the reduced axes re-inserted (size 1), ready to broadcast against X.
std::string unreduced(GradContext& ctx, const ReduceAxes& r, const std::string& dy) {
  if (r.keepdims || r.all || r.identity) return dy;
  return ctx.unsqueeze(dy, r.axes);
}

// The sum over the last axis (opset >= 13) or over every axis from `axis` on (older opsets, which
// coerce the input to 2-D at `axis`), kept for broadcasting.
std::string softmax_axis_sum(GradContext& ctx, const std::string& v) {
  const Node& n = ctx.fwd();
  int rank = ctx.rank(ctx.in(0));
  int64_t axis = n.attr_i("axis", ctx.opset() >= 13 ? -1 : 1);
  if (axis < 0) {
    GR_CHECK(rank >= 0, n.describe() << ": its gradient needs the rank of its input");
    axis += rank;
  }
  std::vector<int64_t> axes{axis};
  if (ctx.opset() < 13) {
    GR_CHECK(rank >= 0, n.describe() << ": its gradient needs the rank of its input");
    for (int64_t a = axis + 1; a < rank; ++a) axes.push_back(a);
  }
  return ctx.reduce_sum(v, axes, true);
}

}  // namespace

void reduce_sum_grad(GradContext& ctx) {
  ReduceAxes r = reduce_axes(ctx);
  if (r.identity) return ctx.set_dx(0, ctx.dy());
  ctx.set_dx(0, ctx.op("Expand", {unreduced(ctx, r, ctx.dy()), ctx.shape_of(ctx.in(0))}));
}

// Like ReduceSum, divided by the number of elements averaged.
void reduce_mean_grad(GradContext& ctx) {
  ReduceAxes r = reduce_axes(ctx);
  if (r.identity) return ctx.set_dx(0, ctx.dy());
  const std::string& x = ctx.in(0);
  DType t = ctx.dtype(x);
  const ValueInfo* xi = ctx.info(x);
  Shape xs;
  bool known = false;
  int64_t count = 1;
  if (ctx.static_shape(x, xs)) {
    known = true;
    for (size_t i = 0; i < xs.size(); ++i)
      if (r.all || std::binary_search(r.axes.begin(), r.axes.end(), static_cast<int64_t>(i))) count *= xs[i];
  } else if (xi && xi->has_shape && !r.all) {
    known = true;
    for (int64_t a : r.axes) {
      if (a >= static_cast<int64_t>(xi->shape.size()) || !xi->shape[a].known()) known = false;
      else count *= xi->shape[a].size;
    }
  }
  std::string scaled;
  if (known) {
    scaled = ctx.op("Div", {ctx.dy(), ctx.scalar(static_cast<double>(count), t)});
  } else {
    // The count at run time: Size(X) / Size(Y) in integers, then the type of X. (It summed a tensor of
    // ones of X's shape, made by ConstantOfShape, which had no CUDA kernel then: --loss mse's mean over a
    // symbolic batch could not train on a GPU; two scalars are cheaper anyway.)
    const std::string n = ctx.op("Cast", {ctx.op("Div", {ctx.op("Size", {x}), ctx.op("Size", {ctx.out(0)})})},
                                 {{"to", Attribute::Int(static_cast<int64_t>(t))}});
    scaled = ctx.op("Div", {ctx.dy(), n});
  }
  ctx.set_dx(0, ctx.op("Expand", {unreduced(ctx, r, scaled), ctx.shape_of(x)}));
}

// dX = Y * (dY - sum(dY * Y))
void softmax_grad(GradContext& ctx) {
  const std::string& y = ctx.out(0);
  std::string s = softmax_axis_sum(ctx, ctx.op("Mul", {ctx.dy(), y}));
  ctx.set_dx(0, ctx.op("Mul", {y, ctx.op("Sub", {ctx.dy(), s})}));
}

// dX = dY - exp(Y) * sum(dY)
void log_softmax_grad(GradContext& ctx) {
  std::string s = softmax_axis_sum(ctx, ctx.dy());
  ctx.set_dx(0, ctx.op("Sub", {ctx.dy(), ctx.op("Mul", {ctx.op("Exp", {ctx.out(0)}), s})}));
}

}  // namespace graphrun::autodiff

namespace graphrun::autodiff {

namespace {

// dY and Y with the reduced axes restored (size 1) so that they broadcast against X.
std::pair<std::string, std::string> unreduced_dy_y(GradContext& ctx, const ReduceAxes& r) {
  return {unreduced(ctx, r, ctx.dy()), unreduced(ctx, r, ctx.out(0))};
}

std::string cst(GradContext& ctx, double v) { return ctx.scalar(v, ctx.dtype(ctx.in(0))); }

}  // namespace

// ReduceMax / ReduceMin: the gradient goes to the elements equal to the result, split evenly among ties.
void reduce_max_min_grad(GradContext& ctx) {
  ReduceAxes r = reduce_axes(ctx);
  if (r.identity) return ctx.set_dx(0, ctx.dy());
  auto [dy, y] = unreduced_dy_y(ctx, r);
  std::string hit = ctx.op("Equal", {ctx.in(0), y});
  // Shared evenly between the elements that tie for the result, as torch's amax / amin and max() do.
  std::string ones = ctx.op("Cast", {hit}, {{"to", Attribute::Int(static_cast<int64_t>(ctx.dtype(ctx.in(0))))}});
  std::string count = r.all ? ctx.op("ReduceSum", {ones}, {{"keepdims", Attribute::Int(1)}})
                            : ctx.reduce_sum(ones, r.axes, true);
  std::string share = ctx.op("Div", {dy, count});
  ctx.set_dx(0, ctx.op("Where", {hit, ctx.op("Expand", {share, ctx.shape_of(ctx.in(0))}), cst(ctx, 0)}));
}

void reduce_sum_square_grad(GradContext& ctx) {  // 2 x dY
  ReduceAxes r = reduce_axes(ctx);
  std::string dy = r.identity ? ctx.dy() : unreduced(ctx, r, ctx.dy());
  std::string two_x = ctx.op("Mul", {ctx.in(0), cst(ctx, 2)});
  ctx.set_dx(0, ctx.op("Mul", {two_x, dy}));
}

void reduce_l1_grad(GradContext& ctx) {  // sign(x) dY
  ReduceAxes r = reduce_axes(ctx);
  std::string dy = r.identity ? ctx.dy() : unreduced(ctx, r, ctx.dy());
  ctx.set_dx(0, ctx.op("Mul", {ctx.op("Sign", {ctx.in(0)}), dy}));
}

void reduce_l2_grad(GradContext& ctx) {  // x / y dY
  ReduceAxes r = reduce_axes(ctx);
  GR_CHECK(!r.identity, ctx.fwd().describe() << ": no gradient for ReduceL2 without axes and noop_with_empty_axes");
  auto [dy, y] = unreduced_dy_y(ctx, r);
  ctx.set_dx(0, ctx.op("Mul", {ctx.op("Div", {ctx.in(0), y}), dy}));
}

void reduce_log_sum_exp_grad(GradContext& ctx) {  // exp(x - y) dY
  ReduceAxes r = reduce_axes(ctx);
  GR_CHECK(!r.identity, ctx.fwd().describe() << ": no gradient for ReduceLogSumExp without axes and noop_with_empty_axes");
  auto [dy, y] = unreduced_dy_y(ctx, r);
  ctx.set_dx(0, ctx.op("Mul", {ctx.op("Exp", {ctx.op("Sub", {ctx.in(0), y})}), dy}));
}

void reduce_log_sum_grad(GradContext& ctx) {  // dY / sum(x) = dY / exp(y)
  ReduceAxes r = reduce_axes(ctx);
  GR_CHECK(!r.identity, ctx.fwd().describe() << ": no gradient for ReduceLogSum without axes and noop_with_empty_axes");
  auto [dy, y] = unreduced_dy_y(ctx, r);
  std::string d = ctx.op("Div", {dy, ctx.op("Exp", {y})});
  ctx.set_dx(0, ctx.op("Expand", {d, ctx.shape_of(ctx.in(0))}));
}

// ReduceProd: dX_i = dY * (product of the other elements of its group). Dividing Y by x_i is wrong where
// x_i is zero, so the product is taken over the non-zero elements (zeros replaced by 1) with the zeros
// counted: no zero: P / x_i; one zero: P at the zero, 0 elsewhere; more: 0. Only non-zero x_i divide.
void reduce_prod_grad(GradContext& ctx) {
  ReduceAxes r = reduce_axes(ctx);
  if (r.identity) return ctx.set_dx(0, ctx.dy());
  const std::string& x = ctx.in(0);
  const std::string zero = cst(ctx, 0), one = cst(ctx, 1);
  std::map<std::string, Attribute> keep{{"keepdims", Attribute::Int(1)}};
  if (!r.all && ctx.opset() < 18) keep["axes"] = Attribute::Ints(r.axes);
  std::string is_zero = ctx.op("Equal", {x, zero});
  std::string nonzero = ctx.op("Where", {is_zero, one, x});
  std::string zeros_as_one = ctx.op("Where", {is_zero, one, zero});
  std::string p, count;
  if (r.all) {
    p = ctx.op("ReduceProd", {nonzero}, keep);
    count = ctx.op("ReduceSum", {zeros_as_one}, {{"keepdims", Attribute::Int(1)}});
  } else {
    p = ctx.opset() >= 18 ? ctx.op("ReduceProd", {nonzero, ctx.ints(r.axes)}, keep) : ctx.op("ReduceProd", {nonzero}, keep);
    count = ctx.reduce_sum(zeros_as_one, r.axes, true);
  }
  std::string at_zero = ctx.op("Where", {ctx.op("Equal", {count, one}), p, zero});
  std::string elsewhere = ctx.op("Where", {ctx.op("Equal", {count, zero}), ctx.op("Div", {p, nonzero}), zero});
  std::string others = ctx.op("Where", {is_zero, at_zero, elsewhere});
  ctx.set_dx(0, ctx.op("Mul", {others, unreduced(ctx, r, ctx.dy())}));
}

// CumSum: the gradient is the cumulative sum in the other direction.
void cumsum_grad(GradContext& ctx) {
  const Node& n = ctx.fwd();
  std::map<std::string, Attribute> a{{"reverse", Attribute::Int(n.attr_i("reverse", 0) ? 0 : 1)}};
  if (n.attr_i("exclusive", 0)) a["exclusive"] = Attribute::Int(1);
  ctx.set_dx(0, ctx.op("CumSum", {ctx.dy(), ctx.in(1)}, a));
}

GR_REGISTER_OPS(reduce) {
  ops.op("ReduceSum").gradient(reduce_sum_grad);
  ops.op("ReduceMean").gradient(reduce_mean_grad);
  ops.op("Softmax").gradient(softmax_grad);
  ops.op("LogSoftmax").gradient(log_softmax_grad);
  ops.op("ReduceMax").gradient(reduce_max_min_grad);
  ops.op("ReduceMin").gradient(reduce_max_min_grad);
  ops.op("ReduceSumSquare").gradient(reduce_sum_square_grad);
  ops.op("ReduceL1").gradient(reduce_l1_grad);
  ops.op("ReduceL2").gradient(reduce_l2_grad);
  ops.op("ReduceLogSumExp").gradient(reduce_log_sum_exp_grad);
  ops.op("ReduceLogSum").gradient(reduce_log_sum_grad);
  ops.op("CumSum").gradient(cumsum_grad);
  ops.op("ReduceProd").gradient(reduce_prod_grad);
  // Indices and one-hot maxima carry no gradient.
  ops.op("ArgMax").no_gradient().output_dtype(0, DType::I64);
  ops.op("ArgMin").no_gradient().output_dtype(0, DType::I64);
  ops.op("Hardmax").no_gradient();
}

}  // namespace graphrun::autodiff

// Gradient rules of neural-network ops: Conv/ConvTranspose (ai.graphrun ConvGrad), pooling (MaxPoolGrad
// from the forward's Indices, AveragePoolGrad; GlobalAveragePool with standard ops), BatchNormalization,
// LayerNormalization (LayerNormalizationGrad from the forward's saved Mean and InvStdDev) and Dropout
// (the mask saved by the forward pass); and the second-order rules of graphrun's ConvGrad, MaxPoolGrad,
// AveragePoolGrad, BatchNormalizationGrad, LayerNormalizationGrad and InstanceNormalizationGrad.
#include <climits>
#include <functional>

#include "autodiff/rules/rules.h"

namespace graphrun::autodiff {

namespace {

std::map<std::string, Attribute> copy_attrs(const Node& n, std::initializer_list<const char*> names) {
  std::map<std::string, Attribute> r;
  for (const char* k : names)
    if (const Attribute* a = n.attr(k)) r[k] = *a;
  return r;
}

// Conv's attributes, which ConvGrad carries too.
std::map<std::string, Attribute> conv_attrs(const Node& n) {
  return copy_attrs(n, {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"});
}

void conv_like_grad(GradContext& ctx, const char* grad_op, bool transpose) {
  auto attrs = transpose ? copy_attrs(ctx.fwd(), {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides",
                                                  "output_padding", "output_shape"})
                         : conv_attrs(ctx.fwd());
  bool want_b = ctx.fwd().has_input(2) && ctx.needs(2);
  auto d = ctx.op_n(grad_op, {ctx.dy(), ctx.in(0), ctx.in(1)}, {ctx.needs(0), ctx.needs(1), want_b}, attrs,
                    kGraphrunDomain);
  for (size_t i = 0; i < 3; ++i)
    if (!d[i].empty()) ctx.set_dx(i, d[i]);
}

bool bn_training(GradContext& ctx) { return batch_norm_training(ctx.fwd(), ctx.opset()); }

// Axes [0, 2, 3, ...]: every axis of X but the channel axis.
std::vector<int64_t> all_but_channel(int rank) {
  std::vector<int64_t> axes{0};
  for (int i = 2; i < rank; ++i) axes.push_back(i);
  return axes;
}

}  // namespace

void conv_grad(GradContext& ctx) { conv_like_grad(ctx, "ConvGrad", false); }

// The gradient of graphrun's ConvGrad (dX, dW, dB from dY, X, W), for second derivatives (ONNX's Gradient op in a
// model that trains: a gradient penalty, a physics-informed net); ConvTransposeGrad's the same with ConvTranspose.
// dX is linear in dY and in W, dW in X and in dY, dB in dY; with g0, g1, g2 flowing into dX, dW, dB:
//   d dY = Conv(g0, W) + Conv(X, g1) + g2 over dY's batch and positions,
//   d X  = the dX of ConvGrad(dY, X, g1),  d W = the dW of ConvGrad(dY, g0, W).
void conv_like_grad_grad(GradContext& ctx, const char* fwd_op, const char* grad_op) {
  const auto attrs = copy_attrs(ctx.fwd(), {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides",
                                            "output_padding", "output_shape"});
  const std::string &dy = ctx.in(0), &x = ctx.in(1), &w = ctx.in(2);
  const std::string &g0 = ctx.dy(0), &g1 = ctx.dy(1), &g2 = ctx.dy(2);
  if (ctx.needs(0)) {
    std::vector<std::string> parts;
    if (!g0.empty()) parts.push_back(ctx.op(fwd_op, {g0, w}, attrs));
    if (!g1.empty()) parts.push_back(ctx.op(fwd_op, {x, g1}, attrs));
    if (!g2.empty()) {
      const int r = ctx.rank(dy) >= 0 ? ctx.rank(dy) : ctx.rank(x);
      GR_CHECK(r >= 3, ctx.fwd().describe() << ": the gradient of dB needs the rank of '" << dy << "'");
      parts.push_back(ctx.op("Expand", {ctx.unsqueeze(g2, all_but_channel(r)), ctx.shape_of(dy)}));
    }
    if (!parts.empty()) ctx.set_dx(0, parts.size() == 1 ? parts[0] : ctx.op("Sum", parts));
  }
  if (ctx.needs(1) && !g1.empty())
    ctx.set_dx(1, ctx.op_n(grad_op, {dy, x, g1}, {true, false, false}, attrs, kGraphrunDomain)[0]);
  if (ctx.needs(2) && !g0.empty())
    ctx.set_dx(2, ctx.op_n(grad_op, {dy, g0, w}, {false, true, false}, attrs, kGraphrunDomain)[1]);
}
void conv_grad_grad(GradContext& ctx) { conv_like_grad_grad(ctx, "Conv", "ConvGrad"); }
void conv_transpose_grad_grad(GradContext& ctx) { conv_like_grad_grad(ctx, "ConvTranspose", "ConvTransposeGrad"); }
void conv_transpose_grad(GradContext& ctx) { conv_like_grad(ctx, "ConvTransposeGrad", true); }

void max_pool_grad(GradContext& ctx) {
  GR_CHECK(ctx.fwd().attr_i("storage_order", 0) == 0,
           ctx.fwd().describe() << ": no gradient for MaxPool with storage_order=1 (column-major indices)");
  std::string indices = ctx.fwd_output(1);
  ctx.set_dx(0, ctx.op("MaxPoolGrad", {ctx.dy(), indices, ctx.in(0)}, {}, kGraphrunDomain));
}

void average_pool_grad(GradContext& ctx) {
  auto attrs = copy_attrs(ctx.fwd(), {"auto_pad", "ceil_mode", "count_include_pad", "kernel_shape", "pads", "strides",
                                      "dilations"});
  ctx.set_dx(0, ctx.op("AveragePoolGrad", {ctx.dy(), ctx.in(0)}, attrs, kGraphrunDomain));
}

// Second derivatives through graphrun's pooling gradients (a gradient penalty or double backprop through a pooled
// network). Both are linear in dY and constant in X's values (X gives the shape; MaxPoolGrad's argmax is its
// Indices input), so X gets no gradient and dY gets the transpose of the map applied to g, the gradient of dX.
// MaxPoolGrad added dY at the flat Indices of X: d dY = g gathered there.
void max_pool_grad_grad(GradContext& ctx) {
  GR_CHECK(ctx.fwd().attr_i("relu", 0) == 0, ctx.fwd().describe() << ": no gradient for the relu form (executor only)");
  GR_CHECK(ctx.fwd().has_input(1), ctx.fwd().describe()
                                       << ": no gradient for MaxPoolGrad without Indices (executor only)");
  if (!ctx.needs(0) || ctx.dy().empty()) return;
  ctx.set_dx(0, ctx.op("Gather", {ctx.reshape(ctx.dy(), ctx.ints({-1})), ctx.in(1)}));
}

// AveragePoolGrad spread dY over each window by AveragePool's weights: its transpose is AveragePool of the same
// window, d dY = AveragePool(g).
void average_pool_grad_grad(GradContext& ctx) {
  GR_CHECK(ctx.fwd().attr_i("relu", 0) == 0, ctx.fwd().describe() << ": no gradient for the relu form (executor only)");
  if (!ctx.needs(0) || ctx.dy().empty()) return;
  auto attrs = copy_attrs(
      ctx.fwd(), {"auto_pad", "ceil_mode", "count_include_pad", "kernel_shape", "pads", "strides", "dilations"});
  ctx.set_dx(0, ctx.op("AveragePool", {ctx.dy()}, attrs));
}

// Second derivatives through the normalisation gradients (a gradient penalty through a ResNet or a transformer).
// With a the normalised axes (M elements each), mu = mean_a(X), s = 1/sqrt(var_a(X) + eps), h = (X - mu) s and
// d = dY gamma, the first derivatives are
//   dX = s (d - A - h B) with A = mean_a(d), B = mean_a(d h);  dgamma = sum(dY h);  dbeta = sum(dY)
// (the sums over the axes gamma is broadcast along). With g0, g1, g2 flowing into dX, dgamma, dbeta, u = g0 s,
// U1 = sum_a u, U2 = sum_a u h, the partials by d, h, s and mu, each other one held, are
//   G_d = u - (U1 + h U2) / M,  G_h = -(d U2 / M + B u) + g1 dY,  G_s = sum_a g0 (d - A - h B) + sum_a G_h (X - mu),
//   G_mu = -s sum_a G_h,
// and mu and s are X's statistics (d mu / dX = 1/M, d s / dX = -s^3 (X - mu) / M), so
//   d dY = G_d gamma + g1 h + g2,  d gamma = sum(G_d dY),  d X = G_h s + (G_mu - G_s s^3 (X - mu)) / M.
// `stat_axes` are a; `gamma_axes` the axes dgamma sums over; `per_gamma` broadcasts gamma-shaped values over X;
// mean and invstd are the statistics (kept dims), or empty to compute them from X with `eps`.
void norm_grad_grad(GradContext& ctx, const std::vector<int64_t>& stat_axes, const std::vector<int64_t>& gamma_axes,
                    const std::function<std::string(const std::string&)>& per_gamma, std::string mu, std::string s,
                    double eps) {
  const Node& n = ctx.fwd();
  const std::string &dy = ctx.in(0), &x = ctx.in(1), &gamma = ctx.in(2);
  auto g = [&](size_t i) { return i < n.outputs.size() && !n.outputs[i].empty() ? ctx.dy(i) : std::string(); };
  const std::string g0 = g(0), g1 = g(1), g2 = g(2);
  const DType t = ctx.dtype(x);
  auto op2 = [&](const char* o, const std::string& a, const std::string& b) { return ctx.op(o, {a, b}); };
  auto add = [&](const std::string& a, const std::string& b) {
    return a.empty() ? b : b.empty() ? a : op2("Add", a, b);
  };
  auto sum_a = [&](const std::string& v) { return ctx.reduce_sum(v, stat_axes, true); };
  // 1/M, at run time (a batch axis may be symbolic): the statistics' size over X's.
  auto size_f = [&](const std::string& v) {
    return ctx.op("Cast", {ctx.op("Size", {v})}, {{"to", Attribute::Int(static_cast<int64_t>(t))}});
  };
  const bool recompute = mu.empty();  // (then s is empty too)
  std::string inv_m;                  // 1/M
  if (recompute) {
    const std::string sum_x = sum_a(x);
    inv_m = op2("Div", size_f(sum_x), size_f(x));
    mu = op2("Mul", sum_x, inv_m);
  } else {
    inv_m = op2("Div", size_f(mu), size_f(x));
  }
  const std::string xm = op2("Sub", x, mu);
  if (recompute) {
    const std::string var = op2("Mul", sum_a(op2("Mul", xm, xm)), inv_m);
    s = ctx.op("Reciprocal", {ctx.op("Sqrt", {op2("Add", var, ctx.scalar(eps, t))})});
  }
  const std::string h = op2("Mul", xm, s);
  const std::string gam = per_gamma(gamma);
  const std::string d = op2("Mul", dy, gam);
  std::string G_d, G_h, G_s;
  if (!g0.empty()) {
    const std::string u = op2("Mul", g0, s);
    const std::string U1 = sum_a(u), U2 = sum_a(op2("Mul", u, h));
    const std::string A = op2("Mul", sum_a(d), inv_m), B = op2("Mul", sum_a(op2("Mul", d, h)), inv_m);
    G_d = op2("Sub", u, op2("Mul", add(U1, op2("Mul", h, U2)), inv_m));
    G_h = ctx.op("Neg", {add(op2("Mul", op2("Mul", d, U2), inv_m), op2("Mul", B, u))});
    G_s = sum_a(op2("Mul", g0, op2("Sub", op2("Sub", d, A), op2("Mul", h, B))));
  }
  if (!g1.empty()) G_h = add(G_h, op2("Mul", per_gamma(g1), dy));
  if (ctx.needs(0)) {
    std::string r;
    if (!G_d.empty()) r = op2("Mul", G_d, gam);
    if (!g1.empty()) r = add(r, op2("Mul", per_gamma(g1), h));
    if (!g2.empty()) r = add(r, ctx.op("Expand", {per_gamma(g2), ctx.shape_of(dy)}));
    if (!r.empty()) ctx.set_dx(0, r);
  }
  if (ctx.needs(1) && !G_h.empty()) {
    G_s = add(G_s, sum_a(op2("Mul", G_h, xm)));
    const std::string G_mu = ctx.op("Neg", {op2("Mul", s, sum_a(G_h))});
    const std::string s3 = op2("Mul", op2("Mul", s, s), s);
    const std::string stats = op2("Mul", op2("Sub", G_mu, op2("Mul", op2("Mul", G_s, s3), xm)), inv_m);
    ctx.set_dx(1, op2("Add", op2("Mul", G_h, s), stats));
  }
  if (ctx.needs(2) && !G_d.empty()) {
    const std::string gd = op2("Mul", G_d, dy);
    ctx.set_dx(2, gamma_axes.empty() ? gd : ctx.reduce_sum(gd, gamma_axes, false));
  }
}

void batch_norm_grad_grad(GradContext& ctx) {
  const int r = ctx.rank(ctx.in(1));
  GR_CHECK(r >= 2, ctx.fwd().describe() << ": its gradient needs the rank of '" << ctx.in(1) << "'");
  const std::vector<int64_t> a = all_but_channel(r);
  norm_grad_grad(
      ctx, a, a, [&](const std::string& v) { return ctx.unsqueeze(v, a); }, "", "", ctx.fwd().attr_f("epsilon", 1e-5f));
}

// InstanceNormalizationGrad: statistics per (n, c) over the spatial axes, recomputed from X; gamma per channel.
void instance_norm_grad_grad(GradContext& ctx) {
  const int r = ctx.rank(ctx.in(1));
  GR_CHECK(r >= 3, ctx.fwd().describe() << ": its gradient needs the rank of '" << ctx.in(1) << "'");
  std::vector<int64_t> spatial;
  for (int64_t i = 2; i < r; ++i) spatial.push_back(i);
  const std::vector<int64_t> a = all_but_channel(r);
  norm_grad_grad(
      ctx, spatial, a, [&](const std::string& v) { return ctx.unsqueeze(v, a); }, "", "",
      ctx.fwd().attr_f("epsilon", 1e-5f));
}

void layer_norm_grad_grad(GradContext& ctx) {
  const int r = ctx.rank(ctx.in(1));
  GR_CHECK(r >= 1, ctx.fwd().describe() << ": its gradient needs the rank of '" << ctx.in(1) << "'");
  int64_t axis = ctx.fwd().attr_i("axis", -1);
  if (axis < 0) axis += r;
  std::vector<int64_t> a, rest;
  for (int64_t i = 0; i < r; ++i) (i >= axis ? a : rest).push_back(i);
  norm_grad_grad(
      ctx, a, rest, [](const std::string& v) { return v; }, ctx.in(3), ctx.in(4), 0);
}

// Y = mean over the spatial axes: dX = Expand(dY, Shape(X)) / (number of spatial positions).
void global_average_pool_grad(GradContext& ctx) {
  const std::string& x = ctx.in(0);
  DType t = ctx.dtype(x);
  std::string count;
  Shape s;
  const ValueInfo* xi = ctx.info(x);
  bool spatial_known = xi && xi->has_shape && xi->shape.size() >= 2;
  int64_t n = 1;
  for (size_t i = 2; spatial_known && i < xi->shape.size(); ++i) {
    if (!xi->shape[i].known()) spatial_known = false;
    else n *= xi->shape[i].size;
  }
  if (spatial_known) {
    count = ctx.scalar(static_cast<double>(n), t);
  } else {
    // The count at run time: Size(X) / Size(Y) (Y is [N, C, 1, ...]) in integers, then X's type. (Not a
    // sum of ones from ConstantOfShape: two scalars instead of a tensor of X's size.)
    count = ctx.op("Cast", {ctx.op("Div", {ctx.op("Size", {x}), ctx.op("Size", {ctx.out(0)})})},
                   {{"to", Attribute::Int(static_cast<int64_t>(t))}});
  }
  std::string d = ctx.op("Div", {ctx.dy(), count});
  ctx.set_dx(0, ctx.op("Expand", {d, ctx.shape_of(x)}));
}

void batch_norm_grad(GradContext& ctx) {
  const Node& n = ctx.fwd();
  const std::string &x = ctx.in(0), &scale = ctx.in(1), &mean = ctx.in(3), &var = ctx.in(4);
  float eps = n.attr_f("epsilon", 1e-5f);
  if (bn_training(ctx)) {
    // Gradients through Y only: the running statistics outputs do not reach the loss.
    if (!ctx.needs(0) && !ctx.needs(1) && !ctx.needs(2)) return;
    auto d = ctx.op_n("BatchNormalizationGrad", {ctx.dy_or_zeros(0), x, scale}, {ctx.needs(0), ctx.needs(1), ctx.needs(2)},
                      {{"epsilon", Attribute::Float(eps)}}, kGraphrunDomain);
    for (size_t i = 0; i < 3; ++i)
      if (!d[i].empty()) ctx.set_dx(i, d[i]);
    return;
  }
  // Inference mode (frozen statistics): Y = (X - mean) * scale / sqrt(var + eps) + B.
  if (ctx.dy().empty()) return;
  int r = ctx.rank(x);
  GR_CHECK(r >= 2, n.describe() << ": the gradient of inference-mode BatchNormalization needs the rank of its input");
  DType t = ctx.dtype(x);
  std::vector<int64_t> expand_axes{0};
  for (int i = 2; i < r; ++i) expand_axes.push_back(i);
  auto per_channel = [&](const std::string& v) { return ctx.unsqueeze(v, expand_axes); };
  std::string invstd = ctx.op("Reciprocal", {ctx.op("Sqrt", {ctx.op("Add", {var, ctx.scalar(eps, t)})})});
  if (ctx.needs(0)) ctx.set_dx(0, ctx.op("Mul", {ctx.dy(), per_channel(ctx.op("Mul", {scale, invstd}))}));
  if (ctx.needs(1)) {
    std::string xhat = ctx.op("Mul", {ctx.op("Sub", {x, per_channel(mean)}), per_channel(invstd)});
    ctx.set_dx(1, ctx.reduce_sum(ctx.op("Mul", {ctx.dy(), xhat}), all_but_channel(r), false));
  }
  if (ctx.needs(2)) ctx.set_dx(2, ctx.reduce_sum(ctx.dy(), all_but_channel(r), false));
}

// The forward's Mean and InvStdDev outputs (added to the node when the model did not ask for them) feed
// LayerNormalizationGrad, as ONNX Runtime's gradient does: the statistics are computed once.
void layer_norm_grad(GradContext& ctx) {
  GR_CHECK(ctx.dy(1).empty() && ctx.dy(2).empty(),
           ctx.fwd().describe() << ": no gradient through its Mean or InvStdDev output (only through Y)");
  const bool want_b = ctx.fwd().has_input(2) && ctx.needs(2);
  if (ctx.dy().empty() || (!ctx.needs(0) && !ctx.needs(1) && !want_b)) return;
  std::string mean = ctx.fwd_output(1), invstd = ctx.fwd_output(2);
  auto d = ctx.op_n("LayerNormalizationGrad", {ctx.dy(), ctx.in(0), ctx.in(1), mean, invstd},
                    {ctx.needs(0), ctx.needs(1), want_b}, copy_attrs(ctx.fwd(), {"axis"}), kGraphrunDomain);
  for (size_t i = 0; i < 3; ++i)
    if (!d[i].empty()) ctx.set_dx(i, d[i]);
}

// Training: Y = X * mask / (1 - ratio), so dX = dY * mask / (1 - ratio); inference or ratio 0: dX = dY.
void dropout_grad(GradContext& ctx) {
  const Node& n = ctx.fwd();
  const std::string& x = ctx.in(0);
  DType t = ctx.dtype(x);
  std::string training;  // "" = known at build time
  bool is_training = true;
  double ratio = 0.5;
  std::string ratio_value;
  if (ctx.opset() >= 12) {
    if (!n.has_input(2)) {
      is_training = false;
    } else {
      Tensor tm = ctx.constant_value(ctx.in(2));
      if (tm.defined()) is_training = tm.as_int64s().at(0) != 0;
      else training = ctx.in(2);
    }
    if (n.has_input(1)) {
      Tensor rt = ctx.constant_value(ctx.in(1));
      if (rt.defined()) ratio = rt.as_doubles().at(0);
      else ratio_value = ctx.in(1);
    }
  } else {
    // Before opset 12 nothing in the graph says training, and the kernel runs these as inference (the
    // identity): so does the gradient. Training converts such a model to opset 15 first (convert_opset).
    is_training = false;
  }
  // A ratio of 0 keeps every element, in training too (the kernel draws no mask): dX = dY, and the
  // forward keeps no mask for it (an executor then drops the node: what torch exports for dropout=0.0).
  if (!is_training || (ratio_value.empty() && ratio == 0)) {
    ctx.set_dx(0, ctx.dy());
    return;
  }
  std::string mask = ctx.op("Cast", {ctx.fwd_output(1)}, {{"to", Attribute::Int(static_cast<int64_t>(t))}});
  std::string scale;
  if (ratio_value.empty()) {
    GR_CHECK(ratio < 1, n.describe() << ": Dropout ratio " << ratio << " leaves no gradient");
    scale = ctx.scalar(1.0 / (1.0 - ratio), t);
  } else {
    std::string r = ctx.op("Cast", {ratio_value}, {{"to", Attribute::Int(static_cast<int64_t>(t))}});
    scale = ctx.op("Reciprocal", {ctx.op("Sub", {ctx.scalar(1, t), r})});
  }
  if (!training.empty()) scale = ctx.op("Where", {training, scale, ctx.scalar(1, t)});
  ctx.set_dx(0, ctx.op("Mul", {ctx.op("Mul", {ctx.dy(), mask}), scale}));
}

}  // namespace graphrun::autodiff

namespace graphrun::autodiff {

// GlobalMaxPool: the gradient goes to the maximum of each channel.
void global_max_pool_grad(GradContext& ctx) {
  const std::string& x = ctx.in(0);
  std::string hit = ctx.op("Equal", {x, ctx.out(0)});
  std::string dy = ctx.op("Expand", {ctx.dy(), ctx.shape_of(x)});
  ctx.set_dx(0, ctx.op("Where", {hit, dy, ctx.scalar(0, ctx.dtype(x))}));
}

GR_REGISTER_OPS(nn) {
  ops.op("Conv").gradient(conv_grad);
  ops.op(kGraphrunDomain, "ConvGrad").gradient(conv_grad_grad);
  ops.op("ConvTranspose").gradient(conv_transpose_grad);
  ops.op(kGraphrunDomain, "ConvTransposeGrad").gradient(conv_transpose_grad_grad);
  ops.op("MaxPool").gradient(max_pool_grad).output_dtype(1, DType::I64);
  ops.op("AveragePool").gradient(average_pool_grad);
  ops.op(kGraphrunDomain, "MaxPoolGrad").gradient(max_pool_grad_grad);
  ops.op(kGraphrunDomain, "AveragePoolGrad").gradient(average_pool_grad_grad);
  ops.op(kGraphrunDomain, "BatchNormalizationGrad").gradient(batch_norm_grad_grad);
  ops.op(kGraphrunDomain, "LayerNormalizationGrad").gradient(layer_norm_grad_grad);
  ops.op(kGraphrunDomain, "InstanceNormalizationGrad").gradient(instance_norm_grad_grad);
  ops.op("GlobalAveragePool").gradient(global_average_pool_grad);
  ops.op("GlobalMaxPool").gradient(global_max_pool_grad);
  ops.op("BatchNormalization").gradient(batch_norm_grad);
  ops.op("LayerNormalization").gradient(layer_norm_grad);
  ops.op("Dropout").gradient(dropout_grad).output_dtype(1, DType::Bool);
  // Random values do not depend on their inputs' values.
  ops.op("RandomNormal").no_gradient();
  ops.op("RandomUniform").no_gradient();
  ops.op("RandomNormalLike").no_gradient();
  ops.op("RandomUniformLike").no_gradient();
  ops.op("Bernoulli").no_gradient();
}

}  // namespace graphrun::autodiff

// Gradient rules of neural-network ops: Conv/ConvTranspose (ai.graphrun ConvGrad), pooling (MaxPoolGrad
// from the forward's Indices, AveragePoolGrad; GlobalAveragePool with standard ops), BatchNormalization,
// LayerNormalization (LayerNormalizationGrad from the forward's saved Mean and InvStdDev) and Dropout
// (the mask saved by the forward pass); and the second-order rules of graphrun's ConvGrad, MaxPoolGrad and
// AveragePoolGrad.
#include <climits>

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
// model that trains: a gradient penalty, a physics-informed net). dX is linear in dY and in W, dW in X and in dY,
// dB in dY; with g0, g1, g2 flowing into dX, dW, dB:
//   d dY = Conv(g0, W) + Conv(X, g1) + g2 over dY's batch and positions,
//   d X  = the dX of ConvGrad(dY, X, g1),  d W = the dW of ConvGrad(dY, g0, W).
void conv_grad_grad(GradContext& ctx) {
  const auto attrs = conv_attrs(ctx.fwd());
  const std::string &dy = ctx.in(0), &x = ctx.in(1), &w = ctx.in(2);
  const std::string &g0 = ctx.dy(0), &g1 = ctx.dy(1), &g2 = ctx.dy(2);
  if (ctx.needs(0)) {
    std::vector<std::string> parts;
    if (!g0.empty()) parts.push_back(ctx.op("Conv", {g0, w}, attrs));
    if (!g1.empty()) parts.push_back(ctx.op("Conv", {x, g1}, attrs));
    if (!g2.empty()) {
      const int r = ctx.rank(dy) >= 0 ? ctx.rank(dy) : ctx.rank(x);
      GR_CHECK(r >= 3, ctx.fwd().describe() << ": the gradient of dB needs the rank of '" << dy << "'");
      parts.push_back(ctx.op("Expand", {ctx.unsqueeze(g2, all_but_channel(r)), ctx.shape_of(dy)}));
    }
    if (!parts.empty()) ctx.set_dx(0, parts.size() == 1 ? parts[0] : ctx.op("Sum", parts));
  }
  if (ctx.needs(1) && !g1.empty())
    ctx.set_dx(1, ctx.op_n("ConvGrad", {dy, x, g1}, {true, false, false}, attrs, kGraphrunDomain)[0]);
  if (ctx.needs(2) && !g0.empty())
    ctx.set_dx(2, ctx.op_n("ConvGrad", {dy, g0, w}, {false, true, false}, attrs, kGraphrunDomain)[1]);
}
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
  ops.op("MaxPool").gradient(max_pool_grad).output_dtype(1, DType::I64);
  ops.op("AveragePool").gradient(average_pool_grad);
  ops.op(kGraphrunDomain, "MaxPoolGrad").gradient(max_pool_grad_grad);
  ops.op(kGraphrunDomain, "AveragePoolGrad").gradient(average_pool_grad_grad);
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

// Gradient rules of the quantize family. QuantizeLinear's output, MatMulInteger's, QLinearMatMul's, ConvInteger's
// and QLinearConv's are integers: no gradient flows back through them (rounding is flat almost everywhere). DequantizeLinear,
// Y = (X - zero_point) * scale, is linear in its float scale: dScale = the sum of dY * (X - zero_point) over
// every element of the scale's channel (all of them for a per-tensor scale); X and the zero point are
// integers.
#include "autodiff/rules/rules.h"

namespace graphrun::autodiff {
namespace {

void dequantize_linear_grad(GradContext& ctx) {
  if (!ctx.needs(1) || ctx.dy().empty()) return;
  const Node& n = ctx.fwd();
  const std::string& x = ctx.in(0);
  const std::string& scale = ctx.in(1);
  const DType t = ctx.dtype(scale);
  const auto to = [&](const std::string& v) { return ctx.op("Cast", {v}, {{"to", Attribute::Int(static_cast<int64_t>(t))}}); };
  const int r = ctx.rank(x), rs = ctx.rank(scale);
  GR_CHECK(r >= 0 && rs >= 0, n.describe() << ": the DequantizeLinear gradient needs the ranks of '" << x << "' and '"
                                           << scale << "'");
  Shape ss;
  const bool per_tensor = rs == 0 || (ctx.static_shape(scale, ss) && ss.size() == 1 && ss[0] == 1);  // (as the kernels)
  int64_t axis = -1;
  if (!per_tensor) axis = norm_axis(n.attr_i("axis", 1), r, n);
  std::string centred = to(x);
  if (n.has_input(2)) {
    std::string zp = to(ctx.in(2));
    if (!per_tensor) {  // [C] along the axis: [1, .., C, .., 1]
      std::vector<int64_t> view(static_cast<size_t>(r), 1);
      view[static_cast<size_t>(axis)] = -1;
      zp = ctx.reshape(zp, ctx.ints(view));
    }
    centred = ctx.op("Sub", {centred, zp});
  }
  const std::string prod = ctx.op("Mul", {ctx.dy(), centred});
  std::vector<int64_t> axes;
  for (int64_t d = 0; d < r; ++d)
    if (d != axis) axes.push_back(d);
  std::string d = axes.empty() ? prod : ctx.reduce_sum(prod, axes, false);
  if (per_tensor && rs == 1) d = ctx.reshape(d, ctx.ints({1}));
  ctx.set_dx(1, d);
}

// ai.graphrun FakeQuantize (a Q/DQ pair in training, pass fake_quantize): PyTorch's fake quantization backward,
// the straight-through estimator: dX = dY where round(X * (1 / scale)) + zero_point lies in the quantized range
// (narrowed by quant_min and quant_max where given), 0 where it saturates. The scale and zero point get none (PyTorch's FakeQuantize with fixed qparams).
void fake_quantize_grad(GradContext& ctx) {
  if (!ctx.needs(0) || ctx.dy().empty()) return;
  const Node& n = ctx.fwd();
  const std::string& x = ctx.in(0);
  const DType t = ctx.dtype(x);
  const auto to = [&](const std::string& v) { return ctx.op("Cast", {v}, {{"to", Attribute::Int(static_cast<int64_t>(t))}}); };
  const int r = ctx.rank(x), rs = ctx.rank(ctx.in(1));
  GR_CHECK(r >= 0 && rs >= 0, n.describe() << ": the FakeQuantize gradient needs the ranks of its inputs");
  Shape ss;
  const bool per_tensor = rs == 0 || (ctx.static_shape(ctx.in(1), ss) && ss.size() == 1 && ss[0] == 1);  // (as the kernels)
  auto channel_view = [&](const std::string& v) {  // [C] along the axis: [1, .., C, .., 1]
    if (per_tensor) return v;
    std::vector<int64_t> view(static_cast<size_t>(r), 1);
    view[static_cast<size_t>(norm_axis(n.attr_i("axis", 1), r, n))] = -1;
    return ctx.reshape(v, ctx.ints(view));
  };
  // x * (1 / scale), as PyTorch's mask computes it (its inv_scale): a channel's largest weight of a symmetric
  // per-channel scale lands on a half there, and x / scale may round it the other way.
  std::string q = ctx.op("Round", {ctx.op("Mul", {x, channel_view(ctx.op("Reciprocal", {ctx.in(1)}))})});
  const bool signed8 = n.has_input(2) && ctx.dtype(ctx.in(2)) == DType::I8;
  if (n.has_input(2)) q = ctx.op("Add", {q, channel_view(to(ctx.in(2)))});
  int64_t lo = signed8 ? -128 : 0, hi = signed8 ? 127 : 255;
  if (n.has_attr("quant_min")) lo = std::max(lo, n.attr_i("quant_min", lo));
  if (n.has_attr("quant_max")) hi = std::min(hi, n.attr_i("quant_max", hi));
  const std::string inside = ctx.op("And", {ctx.op("GreaterOrEqual", {q, ctx.scalar(static_cast<double>(lo), t)}),
                                            ctx.op("LessOrEqual", {q, ctx.scalar(static_cast<double>(hi), t)})});
  ctx.set_dx(0, ctx.op("Where", {inside, ctx.dy(), ctx.scalar(0, t)}));
}

}  // namespace

GR_REGISTER_OPS(quantize) {
  ops.op(kGraphrunDomain, "FakeQuantize").gradient(fake_quantize_grad);
  ops.op("QuantizeLinear").no_gradient();
  ops.op("DequantizeLinear").gradient(dequantize_linear_grad);
  ops.op("MatMulInteger").no_gradient().output_dtype(0, DType::I32);
  ops.op("QLinearMatMul").no_gradient();
  ops.op("ConvInteger").no_gradient().output_dtype(0, DType::I32);
  ops.op("QLinearConv").no_gradient();
}

}  // namespace graphrun::autodiff

// Gradient rule of Resize and Upsample (F.interpolate, nn.Upsample): ai.graphrun ResizeGrad w.r.t. X, from
// X's shape (a Constant, or Shape(X) when symbolic) and the forward's roi and scales. roi, scales and sizes
// get no gradient: they place the samples, they are not sampled. ResizeGrad has its own rule, for second derivatives.
#include "autodiff/rules/rules.h"

namespace graphrun::autodiff {
namespace {

void resize_grad(GradContext& ctx) {
  if (!ctx.needs(0) || ctx.dy().empty()) return;
  const Node& n = ctx.fwd();
  std::map<std::string, Attribute> attrs;
  for (const char* k : {"mode", "coordinate_transformation_mode", "nearest_mode", "cubic_coeff_a", "exclude_outside",
                        "extrapolation_value"})
    if (const Attribute* a = n.attr(k)) attrs[k] = *a;
  std::string roi, scales;
  const bool legacy = n.op_type == "Upsample" || ctx.opset() < 11;
  if (legacy) {
    // Upsample and Resize-10 sample at asymmetric coordinates and round nearest down.
    attrs["coordinate_transformation_mode"] = Attribute::Str("asymmetric");
    attrs["nearest_mode"] = Attribute::Str("floor");
    if (n.attr_s("mode", "nearest") == "bilinear") attrs["mode"] = Attribute::Str("linear");
    if (n.op_type == "Upsample" && ctx.opset() < 9) {
      std::vector<float> s = n.attr_floats("scales");
      Tensor t(DType::F32, {static_cast<int64_t>(s.size())});
      std::copy(s.begin(), s.end(), t.data<float>());
      scales = ctx.op("Constant", {}, {{"value", Attribute::Tens(t)}});
      ctx.graph().values[scales] = ValueInfo{DType::F32, true, {Dim(static_cast<int64_t>(s.size()))}};
    } else {
      scales = ctx.in(1);
    }
  } else {
    roi = ctx.num_inputs() > 1 ? ctx.in(1) : "";
    scales = ctx.num_inputs() > 2 ? ctx.in(2) : "";
  }
  std::vector<std::string> ins{ctx.dy(), ctx.shape_of(ctx.in(0)), roi, scales};
  while (!ins.empty() && ins.back().empty()) ins.pop_back();
  ctx.set_dx(0, ctx.op("ResizeGrad", ins, attrs, kGraphrunDomain));
}

// ResizeGrad added dY back along the forward's interpolation taps, the transpose of Resize's linear map: its own
// gradient is Resize of g with the same attributes (ResizeGrad's are Resize-11's), at the same scales, or at
// dY's size where the forward was given sizes. For second derivatives through an upsampling network.
void resize_grad_grad(GradContext& ctx) {
  if (!ctx.needs(0) || ctx.dy().empty()) return;
  const Node& n = ctx.fwd();
  GR_CHECK(ctx.opset() >= 11,
           n.describe() << ": its gradient needs Resize of opset 11 or later, the model has opset " << ctx.opset());
  std::map<std::string, Attribute> attrs;
  for (const char* k : {"mode", "coordinate_transformation_mode", "nearest_mode", "cubic_coeff_a", "exclude_outside",
                        "extrapolation_value"})
    if (const Attribute* a = n.attr(k)) attrs[k] = *a;
  auto empty_floats = [&] {
    const std::string c = ctx.op("Constant", {}, {{"value", Attribute::Tens(Tensor(DType::F32, {0}))}});
    ctx.graph().values[c] = ValueInfo{DType::F32, true, {Dim(0)}};
    return c;
  };
  std::string roi = ctx.num_inputs() > 2 ? ctx.in(2) : "", scales = ctx.num_inputs() > 3 ? ctx.in(3) : "";
  if (roi.empty() && ctx.opset() < 13) roi = empty_floats();
  std::vector<std::string> ins{ctx.dy(), roi, scales};
  if (scales.empty()) {
    if (ctx.opset() < 13) ins[2] = empty_floats();
    ins.push_back(ctx.shape_of(ctx.in(0)));
  }
  ctx.set_dx(0, ctx.op("Resize", ins, attrs));
}

}  // namespace

GR_REGISTER_OPS(resize) {
  ops.op("Resize").gradient(resize_grad);
  ops.op("Upsample").gradient(resize_grad);
  ops.op(kGraphrunDomain, "ResizeGrad").gradient(resize_grad_grad);
}

}  // namespace graphrun::autodiff

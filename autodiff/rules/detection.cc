// Gradient rules of the detection family: NonMaxSuppression's output is box indices, which carry no gradient.
// MaxRoiPool's X gets ai.graphrun MaxRoiPoolGrad, dY at each bin's maximum, as torchvision's roi_pool.
// RoiAlign's X gets ai.graphrun RoiAlignGrad (the forward's taps, recomputed from the regions); the regions get
// none, as in torchvision's roi_align (a region proposal is not differentiated through), nor the batch indices.
// RoiAlignGrad (mode avg) has a rule of its own: RoiAlign of the incoming gradient.
#include "autodiff/rules/rules.h"

namespace graphrun::autodiff {
namespace {

void roi_align_grad(GradContext& ctx) {
  if (ctx.dy().empty() || !ctx.needs(0)) return;
  std::map<std::string, Attribute> attrs;
  for (const char* k : {"mode", "output_height", "output_width", "sampling_ratio", "spatial_scale"})
    if (const Attribute* a = ctx.fwd().attr(k)) attrs[k] = *a;
  // The forward's coordinate mode as its opset reads it: the graphrun op has no opset of its own.
  const Attribute* ct = ctx.fwd().attr("coordinate_transformation_mode");
  attrs["coordinate_transformation_mode"] =
      ct ? *ct : Attribute::Str(ctx.opset() >= 16 ? "half_pixel" : "output_half_pixel");
  ctx.set_dx(0, ctx.op("RoiAlignGrad", {ctx.dy(), ctx.in(0), ctx.in(1), ctx.in(2)}, attrs, kGraphrunDomain));
}

// RoiAlignGrad in mode avg is linear in dY, and X's values do not enter it (only its shape): its derivative in dY is
// its adjoint, RoiAlign of the incoming gradient over the same regions (a penalty on an input gradient through a
// detection head). Mode max routes dY by X's values: no rule.
void roi_align_grad_grad(GradContext& ctx) {
  if (ctx.dy().empty() || !ctx.needs(0)) return;
  const Node& n = ctx.fwd();
  GR_CHECK(n.attr_s("mode", "avg") == "avg", n.describe()
                                                 << ": a second derivative through RoiAlign's gradient has "
                                                    "a rule in mode avg only (mode max routes dY by X's values)");
  std::map<std::string, Attribute> attrs;
  for (const char* k : {"mode", "output_height", "output_width", "sampling_ratio", "spatial_scale"})
    if (const Attribute* a = n.attr(k)) attrs[k] = *a;
  const std::string ct = n.attr_s("coordinate_transformation_mode", "half_pixel");
  if (ctx.opset() >= 16)
    attrs["coordinate_transformation_mode"] = Attribute::Str(ct);
  else  // (RoiAlign below opset 16 has no coordinate mode: output_half_pixel)
    GR_CHECK(ct == "output_half_pixel", n.describe() << ": its second derivative needs RoiAlign of opset 16 for "
                                                        "coordinate_transformation_mode '"
                                                     << ct << "', the model has opset " << ctx.opset());
  ctx.set_dx(0, ctx.op("RoiAlign", {ctx.dy(), ctx.in(2), ctx.in(3)}, attrs));
}

// MaxRoiPool's X: ai.graphrun MaxRoiPoolGrad (each bin's maximum found again); the regions get none.
void max_roi_pool_grad(GradContext& ctx) {
  if (ctx.dy().empty() || !ctx.needs(0)) return;
  std::map<std::string, Attribute> attrs;
  for (const char* k : {"pooled_shape", "spatial_scale"})
    if (const Attribute* a = ctx.fwd().attr(k)) attrs[k] = *a;
  ctx.set_dx(0, ctx.op("MaxRoiPoolGrad", {ctx.dy(), ctx.in(0), ctx.in(1)}, attrs, kGraphrunDomain));
}

}  // namespace

GR_REGISTER_OPS(detection) {
  ops.op("NonMaxSuppression").no_gradient().output_dtype(0, DType::I64);
  ops.op("RoiAlign").gradient(roi_align_grad);
  ops.op("MaxRoiPool").gradient(max_roi_pool_grad);
  ops.op(kGraphrunDomain, "RoiAlignGrad").gradient(roi_align_grad_grad);
}

}  // namespace graphrun::autodiff

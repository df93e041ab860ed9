// Gradient rules of the detection family: NonMaxSuppression's output is box indices, which carry no gradient.
// MaxRoiPool's X gets ai.graphrun MaxRoiPoolGrad, dY at each bin's maximum, as torchvision's roi_pool.
// RoiAlign's X gets ai.graphrun RoiAlignGrad (the forward's taps, recomputed from the regions); the regions get
// none, as in torchvision's roi_align (a region proposal is not differentiated through), nor the batch indices.
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
}

}  // namespace graphrun::autodiff

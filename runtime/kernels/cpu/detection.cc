// CPU kernels: detection family. NonMaxSuppression (runtime/kernels/nms.h, shared with the CUDA kernel; its
// output's length depends on the values, as NonZero's) and RoiAlign (runtime/kernels/roi_align.h).
#include <cstring>

#include "runtime/kernels/cpu/half_compute.h"
#include "runtime/kernels/cpu/math_common.h"
#include "runtime/kernels/nms.h"
#include "runtime/kernels/roi_align.h"

namespace graphrun::runtime::cpu {

namespace {

void nms_kernel(KernelContext& ctx) {
  auto opt = [&](int i) { return ctx.has_input(i) ? &ctx.input(i) : nullptr; };
  const std::vector<int64_t> sel = non_max_suppression(ctx.node(), ctx.input(0), ctx.input(1), opt(2), opt(3), opt(4));
  Tensor& y = ctx.output(0, {static_cast<int64_t>(sel.size() / 3), 3}, DType::I64);
  if (!sel.empty()) std::memcpy(y.raw(), sel.data(), sel.size() * sizeof(int64_t));
}

// RoiAlign (mode avg; runtime/kernels/roi_align.h's formula per output element). A region can reach outside
// the image, where it reads 0; the batch index must name an image; roi::check_regions refuses a region whose
// sampling grid would take hours.
template <class T>
void roi_align_typed(KernelContext& ctx) {
  const Tensor &x = ctx.input(0), &rois = ctx.input(1), &bi = ctx.input(2);
  GR_CHECK(bi.dtype() == DType::I64 || bi.dtype() == DType::I32, "RoiAlign: batch_indices must be int64");
  GR_CHECK(rois.dtype() == x.dtype(), "RoiAlign: rois and X differ in element type");
  const roi::Params p = roi::params(ctx.node(), ctx.opset(), x.shape(), rois.shape(), bi.shape());
  const int64_t R = rois.dim(0), C = x.dim(1), HW = p.H * p.W, bins = p.out_h * p.out_w;
  const std::vector<int64_t> b = bi.as_int64s();
  for (int64_t r = 0; r < R; ++r)
    GR_CHECK(b[static_cast<size_t>(r)] >= 0 && b[static_cast<size_t>(r)] < x.dim(0),
             "RoiAlign: batch index " << b[static_cast<size_t>(r)] << " of region " << r << " is out of range for "
                                      << x.dim(0) << " images");
  roi::check_regions(p, rois.as_doubles());
  T* y = ptr<T>(ctx.output(0, {R, C, p.out_h, p.out_w}, x.dtype()));
  const T* px = ptr<T>(x);
  const T* pr = ptr<T>(rois);
#pragma omp parallel for num_threads(threads_for(ctx, R * C * bins * 4)) schedule(static)
  for (int64_t rc = 0; rc < R * C; ++rc) {
    const int64_t r = rc / C, c = rc % C;
    const T* plane = px + (b[static_cast<size_t>(r)] * C + c) * HW;
    for (int64_t k = 0; k < bins; ++k) y[rc * bins + k] = roi::value(plane, pr + 4 * r, k / p.out_w, k % p.out_w, p);
  }
}

void roi_align_kernel(KernelContext& ctx) {
  dispatch_float(ctx.input(0).dtype(), "RoiAlign", [&](auto tag) { roi_align_typed<decltype(tag)>(ctx); });
}

}  // namespace

GR_REGISTER_OPS(detection) {
  ops.op("NonMaxSuppression").cpu(nms_kernel);
  ops.op("RoiAlign").cpu(via_f32<roi_align_kernel>);
}

}  // namespace graphrun::runtime::cpu

// CPU kernels: detection family. NonMaxSuppression (runtime/kernels/nms.h, shared with the CUDA kernel; its
// output's length depends on the values, as NonZero's), RoiAlign and its gradient RoiAlignGrad
// (runtime/kernels/roi_align.h), MaxRoiPool and its gradient MaxRoiPoolGrad (runtime/kernels/roi_pool.h).
#include <cstring>

#include "runtime/kernels/cpu/half_compute.h"
#include "runtime/kernels/cpu/math_common.h"
#include "runtime/kernels/nms.h"
#include "runtime/kernels/roi_align.h"
#include "runtime/kernels/roi_pool.h"

namespace graphrun::runtime::cpu {

namespace {

void nms_kernel(KernelContext& ctx) {
  auto opt = [&](int i) { return ctx.has_input(i) ? &ctx.input(i) : nullptr; };
  const std::vector<int64_t> sel = non_max_suppression(ctx.node(), ctx.input(0), ctx.input(1), opt(2), opt(3), opt(4));
  Tensor& y = ctx.output(0, {static_cast<int64_t>(sel.size() / 3), 3}, DType::I64);
  if (!sel.empty()) std::memcpy(y.raw(), sel.data(), sel.size() * sizeof(int64_t));
}

// RoiAlign's inputs X, rois and batch_indices, checked: the node's parameters and the batch index of each region.
// A region can reach outside the image, where it reads 0; the batch index must name an image; roi::check_regions
// refuses a region whose sampling grid would take hours.
roi::Params checked_regions(KernelContext& ctx, const Tensor& x, const Tensor& rois, const Tensor& bi,
                            std::vector<int64_t>& b) {
  GR_CHECK(bi.dtype() == DType::I64 || bi.dtype() == DType::I32, "RoiAlign: batch_indices must be int64");
  GR_CHECK(rois.dtype() == x.dtype(), "RoiAlign: rois and X differ in element type");
  const roi::Params p = roi::params(ctx.node(), ctx.opset(), x.shape(), rois.shape(), bi.shape());
  b = bi.as_int64s();
  for (size_t r = 0; r < b.size(); ++r)
    GR_CHECK(b[r] >= 0 && b[r] < x.dim(0),
             "RoiAlign: batch index " << b[r] << " of region " << r << " is out of range for " << x.dim(0) << " images");
  roi::check_regions(p, rois.as_doubles());
  return p;
}

// RoiAlign (modes avg and max; runtime/kernels/roi_align.h's formula per output element).
template <class T>
void roi_align_typed(KernelContext& ctx) {
  const Tensor &x = ctx.input(0), &rois = ctx.input(1), &bi = ctx.input(2);
  std::vector<int64_t> b;
  const roi::Params p = checked_regions(ctx, x, rois, bi, b);
  const int64_t R = rois.dim(0), C = x.dim(1), HW = p.H * p.W, bins = p.out_h * p.out_w;
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

// A region op's gradient (dY at input 0, X at input 1): dY checked to be [R, C, out_h, out_w] of X's type, and dX
// zeroed; nullptr when X is empty.
Tensor* zeroed_region_grad(KernelContext& ctx, const char* op, int64_t R, int64_t out_h, int64_t out_w) {
  const Tensor &dy = ctx.input(0), &x = ctx.input(1);
  const Shape want{R, x.dim(1), out_h, out_w};
  GR_CHECK(dy.dtype() == x.dtype() && dy.shape() == want, op << ": dY " << dtype_name(dy.dtype())
                                                             << shape_str(dy.shape()) << " does not fit "
                                                             << dtype_name(x.dtype()) << shape_str(want));
  Tensor& dx = ctx.output(0, x.shape(), x.dtype());
  if (dx.numel() == 0) return nullptr;
  std::memset(dx.raw(), 0, dx.nbytes());
  return &dx;
}

// RoiAlignGrad(dY, X, rois, batch_indices) -> dX: each bin's dY spread back over its samples' taps. A thread owns
// image planes, adding the regions of that image in their order, so the sums do not depend on the threads.
template <class T>
void roi_align_grad_typed(KernelContext& ctx) {
  const Tensor &dy = ctx.input(0), &x = ctx.input(1), &rois = ctx.input(2), &bi = ctx.input(3);
  std::vector<int64_t> b;
  const roi::Params p = checked_regions(ctx, x, rois, bi, b);
  const int64_t R = rois.dim(0), N = x.dim(0), C = x.dim(1), HW = p.H * p.W, bins = p.out_h * p.out_w;
  Tensor* dx = zeroed_region_grad(ctx, "RoiAlignGrad", R, p.out_h, p.out_w);
  if (!dx) return;
  T* pdx = ptr<T>(*dx);
  const T *px = ptr<T>(x), *pdy = ptr<T>(dy), *pr = ptr<T>(rois);
#pragma omp parallel for num_threads(threads_for(ctx, R * C * bins * 16)) schedule(static)
  for (int64_t nc = 0; nc < N * C; ++nc) {
    const int64_t n = nc / C, c = nc % C;
    for (int64_t r = 0; r < R; ++r) {
      if (b[static_cast<size_t>(r)] != n) continue;
      for (int64_t k = 0; k < bins; ++k)
        roi::add_gradient(pdx + nc * HW, px + nc * HW, pr + 4 * r, k / p.out_w, k % p.out_w, p,
                          pdy[(r * C + c) * bins + k]);
    }
  }
}

// MaxRoiPool: each output bin the maximum of its window (roi_pool::max_of), a thread's share of the region planes.
template <class T>
void max_roi_pool_typed(KernelContext& ctx) {
  const Tensor &x = ctx.input(0), &rois = ctx.input(1);
  const roi_pool::Params p = roi_pool::params(ctx.node(), x.shape(), rois.shape());
  GR_CHECK(rois.dtype() == x.dtype(), "MaxRoiPool: rois and X differ in element type");
  const std::vector<int64_t> b = roi_pool::batches(rois.as_doubles(), x.dim(0), p);
  const int64_t R = rois.dim(0), C = x.dim(1), HW = p.H * p.W, bins = p.out_h * p.out_w;
  Tensor& y = ctx.output(0, {R, C, p.out_h, p.out_w}, x.dtype());
  T* py = ptr<T>(y);
  const T *px = ptr<T>(x), *pr = ptr<T>(rois);
#pragma omp parallel for num_threads(threads_for(ctx, R* C* bins * 16)) schedule(static)
  for (int64_t rc = 0; rc < R * C; ++rc) {
    const int64_t r = rc / C, c = rc % C;
    const T* plane = px + (b[static_cast<size_t>(r)] * C + c) * HW;
    for (int64_t k = 0; k < bins; ++k)
      py[rc * bins + k] = roi_pool::max_of(plane, roi_pool::window(pr + 5 * r, k / p.out_w, k % p.out_w, p), p.W).value;
  }
}

// MaxRoiPoolGrad: a thread's share of the image planes (n, c), each adding the dY of every bin of the regions of
// image n, in their order, at the bin's maximum.
template <class T>
void max_roi_pool_grad_typed(KernelContext& ctx) {
  const Tensor &dy = ctx.input(0), &x = ctx.input(1), &rois = ctx.input(2);
  const roi_pool::Params p = roi_pool::params(ctx.node(), x.shape(), rois.shape());
  GR_CHECK(rois.dtype() == x.dtype() && dy.dtype() == x.dtype(), "MaxRoiPoolGrad: dY, X and rois differ in type");
  const std::vector<int64_t> b = roi_pool::batches(rois.as_doubles(), x.dim(0), p);
  const int64_t R = rois.dim(0), N = x.dim(0), C = x.dim(1), HW = p.H * p.W, bins = p.out_h * p.out_w;
  Tensor* dx = zeroed_region_grad(ctx, "MaxRoiPoolGrad", R, p.out_h, p.out_w);
  if (!dx) return;
  T* pdx = ptr<T>(*dx);
  const T *px = ptr<T>(x), *pdy = ptr<T>(dy), *pr = ptr<T>(rois);
#pragma omp parallel for num_threads(threads_for(ctx, R* C* bins * 16)) schedule(static)
  for (int64_t nc = 0; nc < N * C; ++nc) {
    const int64_t n = nc / C, c = nc % C;
    for (int64_t r = 0; r < R; ++r) {
      if (b[static_cast<size_t>(r)] != n) continue;
      for (int64_t k = 0; k < bins; ++k) {
        const roi_pool::Max<T> m =
            roi_pool::max_of(px + nc * HW, roi_pool::window(pr + 5 * r, k / p.out_w, k % p.out_w, p), p.W);
        if (m.at >= 0) pdx[nc * HW + m.at] += pdy[(r * C + c) * bins + k];
      }
    }
  }
}

void max_roi_pool_kernel(KernelContext& ctx) {
  dispatch_float(ctx.input(0).dtype(), "MaxRoiPool", [&](auto tag) { max_roi_pool_typed<decltype(tag)>(ctx); });
}

void max_roi_pool_grad_kernel(KernelContext& ctx) {
  dispatch_float(ctx.input(1).dtype(), "MaxRoiPoolGrad",
                 [&](auto tag) { max_roi_pool_grad_typed<decltype(tag)>(ctx); });
}

void roi_align_kernel(KernelContext& ctx) {
  dispatch_float(ctx.input(0).dtype(), "RoiAlign", [&](auto tag) { roi_align_typed<decltype(tag)>(ctx); });
}

void roi_align_grad_kernel(KernelContext& ctx) {
  dispatch_float(ctx.input(1).dtype(), "RoiAlignGrad", [&](auto tag) { roi_align_grad_typed<decltype(tag)>(ctx); });
}

}  // namespace

GR_REGISTER_OPS(detection) {
  ops.op("NonMaxSuppression").cpu(nms_kernel);
  ops.op("RoiAlign").cpu(via_f32<roi_align_kernel>);
  ops.op(kGraphrunDomain, "RoiAlignGrad")
      .cpu(via_f32<roi_align_grad_kernel>)
      .schema(OpSchemaSpec("gradient of `RoiAlign` w.r.t. X: mode avg divides each output bin's dY among its "
                           "sampling points and adds it back into their four bilinear taps; mode max gives it to the "
                           "bin's largest weighted tap, times the weight; the regions get none")
                  .attr("mode", "as RoiAlign", Attribute::Str("avg"))
                  .attr("output_height", "as RoiAlign", Attribute::Int(1))
                  .attr("output_width", "as RoiAlign", Attribute::Int(1))
                  .attr("sampling_ratio", "as RoiAlign", Attribute::Int(0))
                  .attr("spatial_scale", "as RoiAlign", Attribute::Float(1.f))
                  .attr("coordinate_transformation_mode", "as RoiAlign (the forward's, resolved at its opset)",
                        Attribute::Str("half_pixel"))
                  .input("dY", "gradient of Y", "T1")
                  .input("X", "the forward's X", "T1")
                  .input("rois", "the forward's rois", "T1")
                  .input("batch_indices", "the forward's batch_indices", "T2")
                  .output("dX", "gradient of X", "T1")
                  .type("T1", float_tensor_types(), "float tensors")
                  .type("T2", {"tensor(int64)"}, "int64")
                  .output_like(0, 1));
  ops.op("MaxRoiPool").cpu(via_f32<max_roi_pool_kernel>);
  ops.op(kGraphrunDomain, "MaxRoiPoolGrad")
      .cpu(via_f32<max_roi_pool_grad_kernel>)
      .schema(OpSchemaSpec("gradient of `MaxRoiPool` w.r.t. X: each output bin's dY added at the first position of its "
                           "window's maximum (none for an empty window); the regions get none")
                  .attr("pooled_shape", "as MaxRoiPool", Attribute::Ints({1, 1}))
                  .attr("spatial_scale", "as MaxRoiPool", Attribute::Float(1.f))
                  .input("dY", "gradient of Y", "T")
                  .input("X", "the forward's X", "T")
                  .input("rois", "the forward's rois", "T")
                  .output("dX", "gradient of X", "T")
                  .type("T", float_tensor_types(), "float tensors")
                  .output_like(0, 1));
}

}  // namespace graphrun::runtime::cpu

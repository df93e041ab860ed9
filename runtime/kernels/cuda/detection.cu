// CUDA kernels: detection family (the CPU's detection.cc). NonMaxSuppression reads its inputs back and selects
// on the host (runtime/kernels/nms.h, as the CPU): its output's length depends on the values. RoiAlign and
// RoiAlignGrad; MaxRoiPool and MaxRoiPoolGrad.
#include "runtime/kernels/cuda/common.cuh"
#include "runtime/kernels/nms.h"
#include "runtime/kernels/roi_align.h"
#include "runtime/kernels/roi_pool.h"

namespace graphrun::runtime::cuda {
namespace {

void nms_op(KernelContext& ctx) {
  HostInput host[5];
  const Tensor* in[5] = {nullptr, nullptr, nullptr, nullptr, nullptr};
  for (int i = 0; i < 5; ++i)
    if (ctx.has_input(i)) {
      host[i] = host_input(ctx, i);
      in[i] = &host[i].t;
    }
  const std::vector<int64_t> sel = non_max_suppression(ctx.node(), *in[0], *in[1], in[2], in[3], in[4]);
  Tensor& Y = ctx.output(0, {static_cast<int64_t>(sel.size() / 3), 3}, DType::I64);
  if (!sel.empty())
    GR_CUDA_CHECK(cudaMemcpyAsync(Y.raw(), sel.data(), sel.size() * sizeof(int64_t), cudaMemcpyHostToDevice, stream_of(ctx)));
}

// RoiAlign: a thread per output element, runtime/kernels/roi_align.h's formula (as the CPU's). The regions
// and batch indices are read back first, to check them as the CPU does (the device cannot raise).
template <class T>
__global__ void roi_align_kernel(const T* x, const T* rois, const int64_t* batch, T* y, roi::Params p, int64_t C,
                                 int64_t n) {
  GR_GRID_STRIDE(i, n) {
    const int64_t bins = p.out_h * p.out_w, k = i % bins, rc = i / bins, r = rc / C, c = rc % C;
    const T* plane = x + (batch[r] * C + c) * p.H * p.W;
    y[i] = roi::value(plane, rois + 4 * r, k / p.out_w, k % p.out_w, p);
  }
}

// The node's parameters for inputs X, rois and batch_indices at positions x, x + 1, x + 2, checked as the CPU checks
// them: the regions and batch indices are read back first (the device cannot raise).
roi::Params checked_regions(KernelContext& ctx, int x, const char* op) {
  const Tensor &X = ctx.input(x), &Rois = ctx.input(x + 1), &B = ctx.input(x + 2);
  GR_CHECK(B.dtype() == DType::I64, op << " on CUDA takes int64 batch_indices, got " << dtype_name(B.dtype()));
  GR_CHECK(Rois.dtype() == X.dtype() && (X.dtype() == DType::F32 || X.dtype() == DType::F64),
           op << " on CUDA takes f32 or f64 X and rois alike");
  const roi::Params p = roi::params(ctx.node(), ctx.opset(), X.shape(), Rois.shape(), B.shape());
  roi::check_regions(p, host_doubles(ctx, x + 1));
  for (int64_t b : host_int64s(ctx, x + 2))
    GR_CHECK(b >= 0 && b < X.dim(0), "RoiAlign: batch index " << b << " is out of range for " << X.dim(0) << " images");
  return p;
}

void roi_align_op(KernelContext& ctx) {
  const Tensor &X = ctx.input(0), &Rois = ctx.input(1), &B = ctx.input(2);
  const roi::Params p = checked_regions(ctx, 0, "RoiAlign");
  const int64_t R = Rois.dim(0), C = X.dim(1);
  Tensor& Y = ctx.output(0, {R, C, p.out_h, p.out_w}, X.dtype());
  const int64_t n = Y.numel();
  if (n == 0) return;
  if (X.dtype() == DType::F32)
    roi_align_kernel<float><<<grid_for(n), kThreads, 0, stream_of(ctx)>>>(dptr<float>(X), dptr<float>(Rois),
                                                                          dptr<int64_t>(B), dptr<float>(Y), p, C, n);
  else
    roi_align_kernel<double><<<grid_for(n), kThreads, 0, stream_of(ctx)>>>(dptr<double>(X), dptr<double>(Rois),
                                                                           dptr<int64_t>(B), dptr<double>(Y), p, C, n);
  GR_LAUNCH_CHECK("roi_align");
}

// RoiAlignGrad: a thread per image plane (n, c), adding the regions of image n in their order (no atomics, the
// CPU's order), each bin's dY given to its taps (roi::add_gradient: spread in mode avg, the largest in mode max).
template <class T>
__global__ void roi_align_grad_kernel(const T* dy, const T* x, const T* rois, const int64_t* batch, T* dx,
                                      roi::Params p, int64_t R, int64_t C, int64_t planes) {
  GR_GRID_STRIDE(nc, planes) {
    const int64_t n = nc / C, c = nc % C, bins = p.out_h * p.out_w, HW = p.H * p.W;
    for (int64_t r = 0; r < R; ++r) {
      if (batch[r] != n) continue;
      for (int64_t k = 0; k < bins; ++k)
        roi::add_gradient(dx + nc * HW, x + nc * HW, rois + 4 * r, k / p.out_w, k % p.out_w, p,
                          dy[(r * C + c) * bins + k]);
    }
  }
}

// A region op's gradient (dY at input 0, X at input 1): dY checked to be [R, C, out_h, out_w] of X's type, and dX
// zeroed; nullptr when X is empty.
Tensor* zeroed_region_grad(KernelContext& ctx, const char* op, int64_t R, int64_t out_h, int64_t out_w) {
  const Tensor &dY = ctx.input(0), &X = ctx.input(1);
  GR_CHECK(dY.dtype() == X.dtype(), op << " on CUDA takes dY of X's type");
  const Shape want{R, X.dim(1), out_h, out_w};
  GR_CHECK(dY.shape() == want, op << ": dY " << shape_str(dY.shape()) << " does not fit " << shape_str(want));
  Tensor& dX = ctx.output(0, X.shape(), X.dtype());
  if (dX.numel() == 0) return nullptr;
  GR_CUDA_CHECK(cudaMemsetAsync(dX.raw(), 0, dX.nbytes(), stream_of(ctx)));
  return &dX;
}

void roi_align_grad_op(KernelContext& ctx) {
  const Tensor &dY = ctx.input(0), &X = ctx.input(1), &Rois = ctx.input(2), &B = ctx.input(3);
  const roi::Params p = checked_regions(ctx, 1, "RoiAlignGrad");
  const int64_t R = Rois.dim(0), C = X.dim(1);
  Tensor* dX = zeroed_region_grad(ctx, "RoiAlignGrad", R, p.out_h, p.out_w);
  if (!dX) return;
  cudaStream_t st = stream_of(ctx);
  const int64_t planes = X.dim(0) * C;
  if (X.dtype() == DType::F32)
    roi_align_grad_kernel<float><<<grid_for(planes), kThreads, 0, st>>>(
        dptr<float>(dY), dptr<float>(X), dptr<float>(Rois), dptr<int64_t>(B), dptr<float>(*dX), p, R, C, planes);
  else
    roi_align_grad_kernel<double><<<grid_for(planes), kThreads, 0, st>>>(
        dptr<double>(dY), dptr<double>(X), dptr<double>(Rois), dptr<int64_t>(B), dptr<double>(*dX), p, R, C, planes);
  GR_LAUNCH_CHECK("roi_align_grad");
}

// MaxRoiPool: a thread per output element (roi_pool::max_of, as the CPU's). The regions are read back first, to
// check their batch indices and corners as the CPU does (the device cannot raise).
template <class T>
__global__ void max_roi_pool_kernel(const T* x, const T* rois, T* y, roi_pool::Params p, int64_t C, int64_t n) {
  GR_GRID_STRIDE(i, n) {
    const int64_t bins = p.out_h * p.out_w, k = i % bins, rc = i / bins, r = rc / C, c = rc % C;
    const T* roi = rois + 5 * r;
    const T* plane = x + (static_cast<int64_t>(roi[0]) * C + c) * p.H * p.W;
    y[i] = roi_pool::max_of(plane, roi_pool::window(roi, k / p.out_w, k % p.out_w, p), p.W).value;
  }
}

// The node's parameters for X and rois at positions x, x + 1, the regions checked on the host as the CPU checks them.
roi_pool::Params checked_pool_regions(KernelContext& ctx, int x, const char* op) {
  const Tensor &X = ctx.input(x), &Rois = ctx.input(x + 1);
  GR_CHECK(Rois.dtype() == X.dtype() && (X.dtype() == DType::F32 || X.dtype() == DType::F64),
           op << " on CUDA takes f32 or f64 X and rois alike");
  const roi_pool::Params p = roi_pool::params(ctx.node(), X.shape(), Rois.shape());
  roi_pool::batches(host_doubles(ctx, x + 1), X.dim(0), p);
  return p;
}

void max_roi_pool_op(KernelContext& ctx) {
  const Tensor &X = ctx.input(0), &Rois = ctx.input(1);
  const roi_pool::Params p = checked_pool_regions(ctx, 0, "MaxRoiPool");
  const int64_t R = Rois.dim(0), C = X.dim(1);
  Tensor& Y = ctx.output(0, {R, C, p.out_h, p.out_w}, X.dtype());
  const int64_t n = Y.numel();
  if (n == 0) return;
  if (X.dtype() == DType::F32)
    max_roi_pool_kernel<float>
        <<<grid_for(n), kThreads, 0, stream_of(ctx)>>>(dptr<float>(X), dptr<float>(Rois), dptr<float>(Y), p, C, n);
  else
    max_roi_pool_kernel<double>
        <<<grid_for(n), kThreads, 0, stream_of(ctx)>>>(dptr<double>(X), dptr<double>(Rois), dptr<double>(Y), p, C, n);
  GR_LAUNCH_CHECK("max_roi_pool");
}

// MaxRoiPoolGrad: a thread per image plane (n, c), adding the dY of the regions of image n in their order at each
// bin's maximum (no atomics, the CPU's order).
template <class T>
__global__ void max_roi_pool_grad_kernel(const T* dy, const T* x, const T* rois, T* dx, roi_pool::Params p, int64_t R,
                                         int64_t C, int64_t planes) {
  GR_GRID_STRIDE(nc, planes) {
    const int64_t n = nc / C, c = nc % C, bins = p.out_h * p.out_w, HW = p.H * p.W;
    for (int64_t r = 0; r < R; ++r) {
      const T* roi = rois + 5 * r;
      if (static_cast<int64_t>(roi[0]) != n) continue;
      for (int64_t k = 0; k < bins; ++k) {
        const roi_pool::Max<T> m =
            roi_pool::max_of(x + nc * HW, roi_pool::window(roi, k / p.out_w, k % p.out_w, p), p.W);
        if (m.at >= 0) dx[nc * HW + m.at] += dy[(r * C + c) * bins + k];
      }
    }
  }
}

void max_roi_pool_grad_op(KernelContext& ctx) {
  const Tensor &dY = ctx.input(0), &X = ctx.input(1), &Rois = ctx.input(2);
  const roi_pool::Params p = checked_pool_regions(ctx, 1, "MaxRoiPoolGrad");
  const int64_t R = Rois.dim(0), C = X.dim(1);
  Tensor* dX = zeroed_region_grad(ctx, "MaxRoiPoolGrad", R, p.out_h, p.out_w);
  if (!dX) return;
  cudaStream_t st = stream_of(ctx);
  const int64_t planes = X.dim(0) * C;
  if (X.dtype() == DType::F32)
    max_roi_pool_grad_kernel<float><<<grid_for(planes), kThreads, 0, st>>>(
        dptr<float>(dY), dptr<float>(X), dptr<float>(Rois), dptr<float>(*dX), p, R, C, planes);
  else
    max_roi_pool_grad_kernel<double><<<grid_for(planes), kThreads, 0, st>>>(
        dptr<double>(dY), dptr<double>(X), dptr<double>(Rois), dptr<double>(*dX), p, R, C, planes);
  GR_LAUNCH_CHECK("max_roi_pool_grad");
}

}  // namespace

GR_REGISTER_OPS(detection) {
  ops.op("NonMaxSuppression").cuda(locked<nms_op>);
  ops.op("RoiAlign").cuda(locked<roi_align_op>);
  ops.op(kGraphrunDomain, "RoiAlignGrad").cuda(locked<roi_align_grad_op>);
  ops.op("MaxRoiPool").cuda(locked<max_roi_pool_op>);
  ops.op(kGraphrunDomain, "MaxRoiPoolGrad").cuda(locked<max_roi_pool_grad_op>);
}

}  // namespace graphrun::runtime::cuda

// CUDA kernels: grid_sample family (the CPU's grid_sample.cc op set): GridSample and ai.graphrun
// GridSampleGrad, f32, images and volumes, with the CPU's sampling math (runtime/kernels/grid_sample_taps.h) in float. The forward
// and dGrid take one thread per grid point (looping over the channels); dX takes one thread per (n, c) plane,
// which adds its points' taps in order: deterministic, no atomics (torch's backward uses atomics).
#include "runtime/kernels/cuda/common.cuh"
#include "runtime/kernels/grid_sample_taps.h"

namespace graphrun::runtime::cuda {
namespace {

namespace gs = grid_sample;

__global__ void grid_sample_kernel(const float* x, const float* grid, float* y, gs::Geometry g, gs::Options o) {
  const int64_t points = g.points(), plane = g.plane();
  GR_GRID_STRIDE(np, g.n * points) {
    const int64_t n = np / points, p = np % points;
    gs::Taps<float> t;
    gs::taps_of(grid + g.dims * np, g, o, t);
    gs::sample_point(t, x + n * g.c * plane, y + n * g.c * points, g.c, plane, points, p);
  }
}

__global__ void grid_sample_dgrid_kernel(const float* dy, const float* x, const float* grid, float* dgrid,
                                         gs::Geometry g, gs::Options o) {
  const int64_t points = g.points(), plane = g.plane();
  GR_GRID_STRIDE(np, g.n * points) {
    const int64_t n = np / points, p = np % points;
    gs::Taps<float> t;
    gs::taps_of(grid + g.dims * np, g, o, t);
    gs::point_gradient(t, x + n * g.c * plane, dy + n * g.c * points, g.c, plane, points, p, g.dims,
                       dgrid + g.dims * np);
  }
}

// dX, zeroed beforehand: plane (n, c) adds weight * dY over its points' taps, in order.
__global__ void grid_sample_dx_kernel(const float* dy, const float* grid, float* dx, gs::Geometry g, gs::Options o) {
  const int64_t points = g.points(), plane = g.plane();
  GR_GRID_STRIDE(nc, g.n * g.c) {
    const int64_t n = nc / g.c;
    const float* d = dy + nc * points;
    float* out = dx + nc * plane;
    for (int64_t p = 0; p < points; ++p) {
      const int64_t np = n * points + p;
      gs::Taps<float> t;
      gs::taps_of(grid + g.dims * np, g, o, t);
      for (int k = 0; k < t.count; ++k) out[t.at[k]] += t.weight[k] * d[p];
    }
  }
}

gs::Geometry checked_geometry(const KernelContext& ctx, const Tensor& x, const Tensor& grid, const gs::Options& o) {
  GR_CHECK(x.dtype() == DType::F32 && grid.dtype() == DType::F32,
           ctx.node().describe() << ": GridSample on CUDA takes f32 X and grid, got " << dtype_name(x.dtype()) << " and "
                                 << dtype_name(grid.dtype()));
  return gs::geometry_of(ctx.node(), x.shape(), grid.shape(), o);
}

void grid_sample_op(KernelContext& ctx) {
  const Tensor &x = ctx.input(0), &grid = ctx.input(1);
  const gs::Options o = gs::options_of(ctx.node());
  const gs::Geometry g = checked_geometry(ctx, x, grid, o);
  Tensor& y = ctx.output(0, g.y_shape(), DType::F32);
  if (y.numel() == 0) return;
  cudaStream_t st = stream_of(ctx);
  grid_sample_kernel<<<grid_for(g.n * g.points()), kThreads, 0, st>>>(dptr<float>(x), dptr<float>(grid), dptr<float>(y),
                                                                       g, o);
  GR_LAUNCH_CHECK("grid_sample");
}

// GridSampleGrad(dY, X, grid) -> (dX, dGrid), either optional.
void grid_sample_grad_op(KernelContext& ctx) {
  const Tensor &dy = ctx.input(0), &x = ctx.input(1), &grid = ctx.input(2);
  const gs::Options o = gs::options_of(ctx.node());
  const gs::Geometry g = checked_geometry(ctx, x, grid, o);
  GR_CHECK(dy.dtype() == DType::F32 && dy.shape() == g.y_shape(),
           "GridSampleGrad: dY " << dtype_name(dy.dtype()) << shape_str(dy.shape()) << " must be f32"
                                 << shape_str(g.y_shape()));
  cudaStream_t st = stream_of(ctx);
  if (ctx.has_output(1)) {
    Tensor& dgrid = ctx.output(1, grid.shape(), DType::F32);
    if (dgrid.numel() > 0) {
      grid_sample_dgrid_kernel<<<grid_for(g.n * g.points()), kThreads, 0, st>>>(
          dptr<float>(dy), dptr<float>(x), dptr<float>(grid), dptr<float>(dgrid), g, o);
      GR_LAUNCH_CHECK("grid_sample_dgrid");
    }
  }
  if (ctx.has_output(0)) {
    Tensor& dx = ctx.output(0, x.shape(), DType::F32);
    if (dx.numel() == 0) return;
    GR_CUDA_CHECK(cudaMemsetAsync(dx.raw(), 0, dx.nbytes(), st));
    grid_sample_dx_kernel<<<grid_for(g.n * g.c), kThreads, 0, st>>>(dptr<float>(dy), dptr<float>(grid),
                                                                    dptr<float>(dx), g, o);
    GR_LAUNCH_CHECK("grid_sample_dx");
  }
}

}  // namespace

GR_REGISTER_OPS(grid_sample) {
  ops.op("GridSample").cuda(locked<grid_sample_op>);
  ops.op(kGraphrunDomain, "GridSampleGrad").cuda(locked<grid_sample_grad_op>);
}

}  // namespace graphrun::runtime::cuda

// CPU kernels of GridSample (opset 16: bilinear, nearest and bicubic; zeros, border and reflection padding;
// align_corners; opset 20's volumes, trilinear or nearest), as torch's F.grid_sample computes it, and of graphrun's GridSampleGrad, which gives dX and
// dGrid. The sampling math is runtime/kernels/grid_sample_taps.h, shared with the CUDA kernels; taps and
// sums are computed in double for every element type.
#include <algorithm>
#include <vector>

#include "runtime/kernels/cpu/half_compute.h"
#include "runtime/kernels/cpu/math_common.h"
#include "runtime/kernels/grid_sample_taps.h"

namespace graphrun::runtime::cpu {
namespace {

namespace gs = grid_sample;

int taps_per_point(gs::Mode m, int dims) {
  return m == gs::Mode::Cubic ? 16 : m == gs::Mode::Linear ? (dims == 3 ? 8 : 4) : 1;
}

// Calls f(T{}, G{}) with the element types of X and grid.
template <class F>
void dispatch_x_grid(DType x, DType grid, const char* what, F&& f) {
  dispatch_float(x, what, [&](auto xt) { dispatch_float(grid, what, [&](auto gt) { f(xt, gt); }); });
}

template <class T, class G>
void forward(KernelContext& ctx) {
  const Tensor &x = ctx.input(0), &grid = ctx.input(1);
  const gs::Options o = gs::options_of(ctx.node());
  const gs::Geometry g = gs::geometry_of(ctx.node(), x.shape(), grid.shape(), o);
  Tensor& y = ctx.output(0, g.y_shape(), x.dtype());
  const int64_t plane = g.plane(), points = g.points();
  const T* px = ptr<T>(x);
  const G* pg = ptr<G>(grid);
  T* py = ptr<T>(y);
#pragma omp parallel for num_threads(threads_for(ctx, y.numel() * taps_per_point(o.mode, g.dims))) schedule(static)
  for (int64_t np = 0; np < g.n * points; ++np) {
    const int64_t n = np / points, p = np % points;
    gs::Taps<double> t;
    gs::taps_of(pg + g.dims * np, g, o, t);
    gs::sample_point(t, px + n * g.c * plane, py + n * g.c * points, g.c, plane, points, p);
  }
}

void grid_sample_kernel(KernelContext& ctx) {
  dispatch_x_grid(ctx.input(0).dtype(), ctx.input(1).dtype(), "GridSample",
                  [&](auto xt, auto gt) { forward<decltype(xt), decltype(gt)>(ctx); });
}

// GridSampleGrad(dY, X, grid) -> (dX, dGrid), either output optional. Image by image, each grid point's taps are
// computed once: its dGrid is the sum over channels and taps of dY * X[tap] * d weight, and its taps go into a
// table from which dX adds weight * dY, summed per (n, c) plane in double (each plane one thread's, in a fixed
// order).
template <class T, class G>
void backward(KernelContext& ctx) {
  const char* what = "GridSampleGrad";
  const Tensor &dy = ctx.input(0), &x = ctx.input(1), &grid = ctx.input(2);
  const gs::Options o = gs::options_of(ctx.node());
  const gs::Geometry g = gs::geometry_of(ctx.node(), x.shape(), grid.shape(), o);
  GR_CHECK(dy.shape() == g.y_shape() && dy.dtype() == x.dtype(),
           what << ": dY " << dtype_name(dy.dtype()) << shape_str(dy.shape()) << " must be "
                << dtype_name(x.dtype()) << shape_str(g.y_shape()));
  const int64_t plane = g.plane(), points = g.points();
  const T *pdy = ptr<T>(dy), *px = ptr<T>(x);
  const G* pg = ptr<G>(grid);
  G* dgrid = ctx.has_output(1) ? ptr<G>(ctx.output(1, grid.shape(), grid.dtype())) : nullptr;
  T* dx = ctx.has_output(0) ? ptr<T>(ctx.output(0, x.shape(), x.dtype())) : nullptr;
  const int per = taps_per_point(o.mode, g.dims);
  // One image's taps: point p's are at [p * per, p * per + count[p]).
  std::vector<int64_t> at(dx ? static_cast<size_t>(points * per) : 0);
  std::vector<double> weight(at.size());
  std::vector<int> count(dx ? static_cast<size_t>(points) : 0);
  const int threads = threads_for(ctx, dy.numel() * per);
  for (int64_t n = 0; n < g.n; ++n) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t p = 0; p < points; ++p) {
      gs::Taps<double> t;
      const int64_t np = n * points + p;
      gs::taps_of(pg + g.dims * np, g, o, t);
      if (dgrid)
        gs::point_gradient(t, px + n * g.c * plane, pdy + n * g.c * points, g.c, plane, points, p, g.dims,
                           dgrid + g.dims * np);
      if (!dx) continue;
      count[p] = t.count;
      std::copy(t.at, t.at + t.count, at.begin() + p * per);
      std::copy(t.weight, t.weight + t.count, weight.begin() + p * per);
    }
    if (!dx) continue;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t c = 0; c < g.c; ++c) {
      std::vector<double> acc(static_cast<size_t>(plane), 0.0);
      const T* d = pdy + (n * g.c + c) * points;
      for (int64_t p = 0; p < points; ++p)
        for (int k = 0; k < count[p]; ++k) acc[at[p * per + k]] += weight[p * per + k] * d[p];
      T* out = dx + (n * g.c + c) * plane;
      for (int64_t i = 0; i < plane; ++i) out[i] = static_cast<T>(acc[i]);
    }
  }
}

void grid_sample_grad_kernel(KernelContext& ctx) {
  dispatch_x_grid(ctx.input(1).dtype(), ctx.input(2).dtype(), "GridSampleGrad",
                  [&](auto xt, auto gt) { backward<decltype(xt), decltype(gt)>(ctx); });
}

}  // namespace

GR_REGISTER_OPS(grid_sample) {
  ops.op("GridSample").cpu(via_f32<grid_sample_kernel>);
  ops.op(kGraphrunDomain, "GridSampleGrad")
      .cpu(via_f32<grid_sample_grad_kernel>)
      .schema(OpSchemaSpec("gradients of `GridSample` w.r.t. X (dY added back along the forward's taps) and grid "
                           "(dY times the derivative of the interpolation along the grid's x, y and, for a volume, "
                           "z, through the padding mode's clip or reflection); nearest sampling has a zero grid "
                           "gradient")
                  .attr("mode", "as GridSample", Attribute::Str("bilinear"))
                  .attr("padding_mode", "as GridSample", Attribute::Str("zeros"))
                  .attr("align_corners", "as GridSample", Attribute::Int(0))
                  .input("dY", "gradient of Y", "T1")
                  .input("X", "the forward's X", "T1")
                  .input("grid", "the forward's grid", "T2")
                  .output("dX", "gradient of X", "T1", OpSchemaSpec::Arity::Optional)
                  .output("dGrid", "gradient of grid", "T2", OpSchemaSpec::Arity::Optional)
                  .type("T1", float_tensor_types(), "float tensors")
                  .type("T2", float_tensor_types(), "float tensors")
                  .output_like(0, 1)
                  .output_like(1, 2));
}

}  // namespace graphrun::runtime::cpu

// CPU kernels of Resize (opsets 10-17: nearest, linear and cubic, every coordinate transformation mode),
// Upsample (opsets 7-9) and graphrun's ResizeGrad, which scatters dY back along the forward's taps.
//
// Each output coordinate on each axis reads a few input positions (its taps) with weights, as ONNX's
// reference does axis by axis: nearest picks one of the two neighbours, linear weighs two, cubic four.
// An N-D output element is the weighted sum over the product of its axes' taps; the gradient adds dY
// times the same weights into dX.
#include "runtime/kernels/cpu/math_common.h"
#include "runtime/kernels/resize_taps.h"

namespace graphrun::runtime::cpu {
namespace {

// The CPU's tensors are host memory: roi, scales and sizes are read in place.
ResizeValueReader host_values(const KernelContext& ctx) {
  return [&ctx](int i) { return ctx.input(i).as_doubles(); };
}

// Calls f(output flat index, input flat index, weight) for every tap of every output element, and
// outside(output flat index) for extrapolated ones. Leading identity axes are folded into rows.
template <class F, class G>
void for_each_tap(const Shape& in, const Shape& out, const std::vector<AxisTaps>& axes, F f, G outside) {
  const int r = static_cast<int>(in.size());
  int lead = 0;
  while (lead < r && axes[lead].identity) ++lead;
  const int64_t rows = prod(out, 0, lead), out_inner = prod(out, lead, r), in_inner = prod(in, lead, r);
  std::vector<int64_t> in_strides(r, 1);
  for (int k = r - 1; k > 0; --k) in_strides[k - 1] = in_strides[k] * in[k];
  std::vector<int64_t> c(r, 0);
  for (int64_t o = 0; o < out_inner; ++o) {
    bool out_of_roi = false;
    for (int k = lead; k < r; ++k) out_of_roi |= axes[k].outside[c[k]];
    // Depth-first over the taps of axes lead..r-1.
    auto walk = [&](auto&& self, int k, int64_t off, double w) -> void {
      if (k == r) {
        for (int64_t row = 0; row < rows; ++row) f(row * out_inner + o, row * in_inner + off, w);
        return;
      }
      for (const Tap& t : axes[k].taps[c[k]]) self(self, k + 1, off + t.index * in_strides[k], w * t.weight);
    };
    if (out_of_roi)
      for (int64_t row = 0; row < rows; ++row) outside(row * out_inner + o);
    else
      walk(walk, lead, 0, 1.0);
    for (int k = r; k-- > lead;) {
      if (++c[k] < out[k]) break;
      c[k] = 0;
    }
  }
}

template <class T>
void resize_forward(KernelContext& ctx, const Tensor& x) {
  Shape out;
  const std::vector<AxisTaps> axes = plan_resize(ctx, x.shape(), &out, false, host_values(ctx));
  Tensor& y = ctx.output(0, out, x.dtype());
  const T* px = ptr<T>(x);
  T* py = ptr<T>(y);
  const int64_t n = y.numel();
  double* acc = static_cast<double*>(ctx.scratch(sizeof(double) * std::max<int64_t>(n, 1)));
  std::fill(acc, acc + n, 0.0);
  const double extra = ctx.node().attr_f("extrapolation_value", 0.f);
  if (x.numel() > 0)
    for_each_tap(x.shape(), out, axes, [&](int64_t o, int64_t i, double w) { acc[o] += w * px[i]; },
                 [&](int64_t o) { acc[o] = extra; });
  for (int64_t i = 0; i < n; ++i) py[i] = static_cast<T>(acc[i]);
}

void resize_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  dispatch_float(x.dtype(), ctx.node().op_type.c_str(), [&](auto tag) { resize_forward<decltype(tag)>(ctx, x); });
}

// ResizeGrad(dY, shape, roi, scales) -> dX of the given shape: the forward's taps, from the shape of dY.
void resize_grad_kernel(KernelContext& ctx) {
  const Tensor& dy = ctx.input(0);
  std::vector<int64_t> shape = ctx.input(1).as_int64s();
  Shape in(shape.begin(), shape.end()), out = dy.shape();
  GR_CHECK(in.size() == out.size(), "ResizeGrad: shape " << shape_str(in) << " and dY " << shape_str(out)
                                                         << " differ in rank");
  const std::vector<AxisTaps> axes = plan_resize(ctx, in, &out, true, host_values(ctx));
  dispatch_float(dy.dtype(), "ResizeGrad", [&](auto tag) {
    using T = decltype(tag);
    Tensor& dx = ctx.output(0, in, dy.dtype());
    const int64_t n = dx.numel();
    double* acc = static_cast<double*>(ctx.scratch(sizeof(double) * std::max<int64_t>(n, 1)));
    std::fill(acc, acc + n, 0.0);
    const T* g = ptr<T>(dy);
    if (dx.numel() > 0)
      for_each_tap(in, out, axes, [&](int64_t o, int64_t i, double w) { acc[i] += w * g[o]; }, [](int64_t) {});
    T* p = ptr<T>(dx);
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(acc[i]);
  });
}

}  // namespace

GR_REGISTER_OPS(resize) {
  ops.op("Resize").cpu(resize_kernel);
  ops.op("Upsample").cpu(resize_kernel);
  ops.op(kGraphrunDomain, "ResizeGrad")
      .cpu(resize_grad_kernel)
      .host_inputs({1})
      .schema(OpSchemaSpec("gradient of `Resize` w.r.t. X: dY added back along the forward's interpolation taps "
                           "(Upsample and Resize-10 as Resize with asymmetric coordinates, nearest_mode floor)")
                  .attr("mode", "as Resize", Attribute::Str("nearest"))
                  .attr("coordinate_transformation_mode", "as Resize", Attribute::Str("half_pixel"))
                  .attr("nearest_mode", "as Resize", Attribute::Str("round_prefer_floor"))
                  .attr("cubic_coeff_a", "as Resize", Attribute::Float(-0.75f))
                  .attr("exclude_outside", "as Resize", Attribute::Int(0))
                  .attr("extrapolation_value", "as Resize", Attribute::Float(0.f))
                  .input("dY", "gradient of Y", "T")
                  .input("shape", "the shape of X", "tensor(int64)")
                  .input("roi", "the forward's roi", "T2", OpSchemaSpec::Arity::Optional)
                  .input("scales", "the forward's scales (absent: the ratio of dY's shape to X's)", "tensor(float)",
                         OpSchemaSpec::Arity::Optional)
                  .output("dX", "gradient of X", "T")
                  .type("T", float_tensor_types(), "float tensors")
                  .type("T2", float_tensor_types(), "roi")
                  .output_shape_from(0, 1));
}

}  // namespace graphrun::runtime::cpu

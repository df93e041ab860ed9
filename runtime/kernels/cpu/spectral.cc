// CPU kernels: spectral family. DFT and STFT (opset 17; runtime/kernels/spectral.h's direct sums, in double, with a
// table of the transform's n twiddles) and MelWeightMatrix (ONNX's reference filter bank).
#include "graph/half.h"
#include "runtime/kernels/cpu/half_compute.h"
#include "runtime/kernels/cpu/math_common.h"
#include "runtime/kernels/spectral.h"

namespace graphrun::runtime::cpu {

namespace {

// The n twiddles cos, sin of 2 pi m / n, interleaved.
std::vector<double> twiddles(int64_t n) {
  std::vector<double> t(static_cast<size_t>(2 * n));
  for (int64_t m = 0; m < n; ++m)
    spectral::twiddle(m, n, t[static_cast<size_t>(2 * m)], t[static_cast<size_t>(2 * m + 1)]);
  return t;
}

// A scalar integer input (dft_length, frame_step, frame_length) read on the host.
int64_t scalar_input(KernelContext& ctx, int i, const char* what) {
  const std::vector<int64_t> v = int_list(ctx.input(i), what);
  GR_CHECK(v.size() == 1, what << ": expects one value, got " << v.size());
  return v[0];
}

// Every bin of every line, with a table of the n twiddles.
template <class T>
void transform(KernelContext& ctx, const spectral::Lines& g, const Tensor& x, const Tensor* window, Tensor& y) {
  const std::vector<double> tw = twiddles(g.n);
  auto twiddle = [&](int64_t m, double& c, double& s) {
    c = tw[static_cast<size_t>(2 * m)];
    s = tw[static_cast<size_t>(2 * m + 1)];
  };
  const T* px = ptr<T>(x);
  const T* pw = window ? ptr<T>(*window) : nullptr;
  T* py = ptr<T>(y);
#pragma omp parallel for num_threads(threads_for(ctx, g.lines* g.bins* std::min(g.n, g.len) * 4)) schedule(static)
  for (int64_t line = 0; line < g.lines; ++line)
    for (int64_t k = 0; k < g.bins; ++k) spectral::line_bin(px, pw, py, g, line, k, twiddle);
}

void dft_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const int64_t length = ctx.has_input(1) ? scalar_input(ctx, 1, "DFT dft_length") : -1;
  const spectral::DftPlan p = spectral::dft_plan(ctx.node(), x.shape(), length);
  Tensor& y = ctx.output(0, p.y_shape, x.dtype());
  dispatch_float(x.dtype(), "DFT",
                 [&](auto tag) { transform<decltype(tag)>(ctx, spectral::lines_of(p), x, nullptr, y); });
}

void stft_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor* window = ctx.has_input(2) ? &ctx.input(2) : nullptr;
  const Shape window_shape = window ? window->shape() : Shape{};
  const spectral::StftPlan p = spectral::stft_plan(ctx.node(), x.shape(), scalar_input(ctx, 1, "STFT frame_step"),
                                                   window ? &window_shape : nullptr,
                                                   ctx.has_input(3) ? scalar_input(ctx, 3, "STFT frame_length") : -1);
  GR_CHECK(!window || window->dtype() == x.dtype(), "STFT: the window and the signal differ in element type");
  Tensor& y = ctx.output(0, p.y_shape, x.dtype());
  dispatch_float(x.dtype(), "STFT",
                 [&](auto tag) { transform<decltype(tag)>(ctx, spectral::lines_of(p), x, window, y); });
}

void mel_weight_matrix_kernel(KernelContext& ctx) {
  auto integer = [&](int i, const char* what) {
    GR_CHECK(ctx.input(i).numel() == 1, "MelWeightMatrix: " << what << " must be a scalar");
    return int_list(ctx.input(i), what)[0];
  };
  auto real = [&](int i, const char* what) {
    GR_CHECK(ctx.input(i).numel() == 1 && dtype_is_float(ctx.input(i).dtype()),
             "MelWeightMatrix: " << what << " must be a float scalar");
    return ctx.input(i).as_doubles()[0];
  };
  const int64_t mel_bins = integer(0, "num_mel_bins"), dft_length = integer(1, "dft_length");
  const std::vector<double> w = spectral::mel_weights(mel_bins, dft_length, integer(2, "sample_rate"),
                                                      real(3, "lower_edge_hertz"), real(4, "upper_edge_hertz"));
  const int64_t type = ctx.node().attr_i("output_datatype", 1);
  const DType dt = static_cast<DType>(type);
  GR_CHECK(type == 1 || type == 10 || type == 11 || type == 16,
           "MelWeightMatrix: output_datatype " << type << " is not a float type (1, 10, 11 or 16)");
  Tensor& y = ctx.output(0, {dft_length / 2 + 1, mel_bins}, dt);
  for (size_t k = 0; k < w.size(); ++k) switch (dt) {
      case DType::F32:
        ptr<float>(y)[k] = static_cast<float>(w[k]);
        break;
      case DType::F64:
        ptr<double>(y)[k] = w[k];
        break;
      case DType::F16:
        static_cast<uint16_t*>(y.raw())[k] = wide_to_half(w[k]);
        break;
      default:
        static_cast<uint16_t*>(y.raw())[k] = wide_to_bf16(w[k]);
        break;
    }
}

}  // namespace

GR_REGISTER_OPS(spectral) {
  ops.op("DFT").cpu(via_f32<dft_kernel>).host_inputs({1});
  ops.op("STFT").cpu(via_f32<stft_kernel>).host_inputs({1, 3});
  ops.op("MelWeightMatrix").cpu(mel_weight_matrix_kernel).host_inputs({0, 1, 2});
}

}  // namespace graphrun::runtime::cpu

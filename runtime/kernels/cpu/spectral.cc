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
  for (int64_t m = 0; m < n; ++m) spectral::twiddle(m, n, t[static_cast<size_t>(2 * m)], t[static_cast<size_t>(2 * m + 1)]);
  return t;
}

// A scalar integer input (dft_length, frame_step, frame_length) read on the host.
int64_t scalar_input(KernelContext& ctx, int i, const char* what) {
  const std::vector<int64_t> v = int_list(ctx.input(i), what);
  GR_CHECK(v.size() == 1, what << ": expects one value, got " << v.size());
  return v[0];
}

template <class T>
void dft_typed(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const int64_t length = ctx.has_input(1) ? scalar_input(ctx, 1, "DFT dft_length") : -1;
  const spectral::DftPlan p = spectral::dft_plan(ctx.node(), x.shape(), length);
  T* y = ptr<T>(ctx.output(0, p.y_shape, x.dtype()));
  const T* px = ptr<T>(x);
  const std::vector<double> tw = twiddles(p.n);
  const double sign = p.inverse ? 1.0 : -1.0, scale = p.inverse ? 1.0 / static_cast<double>(p.n) : 1.0;
  const int64_t lines = p.outer * p.inner;
#pragma omp parallel for num_threads(threads_for(ctx, lines * p.bins * std::min(p.n, p.len) * 4)) schedule(static)
  for (int64_t line = 0; line < lines; ++line) {
    const int64_t o = line / p.inner, i = line % p.inner;
    const T* base = px + (o * p.len * p.inner + i) * p.c;
    auto get = [&](int64_t j, double& re, double& im) {
      const T* e = base + j * p.inner * p.c;
      re = static_cast<double>(e[0]);
      im = p.c == 2 ? static_cast<double>(e[1]) : 0.0;
    };
    auto twiddle = [&](int64_t m, double& c, double& s) {
      c = tw[static_cast<size_t>(2 * m)];
      s = tw[static_cast<size_t>(2 * m + 1)];
    };
    for (int64_t k = 0; k < p.bins; ++k) {
      double re, im;
      spectral::bin(k, p.n, p.len, sign, get, twiddle, re, im);
      T* out = y + ((o * p.bins + k) * p.inner + i) * 2;
      out[0] = static_cast<T>(re * scale);
      out[1] = static_cast<T>(im * scale);
    }
  }
}

void dft_kernel(KernelContext& ctx) {
  dispatch_float(ctx.input(0).dtype(), "DFT", [&](auto tag) { dft_typed<decltype(tag)>(ctx); });
}

template <class T>
void stft_typed(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const bool has_window = ctx.has_input(2);
  const Shape window_shape = has_window ? ctx.input(2).shape() : Shape{};
  const spectral::StftPlan p =
      spectral::stft_plan(ctx.node(), x.shape(), scalar_input(ctx, 1, "STFT frame_step"),
                          has_window ? &window_shape : nullptr,
                          ctx.has_input(3) ? scalar_input(ctx, 3, "STFT frame_length") : -1);
  GR_CHECK(!has_window || ctx.input(2).dtype() == x.dtype(), "STFT: the window and the signal differ in element type");
  T* y = ptr<T>(ctx.output(0, p.y_shape, x.dtype()));
  const T* px = ptr<T>(x);
  const T* win = has_window ? ptr<T>(ctx.input(2)) : nullptr;
  const std::vector<double> tw = twiddles(p.n);
  const int64_t lines = p.batch * p.frames;
#pragma omp parallel for num_threads(threads_for(ctx, lines * p.bins * p.n * 4)) schedule(static)
  for (int64_t line = 0; line < lines; ++line) {
    const int64_t b = line / p.frames, f = line % p.frames;
    const T* base = px + (b * p.length + f * p.step) * p.c;
    auto get = [&](int64_t j, double& re, double& im) {
      const double w = win ? static_cast<double>(win[j]) : 1.0;
      re = static_cast<double>(base[j * p.c]) * w;
      im = p.c == 2 ? static_cast<double>(base[j * p.c + 1]) * w : 0.0;
    };
    auto twiddle = [&](int64_t m, double& c, double& s) {
      c = tw[static_cast<size_t>(2 * m)];
      s = tw[static_cast<size_t>(2 * m + 1)];
    };
    for (int64_t k = 0; k < p.bins; ++k) {
      double re, im;
      spectral::bin(k, p.n, p.n, -1.0, get, twiddle, re, im);
      T* out = y + (line * p.bins + k) * 2;
      out[0] = static_cast<T>(re);
      out[1] = static_cast<T>(im);
    }
  }
}

void stft_kernel(KernelContext& ctx) {
  dispatch_float(ctx.input(0).dtype(), "STFT", [&](auto tag) { stft_typed<decltype(tag)>(ctx); });
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
      case DType::F32: ptr<float>(y)[k] = static_cast<float>(w[k]); break;
      case DType::F64: ptr<double>(y)[k] = w[k]; break;
      case DType::F16: static_cast<uint16_t*>(y.raw())[k] = wide_to_half(w[k]); break;
      default: static_cast<uint16_t*>(y.raw())[k] = wide_to_bf16(w[k]); break;
    }
}

}  // namespace

GR_REGISTER_OPS(spectral) {
  ops.op("DFT").cpu(via_f32<dft_kernel>).host_inputs({1});
  ops.op("STFT").cpu(via_f32<stft_kernel>).host_inputs({1, 3});
  ops.op("MelWeightMatrix").cpu(mel_weight_matrix_kernel).host_inputs({0, 1, 2});
}

}  // namespace graphrun::runtime::cpu

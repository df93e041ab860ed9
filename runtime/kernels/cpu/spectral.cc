// CPU kernels: spectral family. DFT and STFT (opset 17; in double, with a table of the transform's n twiddles: a
// radix-2 FFT per line where n is a power of two, else runtime/kernels/spectral.h's direct sums) and MelWeightMatrix
// (ONNX's reference filter bank).
#include <complex>

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

// In-place iterative radix-2 FFT of a.size() (a power of two) values: sum_j a_j exp(sign 2 pi i k j / n), unscaled;
// `tw` holds the n twiddles.
void fft_pow2(std::vector<std::complex<double>>& a, const std::vector<double>& tw, double sign) {
  const size_t n = a.size();
  for (size_t i = 1, j = 0; i < n; ++i) {  // bit-reversed order
    size_t bit = n >> 1;
    for (; j & bit; bit >>= 1) j ^= bit;
    j ^= bit;
    if (i < j) std::swap(a[i], a[j]);
  }
  for (size_t len = 2; len <= n; len <<= 1) {
    const size_t step = n / len, half = len / 2;
    for (size_t i = 0; i < n; i += len)
      for (size_t k = 0; k < half; ++k) {
        const std::complex<double> w(tw[2 * k * step], sign * tw[2 * k * step + 1]);
        const std::complex<double> u = a[i + k], v = a[i + k + half] * w;
        a[i + k] = u + v;
        a[i + k + half] = u - v;
      }
  }
}

// Every bin of every line, with a table of the n twiddles: by the FFT where n is a power of two (n log n per line),
// else by the direct sums.
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
  const int64_t points = std::min(g.n, g.len);
  if ((g.n & (g.n - 1)) != 0) {
    const int threads = threads_for(ctx, g.lines * g.bins * points * 4);
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t line = 0; line < g.lines; ++line)
      for (int64_t k = 0; k < g.bins; ++k) spectral::line_bin(px, pw, py, g, line, k, twiddle);
    return;
  }
  int64_t log_n = 0;
  while ((int64_t(1) << log_n) < g.n) ++log_n;
  const int threads = threads_for(ctx, g.lines * g.n * (log_n + 1) * 4);
#pragma omp parallel num_threads(threads)
  {
    std::vector<std::complex<double>> a(static_cast<size_t>(g.n));
#pragma omp for schedule(static)
    for (int64_t line = 0; line < g.lines; ++line) {
      std::fill(a.begin(), a.end(), std::complex<double>());
      for (int64_t j = 0; j < points; ++j) {
        double re, im;
        spectral::line_element(px, pw, g, line, j, re, im);
        a[static_cast<size_t>(j)] = {re, im};
      }
      fft_pow2(a, tw, g.sign);
      for (int64_t k = 0; k < g.bins; ++k)
        spectral::put_bin(py, g, line, k, a[static_cast<size_t>(k)].real(), a[static_cast<size_t>(k)].imag());
    }
  }
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
  const Tensor w = spectral::mel_weight_tensor(mel_bins, dft_length, integer(2, "sample_rate"), real(3, "lower_edge_hertz"),
                                              real(4, "upper_edge_hertz"), ctx.node().attr_i("output_datatype", 1));
  ctx.output(0, w.shape(), w.dtype()).copy_from(w);
}

}  // namespace

GR_REGISTER_OPS(spectral) {
  ops.op("DFT").cpu(via_f32<dft_kernel>).host_inputs({1});
  ops.op("STFT").cpu(via_f32<stft_kernel>).host_inputs({1, 3});
  ops.op("MelWeightMatrix").cpu(mel_weight_matrix_kernel).host_inputs({0, 1, 2});
}

}  // namespace graphrun::runtime::cpu

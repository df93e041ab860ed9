// ONNX DFT and STFT (opset 17) and MelWeightMatrix, shared by the CPU kernels (runtime/kernels/cpu/spectral.cc) and
// the CUDA kernels (runtime/kernels/cuda/spectral.cu). A complex value is a last dimension of 2 (real, imaginary); a
// real input has a last dimension of 1. The transforms compute in double with twiddles exact at the quarter turns, so
// that a bin that is 0 in exact math comes out at the double's rounding (numpy's FFT is the reference the ONNX tests
// store, at float32 tolerances where the expected value is 0): the CPU by a radix-2 FFT where the length is a power
// of two, else (and CUDA always) by the direct sum per bin below.
#pragma once
#include <cmath>
#include <cstdint>

#ifdef __CUDACC__
#define GR_SPECTRAL_HD __host__ __device__
#else
#define GR_SPECTRAL_HD
#endif

namespace graphrun::runtime::spectral {

// cos and sin of 2 pi m / n for m in [0, n).
GR_SPECTRAL_HD inline void twiddle(int64_t m, int64_t n, double& c, double& s) {
  if (m == 0) {
    c = 1, s = 0;
  } else if (2 * m == n) {
    c = -1, s = 0;
  } else if (4 * m == n) {
    c = 0, s = 1;
  } else if (4 * m == 3 * n) {
    c = 0, s = -1;
  } else {
    const double a = 6.283185307179586476925 * static_cast<double>(m) / static_cast<double>(n);
    c = cos(a);
    s = sin(a);
  }
}

// Bin k (k < n) of the length-n transform of a line whose first `len` elements are get(j, re, im) (the rest 0):
// sum_j x_j exp(sign 2 pi i k j / n), sign -1 forward, +1 inverse (unscaled). tw(m, c, s) gives twiddle m.
template <class Get, class Tw>
GR_SPECTRAL_HD inline void bin(int64_t k, int64_t n, int64_t len, double sign, Get get, Tw tw, double& re, double& im) {
  re = 0, im = 0;
  const int64_t m_len = len < n ? len : n;
  int64_t m = 0;  // k j mod n
  for (int64_t j = 0; j < m_len; ++j) {
    double c, s, xr, xi;
    tw(m, c, s);
    s *= sign;
    get(j, xr, xi);
    re += xr * c - xi * s;
    im += xr * s + xi * c;
    m += k;
    if (m >= n) m -= n;
  }
}

// The lines a node transforms. Line l = (o, i) = (l / inner, l % inner): its element j is at
// o * in_outer + i * in_inner + j * in_step (c parts each; times window[j] where there is a window); its bin k goes to
// o * out_outer + i * out_inner + k * out_bin (2 parts), scaled by `scale`.
struct Lines {
  int64_t lines = 0, inner = 1, len = 0, c = 1, n = 0, bins = 0;
  int64_t in_outer = 0, in_inner = 0, in_step = 0, out_outer = 0, out_inner = 0, out_bin = 0;
  double sign = -1, scale = 1;
};

// Element j of line `line` (times the window), as doubles.
template <class T>
GR_SPECTRAL_HD inline void line_element(const T* x, const T* window, const Lines& g, int64_t line, int64_t j,
                                        double& re, double& im) {
  const T* e = x + (line / g.inner) * g.in_outer + (line % g.inner) * g.in_inner + j * g.in_step;
  const double w = window ? static_cast<double>(window[j]) : 1.0;
  re = static_cast<double>(e[0]) * w;
  im = g.c == 2 ? static_cast<double>(e[1]) * w : 0.0;
}

// Writes bin k of line `line`, scaled.
template <class T>
GR_SPECTRAL_HD inline void put_bin(T* y, const Lines& g, int64_t line, int64_t k, double re, double im) {
  T* out = y + (line / g.inner) * g.out_outer + (line % g.inner) * g.out_inner + k * g.out_bin;
  out[0] = static_cast<T>(re * g.scale);
  out[1] = static_cast<T>(im * g.scale);
}

// Bin k of line `line` of `x` into `y` by the direct sum; tw(m, c, s) gives twiddle m of g.n.
template <class T, class Tw>
GR_SPECTRAL_HD inline void line_bin(const T* x, const T* window, T* y, const Lines& g, int64_t line, int64_t k, Tw tw) {
  auto get = [&](int64_t j, double& re, double& im) { line_element(x, window, g, line, j, re, im); };
  double re, im;
  bin(k, g.n, g.len, g.sign, get, tw, re, im);
  put_bin(y, g, line, k, re, im);
}

}  // namespace graphrun::runtime::spectral

#include <vector>

#include "graph/ir.h"
#include "graph/tensor.h"

namespace graphrun::runtime::spectral {

// At most this many points in one transform (2^24): a file cannot ask for a quadratic sum over more.
constexpr int64_t kMaxLength = int64_t(1) << 24;

// DFT of X seen as [outer, len, inner, c] (c = 1 real, 2 complex) along `axis`: Y is [outer, bins, inner, 2].
struct DftPlan {
  int64_t outer = 1, len = 0, inner = 1, c = 1;
  int64_t n = 0, bins = 0;  // the transform's length (dft_length, else len) and the bins kept (n, or n/2+1 onesided)
  bool inverse = false;
  Shape y_shape;
};

// `dft_length` < 0: none given. Throws naming the attribute or dimension that is wrong.
DftPlan dft_plan(const Node& node, const Shape& x, int64_t dft_length);

// STFT of signal [batch, length, c]: frames of n samples every `step`, each times the window (when given) and
// transformed: Y is [batch, frames, bins, 2].
struct StftPlan {
  int64_t batch = 0, length = 0, c = 1, step = 1, n = 0, frames = 0, bins = 0;
  Shape y_shape;
};

// `window` null: none given; `frame_length` < 0: none given.
StftPlan stft_plan(const Node& node, const Shape& signal, int64_t step, const Shape* window, int64_t frame_length);

// The lines of each: a DFT's [outer, len, inner, c] into [outer, bins, inner, 2]; an STFT's frames (b, f), `step`
// samples apart, into [batch, frames, bins, 2].
Lines lines_of(const DftPlan& p);
Lines lines_of(const StftPlan& p);

// MelWeightMatrix's [dft_length / 2 + 1, mel_bins] matrix, row-major, as ONNX's reference computes it (the band
// edges floored to spectrogram bins; a band of zero width rising is a single 1). Throws on sizes out of range.
std::vector<double> mel_weights(int64_t mel_bins, int64_t dft_length, int64_t sample_rate, double lower_hz,
                                double upper_hz);

// The same matrix as a host tensor of ONNX element type `output_datatype` (float, float16, double or bfloat16;
// another is an Error).
Tensor mel_weight_tensor(int64_t mel_bins, int64_t dft_length, int64_t sample_rate, double lower_hz, double upper_hz,
                         int64_t output_datatype);

}  // namespace graphrun::runtime::spectral

#include "runtime/kernels/spectral.h"

#include <algorithm>

#include "graph/error.h"
#include "graph/half.h"

namespace graphrun::runtime::spectral {
namespace {

// The direct sums take lines x bins x points multiply-adds: over 2^36 (about half a minute here) is refused in one
// line rather than left to run for hours.
void check_work(const char* op, int64_t lines, int64_t bins, int64_t points) {
  const double work = static_cast<double>(lines) * static_cast<double>(bins) * static_cast<double>(points);
  GR_CHECK(work <= 68719476736.0, op << ": " << lines << " transforms of " << bins << " bins over " << points
                                     << " points would take " << work << " multiply-adds (at most 2^36: graphrun "
                                     << "computes each bin as a direct sum)");
}

}  // namespace

DftPlan dft_plan(const Node& node, const Shape& x, int64_t dft_length) {
  const auto r = static_cast<int64_t>(x.size());
  GR_CHECK(r >= 2 && (x.back() == 1 || x.back() == 2),
           "DFT: the input must be [batch, signal dims..., 1 or 2] (real or complex), got " << shape_str(x));
  int64_t axis = node.attr_i("axis", 1);
  GR_CHECK(axis >= -r && axis <= r - 2 && axis != -1, "DFT: axis " << axis << " is out of range for an input of rank "
                                                                   << r << " (the last dimension holds the "
                                                                   << "real and imaginary parts)");
  if (axis < 0) axis += r;
  DftPlan p;
  p.c = x.back();
  p.len = x[static_cast<size_t>(axis)];
  for (int64_t d = 0; d < axis; ++d) p.outer *= x[static_cast<size_t>(d)];
  for (int64_t d = axis + 1; d < r - 1; ++d) p.inner *= x[static_cast<size_t>(d)];
  p.n = dft_length < 0 ? p.len : dft_length;
  GR_CHECK(p.n >= 1 && p.n <= kMaxLength,
           "DFT: the transform's length " << p.n << " must be in [1, 2^24]" << (dft_length < 0 ? "" : " (dft_length)"));
  p.inverse = node.attr_i("inverse", 0) != 0;
  const bool onesided = node.attr_i("onesided", 0) != 0;
  GR_CHECK(!onesided || p.c == 1, "DFT: onesided output needs a real input (a last dimension of 1)");
  GR_CHECK(!onesided || !p.inverse, "DFT: onesided output is not defined for the inverse transform");
  p.bins = onesided ? p.n / 2 + 1 : p.n;
  check_work("DFT", p.outer * p.inner, p.bins, std::min(p.n, p.len));
  p.y_shape = x;
  p.y_shape[static_cast<size_t>(axis)] = p.bins;
  p.y_shape.back() = 2;
  return p;
}

StftPlan stft_plan(const Node& node, const Shape& signal, int64_t step, const Shape* window, int64_t frame_length) {
  GR_CHECK(signal.size() == 3 && (signal[2] == 1 || signal[2] == 2),
           "STFT: the signal must be [batch, length, 1 or 2] (real or complex), got " << shape_str(signal));
  GR_CHECK(step >= 1, "STFT: frame_step must be at least 1, got " << step);
  StftPlan p;
  p.batch = signal[0];
  p.length = signal[1];
  p.c = signal[2];
  p.step = step;
  if (window) {
    GR_CHECK(window->size() == 1, "STFT: the window must be 1-D, got " << shape_str(*window));
    GR_CHECK(frame_length < 0 || frame_length == (*window)[0],
             "STFT: frame_length " << frame_length << " differs from the window's length " << (*window)[0]);
    p.n = (*window)[0];
  } else {
    GR_CHECK(frame_length >= 0, "STFT: neither a window nor frame_length gives the frames' length");
    p.n = frame_length;
  }
  GR_CHECK(p.n >= 1 && p.n <= kMaxLength, "STFT: the frames' length " << p.n << " must be in [1, 2^24]");
  GR_CHECK(p.n <= p.length, "STFT: the frames' length " << p.n << " is longer than the signal (" << p.length << ")");
  const bool onesided = node.attr_i("onesided", 1) != 0;
  GR_CHECK(!onesided || p.c == 1, "STFT: onesided output needs a real signal (a last dimension of 1); set onesided=0");
  p.frames = (p.length - p.n) / p.step + 1;
  p.bins = onesided ? p.n / 2 + 1 : p.n;
  check_work("STFT", p.batch * p.frames, p.bins, p.n);
  p.y_shape = {p.batch, p.frames, p.bins, 2};
  return p;
}

Lines lines_of(const DftPlan& p) {
  Lines g;
  g.lines = p.outer * p.inner, g.inner = p.inner, g.len = p.len, g.c = p.c, g.n = p.n, g.bins = p.bins;
  g.in_outer = p.len * p.inner * p.c, g.in_inner = p.c, g.in_step = p.inner * p.c;
  g.out_outer = p.bins * p.inner * 2, g.out_inner = 2, g.out_bin = p.inner * 2;
  g.sign = p.inverse ? 1.0 : -1.0;
  g.scale = p.inverse ? 1.0 / static_cast<double>(p.n) : 1.0;
  return g;
}

Lines lines_of(const StftPlan& p) {
  Lines g;
  g.lines = p.batch * p.frames, g.inner = p.frames, g.len = p.n, g.c = p.c, g.n = p.n, g.bins = p.bins;
  g.in_outer = p.length * p.c, g.in_inner = p.step * p.c, g.in_step = p.c;
  g.out_outer = p.frames * p.bins * 2, g.out_inner = p.bins * 2, g.out_bin = 2;
  return g;
}

std::vector<double> mel_weights(int64_t mel_bins, int64_t dft_length, int64_t sample_rate, double lower_hz,
                                double upper_hz) {
  GR_CHECK(mel_bins >= 1 && mel_bins <= 65536, "MelWeightMatrix: num_mel_bins must be in [1, 65536], got " << mel_bins);
  GR_CHECK(dft_length >= 1 && dft_length <= kMaxLength,
           "MelWeightMatrix: dft_length must be in [1, 2^24], got " << dft_length);
  GR_CHECK(sample_rate >= 1, "MelWeightMatrix: sample_rate must be positive, got " << sample_rate);
  GR_CHECK(std::isfinite(lower_hz) && std::isfinite(upper_hz) && lower_hz > -700 && upper_hz > -700,
           "MelWeightMatrix: lower_edge_hertz and upper_edge_hertz must be finite and above -700 (where the mel scale "
           "is defined), got "
               << lower_hz << " and " << upper_hz);
  const int64_t rows = dft_length / 2 + 1;
  GR_CHECK(rows * mel_bins <= (int64_t(1) << 26),
           "MelWeightMatrix: a " << rows << " x " << mel_bins << " matrix is larger than 2^26 elements");
  auto mel = [](double hz) { return 2595.0 * std::log10(1.0 + hz / 700.0); };
  const double low = mel(lower_hz), step = (mel(upper_hz) - low) / static_cast<double>(mel_bins + 2);
  std::vector<int64_t> edge(static_cast<size_t>(mel_bins + 2));
  for (int64_t i = 0; i < mel_bins + 2; ++i) {
    const double hz = 700.0 * (std::pow(10.0, (static_cast<double>(i) * step + low) / 2595.0) - 1.0);
    // Clamped far outside the matrix (an edge past 2^40 bins only bounds rows the matrix does not have).
    const double at = std::floor(static_cast<double>(dft_length + 1) * hz / static_cast<double>(sample_rate));
    edge[static_cast<size_t>(i)] = static_cast<int64_t>(std::clamp(at, -1.0, 1099511627776.0));
  }
  std::vector<double> w(static_cast<size_t>(rows * mel_bins), 0.0);
  auto set = [&](int64_t row, int64_t col, double v) {
    if (row >= 0 && row < rows) w[static_cast<size_t>(row * mel_bins + col)] = v;
  };
  for (int64_t i = 0; i < mel_bins; ++i) {
    const int64_t left = edge[static_cast<size_t>(i)], center = edge[static_cast<size_t>(i + 1)],
                  right = edge[static_cast<size_t>(i + 2)];
    if (center == left) {
      set(center, i, 1.0);
    } else {
      for (int64_t j = std::max<int64_t>(left, 0); j <= std::min(center, rows - 1); ++j)
        set(j, i, static_cast<double>(j - left) / static_cast<double>(center - left));
    }
    if (right > center)
      for (int64_t j = std::max<int64_t>(center, 0); j < std::min(right, rows); ++j)
        set(j, i, static_cast<double>(right - j) / static_cast<double>(right - center));
  }
  return w;
}

Tensor mel_weight_tensor(int64_t mel_bins, int64_t dft_length, int64_t sample_rate, double lower_hz, double upper_hz,
                         int64_t output_datatype) {
  GR_CHECK(output_datatype == 1 || output_datatype == 10 || output_datatype == 11 || output_datatype == 16,
           "MelWeightMatrix: output_datatype " << output_datatype << " is not a float type (1, 10, 11 or 16)");
  const std::vector<double> w = mel_weights(mel_bins, dft_length, sample_rate, lower_hz, upper_hz);
  const auto dt = static_cast<DType>(output_datatype);
  Tensor t(dt, {dft_length / 2 + 1, mel_bins});
  for (size_t k = 0; k < w.size(); ++k) switch (dt) {
      case DType::F32:
        static_cast<float*>(t.raw())[k] = static_cast<float>(w[k]);
        break;
      case DType::F64:
        static_cast<double*>(t.raw())[k] = w[k];
        break;
      case DType::F16:
        static_cast<uint16_t*>(t.raw())[k] = wide_to_half(w[k]);
        break;
      default:
        static_cast<uint16_t*>(t.raw())[k] = wide_to_bf16(w[k]);
        break;
    }
  return t;
}

}  // namespace graphrun::runtime::spectral

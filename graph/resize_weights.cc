#include "graph/resize_weights.h"

#include <algorithm>
#include <cmath>

#include "graph/error.h"

namespace graphrun {
namespace {

// The source coordinate of output position y.
double source_coordinate(const ResizeAxis& a, double y) {
  const std::string& m = a.coordinate_transformation_mode;
  const double in = static_cast<double>(a.in), out_exact = a.scale * in;
  if (m == "half_pixel") return (y + 0.5) / a.scale - 0.5;
  if (m == "pytorch_half_pixel") return out_exact == 1 ? -0.5 : (y + 0.5) / a.scale - 0.5;
  if (m == "align_corners") return out_exact == 1 ? 0.0 : y * (in - 1) / (out_exact - 1);
  if (m == "asymmetric") return y / a.scale;
  if (m == "half_pixel_symmetric") {
    // The centre of the input maps to the centre of the output, whose size was rounded.
    const double adjustment = static_cast<double>(a.out) / out_exact;
    return in / 2 * (1 - adjustment) + (y + 0.5) / a.scale - 0.5;
  }
  GR_FAIL("Resize: coordinate_transformation_mode '" << m << "' has no matrix form");
}

double cubic(double x, double A) {
  x = std::fabs(x);
  if (x <= 1) return ((A + 2) * x - (A + 3)) * x * x + 1;
  if (x < 2) return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A;
  return 0;
}

// The filter's taps for `ratio` in (0, 1], the fraction of the source coordinate past its floor (1 where the
// coordinate is whole), normalised to sum to 1 where antialiased; the window below places them.
std::vector<double> coefficients(const ResizeAxis& a, double ratio) {
  if (a.mode == "nearest") {
    const std::string& r = a.nearest_mode;
    if (ratio == 1) return {0, 1};
    if (r == "round_prefer_floor") return {ratio <= 0.5 ? 1.0 : 0.0, ratio > 0.5 ? 1.0 : 0.0};
    if (r == "round_prefer_ceil") return {ratio < 0.5 ? 1.0 : 0.0, ratio >= 0.5 ? 1.0 : 0.0};
    if (r == "floor") return {1, 0};
    if (r == "ceil") return {0, 1};
    GR_FAIL("Resize: nearest_mode '" << r << "' is not round_prefer_floor, round_prefer_ceil, floor or ceil");
  }
  const double s = std::min(a.scale, 1.0);
  std::vector<double> c;
  if (a.mode == "linear") {
    if (!a.antialias) return {1 - ratio, ratio};
    // A triangle 1/s wide: taps from floor(-1/s) + 1, 2 - 2 * that many.
    const int64_t start = static_cast<int64_t>(std::floor(-1 / s)) + 1;
    for (int64_t i = start; i < start + 2 - 2 * start; ++i)
      c.push_back(std::clamp(1 - std::fabs((static_cast<double>(i) - ratio) * s), 0.0, 1.0));
  } else if (a.mode == "cubic") {
    const double A = a.cubic_coeff_a;
    if (!a.antialias) return {cubic(ratio + 1, A), cubic(ratio, A), cubic(1 - ratio, A), cubic(2 - ratio, A)};
    const int64_t start = static_cast<int64_t>(std::floor(-2 / s)) + 1;
    for (int64_t i = start; i < 2 - start; ++i) c.push_back(cubic(s * (static_cast<double>(i) - ratio), A));
  } else {
    GR_FAIL("Resize: mode '" << a.mode << "' is not nearest, linear or cubic");
  }
  double sum = 0;
  for (double v : c) sum += v;
  for (double& v : c) v /= sum;
  return c;
}

}  // namespace

std::vector<double> resize_axis_weights(const ResizeAxis& a) {
  GR_CHECK(a.in >= 1 && a.out >= 0 && a.scale > 0 && std::isfinite(a.scale),
           "Resize: an axis of size " << a.in << " to " << a.out << " at scale " << a.scale << " has no matrix form");
  std::vector<double> w(static_cast<size_t>(a.out * a.in), 0.0);
  for (int64_t y = 0; y < a.out; ++y) {
    const double x = source_coordinate(a, static_cast<double>(y));
    const double whole = std::floor(x);
    std::vector<double> c = coefficients(a, x == whole ? 1.0 : x - whole);
    const auto n = static_cast<int64_t>(c.size());
    // The n taps nearest x (the lower one where two are as near): for an even n the window starting n/2 - 1 below
    // floor(x), or n/2 below where x is whole; for an odd n centred on the nearest tap, rounding halves down.
    const int64_t base = static_cast<int64_t>(whole);
    const double frac = x - whole;
    int64_t start;
    if (n % 2 == 0)
      start = base + (frac == 0 ? -(n / 2) : -(n / 2) + 1);
    else
      start = base - (n - 1) / 2 + (frac <= 0.5 ? 0 : 1);
    if (a.exclude_outside) {
      double sum = 0;
      for (int64_t j = 0; j < n; ++j) {
        const int64_t at = start + j;
        if (at < 0 || at >= a.in) c[static_cast<size_t>(j)] = 0;
        sum += c[static_cast<size_t>(j)];
      }
      if (sum != 0)
        for (double& v : c) v /= sum;
    }
    // Taps beyond the input read its edge.
    for (int64_t j = 0; j < n; ++j) {
      const int64_t at = std::clamp<int64_t>(start + j, 0, a.in - 1);
      w[static_cast<size_t>(y * a.in + at)] += c[static_cast<size_t>(j)];
    }
  }
  return w;
}

}  // namespace graphrun

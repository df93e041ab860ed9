// The sampling plan of Resize, Upsample and ResizeGrad (resize_taps.h): coordinate transformations,
// nearest rounding, linear and cubic weights, exclude_outside and tf_crop_and_resize's roi.
#include "runtime/kernels/resize_taps.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <string>

namespace graphrun::runtime {
namespace {

struct ResizeAttrs {
  std::string mode, coord, nearest;
  double cubic_a = -0.75, extrapolation = 0;
  bool exclude_outside = false;
};

ResizeAttrs resize_attrs(const Node& n, bool legacy) {
  ResizeAttrs a;
  a.mode = n.attr_s("mode", "nearest");
  // Upsample and Resize-10: asymmetric coordinates, nearest rounds down (ONNX's Upsample reference).
  a.coord = legacy ? "asymmetric" : n.attr_s("coordinate_transformation_mode", "half_pixel");
  a.nearest = legacy ? "floor" : n.attr_s("nearest_mode", "round_prefer_floor");
  a.cubic_a = n.attr_f("cubic_coeff_a", -0.75f);
  a.exclude_outside = n.attr_i("exclude_outside", 0) != 0;
  a.extrapolation = n.attr_f("extrapolation_value", 0.f);
  const char* what = n.op_type.c_str();
  GR_CHECK(a.mode == "nearest" || a.mode == "linear" || a.mode == "cubic" || (legacy && a.mode == "bilinear"),
           what << ": unknown mode '" << a.mode << "' (nearest, linear, cubic)");
  if (a.mode == "bilinear") a.mode = "linear";
  static const std::set<std::string> coords = {"half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
                                               "tf_half_pixel_for_nn", "tf_crop_and_resize"};
  GR_CHECK(coords.count(a.coord), what << ": unknown coordinate_transformation_mode '" << a.coord << "'");
  GR_CHECK(a.nearest == "round_prefer_floor" || a.nearest == "round_prefer_ceil" || a.nearest == "floor" ||
               a.nearest == "ceil",
           what << ": unknown nearest_mode '" << a.nearest << "'");
  return a;
}

std::vector<double> cubic_coeffs(double r, double A) {
  const double s = 1 - r;
  return {((A * (r + 1) - 5 * A) * (r + 1) + 8 * A) * (r + 1) - 4 * A, ((A + 2) * r - (A + 3)) * r * r + 1,
          ((A + 2) * s - (A + 3)) * s * s + 1, ((A * (s + 1) - 5 * A) * (s + 1) + 8 * A) * (s + 1) - 4 * A};
}

AxisTaps axis_taps(const ResizeAttrs& a, int64_t in, int64_t out, double scale, double roi_start, double roi_end) {
  AxisTaps t;
  t.taps.resize(out);
  t.outside.assign(out, false);
  // ONNX's reference measures the resized length as in * scale, not as the integer output size.
  const double len = in * scale;
  for (int64_t i = 0; i < out; ++i) {
    double x;
    if (a.coord == "half_pixel") x = (i + 0.5) / scale - 0.5;
    else if (a.coord == "pytorch_half_pixel") x = len != 1 ? (i + 0.5) / scale - 0.5 : -0.5;
    else if (a.coord == "align_corners") x = len != 1 ? i * (in - 1) / (len - 1) : 0;
    else if (a.coord == "asymmetric") x = i / scale;
    else if (a.coord == "tf_half_pixel_for_nn") x = (i + 0.5) / scale;
    else {  // tf_crop_and_resize
      x = len != 1 ? roi_start * (in - 1) + i * (roi_end - roi_start) * (in - 1) / (len - 1)
                  : 0.5 * (roi_start + roi_end) * (in - 1);
      if (x < 0 || x > in - 1) {
        t.outside[i] = true;
        t.identity = false;
        continue;
      }
    }
    // The reference's neighbours: for an integer x, ratio 1 on the left pair (x-1, x); else floor(x), +1.
    int64_t base = static_cast<int64_t>(std::floor(x));
    double r = x - base;
    if (r == 0) base -= 1, r = 1;
    std::vector<double> w;
    int64_t first = base;
    if (a.mode == "nearest") {
      bool right = r == 1 || (a.nearest == "round_prefer_floor" ? r > 0.5
                              : a.nearest == "round_prefer_ceil" ? r >= 0.5
                                                                  : a.nearest == "ceil");
      w = {right ? 0.0 : 1.0, right ? 1.0 : 0.0};
    } else if (a.mode == "linear") {
      w = {1 - r, r};
    } else {
      w = cubic_coeffs(r, a.cubic_a);
      first = base - 1;
    }
    if (a.exclude_outside) {
      double sum = 0;
      for (size_t k = 0; k < w.size(); ++k) {
        const int64_t idx = first + static_cast<int64_t>(k);
        if (idx < 0 || idx >= in) w[k] = 0;
        sum += w[k];
      }
      for (double& v : w) v = sum != 0 ? v / sum : 0;
    }
    for (size_t k = 0; k < w.size(); ++k) {
      if (w[k] == 0) continue;
      const int64_t idx = std::min(std::max<int64_t>(first + static_cast<int64_t>(k), 0), in - 1);
      t.taps[i].push_back({idx, w[k]});
    }
    if (t.taps[i].size() != 1 || t.taps[i][0].index != i || t.taps[i][0].weight != 1) t.identity = false;
  }
  if (in != out) t.identity = false;
  return t;
}

// Where a Resize, Upsample or ResizeGrad node finds roi, scales and sizes.
struct ResizeInputs {
  int roi = -1, scales = -1, sizes = -1;
};

ResizeInputs resize_inputs(const KernelContext& ctx, bool grad) {
  const std::string& op = ctx.node().op_type;
  if (grad) return {2, 3, -1};                 // ResizeGrad(dY, shape, roi, scales)
  if (op == "Upsample") return {-1, ctx.opset() >= 9 ? 1 : -1, -1};
  if (ctx.opset() < 11) return {-1, 1, -1};    // Resize-10(X, scales)
  return {1, 2, 3};
}

bool given(const KernelContext& ctx, int i) { return i >= 0 && ctx.has_input(i) && ctx.input(i).numel() > 0; }

// The per-axis taps of a resize from `in` to the output shape (from sizes or scales, or `out` when given).
}  // namespace

std::vector<AxisTaps> plan_resize(const KernelContext& ctx, const Shape& in, Shape* out, bool grad,
                                  const ResizeValueReader& read) {
  const char* what = ctx.node().op_type.c_str();
  const bool legacy = ctx.node().op_type == "Upsample" || (!grad && ctx.opset() < 11);
  const ResizeAttrs a = resize_attrs(ctx.node(), legacy && !grad);
  const ResizeInputs ri = resize_inputs(ctx, grad);
  const size_t r = in.size();
  std::vector<double> scales;
  if (given(ctx, ri.scales)) {
    scales = read(ri.scales);
  } else if (ctx.node().op_type == "Upsample" && ctx.opset() < 9) {
    for (float f : ctx.node().attr_floats("scales")) scales.push_back(f);
  }
  std::vector<double> roi;
  if (given(ctx, ri.roi)) roi = read(ri.roi);
  if (a.coord == "tf_crop_and_resize")
    GR_CHECK(roi.size() == 2 * r, what << ": tf_crop_and_resize needs roi with " << 2 * r << " values, got "
                                       << roi.size());
  if (!grad) {
    if (given(ctx, ri.sizes)) {
      GR_CHECK(scales.empty(), what << ": give scales or sizes, not both");
      std::vector<int64_t> sz;
      for (double v : read(ri.sizes)) sz.push_back(static_cast<int64_t>(v));
      GR_CHECK(sz.size() == r, what << ": sizes has " << sz.size() << " values for an input of rank " << r);
      *out = Shape(sz.begin(), sz.end());
    } else {
      GR_CHECK(!scales.empty(), what << ": needs scales or sizes");
      GR_CHECK(scales.size() == r, what << ": scales has " << scales.size() << " values for an input of rank " << r);
      out->resize(r);
      for (size_t k = 0; k < r; ++k) {
        GR_CHECK(scales[k] > 0, what << ": scales must be positive, got " << scales[k] << " on axis " << k);
        const double span = a.coord == "tf_crop_and_resize" ? roi[r + k] - roi[k] : 1.0;
        (*out)[k] = static_cast<int64_t>(std::floor(in[k] * span * scales[k]));
      }
    }
  }
  GR_CHECK(out->size() == r, what << ": output rank " << out->size() << " differs from the input's " << r);
  std::vector<AxisTaps> axes;
  for (size_t k = 0; k < r; ++k) {
    GR_CHECK((*out)[k] >= 0 && (in[k] > 0 || (*out)[k] == 0),
             what << ": cannot resize axis " << k << " from " << in[k] << " to " << (*out)[k]);
    if (!scales.empty()) GR_CHECK(scales.size() == r && scales[k] > 0, what << ": bad scales for rank " << r);
    const double s = scales.empty() ? static_cast<double>((*out)[k]) / in[k] : scales[k];
    axes.push_back(axis_taps(a, in[k], (*out)[k], s, roi.empty() ? 0 : roi[k], roi.empty() ? 1 : roi[r + k]));
  }
  return axes;
}

}  // namespace graphrun::runtime

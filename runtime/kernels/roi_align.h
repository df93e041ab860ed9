// ONNX RoiAlign (opsets 10 and 16): one output element's value and its gradient, shared by the CPU kernel
// (runtime/kernels/cpu/detection.cc) and the CUDA kernel (runtime/kernels/cuda/detection.cu). The region
// [x1, y1, x2, y2] * spatial_scale (less half a pixel with coordinate_transformation_mode half_pixel, opset
// 16's default; output_half_pixel, opset 10's only mode, keeps it and makes a region at least 1x1) is cut into
// output_height x output_width bins; each bin takes a grid of sampling_ratio points a side (the bin's size rounded
// up when 0). Mode avg averages their bilinear samples. Mode max takes, as ONNX Runtime does (the spec says only
// "max pooling"), the largest of the four weighted taps w * v of each point, then the largest over the points; the
// gradient goes to the first such tap, times its weight. A sample more than a pixel outside the image counts as 0;
// one within it is clamped to the border.
#pragma once
#include <cmath>
#include <cstdint>

#ifdef __CUDACC__
#define GR_ROI_HD __host__ __device__
#else
#define GR_ROI_HD
#endif

namespace graphrun::runtime::roi {

struct Params {
  int64_t out_h = 1, out_w = 1, sampling_ratio = 0, H = 0, W = 0;
  double spatial_scale = 1;
  bool half_pixel = true;
  bool max = false;  // mode max (else avg)
};

// The four pixels a bilinear sample at (y, x) reads and their weights; `in` is false more than a pixel outside the
// image (the sample counts as 0). Within a pixel of it the point is clamped to the border.
template <class T>
struct Corners {
  bool in = false;
  int64_t y0 = 0, y1 = 0, x0 = 0, x1 = 0;
  T w00 = T(0), w01 = T(0), w10 = T(0), w11 = T(0);
};

template <class T>
GR_ROI_HD inline Corners<T> corners(int64_t H, int64_t W, T y, T x) {
  Corners<T> c;
  if (y < T(-1) || y > T(H) || x < T(-1) || x > T(W)) return c;
  c.in = true;
  if (y <= T(0)) y = T(0);
  if (x <= T(0)) x = T(0);
  c.y0 = static_cast<int64_t>(y);
  c.x0 = static_cast<int64_t>(x);
  if (c.y0 >= H - 1) {
    c.y0 = c.y1 = H - 1;
    y = static_cast<T>(c.y0);
  } else {
    c.y1 = c.y0 + 1;
  }
  if (c.x0 >= W - 1) {
    c.x0 = c.x1 = W - 1;
    x = static_cast<T>(c.x0);
  } else {
    c.x1 = c.x0 + 1;
  }
  const T ly = y - static_cast<T>(c.y0), lx = x - static_cast<T>(c.x0), hy = T(1) - ly, hx = T(1) - lx;
  c.w00 = hy * hx;
  c.w01 = hy * lx;
  c.w10 = ly * hx;
  c.w11 = ly * lx;
  return c;
}

template <class T>
GR_ROI_HD inline T bilinear(const T* plane, int64_t H, int64_t W, T y, T x) {
  const Corners<T> c = corners(H, W, y, x);
  if (!c.in) return T(0);
  return c.w00 * plane[c.y0 * W + c.x0] + c.w01 * plane[c.y0 * W + c.x1] + c.w10 * plane[c.y1 * W + c.x0] +
         c.w11 * plane[c.y1 * W + c.x1];
}

// The sampling grid of output bin (ph, pw) of the region `box` ([x1, y1, x2, y2]): gh x gw points, averaged.
template <class T>
struct Bin {
  T y0 = T(0), x0 = T(0), dy = T(0), dx = T(0);  // point (iy, ix) is at (y0 + (iy + 0.5) dy, x0 + (ix + 0.5) dx)
  int64_t gh = 0, gw = 0, count = 1;
  GR_ROI_HD T y(int64_t iy) const { return y0 + (static_cast<T>(iy) + T(0.5)) * dy; }
  GR_ROI_HD T x(int64_t ix) const { return x0 + (static_cast<T>(ix) + T(0.5)) * dx; }
};

template <class T>
GR_ROI_HD inline Bin<T> bin(const T* box, int64_t ph, int64_t pw, const Params& p) {
  const T offset = p.half_pixel ? T(0.5) : T(0);
  const T scale = static_cast<T>(p.spatial_scale);
  const T x1 = box[0] * scale - offset, y1 = box[1] * scale - offset;
  T w = box[2] * scale - offset - x1, h = box[3] * scale - offset - y1;
  if (!p.half_pixel) {
    w = w > T(1) ? w : T(1);
    h = h > T(1) ? h : T(1);
  }
  const T bin_h = h / static_cast<T>(p.out_h), bin_w = w / static_cast<T>(p.out_w);
  Bin<T> b;
  b.gh = p.sampling_ratio > 0 ? p.sampling_ratio : static_cast<int64_t>(ceil(h / static_cast<T>(p.out_h)));
  b.gw = p.sampling_ratio > 0 ? p.sampling_ratio : static_cast<int64_t>(ceil(w / static_cast<T>(p.out_w)));
  b.count = b.gh * b.gw > 1 ? b.gh * b.gw : 1;
  b.y0 = y1 + static_cast<T>(ph) * bin_h;
  b.x0 = x1 + static_cast<T>(pw) * bin_w;
  b.dy = bin_h / static_cast<T>(b.gh);
  b.dx = bin_w / static_cast<T>(b.gw);
  return b;
}

// Mode max: the bin's largest weighted tap, and where it is in the plane (-1: outside the image, or no point).
template <class T>
struct Tap {
  T value = T(0);
  int64_t at = -1;
  T weight = T(0);
};

template <class T>
GR_ROI_HD inline Tap<T> max_tap(const T* plane, const Bin<T>& b, const Params& p) {
  Tap<T> best;
  bool first = true;
  for (int64_t iy = 0; iy < b.gh; ++iy)
    for (int64_t ix = 0; ix < b.gw; ++ix) {
      const Corners<T> c = corners(p.H, p.W, b.y(iy), b.x(ix));
      Tap<T> t;  // a point outside the image: 0, no tap
      if (c.in) {
        const int64_t at[4] = {c.y0 * p.W + c.x0, c.y0 * p.W + c.x1, c.y1 * p.W + c.x0, c.y1 * p.W + c.x1};
        const T w[4] = {c.w00, c.w01, c.w10, c.w11};
        for (int k = 0; k < 4; ++k) {
          const T v = w[k] * plane[at[k]];
          if (k == 0 || v > t.value) t = Tap<T>{v, at[k], w[k]};
        }
      }
      if (first || t.value > best.value) best = t;
      first = false;
    }
  return best;
}

// Output bin (ph, pw) of the region `box` over one channel's plane.
template <class T>
GR_ROI_HD inline T value(const T* plane, const T* box, int64_t ph, int64_t pw, const Params& p) {
  const Bin<T> b = bin(box, ph, pw, p);
  if (p.max) return max_tap(plane, b, p).value;
  T sum = T(0);
  for (int64_t iy = 0; iy < b.gh; ++iy)
    for (int64_t ix = 0; ix < b.gw; ++ix) sum += bilinear(plane, p.H, p.W, b.y(iy), b.x(ix));
  return sum / static_cast<T>(b.count);
}

// The gradient of value() w.r.t. the plane, added into `dplane`: mode avg spreads g (dY of the bin) over the taps of
// every sample, each sample's share g / count; mode max gives the largest tap g times its weight. Mode max reads the
// forward's `plane`.
template <class T>
GR_ROI_HD inline void add_gradient(T* dplane, const T* plane, const T* box, int64_t ph, int64_t pw, const Params& p,
                                   T g) {
  const Bin<T> b = bin(box, ph, pw, p);
  if (p.max) {
    const Tap<T> t = max_tap(plane, b, p);
    if (t.at >= 0) dplane[t.at] += t.weight * g;
    return;
  }
  const T share = g / static_cast<T>(b.count);
  for (int64_t iy = 0; iy < b.gh; ++iy)
    for (int64_t ix = 0; ix < b.gw; ++ix) {
      const Corners<T> c = corners(p.H, p.W, b.y(iy), b.x(ix));
      if (!c.in) continue;
      dplane[c.y0 * p.W + c.x0] += c.w00 * share;
      dplane[c.y0 * p.W + c.x1] += c.w01 * share;
      dplane[c.y1 * p.W + c.x0] += c.w10 * share;
      dplane[c.y1 * p.W + c.x1] += c.w11 * share;
    }
}

}  // namespace graphrun::runtime::roi

#include <algorithm>
#include <vector>

#include "graph/error.h"
#include "graph/ir.h"
#include "graph/tensor.h"

namespace graphrun::runtime::roi {

// The node's parameters for X [N, C, H, W], rois [R, 4] and batch_indices [R]; throws naming what is wrong.
inline Params params(const Node& n, int64_t opset, const Shape& x, const Shape& rois, const Shape& batch) {
  GR_CHECK(x.size() == 4, "RoiAlign: X must be [N, C, H, W], got " << shape_str(x));
  GR_CHECK(rois.size() == 2 && rois[1] == 4, "RoiAlign: rois must be [num_rois, 4], got " << shape_str(rois));
  GR_CHECK(batch.size() == 1 && batch[0] == rois[0], "RoiAlign: batch_indices " << shape_str(batch) << " do not fit rois "
                                                                               << shape_str(rois));
  const std::string mode = n.attr_s("mode", "avg");
  GR_CHECK(mode == "avg" || mode == "max", "RoiAlign: mode '" << mode << "' is not avg or max");
  Params p;
  p.max = mode == "max";
  p.out_h = n.attr_i("output_height", 1);
  p.out_w = n.attr_i("output_width", 1);
  p.sampling_ratio = n.attr_i("sampling_ratio", 0);
  p.spatial_scale = n.attr_f("spatial_scale", 1.f);
  GR_CHECK(p.out_h >= 1 && p.out_w >= 1 && p.out_h <= 65536 && p.out_w <= 65536,
           "RoiAlign: output_height and output_width must be in [1, 65536]");
  GR_CHECK(p.sampling_ratio >= 0 && p.sampling_ratio <= 1024, "RoiAlign: sampling_ratio must be in [0, 1024]");
  const std::string ct = n.attr_s("coordinate_transformation_mode", opset >= 16 ? "half_pixel" : "output_half_pixel");
  GR_CHECK(ct == "half_pixel" || ct == "output_half_pixel",
           "RoiAlign: coordinate_transformation_mode '" << ct << "' is not supported");
  p.half_pixel = ct == "half_pixel";
  p.H = x[2];
  p.W = x[3];
  return p;
}

// Each region's sampling grid, checked before any work: coordinates must be finite, and a grid (the bin's
// size rounded up when sampling_ratio is 0) of more than 2^20 samples per bin is refused naming the region,
// as a region far larger than the image would take hours.
inline void check_regions(const Params& p, const std::vector<double>& rois) {
  for (size_t r = 0; r * 4 + 3 < rois.size(); ++r) {
    const double* b = rois.data() + 4 * r;
    for (int k = 0; k < 4; ++k) GR_CHECK(std::isfinite(b[k]), "RoiAlign: region " << r << " has a coordinate that is not finite");
    if (p.sampling_ratio > 0) continue;
    double h = (b[3] - b[1]) * p.spatial_scale, w = (b[2] - b[0]) * p.spatial_scale;
    if (!p.half_pixel) h = std::max(h, 1.0), w = std::max(w, 1.0);
    const double grid = std::ceil(std::max(h, 0.0) / static_cast<double>(p.out_h)) * std::ceil(std::max(w, 0.0) / static_cast<double>(p.out_w));
    GR_CHECK(grid <= double(1 << 20), "RoiAlign: region " << r << " would take " << grid << " samples per bin (at most 2^20)");
  }
}

}  // namespace graphrun::runtime::roi

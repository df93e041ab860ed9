// ONNX MaxRoiPool: Fast R-CNN's region-of-interest max pooling, as Caffe, ONNX Runtime and torchvision.ops.roi_pool
// compute it (torchvision exports roi_pool as this op); shared by the CPU kernels (runtime/kernels/cpu/detection.cc)
// and the CUDA kernels (runtime/kernels/cuda/detection.cu). Region r is [batch_index, x1, y1, x2, y2]. Its corners
// times spatial_scale, rounded half away from zero, bound a region of at least 1x1 pixels, its ends included, cut
// into pooled_h x pooled_w bins: bin (ph, pw) spans rows floor(ph * h / pooled_h) to ceil((ph + 1) * h / pooled_h)
// of the region (columns alike), clipped to the image. A bin's output is its largest value above the float type's
// lowest finite value, 0 for an empty bin; the first position of that maximum in row-major order takes the bin's
// gradient (none where no value was above it: NaN or -inf alone).
#pragma once
#include <cfloat>
#include <cmath>
#include <cstdint>

#include "runtime/kernels/roi_align.h"  // GR_ROI_HD

namespace graphrun::runtime::roi_pool {

struct Params {
  int64_t out_h = 1, out_w = 1, H = 0, W = 0;
  double spatial_scale = 1;
};

// The pixels [h0, h1) x [w0, w1) of one bin.
struct Window {
  int64_t h0 = 0, h1 = 0, w0 = 0, w1 = 0;
  GR_ROI_HD bool empty() const { return h1 <= h0 || w1 <= w0; }
};

GR_ROI_HD inline int64_t clip(int64_t v, int64_t hi) { return v < 0 ? 0 : v > hi ? hi : v; }

// Bin (ph, pw) of region `roi` ([batch_index, x1, y1, x2, y2]), in the region's type's arithmetic as torchvision's.
template <class T>
GR_ROI_HD inline Window window(const T* roi, int64_t ph, int64_t pw, const Params& p) {
  const T s = static_cast<T>(p.spatial_scale);
  const auto at = [&](int k) { return static_cast<int64_t>(::round(static_cast<double>(roi[k] * s))); };
  const int64_t x0 = at(1), y0 = at(2), x1 = at(3), y1 = at(4);
  const int64_t rh = y1 - y0 + 1 > 1 ? y1 - y0 + 1 : 1, rw = x1 - x0 + 1 > 1 ? x1 - x0 + 1 : 1;
  const T bh = static_cast<T>(rh) / static_cast<T>(p.out_h), bw = static_cast<T>(rw) / static_cast<T>(p.out_w);
  Window w;
  w.h0 = clip(static_cast<int64_t>(::floor(static_cast<double>(static_cast<T>(ph) * bh))) + y0, p.H);
  w.h1 = clip(static_cast<int64_t>(::ceil(static_cast<double>(static_cast<T>(ph + 1) * bh))) + y0, p.H);
  w.w0 = clip(static_cast<int64_t>(::floor(static_cast<double>(static_cast<T>(pw) * bw))) + x0, p.W);
  w.w1 = clip(static_cast<int64_t>(::ceil(static_cast<double>(static_cast<T>(pw + 1) * bw))) + x0, p.W);
  return w;
}

// The bin's output and the flat index in the plane of its maximum (-1: none, the output then 0 or the lowest value).
template <class T>
struct Max {
  T value;
  int64_t at = -1;
};

template <class T>
GR_ROI_HD inline Max<T> max_of(const T* plane, const Window& w, int64_t W) {
  Max<T> m{w.empty() ? T(0) : static_cast<T>(sizeof(T) == 4 ? -FLT_MAX : -DBL_MAX), -1};
  for (int64_t h = w.h0; h < w.h1; ++h)
    for (int64_t x = w.w0; x < w.w1; ++x)
      if (plane[h * W + x] > m.value) {
        m.value = plane[h * W + x];
        m.at = h * W + x;
      }
  return m;
}

}  // namespace graphrun::runtime::roi_pool

#include <string>
#include <vector>

#include "graph/error.h"
#include "graph/ir.h"
#include "graph/tensor.h"

namespace graphrun::runtime::roi_pool {

// The node's parameters for X [N, C, H, W] and rois [R, 5]; throws naming what is wrong.
inline Params params(const Node& n, const Shape& x, const Shape& rois) {
  GR_CHECK(x.size() == 4, "MaxRoiPool: X must be [N, C, H, W], got " << shape_str(x));
  GR_CHECK(rois.size() == 2 && rois[1] == 5, "MaxRoiPool: rois must be [num_rois, 5], got " << shape_str(rois));
  const std::vector<int64_t> pooled = n.attr_ints("pooled_shape");
  GR_CHECK(pooled.size() == 2 && pooled[0] >= 1 && pooled[1] >= 1 && pooled[0] <= 65536 && pooled[1] <= 65536,
           "MaxRoiPool: pooled_shape must be two sizes in [1, 65536]");
  Params p;
  p.out_h = pooled[0];
  p.out_w = pooled[1];
  p.spatial_scale = n.attr_f("spatial_scale", 1.f);
  GR_CHECK(std::isfinite(p.spatial_scale) && p.spatial_scale > 0, "MaxRoiPool: spatial_scale must be > 0");
  p.H = x[2];
  p.W = x[3];
  return p;
}

// Each region's batch index (truncated, as torchvision reads it), checked against the N images, and its corners,
// which must be finite and, scaled, within 1e15 pixels.
inline std::vector<int64_t> batches(const std::vector<double>& rois, int64_t N, const Params& p) {
  std::vector<int64_t> b;
  for (size_t r = 0; r * 5 + 4 < rois.size(); ++r) {
    const double* v = rois.data() + 5 * r;
    for (int k = 0; k < 5; ++k)
      GR_CHECK(std::isfinite(v[k]) && std::fabs(v[k] * (k ? p.spatial_scale : 1.0)) < 1e15,
               "MaxRoiPool: region " << r << " has a coordinate that is not finite or beyond 1e15 pixels");
    const auto i = static_cast<int64_t>(v[0]);
    GR_CHECK(i >= 0 && i < N, "MaxRoiPool: batch index " << v[0] << " of region " << r << " is out of range for " << N
                                                          << " images");
    b.push_back(i);
  }
  return b;
}

}  // namespace graphrun::runtime::roi_pool

// The sampling math of GridSample (opset 16; torch's F.grid_sample; opset 20's volumes), shared by the CPU and
// CUDA kernels and by both gradients: for one grid point, the input pixels (voxels) it reads (its taps), their
// weights, and the weights' derivatives along the grid point's x, y (and z). The output is sum(weight * X[tap]);
// dX gets weight * dY at each tap; dGrid gets dY * sum(X[tap] * d weight). A tap's pixel is piecewise constant
// in the grid, so the weights carry the whole derivative. Taps outside the input (zeros padding) are left out.
// A volume (X [N, C, D, H, W], grid [N, D_out, H_out, W_out, 3] of x, y, z) takes trilinear or nearest
// sampling, each axis as a 2-D image's; bicubic samples images only (as torch's F.grid_sample).
//
// As torch computes it: a grid value g in [-1, 1] maps to the pixel coordinate ((g + 1) / 2) * (size - 1)
// with align_corners, else ((g + 1) * size - 1) / 2. bilinear and nearest then apply the padding mode to
// that coordinate (border clips it to [0, size - 1]; reflection folds it over the borders — at the pixel
// centres with align_corners, else at the outer edges — then clips), and the gradient follows the fold;
// nearest rounds half to even. bicubic takes the 4x4 neighbourhood of the unpadded coordinate (cubic
// convolution, A = -0.75) and applies the padding to each tap's integer position.
#pragma once
#include <math.h>

#include <cstdint>
#include <string>

#include "graph/error.h"
#include "graph/ir.h"

#ifdef __CUDACC__
#define GR_GRID_HD __host__ __device__
#else
#define GR_GRID_HD
#endif

namespace graphrun::runtime::grid_sample {

enum class Mode : int { Linear, Nearest, Cubic };
enum class Padding : int { Zeros, Border, Reflection };

struct Options {
  Mode mode = Mode::Linear;
  Padding padding = Padding::Zeros;
  bool align_corners = false;
};

// The node's attributes (opset 16 names, and opset 20's "linear" and "cubic"); throws naming the node.
inline Options options_of(const Node& n) {
  Options o;
  const std::string mode = n.attr_s("mode", "bilinear"), pad = n.attr_s("padding_mode", "zeros");
  if (mode == "bilinear" || mode == "linear") o.mode = Mode::Linear;
  else if (mode == "nearest") o.mode = Mode::Nearest;
  else if (mode == "bicubic" || mode == "cubic") o.mode = Mode::Cubic;
  else GR_FAIL(n.describe() << ": mode '" << mode << "' is not one of bilinear, nearest, bicubic");
  if (pad == "zeros") o.padding = Padding::Zeros;
  else if (pad == "border") o.padding = Padding::Border;
  else if (pad == "reflection") o.padding = Padding::Reflection;
  else GR_FAIL(n.describe() << ": padding_mode '" << pad << "' is not one of zeros, border, reflection");
  o.align_corners = n.attr_i("align_corners", 0) != 0;
  return o;
}

// X [N, C, H, W] sampled at grid [N, Ho, Wo, 2] (x, then y), or X [N, C, D, H, W] at grid [N, Do, Ho, Wo, 3]
// (x, y, z): the sizes, checked (an image has d = do = 1); throws naming the node.
struct Geometry {
  int dims = 2;  // 2: images, 3: volumes; a grid point holds `dims` coordinates
  int64_t n = 0, c = 0, d = 1, h = 0, w = 0, dd = 1, ho = 0, wo = 0;  // dd: the output's depth
  GR_GRID_HD int64_t plane() const { return d * h * w; }
  GR_GRID_HD int64_t points() const { return dd * ho * wo; }
  Shape y_shape() const { return dims == 3 ? Shape{n, c, dd, ho, wo} : Shape{n, c, ho, wo}; }
};
inline Geometry geometry_of(const Node& node, const Shape& x, const Shape& grid, const Options& o) {
  GR_CHECK(x.size() == 4 || x.size() == 5,
           node.describe() << ": X must be [N, C, H, W] or [N, C, D, H, W], got " << shape_str(x));
  Geometry g;
  if (x.size() == 4) {
    GR_CHECK(grid.size() == 4 && grid[3] == 2 && grid[0] == x[0], node.describe() << ": grid must be [N, H_out, W_out, 2] with X's N = "
                                                                                  << x[0] << ", got " << shape_str(grid));
    g.n = x[0], g.c = x[1], g.h = x[2], g.w = x[3], g.ho = grid[1], g.wo = grid[2];
    return g;
  }
  GR_CHECK(grid.size() == 5 && grid[4] == 3 && grid[0] == x[0],
           node.describe() << ": grid must be [N, D_out, H_out, W_out, 3] with X's N = " << x[0] << ", got "
                           << shape_str(grid));
  GR_CHECK(o.mode != Mode::Cubic, node.describe() << ": bicubic sampling is supported for images (X of rank 4) only, "
                                                     "as torch's F.grid_sample; a volume takes linear or nearest");
  g.dims = 3;
  g.n = x[0], g.c = x[1], g.d = x[2], g.h = x[3], g.w = x[4], g.dd = grid[1], g.ho = grid[2], g.wo = grid[3];
  return g;
}

constexpr int kMaxTaps = 16;

template <class S>
struct Taps {
  int count = 0;
  int64_t at[kMaxTaps];  // (z * H + y) * W + x in the input plane (a volume's, for 3-D)
  // weight and its derivatives by the grid's x, y and z (dwz 0 for images)
  S weight[kMaxTaps], dwx[kMaxTaps], dwy[kMaxTaps], dwz[kMaxTaps];
};

GR_GRID_HD inline float floor_of(float v) { return floorf(v); }
GR_GRID_HD inline double floor_of(double v) { return floor(v); }
GR_GRID_HD inline float fmod_of(float a, float b) { return fmodf(a, b); }
GR_GRID_HD inline double fmod_of(double a, double b) { return fmod(a, b); }
GR_GRID_HD inline float round_even(float v) { return rintf(v); }
GR_GRID_HD inline double round_even(double v) { return rint(v); }

// floor(v) as an index, held within [-8, size + 8]: every tap of a coordinate beyond that (or NaN) reads
// outside the input or, padded, the same border pixel; a float far out of int64's range is never cast.
template <class S>
GR_GRID_HD int64_t index_of(S v, int64_t size) {
  if (!(v > S(-8))) return -8;
  if (!(v < S(size + 8))) return size + 8;
  return static_cast<int64_t>(floor_of(v));
}

// The pixel coordinate of grid value g; *d = its derivative by g.
template <class S>
GR_GRID_HD S unnormalize(S g, int64_t size, bool align_corners, S* d) {
  if (align_corners) {
    *d = S(size - 1) / 2;
    return (g + 1) / 2 * S(size - 1);
  }
  *d = S(size) / 2;
  return ((g + 1) * S(size) - 1) / 2;
}

template <class S>
GR_GRID_HD S clip(S v, int64_t size, S* d) {
  if (v <= S(0)) {
    *d = 0;
    return 0;
  }
  const S hi = S(size - 1);
  if (v >= hi) {
    *d = 0;
    return hi;
  }
  *d = 1;
  return v;
}

// v folded into [twice_low / 2, twice_high / 2] by reflections at its ends; *d = +-1, the fold's slope.
template <class S>
GR_GRID_HD S reflect(S v, S twice_low, S twice_high, S* d) {
  if (twice_low == twice_high) {
    *d = 0;
    return 0;
  }
  const S lo = twice_low / 2, span = (twice_high - twice_low) / 2;
  v -= lo;
  S sign = 1;
  if (v < S(0)) {
    sign = -1;
    v = -v;
  }
  const S extra = fmod_of(v, span);
  if (fmod_of(floor_of(v / span), S(2)) == S(0)) {  // an even number of flips
    *d = sign;
    return extra + lo;
  }
  *d = -sign;
  return span - extra + lo;
}

// The padding mode applied to pixel coordinate v; *d = its derivative.
template <class S>
GR_GRID_HD S pad_coordinate(S v, int64_t size, const Options& o, S* d) {
  *d = 1;
  if (o.padding == Padding::Border) return clip(v, size, d);
  if (o.padding == Padding::Reflection) {
    S dr, dc;
    v = o.align_corners ? reflect(v, S(0), S(2 * (size - 1)), &dr) : reflect(v, S(-1), S(2 * size - 1), &dr);
    v = clip(v, size, &dc);
    *d = dr * dc;
  }
  return v;
}

template <class S>
GR_GRID_HD void add_tap(Taps<S>& t, int64_t y, int64_t x, int64_t h, int64_t w, S weight, S dwx, S dwy) {
  if (y < 0 || y >= h || x < 0 || x >= w) return;
  t.at[t.count] = y * w + x;
  t.weight[t.count] = weight;
  t.dwx[t.count] = dwx;
  t.dwy[t.count] = dwy;
  t.dwz[t.count] = 0;
  ++t.count;
}

template <class S>
GR_GRID_HD void add_tap3(Taps<S>& t, int64_t z, int64_t y, int64_t x, int64_t d, int64_t h, int64_t w, S weight, S dwx,
                         S dwy, S dwz) {
  if (z < 0 || z >= d || y < 0 || y >= h || x < 0 || x >= w) return;
  t.at[t.count] = (z * h + y) * w + x;
  t.weight[t.count] = weight;
  t.dwx[t.count] = dwx;
  t.dwy[t.count] = dwy;
  t.dwz[t.count] = dwz;
  ++t.count;
}

// Cubic convolution (A = -0.75) for |x| <= 1 and 1 < |x| < 2, and their derivatives.
template <class S> GR_GRID_HD S cubic_near(S x) { return ((S(1.25)) * x - S(2.25)) * x * x + 1; }
template <class S> GR_GRID_HD S cubic_far(S x) { return ((S(-0.75) * x + S(3.75)) * x - S(6)) * x + S(3); }
template <class S> GR_GRID_HD S cubic_near_d(S x) { return S(3.75) * x * x - S(4.5) * x; }
template <class S> GR_GRID_HD S cubic_far_d(S x) { return S(-2.25) * x * x + S(7.5) * x - S(6); }

// The weights of the 4 taps at offsets -1, 0, 1, 2 from floor, for fraction f; dw by f.
template <class S>
GR_GRID_HD void cubic_weights(S f, S* w, S* dw) {
  w[0] = cubic_far(f + 1);
  w[1] = cubic_near(f);
  w[2] = cubic_near(1 - f);
  w[3] = cubic_far(2 - f);
  dw[0] = cubic_far_d(f + 1);
  dw[1] = cubic_near_d(f);
  dw[2] = -cubic_near_d(1 - f);
  dw[3] = -cubic_far_d(2 - f);
}

// A bicubic tap's integer position after the padding mode; -1 when it reads outside (zeros).
template <class S>
GR_GRID_HD int64_t padded_index(int64_t i, int64_t size, const Options& o) {
  S d;
  const int64_t k = static_cast<int64_t>(pad_coordinate(S(i), size, o, &d));
  return k >= 0 && k < size ? k : -1;
}

// The taps of grid point (gx, gy) in an h x w input plane.
template <class S>
GR_GRID_HD void taps_at(S gx, S gy, int64_t h, int64_t w, const Options& o, Taps<S>& t) {
  t.count = 0;
  S mx, my;
  S ix = unnormalize(gx, w, o.align_corners, &mx), iy = unnormalize(gy, h, o.align_corners, &my);
  if (o.mode == Mode::Cubic) {
    const int64_t x0 = index_of(ix, w), y0 = index_of(iy, h);
    S wx[4], dwx[4], wy[4], dwy[4];
    cubic_weights(ix - floor_of(ix), wx, dwx);
    cubic_weights(iy - floor_of(iy), wy, dwy);
    for (int i = 0; i < 4; ++i) {
      const int64_t yy = padded_index<S>(y0 - 1 + i, h, o);
      if (yy < 0) continue;
      for (int j = 0; j < 4; ++j) {
        const int64_t xx = padded_index<S>(x0 - 1 + j, w, o);
        if (xx < 0) continue;
        add_tap(t, yy, xx, h, w, wy[i] * wx[j], wy[i] * dwx[j] * mx, dwy[i] * wx[j] * my);
      }
    }
    return;
  }
  S px, py;
  ix = pad_coordinate(ix, w, o, &px);
  iy = pad_coordinate(iy, h, o, &py);
  mx *= px;
  my *= py;
  if (o.mode == Mode::Nearest) {
    add_tap(t, index_of(round_even(iy), h), index_of(round_even(ix), w), h, w, S(1), S(0), S(0));
    return;
  }
  const S fx = ix - floor_of(ix), fy = iy - floor_of(iy);
  const int64_t x = index_of(ix, w), y = index_of(iy, h);
  add_tap(t, y, x, h, w, (1 - fx) * (1 - fy), -(1 - fy) * mx, -(1 - fx) * my);
  add_tap(t, y, x + 1, h, w, fx * (1 - fy), (1 - fy) * mx, -fx * my);
  add_tap(t, y + 1, x, h, w, (1 - fx) * fy, -fy * mx, (1 - fx) * my);
  add_tap(t, y + 1, x + 1, h, w, fx * fy, fy * mx, fx * my);
}

// The taps of grid point (gx, gy, gz) in a d x h x w volume: linear (8 taps) or nearest, each axis as taps_at's.
template <class S>
GR_GRID_HD void taps_at3(S gx, S gy, S gz, int64_t d, int64_t h, int64_t w, const Options& o, Taps<S>& t) {
  t.count = 0;
  S mx, my, mz, px, py, pz;
  S ix = unnormalize(gx, w, o.align_corners, &mx), iy = unnormalize(gy, h, o.align_corners, &my),
    iz = unnormalize(gz, d, o.align_corners, &mz);
  ix = pad_coordinate(ix, w, o, &px);
  iy = pad_coordinate(iy, h, o, &py);
  iz = pad_coordinate(iz, d, o, &pz);
  mx *= px;
  my *= py;
  mz *= pz;
  if (o.mode == Mode::Nearest) {
    add_tap3(t, index_of(round_even(iz), d), index_of(round_even(iy), h), index_of(round_even(ix), w), d, h, w, S(1),
             S(0), S(0), S(0));
    return;
  }
  const S fx = ix - floor_of(ix), fy = iy - floor_of(iy), fz = iz - floor_of(iz);
  const int64_t x = index_of(ix, w), y = index_of(iy, h), z = index_of(iz, d);
  // Along each axis the weights (1 - f, f) at offsets 0 and 1, and their slopes by the coordinate (-1, 1).
  const S wx[2] = {1 - fx, fx}, wy[2] = {1 - fy, fy}, wz[2] = {1 - fz, fz}, slope[2] = {-1, 1};
  for (int k = 0; k < 2; ++k)
    for (int j = 0; j < 2; ++j)
      for (int i = 0; i < 2; ++i)
        add_tap3(t, z + k, y + j, x + i, d, h, w, wz[k] * wy[j] * wx[i], wz[k] * wy[j] * slope[i] * mx,
                 wz[k] * slope[j] * wx[i] * my, slope[k] * wy[j] * wx[i] * mz);
}

// The taps of the grid point whose coordinates start at `pt` (g.dims of them: x, y[, z]).
template <class S, class G>
GR_GRID_HD void taps_of(const G* pt, const Geometry& g, const Options& o, Taps<S>& t) {
  if (g.dims == 3)
    taps_at3<S>(static_cast<S>(pt[0]), static_cast<S>(pt[1]), static_cast<S>(pt[2]), g.d, g.h, g.w, o, t);
  else
    taps_at<S>(static_cast<S>(pt[0]), static_cast<S>(pt[1]), g.h, g.w, o, t);
}

// Grid point p's samples in image n, every channel: y[c * points + p] = sum over taps of weight * x[c * plane + tap].
// `x` and `y` point at the image's first channel.
template <class S, class T>
GR_GRID_HD void sample_point(const Taps<S>& t, const T* x, T* y, int64_t channels, int64_t plane, int64_t points,
                             int64_t p) {
  for (int64_t c = 0; c < channels; ++c) {
    const T* src = x + c * plane;
    S acc = 0;
    for (int k = 0; k < t.count; ++k) acc += t.weight[k] * static_cast<S>(src[t.at[k]]);
    y[c * points + p] = static_cast<T>(acc);
  }
}

// Grid point p's gradient in image n: the sums over channels and taps of dY * X[tap] * d weight, written to
// out[0 .. dims). `x` and `dy` point at the image's first channel; a channel of x has `plane` elements, one of
// dy `points`.
template <class S, class T, class G>
GR_GRID_HD void point_gradient(const Taps<S>& t, const T* x, const T* dy, int64_t channels, int64_t plane,
                               int64_t points, int64_t p, int dims, G* out) {
  S sx = 0, sy = 0, sz = 0;
  for (int64_t c = 0; c < channels; ++c) {
    const T* src = x + c * plane;
    const S d = static_cast<S>(dy[c * points + p]);
    for (int k = 0; k < t.count; ++k) {
      const S v = d * static_cast<S>(src[t.at[k]]);
      sx += v * t.dwx[k];
      sy += v * t.dwy[k];
      if (dims == 3) sz += v * t.dwz[k];
    }
  }
  out[0] = static_cast<G>(sx);
  out[1] = static_cast<G>(sy);
  if (dims == 3) out[2] = static_cast<G>(sz);
}

}  // namespace graphrun::runtime::grid_sample

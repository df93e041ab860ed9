// Sliding-window geometry shared by the conv and pool kernels: ONNX's kernel_shape, strides, pads,
// dilations, auto_pad and ceil_mode rules, resolved once into concrete per-axis numbers.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "graph/ir.h"

namespace graphrun::runtime::cpu {

inline int64_t div_ceil(int64_t a, int64_t b) { return (a + b - 1) / b; }  // a >= 0, b > 0

// Up to 3 spatial axes, stored right-aligned: a 2-D window uses axes 1 and 2, axis 0 has size 1.
// "in" is the input spatial size and "out" the output one, in the direction of a forward Conv/Pool.
struct Window {
  static constexpr int kMax = 3;
  int nd = 0;  // spatial rank as given
  int64_t in[kMax], out[kMax], k[kMax], s[kMax], d[kMax], pb[kMax], pe[kMax];
  int64_t in_size() const { return in[0] * in[1] * in[2]; }
  int64_t out_size() const { return out[0] * out[1] * out[2]; }
  int64_t k_size() const { return k[0] * k[1] * k[2]; }
  void reset(int rank) {
    nd = rank;
    for (int i = 0; i < kMax; ++i) in[i] = out[i] = k[i] = s[i] = d[i] = 1, pb[i] = pe[i] = 0;
  }
  // Range [lo, hi) of output positions o along axis a whose tap (o*s - pb + kk*d) lies inside the input.
  void valid_range(int a, int64_t kk, int64_t* lo, int64_t* hi) const {
    int64_t off = kk * d[a] - pb[a];
    int64_t l = off >= 0 ? 0 : div_ceil(-off, s[a]);
    int64_t h = in[a] - off <= 0 ? 0 : div_ceil(in[a] - off, s[a]);
    h = std::min(h, out[a]);
    l = std::min(l, h);
    *lo = l;
    *hi = h;
  }
};

// The strides/dilations/pads attributes of `n` for `nd` spatial axes, checked.
struct WindowAttrs {
  std::vector<int64_t> strides, dilations, pads;
  std::string auto_pad;
};

inline WindowAttrs read_window_attrs(const Node& n, int nd, bool allow_dilations = true) {
  WindowAttrs a;
  a.strides = n.attr_ints("strides", std::vector<int64_t>(nd, 1));
  a.dilations = n.attr_ints("dilations", std::vector<int64_t>(nd, 1));
  a.pads = n.attr_ints("pads", std::vector<int64_t>(2 * nd, 0));
  a.auto_pad = n.attr_s("auto_pad", "NOTSET");
  GR_CHECK(static_cast<int>(a.strides.size()) == nd,
           "strides has " << a.strides.size() << " values for " << nd << " spatial axes");
  GR_CHECK(static_cast<int>(a.dilations.size()) == nd,
           "dilations has " << a.dilations.size() << " values for " << nd << " spatial axes");
  GR_CHECK(static_cast<int>(a.pads.size()) == 2 * nd,
           "pads has " << a.pads.size() << " values for " << nd << " spatial axes (need " << 2 * nd << ")");
  for (int64_t v : a.strides) GR_CHECK(v >= 1, "strides must be >= 1, got " << v);
  for (int64_t v : a.dilations) GR_CHECK(v >= 1, "dilations must be >= 1, got " << v);
  for (int64_t v : a.pads) GR_CHECK(v >= 0, "pads must be >= 0, got " << v);
  if (!allow_dilations)
    for (int64_t v : a.dilations) GR_CHECK(v == 1, "dilations are not supported by this op (got " << v << ")");
  GR_CHECK(a.auto_pad == "NOTSET" || a.auto_pad == "VALID" || a.auto_pad == "SAME_UPPER" ||
               a.auto_pad == "SAME_LOWER",
           "auto_pad '" << a.auto_pad << "' is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID");
  return a;
}

// The window of a forward Conv or Pool over `in_spatial` with `kernel`. ceil_mode rounds the output
// size up, dropping a last window that would start inside the end padding (as PyTorch does).
inline Window forward_window(const Node& n, const Shape& in_spatial, const std::vector<int64_t>& kernel,
                             bool ceil_mode, bool allow_dilations = true) {
  const int nd = static_cast<int>(in_spatial.size());
  GR_CHECK(nd >= 1 && nd <= Window::kMax,
           "only 1 to " << Window::kMax << " spatial axes are supported, got " << nd);
  GR_CHECK(static_cast<int>(kernel.size()) == nd,
           "kernel_shape has " << kernel.size() << " values for " << nd << " spatial axes");
  WindowAttrs a = read_window_attrs(n, nd, allow_dilations);
  Window w;
  w.reset(nd);
  for (int i = 0; i < nd; ++i) {
    const int ax = Window::kMax - nd + i;
    const int64_t in = in_spatial[i], k = kernel[i], s = a.strides[i], d = a.dilations[i];
    GR_CHECK(k >= 1, "kernel_shape must be >= 1, got " << k);
    const int64_t ek = (k - 1) * d + 1;  // extent of the dilated kernel
    int64_t pb = a.pads[i], pe = a.pads[i + nd], out;
    if (a.auto_pad == "NOTSET") {
      const int64_t span = in + pb + pe - ek;
      GR_CHECK(span >= 0, "spatial axis " << i << ": input size " << in << " plus pads " << pb << "+" << pe
                                          << " is smaller than the kernel extent " << ek);
      out = (ceil_mode ? div_ceil(span, s) : span / s) + 1;
      if (ceil_mode && (out - 1) * s >= in + pb) --out;
    } else if (a.auto_pad == "VALID") {
      pb = pe = 0;
      GR_CHECK(in >= ek, "spatial axis " << i << ": input size " << in << " is smaller than the kernel extent "
                                         << ek << " (auto_pad VALID)");
      out = (in - ek) / s + 1;
    } else {
      out = div_ceil(in, s);
      const int64_t total = std::max<int64_t>(0, (out - 1) * s + ek - in);
      pb = a.auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      pe = total - pb;
    }
    w.in[ax] = in;
    w.out[ax] = out;
    w.k[ax] = k;
    w.s[ax] = s;
    w.d[ax] = d;
    w.pb[ax] = pb;
    w.pe[ax] = pe;
  }
  return w;
}

}  // namespace graphrun::runtime::cpu

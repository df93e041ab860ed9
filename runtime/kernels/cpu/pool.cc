// CPU kernels of the pool family: MaxPool (with Indices), AveragePool, GlobalAveragePool,
// GlobalMaxPool, and graphrun's MaxPoolGrad / AveragePoolGrad. Planes (n, c) run in parallel.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include <omp.h>
#include <type_traits>

#include "runtime/kernel.h"
#include "runtime/kernels/cpu/half_compute.h"
#include "runtime/kernels/cpu/window.h"

namespace graphrun::runtime::cpu {
namespace {

Shape spatial(const Shape& s) { return Shape(s.begin() + 2, s.end()); }

void check_pool_input(const Tensor& x, bool allow_int8 = false) {
  GR_CHECK(x.rank() >= 3 && x.rank() <= 5,
           "X must have rank 3 to 5 (N, C, 1-3 spatial axes), got " << shape_str(x.shape()));
  const bool int8 = x.dtype() == DType::U8 || x.dtype() == DType::I8;
  GR_CHECK(x.dtype() == DType::F32 || x.dtype() == DType::F64 || (allow_int8 && int8),
           "X must be f32 or f64" << (allow_int8 ? " (or u8/i8)" : "") << ", got " << dtype_name(x.dtype()));
}

// The window of a MaxPool/AveragePool node over X.
Window pool_window(const Node& n, const Tensor& x, bool is_max) {
  check_pool_input(x, is_max);
  GR_CHECK(n.has_attr("kernel_shape"), "the kernel_shape attribute is required");
  return forward_window(n, spatial(x.shape()), n.attr_ints("kernel_shape"), n.attr_i("ceil_mode", 0) != 0);
}

Shape pooled_shape(const Tensor& x, const Window& w) {
  Shape s{x.dim(0), x.dim(1)};
  for (int i = Window::kMax - w.nd; i < Window::kMax; ++i) s.push_back(w.out[i]);
  return s;
}

// Calls row(o_row, in_row, lo, hi, off) for every output row of one plane (o_row: offset of its
// first pixel), every input row its windows read (in_row: offset of its first pixel), and every
// kernel column k2: the output pixels ow in [lo, hi) read input pixel in_row + ow * s + off.
// Window taps are visited in (k0, k1, k2) order, so per output pixel in ONNX's window order.
// The valid output range and input offset of each kernel column, computed once per kernel call.
struct ColumnTaps {
  std::vector<int64_t> lo, hi, off;
  explicit ColumnTaps(const Window& w) : lo(w.k[2]), hi(w.k[2]), off(w.k[2]) {
    for (int64_t k2 = 0; k2 < w.k[2]; ++k2) {
      w.valid_range(2, k2, &lo[k2], &hi[k2]);
      off[k2] = k2 * w.d[2] - w.pb[2];
    }
  }
};

template <class Row>
void for_each_window_row(const Window& w, const ColumnTaps& taps, Row&& row) {
  for (int64_t o0 = 0; o0 < w.out[0]; ++o0)
    for (int64_t o1 = 0; o1 < w.out[1]; ++o1) {
      const int64_t o_row = (o0 * w.out[1] + o1) * w.out[2];
      for (int64_t k0 = 0; k0 < w.k[0]; ++k0) {
        const int64_t i0 = o0 * w.s[0] - w.pb[0] + k0 * w.d[0];
        if (i0 < 0 || i0 >= w.in[0]) continue;
        for (int64_t k1 = 0; k1 < w.k[1]; ++k1) {
          const int64_t i1 = o1 * w.s[1] - w.pb[1] + k1 * w.d[1];
          if (i1 < 0 || i1 >= w.in[1]) continue;
          const int64_t in_row = (i0 * w.in[1] + i1) * w.in[2];
          for (int64_t k2 = 0; k2 < w.k[2]; ++k2) row(o_row, in_row, taps.lo[k2], taps.hi[k2], taps.off[k2]);
        }
      }
    }
}

// out[ow] op= in[ow * s] for ow in [lo, hi), with the common strides 1 and 2 as constants so the
// compiler vectorises them.
template <class F>
inline void strided_rows(int64_t s, int64_t lo, int64_t hi, F&& f) {
  if (s == 1) {
    for (int64_t ow = lo; ow < hi; ++ow) f(ow, ow);
  } else if (s == 2) {
    for (int64_t ow = lo; ow < hi; ++ow) f(ow, 2 * ow);
  } else {
    for (int64_t ow = lo; ow < hi; ++ow) f(ow, ow * s);
  }
}

// Taps of the window at output o that count for AveragePool's divisor: inside the input, or with
// count_include_pad inside the padded input [-pad_begin, in + pad_end). The count is a product of
// per-axis counts.
std::vector<int64_t> average_divisors(const Window& w, bool include_pad) {
  std::vector<int64_t> div(w.out_size());
  auto count = [&](int a, int64_t oa) {
    int64_t c = 0;
    for (int64_t k = 0; k < w.k[a]; ++k) {
      const int64_t i = oa * w.s[a] - w.pb[a] + k * w.d[a];
      c += include_pad ? (i >= -w.pb[a] && i < w.in[a] + w.pe[a]) : (i >= 0 && i < w.in[a]);
    }
    return c;
  };
  int64_t o = 0;
  for (int64_t o0 = 0; o0 < w.out[0]; ++o0)
    for (int64_t o1 = 0; o1 < w.out[1]; ++o1)
      for (int64_t o2 = 0; o2 < w.out[2]; ++o2) div[o++] = count(0, o0) * count(1, o1) * count(2, o2);
  return div;
}

// Column-major (storage_order 1) offset within a plane of the row-major offset i.
int64_t column_major(const Window& w, int64_t i) {
  const int64_t i2 = i % w.in[2], i1 = (i / w.in[2]) % w.in[1], i0 = i / (w.in[2] * w.in[1]);
  return i0 + i1 * w.in[0] + i2 * w.in[0] * w.in[1];
}

// The most common pooling window (2x2, stride 2, no padding or dilation, every window inside the
// input: LeNet's and SimpleCNN's) written out, so the compiler vectorises it; the general loops run
// several times slower on it.
bool is_plain_2x2(const Window& w) {
  return w.k[0] == 1 && w.k[1] == 2 && w.k[2] == 2 && w.s[1] == 2 && w.s[2] == 2 && w.d[1] == 1 && w.d[2] == 1 &&
         w.pb[1] == 0 && w.pb[2] == 0 && w.out[1] * 2 <= w.in[1] && w.out[2] * 2 <= w.in[2];
}

// MaxPool over plain 2x2 windows, taps in window order as the general loop: the first tap, then any
// larger one or NaN (so ties keep the first maximum, and NaN propagates as in PyTorch, the last NaN's
// position winning). Indices are storage_order 0: base + offset in the plane.
// In two branch-free passes the compiler vectorises: first each horizontal pair (x[2j], x[2j+1]) of
// the window rows, then the upper pair's winner against the lower one's. That is the scan's order:
// the upper pair came first, and the lower one replaces it only when larger or NaN. The old one-pass
// loop branched on every tap, and after a ReLU those branches go either way at random: it was the
// slowest node of SimpleCNN's step. When the rows are exactly 2 * OW wide (LeNet's, SimpleCNN's: 12
// outputs a row, shorter than one AVX-512 vector) both passes run flat over the whole plane: the
// second compares every pair row with the next one, half of that (odd rows against even) thrown away,
// and the even rows are then copied out.
template <class T>
inline bool replaces(T v, T best) {
  if constexpr (std::is_floating_point_v<T>) return (v > best) | (v != v);
  else return v > best;
}

// The first pass of max_2x2 and of its gradient: for each of the 2 OH window rows r and each ow, the
// winner of the pair (x[r][2 ow], x[r][2 ow + 1]) in h[r * OW + ow], and in k whether it was the right
// one. Flat over the plane when the rows are exactly 2 OW wide, else row by row.
template <class T>
void max_pairs(const T* __restrict x, int64_t IW, int64_t OH, int64_t OW, T* __restrict h, uint8_t* __restrict k) {
  auto pairs = [](const T* __restrict in, T* __restrict out, uint8_t* __restrict t, int64_t n) {
    for (int64_t j = 0; j < n; ++j) {
      const T l = in[2 * j], r = in[2 * j + 1];
      const bool right = replaces(r, l);
      out[j] = right ? r : l;
      t[j] = right;
    }
  };
  if (IW == 2 * OW) return pairs(x, h, k, 2 * OH * OW);
  for (int64_t r = 0; r < 2 * OH; ++r) pairs(x + r * IW, h + r * OW, k + r * OW, OW);
}

// Scratch per thread for max_2x2: 2 P values, 2 P taps (bytes), 2 P results, 2 P indices.
template <class T>
size_t max_2x2_scratch(int64_t P) {
  return (static_cast<size_t>(2 * P) * (2 * sizeof(T) + 1 + sizeof(int64_t)) + 63) / 64 * 64;
}

template <class T>
void max_2x2(const T* __restrict x, int64_t IW, T* __restrict y, int64_t* __restrict idx, int64_t base, int64_t OH,
             int64_t OW, char* scratch) {
  const int64_t P = OH * OW;
  int64_t* __restrict mi = reinterpret_cast<int64_t*>(scratch);
  T* __restrict h = reinterpret_cast<T*>(mi + 2 * P);
  T* __restrict m = h + 2 * P;
  uint8_t* __restrict hk = reinterpret_cast<uint8_t*>(m + 2 * P);
  // h[r * OW + ow], hk: the winner of window row r's pair ow (r < 2 OH), and whether it was the right tap.
  max_pairs(x, IW, OH, OW, h, hk);
  if (IW != 2 * OW) {  // a column left over at the right: row by row
    for (int64_t oh = 0; oh < OH; ++oh) {
      const T *__restrict up = h + 2 * oh * OW, *__restrict lo = up + OW;
      const uint8_t *__restrict kup = hk + 2 * oh * OW, *__restrict klo = kup + OW;
      for (int64_t ow = 0; ow < OW; ++ow) {
        const bool t = replaces(lo[ow], up[ow]);
        y[oh * OW + ow] = t ? lo[ow] : up[ow];
        if (idx) idx[oh * OW + ow] = base + 2 * oh * IW + 2 * ow + (t ? IW + klo[ow] : kup[ow]);
      }
    }
    return;
  }
  // Pair row r against row r + 1 for every r < 2 OH - 1; even r are the outputs. With IW = 2 OW the
  // window's top-left tap for j = r * OW + ow is at r * IW + 2 ow = 2 j.
  const int64_t n = 2 * P - OW;
  for (int64_t j = 0; j < n; ++j) {
    const bool t = replaces(h[j + OW], h[j]);
    m[j] = t ? h[j + OW] : h[j];
  }
  for (int64_t oh = 0; oh < OH; ++oh) std::memcpy(y + oh * OW, m + 2 * oh * OW, sizeof(T) * OW);
  if (!idx) return;
  for (int64_t j = 0; j < n; ++j) {
    const bool t = replaces(h[j + OW], h[j]);
    mi[j] = base + 2 * j + (t ? IW + hk[j + OW] : hk[j]);
  }
  for (int64_t oh = 0; oh < OH; ++oh) std::memcpy(idx + oh * OW, mi + 2 * oh * OW, sizeof(int64_t) * OW);
}

// Any other 2-D (or 1-D) MaxPool whose every window has at least one tap inside the input on each
// axis (torchvision ResNets' 3x3 stride 2 pad 1 after the stem; any kernel, strides, dilations, pads),
// in the general loop's results exactly: a max over the window's taps in its row-major scan order
// (ties keep the first maximum, NaN wins and the last NaN's position is the index). The scan is a
// fold with an associative step (later tap b replaces the running a when larger or NaN), so it may
// run as a fold over each window row's taps (a horizontal pass per input row) and then over the
// window's rows in order (a vertical pass), each branch-free over many outputs, which the compiler
// vectorises. Taps in the padding are left out of the fold, as the scan skips them: the passes run
// over the interior outputs (every tap inside), and the few outputs at the borders are folded over
// their valid taps alone, afterwards. Small planes run several at once (max_windowed_block). When the
// input rows are s * OW wide the horizontal pass runs flat over all their rows (the border columns,
// read across rows, are then redone), and when the output rows are short or several planes run at
// once the vertical one too (every row start between the first interior window and the last, s - 1
// of s of them thrown away): a 14x14 plane's rows are 7 outputs, under one vector. Indices are
// positions from the first plane of the block, as int32 until written out.
struct AxisTaps {  // per output position of one axis: its taps kk in [kb, ke) lie inside the input
  std::vector<int64_t> kb, ke;
  int64_t lo = 0, hi = 0;  // outputs [lo, hi) have all k taps inside
  bool empty = false;      // some window has no tap inside on this axis
  AxisTaps(const Window& w, int a) : kb(w.out[a]), ke(w.out[a]) {
    lo = -1;
    for (int64_t o = 0; o < w.out[a]; ++o) {
      const int64_t first = o * w.s[a] - w.pb[a];
      kb[o] = first >= 0 ? 0 : div_ceil(-first, w.d[a]);
      ke[o] = w.in[a] - first <= 0 ? 0 : std::min(w.k[a], div_ceil(w.in[a] - first, w.d[a]));
      empty = empty || kb[o] >= ke[o];
      if (kb[o] == 0 && ke[o] == w.k[a]) {
        if (lo < 0) lo = o;
        hi = o + 1;
      }
    }
    if (lo < 0) lo = hi = 0;
  }
  bool interior(int64_t o) const { return o >= lo && o < hi; }
};

bool fits_max_windowed(const Window& w, int64_t so, const AxisTaps& rows, const AxisTaps& cols) {
  return so == 0 && w.k[0] == 1 && w.in[0] == 1 && !rows.empty && !cols.empty &&
         w.in_size() < (int64_t{1} << 31);
}

// t ? a : b without a branch: GCC compiles a scalar float select to a jump, which after a ReLU
// mispredicts as the old loop did (in the loops' scalar epilogues and the border columns); as a mask
// on the bits it is a select in vectorised code too.
template <class T>
inline T pick(bool t, T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    using U = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
    U ua, ub;
    std::memcpy(&ua, &a, sizeof(T));
    std::memcpy(&ub, &b, sizeof(T));
    const U m = U(0) - U(t);
    const U r = (ua & m) | (ub & ~m);
    T out;
    std::memcpy(&out, &r, sizeof(T));
    return out;
  } else {
    return t ? a : b;
  }
}

// out[j] = the fold over taps kk in [k0, k1) of src[s * j + off + kk * d], for j in [j0, j1); with
// kIdx, at[j] = base + s * j + off + kk * d of the winner. kS: the stride s as a constant (0: s).
template <class T, bool kIdx, int64_t kS>
void fold_taps_s(const T* __restrict src, int64_t s, int64_t off, int64_t d, int64_t k0, int64_t k1, int64_t j0,
                 int64_t j1, T* __restrict out, int32_t* __restrict at, int32_t base) {
  const int64_t st = kS ? kS : s;
  const int64_t o0 = off + k0 * d;
  for (int64_t j = j0; j < j1; ++j) {
    out[j] = src[st * j + o0];
    if constexpr (kIdx) at[j] = static_cast<int32_t>(base + st * j + o0);
  }
  for (int64_t kk = k0 + 1; kk < k1; ++kk) {
    const int64_t o = off + kk * d;
    for (int64_t j = j0; j < j1; ++j) {
      const T v = src[st * j + o];
      const bool t = replaces(v, out[j]);
      out[j] = pick(t, v, out[j]);
      if constexpr (kIdx) at[j] = pick(t, static_cast<int32_t>(base + st * j + o), at[j]);
    }
  }
}

template <class T, bool kIdx>
void fold_taps(const T* src, int64_t s, int64_t off, int64_t d, int64_t k0, int64_t k1, int64_t j0, int64_t j1,
               T* out, int32_t* at, int32_t base) {
  if (s == 1) fold_taps_s<T, kIdx, 1>(src, s, off, d, k0, k1, j0, j1, out, at, base);
  else if (s == 2) fold_taps_s<T, kIdx, 2>(src, s, off, d, k0, k1, j0, j1, out, at, base);
  else fold_taps_s<T, kIdx, 0>(src, s, off, d, k0, k1, j0, j1, out, at, base);
}

// out[j] = the fold over rows kk in [k0, k1) of h[j + kk * st] (and at[j] its index), j in [0, n).
template <class T, bool kIdx>
void fold_rows(const T* __restrict h, const int32_t* __restrict hi, int64_t st, int64_t k0, int64_t k1, int64_t n,
               T* __restrict out, int32_t* __restrict at) {
  for (int64_t j = 0; j < n; ++j) {
    out[j] = h[j + k0 * st];
    if constexpr (kIdx) at[j] = hi[j + k0 * st];
  }
  for (int64_t kk = k0 + 1; kk < k1; ++kk) {
    const T* __restrict r = h + kk * st;
    const int32_t* __restrict ri = hi + kk * st;
    for (int64_t j = 0; j < n; ++j) {
      const bool t = replaces(r[j], out[j]);
      out[j] = pick(t, r[j], out[j]);
      if constexpr (kIdx) at[j] = pick(t, ri[j], at[j]);
    }
  }
}

// Planes per call of max_windowed: small planes (a 14x14 one has 98 row folds) run several at once,
// the passes flat over all of them, so that a vector loop's scalar remainder is paid once a block.
int64_t max_windowed_block(const Window& w, int64_t planes) {
  return std::max<int64_t>(1, std::min({planes, int64_t{64}, 4096 / std::max<int64_t>(1, w.in[1] * w.out[2]),
                                        ((int64_t{1} << 31) - 1) / std::max<int64_t>(1, w.in_size())}));
}

// Scratch per thread for max_windowed over B planes: 2 B IH OW values, then (8-aligned) 2 B IH OW
// and B OH OW indices.
template <class T>
size_t max_windowed_scratch(const Window& w, int64_t B) {
  const size_t h = static_cast<size_t>(B * w.in[1] * w.out[2]);
  return ((2 * h * sizeof(T) + 7) / 8 * 8 + (2 * h + B * w.out_size()) * sizeof(int32_t) + 63) / 64 * 64;
}

// B consecutive planes: x, y and idx point at the first; base is its offset in the whole input.
template <class T, bool kIdx>
void max_windowed(const T* __restrict x, int64_t B, const Window& w, const AxisTaps& rows, const AxisTaps& cols,
                  T* __restrict y, int64_t* __restrict idx, int64_t base, char* scratch) {
  const int64_t IH = w.in[1], IW = w.in[2], OH = w.out[1], OW = w.out[2], P = OH * OW;
  const int64_t sh = w.s[1], sw = w.s[2], dh = w.d[1], dw = w.d[2], ph = w.pb[1], pw = w.pb[2];
  const int64_t kh = w.k[1], kw = w.k[2], R = B * IH;  // R input rows in all
  // hv[r * OW + ow]: the fold of input row r's taps for output column ow (r counts over the B planes)
  T* __restrict hv = reinterpret_cast<T*>(scratch);
  T* __restrict m = hv + R * OW;
  int32_t* __restrict hi = reinterpret_cast<int32_t*>(scratch + (2 * R * OW * sizeof(T) + 7) / 8 * 8);
  int32_t* __restrict mi = hi + R * OW;
  int32_t* __restrict yi = mi + R * OW;
  // Horizontal: every input row, the interior columns in vector passes, then the border ones.
  if (cols.lo < cols.hi) {
    if (IW == sw * OW)  // flat: output j = r * OW + ow reads x[sw * j - pw + kk * dw]
      fold_taps<T, kIdx>(x, sw, -pw, dw, 0, kw, cols.lo, (R - 1) * OW + cols.hi, hv, hi, 0);
    else
      for (int64_t r = 0; r < R; ++r)
        fold_taps<T, kIdx>(x + r * IW, sw, -pw, dw, 0, kw, cols.lo, cols.hi, hv + r * OW, hi + r * OW,
                           static_cast<int32_t>(r * IW));
  }
  for (int64_t ow = 0; ow < OW; ++ow) {
    if (cols.interior(ow)) {
      ow = cols.hi - 1;
      continue;
    }
    for (int64_t r = 0; r < R; ++r)
      fold_taps<T, kIdx>(x + r * IW, sw, -pw, dw, cols.kb[ow], cols.ke[ow], ow, ow + 1, hv + r * OW, hi + r * OW,
                         static_cast<int32_t>(r * IW));
  }
  // Vertical: output row oh folds input rows oh * sh - ph + kk * dh of its plane.
  auto row = [&](int64_t p, int64_t oh) {
    const int64_t r0 = p * IH + oh * sh - ph + rows.kb[oh] * dh;  // its first row inside the input
    fold_rows<T, kIdx>(hv + r0 * OW, hi + r0 * OW, dh * OW, 0, rows.ke[oh] - rows.kb[oh], OW, y + p * P + oh * OW,
                       yi + p * P + oh * OW);
  };
  constexpr int64_t kShortRow = 16;
  if (rows.lo < rows.hi && (OW < kShortRow || B > 1)) {
    // flat: every row start from the first plane's first interior window to the last plane's last
    const int64_t first = rows.lo * sh - ph, last = (B - 1) * IH + (rows.hi - 1) * sh - ph;
    fold_rows<T, kIdx>(hv + first * OW, hi + first * OW, dh * OW, 0, kh, (last - first + 1) * OW, m, mi);
    for (int64_t p = 0; p < B; ++p)
      for (int64_t oh = rows.lo; oh < rows.hi; ++oh) {
        const int64_t from = (p * IH + oh * sh - ph - first) * OW;
        std::memcpy(y + p * P + oh * OW, m + from, sizeof(T) * OW);
        if constexpr (kIdx) std::memcpy(yi + p * P + oh * OW, mi + from, sizeof(int32_t) * OW);
      }
  } else {
    for (int64_t p = 0; p < B; ++p)
      for (int64_t oh = rows.lo; oh < rows.hi; ++oh) row(p, oh);
  }
  for (int64_t p = 0; p < B; ++p)
    for (int64_t oh = 0; oh < OH; ++oh)
      if (!rows.interior(oh)) row(p, oh);
  if constexpr (kIdx)
    for (int64_t o = 0; o < B * P; ++o) idx[o] = base + yi[o];
}

template <class T>
void max_pool_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Window w = pool_window(ctx.node(), x, true);
  const int64_t so = ctx.node().attr_i("storage_order", 0);
  GR_CHECK(so == 0 || so == 1, "storage_order must be 0 or 1, got " << so);
  const Shape ys = pooled_shape(x, w);
  T* y = ctx.output(0, ys, x.dtype()).data<T>();
  int64_t* idx = ctx.has_output(1) ? ctx.output(1, ys, DType::I64).data<int64_t>() : nullptr;
  const T* xp = x.data<T>();
  const int64_t planes = x.dim(0) * x.dim(1), I = w.in_size(), P = w.out_size();
  if (is_plain_2x2(w) && so == 0) {
    const int nt = std::max(1, ctx.threads());
    const size_t per = max_2x2_scratch<T>(P);
    char* scratch = static_cast<char*>(ctx.scratch(per * nt));
#pragma omp parallel for num_threads(nt) schedule(dynamic, 16)
    for (int64_t p = 0; p < planes; ++p)
      max_2x2(xp + p * I, w.in[2], y + p * P, idx ? idx + p * P : nullptr, p * I, w.out[1], w.out[2],
              scratch + per * omp_get_thread_num());
    return;
  }
  if (const AxisTaps rows(w, 1), cols(w, 2); fits_max_windowed(w, so, rows, cols)) {
    const int nt = std::max(1, ctx.threads());
    const int64_t B = max_windowed_block(w, planes), blocks = (planes + B - 1) / B;
    const size_t per = max_windowed_scratch<T>(w, B);
    char* scratch = static_cast<char*>(ctx.scratch(per * nt));
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t p = b * B, n = std::min(B, planes - p);
      char* mine = scratch + per * omp_get_thread_num();
      if (idx) max_windowed<T, true>(xp + p * I, n, w, rows, cols, y + p * P, idx + p * P, p * I, mine);
      else max_windowed<T, false>(xp + p * I, n, w, rows, cols, y + p * P, nullptr, p * I, mine);
    }
    return;
  }
  int64_t* args = static_cast<int64_t*>(ctx.scratch(sizeof(int64_t) * planes * P));
  const ColumnTaps taps(w);
#pragma omp parallel for num_threads(ctx.threads()) schedule(dynamic, 16)
  for (int64_t p = 0; p < planes; ++p) {
    const T* xin = xp + p * I;
    T* yo = y + p * P;
    int64_t* arg = args + p * P;  // argmax within the plane, -1 while none
    constexpr T kLowest = std::numeric_limits<T>::has_infinity ? -std::numeric_limits<T>::infinity()
                                                               : std::numeric_limits<T>::lowest();
    for (int64_t o = 0; o < P; ++o) yo[o] = kLowest, arg[o] = -1;
    const int64_t s = w.s[2];
    for_each_window_row(w, taps, [&](int64_t o_row, int64_t in_row, int64_t lo, int64_t hi, int64_t off) {
      T* best = yo + o_row;
      int64_t* at = arg + o_row;
      const T* in = xin + in_row + off;
      for (int64_t ow = lo; ow < hi; ++ow) {
        const T v = in[ow * s];
        // NaN propagates, as in PyTorch's max pooling.
        bool nan = false;
        if constexpr (std::is_floating_point_v<T>) nan = std::isnan(v);
        if (v > best[ow] || nan || at[ow] < 0) best[ow] = v, at[ow] = in_row + off + ow * s;
      }
    });
    if (idx)
      for (int64_t o = 0; o < P; ++o)
        idx[p * P + o] = arg[o] < 0 ? -1 : p * I + (so ? column_major(w, arg[o]) : arg[o]);
  }
}

template <class T>
void average_2x2(const T* __restrict x, int64_t IH, int64_t IW, T* __restrict y, int64_t OH, int64_t OW) {
  for (int64_t oh = 0; oh < OH; ++oh) {
    const T* __restrict r0 = x + 2 * oh * IW;
    const T* __restrict r1 = r0 + IW;
    T* __restrict out = y + oh * OW;
    for (int64_t ow = 0; ow < OW; ++ow)
      out[ow] = (r0[2 * ow] + r0[2 * ow + 1] + r1[2 * ow] + r1[2 * ow + 1]) * T(0.25);
  }
}

template <class T>
void average_2x2_grad(const T* __restrict g, int64_t OH, int64_t OW, T* __restrict dx, int64_t IH, int64_t IW) {
  for (int64_t oh = 0; oh < OH; ++oh) {
    T* __restrict r0 = dx + 2 * oh * IW;
    T* __restrict r1 = r0 + IW;
    const T* __restrict go = g + oh * OW;
    for (int64_t ow = 0; ow < OW; ++ow) {
      const T v = go[ow] * T(0.25);
      r0[2 * ow] = r0[2 * ow + 1] = r1[2 * ow] = r1[2 * ow + 1] = v;
    }
    for (int64_t iw = 2 * OW; iw < IW; ++iw) r0[iw] = r1[iw] = T(0);  // columns no window covers
  }
  std::fill(dx + 2 * OH * IW, dx + IH * IW, T(0));  // rows no window covers
}

template <class T>
void average_pool_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Window w = pool_window(ctx.node(), x, false);
  const bool include_pad = ctx.node().attr_i("count_include_pad", 0) != 0;
  const std::vector<int64_t> div = average_divisors(w, include_pad);
  std::vector<T> inv_div(div.size());
  for (size_t o = 0; o < div.size(); ++o) inv_div[o] = div[o] ? T(1) / static_cast<T>(div[o]) : T(0);
  T* y = ctx.output(0, pooled_shape(x, w), x.dtype()).data<T>();
  const T* xp = x.data<T>();
  const int64_t planes = x.dim(0) * x.dim(1), I = w.in_size(), P = w.out_size();
  if (is_plain_2x2(w)) {
#pragma omp parallel for num_threads(ctx.threads()) schedule(dynamic, 16)
    for (int64_t p = 0; p < planes; ++p) average_2x2(xp + p * I, w.in[1], w.in[2], y + p * P, w.out[1], w.out[2]);
    return;
  }
  const ColumnTaps taps(w);
#pragma omp parallel for num_threads(ctx.threads()) schedule(dynamic, 16)
  for (int64_t p = 0; p < planes; ++p) {
    const T* xin = xp + p * I;
    T* yo = y + p * P;
    std::fill(yo, yo + P, T(0));
    const int64_t s = w.s[2];
    for_each_window_row(w, taps, [&](int64_t o_row, int64_t in_row, int64_t lo, int64_t hi, int64_t off) {
      T* __restrict acc = yo + o_row;
      const T* __restrict in = xin + in_row + off;
      strided_rows(s, lo, hi, [acc, in](int64_t o, int64_t i) { acc[o] += in[i]; });
    });
    for (int64_t o = 0; o < P; ++o) yo[o] *= inv_div[o];
  }
}

template <class T, bool kMax>
void global_pool_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  check_pool_input(x);
  Shape ys{x.dim(0), x.dim(1)};
  for (int i = 2; i < x.rank(); ++i) ys.push_back(1);
  T* y = ctx.output(0, ys, x.dtype()).data<T>();
  const T* xp = x.data<T>();
  const int64_t planes = x.dim(0) * x.dim(1), I = shape_numel(spatial(x.shape()));
  GR_CHECK(I > 0 || planes == 0, "X " << shape_str(x.shape()) << " has empty spatial axes");
#pragma omp parallel for num_threads(ctx.threads()) schedule(dynamic, 16)
  for (int64_t p = 0; p < planes; ++p) {
    const T* xin = xp + p * I;
    T acc = kMax ? -std::numeric_limits<T>::infinity() : T(0);
    for (int64_t i = 0; i < I; ++i) acc = kMax ? (xin[i] > acc || std::isnan(xin[i]) ? xin[i] : acc) : acc + xin[i];
    y[p] = kMax ? acc : acc / static_cast<T>(I);
  }
}

// The relu attribute of MaxPoolGrad / AveragePoolGrad (pass fuse_pool_relu_grad): X is a Relu's output
// and dX goes on through that Relu's gradient, dX where X > 0, else 0: applied to each plane while it
// is in cache, bit for bit ReluGrad(dX, X).
bool relu_attr(const Node& n) {
  const int64_t r = n.attr_i("relu", 0);
  GR_CHECK(r == 0 || r == 1, "attribute 'relu' must be 0 or 1, got " << r);
  return r == 1;
}

template <class T>
void relu_mask_plane(T* __restrict d, const T* __restrict x, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) d[i] = x[i] > T(0) ? d[i] : T(0);
}

// MaxPoolGrad without Indices (pass recompute_maxpool_argmax) over plain 2x2 windows: each window's
// argmax found again in X by max_2x2's rule (the upper pair's winner, then the lower pair's when it
// replaces it), and its dY written there. The windows do not overlap, so every input pixel is written
// once: 0 + dY at the argmax (the scatter's sum, -0 included), 0 elsewhere and in a row or column no
// window covers. With relu, the argmax keeps its dY only where X > 0 (ReluGrad's select).
template <class T>
size_t max_2x2_grad_scratch(int64_t P) {
  return (static_cast<size_t>(2 * P) * (4 * sizeof(T) + 1) + 63) / 64 * 64;
}

// Branch-free passes the compiler vectorises (after a ReLU half the inputs are zeros, and branches on
// the ties go either way at random: one loop over the windows with four strided loads and stores did
// not vectorise and ran 6x slower than the scatter of Indices). The pairs' winners as in max_2x2; then,
// flat over the pair rows as max_2x2 does (windows' rows of 12 are shorter than one AVX-512 vector),
// each upper pair row against the row below: u, what the upper pair's winner receives (dY or 0), and l,
// the lower one's, one row down; then every input pixel from its row's share and pair flag.
template <class T>
void max_2x2_grad(const T* __restrict g, const T* __restrict x, T* __restrict d, int64_t OH, int64_t OW, int64_t IH,
                  int64_t IW, bool relu, char* scratch) {
  const int64_t P = OH * OW;
  T* __restrict h = reinterpret_cast<T*>(scratch);
  T* __restrict gs = h + 2 * P;  // dY's row oh at pair row 2 oh, zeros at the odd rows
  T* __restrict u = gs + 2 * P;
  T* __restrict l = u + 2 * P;
  uint8_t* __restrict hk = reinterpret_cast<uint8_t*>(l + 2 * P);
  const T zero(0);
  max_pairs(x, IW, OH, OW, h, hk);
  // dY's rows at the even pair rows. The odd rows' results are thrown away; they read the zeros the
  // caller put in the scratch (never memory nothing wrote, which could hold denormals).
  for (int64_t oh = 0; oh < OH; ++oh) std::memcpy(gs + 2 * oh * OW, g + oh * OW, sizeof(T) * OW);
  const int64_t n = 2 * P - OW;  // odd rows' results are thrown away
  if (relu) {
    for (int64_t j = 0; j < n; ++j) {
      const bool t = replaces(h[j + OW], h[j]);
      const T v = (t ? h[j + OW] : h[j]) > zero ? zero + gs[j] : zero;
      u[j] = t ? zero : v;
      l[j + OW] = t ? v : zero;
    }
  } else {
    for (int64_t j = 0; j < n; ++j) {
      const bool t = replaces(h[j + OW], h[j]);
      const T v = zero + gs[j];
      u[j] = t ? zero : v;
      l[j + OW] = t ? v : zero;
    }
  }
  for (int64_t oh = 0; oh < OH; ++oh) std::memcpy(u + (2 * oh + 1) * OW, l + (2 * oh + 1) * OW, sizeof(T) * OW);
  auto expand = [zero](const T* __restrict sv, const uint8_t* __restrict k, T* __restrict out, int64_t m) {
    for (int64_t j = 0; j < m; ++j) {
      const T v = sv[j];
      const bool right = k[j];
      out[2 * j] = right ? zero : v;
      out[2 * j + 1] = right ? v : zero;
    }
  };
  if (IW == 2 * OW) {
    expand(u, hk, d, 2 * P);
  } else {
    for (int64_t r = 0; r < 2 * OH; ++r) {
      expand(u + r * OW, hk + r * OW, d + r * IW, OW);
      std::fill(d + r * IW + 2 * OW, d + (r + 1) * IW, zero);
    }
  }
  std::fill(d + 2 * OH * IW, d + IH * IW, zero);
}

// MaxPoolGrad(dY, Indices, X) -> dX: dY scattered to the argmax positions (storage_order 0 indices).
// Without Indices (pass recompute_maxpool_argmax, plain 2x2 windows only) the argmax is found again in X.
template <class T>
void max_pool_grad_kernel(KernelContext& ctx) {
  const Tensor &dy = ctx.input(0), &x = ctx.input(2);
  check_pool_input(x);
  if (!ctx.has_input(1)) {
    const Window w = pool_window(ctx.node(), x, true);
    GR_CHECK(x.rank() == 4 && is_plain_2x2(w) && ctx.node().attr_i("storage_order", 0) == 0,
             "MaxPoolGrad without Indices takes 2x2 windows of stride 2 without pads (the attributes of its MaxPool)");
    GR_CHECK(dy.shape() == pooled_shape(x, w), "dY " << shape_str(dy.shape()) << " does not match MaxPool's output shape "
                                                     << shape_str(pooled_shape(x, w)) << " for X " << shape_str(x.shape()));
    const bool relu = relu_attr(ctx.node());
    T* dx = ctx.output(0, x.shape(), x.dtype()).data<T>();
    const T *g = dy.data<T>(), *xp = x.data<T>();
    const int64_t planes = x.dim(0) * x.dim(1), I = w.in_size(), P = w.out_size();
    const int nt = std::max(1, ctx.threads());
    const size_t per = max_2x2_grad_scratch<T>(P);
    char* scratch = static_cast<char*>(ctx.scratch(per * nt));
    std::memset(scratch, 0, per * nt);  // see max_2x2_grad
#pragma omp parallel for num_threads(nt) schedule(dynamic, 16)
    for (int64_t p = 0; p < planes; ++p)
      max_2x2_grad(g + p * P, xp + p * I, dx + p * I, w.out[1], w.out[2], w.in[1], w.in[2], relu,
                   scratch + per * omp_get_thread_num());
    return;
  }
  const Tensor& ind = ctx.input(1);
  GR_CHECK(ind.dtype() == DType::I64, "Indices must be i64, got " << dtype_name(ind.dtype()));
  GR_CHECK(dy.shape() == ind.shape(), "dY " << shape_str(dy.shape()) << " and Indices " << shape_str(ind.shape())
                                            << " must have the same shape");
  GR_CHECK(dy.rank() == x.rank() && dy.dim(0) == x.dim(0) && dy.dim(1) == x.dim(1),
           "dY " << shape_str(dy.shape()) << " is not a pooled shape of X " << shape_str(x.shape()));
  const bool relu = relu_attr(ctx.node());
  T* dx = ctx.output(0, x.shape(), x.dtype()).data<T>();
  const T* g = dy.data<T>();
  const T* xp = x.data<T>();
  const int64_t* id = ind.data<int64_t>();
  const int64_t planes = x.dim(0) * x.dim(1), I = shape_numel(spatial(x.shape())), P = shape_numel(spatial(dy.shape()));
  bool bad = false;
#pragma omp parallel for num_threads(ctx.threads()) schedule(dynamic, 16) reduction(|| : bad)
  for (int64_t p = 0; p < planes; ++p) {
    T* d = dx + p * I;
    std::fill(d, d + I, T(0));
    for (int64_t o = p * P; o < (p + 1) * P; ++o) {
      if (id[o] < 0) continue;  // a window that lay entirely in the padding
      const int64_t local = id[o] - p * I;
      if (local >= I || local < 0) { bad = true; continue; }
      d[local] += g[o];
    }
    if (relu) relu_mask_plane(d, xp + p * I, I);
  }
  GR_CHECK(!bad, "Indices hold a position outside the (n, c) plane of its output: they must be MaxPool's "
                 "storage_order 0 indices into X");
}

// AveragePoolGrad(dY, X) -> dX: each dY spread evenly over its window's counted taps.
template <class T>
void average_pool_grad_kernel(KernelContext& ctx) {
  const Tensor &dy = ctx.input(0), &x = ctx.input(1);
  const Window w = pool_window(ctx.node(), x, false);
  const Shape ys = pooled_shape(x, w);
  GR_CHECK(dy.shape() == ys, "dY " << shape_str(dy.shape()) << " does not match AveragePool's output shape "
                                   << shape_str(ys) << " for X " << shape_str(x.shape()));
  const std::vector<int64_t> div = average_divisors(w, ctx.node().attr_i("count_include_pad", 0) != 0);
  const bool relu = relu_attr(ctx.node());
  T* dx = ctx.output(0, x.shape(), x.dtype()).data<T>();
  const T* g = dy.data<T>();
  const T* xp = x.data<T>();
  const int64_t planes = x.dim(0) * x.dim(1), I = w.in_size(), P = w.out_size();
  if (is_plain_2x2(w)) {
#pragma omp parallel for num_threads(ctx.threads()) schedule(dynamic, 16)
    for (int64_t p = 0; p < planes; ++p) {
      average_2x2_grad(g + p * P, w.out[1], w.out[2], dx + p * I, w.in[1], w.in[2]);
      if (relu) relu_mask_plane(dx + p * I, xp + p * I, I);  // while the plane is in cache
    }
    return;
  }
  T* shares = static_cast<T*>(ctx.scratch(sizeof(T) * planes * P));
  const ColumnTaps taps(w);
#pragma omp parallel for num_threads(ctx.threads()) schedule(dynamic, 16)
  for (int64_t p = 0; p < planes; ++p) {
    T* d = dx + p * I;
    const T* go = g + p * P;
    T* share = shares + p * P;
    for (int64_t o = 0; o < P; ++o) share[o] = div[o] ? go[o] / static_cast<T>(div[o]) : T(0);
    std::fill(d, d + I, T(0));
    const int64_t s = w.s[2];
    for_each_window_row(w, taps, [&](int64_t o_row, int64_t in_row, int64_t lo, int64_t hi, int64_t off) {
      const T* __restrict sh = share + o_row;
      T* __restrict out = d + in_row + off;
      strided_rows(s, lo, hi, [sh, out](int64_t o, int64_t i) { out[i] += sh[o]; });
    });
    if (relu) relu_mask_plane(d, xp + p * I, I);
  }
}

// Dispatches on the dtype of input kX.
template <int kX, void (*F32)(KernelContext&), void (*F64)(KernelContext&)>
void by_float(KernelContext& ctx) {
  const Tensor& x = ctx.input(kX);
  GR_CHECK(x.dtype() == DType::F32 || x.dtype() == DType::F64, "X must be f32 or f64, got " << dtype_name(x.dtype()));
  GR_CHECK(ctx.input(0).dtype() == x.dtype(),
           "dY is " << dtype_name(ctx.input(0).dtype()) << " but X is " << dtype_name(x.dtype()));
  if (x.dtype() == DType::F32) F32(ctx);
  else F64(ctx);
}

void max_pool_any(KernelContext& ctx) {
  switch (ctx.input(0).dtype()) {  // opset 12 adds u8/i8
    case DType::U8: return max_pool_kernel<uint8_t>(ctx);
    case DType::I8: return max_pool_kernel<int8_t>(ctx);
    default: return by_float<0, max_pool_kernel<float>, max_pool_kernel<double>>(ctx);
  }
}

}  // namespace

constexpr const char* kReluAttrDoc =
    "1: X is a Relu's output and dX continues through that Relu's gradient (dX where X > 0, else 0), "
    "in the same pass (internal: pass fuse_pool_relu_grad makes it of the gradient and a ReluGrad)";

GR_REGISTER_OPS(pool) {
  ops.op("MaxPool").cpu(via_f32<max_pool_any>);
  ops.op("AveragePool").cpu(via_f32<by_float<0, average_pool_kernel<float>, average_pool_kernel<double>>>);
  ops.op("GlobalAveragePool")
      .cpu(via_f32<by_float<0, global_pool_kernel<float, false>, global_pool_kernel<double, false>>>);
  ops.op("GlobalMaxPool").cpu(via_f32<by_float<0, global_pool_kernel<float, true>, global_pool_kernel<double, true>>>);
  ops.op(kGraphrunDomain, "MaxPoolGrad")
      .cpu(by_float<2, max_pool_grad_kernel<float>, max_pool_grad_kernel<double>>)
      .schema(OpSchemaSpec("scatters dY to the argmax positions; Indices is MaxPool's second output (flat index "
                           "into X, `storage_order` 0); X gives the shape. Without Indices (internal: pass "
                           "recompute_maxpool_argmax, plain 2x2 windows of stride 2) the argmax is found again in X, "
                           "by MaxPool's rule, from the window attributes")
                  .attr("kernel_shape", "as MaxPool (read without Indices)", Attribute::Kind::Ints)
                  .attr("pads", "as MaxPool (read without Indices)", Attribute::Kind::Ints)
                  .attr("relu", kReluAttrDoc, Attribute::Int(0))
                  .attr("strides", "as MaxPool (read without Indices)", Attribute::Kind::Ints)
                  .input("dY", "gradient of Y", "T")
                  .input("Indices", "MaxPool's second output (absent: found again in X)", "I", OpSchemaSpec::Arity::Optional)
                  .input("X", "forward input (gives the shape)", "T")
                  .output("dX", "gradient of X", "T")
                  .type("T", float_tensor_types(), "float tensors")
                  .type("I", {"tensor(int64)"}, "flat indices")
                  .output_like(0, 2));
  ops.op(kGraphrunDomain, "AveragePoolGrad")
      .cpu(by_float<1, average_pool_grad_kernel<float>, average_pool_grad_kernel<double>>)
      .schema(OpSchemaSpec("spreads dY evenly over each AveragePool window (honouring `count_include_pad`, pads, "
                           "`ceil_mode`)")
                  .attr("auto_pad", "as AveragePool", Attribute::Str("NOTSET"))
                  .attr("ceil_mode", "as AveragePool", Attribute::Int(0))
                  .attr("count_include_pad", "as AveragePool", Attribute::Int(0))
                  .attr("kernel_shape", "as AveragePool", Attribute::Kind::Ints)
                  .attr("pads", "as AveragePool", Attribute::Kind::Ints)
                  .attr("relu", kReluAttrDoc, Attribute::Int(0))
                  .attr("strides", "as AveragePool", Attribute::Kind::Ints)
                  .input("dY", "gradient of Y", "T")
                  .input("X", "forward input (gives the shape)", "T")
                  .output("dX", "gradient of X", "T")
                  .type("T", float_tensor_types(), "float tensors")
                  .output_like(0, 1));
}

}  // namespace graphrun::runtime::cpu

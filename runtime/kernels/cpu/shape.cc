// CPU kernels: shape family — ops that move, select or create elements without arithmetic
// (Reshape, Transpose, Concat, Split, Slice, Pad, Gather, ...), plus ai.graphrun SumToShape, SliceGrad,
// GatherElementsGrad and GatherNDGrad.
// Movement kernels work on raw elements of 1, 2, 4 or 8 bytes, so they serve every dtype.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#ifdef __AVX2__
#include <immintrin.h>
#endif

#include "graph/slice_layout.h"
#include "runtime/kernels/cpu/math_common.h"
#include "runtime/kernels/depth_space.h"
#include "runtime/kernels/unique_plan.h"

namespace graphrun::runtime::cpu {
namespace {

// Calls f(E{}) with an unsigned type as wide as one element of `dt`.
template <class F> void dispatch_bytes(DType dt, const char* what, F&& f) {
  switch (dtype_size(dt)) {
    case 1: f(uint8_t{}); break;
    case 2: f(uint16_t{}); break;
    case 4: f(uint32_t{}); break;
    case 8: f(uint64_t{}); break;
    default: GR_FAIL(what << ": element type " << dtype_name(dt) << " is not supported");
  }
}

void copy_all(const Tensor& x, Tensor& y) {
  if (x.nbytes() && y.raw() != x.raw()) std::memcpy(y.raw(), x.raw(), x.nbytes());
}

#ifdef __AVX2__
// y[i * ldy + j] = x[j * ldx + i] for i, j < 8, 4-byte elements: eight rows loaded, transposed in registers
// (unpack, shuffle, lane permute: moves only, so every bit pattern, NaN payloads included, arrives as it was),
// eight rows stored.
inline void transpose_8x8(const void* xv, int64_t ldx, void* yv, int64_t ldy) {
  const float* x = static_cast<const float*>(xv);
  float* y = static_cast<float*>(yv);
  __m256 r[8], t[8];
  for (int k = 0; k < 8; ++k) r[k] = _mm256_loadu_ps(x + k * ldx);
  for (int k = 0; k < 8; k += 2) {
    t[k] = _mm256_unpacklo_ps(r[k], r[k + 1]);
    t[k + 1] = _mm256_unpackhi_ps(r[k], r[k + 1]);
  }
  for (int k = 0; k < 8; k += 4) {
    r[k] = _mm256_shuffle_ps(t[k], t[k + 2], 0x44);
    r[k + 1] = _mm256_shuffle_ps(t[k], t[k + 2], 0xEE);
    r[k + 2] = _mm256_shuffle_ps(t[k + 1], t[k + 3], 0x44);
    r[k + 3] = _mm256_shuffle_ps(t[k + 1], t[k + 3], 0xEE);
  }
  for (int k = 0; k < 4; ++k) {
    _mm256_storeu_ps(y + k * ldy, _mm256_permute2f128_ps(r[k], r[k + 4], 0x20));
    _mm256_storeu_ps(y + (k + 4) * ldy, _mm256_permute2f128_ps(r[k], r[k + 4], 0x31));
  }
}
#endif

// strided_gather where the output's innermost axis is not the input's contiguous one and axis p is (a
// transpose of the two): for every index of the other axes, the [shape[p], shape[r-1]] plane is copied
// in blocks, reading runs of x along p and writing runs of y along r-1 while both stay in cache, where one
// strided read per element misses it (a [512, 128] weight took 4 ns an element). 4-byte elements on AVX2
// go 8 rows of y by 16 columns at a time, two 8x8 register transposes that write each row's 16 values
// (a cache line) at once: 1.3x to 3x the scalar tiles at the shapes of a transformer's head splits and
// MatMul gradients (and a [1024, 1024] matrix), whose strides of a power of two made partial lines thrash.
template <class E>
void tiled_gather(const Shape& shape, const std::vector<int64_t>& strides, int64_t base, size_t p, const E* x, E* y) {
  constexpr int64_t kTile = 32;
  const size_t r = shape.size();
  std::vector<int64_t> ost(r, 1);
  for (size_t k = r - 1; k-- > 0;) ost[k] = ost[k + 1] * shape[k + 1];
  std::vector<int64_t> od, is, os;  // the other axes: range, input stride, output stride
  for (size_t k = 0; k + 1 < r; ++k)
    if (k != p) od.push_back(shape[k]), is.push_back(strides[k]), os.push_back(ost[k]);
  const int64_t P = shape[p], J = shape[r - 1], s = strides[r - 1], op = ost[p];
  std::vector<int64_t> idx(od.size(), 0);
  int64_t xo = base, yo = 0;
  for (;;) {
#ifdef __AVX2__
    if constexpr (sizeof(E) == 4) {
      const int64_t P8 = P / 8 * 8, J16 = J / 16 * 16;
      for (int64_t i = 0; i < P8; i += 8) {
        for (int64_t j = 0; j < J16; j += 16) {
          transpose_8x8(x + xo + j * s + i, s, y + yo + i * op + j, op);
          transpose_8x8(x + xo + (j + 8) * s + i, s, y + yo + i * op + j + 8, op);
        }
        for (int64_t ii = i; ii < i + 8; ++ii)
          for (int64_t j = J16; j < J; ++j) y[yo + ii * op + j] = x[xo + j * s + ii];
      }
      for (int64_t i = P8; i < P; ++i)
        for (int64_t j = 0; j < J; ++j) y[yo + i * op + j] = x[xo + j * s + i];
    } else
#endif
    for (int64_t ib = 0; ib < P; ib += kTile) {
      const int64_t ie = std::min(P, ib + kTile);
      for (int64_t jb = 0; jb < J; jb += kTile) {
        const int64_t je = std::min(J, jb + kTile);
        for (int64_t i = ib; i < ie; ++i) {
          const E* src = x + xo + i;
          E* dst = y + yo + i * op;
          for (int64_t j = jb; j < je; ++j) dst[j] = src[j * s];
        }
      }
    }
    size_t k = od.size();
    for (; k-- > 0;) {
      xo += is[k];
      yo += os[k];
      if (++idx[k] < od[k]) break;
      xo -= is[k] * od[k];
      yo -= os[k] * od[k];
      idx[k] = 0;
    }
    if (k == static_cast<size_t>(-1)) return;
  }
}

// y[i0..] = x[base + sum_k i_k * strides[k]] for every index of `shape`; y contiguous.
template <class E>
void strided_gather(const Shape& shape, const std::vector<int64_t>& strides, int64_t base, const E* x, E* y) {
  const int64_t n = shape_numel(shape);
  if (n == 0) return;
  if (shape.empty()) {
    y[0] = x[base];
    return;
  }
  const size_t r = shape.size();
  const int64_t inner = shape[r - 1], s = strides[r - 1];
  if (s != 1 && inner > 1) {
    size_t p = r - 1;  // the output axis the input is contiguous along, if any
    for (size_t k = 0; k + 1 < r; ++k)
      if (strides[k] == 1 && shape[k] > 1) p = k;
    if (p != r - 1) {
      tiled_gather(shape, strides, base, p, x, y);
      return;
    }
  }
  std::vector<int64_t> idx(r, 0);
  int64_t off = base;
  for (int64_t o = 0; o < n; o += inner) {
    if (s == 1) std::memcpy(y + o, x + off, sizeof(E) * inner);
    else for (int64_t i = 0; i < inner; ++i) y[o + i] = x[off + i * s];
    for (size_t k = r - 1; k-- > 0;) {
      off += strides[k];
      if (++idx[k] < shape[k]) break;
      off -= strides[k] * shape[k];
      idx[k] = 0;
    }
  }
}

std::vector<int64_t> contiguous_strides(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (size_t k = s.size(); k-- > 1;) st[k - 1] = st[k] * s[k];
  return st;
}

// ---- reshaping ----

void flatten_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  int64_t axis = ctx.node().attr_i("axis", 1);
  const int64_t r = x.rank();
  GR_CHECK(axis >= -r && axis <= r, "Flatten: axis " << axis << " is out of range for input shape "
                                                     << shape_str(x.shape()));
  if (axis < 0) axis += r;
  Tensor& y = ctx.output(0, {prod(x.shape(), 0, axis), prod(x.shape(), axis, r)}, x.dtype());
  copy_all(x, y);
}

void reshape_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  std::vector<int64_t> spec = int_list(ctx.input(1), "Reshape shape");
  const bool allowzero = ctx.opset() >= 14 && ctx.node().attr_i("allowzero", 0) != 0;
  Shape out(spec.size());
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < spec.size(); ++i) {
    int64_t d = spec[i];
    if (d == 0 && !allowzero) {
      GR_CHECK(i < x.shape().size(), "Reshape: shape " << shape_str(spec) << " copies dimension " << i
                                                       << " (0) but the input " << shape_str(x.shape())
                                                       << " has rank " << x.rank());
      d = x.shape()[i];
    }
    if (d == -1) {
      GR_CHECK(infer < 0, "Reshape: shape " << shape_str(spec) << " has more than one -1");
      infer = static_cast<int>(i);
      continue;
    }
    GR_CHECK(d >= 0, "Reshape: invalid dimension " << d << " in shape " << shape_str(spec));
    out[i] = d;
    known *= d;
  }
  if (infer >= 0) {
    GR_CHECK(known != 0 && x.numel() % known == 0,
             "Reshape: cannot reshape " << shape_str(x.shape()) << " into " << shape_str(spec));
    out[infer] = x.numel() / known;
  }
  GR_CHECK(shape_numel(out) == x.numel(), "Reshape: cannot reshape " << shape_str(x.shape()) << " ("
                                              << x.numel() << " elements) into " << shape_str(spec));
  Tensor& y = ctx.output(0, out, x.dtype());
  copy_all(x, y);
}

// Squeeze/Unsqueeze axes: an attribute before opset 13, an optional input from 13.
std::vector<int64_t> axes_of(const KernelContext& ctx, int input_index, bool* given) {
  if (ctx.opset() < 13) {
    *given = ctx.node().has_attr("axes");
    return ctx.node().attr_ints("axes");
  }
  std::vector<int64_t> axes = ctx.has_input(input_index) ? int_list(ctx.input(input_index), "axes") : std::vector<int64_t>{};
  *given = !axes.empty();  // an empty axes input counts as absent
  return axes;
}

void squeeze_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  bool given = false;
  std::vector<int64_t> axes = axes_of(ctx, 1, &given);
  std::vector<bool> drop(x.rank(), false);
  if (!given) {
    for (int k = 0; k < x.rank(); ++k) drop[k] = x.shape()[k] == 1;
  } else {
    for (int64_t a : axes) {
      int k = norm_axis(a, x.rank(), "Squeeze");
      GR_CHECK(x.shape()[k] == 1, "Squeeze: axis " << a << " of shape " << shape_str(x.shape())
                                                   << " has size " << x.shape()[k] << ", not 1");
      drop[k] = true;
    }
  }
  Shape out;
  for (int k = 0; k < x.rank(); ++k)
    if (!drop[k]) out.push_back(x.shape()[k]);
  copy_all(x, ctx.output(0, out, x.dtype()));
}

void unsqueeze_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  bool given = false;
  std::vector<int64_t> axes = axes_of(ctx, 1, &given);
  GR_CHECK(given, "Unsqueeze: axes are required");
  const int64_t r = x.rank() + static_cast<int64_t>(axes.size());
  std::vector<bool> ins(r, false);
  for (int64_t a : axes) {
    int k = norm_axis(a, r, "Unsqueeze");
    GR_CHECK(!ins[k], "Unsqueeze: axis " << a << " is given twice");
    ins[k] = true;
  }
  Shape out;
  size_t j = 0;
  for (int64_t k = 0; k < r; ++k) out.push_back(ins[k] ? 1 : x.shape()[j++]);
  copy_all(x, ctx.output(0, out, x.dtype()));
}

// ---- permuting, joining, splitting ----

void transpose_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const int r = x.rank();
  std::vector<int64_t> perm = ctx.node().attr_ints("perm");
  if (perm.empty()) for (int k = r - 1; k >= 0; --k) perm.push_back(k);
  GR_CHECK(static_cast<int>(perm.size()) == r, "Transpose: perm " << shape_str(perm) << " does not match input shape "
                                                                  << shape_str(x.shape()));
  std::vector<bool> seen(r, false);
  for (int64_t& p : perm) {
    GR_CHECK(p >= -r && p < r && !seen[p < 0 ? p + r : p],
             "Transpose: perm " << shape_str(ctx.node().attr_ints("perm")) << " is not a permutation of 0.." << r - 1);
    if (p < 0) p += r;
    seen[p] = true;
  }
  const auto in_st = contiguous_strides(x.shape());
  Shape out(r);
  std::vector<int64_t> st(r);
  for (int k = 0; k < r; ++k) {
    out[k] = x.shape()[perm[k]];
    st[k] = in_st[perm[k]];
  }
  Tensor& y = ctx.output(0, out, x.dtype());
  dispatch_bytes(x.dtype(), "Transpose", [&](auto tag) {
    using E = decltype(tag);
    strided_gather<E>(out, st, 0, ptr<E>(x), ptr<E>(y));
  });
}

void concat_kernel(KernelContext& ctx) {
  GR_CHECK(ctx.node().has_attr("axis"), "Concat: attribute 'axis' is required");
  const Tensor& x0 = ctx.input(0);
  const int r = x0.rank();
  const int axis = norm_axis(ctx.node().attr_i("axis", 0), r, "Concat");
  Shape out = x0.shape();
  out[axis] = 0;
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    const Tensor& xi = ctx.input(i);
    GR_CHECK(xi.dtype() == x0.dtype(), "Concat: input " << i << " is " << dtype_name(xi.dtype()) << " but input 0 is "
                                                        << dtype_name(x0.dtype()));
    bool ok = xi.rank() == r;
    for (int k = 0; ok && k < r; ++k) ok = k == axis || xi.shape()[k] == x0.shape()[k];
    GR_CHECK(ok, "Concat: input shapes " << shape_str(x0.shape()) << " and " << shape_str(xi.shape())
                                         << " differ outside axis " << axis);
    out[axis] += xi.shape()[axis];
  }
  Tensor& y = ctx.output(0, out, x0.dtype());
  const size_t esz = dtype_size(x0.dtype());
  const int64_t outer = prod(out, 0, axis), inner = prod(out, axis + 1, r) * esz;
  char* dst = static_cast<char*>(y.raw());
  const int64_t row = out[axis] * inner;
  int64_t col = 0;
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    const Tensor& xi = ctx.input(i);
    const int64_t chunk = xi.shape()[axis] * inner;
    const char* src = static_cast<const char*>(xi.raw());
    if (chunk)
      for (int64_t o = 0; o < outer; ++o) std::memcpy(dst + o * row + col, src + o * chunk, chunk);
    col += chunk;
  }
}

void split_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const int r = x.rank();
  const int axis = norm_axis(ctx.node().attr_i("axis", 0), r, "Split");
  const int n = ctx.num_outputs();
  std::vector<int64_t> split;
  if (ctx.opset() < 13) split = ctx.node().attr_ints("split");
  else if (ctx.has_input(1)) split = int_list(ctx.input(1), "Split split");
  const int64_t dim = x.shape()[axis];
  if (split.empty()) {
    GR_CHECK(n > 0 && dim % n == 0, "Split: axis " << axis << " of shape " << shape_str(x.shape())
                                                   << " cannot be split into " << n << " equal parts");
    split.assign(n, dim / n);
  }
  GR_CHECK(static_cast<int>(split.size()) == n, "Split: " << split.size() << " split sizes for " << n << " outputs");
  GR_CHECK(std::accumulate(split.begin(), split.end(), int64_t{0}) == dim,
           "Split: sizes " << shape_str(split) << " do not add up to " << dim << " (axis " << axis << " of "
                           << shape_str(x.shape()) << ")");
  const size_t esz = dtype_size(x.dtype());
  const int64_t outer = prod(x.shape(), 0, axis), inner = prod(x.shape(), axis + 1, r) * esz;
  const char* src = static_cast<const char*>(x.raw());
  const int64_t row = dim * inner;
  int64_t col = 0;
  for (int i = 0; i < n; ++i) {
    GR_CHECK(split[i] >= 0, "Split: negative size " << split[i]);
    Shape s = x.shape();
    s[axis] = split[i];
    Tensor& y = ctx.output(i, s, x.dtype());
    const int64_t chunk = split[i] * inner;
    char* dst = static_cast<char*>(y.raw());
    if (chunk)
      for (int64_t o = 0; o < outer; ++o) std::memcpy(dst + o * chunk, src + o * row + col, chunk);
    col += chunk;
  }
}

// Slice's starts, ends, axes and steps: inputs from opset 10, attributes before.
SliceLayout slice_layout_of(KernelContext& ctx, const Shape& in, int first, const char* what) {
  std::vector<int64_t> starts, ends, axes, steps;
  if (ctx.opset() < 10 && first == 1) {
    starts = ctx.node().attr_ints("starts");
    ends = ctx.node().attr_ints("ends");
    axes = ctx.node().attr_ints("axes");
  } else {
    starts = int_list(ctx.input(first), (std::string(what) + " starts").c_str());
    ends = int_list(ctx.input(first + 1), (std::string(what) + " ends").c_str());
    if (ctx.has_input(first + 2)) axes = int_list(ctx.input(first + 2), (std::string(what) + " axes").c_str());
    if (ctx.has_input(first + 3)) steps = int_list(ctx.input(first + 3), (std::string(what) + " steps").c_str());
  }
  return slice_layout(in, starts, ends, axes, steps, what);
}

void slice_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const SliceLayout L = slice_layout_of(ctx, x.shape(), 1, "Slice");
  Tensor& y = ctx.output(0, L.out, x.dtype());
  if (y.numel() == 0) return;
  dispatch_bytes(x.dtype(), "Slice", [&](auto tag) {
    using E = decltype(tag);
    strided_gather<E>(L.out, L.strides, L.base, ptr<E>(x), ptr<E>(y));
  });
}

// SliceGrad(dY, shape, starts, ends[, axes[, steps]]): zeros of `shape` with dY written where Slice took its
// elements (the same layout; a Slice never takes an element twice, so nothing adds up).
void slice_grad_kernel(KernelContext& ctx) {
  const Tensor& dy = ctx.input(0);
  const std::vector<int64_t> sv = int_list(ctx.input(1), "SliceGrad shape");
  const Shape xs(sv.begin(), sv.end());
  for (int64_t d : xs) GR_CHECK(d >= 0, "SliceGrad: bad shape " << shape_str(xs));
  const SliceLayout L = slice_layout_of(ctx, xs, 2, "SliceGrad");
  GR_CHECK(dy.shape() == L.out, "SliceGrad: dY has shape " << shape_str(dy.shape()) << ", the slice of "
                                                           << shape_str(xs) << " has " << shape_str(L.out));
  Tensor& dx = ctx.output(0, xs, dy.dtype());
  if (dx.nbytes()) std::memset(dx.raw(), 0, dx.nbytes());
  if (dy.numel() == 0) return;
  dispatch_bytes(dy.dtype(), "SliceGrad", [&](auto tag) {
    using E = decltype(tag);
    const E* g = ptr<E>(dy);
    E* p = ptr<E>(dx);
    const size_t r = L.out.size();
    if (r == 0) {
      p[L.base] = g[0];
      return;
    }
    const int64_t n = dy.numel(), inner = L.out[r - 1], s = L.strides[r - 1];
    std::vector<int64_t> idx(r, 0);
    int64_t off = L.base;
    for (int64_t o = 0; o < n; o += inner) {
      for (int64_t i = 0; i < inner; ++i) p[off + i * s] = g[o + i];
      for (size_t k = r - 1; k-- > 0;) {
        off += L.strides[k];
        if (++idx[k] < L.out[k]) break;
        off -= L.strides[k] * L.out[k];
        idx[k] = 0;
      }
    }
  });
}

// ---- padding ----

void pad_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const int r = x.rank();
  std::string mode = ctx.node().attr_s("mode", "constant");
  std::vector<int64_t> pads;
  double value = 0;
  const Tensor* value_tensor = nullptr;
  if (ctx.opset() < 11) {
    pads = ctx.node().attr_ints(ctx.node().has_attr("pads") ? "pads" : "paddings");
    value = ctx.node().attr_f("value", 0.f);
  } else {
    pads = int_list(ctx.input(1), "Pad pads");
    if (ctx.has_input(2)) {
      value_tensor = &ctx.input(2);
      GR_CHECK(value_tensor->numel() == 1, "Pad: constant_value must be a scalar, got shape "
                                               << shape_str(value_tensor->shape()));
      GR_CHECK(value_tensor->dtype() == x.dtype(), "Pad: constant_value is " << dtype_name(value_tensor->dtype())
                                                                             << " but the input is "
                                                                             << dtype_name(x.dtype()));
    }
  }
  std::vector<int64_t> full(2 * r, 0);
  if (ctx.opset() >= 18 && ctx.has_input(3)) {
    std::vector<int64_t> axes = int_list(ctx.input(3), "Pad axes");
    GR_CHECK(pads.size() == 2 * axes.size(), "Pad: " << pads.size() << " pads for " << axes.size() << " axes");
    for (size_t i = 0; i < axes.size(); ++i) {
      int k = norm_axis(axes[i], r, "Pad");
      full[k] = pads[i];
      full[k + r] = pads[i + axes.size()];
    }
  } else {
    GR_CHECK(static_cast<int>(pads.size()) == 2 * r, "Pad: " << pads.size() << " pads for input shape "
                                                             << shape_str(x.shape()) << " (need " << 2 * r << ")");
    full = pads;
  }
  GR_CHECK(mode == "constant" || mode == "reflect" || mode == "edge",
           "Pad: unknown mode '" << mode << "' (constant, reflect, edge)");
  Shape out(r);
  // Per axis: the source index of each output position, or -1 for the constant.
  std::vector<std::vector<int64_t>> src(r);
  for (int k = 0; k < r; ++k) {
    const int64_t dim = x.shape()[k], before = full[k], after = full[k + r];
    GR_CHECK(!__builtin_add_overflow(dim, before, &out[k]) && !__builtin_add_overflow(out[k], after, &out[k]),
             "Pad: pads " << shape_str(full) << " overflow axis " << k << " of " << shape_str(x.shape()));
    GR_CHECK(out[k] >= 0, "Pad: pads " << shape_str(full) << " remove more than axis " << k << " of "
                                       << shape_str(x.shape()) << " holds");
    checked_numel(DType::I64, {out[k]}, "Pad: output axis " + std::to_string(k));  // its index table below
  }
  checked_numel(x.dtype(), out, "Pad: output");
  for (int k = 0; k < r; ++k) {
    const int64_t dim = x.shape()[k], before = full[k];
    if (mode != "constant" && out[k] > 0)
      GR_CHECK(dim > 0, "Pad: mode '" << mode << "' cannot pad the empty axis " << k);
    src[k].resize(out[k]);
    for (int64_t o = 0; o < out[k]; ++o) {
      int64_t i = o - before;
      if (i < 0 || i >= dim) {
        if (mode == "constant") {
          i = -1;
        } else if (mode == "edge") {
          i = std::clamp<int64_t>(i, 0, dim - 1);
        } else if (dim == 1) {
          i = 0;
        } else {
          const int64_t period = 2 * (dim - 1);
          i = ((i % period) + period) % period;
          if (i >= dim) i = period - i;
        }
      }
      src[k][o] = i;
    }
  }
  Tensor& y = ctx.output(0, out, x.dtype());
  if (y.numel() == 0) return;
  dispatch_numeric_bool(x.dtype(), "Pad", [&](auto tag) {
    using T = decltype(tag);
    const T fill = value_tensor ? ptr<T>(*value_tensor)[0] : static_cast<T>(value);
    const T* px = ptr<T>(x);
    T* py = ptr<T>(y);
    if (r == 0) {
      py[0] = px[0];
      return;
    }
    const auto in_st = contiguous_strides(x.shape());
    const int64_t inner = out[r - 1], n = y.numel();
    const auto& last = src[r - 1];
    // In constant mode the last axis is [fill][a contiguous run of the input][fill].
    const int64_t lead = std::max<int64_t>(full[r - 1], 0);
    const int64_t run = mode == "constant" ? std::clamp<int64_t>(x.shape()[r - 1] + std::min<int64_t>(full[r - 1], 0) +
                                                                     std::min<int64_t>(full[2 * r - 1], 0),
                                                                 0, inner - lead)
                                           : -1;
    const int64_t run_src = std::max<int64_t>(-full[r - 1], 0);
    std::vector<int64_t> idx(r, 0);
    for (int64_t o = 0; o < n; o += inner) {
      int64_t off = 0;
      bool constant = false;
      for (int k = 0; k + 1 < r; ++k) {
        int64_t s = src[k][idx[k]];
        if (s < 0) { constant = true; break; }
        off += s * in_st[k];
      }
      if (constant) {
        std::fill(py + o, py + o + inner, fill);
      } else if (run >= 0) {
        std::fill(py + o, py + o + lead, fill);
        std::copy(px + off + run_src, px + off + run_src + run, py + o + lead);
        std::fill(py + o + lead + run, py + o + inner, fill);
      } else {
        for (int64_t i = 0; i < inner; ++i) py[o + i] = last[i] < 0 ? fill : px[off + last[i]];
      }
      for (int k = r - 1; k-- > 0;) {
        if (++idx[k] < out[k]) break;
        idx[k] = 0;
      }
    }
  });
}

// ---- creating ----

void constant_kernel(KernelContext& ctx) {
  const Node& n = ctx.node();
  Tensor v;
  if (const Attribute* a = n.attr("value")) {
    GR_CHECK(a->kind == Attribute::Kind::Tensor, "Constant: attribute 'value' must be a tensor");
    v = a->t;
  } else if (const Attribute* a = n.attr("value_float")) {
    v = Tensor::scalar<float>(a->f);
  } else if (const Attribute* a = n.attr("value_floats")) {
    v = Tensor::from_vector<float>({static_cast<int64_t>(a->floats.size())}, a->floats);
  } else if (const Attribute* a = n.attr("value_int")) {
    v = Tensor::scalar<int64_t>(a->i);
  } else if (const Attribute* a = n.attr("value_ints")) {
    v = Tensor::from_vector<int64_t>({static_cast<int64_t>(a->ints.size())}, a->ints);
  } else {
    GR_FAIL("Constant: needs one of the attributes value, value_float(s), value_int(s) "
            "(sparse_value and strings are not supported)");
  }
  GR_CHECK(v.defined() && dtype_size(v.dtype()) > 0, "Constant: unsupported value " << v.str());
  copy_all(v, ctx.output(0, v.shape(), v.dtype()));
}

void shape_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const int64_t r = x.rank();
  int64_t start = 0, end = r;
  if (ctx.opset() >= 15) {
    start = ctx.node().attr_i("start", 0);
    end = ctx.node().attr_i("end", r);
    if (start < 0) start += r;
    if (end < 0) end += r;
    start = std::clamp<int64_t>(start, 0, r);
    end = std::clamp<int64_t>(end, 0, r);
  }
  const int64_t len = std::max<int64_t>(end - start, 0);
  Tensor& y = ctx.output(0, {len}, DType::I64);
  for (int64_t i = 0; i < len; ++i) ptr<int64_t>(y)[i] = x.shape()[start + i];
}

void size_kernel(KernelContext& ctx) {
  Tensor& y = ctx.output(0, {}, DType::I64);
  ptr<int64_t>(y)[0] = ctx.input(0).numel();
}

void constant_of_shape_kernel(KernelContext& ctx) {
  Shape out = int_list(ctx.input(0), "ConstantOfShape shape");
  for (int64_t d : out) GR_CHECK(d >= 0, "ConstantOfShape: negative dimension in " << shape_str(out));
  Tensor v = Tensor::scalar<float>(0.f);
  if (const Attribute* a = ctx.node().attr("value")) {
    GR_CHECK(a->kind == Attribute::Kind::Tensor && a->t.numel() == 1,
             "ConstantOfShape: 'value' must be a one-element tensor");
    v = a->t;
  }
  Tensor& y = ctx.output(0, out, v.dtype());
  const size_t esz = dtype_size(v.dtype());
  char* p = static_cast<char*>(y.raw());
  for (int64_t i = 0; i < y.numel(); ++i) std::memcpy(p + i * esz, v.raw(), esz);
}

void range_kernel(KernelContext& ctx) {
  const Tensor &s = ctx.input(0), &l = ctx.input(1), &d = ctx.input(2);
  for (const Tensor* t : {&s, &l, &d}) {
    GR_CHECK(t->numel() == 1, "Range: start, limit and delta must be scalars, got shape " << shape_str(t->shape()));
    GR_CHECK(t->dtype() == s.dtype(), "Range: start, limit and delta must have one element type");
  }
  dispatch_signed(s.dtype(), "Range", [&](auto tag) {
    using T = decltype(tag);
    const T start = ptr<T>(s)[0], limit = ptr<T>(l)[0], delta = ptr<T>(d)[0];
    GR_CHECK(delta != T(0), "Range: delta is 0");
    const int64_t n = std::max<int64_t>(
        static_cast<int64_t>(std::ceil((static_cast<double>(limit) - static_cast<double>(start)) /
                                       static_cast<double>(delta))), 0);
    Tensor& y = ctx.output(0, {n}, s.dtype());
    T* py = ptr<T>(y);
    for (int64_t i = 0; i < n; ++i) py[i] = static_cast<T>(start + static_cast<T>(i) * delta);
  });
}

// ---- indexing ----

std::vector<int64_t> read_indices(const Tensor& t, int64_t dim, const char* what, const Shape& data_shape, int axis) {
  GR_CHECK(t.dtype() == DType::I64 || t.dtype() == DType::I32,
           what << ": indices must be int64 or int32, got " << dtype_name(t.dtype()));
  std::vector<int64_t> v = t.as_int64s();
  for (int64_t& i : v) {
    GR_CHECK(i >= -dim && i < dim, what << ": index " << i << " is out of range for axis " << axis << " of size "
                                        << dim << " (data shape " << shape_str(data_shape) << ")");
    if (i < 0) i += dim;
  }
  return v;
}

void gather_kernel(KernelContext& ctx) {
  const Tensor &x = ctx.input(0), &ind = ctx.input(1);
  const int r = x.rank();
  GR_CHECK(r >= 1, "Gather: data must have rank >= 1");
  const int axis = norm_axis(ctx.node().attr_i("axis", 0), r, "Gather");
  const int64_t dim = x.shape()[axis];
  std::vector<int64_t> idx = read_indices(ind, dim, "Gather", x.shape(), axis);
  Shape out(x.shape().begin(), x.shape().begin() + axis);
  out.insert(out.end(), ind.shape().begin(), ind.shape().end());
  out.insert(out.end(), x.shape().begin() + axis + 1, x.shape().end());
  Tensor& y = ctx.output(0, out, x.dtype());
  const size_t esz = dtype_size(x.dtype());
  const int64_t outer = prod(x.shape(), 0, axis), inner = prod(x.shape(), axis + 1, r) * esz;
  const int64_t m = static_cast<int64_t>(idx.size());
  const char* src = static_cast<const char*>(x.raw());
  char* dst = static_cast<char*>(y.raw());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < m; ++j) std::memcpy(dst + (o * m + j) * inner, src + (o * dim + idx[j]) * inner, inner);
}

// Index arithmetic shared by GatherElements and ScatterElements: for every element of the
// indices tensor, its offset in the data tensor with the axis coordinate replaced by the index.
template <class F>
void for_each_element_index(const Shape& ishape, const Shape& dshape, int axis, const std::vector<int64_t>& idx, F f) {
  const int r = static_cast<int>(ishape.size());
  const auto dst = contiguous_strides(dshape);
  std::vector<int64_t> c(r, 0);
  const int64_t n = shape_numel(ishape);
  for (int64_t i = 0; i < n; ++i) {
    int64_t off = 0;
    for (int k = 0; k < r; ++k) off += (k == axis ? idx[i] : c[k]) * dst[k];
    f(i, off);
    for (int k = r; k-- > 0;) {
      if (++c[k] < ishape[k]) break;
      c[k] = 0;
    }
  }
}

void check_element_shapes(const Tensor& x, const Tensor& ind, int axis, const char* what) {
  GR_CHECK(ind.rank() == x.rank(), what << ": indices " << shape_str(ind.shape()) << " and data "
                                        << shape_str(x.shape()) << " must have the same rank");
  for (int k = 0; k < x.rank(); ++k)
    GR_CHECK(k == axis || ind.shape()[k] <= x.shape()[k],
             what << ": indices " << shape_str(ind.shape()) << " exceed data " << shape_str(x.shape()) << " on axis " << k);
}

void gather_elements_kernel(KernelContext& ctx) {
  const Tensor &x = ctx.input(0), &ind = ctx.input(1);
  const int axis = norm_axis(ctx.node().attr_i("axis", 0), x.rank(), "GatherElements");
  check_element_shapes(x, ind, axis, "GatherElements");
  std::vector<int64_t> idx = read_indices(ind, x.shape()[axis], "GatherElements", x.shape(), axis);
  Tensor& y = ctx.output(0, ind.shape(), x.dtype());
  dispatch_bytes(x.dtype(), "GatherElements", [&](auto tag) {
    using E = decltype(tag);
    const E* px = ptr<E>(x);
    E* py = ptr<E>(y);
    for_each_element_index(ind.shape(), x.shape(), axis, idx, [&](int64_t i, int64_t off) { py[i] = px[off]; });
  });
}

void scatter_elements_kernel(KernelContext& ctx) {
  const Tensor &x = ctx.input(0), &ind = ctx.input(1), &upd = ctx.input(2);
  const int axis = norm_axis(ctx.node().attr_i("axis", 0), x.rank(), "ScatterElements");
  check_element_shapes(x, ind, axis, "ScatterElements");
  GR_CHECK(upd.shape() == ind.shape(), "ScatterElements: updates " << shape_str(upd.shape()) << " and indices "
                                                                   << shape_str(ind.shape()) << " differ in shape");
  GR_CHECK(upd.dtype() == x.dtype(), "ScatterElements: updates and data differ in element type");
  const std::string red = ctx.node().attr_s("reduction", "none");
  GR_CHECK(red == "none" || red == "add" || red == "mul",
           "ScatterElements: unknown reduction '" << red << "' (none, add, mul)");
  std::vector<int64_t> idx = read_indices(ind, x.shape()[axis], "ScatterElements", x.shape(), axis);
  Tensor& y = ctx.output(0, x.shape(), x.dtype());
  copy_all(x, y);
  dispatch_numeric_bool(x.dtype(), "ScatterElements", [&](auto tag) {
    using T = decltype(tag);
    const T* pu = ptr<T>(upd);
    T* py = ptr<T>(y);
    for_each_element_index(ind.shape(), x.shape(), axis, idx, [&](int64_t i, int64_t off) {
      if (red == "add") py[off] = static_cast<T>(py[off] + pu[i]);
      else if (red == "mul") py[off] = static_cast<T>(py[off] * pu[i]);
      else py[off] = pu[i];
    });
  });
}

// GatherElementsGrad(dY, indices, shape): zeros of `shape` with dY added at the gathered positions, for
// opsets before 16 (whose ScatterElements cannot add).
void gather_elements_grad_kernel(KernelContext& ctx) {
  const Tensor &dy = ctx.input(0), &ind = ctx.input(1);
  const std::vector<int64_t> sv = ctx.input(2).as_int64s();
  const Shape xs(sv.begin(), sv.end());
  GR_CHECK(dy.shape() == ind.shape(), "GatherElementsGrad: dY " << shape_str(dy.shape()) << " and indices "
                                                                << shape_str(ind.shape()) << " differ in shape");
  for (int64_t d : xs) GR_CHECK(d >= 0, "GatherElementsGrad: bad shape " << shape_str(xs));
  Tensor& dx = ctx.output(0, xs, dy.dtype());
  const int axis = norm_axis(ctx.node().attr_i("axis", 0), dx.rank(), "GatherElementsGrad");
  check_element_shapes(dx, ind, axis, "GatherElementsGrad");
  std::vector<int64_t> idx = read_indices(ind, xs[axis], "GatherElementsGrad", xs, axis);
  dispatch_float(dy.dtype(), "GatherElementsGrad", [&](auto tag) {
    using T = decltype(tag);
    const T* g = ptr<T>(dy);
    T* p = ptr<T>(dx);
    std::fill(p, p + dx.numel(), T(0));
    for_each_element_index(ind.shape(), xs, axis, idx, [&](int64_t i, int64_t off) { p[off] += g[i]; });
  });
}

void onehot_kernel(KernelContext& ctx) {
  const Tensor &ind = ctx.input(0), &depth_t = ctx.input(1), &vals = ctx.input(2);
  GR_CHECK(depth_t.numel() == 1, "OneHot: depth must be a scalar");
  GR_CHECK(vals.numel() == 2, "OneHot: values must hold [off_value, on_value]");
  const int64_t depth = static_cast<int64_t>(depth_t.as_doubles()[0]);
  GR_CHECK(depth > 0, "OneHot: depth must be positive, got " << depth);
  const int r = ind.rank() + 1;
  const int axis = norm_axis(ctx.node().attr_i("axis", -1), r, "OneHot");
  Shape out(ind.shape().begin(), ind.shape().begin() + axis);
  out.push_back(depth);
  out.insert(out.end(), ind.shape().begin() + axis, ind.shape().end());
  Tensor& y = ctx.output(0, out, vals.dtype());
  std::vector<double> iv = ind.as_doubles();
  const int64_t outer = prod(ind.shape(), 0, axis), inner = prod(ind.shape(), axis, ind.rank());
  dispatch_bytes(vals.dtype(), "OneHot", [&](auto tag) {
    using E = decltype(tag);
    const E off = ptr<E>(vals)[0], on = ptr<E>(vals)[1];
    E* py = ptr<E>(y);
    std::fill(py, py + y.numel(), off);
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        int64_t v = static_cast<int64_t>(iv[o * inner + i]);
        if (v < 0) v += depth;
        if (v >= 0 && v < depth) py[(o * depth + v) * inner + i] = on;
      }
  });
}

// GatherND / ScatterND: the data offsets that the last axis of `indices` (after batch_dims) selects,
// with the size of each selected slice.
struct NdIndex {
  std::vector<int64_t> offsets;  // element offset into data, per index tuple
  int64_t slice = 1;             // elements per selected slice
  Shape out;                     // GatherND's output shape
};

NdIndex nd_index(const Tensor& data, const Tensor& ind, int64_t batch_dims, const char* what) {
  GR_CHECK(ind.dtype() == DType::I64 || ind.dtype() == DType::I32, what << ": indices must be int64 or int32");
  const int r = data.rank(), q = ind.rank();
  GR_CHECK(q >= 1 && batch_dims >= 0 && batch_dims < std::min(r, q), what << ": batch_dims " << batch_dims
                                                                           << " is out of range for data "
                                                                           << shape_str(data.shape()) << " and indices "
                                                                           << shape_str(ind.shape()));
  const int64_t m = ind.shape()[q - 1];
  GR_CHECK(m >= 1 && batch_dims + m <= r, what << ": index tuples of length " << m << " do not fit data "
                                               << shape_str(data.shape()));
  for (int k = 0; k < batch_dims; ++k)
    GR_CHECK(ind.shape()[k] == data.shape()[k], what << ": batch dims of data " << shape_str(data.shape())
                                                     << " and indices " << shape_str(ind.shape()) << " differ");
  NdIndex nd;
  nd.out.assign(ind.shape().begin(), ind.shape().end() - 1);
  nd.out.insert(nd.out.end(), data.shape().begin() + batch_dims + m, data.shape().end());
  nd.slice = prod(data.shape(), batch_dims + m, r);
  const auto st = contiguous_strides(data.shape());
  const int64_t batch = prod(ind.shape(), 0, batch_dims), per_batch = prod(ind.shape(), batch_dims, q - 1);
  const int64_t batch_stride = batch_dims > 0 ? st[batch_dims - 1] : 0;
  std::vector<int64_t> iv = ind.as_int64s();
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 0; t < per_batch; ++t) {
      int64_t off = b * batch_stride;
      for (int64_t j = 0; j < m; ++j) {
        const int64_t dim = data.shape()[batch_dims + j];
        int64_t i = iv[(b * per_batch + t) * m + j];
        GR_CHECK(i >= -dim && i < dim, what << ": index " << i << " is out of range for axis " << batch_dims + j
                                            << " of size " << dim);
        if (i < 0) i += dim;
        off += i * st[batch_dims + j];
      }
      nd.offsets.push_back(off);
    }
  return nd;
}

void gather_nd_kernel(KernelContext& ctx) {
  const Tensor &x = ctx.input(0), &ind = ctx.input(1);
  NdIndex nd = nd_index(x, ind, ctx.node().attr_i("batch_dims", 0), "GatherND");
  Tensor& y = ctx.output(0, nd.out, x.dtype());
  const size_t bytes = nd.slice * dtype_size(x.dtype());
  const char* src = static_cast<const char*>(x.raw());
  char* dst = static_cast<char*>(y.raw());
  for (size_t t = 0; t < nd.offsets.size(); ++t)
    std::memcpy(dst + t * bytes, src + nd.offsets[t] * dtype_size(x.dtype()), bytes);
}

void scatter_nd_kernel(KernelContext& ctx) {
  const Tensor &x = ctx.input(0), &ind = ctx.input(1), &upd = ctx.input(2);
  NdIndex nd = nd_index(x, ind, 0, "ScatterND");
  GR_CHECK(upd.shape() == nd.out, "ScatterND: updates have shape " << shape_str(upd.shape()) << ", expected "
                                                                   << shape_str(nd.out));
  GR_CHECK(upd.dtype() == x.dtype(), "ScatterND: updates and data differ in element type");
  const std::string red = ctx.node().attr_s("reduction", "none");
  GR_CHECK(red == "none" || red == "add" || red == "mul", "ScatterND: unknown reduction '" << red << "'");
  Tensor& y = ctx.output(0, x.shape(), x.dtype());
  copy_all(x, y);
  dispatch_numeric_bool(x.dtype(), "ScatterND", [&](auto tag) {
    using T = decltype(tag);
    const T* pu = ptr<T>(upd);
    T* py = ptr<T>(y);
    for (size_t t = 0; t < nd.offsets.size(); ++t)
      for (int64_t i = 0; i < nd.slice; ++i) {
        T& d = py[nd.offsets[t] + i];
        const T u = pu[t * nd.slice + i];
        d = red == "add" ? static_cast<T>(d + u) : red == "mul" ? static_cast<T>(d * u) : u;
      }
  });
}

// GatherNDGrad(dY, indices, shape): zeros of `shape` with dY added at every gathered slice (duplicate
// tuples add up), for GatherND below opset 16 or with batch_dims, where ScatterND cannot add.
void gather_nd_grad_kernel(KernelContext& ctx) {
  const Tensor &dy = ctx.input(0), &ind = ctx.input(1);
  const std::vector<int64_t> sv = ctx.input(2).as_int64s();
  const Shape xs(sv.begin(), sv.end());
  for (int64_t d : xs) GR_CHECK(d >= 0, "GatherNDGrad: bad shape " << shape_str(xs));
  Tensor& dx = ctx.output(0, xs, dy.dtype());
  NdIndex nd = nd_index(dx, ind, ctx.node().attr_i("batch_dims", 0), "GatherNDGrad");
  GR_CHECK(dy.shape() == nd.out, "GatherNDGrad: dY has shape " << shape_str(dy.shape()) << ", expected "
                                                               << shape_str(nd.out));
  dispatch_float(dy.dtype(), "GatherNDGrad", [&](auto tag) {
    using T = decltype(tag);
    const T* g = ptr<T>(dy);
    T* p = ptr<T>(dx);
    std::fill(p, p + dx.numel(), T(0));
    for (size_t t = 0; t < nd.offsets.size(); ++t)
      for (int64_t i = 0; i < nd.slice; ++i) p[nd.offsets[t] + i] += g[t * nd.slice + i];
  });
}

// The schema the index-gradient ops share: (dY, indices, shape) -> dX of `shape`, one int attribute.
OpSchemaSpec index_grad_schema(const char* doc, const char* attr, const char* attr_doc,
                               std::vector<std::string> index_types) {
  return OpSchemaSpec(doc)
      .attr(attr, attr_doc, Attribute::Int(0))
      .input("dY", "gradient of the output", "T")
      .input("indices", "the forward's indices", "Tind")
      .input("shape", "the shape of data (i64 1-D)", "tensor(int64)")
      .output("dX", "gradient of data", "T")
      .type("T", float_tensor_types(), "float tensors")
      .type("Tind", std::move(index_types), "index tensors")
      .output_shape_from(0, 2);
}

// Trilu(x[, k]): keeps the upper (j - i >= k) or lower (j - i <= k) triangle of the last two axes.
void trilu_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  GR_CHECK(x.rank() >= 2, "Trilu: input must have rank >= 2, got " << shape_str(x.shape()));
  int64_t k = 0;
  if (ctx.has_input(1)) {
    GR_CHECK(ctx.input(1).numel() == 1, "Trilu: k must be a scalar");
    k = ctx.input(1).as_int64s()[0];
  }
  const bool upper = ctx.node().attr_i("upper", 1) != 0;
  Tensor& y = ctx.output(0, x.shape(), x.dtype());
  const int64_t rows = x.dim(-2), cols = x.dim(-1), mats = prod(x.shape(), 0, x.rank() - 2);
  const size_t esz = dtype_size(x.dtype());
  const char* src = static_cast<const char*>(x.raw());
  char* dst = static_cast<char*>(y.raw());
  for (int64_t b = 0; b < mats; ++b)
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) {
        const int64_t o = ((b * rows + i) * cols + j) * esz;
        const bool keep = upper ? j - i >= k : j - i <= k;
        if (keep) std::memcpy(dst + o, src + o, esz);
        else std::memset(dst + o, 0, esz);
      }
}

void eye_like_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  GR_CHECK(x.rank() == 2, "EyeLike: input must be 2-D, got " << shape_str(x.shape()));
  const DType dt = ctx.node().has_attr("dtype") ? static_cast<DType>(ctx.node().attr_i("dtype", 1)) : x.dtype();
  const int64_t k = ctx.node().attr_i("k", 0);
  Tensor& y = ctx.output(0, x.shape(), dt);
  dispatch_numeric_bool(dt, "EyeLike", [&](auto tag) {
    using T = decltype(tag);
    T* py = ptr<T>(y);
    for (int64_t i = 0; i < x.dim(0); ++i)
      for (int64_t j = 0; j < x.dim(1); ++j) py[i * x.dim(1) + j] = static_cast<T>(j - i == k ? 1 : 0);
  });
}

// DepthToSpace / SpaceToDepth: a reshape, a transpose and a reshape (runtime/kernels/depth_space.h).
void depth_space(KernelContext& ctx, bool to_space) {
  const Tensor& x = ctx.input(0);
  const DepthSpaceCopy c = depth_space_copy(ctx.node(), x.shape(), to_space);
  Tensor& y = ctx.output(0, c.out, x.dtype());
  dispatch_bytes(x.dtype(), to_space ? "DepthToSpace" : "SpaceToDepth", [&](auto tag) {
    using E = decltype(tag);
    strided_gather<E>(c.view, c.strides, 0, ptr<E>(x), ptr<E>(y));
  });
}
void depth_to_space_kernel(KernelContext& ctx) { depth_space(ctx, true); }
void space_to_depth_kernel(KernelContext& ctx) { depth_space(ctx, false); }

// Compress / NonZero have data-dependent output shapes: fine on the first run of a plan; a later run
// whose data changes the shape gets the executor's clear "data-dependent shapes" error.
void compress_kernel(KernelContext& ctx) {
  const Tensor &x = ctx.input(0), &cond = ctx.input(1);
  check_bool(cond, "Compress condition");
  GR_CHECK(cond.rank() == 1, "Compress: condition must be 1-D, got " << shape_str(cond.shape()));
  const bool has_axis = ctx.node().has_attr("axis");
  const Shape xs = has_axis ? x.shape() : Shape{x.numel()};
  const int axis = has_axis ? norm_axis(ctx.node().attr_i("axis", 0), x.rank(), "Compress") : 0;
  const int64_t dim = xs[axis];
  GR_CHECK(cond.numel() <= dim, "Compress: condition has " << cond.numel() << " entries for an axis of size " << dim);
  std::vector<int64_t> keep;
  for (int64_t i = 0; i < cond.numel(); ++i)
    if (ptr<bool>(cond)[i]) keep.push_back(i);
  Shape out = xs;
  out[axis] = static_cast<int64_t>(keep.size());
  Tensor& y = ctx.output(0, out, x.dtype());
  const size_t esz = dtype_size(x.dtype());
  const int64_t outer = prod(xs, 0, axis), inner = prod(xs, axis + 1, xs.size()) * esz;
  const char* src = static_cast<const char*>(x.raw());
  char* dst = static_cast<char*>(y.raw());
  for (int64_t o = 0; o < outer; ++o)
    for (size_t j = 0; j < keep.size(); ++j)
      std::memcpy(dst + (o * keep.size() + j) * inner, src + (o * dim + keep[j]) * inner, inner);
}

// NonZero: runtime/kernels/unique_plan.h's, shared with the CUDA kernel.
void nonzero_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  int64_t nnz = 0;
  const std::vector<int64_t> at = nonzero_indices(x, &nnz);
  Tensor& y = ctx.output(0, {x.rank(), nnz}, DType::I64);
  if (!at.empty()) std::memcpy(y.raw(), at.data(), at.size() * sizeof(int64_t));
}

// Unique: its plan (runtime/kernels/unique_plan.h) is shared with the CUDA kernel; the output shapes depend on
// the values, as NonZero's.
void unique_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const UniquePlan p = plan_unique(ctx.node(), x);
  gather_unique(p, x, ctx.output(0, p.y_shape, x.dtype()).raw());
  const std::vector<int64_t>* lists[] = {&p.first, &p.inverse, &p.counts};
  for (int i = 1; i <= 3; ++i)
    if (ctx.has_output(i)) {
      const std::vector<int64_t>& v = *lists[i - 1];
      Tensor& t = ctx.output(i, {static_cast<int64_t>(v.size())}, DType::I64);
      if (!v.empty()) std::memcpy(t.raw(), v.data(), v.size() * sizeof(int64_t));
    }
}

void reverse_sequence_kernel(KernelContext& ctx) {
  const Tensor &x = ctx.input(0), &lens_t = ctx.input(1);
  GR_CHECK(x.rank() >= 2, "ReverseSequence: input must have rank >= 2");
  const int batch_axis = norm_axis(ctx.node().attr_i("batch_axis", 1), x.rank(), "ReverseSequence");
  const int time_axis = norm_axis(ctx.node().attr_i("time_axis", 0), x.rank(), "ReverseSequence");
  GR_CHECK(batch_axis != time_axis && std::max(batch_axis, time_axis) <= 1,
           "ReverseSequence: batch_axis and time_axis must be 0 and 1 in some order");
  std::vector<int64_t> lens = int_list(lens_t, "ReverseSequence sequence_lens");
  const int64_t batch = x.shape()[batch_axis], time = x.shape()[time_axis];
  GR_CHECK(static_cast<int64_t>(lens.size()) == batch, "ReverseSequence: " << lens.size() << " lengths for batch "
                                                                           << batch);
  Tensor& y = ctx.output(0, x.shape(), x.dtype());
  const auto st = contiguous_strides(x.shape());
  const size_t esz = dtype_size(x.dtype());
  const int64_t inner = prod(x.shape(), 2, x.rank()) * esz;
  const char* src = static_cast<const char*>(x.raw());
  char* dst = static_cast<char*>(y.raw());
  for (int64_t b = 0; b < batch; ++b) {
    GR_CHECK(lens[b] >= 0 && lens[b] <= time, "ReverseSequence: length " << lens[b] << " exceeds " << time);
    for (int64_t t = 0; t < time; ++t) {
      const int64_t from = t < lens[b] ? lens[b] - 1 - t : t;
      const int64_t dst_off = (b * st[batch_axis] + t * st[time_axis]) * esz;
      const int64_t src_off = (b * st[batch_axis] + from * st[time_axis]) * esz;
      std::memcpy(dst + dst_off, src + src_off, inner);
    }
  }
}

// ---- broadcasting and its reverse ----

void expand_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  Shape target = int_list(ctx.input(1), "Expand shape");
  Shape out = broadcast_shapes({&x.shape(), &target}, "Expand");
  Tensor& y = ctx.output(0, out, x.dtype());
  if (y.numel() == 0) return;
  // Input strides aligned to the output, 0 on broadcast axes.
  const auto xs = contiguous_strides(x.shape());
  std::vector<int64_t> st(out.size(), 0);
  const size_t off = out.size() - x.shape().size();
  for (size_t k = off; k < out.size(); ++k) st[k] = x.shape()[k - off] == 1 ? 0 : xs[k - off];
  dispatch_bytes(x.dtype(), "Expand", [&](auto tag) {
    using E = decltype(tag);
    strided_gather<E>(out, st, 0, ptr<E>(x), ptr<E>(y));
  });
}

void tile_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  std::vector<int64_t> rep = int_list(ctx.input(1), "Tile repeats");
  GR_CHECK(static_cast<int>(rep.size()) == x.rank(), "Tile: " << rep.size() << " repeats for input shape "
                                                              << shape_str(x.shape()));
  const int r = x.rank();
  Shape out(r);
  for (int k = 0; k < r; ++k) {
    GR_CHECK(rep[k] >= 0, "Tile: negative repeat " << rep[k]);
    out[k] = x.shape()[k] * rep[k];
  }
  Tensor& y = ctx.output(0, out, x.dtype());
  if (y.numel() == 0) return;
  const auto xs = contiguous_strides(x.shape());
  dispatch_bytes(x.dtype(), "Tile", [&](auto tag) {
    using E = decltype(tag);
    const E* px = ptr<E>(x);
    E* py = ptr<E>(y);
    std::vector<int64_t> c(r, 0);
    for (int64_t i = 0; i < y.numel(); ++i) {
      int64_t off = 0;
      for (int k = 0; k < r; ++k) off += (c[k] % x.shape()[k]) * xs[k];
      py[i] = px[off];
      for (int k = r; k-- > 0;) {
        if (++c[k] < out[k]) break;
        c[k] = 0;
      }
    }
  });
}

// ai.graphrun SumToShape(X, shape): sums X over the axes that broadcasting from `shape` expanded.
void sum_to_shape_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  Shape target = int_list(ctx.input(1), "SumToShape shape");
  bool ok = target.size() <= x.shape().size();
  const size_t off = x.shape().size() - std::min(target.size(), x.shape().size());
  for (size_t k = 0; ok && k < target.size(); ++k) ok = target[k] == 1 || target[k] == x.shape()[off + k];
  GR_CHECK(ok, "SumToShape: shape " << shape_str(target) << " does not broadcast to the input shape "
                                    << shape_str(x.shape()));
  Tensor& y = ctx.output(0, target, x.dtype());
  dispatch_numeric(x.dtype(), "SumToShape", [&](auto tag) {
    using T = decltype(tag);
    T* py = ptr<T>(y);
    const T* px = ptr<T>(x);
    std::fill(py, py + y.numel(), T(0));
    if (x.numel() == 0) return;
    if (target == x.shape()) {
      std::memcpy(py, px, x.nbytes());
      return;
    }
    BroadcastPlan p = make_broadcast_plan({&x.shape(), &target}, x.shape());
    const int64_t inner = p.inner(), sy = p.strides[1].back();
    for_each_row(p, 1, [&](int64_t r, const int64_t* o) {
      const T* xr = px + r * inner;
      T* yr = py + o[1];
      if (sy) {
#pragma omp simd
        for (int64_t i = 0; i < inner; ++i) yr[i] += xr[i];
      } else {
        T acc = T(0);
#pragma omp simd reduction(+ : acc)
        for (int64_t i = 0; i < inner; ++i) acc += xr[i];
        yr[0] += acc;
      }
    });
  });
}

}  // namespace

GR_REGISTER_OPS(shape) {
  ops.op("Flatten").cpu(flatten_kernel);
  ops.op("Reshape").cpu(reshape_kernel).host_inputs({1}).host_shapes();
  ops.op("Squeeze").cpu(squeeze_kernel).host_inputs({1}).host_shapes();
  ops.op("Unsqueeze").cpu(unsqueeze_kernel).host_inputs({1}).host_shapes();
  ops.op("Transpose").cpu(transpose_kernel);
  ops.op("Concat").cpu(concat_kernel).host_shapes();
  ops.op("Split").cpu(split_kernel).host_inputs({1});
  ops.op("Slice").cpu(slice_kernel).host_inputs({1, 2, 3, 4}).host_shapes();
  ops.op(kGraphrunDomain, "SliceGrad")
      .cpu(slice_grad_kernel)
      .host_inputs({1, 2, 3, 4, 5})
      .schema(OpSchemaSpec("gradient of `Slice` w.r.t. its data where its starts, ends, axes or steps are computed at run "
                           "time (else Pad or a product with a 0/1 matrix): zeros of `shape` with dY written at the "
                           "elements the Slice took")
                  .input("dY", "gradient of the output", "T")
                  .input("shape", "the shape of data (i64 1-D)", "tensor(int64)")
                  .input("starts", "the Slice's starts", "Tind")
                  .input("ends", "the Slice's ends", "Tind")
                  .input("axes", "the Slice's axes (default 0, 1, ...)", "Tind", OpSchemaSpec::Arity::Optional)
                  .input("steps", "the Slice's steps (default 1)", "Tind", OpSchemaSpec::Arity::Optional)
                  .output("dX", "gradient of data", "T")
                  .type("T", float_tensor_types(), "float tensors")
                  .type("Tind", {"tensor(int32)", "tensor(int64)"}, "index tensors")
                  .output_shape_from(0, 1));
  ops.op("Pad").cpu(pad_kernel).host_inputs({1, 3});
  ops.op("Constant").cpu(constant_kernel).host_shapes();
  ops.op("Shape").cpu(shape_kernel).host_shapes(true);
  ops.op("Size").cpu(size_kernel).host_shapes(true);
  ops.op("ConstantOfShape").cpu(constant_of_shape_kernel).host_inputs({0}).host_shapes();
  ops.op("Range").cpu(range_kernel).host_inputs({0, 1, 2}).host_shapes();
  ops.op("Gather").cpu(gather_kernel).host_shapes();
  ops.op("GatherElements").cpu(gather_elements_kernel);
  ops.op(kGraphrunDomain, "GatherElementsGrad")
      .cpu(gather_elements_grad_kernel)
      .host_inputs({2})
      .schema(index_grad_schema("gradient of `GatherElements` w.r.t. its data before opset 16 (from 16 on, "
                                "ScatterElements with reduction add): zeros of `shape` with dY added at the gathered "
                                "positions",
                                "axis", "as GatherElements", {"tensor(int32)", "tensor(int64)"}));
  ops.op("ScatterElements").cpu(scatter_elements_kernel);
  ops.op("Scatter").cpu(scatter_elements_kernel);
  ops.op("OneHot").cpu(onehot_kernel).host_inputs({1});
  ops.op("Expand").cpu(expand_kernel).host_inputs({1}).host_shapes();
  ops.op("Tile").cpu(tile_kernel).host_inputs({1});
  ops.op("Compress").cpu(compress_kernel);
  ops.op("NonZero").cpu(nonzero_kernel);
  ops.op("Unique").cpu(unique_kernel);
  ops.op("ReverseSequence").cpu(reverse_sequence_kernel);
  ops.op("GatherND").cpu(gather_nd_kernel);
  ops.op("ScatterND").cpu(scatter_nd_kernel);
  ops.op(kGraphrunDomain, "GatherNDGrad")
      .cpu(gather_nd_grad_kernel)
      .host_inputs({2})
      .schema(index_grad_schema("gradient of `GatherND` w.r.t. its data below opset 16 or with batch_dims (else "
                                "ScatterND with reduction add): zeros of `shape` with dY added at every gathered slice",
                                "batch_dims", "as GatherND", {"tensor(int64)"}));
  ops.op("Trilu").cpu(trilu_kernel).host_inputs({1});
  ops.op("EyeLike").cpu(eye_like_kernel);
  ops.op("DepthToSpace").cpu(depth_to_space_kernel);
  ops.op("SpaceToDepth").cpu(space_to_depth_kernel);
  ops.op(kGraphrunDomain, "SumToShape")
      .cpu(sum_to_shape_kernel)
      .host_inputs({1})
      .schema(OpSchemaSpec("sums X over broadcast axes so that Y has `shape`: the reverse of broadcasting, for "
                           "gradients of broadcasting ops")
                  .input("X", "tensor to reduce", "T")
                  .input("shape", "target shape (i64 1-D)", "tensor(int64)")
                  .output("Y", "reduced tensor", "T")
                  .type("T", numeric_tensor_types(), "numeric tensors")
                  .output_shape_from(0, 1));
}

}  // namespace graphrun::runtime::cpu

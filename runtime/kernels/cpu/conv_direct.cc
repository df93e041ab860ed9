// Direct float convolution for one input channel per group and few taps (see conv_direct.h). Each
// input plane is first copied into a zero-padded plane whose rows are long enough for whole vector
// loads, so the inner loops have no bounds checks: the forward pass keeps up to four vectors of an
// output row of several channels in registers across all taps; the weight gradient keeps one
// accumulator per tap (up to ten taps per pass over dY), taking the passes over small tiles of images
// so that the dY rows they share come from L1.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // false positives inside _mm512_reduce_add_ps (GCC 12)
#include "runtime/kernels/cpu/conv_direct.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

namespace graphrun::runtime::cpu {

#if defined(__AVX512F__) || defined(__AVX2__)
namespace {

#ifdef __AVX512F__
struct Simd {
  using V = __m512;
  using Mask = __mmask16;
  static constexpr int kWidth = 16;
  static V set1(float x) { return _mm512_set1_ps(x); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static Mask first(int64_t n) { return static_cast<Mask>((1u << n) - 1); }  // 0 < n < 16
  static V load(const float* p, Mask m) { return _mm512_maskz_loadu_ps(m, p); }
  static void store(float* p, Mask m, V v) { _mm512_mask_storeu_ps(p, m, v); }
  static float sum(V v) { return _mm512_reduce_add_ps(v); }
  // max(0, v) returns v where v is NaN or a zero of either sign: the Relu kernel's v < 0 ? 0 : v.
  static V relu(V v) { return _mm512_max_ps(_mm512_setzero_ps(), v); }
};
#else
struct Simd {
  using V = __m256;
  using Mask = __m256i;
  static constexpr int kWidth = 8;
  static V set1(float x) { return _mm256_set1_ps(x); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static Mask first(int64_t n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static V load(const float* p, Mask m) { return _mm256_maskload_ps(p, m); }
  static void store(float* p, Mask m, V v) { _mm256_maskstore_ps(p, m, v); }
  static V relu(V v) { return _mm256_max_ps(_mm256_setzero_ps(), v); }  // as AVX-512's
  static float sum(V v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
};
#endif
using V = Simd::V;
constexpr int kW = Simd::kWidth;
#ifdef __AVX512F__
constexpr int kVectorRegisters = 32;
#else
constexpr int kVectorRegisters = 16;
#endif

constexpr int kRowVectors = 4;  // output vectors of one row kept in registers by the forward pass

// The 2-D view of the window (axis 0 of Window is the unused depth) and the padded plane's size.
struct Geometry {
  int64_t IH, IW, OH, OW, KH, KW, sh, dh, dw, ph, pw;
  int64_t Hp, Wr;  // padded plane: rows read by the kernels, and a row length covering whole vectors
  explicit Geometry(const Window& w)
      : IH(w.in[1]), IW(w.in[2]), OH(w.out[1]), OW(w.out[2]), KH(w.k[1]), KW(w.k[2]), sh(w.s[1]), dh(w.d[1]),
        dw(w.d[2]), ph(w.pb[1]), pw(w.pb[2]) {
    Hp = (OH - 1) * sh + (KH - 1) * dh + 1;
    Wr = (OW + kW - 1) / kW * kW + (KW - 1) * dw;
  }
  int64_t plane() const { return Hp * Wr; }
};

// dst (Hp x Wr) = the input plane src (IH x IW) shifted by the leading pads, zero elsewhere.
void pad_plane(const Geometry& g, const float* src, float* dst) {
  for (int64_t r = 0; r < g.Hp; ++r) {
    float* row = dst + r * g.Wr;
    const int64_t ir = r - g.ph;
    if (ir < 0 || ir >= g.IH) {
      std::fill(row, row + g.Wr, 0.f);
      continue;
    }
    const int64_t c1 = std::min(g.Wr, g.pw + g.IW);
    std::fill(row, row + std::min(g.pw, g.Wr), 0.f);
    if (c1 > g.pw) std::memcpy(row + g.pw, src + ir * g.IW, sizeof(float) * (c1 - g.pw));
    std::fill(row + std::max(c1, g.pw), row + g.Wr, 0.f);
  }
}

// NV vectors of one output row from ow0 on, for MB output channels at once (they share the input
// loads; MB * NV independent accumulators cover the FMA latency): bias plus every tap, then stored
// (the last vector may run past the row's end into the plane's next rows, written after this one,
// when the plane has `room` floats from the row's start; else it is masked: AVX2's masked stores
// are slow on some cores, AMD's among them). wk: the MB channels' weights, `taps` apart; out: the
// first channel's row, the others P apart.
template <int NV, int MB, int KWc>
__attribute__((always_inline)) inline void forward_block(const Geometry& g, const float* rows, const float* wk, const float* bias, float* out, int64_t P,
                   int64_t ow0, int64_t room, bool relu) {
  const int64_t KW = KWc ? KWc : g.KW, taps = g.KH * KW;
  V acc[MB][NV];
#pragma GCC unroll 16
  for (int i = 0; i < MB; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) acc[i][j] = Simd::set1(bias ? bias[i] : 0.f);
  for (int64_t kh = 0; kh < g.KH; ++kh) {
    const float* r = rows + kh * g.dh * g.Wr + ow0;
#pragma GCC unroll 5
    for (int64_t kw = 0; kw < KW; ++kw) {
      const float* p = r + kw * g.dw;
      V xv[NV];
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j) xv[j] = Simd::load(p + j * kW);
#pragma GCC unroll 16
      for (int i = 0; i < MB; ++i) {
        const V wv = Simd::set1(wk[i * taps + kh * KW + kw]);
#pragma GCC unroll 4
        for (int j = 0; j < NV; ++j) acc[i][j] = Simd::fma(wv, xv[j], acc[i][j]);
      }
    }
  }
  if (relu) {
#pragma GCC unroll 16
    for (int i = 0; i < MB; ++i)
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j) acc[i][j] = Simd::relu(acc[i][j]);
  }
  const int64_t last = ow0 + (NV - 1) * kW, rest = g.OW - last;
#pragma GCC unroll 16
  for (int i = 0; i < MB; ++i) {
    float* o = out + i * P;
#pragma GCC unroll 4
    for (int j = 0; j + 1 < NV; ++j) Simd::store(o + ow0 + j * kW, acc[i][j]);
    if (rest >= kW || last + kW <= room) Simd::store(o + last, acc[i][NV - 1]);
    else Simd::store(o + last, Simd::first(rest), acc[i][NV - 1]);
  }
}

// One output row (oh) of the Mg channels reading one plane, from ow0 on: NV vectors of it. The channels
// go in equal blocks of up to kMB (MB * NV accumulators + NV inputs + a weight fit the registers, 16 on
// AVX2 and 32 on AVX-512, with one to spare; at most 12): fewer blocks read the input rows fewer times,
// and equal ones leave no small block whose few FMAs per load run at a fraction of the rate (LeNet's 20
// channels: 10 + 10, not 8 + 8 + 4). Each output adds its taps in the same order whatever its block.
template <int NV, int KWc>
void forward_channels(const Geometry& g, const float* rows, const float* wk, const float* bias, float* out, int64_t P,
                      int64_t Mg, int64_t ow0, int64_t room, bool relu) {
  constexpr int kMB = std::min(12, (kVectorRegisters - 2 - NV) / NV);
  const int64_t taps = g.KH * g.KW;
  const int64_t per = (Mg + (Mg + kMB - 1) / kMB - 1) / ((Mg + kMB - 1) / kMB);  // equal blocks, at most kMB
  int64_t m = 0;
  auto block = [&](auto mb) {
    constexpr int MB = decltype(mb)::value;
    if constexpr (MB <= kMB) {
      forward_block<NV, MB, KWc>(g, rows, wk + m * taps, bias ? bias + m : nullptr, out + m * P, P, ow0, room, relu);
      m += MB;
    }
  };
  auto blocks_of = [&](auto mb) {
    while (m + decltype(mb)::value <= Mg) block(mb);
  };
  switch (per) {
    case 12: blocks_of(std::integral_constant<int, 12>{}); break;
    case 11: blocks_of(std::integral_constant<int, 11>{}); break;
    case 10: blocks_of(std::integral_constant<int, 10>{}); break;
    case 9: blocks_of(std::integral_constant<int, 9>{}); break;
    case 8: blocks_of(std::integral_constant<int, 8>{}); break;
    case 7: blocks_of(std::integral_constant<int, 7>{}); break;
    case 6: blocks_of(std::integral_constant<int, 6>{}); break;
    case 5: blocks_of(std::integral_constant<int, 5>{}); break;
    case 4: blocks_of(std::integral_constant<int, 4>{}); break;
    case 3: blocks_of(std::integral_constant<int, 3>{}); break;
    default: blocks_of(std::integral_constant<int, 2>{}); break;
  }
  // What equal blocks leave: fewer than `per` channels.
  if (m + 4 <= Mg) block(std::integral_constant<int, 4>{});
  if (m + 2 <= Mg) block(std::integral_constant<int, 2>{});
  while (m < Mg) block(std::integral_constant<int, 1>{});
}

// The kernel width as a constant where it is one of the common ones (KWc = 0: any width).
template <int KWc>
void forward_row_part(int64_t nv, const Geometry& g, const float* rows, const float* wk, const float* bias, float* out,
                      int64_t P, int64_t Mg, int64_t ow0, int64_t room, bool relu) {
  switch (nv) {
    case 1: forward_channels<1, KWc>(g, rows, wk, bias, out, P, Mg, ow0, room, relu); break;
    case 2: forward_channels<2, KWc>(g, rows, wk, bias, out, P, Mg, ow0, room, relu); break;
    case 3: forward_channels<3, KWc>(g, rows, wk, bias, out, P, Mg, ow0, room, relu); break;
    default: forward_channels<4, KWc>(g, rows, wk, bias, out, P, Mg, ow0, room, relu); break;
  }
}

// Adds to the partial sums `part` (MB x NA vectors, lane by lane) the products of dY rows x padded input
// rows of images n0 .. n1 - 1 and every output row (in that order) at NA taps, whose offsets into the
// plane are off[0..NA), for MB output channels m .. m + MB - 1 of one group at once (they share the input
// loads, and each dY load serves NA taps: MB + NA loads for MB * NA FMAs); lanes past the row's end are
// masked off on both sides, so padding never meets a NaN. Each lane adds the same products in the same
// order whatever MB, NA and the image tiles are, so the blocking does not change a bit.
template <int MB, int NA>
void grad_taps(const Geometry& g, const DirectConv& dc, const float* planes, const float* dy, int64_t m,
               const int64_t* off, int64_t n0, int64_t n1, V* part) {
  static_assert(MB * NA + MB + 1 <= kVectorRegisters, "accumulators, dY and one input fit the registers");
  V acc[MB][NA];
#pragma GCC unroll 4
  for (int i = 0; i < MB; ++i)
#pragma GCC unroll 16
    for (int a = 0; a < NA; ++a) acc[i][a] = part[i * NA + a];
  const int64_t grp = m / (dc.M / dc.group), P = g.OH * g.OW, full = g.OW / kW * kW;
  const Simd::Mask tail = Simd::first(g.OW - full > 0 ? g.OW - full : 1);
  auto step = [&](const float* x, const float* d, int64_t ow0, auto load) {
    V dv[MB];
#pragma GCC unroll 4
    for (int i = 0; i < MB; ++i) dv[i] = load(d + i * P + ow0);
#pragma GCC unroll 16
    for (int a = 0; a < NA; ++a) {
      const V xv = load(x + off[a] + ow0);
#pragma GCC unroll 4
      for (int i = 0; i < MB; ++i) acc[i][a] = Simd::fma(dv[i], xv, acc[i][a]);
    }
  };
  for (int64_t n = n0; n < n1; ++n) {
    const float* plane = planes + (n * dc.group + grp) * g.plane();
    const float* dyp = dy + (n * dc.M + m) * P;
    for (int64_t oh = 0; oh < g.OH; ++oh) {
      const float* x = plane + oh * g.sh * g.Wr;
      const float* d = dyp + oh * g.OW;
      for (int64_t ow0 = 0; ow0 < full; ow0 += kW)
        step(x, d, ow0, [](const float* q) { return Simd::load(q); });
      if (full < g.OW) step(x, d, full, [tail](const float* q) { return Simd::load(q, tail); });
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < MB; ++i)
#pragma GCC unroll 16
    for (int a = 0; a < NA; ++a) part[i * NA + a] = acc[i][a];
}

// The most taps one pass of MB channels can hold (at most 10: the old one-channel kernel's).
template <int MB>
constexpr int kMaxGradTaps = std::min(10, (kVectorRegisters - 1 - MB) / MB);

template <int MB, int NA = kMaxGradTaps<MB>>
void grad_taps_n(int na, const Geometry& g, const DirectConv& dc, const float* planes, const float* dy, int64_t m,
                 const int64_t* off, int64_t n0, int64_t n1, V* part) {
  if constexpr (NA >= 1) {
    if (na == NA) return grad_taps<MB, NA>(g, dc, planes, dy, m, off, n0, n1, part);
    grad_taps_n<MB, NA - 1>(na, g, dc, planes, dy, m, off, n0, n1, part);
  }
}

// Bytes of dY rows and input planes one image tile of a weight-gradient pass reads: the passes over the
// taps of a tile then find them in L1 instead of streaming the whole dY from memory once per pass.
constexpr int64_t kGradTileBytes = 24 << 10;

// The weight gradient of channels m .. m + MB - 1: the taps in passes of nearly equal size, over tiles of
// images (every pass of a tile before the next tile), the partial sums kept per lane in `part` between
// tiles (MB x taps vectors), then summed across lanes.
template <int MB>
void grad_channels(const Geometry& g, const DirectConv& dc, const float* planes, const float* dy, int64_t m,
                   const int64_t* off, float* dw, int64_t taps, V* part) {
  const int64_t passes = (taps + kMaxGradTaps<MB> - 1) / kMaxGradTaps<MB>;
  const int64_t per_image = static_cast<int64_t>(sizeof(float)) * (MB * g.OH * g.OW + g.plane());
  const int64_t tile = std::max<int64_t>(1, kGradTileBytes / per_image);
  std::fill(part, part + MB * taps, Simd::set1(0.f));
  for (int64_t n0 = 0; n0 < dc.N; n0 += tile) {
    const int64_t n1 = std::min(dc.N, n0 + tile);
    for (int64_t p = 0, t0 = 0; p < passes; ++p) {
      const int64_t na = (taps - t0) / (passes - p);
      grad_taps_n<MB>(static_cast<int>(na), g, dc, planes, dy, m, off + t0, n0, n1, part + MB * t0);
      t0 += na;
    }
  }
  for (int64_t p = 0, t0 = 0; p < passes; ++p) {
    const int64_t na = (taps - t0) / (passes - p);
    for (int64_t i = 0; i < MB; ++i)
      for (int64_t a = 0; a < na; ++a) dw[(m + i) * taps + t0 + a] = Simd::sum(part[MB * t0 + i * na + a]);
    t0 += na;
  }
}

constexpr int kGradChannels = kVectorRegisters == 32 ? 4 : 2;  // channels of one weight-gradient pass, at most

}  // namespace

bool direct_conv_applies(const Window& w, int64_t channels_per_group) {
  return channels_per_group == 1 && w.nd <= 2 && w.k[0] == 1 && w.in[0] == 1 && w.out[0] == 1 && w.s[2] == 1 &&
         w.k_size() <= kDirectMaxTaps && w.out_size() > 0;
}

int64_t direct_conv_scratch(const DirectConv& dc, int threads) {
  const Geometry g(dc.w);
  return std::max<int64_t>(threads, dc.N * dc.group) * g.plane();
}

void direct_conv_forward(const DirectConv& dc, const float* x, const float* wt, const float* bias, float* y,
                         float* scratch, int threads, bool relu) {
  const Geometry g(dc.w);
  const int64_t Mg = dc.M / dc.group, I = g.IH * g.IW, P = g.OH * g.OW, items = dc.N * dc.group;
  const int nt = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, items)));
  // One item is one input plane (image n, group grp) and the Mg output channels that read it.
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
  for (int64_t item = 0; item < items; ++item) {
    const int64_t n = item / dc.group, grp = item % dc.group;
    float* plane = scratch + omp_get_thread_num() * g.plane();
    pad_plane(g, x + item * I, plane);
    const int64_t m0 = grp * Mg;
    const float* wk = wt + m0 * g.KH * g.KW;
    const float* b = bias ? bias + m0 : nullptr;
    for (int64_t oh = 0; oh < g.OH; ++oh) {
      const float* rows = plane + oh * g.sh * g.Wr;
      float* out = y + (n * dc.M + m0) * P + oh * g.OW;
      for (int64_t ow0 = 0; ow0 < g.OW; ow0 += kRowVectors * kW) {
        const int64_t nv = std::min<int64_t>(kRowVectors, (g.OW - ow0 + kW - 1) / kW);
        if (g.KW == 3) forward_row_part<3>(nv, g, rows, wk, b, out, P, Mg, ow0, P - oh * g.OW, relu);
        else if (g.KW == 5) forward_row_part<5>(nv, g, rows, wk, b, out, P, Mg, ow0, P - oh * g.OW, relu);
        else forward_row_part<0>(nv, g, rows, wk, b, out, P, Mg, ow0, P - oh * g.OW, relu);
      }
    }
  }
}

void direct_conv_weight_grad(const DirectConv& dc, const float* x, const float* dy, float* dw, float* scratch,
                             int threads) {
  const Geometry g(dc.w);
  const int64_t I = g.IH * g.IW, planes = dc.N * dc.group, taps = g.KH * g.KW;
  const int nt = static_cast<int>(std::max<int64_t>(1, threads));
#pragma omp parallel num_threads(nt) if (nt > 1)
  {
#pragma omp for schedule(static)
    for (int64_t p = 0; p < planes; ++p) pad_plane(g, x + p * I, scratch + p * g.plane());
    // Whole output channels per thread: each weight's sum runs on one thread in a fixed order. Blocks of
    // up to kGradChannels channels of one group, smaller when that would leave a thread without work.
    int64_t off[kDirectMaxTaps];
    alignas(64) V part[kGradChannels * kDirectMaxTaps];  // one block's partial sums, per lane
    for (int64_t t = 0; t < taps; ++t) off[t] = t / g.KW * g.dh * g.Wr + t % g.KW * g.dw;
    const int64_t Mg = dc.M / dc.group;
    int64_t mb = kGradChannels;
    while (mb > 1 && dc.group * ((Mg + mb - 1) / mb) < 2 * nt && nt > 1) mb /= 2;
    const int64_t blocks = (Mg + mb - 1) / mb;
#pragma omp for schedule(dynamic, 1)
    for (int64_t b = 0; b < dc.group * blocks; ++b) {
      const int64_t m = b / blocks * Mg + b % blocks * mb, n = std::min(mb, (b / blocks + 1) * Mg - m);
      if (n >= 4 && kGradChannels >= 4) grad_channels<kGradChannels>(g, dc, scratch, dy, m, off, dw, taps, part);
      else if (n >= 2) {
        for (int64_t i = 0; i + 2 <= n; i += 2) grad_channels<2>(g, dc, scratch, dy, m + i, off, dw, taps, part);
        if (n % 2) grad_channels<1>(g, dc, scratch, dy, m + n - 1, off, dw, taps, part);
      } else grad_channels<1>(g, dc, scratch, dy, m, off, dw, taps, part);
    }
  }
}

#else  // neither AVX2 nor AVX-512: the GEMM path serves every convolution

bool direct_conv_applies(const Window&, int64_t) { return false; }
int64_t direct_conv_scratch(const DirectConv&, int) { return 0; }
void direct_conv_forward(const DirectConv&, const float*, const float*, const float*, float*, float*, int, bool) {}
void direct_conv_weight_grad(const DirectConv&, const float*, const float*, float*, float*, int) {}

#endif

}  // namespace graphrun::runtime::cpu

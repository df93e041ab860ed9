// CPU kernels of the conv family: Conv, ConvTranspose and graphrun's ConvGrad / ConvTransposeGrad.
// One engine serves all four: im2col of a chunk of images into a pixel-major matrix (pixels are the
// rows of a column-major matrix) and one GEMM per chunk (gemm.h); float convolutions with one input
// channel per group and few taps run the direct kernels of conv_direct.h instead.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // false positives inside Eigen's AVX-512 code
#include <immintrin.h>
#include <omp.h>

#include <Eigen/Core>
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "runtime/kernel.h"
#include "runtime/kernels/cpu/conv_direct.h"
#include "runtime/kernels/cpu/half_compute.h"
#include "runtime/kernels/cpu/gemm.h"
#include "runtime/kernels/cpu/window.h"
#include "runtime/kernels/quantize_math.h"

namespace graphrun::runtime::cpu {
namespace {

// A convolution in forward terms: input [N, C, w.in], weight [M, C/group, w.k], output [N, M, w.out].
// ConvTranspose is the data gradient of the convolution whose output is its input.
struct ConvShape {
  int64_t N = 0, C = 0, M = 0, group = 1;
  Window w;
  int64_t Cg() const { return C / group; }
  int64_t Mg() const { return M / group; }
  int64_t K() const { return Cg() * w.k_size(); }  // length of one im2col row of weights
  int64_t P() const { return w.out_size(); }        // output pixels per image
  int64_t I() const { return w.in_size(); }         // input pixels per image
};

// Copies / accumulates a short run of n values (an image row of 5 to 30 pixels, typically): with
// AVX-512, 16 floats or 8 doubles per masked load/store (AVX2: 8 or 4), which beats both scalar
// loops (what the compiler emits for such short, unknown trip counts) and memcpy calls.
template <class T>
inline void copy_short(T* __restrict dst, const T* __restrict src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = src[i];
}
template <class T>
inline void add_short(T* __restrict dst, const T* __restrict src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
}
#ifdef __AVX512F__
// Every step is a masked copy: GCC turns a loop of plain vector copies into a memmove call.
template <>
inline void copy_short<float>(float* __restrict dst, const float* __restrict src, int64_t n) {
  for (; n > 0; n -= 16, dst += 16, src += 16) {
    const __mmask16 m = n >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << n) - 1);
    _mm512_mask_storeu_ps(dst, m, _mm512_maskz_loadu_ps(m, src));
  }
}
template <>
inline void add_short<float>(float* __restrict dst, const float* __restrict src, int64_t n) {
  for (; n >= 16; n -= 16, dst += 16, src += 16)
    _mm512_storeu_ps(dst, _mm512_add_ps(_mm512_loadu_ps(dst), _mm512_loadu_ps(src)));
  if (n > 0) {
    const __mmask16 m = static_cast<__mmask16>((1u << n) - 1);
    _mm512_mask_storeu_ps(dst, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, dst), _mm512_maskz_loadu_ps(m, src)));
  }
}
template <>
inline void copy_short<double>(double* __restrict dst, const double* __restrict src, int64_t n) {
  for (; n > 0; n -= 8, dst += 8, src += 8) {
    const __mmask8 m = n >= 8 ? static_cast<__mmask8>(0xFF) : static_cast<__mmask8>((1u << n) - 1);
    _mm512_mask_storeu_pd(dst, m, _mm512_maskz_loadu_pd(m, src));
  }
}
template <>
inline void add_short<double>(double* __restrict dst, const double* __restrict src, int64_t n) {
  for (; n >= 8; n -= 8, dst += 8, src += 8)
    _mm512_storeu_pd(dst, _mm512_add_pd(_mm512_loadu_pd(dst), _mm512_loadu_pd(src)));
  if (n > 0) {
    const __mmask8 m = static_cast<__mmask8>((1u << n) - 1);
    _mm512_mask_storeu_pd(dst, m, _mm512_add_pd(_mm512_maskz_loadu_pd(m, dst), _mm512_maskz_loadu_pd(m, src)));
  }
}
#elif defined(__AVX2__)
// AVX2: 8 floats / 4 doubles per maskload/maskstore (GCC would otherwise turn the generic copy loop,
// and a loop of plain vector copies, into a memmove call, slow for rows this short).
inline __m256i first_lanes32(int64_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
inline __m256i first_lanes64(int64_t n) { return _mm256_cmpgt_epi64(_mm256_set1_epi64x(n), _mm256_setr_epi64x(0, 1, 2, 3)); }
template <>
inline void copy_short<float>(float* __restrict dst, const float* __restrict src, int64_t n) {
  for (; n > 0; n -= 8, dst += 8, src += 8) {
    const __m256i m = first_lanes32(n);
    _mm256_maskstore_ps(dst, m, _mm256_maskload_ps(src, m));
  }
}
template <>
inline void add_short<float>(float* __restrict dst, const float* __restrict src, int64_t n) {
  for (; n >= 8; n -= 8, dst += 8, src += 8)
    _mm256_storeu_ps(dst, _mm256_add_ps(_mm256_loadu_ps(dst), _mm256_loadu_ps(src)));
  if (n > 0) {
    const __m256i m = first_lanes32(n);
    _mm256_maskstore_ps(dst, m, _mm256_add_ps(_mm256_maskload_ps(dst, m), _mm256_maskload_ps(src, m)));
  }
}
template <>
inline void copy_short<double>(double* __restrict dst, const double* __restrict src, int64_t n) {
  for (; n > 0; n -= 4, dst += 4, src += 4) {
    const __m256i m = first_lanes64(n);
    _mm256_maskstore_pd(dst, m, _mm256_maskload_pd(src, m));
  }
}
template <>
inline void add_short<double>(double* __restrict dst, const double* __restrict src, int64_t n) {
  for (; n >= 4; n -= 4, dst += 4, src += 4)
    _mm256_storeu_pd(dst, _mm256_add_pd(_mm256_loadu_pd(dst), _mm256_loadu_pd(src)));
  if (n > 0) {
    const __m256i m = first_lanes64(n);
    _mm256_maskstore_pd(dst, m, _mm256_add_pd(_mm256_maskload_pd(dst, m), _mm256_maskload_pd(src, m)));
  }
}
#endif

// Row copies for im2col / col2im that may touch up to kRowSlack elements past the row's end:
// AVX2's masked stores are slow on some cores (AMD microcodes them), so with AVX2 alone a row is
// moved in whole vectors. im2col's stores may run past the row into what it writes next (or the
// slack after the matrix); loads never pass `src_end`, the end of the plane being read (masked
// there). col2im's read-modify-write adds zeros past the row, up to `dst_end` (masked beyond).
constexpr int64_t kRowSlack = 16;
template <class T>
inline void copy_row_over(T* __restrict dst, const T* __restrict src, int64_t n, const T* src_end) {
  copy_short(dst, src, n);
}
template <class T>
inline void add_row_over(T* __restrict dst, const T* __restrict src, int64_t n, const T* dst_end) {
  add_short(dst, src, n);
}
#if defined(__AVX2__) && !defined(__AVX512F__)
template <>
inline void copy_row_over<float>(float* __restrict dst, const float* __restrict src, int64_t n, const float* src_end) {
  for (int64_t i = 0; i < n; i += 8) {
    const __m256 v = src + i + 8 <= src_end ? _mm256_loadu_ps(src + i) : _mm256_maskload_ps(src + i, first_lanes32(n - i));
    _mm256_storeu_ps(dst + i, v);
  }
}
template <>
inline void add_row_over<float>(float* __restrict dst, const float* __restrict src, int64_t n, const float* dst_end) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, _mm256_add_ps(_mm256_loadu_ps(dst + i), _mm256_loadu_ps(src + i)));
  if (i == n) return;
  const __m256i m = first_lanes32(n - i);
  if (dst + i + 8 <= dst_end)
    _mm256_storeu_ps(dst + i, _mm256_add_ps(_mm256_loadu_ps(dst + i), _mm256_maskload_ps(src + i, m)));
  else
    _mm256_maskstore_ps(dst + i, m, _mm256_add_ps(_mm256_maskload_ps(dst + i, m), _mm256_maskload_ps(src + i, m)));
}
#endif

#ifdef __AVX512F__
// im2col for float rows whose input span fits one register ((out - 1) * s + (k - 1) * d < 16; LeNet's
// conv2: 8 + 4): each input row is loaded once (padding lanes load as zeros) and every kernel
// column's pixels are permuted out of it, so the generic path's per-column range arithmetic and
// zero fills go away. Lane j of the register is input pixel j - pad; masked-off lanes may address
// memory outside the buffer: AVX-512 suppresses their faults.
bool im2col_rows(const float* x, int64_t image_stride, int64_t nb, const ConvShape& cs, float* col, int64_t ld) {
  const Window& w = cs.w;
  const int64_t OW = w.out[2], KW = w.k[2], d = w.d[2], s = w.s[2], pb = w.pb[2], IW = w.in[2];
  if ((OW - 1) * s + (KW - 1) * d >= 16) return false;
  const int64_t P = cs.P();
  uint32_t span = 0;  // lanes that are real input pixels
  for (int64_t j = 0; j < 16; ++j)
    if (j - pb >= 0 && j - pb < IW) span |= 1u << j;
  const __mmask16 xmask = static_cast<__mmask16>(span), first = static_cast<__mmask16>((1u << OW) - 1);
  __m512i pick[16];  // pick[kw]: lane ow takes lane ow * s + kw * d
  for (int64_t kw = 0; kw < KW; ++kw) {
    alignas(64) int32_t lanes[16];
    for (int64_t i = 0; i < 16; ++i) lanes[i] = static_cast<int32_t>(std::min<int64_t>(i * s + kw * d, 15));
    pick[kw] = _mm512_load_si512(lanes);
  }
  const __m512 zero = _mm512_setzero_ps();
  for (int64_t c = 0; c < cs.Cg(); ++c)
    for (int64_t kd = 0; kd < w.k[0]; ++kd)
      for (int64_t kh = 0; kh < w.k[1]; ++kh) {
        const int64_t k0 = ((c * w.k[0] + kd) * w.k[1] + kh) * KW;
        for (int64_t b = 0; b < nb; ++b) {
          const float* xc = x + b * image_stride + c * cs.I();
          float* dst = col + k0 * ld + b * P;
          for (int64_t od = 0; od < w.out[0]; ++od) {
            const int64_t id = od * w.s[0] - w.pb[0] + kd * w.d[0];
            for (int64_t oh = 0; oh < w.out[1]; ++oh, dst += OW) {
              const int64_t ih = oh * w.s[1] - w.pb[1] + kh * w.d[1];
              if (id < 0 || id >= w.in[0] || ih < 0 || ih >= w.in[1]) {
                for (int64_t kw = 0; kw < KW; ++kw) _mm512_mask_storeu_ps(dst + kw * ld, first, zero);
                continue;
              }
              const __m512 v = _mm512_maskz_loadu_ps(xmask, xc + (id * w.in[1] + ih) * IW - pb);
              for (int64_t kw = 0; kw < KW; ++kw)
                _mm512_mask_storeu_ps(dst + kw * ld, first, _mm512_permutexvar_ps(pick[kw], v));
            }
          }
        }
      }
  return true;
}
#endif

#ifdef __AVX512F__
// im2col for 2-D windows of stride 1 and dilation 1, writing each tap's row of an image as one flat
// run of whole vectors. Output pixel j = oh * OW + ow of tap (kh, kw) reads input pixel
// (oh + kh) * IW + ow + kw = j + (IW - OW) * (j / OW) + kh * IW + kw: the pixels of vector t
// (j = 16t .. 16t + 15) come from one window of the plane that starts at start[t] + kh * IW + kw and
// spans at most 32 pixels, in a lane pattern that is the same for every tap, channel and image. So a
// vector is two masked loads, one two-source permute and one full store. im2col_rows stores each
// output row of OW pixels on its own, masked; LeNet's conv2 (rows of 9 pixels, 36 bytes) spent most of
// its im2col time waiting on those stores, half of which straddle a cache line (1.25 -> 0.81 ms for
// 128 images, the matrix being 20.7 MB). Windows with pads first copy the chunk's images into
// zero-bordered planes (one copy of the input, against K copies in the matrix), then read those.
// Each image's last vector may store up to 15 elements past its row: into what the loops write next
// (the next image or the next tap's row) or the kRowSlack after the matrix.
struct FlatIm2col {
  static constexpr int kMaxVectors = 64;  // rows of up to 1024 pixels
  int64_t IHp = 0, IWp = 0, plane = 0;   // the input plane, with its pads
  bool padded = false;
  int vectors = 0;
  int32_t start[kMaxVectors];
  __mmask16 lo[kMaxVectors], hi[kMaxVectors];
  __m512i idx[kMaxVectors];
};

bool plan_flat_im2col(const ConvShape& cs, FlatIm2col* f) {
  const Window& w = cs.w;
  if (w.in[0] != 1 || w.k[0] != 1 || w.out[0] != 1 || w.pb[0] != 0 || w.pe[0] != 0) return false;
  if (w.s[1] != 1 || w.s[2] != 1 || w.d[1] != 1 || w.d[2] != 1) return false;
  const int64_t P = cs.P(), OW = w.out[2];
  if (P <= 0 || P > 16 * FlatIm2col::kMaxVectors) return false;
  f->IHp = w.in[1] + w.pb[1] + w.pe[1];
  f->IWp = w.in[2] + w.pb[2] + w.pe[2];
  f->plane = f->IHp * f->IWp;
  f->padded = f->plane != w.in[1] * w.in[2];
  f->vectors = static_cast<int>(div_ceil(P, 16));
  const int64_t skip = f->IWp - OW;  // input pixels between the end of an output row and the next
  for (int t = 0; t < f->vectors; ++t) {
    const int64_t j0 = 16 * t, s0 = j0 + skip * (j0 / OW);
    alignas(64) int32_t lanes[16];
    int64_t span = 0;
    for (int64_t l = 0; l < 16; ++l) {
      const int64_t j = j0 + l, rel = j < P ? j + skip * (j / OW) - s0 : 0;
      lanes[l] = static_cast<int32_t>(rel);
      span = std::max(span, rel + 1);
    }
    if (span > 32) return false;
    f->start[t] = static_cast<int32_t>(s0);
    f->idx[t] = _mm512_load_si512(lanes);
    f->lo[t] = static_cast<__mmask16>((1u << std::min<int64_t>(span, 16)) - 1);
    f->hi[t] = static_cast<__mmask16>(span > 16 ? (1u << (span - 16)) - 1 : 0);
  }
  return true;
}

void flat_im2col(const FlatIm2col& f, const float* x, int64_t image_stride, int64_t nb, const ConvShape& cs,
                 float* col, int64_t ld, float* pad) {
  const Window& w = cs.w;
  const int64_t Cg = cs.Cg(), P = cs.P(), IH = w.in[1], IW = w.in[2], KH = w.k[1], KW = w.k[2];
  int64_t istride = image_stride, cstride = cs.I();
  if (f.padded) {
    for (int64_t b = 0; b < nb; ++b)
      for (int64_t c = 0; c < Cg; ++c) {
        const float* src = x + b * image_stride + c * cs.I();
        float* dst = pad + (b * Cg + c) * f.plane;
        std::fill(dst, dst + w.pb[1] * f.IWp, 0.f);
        float* row = dst + w.pb[1] * f.IWp;
        for (int64_t ih = 0; ih < IH; ++ih, row += f.IWp, src += IW) {
          std::fill(row, row + w.pb[2], 0.f);
          copy_short(row + w.pb[2], src, IW);
          std::fill(row + w.pb[2] + IW, row + f.IWp, 0.f);
        }
        std::fill(row, dst + f.plane, 0.f);
      }
    x = pad;
    istride = Cg * f.plane;
    cstride = f.plane;
  }
  for (int64_t c = 0; c < Cg; ++c)
    for (int64_t kh = 0; kh < KH; ++kh)
      for (int64_t kw = 0; kw < KW; ++kw) {
        float* row = col + ((c * KH + kh) * KW + kw) * ld;
        const float* xc = x + c * cstride + kh * f.IWp + kw;
        for (int64_t b = 0; b < nb; ++b) {
          const float* src = xc + b * istride;
          float* dst = row + b * P;
          for (int t = 0; t < f.vectors; ++t) {
            const __m512 a = _mm512_maskz_loadu_ps(f.lo[t], src + f.start[t]);
            const __m512 h = _mm512_maskz_loadu_ps(f.hi[t], src + f.start[t] + 16);
            _mm512_storeu_ps(dst + 16 * t, _mm512_permutex2var_ps(a, f.idx[t], h));
          }
        }
      }
}
#endif

// What im2col decides once per convolution call, not once per chunk: whether the flat runs apply
// (AVX-512, float) with their lane tables, and the scratch their padded planes take per image.
struct Im2colPlan {
#ifdef __AVX512F__
  FlatIm2col flat;
#endif
  bool use_flat = false;
  int64_t pad_elems = 0;
};

template <class T>
Im2colPlan plan_im2col(const ConvShape& cs) {
  Im2colPlan p;
#ifdef __AVX512F__
  if constexpr (std::is_same_v<T, float>) {
    p.use_flat = plan_flat_im2col(cs, &p.flat);
    if (p.use_flat && p.flat.padded) p.pad_elems = cs.Cg() * p.flat.plane;
  }
#endif
  return p;
}

// Writes the im2col matrix of `nb` images' group (Cg planes of I pixels each; image b starts at
// x + b * image_stride) into `col`, which has kRowSlack elements of room after the matrix: element
// (image b, pixel p; tap k) at col[k * ld + b * P + p],
// k running over (channel, kernel position). Images are the inner loop so that each row of `col`
// is written front to back: written image by image, rows ld apart, the stores miss the cache.
template <class T>
void im2col(const T* x, int64_t image_stride, int64_t nb, const ConvShape& cs, const Im2colPlan& plan, T* col,
            int64_t ld, T* pad) {
#ifdef __AVX512F__
  if constexpr (std::is_same_v<T, float>) {
    if (plan.use_flat) return flat_im2col(plan.flat, x, image_stride, nb, cs, col, ld, pad);
    if (im2col_rows(x, image_stride, nb, cs, col, ld)) return;
  }
#endif
  const Window& w = cs.w;
  const int64_t OW = w.out[2], OHW = w.out[1] * w.out[2], P = cs.P();
  int64_t k = 0;
  for (int64_t c = 0; c < cs.Cg(); ++c)
    for (int64_t kd = 0; kd < w.k[0]; ++kd)
      for (int64_t kh = 0; kh < w.k[1]; ++kh)
        for (int64_t kw = 0; kw < w.k[2]; ++kw, ++k) {
          int64_t lo, hi;
          w.valid_range(2, kw, &lo, &hi);
          const int64_t offw = kw * w.d[2] - w.pb[2], s = w.s[2];
          for (int64_t b = 0; b < nb; ++b) {
            T* dst = col + k * ld + b * P;
            const T* xc = x + b * image_stride + c * cs.I();
            for (int64_t od = 0; od < w.out[0]; ++od) {
              const int64_t id = od * w.s[0] - w.pb[0] + kd * w.d[0];
              for (int64_t oh = 0; oh < w.out[1]; ++oh) {
                T* __restrict row = dst + od * OHW + oh * OW;
                const int64_t ih = oh * w.s[1] - w.pb[1] + kh * w.d[1];
                if (id < 0 || id >= w.in[0] || ih < 0 || ih >= w.in[1]) {
                  for (int64_t ow = 0; ow < OW; ++ow) row[ow] = T(0);
                  continue;
                }
                const T* __restrict src = xc + (id * w.in[1] + ih) * w.in[2] + offw;
                for (int64_t ow = 0; ow < lo; ++ow) row[ow] = T(0);
                if (s == 1) {
                  copy_row_over(row + lo, src + lo, hi - lo, xc + cs.I());
                } else {
                  for (int64_t ow = lo; ow < hi; ++ow) row[ow] = src[ow * s];
                }
                for (int64_t ow = hi; ow < OW; ++ow) row[ow] = T(0);
              }
            }
          }
        }
}

#ifdef __AVX512F__
// col2im_add for float rows whose whole window span fits one register (stride 1 along the row,
// out + (k - 1) * d <= 16; LeNet's conv2: 9 + 4): each input row is loaded and stored once and the
// kernel columns' contributions are added to it as lane-shifted masked loads, instead of one
// read-modify-write of the row per kernel column. Lane j of the register is input pixel j - pad.
// Masked-off lanes may address memory outside the buffers: AVX-512 suppresses their faults.
bool col2im_add_rows(const float* col, int64_t ld, const ConvShape& cs, float* x, int64_t image_stride, int64_t nb) {
  const Window& w = cs.w;
  const int64_t OW = w.out[2], KW = w.k[2], d = w.d[2], pb = w.pb[2], IW = w.in[2];
  if (w.s[2] != 1 || OW + (KW - 1) * d > 16) return false;
  const int64_t OHW = w.out[1] * OW, P = cs.P();
  uint32_t span = 0;  // lanes that are real input pixels
  for (int64_t j = 0; j < 16; ++j)
    if (j - pb >= 0 && j - pb < IW && j < OW + (KW - 1) * d) span |= 1u << j;
  const __mmask16 xmask = static_cast<__mmask16>(span), first = static_cast<__mmask16>((1u << OW) - 1);
  for (int64_t c = 0; c < cs.Cg(); ++c)
    for (int64_t kd = 0; kd < w.k[0]; ++kd)
      for (int64_t kh = 0; kh < w.k[1]; ++kh) {
        const int64_t k0 = ((c * w.k[0] + kd) * w.k[1] + kh) * KW;
        for (int64_t b = 0; b < nb; ++b) {
          float* xc = x + b * image_stride + c * cs.I();
          const float* src = col + k0 * ld + b * P;
          for (int64_t od = 0; od < w.out[0]; ++od) {
            const int64_t id = od * w.s[0] - w.pb[0] + kd * w.d[0];
            if (id < 0 || id >= w.in[0]) continue;
            // Rows in groups of up to four, each row's sum in its own register (one sum's adds form a
            // chain that waits on each add; four chains overlap), and even rows before odd ones: a row's
            // 16-lane load would otherwise overlap the masked store of the row just before it, which the
            // core cannot forward (the load waits for the store). Rows of a group are distinct (oh
            // distinct), so loading all before storing all loses no sum; each element adds its kernel
            // columns in the same order as before.
            float* xrow[4];
            const float* rrow[4];
            int nr = 0;
            auto rows = [&](auto count, int q0) {
              constexpr int R = decltype(count)::value;
              __m512 acc[R];
#pragma GCC unroll 4
              for (int q = 0; q < R; ++q) acc[q] = _mm512_maskz_loadu_ps(xmask, xrow[q0 + q]);
              for (int64_t kw = 0; kw < KW; ++kw) {
                const __mmask16 m = static_cast<__mmask16>(first << (kw * d));
#pragma GCC unroll 4
                for (int q = 0; q < R; ++q)
                  acc[q] = _mm512_add_ps(acc[q], _mm512_maskz_loadu_ps(m, rrow[q0 + q] + kw * ld - kw * d));
              }
#pragma GCC unroll 4
              for (int q = 0; q < R; ++q) _mm512_mask_storeu_ps(xrow[q0 + q], xmask, acc[q]);
            };
            auto flush = [&] {
              if (nr == 4) rows(std::integral_constant<int, 4>{}, 0);
              else
                for (int q = 0; q < nr; ++q) rows(std::integral_constant<int, 1>{}, q);
              nr = 0;
            };
            for (int64_t i = 0; i < w.out[1]; ++i) {
              const int64_t oh = i < (w.out[1] + 1) / 2 ? 2 * i : 2 * (i - (w.out[1] + 1) / 2) + 1;
              const int64_t ih = oh * w.s[1] - w.pb[1] + kh * w.d[1];
              if (ih < 0 || ih >= w.in[1]) continue;
              xrow[nr] = xc + (id * w.in[1] + ih) * IW - pb;
              rrow[nr] = src + od * OHW + oh * OW;
              if (++nr == 4) flush();
            }
            if (nr) flush();
          }
        }
      }
  return true;
}
#endif

// The adjoint of im2col: adds each column entry back onto the input pixel it was read from.
template <class T>
void col2im_add(const T* col, int64_t ld, const ConvShape& cs, T* x, int64_t image_stride, int64_t nb) {
#ifdef __AVX512F__
  if constexpr (std::is_same_v<T, float>)
    if (col2im_add_rows(col, ld, cs, x, image_stride, nb)) return;
#endif
  const Window& w = cs.w;
  const int64_t OW = w.out[2], OHW = w.out[1] * w.out[2], P = cs.P();
  int64_t k = 0;
  for (int64_t c = 0; c < cs.Cg(); ++c)
    for (int64_t kd = 0; kd < w.k[0]; ++kd)
      for (int64_t kh = 0; kh < w.k[1]; ++kh)
        for (int64_t kw = 0; kw < w.k[2]; ++kw, ++k) {
          int64_t lo, hi;
          w.valid_range(2, kw, &lo, &hi);
          const int64_t offw = kw * w.d[2] - w.pb[2], s = w.s[2];
          for (int64_t b = 0; b < nb; ++b) {
            const T* src = col + k * ld + b * P;
            T* xc = x + b * image_stride + c * cs.I();
            for (int64_t od = 0; od < w.out[0]; ++od) {
              const int64_t id = od * w.s[0] - w.pb[0] + kd * w.d[0];
              if (id < 0 || id >= w.in[0]) continue;
              for (int64_t oh = 0; oh < w.out[1]; ++oh) {
                const int64_t ih = oh * w.s[1] - w.pb[1] + kh * w.d[1];
                if (ih < 0 || ih >= w.in[1]) continue;
                const T* __restrict row = src + od * OHW + oh * OW;
                T* __restrict dst = xc + (id * w.in[1] + ih) * w.in[2] + offw;
                if (s == 1) {
                  add_row_over(dst + lo, row + lo, hi - lo, xc + cs.I());
                } else {
                  for (int64_t ow = lo; ow < hi; ++ow) dst[ow * s] += row[ow];
                }
              }
            }
          }
        }
}

// How images are split into chunks (one GEMM each) and chunks over threads.
struct Chunking {
  int64_t per_chunk = 1, chunks = 1;
  int threads = 1;
};

// Chunks of about kChunkBytes of im2col matrix keep the GEMM's operands in L2 while giving it
// enough rows (pixels x images) to run near peak; measured with bench/bench_kernels (256 KB to
// 1 MB all within a few percent). But a chunk has at least kDirectPixels rows whatever its size:
// each GEMM packs the whole weight matrix, which only pays off over enough rows (ResNet's deep
// layers have 4608-long rows of few pixels: one image per chunk spent most time packing).
constexpr int64_t kChunkBytes = 512 << 10;
constexpr int64_t kMaxChunkBytes = 32 << 20;  // caps the rows rule for very long rows

// An image with at least this many output pixels gives the GEMM enough rows alone; then chunks are
// single images, whose pixel-major output block is already NCHW: no gather/scatter copies.
constexpr int64_t kDirectPixels = 256;

Chunking plan_chunks(int threads, int64_t N, int64_t P, int64_t col_bytes_per_image) {
  Chunking c;
  c.threads = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, N)));
  const int64_t per_thread = div_ceil(std::max<int64_t>(N, 1), c.threads);
  const int64_t image_bytes = std::max<int64_t>(col_bytes_per_image, 1);
  const int64_t by_rows = std::min(div_ceil(kDirectPixels, std::max<int64_t>(P, 1)), kMaxChunkBytes / image_bytes);
  const int64_t largest =
      P >= kDirectPixels ? 1 : std::clamp<int64_t>(std::max(kChunkBytes / image_bytes, by_rows), 1, per_thread);
  // Equal chunks, so that every thread gets the same number of images.
  c.per_chunk = div_ceil(per_thread, div_ceil(per_thread, largest));
  c.chunks = div_ceil(std::max<int64_t>(N, 1), c.per_chunk);
  c.threads = static_cast<int>(std::min<int64_t>(c.threads, c.chunks));
  return c;
}

// Runs begin(thread) once per thread, then body(thread, chunk) for every chunk. Chunks are handed
// out dynamically: on a busy machine a thread that is descheduled for a while does not hold the
// others up (with a static deal they would wait at the end for its share). A body that sums into
// per-thread accumulators asks for a fixed deal instead (thread t takes chunks t, t + T, ...): which
// chunks land in which sum, and so the rounding of the total, must not depend on timing.
// With one chunk thread no parallel region is opened and the GEMM may use the threads itself
// (gemm_threads).
enum class Deal { Dynamic, Fixed };

template <class Begin, class F>
void for_chunks(const Chunking& ch, Deal deal, Begin&& begin, F&& body) {
  if (ch.threads <= 1) {
    begin(0);
    for (int64_t c = 0; c < ch.chunks; ++c) body(0, c);
    return;
  }
#pragma omp parallel num_threads(ch.threads)
  {
    const int t = omp_get_thread_num();
    begin(t);
    if (deal == Deal::Fixed) {
#pragma omp for schedule(static, 1)
      for (int64_t c = 0; c < ch.chunks; ++c) body(t, c);
    } else {
#pragma omp for schedule(dynamic, 1)
      for (int64_t c = 0; c < ch.chunks; ++c) body(t, c);
    }
  }
}

int gemm_threads(const KernelContext& ctx, const Chunking& ch) { return ch.threads > 1 ? 1 : ctx.threads(); }

template <class T> constexpr bool kDirectType = std::is_same_v<T, float>;

DirectConv direct_of(const ConvShape& cs) {
  DirectConv dc;
  dc.N = cs.N;
  dc.M = cs.M;
  dc.group = cs.group;
  dc.w = cs.w;
  return dc;
}

// y[N, M, P] = conv(x, wt) (+ bias), then Relu where `relu` (FusedConv): applied to each chunk's
// output as it is written, in the registers of the direct kernels. wt is the weight [M, Cg, k...] as stored.
template <class T>
void conv_forward(KernelContext& ctx, const ConvShape& cs, const T* x, const T* wt, const T* bias, T* y,
                  bool relu = false) {
  if (cs.N == 0) return;  // an empty output: the chunk loop below would still run one (empty) chunk
  if constexpr (kDirectType<T>)
    if (direct_conv_applies(cs.w, cs.Cg())) {
      const DirectConv dc = direct_of(cs);
      float* scratch = static_cast<float*>(ctx.scratch(sizeof(float) * direct_conv_scratch(dc, ctx.threads())));
      direct_conv_forward(dc, x, wt, bias, y, scratch, ctx.threads(), relu);
      return;
    }
  const int64_t P = cs.P(), K = cs.K(), Mg = cs.Mg(), Cg = cs.Cg(), I = cs.I(), M = cs.M, C = cs.C;
  const Chunking ch = plan_chunks(ctx.threads(), cs.N, P, P * K * static_cast<int64_t>(sizeof(T)));
  const int gt = gemm_threads(ctx, ch);
  const int64_t B = ch.per_chunk;
  const Im2colPlan ip = plan_im2col<T>(cs);
  const int64_t per_thread = B * P * K + kRowSlack + B * P * Mg + B * ip.pad_elems;
  T* scratch = static_cast<T*>(ctx.scratch(sizeof(T) * per_thread * ch.threads));
  for_chunks(ch, Deal::Dynamic, [](int) {}, [&](int t, int64_t chunk) {
    T* col = scratch + t * per_thread;
    T* yc = col + B * P * K + kRowSlack;
    T* pad = yc + B * P * Mg;
    const int64_t n0 = chunk * B, nb = std::min(B, cs.N - n0), ld = nb * P;
    for (int64_t g = 0; g < cs.group; ++g) {
      im2col(x + (n0 * C + g * Cg) * I, C * I, nb, cs, ip, col, ld, pad);
      if (B == 1) {
        // The GEMM writes the image's NCHW output block directly, starting from the bias.
        T* out = y + (n0 * M + g * Mg) * P;
        if (bias)
          for (int64_t m = 0; m < Mg; ++m) std::fill(out + m * P, out + (m + 1) * P, bias[g * Mg + m]);
        gemm(false, false, P, Mg, K, T(1), col, P, wt + g * Mg * K, K, bias ? T(1) : T(0), out, P, gt);
        if (relu) relu_in_place(out, Mg * P);
        continue;
      }
      gemm(false, false, ld, Mg, K, T(1), col, ld, wt + g * Mg * K, K, T(0), yc, ld, gt);
      for (int64_t b = 0; b < nb; ++b)
        for (int64_t m = 0; m < Mg; ++m) {
          const T* src = yc + m * ld + b * P;
          T* dst = y + ((n0 + b) * M + g * Mg + m) * P;
          const T bv = bias ? bias[g * Mg + m] : T(0);
          if (relu)
            for (int64_t p = 0; p < P; ++p) dst[p] = relu_of(src[p] + bv);
          else
            for (int64_t p = 0; p < P; ++p) dst[p] = src[p] + bv;
        }
    }
  });
}

// Gradients of y = conv(x, wt) given dy: dx (if non-null) and dw (if non-null), both overwritten.
// For ConvTranspose's forward pass this is called with dy = its input and dx = its output.
template <class T>
void conv_backward(KernelContext& ctx, const ConvShape& cs, const T* dy, const T* x, const T* wt, T* dx, T* dw) {
  const int64_t P = cs.P(), K = cs.K(), Mg = cs.Mg(), Cg = cs.Cg(), I = cs.I(), M = cs.M, C = cs.C;
  if constexpr (kDirectType<T>)
    if (dw && cs.N > 0 && direct_conv_applies(cs.w, Cg)) {
      const DirectConv dc = direct_of(cs);
      float* scratch = static_cast<float*>(ctx.scratch(sizeof(float) * direct_conv_scratch(dc, ctx.threads())));
      direct_conv_weight_grad(dc, x, dy, dw, scratch, ctx.threads());
      dw = nullptr;  // done; the GEMM path below computes dx, if asked for
    }
  if (dx) std::fill(dx, dx + cs.N * C * I, T(0));
  if (dw) std::fill(dw, dw + M * K, T(0));
  if (cs.N == 0 || (!dx && !dw)) return;
  const Chunking ch = plan_chunks(ctx.threads(), cs.N, P, P * K * static_cast<int64_t>(sizeof(T)));
  const int gt = gemm_threads(ctx, ch);
  const int64_t B = ch.per_chunk;
  // Threads other than the first accumulate dw privately; the sums are added at the end.
  const int64_t acc = (dw && ch.threads > 1) ? M * K : 0;
  const Im2colPlan ip = dw ? plan_im2col<T>(cs) : Im2colPlan{};
  const int64_t per_thread = B * P * K + kRowSlack + B * P * Mg + B * ip.pad_elems + acc;
  T* scratch = static_cast<T*>(ctx.scratch(sizeof(T) * per_thread * ch.threads));
  auto dw_acc_of = [&](int t) { return (t == 0 || !dw) ? dw : scratch + t * per_thread + per_thread - acc; };
  auto zero_acc = [&](int t) {
    if (t > 0 && dw) std::fill(dw_acc_of(t), dw_acc_of(t) + M * K, T(0));
  };
  for_chunks(ch, acc ? Deal::Fixed : Deal::Dynamic, zero_acc, [&](int t, int64_t chunk) {
    T* col = scratch + t * per_thread;
    T* dyc = col + B * P * K + kRowSlack;
    T* pad = dyc + B * P * Mg;
    T* dw_acc = dw_acc_of(t);
    const int64_t n0 = chunk * B, nb = std::min(B, cs.N - n0), ld = nb * P;
    for (int64_t g = 0; g < cs.group; ++g) {
      if (B > 1)
        for (int64_t m = 0; m < Mg; ++m)
          for (int64_t b = 0; b < nb; ++b)
            std::memcpy(dyc + m * ld + b * P, dy + ((n0 + b) * M + g * Mg + m) * P, sizeof(T) * P);
      const T* dY = B > 1 ? dyc : dy + (n0 * M + g * Mg) * P;  // [ld, Mg], column-major
      if (dw) {
        im2col(x + (n0 * C + g * Cg) * I, C * I, nb, cs, ip, col, ld, pad);
        gemm(true, false, K, Mg, ld, T(1), col, ld, dY, ld, T(1), dw_acc + g * Mg * K, K, gt);
      }
      if (dx) {
        gemm(false, true, ld, K, Mg, T(1), dY, ld, wt + g * Mg * K, K, T(0), col, ld, gt);
        col2im_add(col, ld, cs, dx + (n0 * C + g * Cg) * I, C * I, nb);
      }
    }
  });
  if (acc)
    for (int t = 1; t < ch.threads; ++t) {
      const T* a = dw_acc_of(t);
      for (int64_t i = 0; i < M * K; ++i) dw[i] += a[i];
    }
}

// db[c] = sum over images and pixels of dy[n, c, :].
template <class T>
void channel_sums(const T* dy, int64_t N, int64_t Ch, int64_t P, T* db) {
  for (int64_t c = 0; c < Ch; ++c) {
    T s = 0;
    for (int64_t n = 0; n < N; ++n) s += Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>(dy + (n * Ch + c) * P, P).sum();
    db[c] = s;
  }
}

Shape spatial(const Shape& s) { return Shape(s.begin() + 2, s.end()); }

void check_float(const Tensor& t, const char* what) {
  GR_CHECK(t.dtype() == DType::F32 || t.dtype() == DType::F64,
           what << " must be f32 or f64, got " << dtype_name(t.dtype()));
}

void check_same_dtype(const Tensor& a, const Tensor& b, const char* an, const char* bn) {
  GR_CHECK(a.dtype() == b.dtype(), an << " is " << dtype_name(a.dtype()) << " but " << bn << " is "
                                      << dtype_name(b.dtype()));
}

// Conv(X [N,C,...], W [M,C/group,k...]): the geometry from the attributes, checked against the shapes.
ConvShape conv_shape(const Node& n, const Tensor& x, const Tensor& w) {
  GR_CHECK(x.rank() >= 3 && x.rank() <= 5, "X must have rank 3 to 5 (N, C, 1-3 spatial axes), got "
                                               << shape_str(x.shape()));
  GR_CHECK(w.rank() == x.rank(), "W " << shape_str(w.shape()) << " must have the rank of X " << shape_str(x.shape()));
  ConvShape cs;
  cs.N = x.dim(0);
  cs.C = x.dim(1);
  cs.M = w.dim(0);
  cs.group = n.attr_i("group", 1);
  GR_CHECK(cs.group >= 1, "group must be >= 1, got " << cs.group);
  GR_CHECK(cs.C == w.dim(1) * cs.group, "X has " << cs.C << " channels but W " << shape_str(w.shape())
                                                 << " with group " << cs.group << " expects " << w.dim(1) * cs.group);
  GR_CHECK(cs.M % cs.group == 0, "W's " << cs.M << " output channels are not divisible by group " << cs.group);
  std::vector<int64_t> kernel = spatial(w.shape());
  if (n.has_attr("kernel_shape"))
    GR_CHECK(n.attr_ints("kernel_shape") == kernel,
             "kernel_shape " << shape_str(n.attr_ints("kernel_shape")) << " does not match W " << shape_str(w.shape()));
  cs.w = forward_window(n, spatial(x.shape()), kernel, false);
  return cs;
}

Shape output_shape(int64_t N, int64_t C, const Window& w, bool of_input) {
  Shape s{N, C};
  for (int i = Window::kMax - w.nd; i < Window::kMax; ++i) s.push_back(of_input ? w.in[i] : w.out[i]);
  return s;
}

// ConvTranspose(X [N,C,in...], W [C,M/group,k...]) seen as the data gradient of a Conv whose input is
// the ConvTranspose output [N, M, out...] and whose output is X.
ConvShape conv_transpose_shape(const Node& n, const Tensor& x, const Tensor& w) {
  GR_CHECK(x.rank() >= 3 && x.rank() <= 5, "X must have rank 3 to 5 (N, C, 1-3 spatial axes), got "
                                               << shape_str(x.shape()));
  GR_CHECK(w.rank() == x.rank(), "W " << shape_str(w.shape()) << " must have the rank of X " << shape_str(x.shape()));
  const int nd = x.rank() - 2;
  ConvShape cs;
  cs.group = n.attr_i("group", 1);
  GR_CHECK(cs.group >= 1, "group must be >= 1, got " << cs.group);
  GR_CHECK(x.dim(1) == w.dim(0), "X has " << x.dim(1) << " channels but W " << shape_str(w.shape()) << " expects "
                                          << w.dim(0));
  GR_CHECK(x.dim(1) % cs.group == 0, "X's " << x.dim(1) << " channels are not divisible by group " << cs.group);
  cs.N = x.dim(0);
  cs.M = x.dim(1);               // the conv's output channels are ConvTranspose's input channels
  cs.C = w.dim(1) * cs.group;    // and its input channels ConvTranspose's output channels
  std::vector<int64_t> kernel = spatial(w.shape());
  if (n.has_attr("kernel_shape"))
    GR_CHECK(n.attr_ints("kernel_shape") == kernel,
             "kernel_shape " << shape_str(n.attr_ints("kernel_shape")) << " does not match W " << shape_str(w.shape()));
  WindowAttrs a = read_window_attrs(n, nd);
  std::vector<int64_t> out_pad = n.attr_ints("output_padding", std::vector<int64_t>(nd, 0));
  GR_CHECK(static_cast<int>(out_pad.size()) == nd,
           "output_padding has " << out_pad.size() << " values for " << nd << " spatial axes");
  std::vector<int64_t> out_shape = n.attr_ints("output_shape");
  if (static_cast<int>(out_shape.size()) == nd + 2) out_shape.erase(out_shape.begin(), out_shape.begin() + 2);
  GR_CHECK(out_shape.empty() || static_cast<int>(out_shape.size()) == nd,
           "output_shape has " << out_shape.size() << " values for " << nd << " spatial axes");
  cs.w.reset(nd);
  for (int i = 0; i < nd; ++i) {
    const int ax = Window::kMax - nd + i;
    const int64_t in = x.dim(2 + i), k = kernel[i], s = a.strides[i], d = a.dilations[i], op = out_pad[i];
    GR_CHECK(op >= 0 && (op < s || op < d),
             "output_padding " << op << " must be smaller than the stride " << s << " or the dilation " << d);
    const int64_t ek = (k - 1) * d + 1, full = s * (in - 1) + op + ek;
    int64_t pb = a.pads[i], pe = a.pads[i + nd], out;
    const bool same = a.auto_pad == "SAME_UPPER" || a.auto_pad == "SAME_LOWER";
    if (!out_shape.empty() || same) {
      out = out_shape.empty() ? in * s : out_shape[i];
      // The spec's total/2 is Python's floor division: an output larger than the full one (negative
      // total padding, as output_shape may ask) grows at the end for NOTSET and SAME_LOWER.
      const int64_t total = full - out, half = total >= 0 ? total / 2 : -((1 - total) / 2);
      if (a.auto_pad == "SAME_UPPER") pb = half, pe = total - half;
      else pb = total - half, pe = half;
    } else {
      if (a.auto_pad == "VALID") pb = pe = 0;
      out = full - pb - pe;
    }
    GR_CHECK(out >= 1, "spatial axis " << i << ": the output size would be " << out);
    cs.w.in[ax] = out;
    cs.w.out[ax] = in;
    cs.w.k[ax] = k;
    cs.w.s[ax] = s;
    cs.w.d[ax] = d;
    cs.w.pb[ax] = pb;
    cs.w.pe[ax] = pe;
  }
  return cs;
}

void check_bias(const Tensor& b, int64_t channels) {
  GR_CHECK(b.rank() == 1 && b.dim(0) == channels,
           "B " << shape_str(b.shape()) << " must be 1-D with " << channels << " values");
}

// Conv, or FusedConv (kFused: Relu(Conv), pass fuse_relu_epilogue).
template <class T, bool kFused = false>
void conv_kernel(KernelContext& ctx) {
  if constexpr (kFused) check_fused_activation(ctx.node());
  const Tensor &x = ctx.input(0), &w = ctx.input(1);
  ConvShape cs = conv_shape(ctx.node(), x, w);
  const T* bias = nullptr;
  if (ctx.has_input(2)) {
    check_bias(ctx.input(2), cs.M);
    check_same_dtype(ctx.input(2), x, "B", "X");
    bias = ctx.input(2).data<T>();
  }
  Tensor& y = ctx.output(0, output_shape(cs.N, cs.M, cs.w, false), x.dtype());
  conv_forward<T>(ctx, cs, x.data<T>(), w.data<T>(), bias, y.data<T>(), kFused);
}

template <class T>
void conv_transpose_kernel(KernelContext& ctx) {
  const Tensor &x = ctx.input(0), &w = ctx.input(1);
  ConvShape cs = conv_transpose_shape(ctx.node(), x, w);
  Tensor& y = ctx.output(0, output_shape(cs.N, cs.C, cs.w, true), x.dtype());
  T* yp = y.data<T>();
  conv_backward<T>(ctx, cs, x.data<T>(), nullptr, w.data<T>(), yp, nullptr);
  if (ctx.has_input(2)) {
    const Tensor& b = ctx.input(2);
    check_bias(b, cs.C);
    check_same_dtype(b, x, "B", "X");
    const T* bp = b.data<T>();
    const int64_t I = cs.I();
    for (int64_t n = 0; n < cs.N; ++n)
      for (int64_t c = 0; c < cs.C; ++c) {
        T* p = yp + (n * cs.C + c) * I;
        for (int64_t i = 0; i < I; ++i) p[i] += bp[c];
      }
  }
}

void check_dy(const Tensor& dy, const Shape& want) {
  GR_CHECK(dy.shape() == want, "dY " << shape_str(dy.shape()) << " does not match the forward output shape "
                                     << shape_str(want));
}

// ConvGrad(dY, X, W) -> (dX, dW, dB) of Y = Conv(X, W, B).
template <class T>
void conv_grad_kernel(KernelContext& ctx) {
  const Tensor &dy = ctx.input(0), &x = ctx.input(1), &w = ctx.input(2);
  check_same_dtype(dy, x, "dY", "X");
  ConvShape cs = conv_shape(ctx.node(), x, w);
  check_dy(dy, output_shape(cs.N, cs.M, cs.w, false));
  T* dx = ctx.has_output(0) ? ctx.output(0, x.shape(), x.dtype()).data<T>() : nullptr;
  T* dw = ctx.has_output(1) ? ctx.output(1, w.shape(), w.dtype()).data<T>() : nullptr;
  conv_backward<T>(ctx, cs, dy.data<T>(), x.data<T>(), w.data<T>(), dx, dw);
  if (ctx.has_output(2))
    channel_sums(dy.data<T>(), cs.N, cs.M, cs.P(), ctx.output(2, {cs.M}, x.dtype()).data<T>());
}

// ConvTransposeGrad(dY, X, W) -> (dX, dW, dB) of Y = ConvTranspose(X, W, B).
template <class T>
void conv_transpose_grad_kernel(KernelContext& ctx) {
  const Tensor &dy = ctx.input(0), &x = ctx.input(1), &w = ctx.input(2);
  check_same_dtype(dy, x, "dY", "X");
  ConvShape cs = conv_transpose_shape(ctx.node(), x, w);
  check_dy(dy, output_shape(cs.N, cs.C, cs.w, true));
  // In conv terms dY is the conv's input and X its output: dX = conv(dY, W), dW = conv's weight gradient.
  if (ctx.has_output(0))
    conv_forward<T>(ctx, cs, dy.data<T>(), w.data<T>(), nullptr, ctx.output(0, x.shape(), x.dtype()).data<T>());
  if (ctx.has_output(1))
    conv_backward<T>(ctx, cs, x.data<T>(), dy.data<T>(), w.data<T>(), nullptr,
                     ctx.output(1, w.shape(), w.dtype()).data<T>());
  if (ctx.has_output(2))
    channel_sums(dy.data<T>(), cs.N, cs.C, cs.I(), ctx.output(2, {cs.C}, x.dtype()).data<T>());
}

// Dispatches on the dtype of input kX (X: input 0 of the forward ops, input 1 of the gradient ops).
template <int kX, void (*F32)(KernelContext&), void (*F64)(KernelContext&)>
void by_float(KernelContext& ctx) {
  const Tensor& x = ctx.input(kX);
  check_float(x, "X");
  for (int i = 0; i < ctx.num_inputs(); ++i)
    if (ctx.has_input(i)) check_same_dtype(ctx.input(i), x, ("input " + std::to_string(i)).c_str(), "X");
  if (x.dtype() == DType::F32) F32(ctx);
  else F64(ctx);
}

// ConvGrad(dY, X, W) -> dX, dW, dB and ConvTransposeGrad: the attributes of their forward op.
OpSchemaSpec conv_grad_schema(bool transpose) {
  OpSchemaSpec s(transpose ? "gradients of `Y = ConvTranspose(X, W, B)`" : "gradients of `Y = Conv(X, W, B)`");
  s.attr("auto_pad", "as Conv", Attribute::Str("NOTSET"))
      .attr("dilations", "as Conv", Attribute::Kind::Ints)
      .attr("group", "as Conv", Attribute::Int(1))
      .attr("kernel_shape", "as Conv", Attribute::Kind::Ints)
      .attr("pads", "as Conv", Attribute::Kind::Ints)
      .attr("strides", "as Conv", Attribute::Kind::Ints);
  if (transpose)
    s.attr("output_padding", "as ConvTranspose", Attribute::Kind::Ints)
        .attr("output_shape", "as ConvTranspose", Attribute::Kind::Ints);
  // ConvTranspose's weight holds C_out/group on axis 1.
  s.layer_gradient("W").output_bias_of(2, 2, transpose ? 1 : 0, transpose ? "group" : "");
  return s;
}

// FusedConv(X, W, B) = Relu(Conv(X, W, B)), bit for bit (internal: pass fuse_relu_epilogue).
OpSchemaSpec fused_conv_schema() {
  OpSchemaSpec s("`Relu(Conv(X, W, B))` in one kernel: the Relu applied to each output block as the convolution "
                 "writes it (internal: pass fuse_relu_epilogue makes it of Conv + Relu; exported graphs keep those)");
  s.input("X", "as Conv", "T").input("W", "as Conv", "T").input("B", "as Conv", "T", OpSchemaSpec::Arity::Optional);
  s.output("Y", "Relu of the convolution", "T");
  s.attr("activation", "the activation: Relu", Attribute::Str("Relu"))
      .attr("auto_pad", "as Conv", Attribute::Str("NOTSET"))
      .attr("dilations", "as Conv", Attribute::Kind::Ints)
      .attr("group", "as Conv", Attribute::Int(1))
      .attr("kernel_shape", "as Conv", Attribute::Kind::Ints)
      .attr("pads", "as Conv", Attribute::Kind::Ints)
      .attr("strides", "as Conv", Attribute::Kind::Ints);
  s.type("T", {"tensor(float)", "tensor(double)"}, "f32 or f64");
  return s;
}

}  // namespace

namespace {

// ---- ConvInteger and QLinearConv: the convolution of (X - x_zero_point) and (W - w_zero_point), uint8 or int8,
// as exact int32 sums. The products of 8-bit values summed in double are exact (below 2^53), so the float64
// convolution above computes them. x_zero_point is per tensor, w_zero_point per tensor or per output channel.

std::vector<int32_t> int_conv(KernelContext& ctx, const ConvShape& cs, const Tensor& x, const Tensor& w, const Tensor* xzp,
                              const Tensor* wzp, const char* what) {
  for (const Tensor* t : {&x, &w})
    GR_CHECK(t->dtype() == DType::U8 || t->dtype() == DType::I8, what << ": X and W must be uint8 or int8, got "
                                                                      << dtype_name(t->dtype()));
  for (const Tensor* t : {xzp, wzp})
    GR_CHECK(!t || t->dtype() == DType::U8 || t->dtype() == DType::I8,
             what << ": zero points must be uint8 or int8, got " << dtype_name(t->dtype()));
  GR_CHECK(!xzp || xzp->numel() == 1, what << ": x_zero_point must be a scalar");
  GR_CHECK(!wzp || wzp->numel() == 1 || wzp->numel() == cs.M, what << ": w_zero_point must be a scalar or hold " << cs.M);
  const double xz = zero_point_value(xzp, 0);
  std::vector<double> xd = x.as_doubles(), wd = w.as_doubles();
  for (double& v : xd) v -= xz;
  const int64_t per_m = w.numel() / std::max<int64_t>(cs.M, 1);
  for (int64_t m = 0; m < cs.M; ++m) {
    const double wz = zero_point_value(wzp, m);
    for (int64_t i = 0; i < per_m; ++i) wd[static_cast<size_t>(m * per_m + i)] -= wz;
  }
  std::vector<double> yd(static_cast<size_t>(cs.N * cs.M * cs.P()));
  conv_forward<double>(ctx, cs, xd.data(), wd.data(), nullptr, yd.data());
  return std::vector<int32_t>(yd.begin(), yd.end());
}

void conv_integer_kernel(KernelContext& ctx) {
  const Tensor &x = ctx.input(0), &w = ctx.input(1);
  const ConvShape cs = conv_shape(ctx.node(), x, w);
  const std::vector<int32_t> y = int_conv(ctx, cs, x, w, ctx.has_input(2) ? &ctx.input(2) : nullptr,
                                          ctx.has_input(3) ? &ctx.input(3) : nullptr, "ConvInteger");
  Tensor& out = ctx.output(0, output_shape(cs.N, cs.M, cs.w, false), DType::I32);
  if (!y.empty()) std::memcpy(out.raw(), y.data(), y.size() * sizeof(int32_t));
}

// QLinearConv(x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp[, B]): the int32 convolution plus B (int32),
// times x_scale * w_scale / y_scale in float (w_scale per tensor or per output channel), rounded half to even,
// plus y_zp, saturated.
void qlinear_conv_kernel(KernelContext& ctx) {
  const Tensor &x = ctx.input(0), &xs = ctx.input(1), &w = ctx.input(3), &ws = ctx.input(4), &ys = ctx.input(6),
               &yzp = ctx.input(7);
  const ConvShape cs = conv_shape(ctx.node(), x, w);
  const std::vector<int32_t> acc = int_conv(ctx, cs, x, w, &ctx.input(2), &ctx.input(5), "QLinearConv");
  GR_CHECK(xs.numel() == 1 && ys.numel() == 1 && yzp.numel() == 1,
           "QLinearConv: x_scale, y_scale and y_zero_point must be scalars");
  GR_CHECK(ws.numel() == 1 || ws.numel() == cs.M, "QLinearConv: w_scale must be a scalar or hold " << cs.M);
  std::vector<int32_t> bias(static_cast<size_t>(cs.M), 0);
  if (ctx.has_input(8)) {
    const Tensor& b = ctx.input(8);
    GR_CHECK(b.dtype() == DType::I32 && b.numel() == cs.M, "QLinearConv: B must be int32 with " << cs.M << " values");
    std::memcpy(bias.data(), b.raw(), bias.size() * sizeof(int32_t));
  }
  const std::vector<double> wsv = ws.as_doubles();
  const float x_scale = static_cast<float>(xs.as_doubles()[0]), y_scale = static_cast<float>(ys.as_doubles()[0]);
  const QuantRange r = quant_range(yzp.dtype(), "QLinearConv");
  const double z = zero_point_value(&yzp, 0);  // (quant_range took its type: uint8 or int8)
  Tensor& y = ctx.output(0, output_shape(cs.N, cs.M, cs.w, false), yzp.dtype());
  const int64_t P = cs.P();
  for (size_t e = 0; e < acc.size(); ++e) {
    const int64_t m = static_cast<int64_t>(e) / P % cs.M;
    const float w_scale = static_cast<float>(wsv[wsv.size() == 1 ? 0 : static_cast<size_t>(m)]);
    const int32_t sum = acc[e] + bias[static_cast<size_t>(m)];
    if (yzp.dtype() == DType::U8) static_cast<uint8_t*>(y.raw())[e] = requantize<uint8_t>(sum, x_scale, w_scale, y_scale, z, r);
    else static_cast<int8_t*>(y.raw())[e] = requantize<int8_t>(sum, x_scale, w_scale, y_scale, z, r);
  }
}

}  // namespace

GR_REGISTER_OPS(conv) {
  ops.op("Conv").cpu(via_f32<by_float<0, conv_kernel<float>, conv_kernel<double>>>);
  ops.op(kGraphrunDomain, "FusedConv")
      .cpu(by_float<0, conv_kernel<float, true>, conv_kernel<double, true>>)
      .schema(fused_conv_schema());
  ops.op("ConvTranspose").cpu(by_float<0, conv_transpose_kernel<float>, conv_transpose_kernel<double>>);
  ops.op("ConvInteger").cpu(conv_integer_kernel);
  ops.op("QLinearConv").cpu(qlinear_conv_kernel);
  ops.op(kGraphrunDomain, "ConvGrad")
      .cpu(by_float<1, conv_grad_kernel<float>, conv_grad_kernel<double>>)
      .schema(conv_grad_schema(false));
  ops.op(kGraphrunDomain, "ConvTransposeGrad")
      .cpu(by_float<1, conv_transpose_grad_kernel<float>, conv_transpose_grad_kernel<double>>)
      .schema(conv_grad_schema(true));
}

}  // namespace graphrun::runtime::cpu

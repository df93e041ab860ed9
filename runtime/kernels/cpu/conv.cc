// CPU kernels of the conv family: Conv, ConvTranspose and graphrun's ConvGrad / ConvTransposeGrad.
// One engine serves all four: im2col of a chunk of images into a pixel-major matrix (pixels are the
// rows of a column-major matrix, the layout Eigen's GEMM runs fastest on) and one GEMM per chunk.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // false positives inside Eigen's AVX-512 code
#include <omp.h>

#include <Eigen/Core>
#include <algorithm>
#include <cstring>

#include "runtime/kernel.h"
#include "runtime/kernels/cpu/window.h"

namespace graphrun::runtime::cpu {
namespace {

template <class T> using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;  // column-major
template <class T> using MapM = Eigen::Map<Mat<T>>;
template <class T> using MapCM = Eigen::Map<const Mat<T>>;

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

// Writes the im2col matrix of one image's group (Cg planes of I pixels) into `col`: element
// (pixel p, tap k) at col[k * ld + p], k running over (channel, kernel position).
template <class T>
void im2col(const T* x, const ConvShape& cs, T* col, int64_t ld) {
  const Window& w = cs.w;
  const int64_t OW = w.out[2], OHW = w.out[1] * w.out[2];
  int64_t k = 0;
  for (int64_t c = 0; c < cs.Cg(); ++c) {
    const T* xc = x + c * cs.I();
    for (int64_t kd = 0; kd < w.k[0]; ++kd)
      for (int64_t kh = 0; kh < w.k[1]; ++kh)
        for (int64_t kw = 0; kw < w.k[2]; ++kw, ++k) {
          T* dst = col + k * ld;
          int64_t lo, hi;
          w.valid_range(2, kw, &lo, &hi);
          const int64_t offw = kw * w.d[2] - w.pb[2];
          for (int64_t od = 0; od < w.out[0]; ++od) {
            const int64_t id = od * w.s[0] - w.pb[0] + kd * w.d[0];
            for (int64_t oh = 0; oh < w.out[1]; ++oh) {
              T* row = dst + od * OHW + oh * OW;
              const int64_t ih = oh * w.s[1] - w.pb[1] + kh * w.d[1];
              if (id < 0 || id >= w.in[0] || ih < 0 || ih >= w.in[1]) {
                std::fill(row, row + OW, T(0));
                continue;
              }
              const T* src = xc + (id * w.in[1] + ih) * w.in[2] + offw;
              for (int64_t ow = 0; ow < lo; ++ow) row[ow] = T(0);
              if (w.s[2] == 1) {
                std::memcpy(row + lo, src + lo, sizeof(T) * (hi - lo));
              } else {
                const int64_t s = w.s[2];
                for (int64_t ow = lo; ow < hi; ++ow) row[ow] = src[ow * s];
              }
              for (int64_t ow = hi; ow < OW; ++ow) row[ow] = T(0);
            }
          }
        }
  }
}

// The adjoint of im2col: adds each column entry back onto the input pixel it was read from.
template <class T>
void col2im_add(const T* col, int64_t ld, const ConvShape& cs, T* x) {
  const Window& w = cs.w;
  const int64_t OW = w.out[2], OHW = w.out[1] * w.out[2];
  int64_t k = 0;
  for (int64_t c = 0; c < cs.Cg(); ++c) {
    T* xc = x + c * cs.I();
    for (int64_t kd = 0; kd < w.k[0]; ++kd)
      for (int64_t kh = 0; kh < w.k[1]; ++kh)
        for (int64_t kw = 0; kw < w.k[2]; ++kw, ++k) {
          const T* src = col + k * ld;
          int64_t lo, hi;
          w.valid_range(2, kw, &lo, &hi);
          const int64_t offw = kw * w.d[2] - w.pb[2];
          for (int64_t od = 0; od < w.out[0]; ++od) {
            const int64_t id = od * w.s[0] - w.pb[0] + kd * w.d[0];
            if (id < 0 || id >= w.in[0]) continue;
            for (int64_t oh = 0; oh < w.out[1]; ++oh) {
              const int64_t ih = oh * w.s[1] - w.pb[1] + kh * w.d[1];
              if (ih < 0 || ih >= w.in[1]) continue;
              const T* row = src + od * OHW + oh * OW;
              T* dst = xc + (id * w.in[1] + ih) * w.in[2] + offw;
              const int64_t s = w.s[2];
              for (int64_t ow = lo; ow < hi; ++ow) dst[ow * s] += row[ow];
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
// enough rows (pixels x images) to run near peak; measured with bench/bench_conv.
constexpr int64_t kChunkBytes = 1 << 20;

Chunking plan_chunks(int threads, int64_t N, int64_t col_bytes_per_image) {
  Chunking c;
  c.threads = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, N)));
  const int64_t per_thread = div_ceil(std::max<int64_t>(N, 1), c.threads);
  c.per_chunk = std::clamp<int64_t>(kChunkBytes / std::max<int64_t>(col_bytes_per_image, 1), 1, per_thread);
  c.chunks = div_ceil(std::max<int64_t>(N, 1), c.per_chunk);
  c.threads = static_cast<int>(std::min<int64_t>(c.threads, c.chunks));
  return c;
}

// Runs body(thread, chunk) for every chunk, chunks dealt round-robin over ch.threads threads.
// With one thread no parallel region is opened, so Eigen may parallelise the GEMM itself.
template <class F>
void for_chunks(const Chunking& ch, F&& body) {
  if (ch.threads <= 1) {
    for (int64_t c = 0; c < ch.chunks; ++c) body(0, c);
    return;
  }
#pragma omp parallel num_threads(ch.threads)
  {
    const int t = omp_get_thread_num();
    for (int64_t c = t; c < ch.chunks; c += ch.threads) body(t, c);
  }
}

// y[N, M, P] = conv(x, wt) (+ bias). wt is the weight [M, Cg, k...] as stored.
template <class T>
void conv_forward(KernelContext& ctx, const ConvShape& cs, const T* x, const T* wt, const T* bias, T* y) {
  const int64_t P = cs.P(), K = cs.K(), Mg = cs.Mg(), Cg = cs.Cg(), I = cs.I(), M = cs.M, C = cs.C;
  const Chunking ch = plan_chunks(ctx.threads(), cs.N, P * K * static_cast<int64_t>(sizeof(T)));
  const int64_t B = ch.per_chunk;
  const int64_t per_thread = B * P * K + B * P * Mg;
  T* scratch = static_cast<T*>(ctx.scratch(sizeof(T) * per_thread * ch.threads));
  for_chunks(ch, [&](int t, int64_t chunk) {
    T* col = scratch + t * per_thread;
    T* yc = col + B * P * K;
    const int64_t n0 = chunk * B, nb = std::min(B, cs.N - n0), ld = nb * P;
    for (int64_t g = 0; g < cs.group; ++g) {
      for (int64_t b = 0; b < nb; ++b) im2col(x + ((n0 + b) * C + g * Cg) * I, cs, col + b * P, ld);
      MapM<T>(yc, ld, Mg).noalias() = MapCM<T>(col, ld, K) * MapCM<T>(wt + g * Mg * K, K, Mg);
      for (int64_t b = 0; b < nb; ++b)
        for (int64_t m = 0; m < Mg; ++m) {
          const T* src = yc + m * ld + b * P;
          T* dst = y + ((n0 + b) * M + g * Mg + m) * P;
          const T bv = bias ? bias[g * Mg + m] : T(0);
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
  if (dx) std::fill(dx, dx + cs.N * C * I, T(0));
  if (dw) std::fill(dw, dw + M * K, T(0));
  if (cs.N == 0 || (!dx && !dw)) return;
  const Chunking ch = plan_chunks(ctx.threads(), cs.N, P * K * static_cast<int64_t>(sizeof(T)));
  const int64_t B = ch.per_chunk;
  // Threads other than the first accumulate dw privately; the sums are added at the end.
  const int64_t acc = (dw && ch.threads > 1) ? M * K : 0;
  const int64_t per_thread = B * P * K + B * P * Mg + acc;
  T* scratch = static_cast<T*>(ctx.scratch(sizeof(T) * per_thread * ch.threads));
  for_chunks(ch, [&](int t, int64_t chunk) {
    T* col = scratch + t * per_thread;
    T* dyc = col + B * P * K;
    T* dw_acc = (t == 0 || !dw) ? dw : dyc + B * P * Mg;
    if (t > 0 && dw && chunk == t) std::fill(dw_acc, dw_acc + M * K, T(0));
    const int64_t n0 = chunk * B, nb = std::min(B, cs.N - n0), ld = nb * P;
    for (int64_t g = 0; g < cs.group; ++g) {
      for (int64_t m = 0; m < Mg; ++m)
        for (int64_t b = 0; b < nb; ++b)
          std::memcpy(dyc + m * ld + b * P, dy + ((n0 + b) * M + g * Mg + m) * P, sizeof(T) * P);
      MapCM<T> dY(dyc, ld, Mg);
      if (dw) {
        for (int64_t b = 0; b < nb; ++b) im2col(x + ((n0 + b) * C + g * Cg) * I, cs, col + b * P, ld);
        MapM<T>(dw_acc + g * Mg * K, K, Mg).noalias() += MapCM<T>(col, ld, K).transpose() * dY;
      }
      if (dx) {
        MapM<T>(col, ld, K).noalias() = dY * MapCM<T>(wt + g * Mg * K, K, Mg).transpose();
        for (int64_t b = 0; b < nb; ++b) col2im_add(col + b * P, ld, cs, dx + ((n0 + b) * C + g * Cg) * I);
      }
    }
  });
  if (acc)
    for (int t = 1; t < ch.threads; ++t) {
      const T* a = scratch + t * per_thread + B * P * K + B * P * Mg;
      for (int64_t i = 0; i < M * K; ++i) dw[i] += a[i];
    }
}

// db[c] = sum over images and pixels of dy[n, c, :].
template <class T>
void channel_sums(const T* dy, int64_t N, int64_t Ch, int64_t P, T* db) {
  for (int64_t c = 0; c < Ch; ++c) {
    T s = 0;
    for (int64_t n = 0; n < N; ++n) {
      const T* p = dy + (n * Ch + c) * P;
      for (int64_t i = 0; i < P; ++i) s += p[i];
    }
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
      const int64_t total = full - out;
      if (a.auto_pad == "SAME_UPPER") pb = total / 2, pe = total - total / 2;
      else pb = total - total / 2, pe = total / 2;
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

template <class T>
void conv_kernel(KernelContext& ctx) {
  const Tensor &x = ctx.input(0), &w = ctx.input(1);
  ConvShape cs = conv_shape(ctx.node(), x, w);
  const T* bias = nullptr;
  if (ctx.has_input(2)) {
    check_bias(ctx.input(2), cs.M);
    check_same_dtype(ctx.input(2), x, "B", "X");
    bias = ctx.input(2).data<T>();
  }
  Tensor& y = ctx.output(0, output_shape(cs.N, cs.M, cs.w, false), x.dtype());
  conv_forward<T>(ctx, cs, x.data<T>(), w.data<T>(), bias, y.data<T>());
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

}  // namespace

void register_conv_kernels(KernelTable& t) {
  t.add("Conv", by_float<0, conv_kernel<float>, conv_kernel<double>>);
  t.add("ConvTranspose", by_float<0, conv_transpose_kernel<float>, conv_transpose_kernel<double>>);
  t.add(kGraphrunDomain, "ConvGrad", by_float<1, conv_grad_kernel<float>, conv_grad_kernel<double>>);
  t.add(kGraphrunDomain, "ConvTransposeGrad",
        by_float<1, conv_transpose_grad_kernel<float>, conv_transpose_grad_kernel<double>>);
}

}  // namespace graphrun::runtime::cpu

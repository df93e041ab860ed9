// CUDA kernels: rnn family (the CPU's rnn.cc op set): LSTM, GRU, RNN and ai.graphrun LSTMGrad / GRUGrad /
// RNNGrad, f32 and f64. The host plans the node as the CPU does (runtime/kernels/rnn_plan.h). Per direction one cuBLAS GEMM
// projects every step's input (X W^T), then per time step one GEMM gives H_prev R^T and one elementwise kernel
// the gates (GRU: two, around its reset-gated GEMM). The gradients are the CPU's back-propagation through time
// over a recomputed forward; every sum is a GEMM or one thread's loop in the CPU's order: deterministic, no
// atomics. Rows of the input projection and of the gates' gradients stay in X's layout, so layout 1 needs no
// transposed copies: per-step GEMMs read their rows with a stride.
#include <type_traits>

#include "runtime/kernels/cuda/common.cuh"
#include "runtime/kernels/rnn_plan.h"

namespace graphrun::runtime::cuda {
namespace {

// Row-major C[m, n] = op(A)[m, k] op(B)[k, n] + beta C, leading dimensions in elements (the column-major
// product C^T = op(B)^T op(A)^T, as the CPU's mm).
template <class T>
__global__ void scale_rows_kernel(T* c, int64_t m, int64_t n, int64_t ldc, T beta) {
  GR_GRID_STRIDE(i, m * n) {
    T& v = c[(i / n) * ldc + i % n];
    v = beta == T(0) ? T(0) : beta * v;
  }
}

template <class T>
void mm(KernelContext& ctx, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b,
        int64_t ldb, T beta, T* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    scale_rows_kernel<T><<<grid_for(m * n), kThreads, 0, stream_of(ctx)>>>(c, m, n, ldc, beta);
    GR_LAUNCH_CHECK("rnn_scale_rows");
    return;
  }
  for (int64_t v : {m, n, k, lda, ldb, ldc})
    GR_CHECK(v <= INT32_MAX, ctx.node().op_type << ": a matrix of the recurrence is too large for cuBLAS");
  const cublasHandle_t h = ctx_device(ctx).cublas;
  const cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int im = static_cast<int>(m), in = static_cast<int>(n), ik = static_cast<int>(k);
  const int ilda = static_cast<int>(lda), ildb = static_cast<int>(ldb), ildc = static_cast<int>(ldc);
  const T one = T(1);
  if constexpr (std::is_same_v<T, float>)
    GR_CUBLAS_CHECK(cublasSgemm(h, ob, oa, in, im, ik, &one, b, ildb, a, ilda, &beta, c, ildc));
  else
    GR_CUBLAS_CHECK(cublasDgemm(h, ob, oa, in, im, ik, &one, b, ildb, a, ilda, &beta, c, ildc));
}

// What the device kernels need of the plan, for direction d.
struct Geo {
  int64_t T = 0, N = 0, H = 0, D = 1;
  int d = 0;
  bool layout1 = false, rev = false, has_clip = false, lbr = false;
  double clip = 0;
  RnnAct act = RnnAct::Tanh;  // RNN: this direction's activation
  // Row of step t, sequence n in X (and in the input projections and the gates' gradients).
  __device__ int64_t xrow(int64_t t, int64_t n) const { return layout1 ? n * T + t : t * N + n; }
  __device__ int64_t y_at(int64_t t, int64_t n) const {
    return layout1 ? ((n * T + t) * D + d) * H : ((t * D + d) * N + n) * H;
  }
  __device__ int64_t s_at(int64_t n) const { return layout1 ? (n * D + d) * H : (d * N + n) * H; }
  // The step before t in the direction's order, -1 at its first step.
  __device__ int64_t prev_step(int64_t t) const {
    const int64_t s = rev ? T - 1 - t : t;
    return s == 0 ? -1 : (rev ? t + 1 : t - 1);
  }
};

Geo geo_of(const RnnPlan& r, int d) {
  Geo g;
  g.T = r.T, g.N = r.N, g.H = r.H, g.D = r.D, g.d = d;
  g.layout1 = r.layout1, g.rev = r.reverse(d), g.has_clip = r.has_clip, g.lbr = r.lbr, g.clip = r.clip;
  if (r.cell == RnnCell::RNN) g.act = r.acts[static_cast<size_t>(d)];
  return g;
}

template <class T> __device__ T sigm(T v) { return T(1) / (T(1) + exp(-v)); }
// RNN's activations and their derivatives from the output (runtime/kernels/cpu/rnn.cc's activate and
// activate_grad).
template <class T> __device__ T activate(RnnAct a, T v) {
  return a == RnnAct::Tanh ? tanh(v) : a == RnnAct::Relu ? (v < T(0) ? T(0) : v) : sigm(v);
}
template <class T> __device__ T activate_grad(RnnAct a, T y) {
  return a == RnnAct::Tanh ? T(1) - y * y : a == RnnAct::Relu ? T(y > T(0)) : y * (T(1) - y);
}

// The pre-activation v of gate element idx, clipped when the node clips (and where, for the gradient).
template <class T>
__device__ T act_in(const Geo& g, T v, uint8_t* cl, int64_t idx) {
  if (!g.has_clip) return v;
  const T clip = static_cast<T>(g.clip);
  cl[idx] = v > clip || v < -clip;
  return min(max(v, -clip), clip);
}

// Input projection of gate column k at row xr with its biases: both (W and R side) unless `x_only`.
template <class T>
__device__ T x_in(const T* xw, const T* b, int64_t xr, int64_t GH, int64_t k, bool x_only) {
  return xw[xr * GH + k] + (b ? b[k] + (x_only ? T(0) : b[GH + k]) : T(0));
}

// state[n, j] = src[s_at(n) + j] (initial_h, initial_c, dY_h, dY_c of direction d) or 0 without src.
template <class T>
__global__ void load_state_kernel(Geo g, const T* src, T* state) {
  GR_GRID_STRIDE(i, g.N * g.H) {
    const int64_t n = i / g.H, j = i % g.H;
    state[i] = src ? src[g.s_at(n) + j] : T(0);
  }
}

template <class T>
__global__ void store_state_kernel(Geo g, const T* state, T* dst) {
  GR_GRID_STRIDE(i, g.N * g.H) {
    const int64_t n = i / g.H, j = i % g.H;
    dst[g.s_at(n) + j] = state[i];
  }
}

// The forward's per-step outputs and trace. gates/clipped point at step t's [N, G*H] rows; th, tc, lin at the
// trace's [T, N, H] (null when not tracing).
template <class T>
struct Step {
  const T *xw, *hr, *b, *p = nullptr, *rhr = nullptr;
  const int64_t* lens;
  T *h, *c = nullptr, *y, *gates, *th, *tc = nullptr, *lin = nullptr, *rh = nullptr;
  uint8_t* clipped;
  bool tracing;
};

// The end of step t for state element i of a cell with G gates: Y (zero past the sequence's end) and, when
// tracing, the states (carried past the end, where the gates are zero).
template <class T>
__device__ void end_step(const Geo& g, int64_t t, const Step<T>& s, int64_t i, int G, bool live) {
  const int64_t n = i / g.H, j = i % g.H;
  if (!live && s.tracing)
    for (int q = 0; q < G; ++q) s.gates[n * G * g.H + q * g.H + j] = T(0);
  if (s.y) s.y[g.y_at(t, n) + j] = live ? s.h[i] : T(0);
  if (!s.tracing) return;
  s.th[t * g.N * g.H + i] = s.h[i];
  if (G == 4) s.tc[t * g.N * g.H + i] = s.c[i];
}

template <class T>
__global__ void lstm_step_kernel(Geo g, int64_t t, Step<T> s) {
  const int64_t H = g.H, GH = 4 * H;
  GR_GRID_STRIDE(i, g.N * H) {
    const int64_t n = i / H, j = i % H, o = n * GH + j, xr = g.xrow(t, n);
    const bool live = t < s.lens[n];
    T* gt = s.gates;
    if (live) {
      T cv = s.c[i];
      const T pi = s.p ? s.p[j] * cv : T(0), pf = s.p ? s.p[2 * H + j] * cv : T(0);
      const T ig = sigm(act_in(g, x_in(s.xw, s.b, xr, GH, j, false) + s.hr[o] + pi, s.clipped, o));
      const T fg = sigm(act_in(g, x_in(s.xw, s.b, xr, GH, 2 * H + j, false) + s.hr[o + 2 * H] + pf, s.clipped, o + 2 * H));
      const T cg = tanh(act_in(g, x_in(s.xw, s.b, xr, GH, 3 * H + j, false) + s.hr[o + 3 * H], s.clipped, o + 3 * H));
      cv = fg * cv + ig * cg;
      const T po = s.p ? s.p[H + j] * cv : T(0);
      const T og = sigm(act_in(g, x_in(s.xw, s.b, xr, GH, H + j, false) + s.hr[o + H] + po, s.clipped, o + H));
      s.c[i] = cv;
      s.h[i] = og * tanh(cv);
      gt[o] = ig, gt[o + H] = og, gt[o + 2 * H] = fg, gt[o + 3 * H] = cg;
    }
    end_step(g, t, s, i, 4, live);
  }
}

// RNN step: H = f(X W^T + Wb + H_prev R^T + Rb); the trace's "gate" is the new state.
template <class T>
__global__ void rnn_step_kernel(Geo g, int64_t t, Step<T> s) {
  GR_GRID_STRIDE(i, g.N * g.H) {
    const int64_t n = i / g.H, j = i % g.H, xr = g.xrow(t, n);
    const bool live = t < s.lens[n];
    if (live) {
      const T v = activate(g.act, act_in(g, x_in(s.xw, s.b, xr, g.H, j, false) + s.hr[i], s.clipped, i));
      s.h[i] = v;
      s.gates[i] = v;
    }
    end_step(g, t, s, i, 1, live);
  }
}

// GRU, first half of a step: the update and reset gates (of every sequence, as the CPU) and r * H_prev.
template <class T>
__global__ void gru_zr_kernel(Geo g, int64_t t, Step<T> s) {
  const int64_t H = g.H, GH = 3 * H;
  GR_GRID_STRIDE(i, g.N * H) {
    const int64_t n = i / H, j = i % H, o = n * GH + j, xr = g.xrow(t, n);
    s.gates[o] = sigm(act_in(g, x_in(s.xw, s.b, xr, GH, j, false) + s.hr[o], s.clipped, o));
    s.gates[o + H] = sigm(act_in(g, x_in(s.xw, s.b, xr, GH, H + j, false) + s.hr[o + H], s.clipped, o + H));
    s.rh[i] = s.gates[o + H] * s.h[i];
  }
}

// GRU, second half: the candidate state (r scales H_prev R_h^T + Rb_h with linear_before_reset, else the GEMM
// of r * H_prev gave rhr) and the new state.
template <class T>
__global__ void gru_h_kernel(Geo g, int64_t t, Step<T> s) {
  const int64_t H = g.H, GH = 3 * H;
  GR_GRID_STRIDE(i, g.N * H) {
    const int64_t n = i / H, j = i % H, o = n * GH + j, xr = g.xrow(t, n);
    const bool live = t < s.lens[n];
    T* gt = s.gates;
    if (live) {
      T a;
      const T xh = x_in(s.xw, s.b, xr, GH, 2 * H + j, g.lbr);
      if (g.lbr) {
        const T lin = s.hr[o + 2 * H] + (s.b ? s.b[GH + 2 * H + j] : T(0));
        if (s.tracing) s.lin[t * g.N * H + i] = lin;
        a = xh + gt[o + H] * lin;
      } else {
        a = xh + s.rhr[i];
      }
      const T hh = tanh(act_in(g, a, s.clipped, o + 2 * H));
      gt[o + 2 * H] = hh;
      const T z = gt[o];
      s.h[i] = (T(1) - z) * hh + z * s.h[i];
    }
    end_step(g, t, s, i, 3, live);
  }
}

// Carves one scratch block into 256-byte aligned pieces; the first pass only counts.
class Carve {
 public:
  explicit Carve(char* base = nullptr) : base_(base) {}
  template <class U> U* take(int64_t count) {
    U* p = base_ ? reinterpret_cast<U*>(base_ + used_) : nullptr;
    used_ += (static_cast<size_t>(count) * sizeof(U) + 255) / 256 * 256;
    return p;
  }
  size_t used() const { return used_; }

 private:
  char* base_;
  size_t used_ = 0;
};

// The buffers of one direction's recurrence (reused by the next direction), and of its gradient.
template <class T>
struct Buffers {
  int64_t* lens;
  T *xw, *hr, *h, *c, *rh, *rhr, *gbuf;
  uint8_t* cbuf;
  // trace (gradient only): gates and clip flags [T, N, G*H], states and GRU's linear term [T, N, H]
  T *gates = nullptr, *th = nullptr, *tc = nullptr, *lin = nullptr;
  uint8_t* clipped = nullptr;
  // gradient: previous states by X's rows, GRU's r * H_prev by rows, the gates' gradients by rows,
  // the carried state gradients and the per-step products
  T *hprev = nullptr, *cprev = nullptr, *rhp = nullptr, *dA = nullptr, *dAR = nullptr, *dh = nullptr, *dc = nullptr,
    *dhp = nullptr, *ph = nullptr;

  void carve(Carve& k, const RnnPlan& r, bool grad) {
    const int64_t GH = r.G * r.H, NH = r.N * r.H, TN = r.T * r.N;
    lens = k.take<int64_t>(r.N);
    xw = k.take<T>(TN * GH), hr = k.take<T>(r.N * GH), h = k.take<T>(NH), c = k.take<T>(NH);
    rh = k.take<T>(NH), rhr = k.take<T>(NH), gbuf = k.take<T>(r.N * GH);
    cbuf = k.take<uint8_t>(r.N * GH);
    if (!grad) return;
    gates = k.take<T>(TN * GH), th = k.take<T>(TN * r.H), tc = k.take<T>(TN * r.H), lin = k.take<T>(TN * r.H);
    clipped = k.take<uint8_t>(TN * GH);
    hprev = k.take<T>(TN * r.H), cprev = k.take<T>(TN * r.H), rhp = k.take<T>(TN * r.H);
    dA = k.take<T>(TN * GH), dAR = k.take<T>(TN * GH);
    dh = k.take<T>(NH), dc = k.take<T>(NH), dhp = k.take<T>(NH), ph = k.take<T>(NH);
  }
};

template <class T>
Buffers<T> make_buffers(KernelContext& ctx, const RnnPlan& r, bool grad) {
  Carve count;
  Buffers<T> b;
  b.carve(count, r, grad);
  Carve real(static_cast<char*>(ctx.scratch(count.used())));
  b.carve(real, r, grad);
  GR_CUDA_CHECK(cudaMemcpyAsync(b.lens, r.lens.data(), r.lens.size() * sizeof(int64_t), cudaMemcpyHostToDevice,
                                stream_of(ctx)));
  return b;
}

template <class T> const T* opt_in(KernelContext& ctx, int i) { return ctx.has_input(i) ? dptr<T>(ctx.input(i)) : nullptr; }

RnnPlan plan_on_device(KernelContext& ctx, RnnCell cell) {
  return plan_rnn(ctx, cell, [&ctx](int i) { return host_int64s(ctx, i); });
}

// Runs direction d of the recurrence: Y's rows of d (when y), the final states in b.h / b.c and, when
// tracing, the trace in b.
template <class T>
void run_direction(KernelContext& ctx, const RnnPlan& r, int d, Buffers<T>& b, T* y, bool tracing) {
  const bool lstm = r.cell == RnnCell::LSTM;
  const int64_t H = r.H, N = r.N, GH = r.G * H, TN = r.T * N;
  const Geo g = geo_of(r, d);
  cudaStream_t st = stream_of(ctx);
  const T* w = dptr<T>(ctx.input(1)) + d * GH * r.I;
  const T* rw = dptr<T>(ctx.input(2)) + d * GH * H;
  mm<T>(ctx, false, true, TN, GH, r.I, dptr<T>(ctx.input(0)), r.I, w, r.I, T(0), b.xw, GH);
  const T* h0 = opt_in<T>(ctx, 5);
  const T* c0 = lstm ? opt_in<T>(ctx, 6) : nullptr;
  load_state_kernel<T><<<grid_for(N * H), kThreads, 0, st>>>(g, h0, b.h);
  load_state_kernel<T><<<grid_for(N * H), kThreads, 0, st>>>(g, c0, b.c);
  GR_LAUNCH_CHECK("rnn_load_state");
  if (tracing && r.has_clip) GR_CUDA_CHECK(cudaMemsetAsync(b.clipped, 0, TN * GH, st));
  Step<T> s;
  s.xw = b.xw, s.hr = b.hr, s.rhr = b.rhr, s.lens = b.lens;
  s.b = opt_in<T>(ctx, 3);
  if (const T* p = lstm ? opt_in<T>(ctx, 7) : nullptr) s.p = p + d * 3 * H;
  if (s.b) s.b += d * 2 * GH;
  s.h = b.h, s.c = b.c, s.rh = b.rh, s.y = y, s.th = b.th, s.tc = b.tc, s.lin = b.lin, s.tracing = tracing;
  for (int64_t step = 0; step < r.T; ++step) {
    const int64_t t = g.rev ? r.T - 1 - step : step;
    s.gates = tracing ? b.gates + t * N * GH : b.gbuf;
    s.clipped = tracing && r.has_clip ? b.clipped + t * N * GH : b.cbuf;
    mm<T>(ctx, false, true, N, GH, H, b.h, H, rw, H, T(0), b.hr, GH);
    if (lstm) {
      lstm_step_kernel<T><<<grid_for(N * H), kThreads, 0, st>>>(g, t, s);
    } else if (r.cell == RnnCell::RNN) {
      rnn_step_kernel<T><<<grid_for(N * H), kThreads, 0, st>>>(g, t, s);
    } else {
      gru_zr_kernel<T><<<grid_for(N * H), kThreads, 0, st>>>(g, t, s);
      if (!r.lbr) mm<T>(ctx, false, true, N, H, H, b.rh, H, rw + 2 * H * H, H, T(0), b.rhr, H);
      gru_h_kernel<T><<<grid_for(N * H), kThreads, 0, st>>>(g, t, s);
    }
    GR_LAUNCH_CHECK("rnn_step");
  }
}

template <class T>
void rnn_forward(KernelContext& ctx, RnnCell cell) {
  const RnnPlan r = plan_on_device(ctx, cell);
  const DType dt = ctx.input(0).dtype();
  T* y = ctx.has_output(0) ? dptr<T>(ctx.output(0, r.y_shape(), dt)) : nullptr;
  T* yh = ctx.has_output(1) ? dptr<T>(ctx.output(1, r.s_shape(), dt)) : nullptr;
  T* yc = cell == RnnCell::LSTM && ctx.has_output(2) ? dptr<T>(ctx.output(2, r.s_shape(), dt)) : nullptr;
  Buffers<T> b = make_buffers<T>(ctx, r, false);
  cudaStream_t st = stream_of(ctx);
  for (int d = 0; d < r.D; ++d) {
    run_direction<T>(ctx, r, d, b, y, false);
    const Geo g = geo_of(r, d);
    if (yh) store_state_kernel<T><<<grid_for(r.N * r.H), kThreads, 0, st>>>(g, b.h, yh);
    if (yc) store_state_kernel<T><<<grid_for(r.N * r.H), kThreads, 0, st>>>(g, b.c, yc);
    GR_LAUNCH_CHECK("rnn_store_state");
  }
}

// ---- gradients ----

// The states before each step, by X's rows (h0 / c0 before a direction's first step): the right operands
// of dR's GEMM and the peepholes' and GRU's per-step products.
template <class T>
__global__ void prev_states_kernel(Geo g, const T* trace, const T* first, T* out) {
  GR_GRID_STRIDE(i, g.T * g.N * g.H) {
    const int64_t j = i % g.H, tn = i / g.H, t = tn / g.N, n = tn % g.N, tp = g.prev_step(t);
    out[g.xrow(t, n) * g.H + j] = tp < 0 ? first[n * g.H + j] : trace[(tp * g.N + n) * g.H + j];
  }
}

// The step's output gradient added to the carried one.
template <class T>
__device__ T step_dh(const Geo& g, const T* dh, const T* dy, int64_t t, int64_t n, int64_t j, bool live) {
  return dh[n * g.H + j] + (dy && live ? dy[g.y_at(t, n) + j] : T(0));
}

template <class T>
__device__ T live_mask(const Geo& g, const uint8_t* clipped, int64_t idx) {
  return g.has_clip && clipped[idx] ? T(0) : T(1);
}

struct BackStep {
  const int64_t* lens;
  const uint8_t* clipped;  // step t's [N, G*H] clip flags
};

// LSTM step t backwards: the gates' gradients into dA's rows, dC carried.
template <class T>
__global__ void lstm_back_kernel(Geo g, int64_t t, BackStep bs, const T* gates, const T* cs, const T* cprev,
                                 const T* p, const T* dy, const T* dh, T* dc, T* dA) {
  const int64_t H = g.H, GH = 4 * H;
  GR_GRID_STRIDE(k, g.N * H) {
    const int64_t n = k / H, j = k % H, o = n * GH + j;
    if (t >= bs.lens[n]) continue;
    const int64_t xr = g.xrow(t, n);
    const T ig = gates[o], og = gates[o + H], fg = gates[o + 2 * H], cg = gates[o + 3 * H];
    const T dH = step_dh(g, dh, dy, t, n, j, true), tc = tanh(cs[k]), cp = cprev[xr * H + j];
    const T dao = dH * tc * og * (T(1) - og) * live_mask<T>(g, bs.clipped, o + H);
    const T dC = dc[k] + dH * og * (T(1) - tc * tc) + (p ? p[H + j] * dao : T(0));
    const T dai = dC * cg * ig * (T(1) - ig) * live_mask<T>(g, bs.clipped, o);
    const T daf = dC * cp * fg * (T(1) - fg) * live_mask<T>(g, bs.clipped, o + 2 * H);
    const T dag = dC * ig * (T(1) - cg * cg) * live_mask<T>(g, bs.clipped, o + 3 * H);
    dc[k] = dC * fg + (p ? p[j] * dai + p[2 * H + j] * daf : T(0));
    T* da = dA + xr * GH + j;
    da[0] = dai, da[H] = dao, da[2 * H] = daf, da[3 * H] = dag;
  }
}

// RNN step t backwards: dA = dH f'(H) (zero past a sequence's end, where dA was cleared).
template <class T>
__global__ void rnn_back_kernel(Geo g, int64_t t, BackStep bs, const T* gates, const T* dy, const T* dh, T* dA) {
  GR_GRID_STRIDE(k, g.N * g.H) {
    const int64_t n = k / g.H, j = k % g.H;
    if (t >= bs.lens[n]) continue;
    const T dH = step_dh(g, dh, dy, t, n, j, true);
    dA[g.xrow(t, n) * g.H + j] = dH * activate_grad(g.act, gates[k]) * live_mask<T>(g, bs.clipped, k);
  }
}

// GRU step t backwards, first half: the update and candidate gates' gradients (dA's rows), dH z into dhp,
// r * H_prev by rows for dR_h.
template <class T>
__global__ void gru_back_zh_kernel(Geo g, int64_t t, BackStep bs, const T* gates, const T* hprev, const T* dy,
                                   const T* dh, T* dhp, T* rhp, T* dA) {
  const int64_t H = g.H, GH = 3 * H;
  GR_GRID_STRIDE(k, g.N * H) {
    const int64_t n = k / H, j = k % H, o = n * GH + j, xr = g.xrow(t, n);
    const bool live = t < bs.lens[n];
    const T z = gates[o], hh = gates[o + 2 * H], dH = live ? step_dh(g, dh, dy, t, n, j, true) : T(0);
    const T hp = hprev[xr * H + j];
    T* da = dA + xr * GH + j;
    da[0] = dH * (hp - hh) * z * (T(1) - z) * live_mask<T>(g, bs.clipped, o);
    da[2 * H] = dH * (T(1) - z) * (T(1) - hh * hh) * live_mask<T>(g, bs.clipped, o + 2 * H);
    dhp[k] = dH * z;
    rhp[xr * H + j] = gates[o + H] * hp;
  }
}

// GRU step t backwards, second half: the reset gate's gradient, through r * (H_prev R_h^T + Rb_h) or
// (r * H_prev) R_h^T (ph: dA_h R_h); dAR holds the R side (its h column as the CPU's after the step: dA_h r
// with linear_before_reset, else dA_h).
template <class T>
__global__ void gru_back_r_kernel(Geo g, int64_t t, BackStep bs, const T* gates, const T* hprev, const T* lin,
                                  const T* ph, T* dhp, T* dA, T* dAR) {
  const int64_t H = g.H, GH = 3 * H;
  GR_GRID_STRIDE(k, g.N * H) {
    const int64_t n = k / H, j = k % H, o = n * GH + j, xr = g.xrow(t, n);
    const T rg = gates[o + H];
    T* da = dA + xr * GH + j;
    T* dar = dAR + xr * GH + j;
    const T dah = da[2 * H];
    const T dr = g.lbr ? dah * lin[(t * g.N + n) * H + j] : ph[k] * hprev[xr * H + j];
    da[H] = dr * rg * (T(1) - rg) * live_mask<T>(g, bs.clipped, o + H);
    dar[0] = da[0];
    dar[H] = da[H];
    dar[2 * H] = g.lbr ? dah * rg : dah;
    if (!g.lbr) dhp[k] += ph[k] * rg;
  }
}

// Past a sequence's end the state was carried unchanged: so is its gradient.
template <class T>
__global__ void carry_dh_kernel(Geo g, int64_t t, const int64_t* lens, const T* dhp, T* dh) {
  GR_GRID_STRIDE(k, g.N * g.H) {
    if (t < lens[k / g.H]) dh[k] = dhp[k];
  }
}

// dB of direction d: column j < G*H sums dA's column j, the rest dRside's, over the rows in the CPU's order.
template <class T>
__global__ void bias_grad_kernel(Geo g, int64_t GH, const T* dA, const T* dRside, T* dB) {
  GR_GRID_STRIDE(col, 2 * GH) {
    const T* src = col < GH ? dA : dRside;
    const int64_t j = col < GH ? col : col - GH;
    T acc = T(0);
    for (int64_t t = 0; t < g.T; ++t)
      for (int64_t n = 0; n < g.N; ++n) acc += src[g.xrow(t, n) * GH + j];
    dB[col] = acc;
  }
}

// dP of direction d: P's i and f parts against the previous cell state, o against the new one, summed in the
// CPU's order (steps backwards, then sequences).
template <class T>
__global__ void peephole_grad_kernel(Geo g, const T* dA, const T* cprev, const T* tc, T* dP) {
  const int64_t H = g.H, GH = 4 * H;
  GR_GRID_STRIDE(col, 3 * H) {
    const int64_t q = col / H, j = col % H;
    T acc = T(0);
    for (int64_t s = g.T - 1; s >= 0; --s) {
      const int64_t t = g.rev ? g.T - 1 - s : s;
      for (int64_t n = 0; n < g.N; ++n) {
        const int64_t xr = g.xrow(t, n);
        const T c = q == 1 ? tc[(t * g.N + n) * H + j] : cprev[xr * H + j];
        acc += dA[xr * GH + q * H + j] * c;
      }
    }
    dP[col] = acc;
  }
}

// LSTMGrad / GRUGrad / RNNGrad: inputs the forward's then dY, dY_h [, dY_c]; outputs dX dW dR dB dinitial_h
// [dinitial_c dP], each optional.
template <class T>
void rnn_backward(KernelContext& ctx, RnnCell cell) {
  const RnnPlan r = plan_on_device(ctx, cell);
  const bool lstm = cell == RnnCell::LSTM, gru = cell == RnnCell::GRU;
  const DType dt = ctx.input(0).dtype();
  const int64_t H = r.H, N = r.N, GH = r.G * H, TN = r.T * N, I = r.I;
  const T* dy = opt_in<T>(ctx, r.nin);
  const T* dyh = opt_in<T>(ctx, r.nin + 1);
  const T* dyc = lstm ? opt_in<T>(ctx, r.nin + 2) : nullptr;
  const T* x = dptr<T>(ctx.input(0));
  auto out = [&](int i, const Shape& s) { return ctx.has_output(i) ? dptr<T>(ctx.output(i, s, dt)) : nullptr; };
  T* dX = out(0, ctx.input(0).shape());
  T* dW = out(1, ctx.input(1).shape());
  T* dR = out(2, ctx.input(2).shape());
  T* dB = out(3, {r.D, 2 * GH});
  T* dh0 = out(4, r.s_shape());
  T* dc0 = lstm ? out(5, r.s_shape()) : nullptr;
  T* dP = lstm ? out(6, {r.D, 3 * H}) : nullptr;
  Buffers<T> b = make_buffers<T>(ctx, r, true);
  cudaStream_t st = stream_of(ctx);
  const unsigned grid_nh = grid_for(N * H);
  for (int d = 0; d < r.D; ++d) {
    const Geo g = geo_of(r, d);
    const T* w = dptr<T>(ctx.input(1)) + d * GH * I;
    const T* rw = dptr<T>(ctx.input(2)) + d * GH * H;
    const T* p = lstm && ctx.has_input(7) ? dptr<T>(ctx.input(7)) + d * 3 * H : nullptr;
    run_direction<T>(ctx, r, d, b, nullptr, true);
    // The initial states again (the recurrence overwrote b.h, b.c): h0 and c0 of direction d.
    load_state_kernel<T><<<grid_nh, kThreads, 0, st>>>(g, opt_in<T>(ctx, 5), b.h);
    load_state_kernel<T><<<grid_nh, kThreads, 0, st>>>(g, lstm ? opt_in<T>(ctx, 6) : nullptr, b.c);
    prev_states_kernel<T><<<grid_for(TN * H), kThreads, 0, st>>>(g, b.th, b.h, b.hprev);
    if (lstm) prev_states_kernel<T><<<grid_for(TN * H), kThreads, 0, st>>>(g, b.tc, b.c, b.cprev);
    load_state_kernel<T><<<grid_nh, kThreads, 0, st>>>(g, dyh, b.dh);
    load_state_kernel<T><<<grid_nh, kThreads, 0, st>>>(g, dyc, b.dc);
    GR_LAUNCH_CHECK("rnn_back_setup");
    GR_CUDA_CHECK(cudaMemsetAsync(b.dA, 0, TN * GH * sizeof(T), st));
    if (gru) GR_CUDA_CHECK(cudaMemsetAsync(b.dAR, 0, TN * GH * sizeof(T), st));
    // Step t's rows of dA / dAR as an [N, G*H] matrix: in layout 1 they lie T rows apart.
    const int64_t ld = r.layout1 ? r.T * GH : GH;
    for (int64_t s = r.T - 1; s >= 0; --s) {
      const int64_t t = g.rev ? r.T - 1 - s : s;
      const int64_t row0 = (r.layout1 ? t : t * N) * GH;
      const BackStep bs{b.lens, r.has_clip ? b.clipped + t * N * GH : nullptr};
      const T* gates = b.gates + t * N * GH;
      if (lstm) {
        lstm_back_kernel<T><<<grid_nh, kThreads, 0, st>>>(g, t, bs, gates, b.tc + t * N * H, b.cprev, p, dy, b.dh, b.dc,
                                                          b.dA);
        GR_LAUNCH_CHECK("lstm_back");
        mm<T>(ctx, false, false, N, H, GH, b.dA + row0, ld, rw, H, T(0), b.dhp, H);
      } else if (!gru) {
        rnn_back_kernel<T><<<grid_nh, kThreads, 0, st>>>(g, t, bs, gates, dy, b.dh, b.dA);
        GR_LAUNCH_CHECK("rnn_back");
        mm<T>(ctx, false, false, N, H, H, b.dA + row0, ld, rw, H, T(0), b.dhp, H);
      } else {
        gru_back_zh_kernel<T><<<grid_nh, kThreads, 0, st>>>(g, t, bs, gates, b.hprev, dy, b.dh, b.dhp, b.rhp, b.dA);
        GR_LAUNCH_CHECK("gru_back_zh");
        if (!r.lbr) mm<T>(ctx, false, false, N, H, H, b.dA + row0 + 2 * H, ld, rw + 2 * H * H, H, T(0), b.ph, H);
        gru_back_r_kernel<T><<<grid_nh, kThreads, 0, st>>>(g, t, bs, gates, b.hprev, b.lin, b.ph, b.dhp, b.dA, b.dAR);
        GR_LAUNCH_CHECK("gru_back_r");
        // Through R: every gate with linear_before_reset, else z and r (the candidate's went through r * H_prev).
        mm<T>(ctx, false, false, N, H, r.lbr ? GH : 2 * H, b.dAR + row0, ld, rw, H, T(1), b.dhp, H);
      }
      carry_dh_kernel<T><<<grid_nh, kThreads, 0, st>>>(g, t, b.lens, b.dhp, b.dh);
      GR_LAUNCH_CHECK("rnn_carry_dh");
    }
    if (dh0) store_state_kernel<T><<<grid_nh, kThreads, 0, st>>>(g, b.dh, dh0);
    if (dc0) store_state_kernel<T><<<grid_nh, kThreads, 0, st>>>(g, b.dc, dc0);
    GR_LAUNCH_CHECK("rnn_store_grad_state");
    if (dX) mm<T>(ctx, false, false, TN, I, GH, b.dA, GH, w, I, d == 0 ? T(0) : T(1), dX, I);
    if (dW) mm<T>(ctx, true, false, GH, I, TN, b.dA, GH, x, I, T(0), dW + d * GH * I, I);
    if (dR) {
      T* dRd = dR + d * GH * H;
      if (!gru) {
        mm<T>(ctx, true, false, GH, H, TN, b.dA, GH, b.hprev, H, T(0), dRd, H);
      } else {
        mm<T>(ctx, true, false, r.lbr ? GH : 2 * H, H, TN, b.dAR, GH, b.hprev, H, T(0), dRd, H);
        if (!r.lbr) mm<T>(ctx, true, false, H, H, TN, b.dAR + 2 * H, GH, b.rhp, H, T(0), dRd + 2 * H * H, H);
      }
    }
    if (dB) bias_grad_kernel<T><<<grid_for(2 * GH), kThreads, 0, st>>>(g, GH, b.dA, gru ? b.dAR : b.dA, dB + d * 2 * GH);
    if (dP) {
      if (p) peephole_grad_kernel<T><<<grid_for(3 * H), kThreads, 0, st>>>(g, b.dA, b.cprev, b.tc, dP + d * 3 * H);
      else GR_CUDA_CHECK(cudaMemsetAsync(dP + d * 3 * H, 0, 3 * H * sizeof(T), st));
    }
    GR_LAUNCH_CHECK("rnn_param_grads");
  }
}

template <RnnCell C, bool Backward>
void rnn_op(KernelContext& ctx) {
  const DType dt = ctx.input(0).dtype();
  auto run = [&](auto tag) {
    using T = decltype(tag);
    if constexpr (Backward) rnn_backward<T>(ctx, C);
    else rnn_forward<T>(ctx, C);
  };
  if (dt == DType::F32) run(float{});
  else if (dt == DType::F64) run(double{});
  else GR_FAIL(ctx.node().op_type << " on CUDA takes f32 or f64, got " << dtype_name(dt));
}

}  // namespace

GR_REGISTER_OPS(rnn) {
  ops.op("LSTM").cuda(locked<rnn_op<RnnCell::LSTM, false>>);
  ops.op("GRU").cuda(locked<rnn_op<RnnCell::GRU, false>>);
  ops.op(kGraphrunDomain, "LSTMGrad").cuda(locked<rnn_op<RnnCell::LSTM, true>>);
  ops.op(kGraphrunDomain, "GRUGrad").cuda(locked<rnn_op<RnnCell::GRU, true>>);
  ops.op("RNN").cuda(locked<rnn_op<RnnCell::RNN, false>>);
  ops.op(kGraphrunDomain, "RNNGrad").cuda(locked<rnn_op<RnnCell::RNN, true>>);
}

}  // namespace graphrun::runtime::cuda

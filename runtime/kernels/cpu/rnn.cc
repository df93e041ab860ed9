// CPU kernels of the ONNX LSTM, GRU and RNN (opsets 7-22: directions, layouts 0 and 1, sequence_lens, clip, LSTM
// peepholes, GRU linear_before_reset, RNN's Tanh/Relu/Sigmoid) and of graphrun's LSTMGrad / GRUGrad / RNNGrad:
// back-propagation through time over gates recomputed from X, W, R, B (the forward saves nothing beyond its inputs).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "runtime/kernels/cpu/gemm.h"
#include "runtime/kernels/cpu/math_common.h"
#include "runtime/kernels/rnn_plan.h"

namespace graphrun::runtime::cpu {
namespace {

using Cell = RnnCell;
using Rnn = RnnPlan;
using Act = RnnAct;

// Row-major C[m, n] = op(A)[m, k] op(B)[k, n] + beta C with leading dimensions (a column-major GEMM of the
// transposes).
template <class T>
void mm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b, int64_t ldb, T beta,
        T* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (int64_t r = 0; r < m; ++r)
      for (int64_t j = 0; j < n; ++j) c[r * ldc + j] = beta == T(0) ? T(0) : beta * c[r * ldc + j];
    return;
  }
  gemm(tb, ta, n, m, k, T(1), b, ldb, a, lda, beta, c, ldc);
}

template <class T> T sigmoid(T v) { return T(1) / (T(1) + std::exp(-v)); }

template <class T> T activate(Act a, T v) {
  return a == Act::Tanh ? std::tanh(v) : a == Act::Relu ? std::max(v, T(0)) : sigmoid(v);
}
template <class T> T activate_grad(Act a, T y) {
  return a == Act::Tanh ? T(1) - y * y : a == Act::Relu ? T(y > T(0)) : y * (T(1) - y);
}

Rnn parse(KernelContext& ctx, Cell cell) {
  return plan_rnn(ctx, cell, [&ctx](int i) { return ctx.input(i).as_int64s(); });
}

template <class T> const T* opt_ptr(KernelContext& ctx, int i) { return ctx.has_input(i) ? ptr<T>(ctx.input(i)) : nullptr; }

// What back-propagation needs of one direction, by time step t: the gates after their activations
// (LSTM i o f c, GRU z r h), where clip cut a pre-activation, the states after step t (the carried ones at
// steps past a sequence's length) and, for GRU with linear_before_reset, H_prev R_h^T + Rb_h.
template <class T>
struct Trace {
  std::vector<T> gates, h, c, lin;
  std::vector<uint8_t> clipped;
};

// The inputs of one direction d, layout 0, with X [T, N, I] (copied from layout 1 when needed).
template <class T>
struct DirInputs {
  const T *x, *w, *r, *b = nullptr, *p = nullptr;
  std::vector<T> h0, c0;  // [N, H]
};

template <class T>
DirInputs<T> dir_inputs(KernelContext& ctx, const Rnn& r, int d, const T* x0) {
  DirInputs<T> in;
  const int64_t GH = r.G * r.H;
  in.x = x0;
  in.w = ptr<T>(ctx.input(1)) + d * GH * r.I;
  in.r = ptr<T>(ctx.input(2)) + d * GH * r.H;
  if (const T* b = opt_ptr<T>(ctx, 3)) in.b = b + d * 2 * GH;
  if (r.cell == Cell::LSTM)
    if (const T* p = opt_ptr<T>(ctx, 7)) in.p = p + d * 3 * r.H;
  in.h0.assign(r.N * r.H, T(0));
  in.c0.assign(r.N * r.H, T(0));
  for (int k : {5, 6}) {
    if (k == 6 && r.cell != Cell::LSTM) break;
    const T* s = opt_ptr<T>(ctx, k);
    if (!s) continue;
    std::vector<T>& dst = k == 5 ? in.h0 : in.c0;
    for (int64_t n = 0; n < r.N; ++n) std::copy_n(s + r.s_at(d, n), r.H, dst.data() + n * r.H);
  }
  return in;
}

// X in layout 0 [T, N, I]: the input itself, or a transposed copy in `buf`.
template <class T>
const T* x_layout0(const Rnn& r, const Tensor& x, std::vector<T>& buf) {
  if (!r.layout1) return ptr<T>(x);
  buf.resize(r.T * r.N * r.I);
  const T* px = ptr<T>(x);
  for (int64_t n = 0; n < r.N; ++n)
    for (int64_t t = 0; t < r.T; ++t) std::copy_n(px + (n * r.T + t) * r.I, r.I, buf.data() + (t * r.N + n) * r.I);
  return buf.data();
}

// Runs direction d: writes Y's rows of d (when y), the final states (hN, cN: [N, H]) and the trace (when tr).
template <class T>
void run_direction(const Rnn& r, int d, const DirInputs<T>& in, T* y, T* hN, T* cN, Trace<T>* tr) {
  const bool lstm = r.cell == Cell::LSTM;
  const int64_t H = r.H, N = r.N, GH = r.G * H;
  // Input projections and the biases that add to them, for every step at once: [T * N, G * H].
  std::vector<T> xw(r.T * N * GH);
  mm<T>(false, true, r.T * N, GH, r.I, in.x, r.I, in.w, r.I, T(0), xw.data(), GH);
  if (in.b)
    for (int64_t row = 0; row < r.T * N; ++row)
      for (int64_t j = 0; j < GH; ++j) {
        // GRU with linear_before_reset keeps Rb_h apart: r scales it.
        const bool rb = !(r.cell == Cell::GRU && r.lbr && j >= 2 * H);
        xw[row * GH + j] += in.b[j] + (rb ? in.b[GH + j] : T(0));
      }
  std::vector<T> h = in.h0, c = in.c0, hr(N * GH), rh(N * H), rhr(N * H);
  if (tr) {
    tr->gates.assign(r.T * N * GH, T(0));
    tr->h.assign(r.T * N * H, T(0));
    if (lstm) tr->c.assign(r.T * N * H, T(0));
    if (r.lbr) tr->lin.assign(r.T * N * H, T(0));
    if (r.has_clip) tr->clipped.assign(r.T * N * GH, 0);
  }
  std::vector<T> gbuf(N * GH);
  std::vector<uint8_t> cbuf(N * GH);
  const T clip = static_cast<T>(r.clip);
  for (int64_t s = 0; s < r.T; ++s) {
    const int64_t t = r.reverse(d) ? r.T - 1 - s : s;
    const T* xt = xw.data() + t * N * GH;
    T* g = tr ? tr->gates.data() + t * N * GH : gbuf.data();
    uint8_t* cl = tr && r.has_clip ? tr->clipped.data() + t * N * GH : cbuf.data();
    auto act_in = [&](T v, int64_t idx) {
      if (!r.has_clip) return v;
      cl[idx] = v > clip || v < -clip;
      return std::min(std::max(v, -clip), clip);
    };
    mm<T>(false, true, N, GH, H, h.data(), H, in.r, H, T(0), hr.data(), GH);
    if (lstm) {
      for (int64_t n = 0; n < N; ++n) {
        if (t >= r.lens[n]) continue;
        for (int64_t j = 0; j < H; ++j) {
          const int64_t o = n * GH + j;
          T& cv = c[n * H + j];
          const T pi = in.p ? in.p[j] * cv : T(0), pf = in.p ? in.p[2 * H + j] * cv : T(0);
          const T ig = sigmoid(act_in(xt[o] + hr[o] + pi, o));
          const T fg = sigmoid(act_in(xt[o + 2 * H] + hr[o + 2 * H] + pf, o + 2 * H));
          const T cg = std::tanh(act_in(xt[o + 3 * H] + hr[o + 3 * H], o + 3 * H));
          cv = fg * cv + ig * cg;
          const T po = in.p ? in.p[H + j] * cv : T(0);
          const T og = sigmoid(act_in(xt[o + H] + hr[o + H] + po, o + H));
          h[n * H + j] = og * std::tanh(cv);
          g[o] = ig, g[o + H] = og, g[o + 2 * H] = fg, g[o + 3 * H] = cg;
        }
      }
    } else if (r.cell == Cell::RNN) {
      for (int64_t n = 0; n < N; ++n) {
        if (t >= r.lens[n]) continue;
        for (int64_t j = 0; j < H; ++j) {
          const int64_t o = n * H + j;
          h[o] = g[o] = activate(r.acts[d], act_in(xt[o] + hr[o], o));
        }
      }
    } else {
      for (int64_t n = 0; n < N; ++n)
        for (int64_t j = 0; j < H; ++j) {
          const int64_t o = n * GH + j;
          g[o] = sigmoid(act_in(xt[o] + hr[o], o));
          g[o + H] = sigmoid(act_in(xt[o + H] + hr[o + H], o + H));
          rh[n * H + j] = g[o + H] * h[n * H + j];
        }
      if (!r.lbr) mm<T>(false, true, N, H, H, rh.data(), H, in.r + 2 * H * H, H, T(0), rhr.data(), H);
      for (int64_t n = 0; n < N; ++n) {
        if (t >= r.lens[n]) continue;
        for (int64_t j = 0; j < H; ++j) {
          const int64_t o = n * GH + j;
          T a;
          if (r.lbr) {
            const T lin = hr[o + 2 * H] + (in.b ? in.b[GH + 2 * H + j] : T(0));
            if (tr) tr->lin[(t * N + n) * H + j] = lin;
            a = xt[o + 2 * H] + g[o + H] * lin;
          } else {
            a = xt[o + 2 * H] + rhr[n * H + j];
          }
          const T hh = std::tanh(act_in(a, o + 2 * H));
          g[o + 2 * H] = hh;
          const T z = g[o];
          h[n * H + j] = (T(1) - z) * hh + z * h[n * H + j];
        }
      }
    }
    for (int64_t n = 0; n < N; ++n) {
      const bool live = t < r.lens[n];
      if (y) {
        T* yr = y + r.y_at(t, d, n);
        if (live) std::copy_n(h.data() + n * H, H, yr);
        else std::fill_n(yr, H, T(0));
      }
      if (!live && tr) std::fill_n(g + n * GH, GH, T(0));
    }
    if (tr) {
      std::copy(h.begin(), h.end(), tr->h.begin() + t * N * H);
      if (lstm) std::copy(c.begin(), c.end(), tr->c.begin() + t * N * H);
    }
  }
  if (hN) std::copy(h.begin(), h.end(), hN);
  if (cN) std::copy(c.begin(), c.end(), cN);
}

template <class T>
void rnn_forward(KernelContext& ctx, Cell cell) {
  const Rnn r = parse(ctx, cell);
  const Tensor& x = ctx.input(0);
  std::vector<T> xbuf;
  const T* x0 = x_layout0(r, x, xbuf);
  T* y = ctx.has_output(0) ? ptr<T>(ctx.output(0, r.y_shape(), x.dtype())) : nullptr;
  T* yh = ctx.has_output(1) ? ptr<T>(ctx.output(1, r.s_shape(), x.dtype())) : nullptr;
  T* yc = cell == Cell::LSTM && ctx.has_output(2) ? ptr<T>(ctx.output(2, r.s_shape(), x.dtype())) : nullptr;
  std::vector<T> hN(r.N * r.H), cN(r.N * r.H);
  for (int d = 0; d < r.D; ++d) {
    run_direction<T>(r, d, dir_inputs<T>(ctx, r, d, x0), y, hN.data(), cN.data(), nullptr);
    for (int64_t n = 0; n < r.N; ++n) {
      if (yh) std::copy_n(hN.data() + n * r.H, r.H, yh + r.s_at(d, n));
      if (yc) std::copy_n(cN.data() + n * r.H, r.H, yc + r.s_at(d, n));
    }
  }
}

// LSTMGrad / GRUGrad / RNNGrad: inputs the forward's (X W R B sequence_lens initial_h [initial_c P]) then dY, dY_h
// [, dY_c]; outputs the gradients of X W R B initial_h [initial_c P], each optional.
template <class T>
void rnn_backward(KernelContext& ctx, Cell cell) {
  const Rnn r = parse(ctx, cell);
  const bool lstm = cell == Cell::LSTM;
  const Tensor& x = ctx.input(0);
  const int64_t H = r.H, N = r.N, GH = r.G * H, TN = r.T * N;
  const T* dy = opt_ptr<T>(ctx, r.nin);
  const T* dyh = opt_ptr<T>(ctx, r.nin + 1);
  const T* dyc = lstm ? opt_ptr<T>(ctx, r.nin + 2) : nullptr;
  std::vector<T> xbuf;
  const T* x0 = x_layout0(r, x, xbuf);

  // Outputs: 0 dX, 1 dW, 2 dR, 3 dB, 4 dinitial_h, 5 dinitial_c, 6 dP (LSTM).
  std::vector<T> dx0(TN * r.I, T(0));
  std::vector<T> dW(r.D * GH * r.I), dR(r.D * GH * H), dB(r.D * 2 * GH, T(0)), dP(r.D * 3 * H, T(0));
  std::vector<T> dh0(r.D * N * H), dc0(r.D * N * H);
  for (int d = 0; d < r.D; ++d) {
    const DirInputs<T> in = dir_inputs<T>(ctx, r, d, x0);
    Trace<T> tr;
    run_direction<T>(r, d, in, nullptr, nullptr, nullptr, &tr);
    // dA: gradients of the gates' pre-activations on the X side; dAR: on the R side (GRU's h gate differs).
    std::vector<T> dA(TN * GH, T(0)), dAR(r.cell == Cell::GRU ? TN * GH : 0, T(0));
    std::vector<T> dh(N * H, T(0)), dc(N * H, T(0)), tmp(N * H), dhp(N * H), ph(N * H), dah(N * H), rhp(N * H);
    for (int64_t n = 0; n < N; ++n) {
      if (dyh) std::copy_n(dyh + r.s_at(d, n), H, dh.data() + n * H);
      if (dyc) std::copy_n(dyc + r.s_at(d, n), H, dc.data() + n * H);
    }
    T* dRd = dR.data() + d * GH * H;
    std::fill_n(dRd, GH * H, T(0));
    T* dPd = dP.data() + d * 3 * H;
    const T* ga = tr.gates.data();
    auto live_mask = [&](int64_t t, int64_t idx) {
      return r.has_clip && tr.clipped[t * N * GH + idx] ? T(0) : T(1);
    };
    for (int64_t s = r.T - 1; s >= 0; --s) {
      const bool rev = r.reverse(d);
      const int64_t t = rev ? r.T - 1 - s : s;
      const int64_t tp = s == 0 ? -1 : (rev ? t + 1 : t - 1);
      const T* hp = tp < 0 ? in.h0.data() : tr.h.data() + tp * N * H;
      const T* cp = tp < 0 ? in.c0.data() : (lstm ? tr.c.data() + tp * N * H : nullptr);
      const T* g = ga + t * N * GH;
      T* da = dA.data() + t * N * GH;
      // dH of this step: carried plus the step's own output gradient.
      for (int64_t n = 0; n < N; ++n)
        for (int64_t j = 0; j < H; ++j)
          tmp[n * H + j] = dh[n * H + j] + (dy && t < r.lens[n] ? dy[r.y_at(t, d, n) + j] : T(0));
      if (lstm) {
        const T* cs = tr.c.data() + t * N * H;
        for (int64_t n = 0; n < N; ++n) {
          if (t >= r.lens[n]) continue;
          for (int64_t j = 0; j < H; ++j) {
            const int64_t o = n * GH + j, k = n * H + j;
            const T ig = g[o], og = g[o + H], fg = g[o + 2 * H], cg = g[o + 3 * H];
            const T dH = tmp[k], tc = std::tanh(cs[k]);
            const T dao = dH * tc * og * (T(1) - og) * live_mask(t, o + H);
            T dC = dc[k] + dH * og * (T(1) - tc * tc) + (in.p ? in.p[H + j] * dao : T(0));
            const T dai = dC * cg * ig * (T(1) - ig) * live_mask(t, o);
            const T daf = dC * cp[k] * fg * (T(1) - fg) * live_mask(t, o + 2 * H);
            const T dag = dC * ig * (T(1) - cg * cg) * live_mask(t, o + 3 * H);
            dc[k] = dC * fg + (in.p ? in.p[j] * dai + in.p[2 * H + j] * daf : T(0));
            if (in.p) {
              dPd[j] += dai * cp[k];
              dPd[H + j] += dao * cs[k];
              dPd[2 * H + j] += daf * cp[k];
            }
            da[o] = dai, da[o + H] = dao, da[o + 2 * H] = daf, da[o + 3 * H] = dag;
          }
        }
      } else if (r.cell == Cell::RNN) {
        for (int64_t n = 0; n < N; ++n)
          for (int64_t j = 0; j < H; ++j) {
            const int64_t o = n * H + j;
            da[o] = t < r.lens[n] ? tmp[o] * activate_grad(r.acts[d], g[o]) * live_mask(t, o) : T(0);
          }
      } else {
        T* dar = dAR.data() + t * N * GH;
        for (int64_t n = 0; n < N; ++n)
          for (int64_t j = 0; j < H; ++j) {
            const int64_t o = n * GH + j, k = n * H + j;
            const bool live = t < r.lens[n];
            const T z = g[o], hh = g[o + 2 * H], dH = live ? tmp[k] : T(0);
            da[o] = dH * (hp[k] - hh) * z * (T(1) - z) * live_mask(t, o);
            dah[k] = da[o + 2 * H] = dH * (T(1) - z) * (T(1) - hh * hh) * live_mask(t, o + 2 * H);
            dhp[k] = dH * z;
            rhp[k] = g[o + H] * hp[k];
          }
        // Gradient of the reset gate's product: r * (H_prev R_h^T + Rb_h), or (r * H_prev) R_h^T.
        if (!r.lbr) mm<T>(false, false, N, H, H, dah.data(), H, in.r + 2 * H * H, H, T(0), ph.data(), H);
        for (int64_t n = 0; n < N; ++n)
          for (int64_t j = 0; j < H; ++j) {
            const int64_t o = n * GH + j, k = n * H + j;
            const T rg = g[o + H];
            const T dr = r.lbr ? dah[k] * tr.lin[(t * N + n) * H + j] : ph[k] * hp[k];
            da[o + H] = dr * rg * (T(1) - rg) * live_mask(t, o + H);
            dar[o] = da[o];
            dar[o + H] = da[o + H];
            dar[o + 2 * H] = r.lbr ? dah[k] * rg : T(0);
            if (!r.lbr) dhp[k] += ph[k] * rg;
          }
        mm<T>(false, false, N, H, GH, dar, GH, in.r, H, T(1), dhp.data(), H);
        mm<T>(true, false, GH, H, N, dar, GH, hp, H, T(1), dRd, H);
        if (!r.lbr) {
          mm<T>(true, false, H, H, N, dah.data(), H, rhp.data(), H, T(1), dRd + 2 * H * H, H);
          for (int64_t n = 0; n < N; ++n)
            for (int64_t j = 0; j < H; ++j) dar[n * GH + 2 * H + j] = dah[n * H + j];
        }
      }
      if (r.cell != Cell::GRU) {  // one gate product: dH_prev = dA R, dR += dA^T H_prev
        mm<T>(false, false, N, H, GH, da, GH, in.r, H, T(0), dhp.data(), H);
        mm<T>(true, false, GH, H, N, da, GH, hp, H, T(1), dRd, H);
      }
      // Past a sequence's end the state was carried unchanged: so is its gradient.
      for (int64_t n = 0; n < N; ++n)
        if (t < r.lens[n]) std::copy_n(dhp.data() + n * H, H, dh.data() + n * H);
    }
    std::copy(dh.begin(), dh.end(), dh0.begin() + d * N * H);
    std::copy(dc.begin(), dc.end(), dc0.begin() + d * N * H);
    mm<T>(false, false, TN, r.I, GH, dA.data(), GH, in.w, r.I, T(1), dx0.data(), r.I);
    mm<T>(true, false, GH, r.I, TN, dA.data(), GH, in.x, r.I, T(0), dW.data() + d * GH * r.I, r.I);
    const std::vector<T>& dRside = r.cell == Cell::GRU ? dAR : dA;
    T* dBd = dB.data() + d * 2 * GH;
    for (int64_t row = 0; row < TN; ++row)
      for (int64_t j = 0; j < GH; ++j) {
        dBd[j] += dA[row * GH + j];
        dBd[GH + j] += dRside[row * GH + j];
      }
  }

  const DType dt = x.dtype();
  if (ctx.has_output(0)) {
    T* out = ptr<T>(ctx.output(0, x.shape(), dt));
    for (int64_t t = 0; t < r.T; ++t)
      for (int64_t n = 0; n < N; ++n)
        std::copy_n(dx0.data() + (t * N + n) * r.I, r.I, out + (r.layout1 ? (n * r.T + t) : (t * N + n)) * r.I);
  }
  auto put = [&](int out, const Shape& s, const std::vector<T>& v) {
    if (ctx.has_output(out)) std::copy(v.begin(), v.end(), ptr<T>(ctx.output(out, s, dt)));
  };
  put(1, ctx.input(1).shape(), dW);
  put(2, ctx.input(2).shape(), dR);
  put(3, {r.D, 2 * GH}, dB);
  if (lstm) put(6, {r.D, 3 * H}, dP);
  for (int k = 0; k < (lstm ? 2 : 1); ++k) {
    if (!ctx.has_output(4 + k)) continue;
    const std::vector<T>& src = k == 0 ? dh0 : dc0;
    T* out = ptr<T>(ctx.output(4 + k, r.s_shape(), dt));
    for (int d = 0; d < r.D; ++d)
      for (int64_t n = 0; n < N; ++n) std::copy_n(src.data() + (d * N + n) * H, H, out + r.s_at(d, n));
  }
}

template <Cell C, bool Backward>
void rnn_kernel(KernelContext& ctx) {
  dispatch_float(ctx.input(0).dtype(), ctx.node().op_type.c_str(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (Backward) rnn_backward<T>(ctx, C);
    else rnn_forward<T>(ctx, C);
  });
}

OpSchemaSpec rnn_grad_schema(Cell cell) {
  const bool lstm = cell == Cell::LSTM;
  const std::string op = lstm ? "LSTM" : cell == Cell::GRU ? "GRU" : "RNN";
  using A = OpSchemaSpec::Arity;
  OpSchemaSpec s("gradients of " + op + " (back-propagation through time over gates recomputed from X, W, R, B)");
  s.attr("direction", "as " + op, Attribute::Str("forward"))
      .attr("hidden_size", "as " + op, Attribute::Kind::Int)
      .attr("layout", "as " + op, Attribute::Int(0))
      .attr("clip", "as " + op, Attribute::Kind::Float)
      .attr("activations", "as " + op + (cell == Cell::RNN ? " (Tanh, Relu, Sigmoid)" : " (only the defaults)"),
            Attribute::Kind::Strings)
      .attr("activation_alpha", "as " + op, Attribute::Kind::Floats)
      .attr("activation_beta", "as " + op, Attribute::Kind::Floats);
  if (lstm) s.attr("input_forget", "as LSTM (only 0)", Attribute::Int(0));
  else if (cell == Cell::GRU) s.attr("linear_before_reset", "as GRU", Attribute::Int(0));
  s.input("X", "forward input", "T").input("W", "forward W", "T").input("R", "forward R", "T");
  s.input("B", "forward B", "T", A::Optional)
      .input("sequence_lens", "forward sequence_lens", "T1", A::Optional)
      .input("initial_h", "forward initial_h", "T", A::Optional);
  if (lstm) s.input("initial_c", "forward initial_c", "T", A::Optional).input("P", "forward P", "T", A::Optional);
  s.input("dY", "gradient of Y", "T", A::Optional).input("dY_h", "gradient of Y_h", "T", A::Optional);
  if (lstm) s.input("dY_c", "gradient of Y_c", "T", A::Optional);
  for (const char* name : {"X", "W", "R", "B", "initial_h"}) s.output(std::string("d") + name, std::string("gradient of ") + name, "T", A::Optional);
  if (lstm) s.output("dinitial_c", "gradient of initial_c", "T", A::Optional).output("dP", "gradient of P", "T", A::Optional);
  s.type("T", float_tensor_types(), "float tensors").type("T1", {"tensor(int32)"}, "sequence lengths");
  for (int i = 0; i < 4; ++i) s.output_like(i, i);
  s.output_like(4, 5);
  if (lstm) s.output_like(5, 6).output_like(6, 7);
  return s;
}

}  // namespace

GR_REGISTER_OPS(rnn) {
  ops.op("LSTM").cpu(rnn_kernel<Cell::LSTM, false>);
  ops.op("GRU").cpu(rnn_kernel<Cell::GRU, false>);
  ops.op(kGraphrunDomain, "LSTMGrad").cpu(rnn_kernel<Cell::LSTM, true>).schema(rnn_grad_schema(Cell::LSTM));
  ops.op(kGraphrunDomain, "GRUGrad").cpu(rnn_kernel<Cell::GRU, true>).schema(rnn_grad_schema(Cell::GRU));
  ops.op("RNN").cpu(rnn_kernel<Cell::RNN, false>);
  ops.op(kGraphrunDomain, "RNNGrad").cpu(rnn_kernel<Cell::RNN, true>).schema(rnn_grad_schema(Cell::RNN));
}

}  // namespace graphrun::runtime::cpu

// CPU kernels: optimizer updates, the standard ai.onnx.preview.training ops (Momentum, Adam, Adagrad), exactly
// as the ONNX spec writes them (Momentum with norm_coefficient/alpha/beta is torch.optim.SGD's momentum,
// nesterov and weight_decay with dampening 0 when beta = 1), and ai.graphrun.Adam, torch.optim.Adam's
// placement of epsilon.
#include <cmath>

#include "runtime/kernels/cpu/math_common.h"

namespace graphrun::runtime::cpu {

namespace {

double scalar_f(const Tensor& t, const char* what) {
  GR_CHECK(t.numel() == 1, what << " must be a scalar, got shape " << shape_str(t.shape()));
  return t.as_doubles()[0];
}
int64_t scalar_i(const Tensor& t, const char* what) {
  GR_CHECK(t.numel() == 1, what << " must be a scalar, got shape " << shape_str(t.shape()));
  return t.as_int64s()[0];
}

float required_f(const Node& n, const char* name) {
  GR_CHECK(n.has_attr(name), "attribute '" << name << "' is required");
  return n.attr_f(name, 0);
}

// Inputs R, T, then `groups` runs of n tensors (X.., G.., V.. [, H..]); checks they pair up, all of
// one type: f32, or f64 (a float64 model's parameters with their f64 state).
int64_t tensor_count(KernelContext& ctx, int groups) {
  const int rest = ctx.num_inputs() - 2;
  GR_CHECK(rest > 0 && rest % groups == 0, "expects R, T and " << groups << " equal runs of tensors, got "
                                                                << ctx.num_inputs() << " inputs");
  const int n = rest / groups;
  GR_CHECK(ctx.num_outputs() == (groups - 1) * n,
           "has " << ctx.num_outputs() << " outputs for " << n << " optimized tensors (expected " << (groups - 1) * n << ")");
  for (int i = 0; i < n; ++i)
    for (int g = 0; g < groups; ++g) {
      const Tensor& t = ctx.input(2 + g * n + i);
      const DType want = ctx.input(2).dtype();
      GR_CHECK(want == DType::F32 || want == DType::F64,
               "input 2 is " << dtype_name(want) << ", expected f32 or f64");
      GR_CHECK(t.dtype() == want, "input " << 2 + g * n + i << " is " << dtype_name(t.dtype()) << ", expected "
                                           << dtype_name(want) << " as input 2");
      GR_CHECK(t.shape() == ctx.input(2 + i).shape(), "input " << 2 + g * n + i << " has shape " << shape_str(t.shape())
                                                              << " but the tensor it updates has "
                                                              << shape_str(ctx.input(2 + i).shape()));
    }
  return n;
}

// The updates over elements [k0, k1), as functions of their own: inside an OpenMP loop body the
// compiler reloads the captured pointers on every element and vectorises nothing. An output may be
// its input's buffer, but element k is read and written by iteration k alone: no dependence between
// iterations (ivdep), which spares the seven pointers' pairwise overlap tests (more than GCC makes).
template <bool kNesterov, class T>
void momentum_range(const T* x, const T* g, const T* v, T* xn, T* vn, int64_t k0, int64_t k1, T alpha, T beta_t,
                    T norm, T lr) {
#pragma GCC ivdep
  for (int64_t k = k0; k < k1; ++k) {
    const T gr = norm * x[k] + g[k];
    const T nv = alpha * v[k] + beta_t * gr;
    vn[k] = nv;
    if constexpr (kNesterov) xn[k] = x[k] - lr * (gr + alpha * nv);
    else xn[k] = x[k] - lr * nv;
  }
}

template <class T>
void adam_range(const T* x, const T* g, const T* v, const T* h, T* xn, T* vn, T* hn, int64_t k0, int64_t k1, T alpha,
                T beta, T eps, T norm, T post, T lr_t) {
#pragma GCC ivdep
  for (int64_t k = k0; k < k1; ++k) {
    const T gr = norm * x[k] + g[k];
    const T nv = alpha * v[k] + (1 - alpha) * gr;
    const T nh = beta * h[k] + (1 - beta) * gr * gr;
    vn[k] = nv;
    hn[k] = nh;
    xn[k] = (1 - post) * (x[k] - lr_t * nv / (std::sqrt(nh) + eps));
  }
}

// f over [0, m) in chunks, on the node's threads when m is large.
template <class F>
void for_chunks(KernelContext& ctx, int64_t m, F&& f) {
  constexpr int64_t kChunk = 1 << 14;
  if (m <= (1 << 16) || ctx.threads() <= 1) return f(0, m);
#pragma omp parallel for num_threads(ctx.threads())
  for (int64_t c = 0; c < (m + kChunk - 1) / kChunk; ++c) f(c * kChunk, std::min(m, (c + 1) * kChunk));
}

// Runs f(in, out, k0, k1) over the chunks of each of the node's n optimized tensors, of element type T:
// in[g] is the tensor's run g of the inputs after R and T (X, G, V [, H]), out[o] its output o (X_new,
// V_new [, H_new]), all of X's shape.
template <class T, int kGroups, class F>
void for_each_tensor(KernelContext& ctx, int n, F&& f) {
  for (int i = 0; i < n; ++i) {
    const Tensor& X = ctx.input(2 + i);
    const T* in[kGroups];
    T* out[kGroups - 1];
    for (int g = 0; g < kGroups; ++g) in[g] = ctx.input(2 + g * n + i).data<T>();
    for (int o = 0; o < kGroups - 1; ++o) out[o] = ctx.output(o * n + i, X.shape(), X.dtype()).data<T>();
    for_chunks(ctx, X.numel(), [&](int64_t k0, int64_t k1) { f(in, out, k0, k1); });
  }
}

void momentum(KernelContext& ctx) {
  const Node& node = ctx.node();
  const float alpha = required_f(node, "alpha"), beta = required_f(node, "beta");
  const float norm = required_f(node, "norm_coefficient");
  GR_CHECK(node.has_attr("mode"), "attribute 'mode' is required");
  const std::string mode = node.attr_s("mode", "");
  GR_CHECK(mode == "standard" || mode == "nesterov", "mode '" << mode << "' must be \"standard\" or \"nesterov\"");
  const bool nesterov = mode == "nesterov";
  const double lr = scalar_f(ctx.input(0), "R (learning rate)");
  const int64_t step = scalar_i(ctx.input(1), "T (update count)");
  // In the first iteration (T = 0) the spec uses beta = 1: the buffer starts as the gradient.
  const float beta_t = step > 0 ? beta : 1.0f;
  const int n = static_cast<int>(tensor_count(ctx, 3));
  // The attributes are float (the spec's type); an f64 update widens them, and R, exactly.
  dispatch_float(ctx.input(2).dtype(), "Momentum", [&](auto tag) {
    using T = decltype(tag);
    for_each_tensor<T, 3>(ctx, n, [&](const T* const* in, T* const* out, int64_t k0, int64_t k1) {
      if (nesterov) momentum_range<true, T>(in[0], in[1], in[2], out[0], out[1], k0, k1, alpha, beta_t, norm, T(lr));
      else momentum_range<false, T>(in[0], in[1], in[2], out[0], out[1], k0, k1, alpha, beta_t, norm, T(lr));
    });
  });
}

// kTorchEps: ai.graphrun.Adam, epsilon added to the bias-corrected sqrt(v / (1 - beta^T)) as
// torch.optim.Adam adds it; else the spec's Adam, epsilon added to sqrt(v). With the rate's correction
// sqrt(1 - beta^T) / (1 - alpha^T) applied to the whole step, torch's is the spec's update with epsilon
// scaled by sqrt(1 - beta^T).
template <bool kTorchEps>
void adam(KernelContext& ctx) {
  const Node& node = ctx.node();
  const float alpha = node.attr_f("alpha", 0.9f), beta = node.attr_f("beta", 0.999f);
  const float eps = node.attr_f("epsilon", 1e-6f);
  const float norm = node.attr_f("norm_coefficient", 0.f), post = node.attr_f("norm_coefficient_post", 0.f);
  const double lr = scalar_f(ctx.input(0), "R (learning rate)");
  const int64_t step = scalar_i(ctx.input(1), "T (update count)");
  const double t = static_cast<double>(step);
  // The bias-corrected rate, in double for either type.
  const double lr_t =
      step > 0 ? lr * std::sqrt(1.0 - std::pow(double(beta), t)) / (1.0 - std::pow(double(alpha), t)) : lr;
  const double eps_t = kTorchEps && step > 0 ? eps * std::sqrt(1.0 - std::pow(double(beta), t)) : eps;
  const int n = static_cast<int>(tensor_count(ctx, 4));
  dispatch_float(ctx.input(2).dtype(), "Adam", [&](auto tag) {
    using T = decltype(tag);
    for_each_tensor<T, 4>(ctx, n, [&](const T* const* in, T* const* out, int64_t k0, int64_t k1) {
      adam_range<T>(in[0], in[1], in[2], in[3], out[0], out[1], out[2], k0, k1, alpha, beta, T(eps_t), norm, post,
                    T(lr_t));
    });
  });
}

// ai.onnx.preview.training's Adagrad as the spec writes it (torch.optim.Adagrad's lr_decay, weight_decay and
// eps): r = R / (1 + T * decay_factor), G' = norm_coefficient * X + G, H' = H + G'^2,
// X' = X - r * G' / (sqrt(H') + epsilon).
void adagrad(KernelContext& ctx) {
  const Node& node = ctx.node();
  const float decay = node.attr_f("decay_factor", 0.f), eps = node.attr_f("epsilon", 0.f);
  const float norm = node.attr_f("norm_coefficient", 0.f);
  const double lr = scalar_f(ctx.input(0), "R (learning rate)");
  const int64_t step = scalar_i(ctx.input(1), "T (update count)");
  const double r = lr / (1.0 + static_cast<double>(step) * decay);
  const int n = static_cast<int>(tensor_count(ctx, 3));
  dispatch_float(ctx.input(2).dtype(), "Adagrad", [&](auto tag) {
    using T = decltype(tag);
    for_each_tensor<T, 3>(ctx, n, [&](const T* const* in, T* const* out, int64_t k0, int64_t k1) {
      const T* x = in[0];
      const T* g = in[1];
      const T* h = in[2];
      for (int64_t k = k0; k < k1; ++k) {
        const T gr = static_cast<T>(norm) * x[k] + g[k];
        const T hn = h[k] + gr * gr;
        out[1][k] = hn;
        out[0][k] = x[k] - static_cast<T>(r) * gr / (std::sqrt(hn) + static_cast<T>(eps));
      }
    });
  });
}

}  // namespace

GR_REGISTER_OPS(optim) {
  ops.op(kTrainingDomain, "Momentum").cpu(momentum);
  ops.op(kTrainingDomain, "Adagrad").cpu(adagrad);
  ops.op(kTrainingDomain, "Adam").cpu(adam<false>);
  const auto variadic = OpSchemaSpec::Arity::Variadic;
  ops.op(kGraphrunDomain, "Adam")
      .cpu(adam<true>)
      .schema(OpSchemaSpec("ai.onnx.preview.training's Adam (the same inputs, outputs and attributes), but with "
                           "epsilon added to the bias-corrected sqrt(H / (1 - beta^T)), as torch.optim.Adam adds it "
                           "(the spec adds it to sqrt(H)): what graphrun train's --optimizer adam/adamw runs")
                  .attr("alpha", "decay of the first moment (torch's beta1)", Attribute::Float(0.9f))
                  .attr("beta", "decay of the second moment (torch's beta2)", Attribute::Float(0.999f))
                  .attr("epsilon", "added to the bias-corrected square root of the second moment", Attribute::Float(1e-6f))
                  .attr("norm_coefficient", "L2 coefficient added to the gradient", Attribute::Float(0.f))
                  .attr("norm_coefficient_post", "scales the updated value by (1 - it)", Attribute::Float(0.f))
                  .input("R", "the learning rate", "T1")
                  .input("T", "the update count (bias correction 1 - alpha^T, 1 - beta^T; none at 0)", "tensor(int64)")
                  .input("inputs", "X.., G.., V.., H..: parameters, gradients, first and second moments", "T3", variadic)
                  .output("outputs", "the new X.., V.., H..", "T3", variadic)
                  .type("T1", {"tensor(float)", "tensor(double)"}, "the rate's type")
                  .type("T3", {"tensor(float)", "tensor(double)"}, "the optimized tensors' type")
                  .optimizer_updates(4));
}

}  // namespace graphrun::runtime::cpu

// CPU kernels: optimizer updates, the standard ai.onnx.preview.training ops, exactly as the ONNX
// spec writes them (Momentum with norm_coefficient/alpha/beta is torch.optim.SGD's momentum,
// nesterov and weight_decay with dampening 0 when beta = 1).
#include <cmath>

#include "runtime/kernel.h"

namespace graphrun::runtime::cpu {

namespace {

float scalar_f(const Tensor& t, const char* what) {
  GR_CHECK(t.numel() == 1, what << " must be a scalar, got shape " << shape_str(t.shape()));
  return static_cast<float>(t.as_doubles()[0]);
}
int64_t scalar_i(const Tensor& t, const char* what) {
  GR_CHECK(t.numel() == 1, what << " must be a scalar, got shape " << shape_str(t.shape()));
  return t.as_int64s()[0];
}

float required_f(const Node& n, const char* name) {
  GR_CHECK(n.has_attr(name), "attribute '" << name << "' is required");
  return n.attr_f(name, 0);
}

// Inputs R, T, then `groups` runs of n tensors (X.., G.., V.. [, H..]); checks they pair up.
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
      GR_CHECK(t.dtype() == DType::F32, "input " << 2 + g * n + i << " is " << dtype_name(t.dtype()) << ", expected f32");
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
template <bool kNesterov>
void momentum_range(const float* x, const float* g, const float* v, float* xn, float* vn, int64_t k0, int64_t k1,
                    float alpha, float beta_t, float norm, float lr) {
#pragma GCC ivdep
  for (int64_t k = k0; k < k1; ++k) {
    const float gr = norm * x[k] + g[k];
    const float nv = alpha * v[k] + beta_t * gr;
    vn[k] = nv;
    if constexpr (kNesterov) xn[k] = x[k] - lr * (gr + alpha * nv);
    else xn[k] = x[k] - lr * nv;
  }
}

void adam_range(const float* x, const float* g, const float* v, const float* h, float* xn, float* vn, float* hn,
                int64_t k0, int64_t k1, float alpha, float beta, float eps, float norm, float post, float lr_t) {
#pragma GCC ivdep
  for (int64_t k = k0; k < k1; ++k) {
    const float gr = norm * x[k] + g[k];
    const float nv = alpha * v[k] + (1 - alpha) * gr;
    const float nh = beta * h[k] + (1 - beta) * gr * gr;
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

void momentum(KernelContext& ctx) {
  const Node& node = ctx.node();
  const float alpha = required_f(node, "alpha"), beta = required_f(node, "beta");
  const float norm = required_f(node, "norm_coefficient");
  GR_CHECK(node.has_attr("mode"), "attribute 'mode' is required");
  const std::string mode = node.attr_s("mode", "");
  GR_CHECK(mode == "standard" || mode == "nesterov", "mode '" << mode << "' must be \"standard\" or \"nesterov\"");
  const bool nesterov = mode == "nesterov";
  const float lr = scalar_f(ctx.input(0), "R (learning rate)");
  const int64_t step = scalar_i(ctx.input(1), "T (update count)");
  // In the first iteration (T = 0) the spec uses beta = 1: the buffer starts as the gradient.
  const float beta_t = step > 0 ? beta : 1.0f;
  const int n = static_cast<int>(tensor_count(ctx, 3));
  for (int i = 0; i < n; ++i) {
    const Tensor& X = ctx.input(2 + i);
    const float* x = X.data<float>();
    const float* g = ctx.input(2 + n + i).data<float>();
    const float* v = ctx.input(2 + 2 * n + i).data<float>();
    float* xn = ctx.output(i, X.shape(), DType::F32).data<float>();
    float* vn = ctx.output(n + i, X.shape(), DType::F32).data<float>();
    for_chunks(ctx, X.numel(), [&](int64_t k0, int64_t k1) {
      if (nesterov) momentum_range<true>(x, g, v, xn, vn, k0, k1, alpha, beta_t, norm, lr);
      else momentum_range<false>(x, g, v, xn, vn, k0, k1, alpha, beta_t, norm, lr);
    });
  }
}

void adam(KernelContext& ctx) {
  const Node& node = ctx.node();
  const float alpha = node.attr_f("alpha", 0.9f), beta = node.attr_f("beta", 0.999f);
  const float eps = node.attr_f("epsilon", 1e-6f);
  const float norm = node.attr_f("norm_coefficient", 0.f), post = node.attr_f("norm_coefficient_post", 0.f);
  const float lr = scalar_f(ctx.input(0), "R (learning rate)");
  const int64_t step = scalar_i(ctx.input(1), "T (update count)");
  const double t = static_cast<double>(step);
  const float lr_t = step > 0 ? static_cast<float>(lr * std::sqrt(1.0 - std::pow(double(beta), t)) /
                                                   (1.0 - std::pow(double(alpha), t)))
                              : lr;
  const int n = static_cast<int>(tensor_count(ctx, 4));
  for (int i = 0; i < n; ++i) {
    const Tensor& X = ctx.input(2 + i);
    const float* x = X.data<float>();
    const float* g = ctx.input(2 + n + i).data<float>();
    const float* v = ctx.input(2 + 2 * n + i).data<float>();
    const float* h = ctx.input(2 + 3 * n + i).data<float>();
    float* xn = ctx.output(i, X.shape(), DType::F32).data<float>();
    float* vn = ctx.output(n + i, X.shape(), DType::F32).data<float>();
    float* hn = ctx.output(2 * n + i, X.shape(), DType::F32).data<float>();
    for_chunks(ctx, X.numel(), [&](int64_t k0, int64_t k1) {
      adam_range(x, g, v, h, xn, vn, hn, k0, k1, alpha, beta, eps, norm, post, lr_t);
    });
  }
}

}  // namespace

GR_REGISTER_OPS(optim) {
  ops.op(kTrainingDomain, "Momentum").cpu(momentum);
  ops.op(kTrainingDomain, "Adam").cpu(adam);
}

}  // namespace graphrun::runtime::cpu

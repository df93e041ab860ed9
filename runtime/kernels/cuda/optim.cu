// CUDA kernels: optim family (the CPU's optim.cc op set): the ai.onnx.preview.training Momentum, Adam and
// Adagrad updates. The learning rate R and step count T stay on the device and are read by the kernels.
#include "runtime/kernels/cuda/common.cuh"

namespace graphrun::runtime::cuda {
namespace {

__global__ void momentum_kernel(const float* r, const int64_t* t, const float* x, const float* g, const float* v,
                                float* x_new, float* v_new, int64_t n, float alpha, float beta, float norm, bool nesterov) {
  float lr = *r;
  float beta_adj = *t > 0 ? beta : 1.f;
  GR_GRID_STRIDE(i, n) {
    float gr = norm * x[i] + g[i];
    float vn = alpha * v[i] + beta_adj * gr;
    v_new[i] = vn;
    x_new[i] = nesterov ? x[i] - lr * (gr + alpha * vn) : x[i] - lr * vn;
  }
}

void check_scalars(KernelContext& ctx) {
  const Tensor& R = ctx.input(0);
  const Tensor& T = ctx.input(1);
  GR_CHECK(R.dtype() == DType::F32 && R.numel() == 1, "the learning rate R must be a f32 scalar (the GPU optimizer kernels are f32: float64 training runs on CPU replicas)");
  GR_CHECK(T.dtype() == DType::I64 && T.numel() == 1, "the step count T must be an i64 scalar");
}

void momentum_op(KernelContext& ctx) {
  check_scalars(ctx);
  int k = ctx.num_inputs() - 2;
  GR_CHECK(k > 0 && k % 3 == 0, "Momentum takes R, T, then X..., G..., V... (got " << ctx.num_inputs() << " inputs)");
  int n = k / 3;
  GR_CHECK(ctx.num_outputs() == 2 * n, "Momentum has " << ctx.num_outputs() << " outputs for " << n << " tensors (expected " << 2 * n << ")");
  const Node& node = ctx.node();
  // Required attributes, as on the CPU: a default here would silently train with another rule.
  for (const char* a : {"alpha", "beta", "norm_coefficient", "mode"})
    GR_CHECK(node.has_attr(a), "Momentum: attribute '" << a << "' is required");
  float alpha = node.attr_f("alpha", 0.f), beta = node.attr_f("beta", 0.f), norm = node.attr_f("norm_coefficient", 0.f);
  std::string mode = node.attr_s("mode", "standard");
  GR_CHECK(mode == "standard" || mode == "nesterov", "Momentum mode must be standard or nesterov, got '" << mode << "'");
  for (int i = 0; i < n; ++i) {
    const Tensor& X = ctx.input(2 + i);
    const Tensor& G = ctx.input(2 + n + i);
    const Tensor& V = ctx.input(2 + 2 * n + i);
    GR_CHECK(X.dtype() == DType::F32 && G.shape() == X.shape() && V.shape() == X.shape() && G.dtype() == DType::F32 &&
                 V.dtype() == DType::F32,
             "Momentum: X, G and V of tensor " << i << " must be f32 of one shape");
    Tensor& Xn = ctx.output(i, X.shape(), DType::F32);
    Tensor& Vn = ctx.output(n + i, X.shape(), DType::F32);
    int64_t cnt = X.numel();
    if (!cnt) continue;
    momentum_kernel<<<grid_for(cnt), kThreads, 0, stream_of(ctx)>>>(dptr<float>(ctx.input(0)), dptr<int64_t>(ctx.input(1)),
                                                                    dptr<float>(X), dptr<float>(G), dptr<float>(V), dptr<float>(Xn),
                                                                    dptr<float>(Vn), cnt, alpha, beta, norm, mode == "nesterov");
    GR_LAUNCH_CHECK("momentum");
  }
}

__global__ void adam_kernel(const float* r, const int64_t* t, const float* x, const float* g, const float* v,
                            const float* h, float* x_new, float* v_new, float* h_new, int64_t n, float alpha, float beta,
                            float eps, float norm, float norm_post, bool torch_eps) {
  int64_t step = *t;
  float lr = *r;
  if (step > 0) {
    const double c2 = sqrt(1.0 - pow(static_cast<double>(beta), static_cast<double>(step)));
    lr = static_cast<float>(lr * c2 / (1.0 - pow(static_cast<double>(alpha), static_cast<double>(step))));
    // ai.graphrun.Adam: epsilon on the bias-corrected sqrt(H / (1 - beta^T)), as torch.optim.Adam.
    if (torch_eps) eps = static_cast<float>(eps * c2);
  }
  GR_GRID_STRIDE(i, n) {
    float gr = norm * x[i] + g[i];
    float vn = alpha * v[i] + (1.f - alpha) * gr;
    float hn = beta * h[i] + (1.f - beta) * gr * gr;
    float xn = x[i] - lr * (vn / (sqrtf(hn) + eps));
    v_new[i] = vn;
    h_new[i] = hn;
    x_new[i] = (1.f - norm_post) * xn;
  }
}

template <bool kTorchEps>
void adam_op(KernelContext& ctx) {
  check_scalars(ctx);
  int k = ctx.num_inputs() - 2;
  GR_CHECK(k > 0 && k % 4 == 0, "Adam takes R, T, then X..., G..., V..., H... (got " << ctx.num_inputs() << " inputs)");
  int n = k / 4;
  GR_CHECK(ctx.num_outputs() == 3 * n, "Adam has " << ctx.num_outputs() << " outputs for " << n << " tensors (expected " << 3 * n << ")");
  const Node& node = ctx.node();
  float alpha = node.attr_f("alpha", 0.9f), beta = node.attr_f("beta", 0.999f), eps = node.attr_f("epsilon", 1e-6f);
  float norm = node.attr_f("norm_coefficient", 0.f), norm_post = node.attr_f("norm_coefficient_post", 0.f);
  for (int i = 0; i < n; ++i) {
    const Tensor& X = ctx.input(2 + i);
    const Tensor& G = ctx.input(2 + n + i);
    const Tensor& V = ctx.input(2 + 2 * n + i);
    const Tensor& H = ctx.input(2 + 3 * n + i);
    GR_CHECK(X.dtype() == DType::F32 && G.dtype() == DType::F32 && V.dtype() == DType::F32 && H.dtype() == DType::F32 &&
                 G.shape() == X.shape() && V.shape() == X.shape() && H.shape() == X.shape(),
             "Adam: X, G, V and H of tensor " << i << " must be f32 of one shape");
    Tensor& Xn = ctx.output(i, X.shape(), DType::F32);
    Tensor& Vn = ctx.output(n + i, X.shape(), DType::F32);
    Tensor& Hn = ctx.output(2 * n + i, X.shape(), DType::F32);
    int64_t cnt = X.numel();
    if (!cnt) continue;
    adam_kernel<<<grid_for(cnt), kThreads, 0, stream_of(ctx)>>>(dptr<float>(ctx.input(0)), dptr<int64_t>(ctx.input(1)),
                                                                dptr<float>(X), dptr<float>(G), dptr<float>(V), dptr<float>(H),
                                                                dptr<float>(Xn), dptr<float>(Vn), dptr<float>(Hn), cnt, alpha,
                                                                beta, eps, norm, norm_post, kTorchEps);
    GR_LAUNCH_CHECK("adam");
  }
}

// ai.onnx.preview.training Adagrad, as the CPU computes it (f32).
__global__ void adagrad_kernel(const float* r, const int64_t* t, const float* x, const float* g, const float* h,
                               float* x_new, float* h_new, int64_t n, float decay, float eps, float norm) {
  const float lr = static_cast<float>(static_cast<double>(*r) / (1.0 + static_cast<double>(*t) * decay));
  GR_GRID_STRIDE(i, n) {
    const float gr = norm * x[i] + g[i];
    const float hn = h[i] + gr * gr;
    h_new[i] = hn;
    x_new[i] = x[i] - lr * gr / (sqrtf(hn) + eps);
  }
}

void adagrad_op(KernelContext& ctx) {
  check_scalars(ctx);
  const int k = ctx.num_inputs() - 2;
  GR_CHECK(k > 0 && k % 3 == 0, "Adagrad takes R, T, then X..., G..., H... (got " << ctx.num_inputs() << " inputs)");
  const int n = k / 3;
  GR_CHECK(ctx.num_outputs() == 2 * n, "Adagrad has " << ctx.num_outputs() << " outputs for " << n << " tensors (expected " << 2 * n << ")");
  const Node& node = ctx.node();
  const float decay = node.attr_f("decay_factor", 0.f), eps = node.attr_f("epsilon", 0.f), norm = node.attr_f("norm_coefficient", 0.f);
  for (int i = 0; i < n; ++i) {
    const Tensor &X = ctx.input(2 + i), &G = ctx.input(2 + n + i), &H = ctx.input(2 + 2 * n + i);
    GR_CHECK(X.dtype() == DType::F32 && G.dtype() == DType::F32 && H.dtype() == DType::F32 && G.shape() == X.shape() &&
                 H.shape() == X.shape(),
             "Adagrad: X, G and H of tensor " << i << " must be f32 of one shape");
    Tensor& Xn = ctx.output(i, X.shape(), DType::F32);
    Tensor& Hn = ctx.output(n + i, X.shape(), DType::F32);
    const int64_t cnt = X.numel();
    if (!cnt) continue;
    adagrad_kernel<<<grid_for(cnt), kThreads, 0, stream_of(ctx)>>>(dptr<float>(ctx.input(0)), dptr<int64_t>(ctx.input(1)),
                                                                   dptr<float>(X), dptr<float>(G), dptr<float>(H),
                                                                   dptr<float>(Xn), dptr<float>(Hn), cnt, decay, eps, norm);
    GR_LAUNCH_CHECK("adagrad");
  }
}

}  // namespace

GR_REGISTER_OPS(optim) {
  ops.op(kTrainingDomain, "Adagrad").cuda(locked<adagrad_op>);
  ops.op(kTrainingDomain, "Momentum").cuda(locked<momentum_op>);
  ops.op(kTrainingDomain, "Adam").cuda(locked<adam_op<false>>);
  ops.op(kGraphrunDomain, "Adam").cuda(locked<adam_op<true>>);
}

}  // namespace graphrun::runtime::cuda

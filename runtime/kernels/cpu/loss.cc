// CPU kernels: loss family — SoftmaxCrossEntropyLoss, NegativeLogLikelihoodLoss and, side by side,
// ai.graphrun SoftmaxCrossEntropyLossGrad, which reuses the forward's log_prob output, and
// NegativeLogLikelihoodLossGrad.
#include <algorithm>
#include <cmath>
#include <limits>

#include "runtime/kernels/cpu/exp_f64.h"
#include "runtime/kernels/cpu/math_common.h"

namespace graphrun::runtime::cpu {
namespace {

enum class Reduction { None, Sum, Mean };

Reduction reduction_of(const Node& n, const char* what) {
  const std::string r = n.attr_s("reduction", "mean");
  if (r == "none") return Reduction::None;
  if (r == "sum") return Reduction::Sum;
  if (r == "mean") return Reduction::Mean;
  GR_FAIL(what << ": unknown reduction '" << r << "' (none, sum, mean)");
}

// The layout shared by every op here: scores/log-probs [N, C, d1..dk] seen as [N, C, D], labels [N, d1..dk].
struct ClassLayout {
  int64_t n = 0, c = 0, d = 1;
  bool has_ignore = false;
  int64_t ignore = 0;
  const Tensor* weights = nullptr;
};

ClassLayout class_layout(const KernelContext& ctx, const Tensor& scores, const Tensor& labels, int weights_input,
                         const char* what) {
  ClassLayout L;
  GR_CHECK(scores.rank() >= 2, what << ": scores must have shape [N, C, ...], got " << shape_str(scores.shape()));
  GR_CHECK(labels.dtype() == DType::I64 || labels.dtype() == DType::I32,
           what << ": labels must be int64 or int32, got " << dtype_name(labels.dtype()));
  Shape want = {scores.shape()[0]};
  want.insert(want.end(), scores.shape().begin() + 2, scores.shape().end());
  GR_CHECK(labels.shape() == want, what << ": labels of shape " << shape_str(labels.shape()) << " do not match scores "
                                        << shape_str(scores.shape()) << " (expected " << shape_str(want) << ")");
  L.n = scores.shape()[0];
  L.c = scores.shape()[1];
  L.d = prod(scores.shape(), 2, scores.shape().size());
  L.has_ignore = ctx.node().has_attr("ignore_index");
  L.ignore = ctx.node().attr_i("ignore_index", 0);
  if (ctx.has_input(weights_input)) {
    L.weights = &ctx.input(weights_input);
    GR_CHECK(L.weights->shape() == Shape{L.c}, what << ": weights must have shape [" << L.c << "], got "
                                                    << shape_str(L.weights->shape()));
    GR_CHECK(L.weights->dtype() == scores.dtype(), what << ": weights are " << dtype_name(L.weights->dtype())
                                                        << " but scores are " << dtype_name(scores.dtype()));
  }
  return L;
}

// Per (n, d): the label (or -1 when ignored) and its weight; checks every label's range.
template <class T>
void labels_and_weights(const ClassLayout& L, const Tensor& labels, const char* what, std::vector<int64_t>& lab,
                        std::vector<double>& w, double* weight_sum) {
  lab = labels.as_int64s();
  w.assign(lab.size(), 1.0);
  double ws = 0;
  const T* pw = L.weights ? ptr<T>(*L.weights) : nullptr;
  for (size_t i = 0; i < lab.size(); ++i) {
    if (L.has_ignore && lab[i] == L.ignore) {
      lab[i] = -1;
      w[i] = 0;
      continue;
    }
    GR_CHECK(lab[i] >= 0 && lab[i] < L.c, what << ": label " << lab[i] << " is out of range [0, " << L.c
                                               << ") for " << L.c << " classes");
    if (pw) w[i] = static_cast<double>(pw[lab[i]]);
    ws += w[i];
  }
  *weight_sum = ws;
}

// Writes the loss output from per-element losses (already weighted, 0 where ignored).
template <class T>
void write_loss(KernelContext& ctx, Reduction red, const Tensor& labels, const std::vector<double>& elem,
                double weight_sum) {
  if (red == Reduction::None) {
    Tensor& y = ctx.output(0, labels.shape(), dtype_of<T>());
    T* py = ptr<T>(y);
    for (size_t i = 0; i < elem.size(); ++i) py[i] = static_cast<T>(elem[i]);
    return;
  }
  double s = 0;
  for (double v : elem) s += v;
  if (red == Reduction::Mean) s /= weight_sum;  // 0/0 = NaN when every target is ignored, as ONNX's reference
  Tensor& y = ctx.output(0, {}, dtype_of<T>());
  ptr<T>(y)[0] = static_cast<T>(s);
}

void softmax_cross_entropy_kernel(KernelContext& ctx) {
  const char* what = "SoftmaxCrossEntropyLoss";
  const Tensor &scores = ctx.input(0), &labels = ctx.input(1);
  const ClassLayout L = class_layout(ctx, scores, labels, 2, what);
  const Reduction red = reduction_of(ctx.node(), what);
  dispatch_float(scores.dtype(), what, [&](auto tag) {
    using T = decltype(tag);
    std::vector<int64_t> lab;
    std::vector<double> w;
    double ws = 0;
    labels_and_weights<T>(L, labels, what, lab, w, &ws);
    // log_prob goes to output 1 when the node has it, else to scratch.
    T* lp = ctx.num_outputs() > 1 ? ptr<T>(ctx.output(1, scores.shape(), scores.dtype()))
                                  : static_cast<T*>(ctx.scratch(sizeof(T) * std::max<int64_t>(scores.numel(), 1)));
    const T* px = ptr<T>(scores);
    std::vector<double> elem(lab.size(), 0.0);
    // Per example, every position at once: the loops run along the positions (contiguous in [N, C, D])
    // with one maximum and one sum per position, each taken over the classes in order as a position at a
    // time would, instead of striding D elements per class (a cache miss an element for a language model's
    // [N, V, T] scores). The exponentials are exp_f64's, which vectorize (within 1 ulp of the library's).
    const int64_t D = L.d;
    std::vector<T> mx(D);
    std::vector<double> sum(D), ls(D);
    for (int64_t n = 0; n < L.n; ++n) {
      const T* x = px + n * L.c * D;
      T* y = lp + n * L.c * D;
      std::fill(mx.begin(), mx.end(), -std::numeric_limits<T>::infinity());
      for (int64_t c = 0; c < L.c; ++c)
        for (int64_t d = 0; d < D; ++d) mx[d] = std::max(mx[d], x[c * D + d]);
      std::fill(sum.begin(), sum.end(), 0.0);
      for (int64_t c = 0; c < L.c; ++c)
        for (int64_t d = 0; d < D; ++d) sum[d] += exp_f64(static_cast<double>(x[c * D + d] - mx[d]));
      for (int64_t d = 0; d < D; ++d) ls[d] = std::log(sum[d]);
      for (int64_t c = 0; c < L.c; ++c)
        for (int64_t d = 0; d < D; ++d) y[c * D + d] = static_cast<T>(static_cast<double>(x[c * D + d] - mx[d]) - ls[d]);
      for (int64_t d = 0; d < D; ++d) {
        const int64_t i = n * D + d;
        if (lab[i] >= 0) elem[i] = -w[i] * static_cast<double>(y[lab[i] * D + d]);
      }
    }
    write_loss<T>(ctx, red, labels, elem, ws);
  });
}

void nll_loss_kernel(KernelContext& ctx) {
  const char* what = "NegativeLogLikelihoodLoss";
  const Tensor &input = ctx.input(0), &labels = ctx.input(1);
  const ClassLayout L = class_layout(ctx, input, labels, 2, what);
  const Reduction red = reduction_of(ctx.node(), what);
  dispatch_float(input.dtype(), what, [&](auto tag) {
    using T = decltype(tag);
    std::vector<int64_t> lab;
    std::vector<double> w;
    double ws = 0;
    labels_and_weights<T>(L, labels, what, lab, w, &ws);
    const T* px = ptr<T>(input);
    std::vector<double> elem(lab.size(), 0.0);
    for (int64_t n = 0; n < L.n; ++n)
      for (int64_t d = 0; d < L.d; ++d) {
        const int64_t i = n * L.d + d;
        if (lab[i] >= 0) elem[i] = -w[i] * static_cast<double>(px[(n * L.c + lab[i]) * L.d + d]);
      }
    write_loss<T>(ctx, red, labels, elem, ws);
  });
}

// The gradient ops' dloss: the scores' element type; the labels' shape for reduction none, else one value.
void check_dloss(const KernelContext& ctx, Reduction red, const Tensor& dloss, const Tensor& scores,
                 const Tensor& labels, const char* what) {
  GR_CHECK(dloss.dtype() == scores.dtype(), what << ": dloss is " << dtype_name(dloss.dtype()) << " but the scores are "
                                                 << dtype_name(scores.dtype()));
  if (red == Reduction::None)
    GR_CHECK(dloss.shape() == labels.shape(), what << ": with reduction 'none' dloss must have the labels' shape "
                                                   << shape_str(labels.shape()) << ", got " << shape_str(dloss.shape()));
  else
    GR_CHECK(dloss.numel() == 1, what << ": dloss must be a scalar for reduction '"
                                      << ctx.node().attr_s("reduction", "mean") << "', got shape "
                                      << shape_str(dloss.shape()));
}

// dscores = (softmax - onehot(label)) * weight[label] * dloss, divided by the weight sum for mean.
void softmax_cross_entropy_grad_kernel(KernelContext& ctx) {
  const char* what = "SoftmaxCrossEntropyLossGrad";
  const Tensor &dloss = ctx.input(0), &log_prob = ctx.input(1), &labels = ctx.input(2);
  const ClassLayout L = class_layout(ctx, log_prob, labels, 3, what);
  const Reduction red = reduction_of(ctx.node(), what);
  check_dloss(ctx, red, dloss, log_prob, labels, what);
  Tensor& dx = ctx.output(0, log_prob.shape(), log_prob.dtype());
  dispatch_float(log_prob.dtype(), what, [&](auto tag) {
    using T = decltype(tag);
    std::vector<int64_t> lab;
    std::vector<double> w;
    double ws = 0;
    labels_and_weights<T>(L, labels, what, lab, w, &ws);
    const T* lp = ptr<T>(log_prob);
    const T* g = ptr<T>(dloss);
    T* out = ptr<T>(dx);
    const double scale = red == Reduction::Mean ? 1.0 / ws : 1.0;
    // Along the positions, contiguous, as the forward (an ignored position's factor is 0).
    const int64_t D = L.d;
    std::vector<double> gi(D), row(D);
    for (int64_t n = 0; n < L.n; ++n) {
      for (int64_t d = 0; d < D; ++d) {
        const int64_t i = n * D + d;
        gi[d] = lab[i] < 0 ? 0.0 : static_cast<double>(red == Reduction::None ? g[i] : g[0]) * w[i] * scale;
      }
      const T* x = lp + n * L.c * D;
      T* y = out + n * L.c * D;
      const int64_t* ln = lab.data() + n * D;
      // A class's row in double, then selected into y: loops without branches, which vectorize.
      for (int64_t c = 0; c < L.c; ++c) {
        for (int64_t d = 0; d < D; ++d)
          row[d] = (exp_f64(static_cast<double>(x[c * D + d])) - (c == ln[d] ? 1.0 : 0.0)) * gi[d];
        for (int64_t d = 0; d < D; ++d) y[c * D + d] = static_cast<T>(ln[d] < 0 ? 0.0 : row[d]);
      }
    }
  });
}

// dinput = -weight[label] * dloss at the label's position (0 elsewhere and where ignored), divided by the
// weight sum for mean. The forward's input gives the shape only.
void nll_loss_grad_kernel(KernelContext& ctx) {
  const char* what = "NegativeLogLikelihoodLossGrad";
  const Tensor &dloss = ctx.input(0), &input = ctx.input(1), &labels = ctx.input(2);
  const ClassLayout L = class_layout(ctx, input, labels, 3, what);
  const Reduction red = reduction_of(ctx.node(), what);
  check_dloss(ctx, red, dloss, input, labels, what);
  Tensor& dx = ctx.output(0, input.shape(), input.dtype());
  dispatch_float(input.dtype(), what, [&](auto tag) {
    using T = decltype(tag);
    std::vector<int64_t> lab;
    std::vector<double> w;
    double ws = 0;
    labels_and_weights<T>(L, labels, what, lab, w, &ws);
    const T* g = ptr<T>(dloss);
    T* out = ptr<T>(dx);
    std::fill(out, out + dx.numel(), T(0));
    const double scale = red == Reduction::Mean ? 1.0 / ws : 1.0;
    for (int64_t n = 0; n < L.n; ++n)
      for (int64_t d = 0; d < L.d; ++d) {
        const int64_t i = n * L.d + d;
        if (lab[i] < 0) continue;
        const double gi = static_cast<double>(red == Reduction::None ? g[i] : g[0]);
        out[(n * L.c + lab[i]) * L.d + d] = static_cast<T>(-gi * w[i] * scale);
      }
  });
}

}  // namespace

GR_REGISTER_OPS(loss) {
  ops.op("SoftmaxCrossEntropyLoss").cpu(softmax_cross_entropy_kernel);
  ops.op("NegativeLogLikelihoodLoss").cpu(nll_loss_kernel);
  ops.op(kGraphrunDomain, "NegativeLogLikelihoodLossGrad")
      .cpu(nll_loss_grad_kernel)
      .schema(OpSchemaSpec("gradient of `NegativeLogLikelihoodLoss` w.r.t. its input (the input gives the shape)")
                  .attr("reduction", "as NegativeLogLikelihoodLoss", Attribute::Str("mean"))
                  .attr("ignore_index", "as NegativeLogLikelihoodLoss", Attribute::Kind::Int)
                  .input("dloss", "gradient of the loss", "T")
                  .input("input", "the forward's input", "T")
                  .input("target", "class indices", "Tind")
                  .input("weight", "class weights", "T", OpSchemaSpec::Arity::Optional)
                  .output("dinput", "gradient of the input", "T")
                  .type("T", float_tensor_types(), "float tensors")
                  .type("Tind", {"tensor(int32)", "tensor(int64)"}, "target tensors")
                  .output_like(0, 1));
  ops.op(kGraphrunDomain, "SoftmaxCrossEntropyLossGrad")
      .cpu(softmax_cross_entropy_grad_kernel)
      .schema(OpSchemaSpec("gradient of `SoftmaxCrossEntropyLoss` w.r.t. its scores, from the forward's log_prob output")
                  .attr("reduction", "as SoftmaxCrossEntropyLoss", Attribute::Str("mean"))
                  .attr("ignore_index", "as SoftmaxCrossEntropyLoss", Attribute::Kind::Int)
                  .input("dloss", "gradient of the loss", "T")
                  .input("log_prob", "the forward's log_prob output", "T")
                  .input("labels", "class indices", "Tind")
                  .input("weights", "class weights", "T", OpSchemaSpec::Arity::Optional)
                  .output("dscores", "gradient of the scores", "T")
                  .type("T", float_tensor_types(), "float tensors")
                  .type("Tind", {"tensor(int32)", "tensor(int64)"}, "label tensors")
                  .output_like(0, 1));
}

}  // namespace graphrun::runtime::cpu

// attach_loss: appends the training loss to a forward graph (cross-entropy on logits with int64 labels,
// or mean squared error against a float target), as a new `labels` input and a scalar `loss` output;
// cross-entropy optionally with label smoothing, as torch.nn.CrossEntropyLoss(label_smoothing=eps); or the
// model's own loss (an output it computes, averaged to a scalar), with no labels input.
#include "autodiff/autodiff.h"

#include <sstream>

namespace graphrun::autodiff {

namespace {
const passes::PassInfo& kInfo =
    passes::register_pass("attach_loss", "adds the labels input, the loss node(s) and the scalar loss output");

// A scalar Constant node of type t (f32 or f64: what the backward pass takes) named after `name`.
std::string scalar_constant(Graph& g, const std::string& name, DType t, double v) {
  const std::string out = g.unique_name(name);
  Tensor c = t == DType::F64 ? Tensor::scalar<double>(v) : Tensor::scalar<float>(static_cast<float>(v));
  Node n{out, "Constant", "", {}, {out}, {}};
  n.attrs["value"] = Attribute::Tens(std::move(c));
  g.add_node(std::move(n));
  g.values[out] = ValueInfo{t, true, {}};
  return out;
}

// torch.nn.CrossEntropyLoss(label_smoothing=eps), reduction mean, no weights:
//   loss = (1 - eps) * nll + eps * mean_positions(-(1/C) sum_c log_prob_c)
//        = (1 - eps) * nll + (-eps) * ReduceSum(log_prob) / Size(log_prob)
// (the mean over every position and class). log_prob is SoftmaxCrossEntropyLoss's own output
// (LogSoftmax of the scores on the class axis), whose gradient its rule adds to the scores'. Every node
// is a standard op with a CPU and a CUDA kernel, and so is every node of its gradient: the count is
// Size (metadata; the batch is symbolic) cast to the loss type, as sync_batchnorm counts a shard, where
// ReduceMean's gradient would count a symbolic shape by summing ones from ConstantOfShape. `loss` is
// still one scalar mean over the shard's positions, so the replicas' loss_scale seed (shard / global
// batch) weighs it as it weighs the plain cross-entropy.
void append_label_smoothing(Graph& g, const std::string& nll, const std::string& log_prob, const std::string& loss,
                            DType t, double eps) {
  GR_CHECK(eps > 0 && eps < 1, "attach_loss: label smoothing must be in [0, 1), got " << eps);
  GR_CHECK(t == DType::F32 || t == DType::F64,
           "attach_loss: label smoothing needs f32 or f64 scores, not " << dtype_name(t));
  const ValueInfo scalar{t, true, {}};
  const std::string sum = g.unique_name(loss + "_smoothing_sum");
  Node rs{sum, "ReduceSum", "", {log_prob}, {sum}, {}};
  rs.attrs["keepdims"] = Attribute::Int(0);  // no axes: every position and class
  g.add_node(std::move(rs));
  const std::string size = g.unique_name(loss + "_smoothing_size"), count = g.unique_name(loss + "_smoothing_count");
  g.add_node(Node{size, "Size", "", {log_prob}, {size}, {}});
  Node cast{count, "Cast", "", {size}, {count}, {}};
  cast.attrs["to"] = Attribute::Int(static_cast<int64_t>(t));
  g.add_node(std::move(cast));
  const std::string mean = g.unique_name(loss + "_smoothing_mean");
  g.add_node(Node{mean, "Div", "", {sum, count}, {mean}, {}});
  g.values[size] = ValueInfo{DType::I64, true, {}};
  g.values[sum] = g.values[count] = g.values[mean] = scalar;
  const std::string keep = scalar_constant(g, loss + "_one_minus_eps", t, 1 - eps);
  const std::string neg_eps = scalar_constant(g, loss + "_minus_eps", t, -eps);
  const std::string nll_part = g.unique_name(loss + "_nll_scaled"), smooth_part = g.unique_name(loss + "_smoothing");
  g.add_node(Node{nll_part, "Mul", "", {nll, keep}, {nll_part}, {}});
  g.add_node(Node{smooth_part, "Mul", "", {mean, neg_eps}, {smooth_part}, {}});
  g.values[nll_part] = g.values[smooth_part] = g.values[nll] = scalar;
  g.add_node(Node{g.unique_name(loss + "_label_smoothing"), "Add", "", {nll_part, smooth_part}, {loss}, {}});
}

}  // namespace

const char* loss_kind_name(LossKind k) {
  switch (k) {
    case LossKind::CrossEntropy:
      return "cross-entropy";
    case LossKind::MSE:
      return "mse";
    case LossKind::Output:
      return "output";
  }
  return "?";
}

bool parse_loss_kind(const std::string& word, LossKind* k) {
  for (LossKind c : {LossKind::CrossEntropy, LossKind::MSE, LossKind::Output})
    if (word == loss_kind_name(c)) return *k = c, true;
  return false;
}

Graph attach_loss(const Graph& forward, const LossOptions& opts) {
  GR_CHECK(opts.label_smoothing >= 0 && opts.label_smoothing < 1,
           "attach_loss: label smoothing must be in [0, 1), got " << opts.label_smoothing);
  GR_CHECK(opts.label_smoothing == 0 || opts.kind == LossKind::CrossEntropy,
           "attach_loss: label smoothing is for cross-entropy, not mse");
  Graph g = forward;
  GR_CHECK(!g.outputs.empty(), "attach_loss: the model has no outputs");
  const std::string out = opts.output.empty() ? g.outputs[0] : opts.output;
  if (!g.is_output(out)) {
    std::string names;
    for (const auto& o : g.outputs) names += (names.empty() ? "" : ", ") + o;
    GR_FAIL("the model has no output named '" << out << "' for the loss (--loss-output; its outputs: " << names << ")");
  }
  const bool own = opts.kind == LossKind::Output;
  for (const std::string& name : {opts.labels, opts.loss})
    GR_CHECK((own && name == opts.labels) ||
                 (!g.is_input(name) && !g.is_initializer(name) && g.producer(name) < 0 && !g.info(name)),
             "attach_loss: the model already has a value named '" << name << "', the name graphrun's loss gives its "
                                                                  << (name == opts.labels ? "targets" : "value")
                                                                  << ": rename it in the model");
  const ValueInfo* oi = g.info(out);
  DType t = oi ? oi->dtype : DType::F32;
  if (t == DType::Undefined) t = DType::F32;
  GR_CHECK(dtype_is_float(t), "attach_loss: output '" << out << "' is " << dtype_name(t) << ", not a float tensor");
  g.unique_name(opts.loss);  // reserve both names before generating others
  if (!own) g.unique_name(opts.labels);

  Node loss;
  if (own) {
    // The model's own loss: a scalar as it is, anything else averaged (per-example losses [N] give their mean,
    // the reduction torch's losses default to), so that the replicas' loss_scale seed (shard / global batch)
    // weighs it as it weighs the built-in losses.
    const bool scalar = oi && oi->has_shape && oi->shape.empty();
    Node n{g.unique_name(opts.loss + (scalar ? "_output" : "_mean")),
           scalar ? "Identity" : "ReduceMean",
           "",
           {out},
           {opts.loss},
           {}};
    if (!scalar) n.attrs["keepdims"] = Attribute::Int(0);  // no axes: the mean over every element
    g.add_node(std::move(n));
    g.values[opts.loss] = ValueInfo{t, true, {}};
    g.outputs.push_back(opts.loss);
    return g;
  }
  if (opts.kind == LossKind::CrossEntropy) {
    GR_CHECK(g.opset("") >= 12, "attach_loss: cross-entropy uses SoftmaxCrossEntropyLoss, which needs opset >= 12; "
                                "the model imports opset " << g.opset(""));
    GR_CHECK(!oi || !oi->has_shape || oi->shape.size() >= 2,
             "attach_loss: cross-entropy needs logits of shape [N, classes, ...]; output '" << out << "' is "
                                                                                          << oi->str());
    GR_CHECK(!opts.classes_last || !oi || !oi->has_shape || oi->shape.size() >= 3,
             "attach_loss: per-position classes need scores [N, positions.., classes]; output '" << out << "' is "
                                                                                              << oi->str());
    ValueInfo labels{DType::I64, false, {}};
    if (oi && oi->has_shape) {
      labels.has_shape = true;
      labels.shape.push_back(oi->shape[0]);
      const size_t r = oi->shape.size();
      for (size_t i = opts.classes_last ? 1 : 2; i < (opts.classes_last ? r - 1 : r); ++i) labels.shape.push_back(oi->shape[i]);
    }
    g.values[opts.labels] = labels;
    std::string scores = out;
    if (opts.classes_last) {
      // [N, d1.., C] -> [N, C, d1..]: the layout SoftmaxCrossEntropyLoss reads. (Needs the rank.)
      GR_CHECK(oi && oi->has_shape, "attach_loss: per-position classes need the rank of output '" << out << "'");
      const int64_t r = static_cast<int64_t>(oi->shape.size());
      std::vector<int64_t> perm{0, r - 1};
      for (int64_t i = 1; i < r - 1; ++i) perm.push_back(i);
      scores = g.unique_name(out + "_classes_first");
      Node tr{scores, "Transpose", "", {out}, {scores}, {}};
      tr.attrs["perm"] = Attribute::Ints(perm);
      g.add_node(std::move(tr));
      ValueInfo tv{t, true, {oi->shape[0], oi->shape[r - 1]}};
      for (int64_t i = 1; i < r - 1; ++i) tv.shape.push_back(oi->shape[i]);
      g.values[scores] = tv;
    }
    loss.op_type = "SoftmaxCrossEntropyLoss";
    loss.name = g.unique_name(opts.loss + "_xent");
    loss.inputs = {scores, opts.labels};
    // log_prob is what the backward reads (SoftmaxCrossEntropyLossGrad): the forward keeps it.
    std::string log_prob = g.unique_name(out + "_log_prob");
    const bool smooth = opts.label_smoothing > 0;
    const std::string nll = smooth ? g.unique_name(opts.loss + "_nll") : opts.loss;
    loss.outputs = {nll, log_prob};
    loss.attrs["reduction"] = Attribute::Str("mean");
    if (const ValueInfo* si = g.info(scores)) g.values[log_prob] = *si;
    g.add_node(std::move(loss));
    if (smooth) append_label_smoothing(g, nll, log_prob, opts.loss, t, opts.label_smoothing);
  } else {
    g.values[opts.labels] = oi ? *oi : ValueInfo{t, false, {}};
    std::string diff = g.unique_name(opts.loss + "_diff"), sq = g.unique_name(opts.loss + "_sq");
    g.add_node(Node{diff, "Sub", "", {out, opts.labels}, {diff}, {}});
    g.add_node(Node{sq, "Mul", "", {diff, diff}, {sq}, {}});
    Node mean{g.unique_name(opts.loss + "_mean"), "ReduceMean", "", {sq}, {opts.loss}, {}};
    mean.attrs["keepdims"] = Attribute::Int(0);  // no axes: the mean over every element, as torch's MSELoss
    g.add_node(std::move(mean));
    if (oi) g.values[diff] = g.values[sq] = *oi;
  }
  g.inputs.push_back(opts.labels);
  g.values[opts.loss] = ValueInfo{t, true, {}};
  g.outputs.push_back(opts.loss);
  return g;
}

passes::Pass attach_loss_pass(const LossOptions& opts) {
  std::vector<std::pair<std::string, std::string>> kv{{"loss", loss_kind_name(opts.kind)}, {"output", opts.output}};
  if (opts.kind != LossKind::Output) kv.emplace_back("labels", opts.labels);
  if (opts.classes_last) kv.emplace_back("classes", "last axis");
  if (opts.label_smoothing > 0) {
    std::ostringstream eps;
    eps << opts.label_smoothing;
    kv.emplace_back("label_smoothing", eps.str());
  }
  return passes::make_pass(kInfo, passes::format_options(kv), [opts](const Graph& g) { return attach_loss(g, opts); });
}

}  // namespace graphrun::autodiff

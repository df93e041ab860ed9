// Pass add_metrics: the correct count (ArgMax, Equal, Cast, ReduceSum), the summed cross-entropy and
// their accumulators (Add into an initializer the executor updates as state).
#include "graph/passes/add_metrics.h"

namespace graphrun::passes {

namespace {

// Appends one node; its output is named after `out` (made unique), the node after its output.
std::string append(Graph& g, const char* op, std::vector<std::string> inputs, const std::string& out,
                   std::map<std::string, Attribute> attrs = {}) {
  Node n;
  n.op_type = op;
  n.outputs = {g.unique_name(out)};
  n.name = g.unique_name(n.outputs[0] + "/" + op);
  n.inputs = std::move(inputs);
  n.attrs = std::move(attrs);
  return g.add_node(std::move(n)).outputs[0];
}

}  // namespace

std::string append_correct_count(Graph& g, const std::string& scores, const std::string& labels, bool classes_last) {
  const std::string predicted = append(g, "ArgMax", {scores}, "graphrun.predicted",
                                       {{"axis", Attribute::Int(classes_last ? -1 : 1)}, {"keepdims", Attribute::Int(0)}});
  const std::string hit = append(g, "Equal", {predicted, labels}, "graphrun.hit");
  const std::string hit_f32 = append(g, "Cast", {hit}, "graphrun.hit_f32", {{"to", Attribute::Int(static_cast<int64_t>(DType::F32))}});
  return append(g, "ReduceSum", {hit_f32}, "graphrun.correct", {{"keepdims", Attribute::Int(0)}});
}

StepFigures append_step_figures(Graph& g, const std::string& loss, const std::string& scores,
                                const std::string& labels, bool count, bool classes_last) {
  const ValueInfo* li = g.info(loss);
  const ValueInfo* si = g.info(scores);
  const DType t = li && li->dtype != DType::Undefined ? li->dtype : si ? si->dtype : DType::Undefined;
  StepFigures f;
  f.loss = t == DType::F64 ? append(g, "Cast", {loss}, "graphrun.loss_f32", {{"to", Attribute::Int(static_cast<int64_t>(DType::F32))}})
                           : loss;
  f.correct = count ? append_correct_count(g, scores, labels, classes_last) : f.loss;
  return f;
}

Graph add_metrics(const Graph& graph, const std::string& scores, Metrics* m, bool classes_last) {
  Graph g = graph;
  GR_CHECK(g.is_output(scores), "add_metrics: graph '" << g.name << "' has no output named '" << scores << "'");
  m->labels = g.unique_name("graphrun.labels");
  g.inputs.push_back(m->labels);
  // The labels: the scores' shape without the class axis, their batch too (a model's own symbol: "N" may be
  // its sequence length).
  ValueInfo vi{DType::I64, true, {Dim("N")}};
  const ValueInfo* si = g.info(scores);
  if (si && si->has_shape && si->shape.size() >= 2) {
    const size_t r = si->shape.size();
    vi.shape[0] = si->shape[0];
    for (size_t i = classes_last ? 1 : 2; i < (classes_last ? r - 1 : r); ++i) vi.shape.push_back(si->shape[i]);
  } else if (classes_last) {
    vi.has_shape = false;
  }
  g.values[m->labels] = vi;
  const std::string correct = append_correct_count(g, scores, m->labels, classes_last);
  std::string onnx_scores = scores;  // [N, classes, d1..]
  if (classes_last) {
    GR_CHECK(si && si->has_shape, "add_metrics: per-position classes need the rank of '" << scores << "'");
    const int64_t r = static_cast<int64_t>(si->shape.size());
    std::vector<int64_t> perm{0, r - 1};
    for (int64_t i = 1; i < r - 1; ++i) perm.push_back(i);
    onnx_scores = append(g, "Transpose", {scores}, "graphrun.scores_classes_first", {{"perm", Attribute::Ints(perm)}});
  }
  std::string loss = append(g, "SoftmaxCrossEntropyLoss", {onnx_scores, m->labels}, "graphrun.loss_sum",
                            {{"reduction", Attribute::Str("sum")}});
  // The totals are f32 whatever the scores: a float64 model's loss sum is rounded once, per batch.
  if (si && si->dtype == DType::F64)
    loss = append(g, "Cast", {loss}, "graphrun.loss_sum_f32", {{"to", Attribute::Int(static_cast<int64_t>(DType::F32))}});
  m->state_updates.clear();
  for (auto [value, total] : {std::pair<std::string, std::string*>{correct, &m->correct_total}, {loss, &m->loss_total}}) {
    *total = g.unique_name(value + ".total");
    g.initializers[*total] = Tensor::scalar<float>(0.f);
    m->state_updates.emplace_back(append(g, "Add", {*total, value}, *total + ".next"), *total);
  }
  return g;
}

}  // namespace graphrun::passes

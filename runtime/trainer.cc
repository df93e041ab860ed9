// The training pipeline: from a forward model to the graphs every replica runs (training form, loss,
// backward, replication with AllReduce and optimizer nodes) and the count of correct predictions.
#include "runtime/trainer.h"

#include "graph/passes/remove_noops.h"
#include "graph/passes/train_mode.h"

namespace graphrun::runtime {

std::string add_correct_count(Graph& g, const std::string& logits, const std::string& labels) {
  auto node = [&](const char* op, std::vector<std::string> ins, const char* out,
                  std::map<std::string, Attribute> attrs = {}) {
    Node n;
    n.op_type = op;
    n.name = g.unique_name(std::string("graphrun.metrics.") + out);
    n.inputs = std::move(ins);
    n.outputs = {g.unique_name(std::string("graphrun.") + out)};
    n.attrs = std::move(attrs);
    return g.add_node(std::move(n)).outputs[0];
  };
  const std::string pred = node("ArgMax", {logits}, "predicted", {{"axis", Attribute::Int(1)}, {"keepdims", Attribute::Int(0)}});
  const std::string hit = node("Equal", {pred, labels}, "hit");
  const std::string hitf = node("Cast", {hit}, "hit_f32", {{"to", Attribute::Int(static_cast<int64_t>(DType::F32))}});
  return node("ReduceSum", {hitf}, "correct", {{"keepdims", Attribute::Int(0)}});
}

TrainingGraphs build_training_graphs(const Graph& model, const PipelineOptions& opts) {
  TrainingGraphs tg;
  tg.forward = model;
  GR_CHECK(model.inputs.size() == 1, "model '" << model.name << "' has " << model.inputs.size()
                                               << " inputs; graphrun train feeds exactly one (the images)");
  GR_CHECK(!model.outputs.empty(), "model '" << model.name << "' has no outputs");
  tg.image = model.inputs[0];
  tg.logits = opts.output.empty() ? model.outputs[0] : opts.output;
  GR_CHECK(model.is_output(tg.logits), "model '" << model.name << "' has no output named '" << tg.logits << "'");
  Graph m = passes::to_training(passes::remove_noops(model));
  // The batch dimension varies (shards, the last batch): never fixed.
  auto it = m.values.find(tg.image);
  if (it != m.values.end() && it->second.has_shape && !it->second.shape.empty()) it->second.shape[0] = Dim("N");

  std::set<std::string> not_params = opts.freeze;
  for (const Node& n : m.nodes) {
    if (!n.domain.empty()) continue;
    if (n.op_type == "BatchNormalization")
      for (size_t k = 3; k < n.inputs.size(); ++k) not_params.insert(n.inputs[k]);
    if (n.op_type == "Dropout")
      for (size_t k = 1; k < n.inputs.size(); ++k) not_params.insert(n.inputs[k]);
  }
  for (const auto& [name, t] : m.initializers)
    if (t.dtype() == DType::F32 && !not_params.count(name)) tg.params.push_back(name);
  for (const auto& f : opts.freeze)
    GR_CHECK(m.initializers.count(f), "no parameter named '" << f << "' to freeze");
  GR_CHECK(!tg.params.empty(), "model '" << model.name << "' has no trainable f32 parameters");

  autodiff::LossOptions lo;
  lo.kind = opts.loss;
  lo.output = tg.logits;
  lo.labels = tg.labels;
  lo.loss = tg.loss;
  Graph with_loss = autodiff::attach_loss(m, lo);
  autodiff::BackwardOptions bo;
  bo.loss = tg.loss;
  bo.freeze = opts.freeze;
  bo.params = tg.params;
  bo.loss_grad_input = tg.loss_scale;
  tg.training = autodiff::backward(with_loss, bo);

  ReplicateOptions ro;
  ro.devices = opts.devices;
  ro.params = tg.params;
  ro.optimizer = opts.optimizer;
  ro.bucket_bytes = opts.bucket_bytes;
  tg.replicas = replicate(tg.training, ro);
  return tg;
}

}  // namespace graphrun::runtime

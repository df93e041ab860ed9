// training_pipeline: the command's options -> the list of passes; build_training_graphs runs it.
#include "runtime/pipeline.h"

#include <cstdlib>
#include <sstream>

#include "graph/passes/bucket_allreduce.h"
#include "graph/passes/convert_opset.h"
#include "graph/passes/fake_quantize.h"
#include "graph/passes/fold_constants.h"
#include "graph/passes/fold_pads.h"
#include "graph/passes/fuse_relu_bn_add.h"
#include "graph/passes/fold_transposes.h"
#include "graph/passes/fuse_relu_epilogue.h"
#include "graph/passes/fuse_pool_relu_grad.h"
#include "graph/passes/recompute_maxpool_argmax.h"
#include "graph/passes/fuse_relu_grad.h"
#include "graph/passes/make_batch_symbolic.h"
#include "graph/passes/remove_internal_noops.h"
#include "graph/passes/remove_noops.h"
#include "graph/passes/sync_batchnorm.h"
#include "graph/passes/train_mode.h"
#include "runtime/executor.h"

namespace graphrun::runtime {

namespace {

// fold_constants' evaluator: the node alone, on the CPU kernels, its constant inputs as initializers.
std::vector<Tensor> evaluate_on_cpu(const Graph& g, const Node& n, const std::vector<const Tensor*>& ins) {
  Graph one;
  one.name = "fold_constants." + n.name;
  one.opsets = g.opsets;
  one.nodes = {n};
  for (size_t i = 0; i < ins.size(); ++i)
    if (ins[i]) one.initializers[n.inputs[i]] = *ins[i];
  one.outputs = n.outputs;
  Executor ex(one);
  auto out = ex.run({});
  std::vector<Tensor> r;
  for (const auto& o : n.outputs) r.push_back(out.at(o).clone());
  return r;
}

// GRAPHRUN_SKIP_PASSES=NAME[,NAME...]: executor-only passes left out, to measure what each one saves
// (the standard passes are what training means, so only these may go).
std::set<std::string> skipped_passes(const std::vector<passes::Pass>& executor) {
  std::set<std::string> skip;
  const char* env = std::getenv("GRAPHRUN_SKIP_PASSES");
  if (!env) return skip;
  std::stringstream list(env);
  for (std::string name; std::getline(list, name, ',');) {
    if (name.empty()) continue;
    std::string valid;
    bool known = false;
    for (const passes::Pass& pass : executor) {
      known = known || pass.name() == name;
      valid += (valid.empty() ? "" : ", ") + pass.name();
    }
    GR_CHECK(known, "GRAPHRUN_SKIP_PASSES: '" << name << "' is no executor-only pass (" << valid << ")");
    skip.insert(name);
  }
  return skip;
}

}  // namespace

namespace {
passes::FoldConstantsOptions pads_folding() {
  passes::FoldConstantsOptions fo;
  fo.evaluate = evaluate_on_cpu;
  return fo;
}
}  // namespace

Graph fold_pads_on_cpu(const Graph& g) { return passes::fold_pads(g, pads_folding()); }

Graph fold_constants_on_cpu(const Graph& g) { return passes::fold_constants(g, pads_folding()); }

TrainingGraphs training_names(const Graph& model) {
  auto used = [&](const std::string& v) {
    return model.is_input(v) || model.is_initializer(v) || model.is_output(v) || model.producer(v) >= 0 ||
           model.values.count(v);
  };
  auto free = [&](const std::string& base) {
    std::string name = base;
    for (int k = 2; used(name); ++k) name = base + "__" + std::to_string(k);
    return name;
  };
  TrainingGraphs names;
  names.loss = free(names.loss);
  names.loss_scale = free(names.loss_scale);
  names.lr = free(names.lr);
  names.step = free(names.step);
  return names;
}

passes::Pipeline training_pipeline(const Graph& model, const PipelineOptions& opts) {
  const TrainingGraphs names = training_names(model);
  if (opts.data_parallel) {
    GR_CHECK(!model.inputs.empty(), "model '" << model.name << "' has no inputs to feed");
    GR_CHECK(!model.outputs.empty(), "model '" << model.name << "' has no outputs");
    const std::string logits = opts.output.empty() ? model.outputs[0] : opts.output;
    GR_CHECK(model.is_output(logits), "model '" << model.name << "' has no output named '" << logits << "'");
  }
  passes::Pipeline p;
  // First: every later pass, rule and the loss read opset 13's forms (an opset-9 Clip's bounds are attributes).
  p.add(passes::convert_opset_pass());
  p.add(passes::remove_noops_pass()).add(passes::to_training_pass());
  // Before backward: the edge and reflect Pad gradients need pads known, which torch computes from Constants.
  p.add(passes::fold_pads_pass(pads_folding()));
  // The batch dimension varies (shards, the last batch): never fixed.
  if (opts.data_parallel) p.add(passes::make_batch_symbolic_pass(model.inputs));
  if (opts.data_parallel && opts.sync_bn) p.add(passes::sync_batchnorm_pass());
  // After sync_batchnorm: the BatchNormalizations it rewrote keep running statistics of their own.
  p.add(passes::unbiased_running_var_pass());
  // Quantize/dequantize pairs train as PyTorch's fake quantization does (straight through).
  p.add(passes::fake_quantize_pass());

  autodiff::LossOptions lo;
  lo.kind = opts.loss;
  lo.output = opts.output.empty() && !model.outputs.empty() ? model.outputs[0] : opts.output;
  lo.labels = names.labels;
  lo.classes_last = opts.classes_last;
  lo.label_smoothing = opts.label_smoothing;
  lo.loss = names.loss;
  p.add(autodiff::attach_loss_pass(lo));

  autodiff::BackwardOptions bo;
  bo.loss = names.loss;
  bo.freeze = opts.freeze;
  // Each replica's loss is its shard's, scaled to the global batch by the seed it is fed.
  if (opts.data_parallel) bo.loss_grad_input = names.loss_scale;
  // Training leaves a parameter the loss does not reach alone (no weight decay, no moments), as torch does.
  bo.skip_unreached = opts.data_parallel;
  p.add(autodiff::backward_pass(bo));

  if (opts.data_parallel) {
    ReplicateOptions ro;
    ro.lr_input = names.lr;
    ro.step_input = names.step;
    ro.devices = opts.devices;
    ro.optimizer = opts.optimizer;
    ro.bucket_bytes = opts.bucket_bytes;
    const passes::Pipeline replication = replication_passes(ro);
    for (const passes::Pass& pass : replication.passes()) p.add(pass);
    if (opts.executor_passes)
      for (const passes::Pass& pass : executor_passes()) p.add(pass);
  }
  return p;
}

Tensor loss_scale_value(const Graph& training, const std::string& loss_scale, int64_t n, int64_t b) {
  const ValueInfo* vi = training.info(loss_scale);
  return vi && vi->dtype == DType::F64 ? Tensor::scalar<double>(double(n) / double(b))
                                       : Tensor::scalar<float>(float(n) / float(b));
}

std::vector<passes::Pass> executor_passes() {
  passes::FoldConstantsOptions fo;
  fo.evaluate = evaluate_on_cpu;
  const std::vector<passes::Pass> all = {passes::fold_constants_pass(fo), passes::remove_internal_noops_pass(),
                                         passes::fuse_relu_grad_pass(), passes::fuse_relu_epilogue_pass(),
                                         passes::fold_transposes_pass(),
                                         passes::fuse_relu_bn_add_pass(), passes::fuse_pool_relu_grad_pass(),
                                         passes::recompute_maxpool_argmax_pass()};
  const std::set<std::string> skip = skipped_passes(all);
  std::vector<passes::Pass> kept;
  for (const passes::Pass& pass : all)
    if (!skip.count(pass.name())) kept.push_back(pass);
  return kept;
}

TrainingGraphs build_training_graphs(const Graph& model, const PipelineOptions& opts) {
  const passes::Pipeline pipeline = training_pipeline(model, opts);
  if (!opts.dump_after.empty()) passes::check_dump_after(opts.dump_after, &pipeline);
  TrainingGraphs tg = training_names(model);
  tg.forward = model;
  if (opts.data_parallel) {
    tg.inputs = model.inputs, tg.image = model.inputs[0];
    // The evaluation runs the forward graph on test batches of any size, as the training graph runs
    // shards of any size: a model exported with a fixed batch (torch.onnx.export's default) too.
    for (const std::string& in : model.inputs) tg.forward = passes::make_batch_symbolic(tg.forward, in);
  }
  tg.logits = opts.output.empty() && !model.outputs.empty() ? model.outputs[0] : opts.output;
  const Graph last = pipeline.run(model, [&](const passes::Pass& pass, const Graph& g) {
    if (pass.name() == "backward") {
      tg.training = g;
      GR_CHECK(!passes::gradient_params(g).empty(),
               "nothing to train: " << (opts.freeze.empty() ? "the loss reaches no parameter of '"
                                                            : "--freeze leaves no parameter the loss reaches in '")
                                    << model.name << "' (--eval-only evaluates a model as it is)");
    }
    if (opts.dump && pass.name() == opts.dump_after) passes::dump_graph(*opts.dump, pass.name(), g);
  });
  tg.params = passes::gradient_params(tg.training);
  if (opts.data_parallel) tg.replicas = device_copies(last, opts.devices);
  return tg;
}

}  // namespace graphrun::runtime

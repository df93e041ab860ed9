// The pipeline of named passes that turns a forward model into the graphs graphrun grad, show and
// train work on, built from a command's options by one function (training_pipeline).
#pragma once
#include <cstddef>
#include <iosfwd>
#include <set>
#include <string>
#include <vector>

#include "autodiff/autodiff.h"
#include "graph/ir.h"
#include "graph/passes/pass.h"
#include "runtime/replicate.h"

namespace graphrun::runtime {

// Everything derived from a forward model for data-parallel training.
struct TrainingGraphs {
  Graph forward;    // the model as given
  Graph training;   // training form + loss + backward (one replica's loss scaled to the global batch)
  std::vector<DeviceGraph> replicas;
  std::vector<std::string> params;  // trained parameters
  // The model inputs fed from the data, in the model's order (image: the first, what an MNIST folder
  // feeds).
  std::vector<std::string> inputs;
  // The values training adds, named as below unless the model has a value of that name (training_names). The
  // labels keep their name: the data's array of targets feeds them by it.
  std::string image, logits, labels = "labels", loss = "loss", loss_scale = "loss_scale";
  std::string lr = "lr", step = "step";  // the optimizer's inputs: the learning rate, the updates done so far
};

// A TrainingGraphs holding only the names training gives what it adds to `model`: "loss", "loss_scale", "lr" and
// "step", or the first of NAME__2, NAME__3, ... that the model does not use.
TrainingGraphs training_names(const Graph& model);

// The value fed to graph input `loss_scale` of `training` for a shard of n of a global batch of b:
// n / b in the input's type (f32, or f64 in a float64 model's graph, where 3/10 must be exact to f64).
Tensor loss_scale_value(const Graph& training, const std::string& loss_scale, int64_t n, int64_t b);

struct PipelineOptions {
  std::vector<Device> devices{Device{}};
  autodiff::LossKind loss = autodiff::LossKind::CrossEntropy;
  std::string output;  // the model output the loss reads; default the first
  std::set<std::string> freeze;
  OptimizerOptions optimizer;
  size_t bucket_bytes = size_t(4) << 20;
  // --sync-bn: BatchNormalization over the global batch (pass sync_batchnorm; data_parallel only).
  bool sync_bn = false;
  // Cross-entropy over per-position scores [N, ..., classes] (a language model's [N,T,V]) rather
  // than ONNX's [N, classes, ...]: the loss and the correct count read the last axis.
  bool classes_last = false;
  // --label-smoothing: cross-entropy as torch.nn.CrossEntropyLoss(label_smoothing=eps) (autodiff::LossOptions);
  // 0, the default, leaves the loss as it was.
  double label_smoothing = 0;
  // false: stop after the backward pass (graphrun grad and show --backward without --devices): the
  // loss gradient is seeded with 1, the inputs keep their shapes, no AllReduce, no optimizer, no
  // replicas; the model may have several inputs.
  bool data_parallel = true;
  // The executor's passes after the last standard one (data_parallel only): they rewrite the graph
  // for speed into one that is no longer the standard, exported one (ai.graphrun ReluGrad, computed
  // values become Constants), so graphrun train sets this (and show's --passes and --dump-after,
  // which show train's pipeline); exported graphs never.
  bool executor_passes = false;
  // --dump-after: the graph after the pass of this name is written as text to *dump.
  std::string dump_after;
  std::ostream* dump = nullptr;
};

// The passes a command runs on `model`, with their options: the one place that decides them.
//   remove_noops -> to_training -> [make_batch_symbolic -> (sync_batchnorm)] -> attach_loss -> backward
//     -> [bucket_allreduce -> add_optimizer -> state_updates]            ([...]: data_parallel only)
//     -> [fold_constants -> remove_internal_noops -> fuse_relu_grad -> fuse_relu_epilogue -> fold_transposes
//         -> fuse_relu_bn_add -> fuse_pool_relu_grad -> recompute_maxpool_argmax]
//                                   (executor_passes only; GRAPHRUN_SKIP_PASSES=a,b leaves some out)
// data_parallel checks what training feeds: the model's inputs (each one's batch dimension becomes
// the symbol N) and the output the loss reads. What is trained is
// autodiff::trainable_params's rule.
passes::Pipeline training_pipeline(const Graph& model, const PipelineOptions& opts);

// The executor's passes (fold_constants -> ... -> recompute_maxpool_argmax, above, less
// GRAPHRUN_SKIP_PASSES): the tail of train's pipeline, and what train's
// evaluation graph runs through (a pass finding nothing of its kind leaves the graph as it is).
std::vector<passes::Pass> executor_passes();
// Pass fold_pads with the CPU kernels as its evaluator: what training_pipeline runs before the backward
// pass, for callers that differentiate a model themselves (graphrun check).
Graph fold_pads_on_cpu(const Graph& g);
// g with every node whose inputs are all constants folded (passes::fold_constants on the CPU kernels):
// what a look at computed constants (a scatter's indices torch builds from Constants) reads.
Graph fold_constants_on_cpu(const Graph& g);

// Runs training_pipeline(model, opts) (dumping as opts say; an unknown --dump-after pass is an
// Error listing the passes): `training` is the graph after backward, `replicas` one copy of the final
// graph per device (none without data_parallel), `params` the parameters with a gradient.
TrainingGraphs build_training_graphs(const Graph& model, const PipelineOptions& opts);

}  // namespace graphrun::runtime

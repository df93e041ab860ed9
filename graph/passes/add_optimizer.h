// Pass add_optimizer: the optimizer update as graph nodes (SGD, Momentum, Adam, AdamW), after the
// whole backward pass, reading the gradients bucket_allreduce summed.
#pragma once
#include <string>

#include "graph/ir.h"
#include "graph/passes/pass.h"

namespace graphrun::passes {

struct OptimizerOptions {
  std::string kind = "sgd";  // "sgd" (plain or with momentum), "adam", "adamw" or "adagrad"
  // sgd: torch.optim.SGD semantics (dampening 0). momentum 0: X - lr * (G + weight_decay * X) as
  // standard ops; momentum > 0: one ai.onnx.preview.training Momentum node per bucket.
  float momentum = 0;
  bool nesterov = false;
  float weight_decay = 0;  // L2 (added to the gradient), as torch.optim.SGD/Adam's weight_decay
  // adam: ai.graphrun.Adam (alpha = beta1, beta = beta2, epsilon), T = step + 1: torch.optim.Adam. It is
  // ai.onnx.preview.training's Adam with epsilon where torch puts it, on sqrt(v / (1 - beta2^T)); the
  // spec's adds it to sqrt(v), an effective epsilon 1 / sqrt(1 - beta2^T) times larger (32x at T = 1).
  // adamw: the same Adam node without L2 (norm_coefficient 0), then X_new -= lr * weight_decay * X
  // as standard Mul/Sub nodes: torch.optim.AdamW's decoupled weight decay.
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
  // adagrad: one ai.onnx.preview.training Adagrad node per bucket (epsilon = eps, norm_coefficient =
  // weight_decay, decay_factor = lr_decay, T = step): torch.optim.Adagrad, its accumulator starting at 0.
  float lr_decay = 0;
  // > 0: torch.nn.utils.clip_grad_norm_(params, clip_grad_norm) between the backward pass and the
  // step: every summed gradient times min(1, max / (||all gradients||_2 + 1e-6)), before weight decay
  // and the optimizer, as standard nodes (Mul, ReduceSum, Sum, Sqrt, Add, Div, Min) named grad_clip_*.
  float clip_grad_norm = 0;
};

struct AddOptimizerOptions {
  OptimizerOptions optimizer;
  std::string lr_input = "lr";      // new f32 scalar input: the learning rate of this step
  std::string step_input = "step";  // new i64 scalar input (momentum/adam only): updates done so far
  std::string grad_suffix = "_grad";
};

// For each AllReduce bucket (in order), the nodes that compute `<param>.new` from the parameter and
// its summed gradient, appended after every other node (as DDP steps after backward: nothing reads
// a sum before the backward pass is done). Momentum and Adam keep buffers (new initializers
// `<param>.momentum`, `.adam_m`, `.adam_v`, `.adagrad_sum`, zero). Appends the (new value, initializer) pairs of
// parameters and buffers to g.state_updates. Error when g has no AllReduce node.
Graph add_optimizer(const Graph& g, const AddOptimizerOptions& opts);
Pass add_optimizer_pass(const AddOptimizerOptions& opts);

}  // namespace graphrun::passes

// replicate: a training graph -> one graph per device, with AllReduce nodes on the gradients and
// optimizer nodes that produce the updated parameters (see DESIGN.md, "Data parallel semantics").
#pragma once
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "graph/ir.h"

namespace graphrun::runtime {

struct OptimizerOptions {
  std::string kind = "sgd";  // "sgd" (plain or with momentum), "adam" or "adamw"
  // sgd: torch.optim.SGD semantics (dampening 0). momentum 0: X - lr * (G + weight_decay * X) as
  // standard ops; momentum > 0: one ai.onnx.preview.training Momentum node per bucket.
  float momentum = 0;
  bool nesterov = false;
  float weight_decay = 0;  // L2 (added to the gradient), as torch.optim.SGD/Adam's weight_decay
  // adam: ai.onnx.preview.training Adam (alpha = beta1, beta = beta2, epsilon), T = step + 1. That is
  // torch.optim.Adam except where epsilon sits: ONNX adds it to sqrt(v), torch to sqrt(v / (1 - beta2^T)),
  // a difference that matters only for gradients near epsilon (tests: within 1e-6 of torch).
  // adamw: the same Adam node without L2 (norm_coefficient 0), then X_new -= lr * weight_decay * X
  // as standard Mul/Sub nodes: torch.optim.AdamW's decoupled weight decay.
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
};

struct ReplicateOptions {
  std::vector<Device> devices{Device{}};  // one replica per entry
  // Trainable parameters whose gradients are the graph outputs `<param><grad_suffix>`;
  // empty: every output `<name><grad_suffix>` where <name> is an initializer.
  std::vector<std::string> params;
  std::string grad_suffix = "_grad";
  // Gradients are reduced in buckets of about this many bytes, in the order the backward pass
  // produces them; each bucket's AllReduce sits right after its last gradient's producer, and all
  // optimizer nodes after the whole backward pass (so an asynchronous AllReduce overlaps the rest).
  size_t bucket_bytes = size_t(4) << 20;
  OptimizerOptions optimizer;
  std::string lr_input = "lr";      // new f32 scalar input: the learning rate of this step
  std::string step_input = "step";  // new i64 scalar input (momentum/adam only): updates done so far
};

// One replica: its device, its graph, and the (produced value, initializer) pairs that the
// executor's ExecOptions::state_updates must persist after every step (parameters, optimizer
// buffers, BatchNorm running statistics).
struct DeviceGraph {
  Device device;
  Graph graph;
  std::vector<std::pair<std::string, std::string>> state_updates;
};

// The per-device graphs. All replicas are the same graph (named `<name>.<device>`); the AllReduce
// nodes (domain ai.graphrun) sum each bucket over the replicas' communicator. The graphs' outputs
// are the training graph's non-gradient outputs (loss, model outputs) followed by the new values
// of the state. Throws Error when a parameter's gradient output is missing.
std::vector<DeviceGraph> replicate(const Graph& training, const ReplicateOptions& opts);

}  // namespace graphrun::runtime

// replicate: a training graph -> one graph per device, with AllReduce nodes on the gradients and
// optimizer nodes that produce the updated parameters (see DESIGN.md, "Data parallel semantics").
// The work is the passes bucket_allreduce, add_optimizer and state_updates (graph/passes/); this
// file runs them and makes the per-device copies.
#pragma once
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "graph/ir.h"
#include "graph/passes/add_optimizer.h"
#include "graph/passes/pass.h"

namespace graphrun::runtime {

using OptimizerOptions = passes::OptimizerOptions;

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
// buffers, BatchNorm running statistics): its graph's state_updates.
struct DeviceGraph {
  Device device;
  Graph graph;
  std::vector<std::pair<std::string, std::string>> state_updates;
};

// The data-parallel passes, in order: bucket_allreduce -> add_optimizer -> state_updates.
passes::Pipeline replication_passes(const ReplicateOptions& opts);

// One copy of g per device, named `<name>.<device>` (cpu:1 -> cpu_1).
std::vector<DeviceGraph> device_copies(const Graph& g, const std::vector<Device>& devices);

// replication_passes on `training`, then device_copies. All replicas
// are the same graph; the AllReduce nodes (domain ai.graphrun) sum each bucket over the replicas'
// communicator. The graphs' outputs are the training graph's non-gradient outputs (loss, model
// outputs) followed by the new values of the state. Throws Error when a parameter's gradient output
// is missing.
std::vector<DeviceGraph> replicate(const Graph& training, const ReplicateOptions& opts);

}  // namespace graphrun::runtime

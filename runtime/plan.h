// graphrun plan: a training run on paper. FLOPs per step, the memory a replica plans, the AllReduce
// buckets, and a step time predicted for N devices from a ring-allreduce cost model (README: graphrun plan).
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <map>
#include <string>
#include <vector>

#include "graph/ir.h"
#include "runtime/pipeline.h"

namespace graphrun::runtime {

// A link between devices: the bandwidth one device sends (and receives) at, and the latency of one
// message (one step of the ring).
struct LinkModel {
  std::string name;
  double gbytes_per_s = 0;
  double latency_us = 0;
  std::string describe() const;  // "ethernet (1.25 GB/s, 50 us per message)"
};
// "nvlink", "pcie", "ib", "ethernet", "shm" (in-process replicas) or a bandwidth in GB/s ("40");
// throws Error naming the presets otherwise.
LinkModel parse_link(const std::string& spec);
// Seconds of a ring allreduce of `bytes` over p devices: 2(p-1) messages, each moving bytes/p.
double ring_allreduce_seconds(size_t bytes, int p, const LinkModel& link);

struct PlanOptions {
  PipelineOptions pipeline;  // loss, optimizer, bucket size; devices[0] only (every replica runs its graph)
  int devices = 1;           // N, the replicas the prediction is for
  int64_t batch_size = 256;  // global, split over the N replicas as graphrun train splits it
  int threads = 1;           // intra-op threads of the measured replica
  LinkModel link = parse_link("shm");
  // > 0: each node of the replica graph takes its FLOPs / (device_tflops * 1e12) plus kernel_us;
  // 0: the node times are measured by running the replica graph on this machine's CPU.
  double device_tflops = 0;
  double kernel_us = 5;
  int measure_steps = 3;  // timed steps after the planning run
  // Measured replicas at their shard run this many at once (in-process CPU replicas share the cores,
  // as in graphrun train --devices cpu:N); 1: alone, as on a device of its own.
  int concurrent = 1;
  bool overlap = false;   // an AllReduce runs while the backward pass goes on (the executor's async mode)
  bool predict = true;    // false: the static part alone (one planning run, no timing)
  // false: one device on the whole batch is not timed (compute_1 and the speedup stay 0): a
  // placement comparison needs the step at N devices only.
  bool baseline = true;
  // The sizes of the inputs' symbolic dimensions other than the batch (each input's leading dimension,
  // which is the replica's shard): per input, its shape per example as the data gives it (train --plan,
  // --devices cpu:auto), else by the dimension's name (plan --dims T=128). A symbolic dimension sized by
  // neither is an error naming it: planned at a guessed size, the figures would mean nothing.
  std::map<std::string, Shape> example_shapes;
  std::map<std::string, int64_t> dims;
  // true: the sizes come from the training data alone (train --plan, cpu:auto), which has no --dims
  // flag; a dimension the data does not size is then an error about the data.
  bool sized_by_data = false;
};

// One node of the replica graph as run (execution order).
struct PlannedNode {
  std::string name, op;
  double flops = 0;    // at the replica's shard (kernel_flops: Conv, ConvGrad, Gemm, MatMul)
  double seconds = 0;  // measured or modelled, at the shard; AllReduce: the cost model's
  int bucket = -1;     // AllReduce nodes: their bucket
  // ReplicaSum nodes (--sync-bn's statistics, forward and backward): the bytes each replica sums. At
  // N devices such a node is a blocking ring allreduce of these bytes on the step's critical path.
  size_t sync_bytes = 0;
  bool sync = false;
  std::vector<int> reads_buckets;  // the buckets whose sums it reads (it waits for their AllReduce)
};

struct PlannedBucket {
  std::string node;         // allreduce_<b>
  int grads = 0;
  size_t bytes = 0;
  std::string last_grad;    // the gradient whose production closes it
  double ready_s = 0, start_s = 0, end_s = 0;  // in the predicted step (0 = the step's start)
};

// The replica's memory as the executor plans it for the shard (Executor::plan_stats after one run).
struct PlannedMemory {
  size_t arena = 0;        // every intermediate (activations, gradients, scratch) packed in one block
  size_t params = 0;       // trained parameters
  size_t grads = 0;        // their gradients (live in the arena while their bucket is reduced)
  size_t optimizer = 0;    // momentum buffers, Adam's m and v
  size_t other_state = 0;  // BatchNorm running statistics, frozen parameters, constants
  // The first (planning) step: each value gets a buffer of its own until the arena is packed, and on the
  // CPU they come from one reserved range whose high water this is. It can exceed the arena (LeNet at
  // batch 60000: by 0.9 GiB), and then it, not the arena, sets the peak.
  size_t first_step = 0;
  size_t persistent() const { return params + optimizer + other_state; }
  size_t peak() const { return std::max(arena, first_step) + persistent(); }
};

struct Plan {
  std::string model;
  PlanOptions options;
  int64_t shard = 0;            // examples replica 0 gets (the largest shard)
  double flops_step = 0;        // forward + backward over the global batch
  double flops_replica = 0;     // one replica's share of it
  PlannedMemory memory;
  std::vector<PlannedBucket> buckets;
  size_t allreduce_bytes = 0;   // summed over the buckets: what one replica sends per step, before the ring's 2(p-1)/p
  std::vector<PlannedNode> nodes;  // the replica at its shard, in execution order
  // The prediction (options.predict).
  double compute_1 = 0;     // one device, the whole global batch, no AllReduce
  double compute_n = 0;     // one replica's nodes at its shard, AllReduce left out
  double comm_n = 0;        // the buckets' ring allreduce time, summed
  int sync_nodes = 0;       // --sync-bn: the ReplicaSum nodes of a step
  size_t sync_bytes = 0;    // and the bytes they sum, per replica and step
  double sync_n = 0;        // their ring allreduce time at N devices (blocking: none of it hidden)
  double exposed_comm = 0;  // the part of comm_n the backward pass does not hide
  double step_n = 0;        // predicted step at N devices
  double speedup() const { return step_n > 0 ? compute_1 / step_n : 0; }
  double efficiency() const { return options.devices > 0 ? speedup() / options.devices : 0; }
  std::string timing;       // how node times were obtained, in words
};

// Builds graphrun train's replica graph for `model` (training_pipeline), runs it once at the shard
// size to get the executor's memory plan and the nodes' FLOPs, then (options.predict) times it or
// models it and predicts the step at N devices. Throws Error for a model train could not run.
Plan make_plan(const Graph& model, const PlanOptions& options);

// The predicted step (the schedule of `nodes` with the buckets' ring allreduce at p devices, and each
// ReplicaSum a blocking ring allreduce on the same link): fills the buckets' times, comm_n, sync_n,
// exposed_comm (every second of the step that is not compute) and step_n.
void predict_step(Plan& plan, int p);

// One way to spread CPU replicas over this machine's cores (--devices cpu:auto): R replicas of T
// intra-op threads each, and its step as make_plan predicts it (the replicas' nodes timed running at
// once, the in-process AllReduce on the shm link).
struct CpuPlacement {
  int replicas = 1, threads = 1;
  double step_s = 0;
  std::string str() const;  // "cpu:2 x 1 thread"
};
// Every split of `cores` into R replicas x cores / R threads (R from 1 to min(cores, 4) dividing
// `cores`, and at most the batch), each planned and timed as `base` says (pipeline, batch, steps);
// fastest first, ties to fewer replicas.
std::vector<CpuPlacement> compare_cpu_placements(const Graph& model, const PlanOptions& base, int cores);
// "placement: cpu:2 x 1 thread (0.095 s/step predicted; cpu:1 x 2 threads: 0.112)".
std::string describe_placements(const std::vector<CpuPlacement>& ranked);

// A byte count for people: "512 B", "1.5 KiB", "430.2 MiB", "2.25 GiB".
std::string bytes_str(double bytes);

void print_plan(std::ostream& os, const Plan& plan);   // the table of graphrun plan
void print_plan_brief(std::ostream& os, const Plan& plan);  // the block train --plan prints
std::string plan_json(const Plan& plan);

}  // namespace graphrun::runtime

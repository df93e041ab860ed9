// The executor: takes a graph, plans execution order and memory once per input signature, then runs it many times.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "graph/ir.h"
#include "runtime/kernel.h"
#include "runtime/profile.h"

namespace graphrun::runtime {

struct ExecOptions {
  Device device;                 // where it runs; cpu:0 by default
  int threads = 1;               // intra-op threads of this executor's kernels
  std::vector<std::string> fetch;  // values run() returns; empty: the graph's outputs
  // (value produced by the graph, initializer): after every run the initializer holds the value. This is
  // how optimizer and BatchNorm running-stat updates persist from step to step. The value is written
  // into the initializer's own buffer where its producer is the state's last reader and may overwrite
  // it (the optimizer nodes, Sub); otherwise into a buffer of its own, swapped in after the run.
  std::vector<std::pair<std::string, std::string>> state_updates;
  Communicator* comm = nullptr;  // what AllReduce nodes reduce over
  uint64_t seed = 0;             // seeds the RNG of random ops (Dropout)
  const KernelTable* kernels = nullptr;  // default: the table of `device`
  // Lets kernels finish asynchronously (KernelContext::async_allowed): AllReduce then overlaps the
  // nodes after it up to the first one that reads its result (a node read right after it stays
  // synchronous: nothing to overlap).
  bool async_kernels = false;
  // --profile: every node's kernel and every wait for an asynchronous one is recorded on this track,
  // and each span of nodes as one event (nullptr: nothing is timed).
  ProfileTrack* profile = nullptr;
  std::vector<ProfileSpan> profile_spans;
  // Planned runs give a Reshape's, Flatten's, Squeeze's or Unsqueeze's output its input's buffer (a
  // view: the kernel checks the shapes and skips the copy onto itself), and on the CPU an AllReduce's sum
  // its gradient's buffer where nothing reads the gradient later; false: a buffer of its own.
  bool views = true;
  // For tests: every scratch buffer a CPU kernel asks for is first filled with 0xFF bytes (NaN as
  // float or double), so a kernel that reads scratch it did not write gives NaN, not whatever fresh
  // memory held (zeros, mostly, which hides the bug until a training run reuses the arena).
  bool poison_scratch = false;
  // The most memory a planning run's buffers (activations, gradients, scratch) may hold at once; 0: no
  // limit. Where the values' shapes already say the run needs more, it stops before any kernel runs (on
  // every device); a CPU run also stops at the node where its buffers pass it. The line names the bytes
  // and `memory_hint` (what the caller's user can change), before the machine runs out of memory.
  size_t memory_limit = 0;
  std::string memory_hint;
  // Plans (one per input shape, each holding its arena) kept at once; the oldest goes, with its memory,
  // before a new one is made. An evaluation short of memory keeps 1: its batches' plan and its last
  // batch's then never hold their arenas at the same time (each is made again every evaluation).
  size_t max_plans = 8;
};

// The memory_limit of a command that runs a model on this machine (run, check, plan) from the memory
// available there: 90% of it, the rest left to what the process holds besides its runs' buffers,
// split between `runs` executors whose first runs hold their buffers at once. 0 (unknown) stays 0.
inline size_t run_memory_limit(size_t available, size_t runs = 1) { return available / 10 * 9 / runs; }

// What the memory planner decided for one input signature.
struct PlanStats {
  size_t arena_bytes = 0;          // one block holding every intermediate value and scratch buffer
  size_t intermediate_bytes = 0;   // sum of the sizes of all those values, were each kept separately
  size_t persistent_bytes = 0;     // initializers / state
  int values = 0;                  // intermediate values planned
  int views = 0;                   // of those, the ones sharing another's buffer (ExecOptions::views)
  int async_nodes = 0;             // nodes that finished asynchronously in the planning run
  // CPU executors: the planning run's buffers came from one reserved range (runtime/planning_pool.h),
  // which reached this many bytes; the arena took that range's start (its pages already there).
  size_t planning_peak_bytes = 0;
  bool arena_in_pool = false;
  // CPU executors: the most the planning run's buffers held at once (ExecOptions::memory_limit bounds
  // this), and the lower bound of it counted from the graph's shapes before that run (which a limit
  // below it stops at once).
  size_t planning_live_peak_bytes = 0;
  size_t static_peak_bytes = 0;
};

class Executor {
 public:
  // The executor's state (parameters, BatchNorm statistics) is its own: a copy of the graph's initializers,
  // except that a graph given to it (an rvalue) whose initializers nothing else shares lends them, without a
  // copy (`graphrun run` of a model with gigabytes of weights holds them once), and that in host memory an
  // initializer no state update writes is the graph's tensor itself (read only: set_state copies it first).
  explicit Executor(const Graph& graph, ExecOptions opts = {});
  explicit Executor(Graph&& graph, ExecOptions opts = {});
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Runs the graph. Inputs by name (every graph input must be given, with its declared dtype and
  // a shape compatible with its declared shape). Returns the fetched values: views into the
  // executor's memory, valid until the next run (clone() what must outlive it).
  std::map<std::string, Tensor> run(const std::map<std::string, Tensor>& inputs);

  // Parameters and other state (the graph's initializers), owned by the executor.
  Tensor& state(const std::string& name);
  const std::map<std::string, Tensor>& states() const { return state_; }
  // Copies `value` into the state tensor `name` (same dtype and shape).
  void set_state(const std::string& name, const Tensor& value);
  // Makes state `name` the tensor `value` itself, not a copy: this executor reads (and its state updates
  // write) that memory from then on. `value` lies in memory this executor's device reads (the host for
  // host executors, the same GPU); same dtype and shape.
  void share_state(const std::string& name, const Tensor& value);

  // The graph it runs; its initializers are names only (their tensors are the states).
  const Graph& graph() const { return graph_; }
  const ExecOptions& options() const { return opts_; }
  // The random-op generator's state as text (std::mt19937_64's stream form), for checkpoints:
  // restoring it makes the next Dropout masks those an uninterrupted run would draw.
  std::string rng_state() const;
  void set_rng_state(const std::string& state);
  // Stats of the most recently used plan (after at least one run).
  PlanStats plan_stats() const;
  // The bytes its plans hold between runs (every plan's arena: one per input shape seen).
  size_t held_bytes() const;
  // ExecOptions::memory_limit and memory_hint for the plans made from now on (the first run at a shape).
  void set_memory_limit(size_t bytes, const std::string& hint);
  void set_max_plans(size_t n) { opts_.max_plans = n; }  // (ExecOptions::max_plans)
  // Shapes every value had in the most recent run (for printers and tests).
  std::map<std::string, std::pair<DType, Shape>> value_types() const;
  // A lower bound of what the first (planning) run at inputs of these shapes takes from its pool (on a
  // device, allocates there and frees again): the graph's value shapes with the inputs' symbols sized,
  // swept along the run's order and liveness (views, shared sums and scratch count nothing; a value whose
  // shape is not known counts nothing), with the inputs' symbols at the sizes given.
  size_t static_peak_bytes_at(const std::map<std::string, int64_t>& symbols) const;
  // Throws the line the first run would stop with, before any kernel, when that count exceeds the memory
  // limit; returns the count. A caller that builds large inputs (plan's random shard) asks first.
  size_t check_first_run_fits(const std::map<std::string, Shape>& input_shapes) const;
  // The largest size of the inputs' leading symbol (the batch), up to its size in `input_shapes`, whose
  // count (static_peak_bytes_at), plus `per_unit` bytes for each along it, is within `limit`: 0 where not
  // even 1 is, -1 where the inputs have none.
  int64_t most_that_fits(const std::map<std::string, Shape>& input_shapes, size_t limit, size_t per_unit = 0) const;

  struct Plan;    // one per input signature; defined in executor.cc
  struct Layout;  // value slots and liveness, derived once from the graph

 private:
  Plan& plan_for(const std::map<std::string, Tensor>& inputs);
  std::map<std::string, Tensor> run_plan(Plan& P, const std::map<std::string, Tensor>& inputs);
  std::map<std::string, int64_t> bound_symbols(const std::map<std::string, Shape>& input_shapes,
                                               std::string* leading) const;
  void validate_inputs(const std::map<std::string, Tensor>& inputs) const;
  // Asynchronous nodes (KernelContext::defer): keep their buffers through the planning run, and
  // extend their lifetimes in the plan to their completion point.
  void hold_async_buffers(int step, Plan& plan, std::vector<bool>& held) const;
  void extend_for_async(const Plan& plan, std::vector<int>& last_use, std::vector<int>& scratch_end) const;

  Graph graph_;
  ExecOptions opts_;
  const KernelTable* kernels_;
  std::vector<KernelFn> fns_;
  std::map<std::string, Tensor> state_;
  std::set<std::string> borrowed_;  // host states that are the graph's own read-only tensors (set_state copies first)
  std::unique_ptr<Layout> layout_;
  std::vector<std::unique_ptr<Plan>> plans_;
  Plan* last_ = nullptr;
  std::mt19937_64 rng_;
};

}  // namespace graphrun::runtime

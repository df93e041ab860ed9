// Executor: the first run of an input signature runs with fresh allocations and records every shape;
// a liveness-based planner then packs all intermediates into one arena that later runs reuse.
#include "runtime/executor.h"

#include "graph/passes/place_shape_computations.h"
#include "runtime/comm/replica_aborted.h"
#include "runtime/device.h"
#include "runtime/plan.h"
#include "runtime/planning_pool.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <set>
#include <sstream>
#include <tuple>
#include <unordered_map>

namespace graphrun::runtime {

namespace {

constexpr size_t kAlign = 64;
size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

struct Interval {
  int begin, end;  // steps, inclusive
  size_t bytes;
  size_t offset = 0;
  int slot;        // value slot, or -1 - step for a node's scratch
};

// Greedy best-fit by decreasing size: each buffer goes to the lowest offset that no
// buffer alive at an overlapping time occupies.
size_t pack(std::vector<Interval>& items) {
  std::vector<int> order(items.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return items[a].bytes > items[b].bytes; });
  std::vector<int> placed;
  size_t total = 0;
  for (int i : order) {
    Interval& it = items[i];
    std::vector<std::pair<size_t, size_t>> busy;
    for (int j : placed) {
      const Interval& o = items[j];
      if (o.begin <= it.end && it.begin <= o.end) busy.emplace_back(o.offset, o.offset + o.bytes);
    }
    std::sort(busy.begin(), busy.end());
    size_t off = 0;
    for (auto [b, e] : busy) {
      if (off + it.bytes <= b) break;
      off = std::max(off, e);
    }
    it.offset = off;
    total = std::max(total, off + it.bytes);
    placed.push_back(i);
  }
  return total;
}

}  // namespace

// Value slots: every name the graph reads or writes, plus one hidden slot per unused node output.
struct Executor::Plan {
  std::vector<std::pair<DType, Shape>> key;  // input signature
  bool planned = false;
  std::vector<Tensor> slot_tensor;           // per slot: the buffer (arena view or owning)
  std::vector<DType> slot_dtype;
  std::vector<Shape> slot_shape;
  std::vector<bool> slot_seen;
  std::vector<size_t> scratch_bytes;         // per step (max requested)
  std::vector<size_t> scratch_offset;
  std::shared_ptr<void> arena;
  size_t arena_bytes = 0;
  std::vector<Tensor> input_copies;          // device executors: per graph input, its device buffer
  std::vector<std::vector<char>> host_scratch;  // device executors: per host-placed step, its scratch
  std::vector<bool> async_step;              // per step: its kernel deferred a completion in the planning run
  // Per slot: the output was given a buffer before its kernel ran in the planning run (its state's, or the
  // gradient's of a CPU AllReduce), which output() returns where the kernel asks for that dtype and shape.
  // A state-update source (Layout::inplace_updates) still preset after planning is its state's own buffer
  // in every run: nothing to swap after it.
  std::vector<bool> slot_preset;
  // CPU executors: the planning run's buffers come from one reserved range that then holds the arena.
  std::shared_ptr<PlanningPool> pool;
  size_t memory_limit = 0;          // ExecOptions::memory_limit, on the pool's live bytes
  const std::string* memory_hint = nullptr;
  PlanStats stats;
};

struct Executor::Layout {
  std::unordered_map<std::string, int> slot_of;
  int nslots = 0;
  std::vector<std::vector<int>> in_slots, out_slots;  // per step; -1 for absent inputs
  std::vector<int> last_use;                          // per slot, step; n = live to the end
  std::vector<int> def_step;                          // per slot; -1 = not produced by a node
  std::vector<bool> view_step;                        // per step: its output may share its input's buffer
  std::vector<bool> pooled;  // per slot: the planning run takes its buffer from the plan's pool (not fetched, not state)
  // Device executors: values kept in host memory and the nodes that compute them there (with the CPU
  // kernels); see graph/passes/place_shape_computations.h. Empty for CPU executors.
  std::vector<bool> host_slot, host_step;
  bool on_host(int step) const { return !host_step.empty() && host_step[step]; }
  bool is_host(int slot) const { return !host_slot.empty() && host_slot[slot]; }
  // Asynchronous nodes: the completion of step s runs right before step complete_at[s], the first
  // that reads an output of s (n: at the end of the run); finishing_before[t] lists those s.
  std::vector<int> complete_at;
  std::vector<std::vector<int>> finishing_before;  // n + 1 entries
  // (source slot, state slot) of the state updates that may be written into their state's own buffer.
  std::vector<std::pair<int, int>> inplace_updates;
  // (step, input slot, output slot) of the CPU AllReduce sums that may take their gradient's buffer: the
  // gradient is read by that step alone, once (the plan checks sizes and views; the planning run, liveness).
  std::vector<std::tuple<int, int, int>> allreduce_aliases;
};

namespace {

// A node's asynchronous work not yet finished, with the planning run's scratch it may still use.
struct Pending {
  Completion done;
  std::vector<std::unique_ptr<char[]>> host_temps;
  std::vector<std::shared_ptr<void>> pool_temps;
  std::vector<Tensor> device_temps;
};

// Runs f, reporting its Error (or allocation failure) as one of `node`.
template <class F>
void naming_node(const Node& node, F&& f) {
  try {
    f();
  } catch (const Error& e) {
    std::string msg = e.what();
    if (msg.rfind("node '", 0) == 0) throw;
    msg = node.describe() + ": " + msg;
    if (dynamic_cast<const ReplicaAborted*>(&e)) throw ReplicaAborted(msg);  // still an echo
    if (dynamic_cast<const OutOfMemory*>(&e)) throw OutOfMemory(msg);
    throw Error(msg);
  } catch (const std::bad_alloc&) {
    throw OutOfMemory(node.describe() + ": out of memory");
  }
}

void completion_points(Executor::Layout& L, int n) {
  std::vector<int> first_read(L.nslots, n);
  for (int s = n - 1; s >= 0; --s)
    for (int i : L.in_slots[s])
      if (i >= 0) first_read[i] = s;
  L.complete_at.assign(n, n);
  L.finishing_before.assign(n + 1, {});
  for (int s = 0; s < n; ++s) {
    for (int o : L.out_slots[s]) L.complete_at[s] = std::min(L.complete_at[s], first_read[o]);
    L.finishing_before[L.complete_at[s]].push_back(s);
  }
}

// The input whose buffer output `out` of `node` may be written into: the kernel reads element k of it
// before writing element k of the output and reads no other element of it (element k is iteration k's
// alone, on the CPU and in the CUDA kernels). The optimizer updates (X, V, H into their new values) and
// the elementwise Sub of plain SGD (the broadcast input is never the one written: the shapes are checked
// when the output is asked for). -1: none.
int overwritable_input(const Node& node, int out) {
  const int ni = static_cast<int>(node.inputs.size());
  if (node.domain.empty() && node.op_type == "Sub" && out == 0 && ni == 2) return 0;
  const bool graphrun_adam = node.domain == kGraphrunDomain && node.op_type == "Adam";
  if (node.domain != kTrainingDomain && !graphrun_adam) return -1;
  const int groups = node.op_type == "Momentum" ? 3 : node.op_type == "Adam" ? 4 : 0;
  if (!groups || (ni - 2) % groups || ni <= 2) return -1;
  const int n = (ni - 2) / groups;
  if (out < 0 || out >= (groups - 1) * n) return -1;
  // Output o * n + i is the new value of input group o (X, then V, then H) of tensor i; G (group 1) is read only.
  const int group = out / n, i = out % n;
  return 2 + (group == 0 ? 0 : group + 1) * n + i;
}

// Finishes step s's asynchronous work, if any; its scratch is released only afterwards.
// Profiling records the wait as "<op> wait".
void finish_pending(std::vector<Pending>& pending, int s, const Node& node, ProfileTrack* prof) {
  Pending w = std::move(pending[s]);
  pending[s] = Pending{};
  if (!w.done) return;
  const int64_t t0 = prof ? prof->now() : 0;
  naming_node(node, w.done);
  if (prof) prof->add({node.op_type + " wait", "wait", node.name, t0, prof->now() - t0, 0});
}

// When run() throws, work still in flight may be writing the plan's memory: wait for it first
// (its own errors are dropped; the first error is the one reported).
struct DrainOnUnwind {
  std::vector<Pending>& pending;
  ~DrainOnUnwind() {
    for (Pending& p : pending) {
      if (!p.done) continue;
      try {
        p.done();
      } catch (...) {
      }
    }
  }
};

}  // namespace

class RunContext final : public KernelContext {
 public:
  RunContext(const Node& n, int64_t opset, int threads, Device dev, Communicator* comm, std::mt19937_64* rng,
             Executor::Plan& plan, const std::vector<int>& out_slots, const std::vector<bool>& pooled, int step,
             DeviceBackend* backend, bool host_step, bool async_allowed)
      : plan_(plan), out_slots_(out_slots), pooled_(pooled), step_(step), backend_(host_step ? nullptr : backend),
        host_step_(host_step) {
    if (host_step) dev = Device{};
    node_ = &n;
    opset_ = opset;
    threads_ = threads;
    device_ = dev;
    comm_ = comm;
    rng_ = rng;
    async_allowed_ = async_allowed;
  }
  std::vector<const Tensor*>& inputs() { return inputs_; }

  void defer(Completion done) override {
    GR_CHECK(async_allowed_, "kernel deferred its work but this executor runs kernels synchronously");
    GR_CHECK(!work_.done, "kernel deferred its work twice");
    work_.done = std::move(done);
  }
  bool deferred() const { return static_cast<bool>(work_.done); }
  Pending take_work() { return std::move(work_); }

  Tensor& output(int i, const Shape& shape, DType dtype) override {
    GR_CHECK(i >= 0 && i < static_cast<int>(out_slots_.size()),
             "kernel asked for output " << i << " of " << out_slots_.size());
    int s = out_slots_[i];
    if (plan_.planned) {
      Tensor& t = plan_.slot_tensor[s];
      if (t.dtype() == dtype && t.shape() == shape) return t;
      GR_FAIL("output " << i << " is " << dtype_name(dtype) << shape_str(shape) << " but was planned as "
                        << dtype_name(t.dtype()) << shape_str(t.shape())
                        << " for the same input shapes (data-dependent shapes are not supported)");
    }
    if (plan_.slot_preset[s]) {
      // Given a buffer before the kernel ran (Plan::slot_preset) of the dtype and shape it writes; otherwise
      // a buffer of its own after all (a state update's is then swapped into the state after the run).
      Tensor& t = plan_.slot_tensor[s];
      plan_.slot_preset[s] = t.dtype() == dtype && t.shape() == shape;
      if (plan_.slot_preset[s]) {
        plan_.slot_dtype[s] = dtype;
        plan_.slot_shape[s] = shape;
        plan_.slot_seen[s] = true;
        return t;
      }
    }
    for (int64_t d : shape) GR_CHECK(d >= 0, "output " << i << " would have negative dimension " << shape_str(shape));
    checked_numel(dtype, shape, "output " + std::to_string(i));  // device buffers too, not only host tensors
    std::shared_ptr<void> mem;
    if (plan_.pool && pooled_[s]) mem = pool_allocate(shape_numel(shape) * dtype_size(dtype));
    if (mem) {
      void* p = mem.get();
      plan_.slot_tensor[s] = Tensor::adopt(dtype, shape, std::move(mem), p, device_);
    } else {
      plan_.slot_tensor[s] = backend_ ? backend_->empty(device_, dtype, shape) : Tensor(dtype, shape);
    }
    plan_.slot_dtype[s] = dtype;
    plan_.slot_shape[s] = shape;
    plan_.slot_seen[s] = true;
    return plan_.slot_tensor[s];
  }

  void poison_scratch(bool on) { poison_ = on; }

  void* scratch(size_t bytes) override {
    void* p = scratch_buffer(bytes);
    if (poison_ && device_.is_cpu() && bytes) std::memset(p, 0xFF, bytes);
    return p;
  }

 private:
  void* scratch_buffer(size_t bytes) {
    if (host_step_) return host_scratch(bytes);
    if (plan_.planned) {
      GR_CHECK(bytes <= plan_.scratch_bytes[step_], "scratch of " << bytes << " bytes exceeds the planned "
                                                                  << plan_.scratch_bytes[step_]);
      return static_cast<char*>(plan_.arena.get()) + plan_.scratch_offset[step_];
    }
    plan_.scratch_bytes[step_] = std::max(plan_.scratch_bytes[step_], bytes);
    if (plan_.pool) {
      if (std::shared_ptr<void> mem = pool_allocate(bytes)) {
        work_.pool_temps.push_back(std::move(mem));
        return work_.pool_temps.back().get();
      }
    }
    if (backend_) {
      work_.device_temps.push_back(backend_->empty(device_, DType::U8, {static_cast<int64_t>(bytes)}));
      return work_.device_temps.back().raw();
    }
    work_.host_temps.emplace_back(new char[bytes + kAlign]);
    char* p = work_.host_temps.back().get();
    return p + (kAlign - reinterpret_cast<uintptr_t>(p) % kAlign) % kAlign;
  }

  // From the planning run's pool, within ExecOptions::memory_limit.
  std::shared_ptr<void> pool_allocate(size_t bytes) {
    const size_t live = plan_.pool->live();
    if (plan_.memory_limit && live + bytes > plan_.memory_limit)
      GR_FAIL_OUT_OF_MEMORY("the first run needs more than "
                            << bytes_str(plan_.memory_limit) << " of memory for its activations (" << bytes_str(live)
                            << " held, " << bytes_str(bytes) << " more asked)"
                            << (plan_.memory_hint && !plan_.memory_hint->empty() ? "; " + *plan_.memory_hint
                                                                                   : std::string()));
    return plan_.pool->allocate(bytes);
  }

  bool poison_ = false;
  Executor::Plan& plan_;
  const std::vector<int>& out_slots_;
  const std::vector<bool>& pooled_;
  int step_;
  DeviceBackend* backend_;
  bool host_step_;

  // A host-placed step of a device executor: host memory of its own, kept by the plan (the arena is device memory).
  void* host_scratch(size_t bytes) {
    if (plan_.host_scratch.empty()) plan_.host_scratch.resize(plan_.scratch_bytes.size());
    std::vector<char>& buf = plan_.host_scratch[step_];
    if (buf.size() < bytes + kAlign) buf.resize(bytes + kAlign);
    char* p = buf.data();
    return p + (kAlign - reinterpret_cast<uintptr_t>(p) % kAlign) % kAlign;
  }
  Pending work_;  // the planning run's scratch, and the completion if the kernel deferred one
};

// The backend of the executor's device (the CPU's too). Where the code below still asks whether the
// device is a CPU, it asks whether its memory is the host's, nothing else.
static DeviceBackend* device_backend(const ExecOptions& o) {
  DeviceBackend* b = backend_for(o.device.kind);
  std::string why;
  const bool available = backend_available(o.device.kind, &why);  // first: it fills `why` also when b is null
  GR_CHECK(b && available, "cannot run on " << o.device.str() << ": " << why);
  GR_CHECK(o.device.index >= 0 && o.device.index < b->device_count(),
           "cannot run on " << o.device.str() << ": " << b->device_count() << " device(s) present");
  return b;
}

static const KernelTable& table_for(const ExecOptions& o) {
  if (o.kernels) return *o.kernels;
  return device_backend(o)->kernels();
}

Executor::Executor(const Graph& graph, ExecOptions opts) : Executor(Graph(graph), std::move(opts)) {}

Executor::Executor(Graph&& graph, ExecOptions opts)
    : graph_(std::move(graph)), opts_(std::move(opts)), kernels_(&table_for(opts_)), rng_(opts_.seed) {
  GR_CHECK(opts_.threads >= 1, "threads must be at least 1");
  check_supported(graph_, *kernels_, "graph '" + graph_.name + "'");
  for (const Node& n : graph_.nodes) fns_.push_back(kernels_->find(n));
  if (opts_.fetch.empty()) opts_.fetch = graph_.outputs;

  Layout L;
  auto slot = [&](const std::string& v) {
    auto it = L.slot_of.find(v);
    if (it != L.slot_of.end()) return it->second;
    L.slot_of[v] = L.nslots;
    return L.nslots++;
  };
  for (const auto& v : graph_.inputs) slot(v);
  for (const auto& [v, _] : graph_.initializers) slot(v);
  const int n = static_cast<int>(graph_.nodes.size());
  for (int s = 0; s < n; ++s) {
    const Node& node = graph_.nodes[s];
    std::vector<int> ins, outs;
    for (const auto& in : node.inputs) {
      if (in.empty()) { ins.push_back(-1); continue; }
      GR_CHECK(L.slot_of.count(in), node.describe() << ": input '" << in << "' is not defined before it");
      ins.push_back(L.slot_of[in]);
    }
    for (const auto& out : node.outputs) {
      if (out.empty()) { outs.push_back(L.nslots++); continue; }
      GR_CHECK(!L.slot_of.count(out), node.describe() << ": output '" << out << "' is defined twice");
      outs.push_back(slot(out));
    }
    L.in_slots.push_back(ins);
    L.out_slots.push_back(outs);
  }
  L.last_use.assign(L.nslots, -1);
  L.def_step.assign(L.nslots, -1);
  L.view_step.assign(n, false);
  for (int s = 0; s < n; ++s) {
    const Node& node = graph_.nodes[s];
    static const std::set<std::string> kViews = {"Reshape", "Flatten", "Squeeze", "Unsqueeze"};
    L.view_step[s] = opts_.views && node.domain.empty() && kViews.count(node.op_type) && !node.inputs.empty() &&
                     L.in_slots[s][0] >= 0 && node.outputs.size() == 1 && !node.outputs[0].empty();
  }
  for (int s = 0; s < n; ++s) {
    for (int o : L.out_slots[s]) { L.def_step[o] = s; L.last_use[o] = s; }
    for (int i : L.in_slots[s])
      if (i >= 0) L.last_use[i] = std::max(L.last_use[i], s);
  }
  for (const auto& f : opts_.fetch) {
    GR_CHECK(L.slot_of.count(f), "cannot fetch '" << f << "': no such value in graph '" << graph_.name << "'");
    L.last_use[L.slot_of[f]] = n;
  }
  for (const auto& [v, init] : opts_.state_updates) {
    GR_CHECK(L.slot_of.count(v) && L.def_step[L.slot_of[v]] >= 0,
             "state update: value '" << v << "' is not produced by a node");
    GR_CHECK(graph_.initializers.count(init), "state update: '" << init << "' is not an initializer");
    L.last_use[L.slot_of[v]] = n;
  }
  // Fetched values outlive the run and state-update sources become state: they keep buffers of their own.
  L.pooled.assign(L.nslots, opts_.device.is_cpu());
  for (const auto& f : opts_.fetch) L.pooled[L.slot_of[f]] = false;
  for (const auto& [v, _] : opts_.state_updates) L.pooled[L.slot_of[v]] = false;
  if (!opts_.device.is_cpu()) {
    std::set<std::string> pinned(opts_.fetch.begin(), opts_.fetch.end());  // fetched values and state stay put
    for (const auto& [v, init] : opts_.state_updates) pinned.insert({v, init});
    passes::HostPlacement host = passes::place_shape_computations(graph_, pinned);
    L.host_step = std::move(host.host_nodes);
    L.host_slot.assign(L.nslots, false);
    for (const auto& [v, sl] : L.slot_of) L.host_slot[sl] = host.host_values.count(v) != 0;
    for (int s = 0; s < n; ++s) {
      for (size_t k = 0; k < graph_.nodes[s].outputs.size(); ++k)
        if (graph_.nodes[s].outputs[k].empty()) L.host_slot[L.out_slots[s][k]] = L.host_step[s];  // unused outputs
      if (L.on_host(s)) fns_[s] = cpu_kernels().find(graph_.nodes[s]);
    }
  }
  // On a device, the state lives there from now on (runtime::to_host copies it back on request),
  // except host-placed shape values; in host memory it is a copy of its own, or the graph's tensor where
  // only graph_ holds that (an rvalue graph): graph_'s initializers are read for their names only.
  // A host initializer no state update writes is read only: the executor borrows the graph's tensor
  // (set_state copies it first), so an evaluation or a shape check of a model holds its weights once.
  std::set<std::string> updated;
  for (const auto& [_, init] : opts_.state_updates) updated.insert(init);
  for (auto& [name, t] : graph_.initializers) {
    const bool host = opts_.device.is_cpu() && t.device().is_cpu();
    if (host && t.sole_owner()) {
      state_[name] = t;
    } else if (host && !updated.count(name)) {
      state_[name] = t;
      borrowed_.insert(name);
    } else {
      // (A device tensor given on this executor's device is taken as it is: an evaluation reading a
      // replica's parameters.)
      state_[name] = opts_.device.is_cpu() || L.is_host(L.slot_of.at(name)) ? (t.device().is_cpu() ? t.clone() : to_host(t))
                                                                              : to_device(t, opts_.device);
    }
  }
  // The state holds the tensors now; graph_ keeps their names (a copy it kept would hold a model's weights twice).
  for (auto& [_, t] : graph_.initializers) t = Tensor();
  completion_points(L, n);
  // A state update is written in place when its producer is the state's last reader, may overwrite it
  // (overwritable_input), reads it there only, and no asynchronous reader of it is still in flight then:
  // a parameter or optimizer buffer then takes one buffer, not two swapped after every step.
  for (const auto& [v, init] : opts_.state_updates) {
    const int vs = L.slot_of.at(v), is = L.slot_of.at(init), s = L.def_step[vs];
    if (L.last_use[is] != s || L.is_host(is) || L.is_host(vs) || L.on_host(s)) continue;
    const Node& node = graph_.nodes[s];
    const auto& outs = L.out_slots[s];
    const int out = static_cast<int>(std::find(outs.begin(), outs.end(), vs) - outs.begin());
    const int k = overwritable_input(node, out);
    if (k < 0 || L.in_slots[s][k] != is ||
        std::count(L.in_slots[s].begin(), L.in_slots[s].end(), is) != 1)
      continue;
    // A reader that may finish asynchronously (as RunContext allows below) must have finished by step s.
    bool settled = true;
    for (int r = 0; r < s && settled; ++r)
      if (opts_.async_kernels && L.complete_at[r] > r + 1 && std::count(L.in_slots[r].begin(), L.in_slots[r].end(), is))
        settled = L.complete_at[r] <= s;
    if (settled) L.inplace_updates.emplace_back(vs, is);
  }
  if (opts_.views && opts_.device.is_cpu())
    for (int s = 0; s < n; ++s) {
      const Node& node = graph_.nodes[s];
      if (node.domain != kGraphrunDomain || node.op_type != "AllReduce" || L.on_host(s)) continue;
      const auto& ins = L.in_slots[s];
      for (size_t k = 0; k < ins.size() && k < L.out_slots[s].size(); ++k)
        if (ins[k] >= 0 && L.def_step[ins[k]] >= 0 && L.last_use[ins[k]] == s && std::count(ins.begin(), ins.end(), ins[k]) == 1)
          L.allreduce_aliases.emplace_back(s, ins[k], L.out_slots[s][k]);
    }
  layout_ = std::make_unique<Layout>(std::move(L));
}

Executor::~Executor() = default;

Tensor& Executor::state(const std::string& name) {
  auto it = state_.find(name);
  GR_CHECK(it != state_.end(), "no parameter or state named '" << name << "'");
  return it->second;
}

void Executor::share_state(const std::string& name, const Tensor& value) {
  Tensor& t = state(name);
  GR_CHECK(t.dtype() == value.dtype() && t.shape() == value.shape(),
           "state '" << name << "' is " << dtype_name(t.dtype()) << shape_str(t.shape()) << ", given "
                     << dtype_name(value.dtype()) << shape_str(value.shape()));
  GR_CHECK(shares_memory(value.device(), t.device()),
           "state '" << name << "' is on " << t.device().str() << ", given a tensor on " << value.device().str());
  t = value;
  borrowed_.erase(name);
}

void Executor::set_state(const std::string& name, const Tensor& value) {
  Tensor& t = state(name);
  GR_CHECK(t.dtype() == value.dtype() && t.shape() == value.shape(),
           "state '" << name << "' is " << dtype_name(t.dtype()) << shape_str(t.shape()) << ", given "
                     << dtype_name(value.dtype()) << shape_str(value.shape()));
  if (t.device().is_cpu()) {
    if (borrowed_.erase(name)) t = Tensor(t.dtype(), t.shape());  // the graph's tensor stays as it was
    t.copy_from(value.device().is_cpu() ? value : to_host(value));
    return;
  }
  DeviceBackend* b = device_backend(opts_);
  Tensor src = value.device() == t.device() || value.device().is_cpu() ? value : to_host(value);
  if (!t.nbytes()) return;
  if (src.device().is_cpu())
    b->copy_host_to_device(t.device(), t.raw(), src.raw(), t.nbytes());
  else
    b->copy_device_to_device(t.device(), t.raw(), src.raw(), t.nbytes());
}

void Executor::validate_inputs(const std::map<std::string, Tensor>& inputs) const {
  for (const auto& name : graph_.inputs) {
    auto it = inputs.find(name);
    GR_CHECK(it != inputs.end(), "missing input '" << name << "' (graph '" << graph_.name << "' needs "
                                                   << [&] {
                                                        std::string s;
                                                        for (const auto& i : graph_.inputs) s += (s.empty() ? "" : ", ") + i;
                                                        return s;
                                                      }() << ")");
    const Tensor& t = it->second;
    const ValueInfo* vi = graph_.info(name);
    if (!vi) continue;
    GR_CHECK(vi->dtype == DType::Undefined || vi->dtype == t.dtype(),
             "input '" << name << "' must be " << dtype_name(vi->dtype) << ", got " << dtype_name(t.dtype()));
    if (!vi->has_shape) continue;
    bool ok = static_cast<int>(vi->shape.size()) == t.rank();
    for (int d = 0; ok && d < t.rank(); ++d)
      if (vi->shape[d].known() && vi->shape[d].size != t.dim(d)) ok = false;
    GR_CHECK(ok, "input '" << name << "' must have shape " << vi->str().substr(std::strlen(dtype_name(vi->dtype)))
                             << ", got " << shape_str(t.shape()));
  }
  for (const auto& [name, _] : inputs)
    GR_CHECK(graph_.is_input(name), "'" << name << "' is not an input of graph '" << graph_.name << "'");
}

namespace {

// A dimension's size where `bound` gives its symbols' sizes: a number, a symbol ("N") or a product of
// them ("4*N", "N*T", as graphrun's inference writes a reshape's); -1 where any factor is unknown.
int64_t bound_size(const Dim& d, const std::map<std::string, int64_t>& bound) {
  if (d.known()) return d.size;
  if (d.param.empty()) return -1;
  int64_t size = 1;
  size_t at = 0;
  while (at <= d.param.size()) {
    const size_t end = std::min(d.param.find('*', at), d.param.size());
    const std::string f = d.param.substr(at, end - at);
    int64_t v = -1;
    if (!f.empty() && std::all_of(f.begin(), f.end(), [](char c) { return c >= '0' && c <= '9'; }) && f.size() < 18)
      v = std::stoll(f);
    else if (auto it = bound.find(f); it != bound.end())
      v = it->second;
    if (v < 0 || (v > 0 && size > (int64_t{1} << 62) / v)) return -1;
    size *= v;
    at = end + 1;
  }
  return size;
}

}  // namespace

// The symbols of the inputs' declared shapes, sized by the shapes given; `leading`: the symbol of the
// first input whose leading dimension has one (the batch, mostly).
std::map<std::string, int64_t> Executor::bound_symbols(const std::map<std::string, Shape>& input_shapes,
                                                       std::string* leading) const {
  std::map<std::string, int64_t> bound;
  for (const auto& name : graph_.inputs) {
    auto vi = graph_.values.find(name);
    auto given = input_shapes.find(name);
    if (vi == graph_.values.end() || given == input_shapes.end() || !vi->second.has_shape ||
        vi->second.shape.size() != given->second.size())
      continue;
    for (size_t i = 0; i < vi->second.shape.size(); ++i) {
      const Dim& d = vi->second.shape[i];
      if (d.known() || d.param.empty() || d.param.find('*') != std::string::npos) continue;
      const int64_t size = given->second[i];
      auto [it, fresh] = bound.emplace(d.param, size);
      if (!fresh) it->second = std::min(it->second, size);  // inputs that disagree: the smaller, still a bound
      if (i == 0 && leading && leading->empty()) *leading = d.param;
    }
  }
  return bound;
}

size_t Executor::static_peak_bytes_at(const std::map<std::string, int64_t>& bound) const {
  const Layout& L = *layout_;
  const int n = static_cast<int>(graph_.nodes.size());
  std::vector<size_t> bytes(L.nslots, 0);
  for (const auto& [name, sl] : L.slot_of) {
    auto vi = graph_.values.find(name);
    if (vi == graph_.values.end() || !vi->second.has_shape || vi->second.dtype == DType::Undefined) continue;
    double numel = 1;
    for (const Dim& d : vi->second.shape) {
      const int64_t v = bound_size(d, bound);
      numel = v < 0 ? -1 : numel * static_cast<double>(v);
      if (numel < 0) break;
    }
    if (numel >= 0) bytes[sl] = static_cast<size_t>(std::min(numel * dtype_size(vi->second.dtype), 1e18));
  }
  // What the planning run takes from its pool: each step's pooled outputs while its inputs are still
  // held, freed after their last reader. Views and the AllReduce sums that may take their gradient's
  // buffer count nothing, nor does scratch: a lower bound.
  // Counted: what the run frees again (on the CPU, what it takes from its pool; on a device, what it
  // allocates there), never fetched values or state.
  std::vector<bool> counted = L.pooled;
  if (!opts_.device.is_cpu()) {
    counted.assign(L.nslots, true);
    for (const auto& f : opts_.fetch) counted[L.slot_of.at(f)] = false;
    for (const auto& [v, _] : opts_.state_updates) counted[L.slot_of.at(v)] = false;
  }
  std::vector<bool> shared(L.nslots, false);
  for (int s = 0; s < n; ++s)
    if (L.view_step[s]) shared[L.out_slots[s][0]] = true;
  for (const auto& [s, in, out] : L.allreduce_aliases) shared[out] = true;
  size_t live = 0, peak = 0;
  for (int s = 0; s < n; ++s) {
    const Node& node = graph_.nodes[s];
    for (size_t k = 0; k < L.out_slots[s].size(); ++k) {
      const int o = L.out_slots[s][k];
      if (node.has_output(k) && counted[o] && !shared[o] && !L.is_host(o))
        live += std::min(bytes[o], std::numeric_limits<size_t>::max() / 2 - live);  // saturates
    }
    peak = std::max(peak, live);
    auto release = [&](int sl) {
      if (sl >= 0 && L.def_step[sl] >= 0 && L.last_use[sl] == s && counted[sl] && !shared[sl] && !L.is_host(sl))
        live -= std::min(live, bytes[sl]);
    };
    std::set<int> once(L.in_slots[s].begin(), L.in_slots[s].end());
    for (int o : L.out_slots[s]) once.insert(o);
    for (int sl : once) release(sl);
  }
  return peak;
}

int64_t Executor::most_that_fits(const std::map<std::string, Shape>& input_shapes, size_t limit,
                                 size_t per_unit) const {
  std::string leading;
  auto bound = bound_symbols(input_shapes, &leading);
  if (leading.empty()) return -1;
  // By bisection: the count grows with the symbol. count(lo) fits (or lo = 0), count(hi) does not.
  int64_t lo = 0, hi = bound.at(leading) + 1;
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    bound[leading] = mid;
    const bool room = !per_unit || static_cast<size_t>(mid) <= limit / per_unit;
    (room && static_peak_bytes_at(bound) <= limit - per_unit * static_cast<size_t>(mid) ? lo : hi) = mid;
  }
  return lo;
}

size_t Executor::check_first_run_fits(const std::map<std::string, Shape>& input_shapes) const {
  std::string leading;
  auto bound = bound_symbols(input_shapes, &leading);
  const size_t need = static_peak_bytes_at(bound);
  const size_t limit = opts_.memory_limit;
  if (!limit || need <= limit) return need;
  // The most the leading symbol (the batch) could be by the same count: an upper bound of what fits,
  // since the count is a lower bound of what a run takes.
  std::string most;
  if (!leading.empty() && bound.at(leading) > 1) {
    const int64_t given = bound.at(leading), lo = most_that_fits(input_shapes, limit);
    most = lo ? "; by that count at most " + std::to_string(lo) + " of its " + std::to_string(given) + " along '" +
                    leading + "' could fit"
              : "; by that count not even 1 along '" + leading + "' fits: the values that do not grow with it need " +
                    bytes_str((bound[leading] = 0, static_peak_bytes_at(bound)));
  }
  GR_FAIL_OUT_OF_MEMORY("the first run needs more than "
                        << bytes_str(limit) << " of memory for its activations (at least " << bytes_str(need)
                        << " by the shapes of its values, counted before it runs" << most << ")"
                        << (opts_.memory_hint.empty() ? std::string() : "; " + opts_.memory_hint));
}

Executor::Plan& Executor::plan_for(const std::map<std::string, Tensor>& inputs) {
  std::vector<std::pair<DType, Shape>> key;
  for (const auto& name : graph_.inputs) key.emplace_back(inputs.at(name).dtype(), inputs.at(name).shape());
  for (auto& p : plans_)
    if (p->key == key) return *p;
  while (!plans_.empty() && plans_.size() >= std::max<size_t>(opts_.max_plans, 1)) plans_.erase(plans_.begin());
  const Layout& L = *layout_;
  auto p = std::make_unique<Plan>();
  p->key = key;
  p->slot_tensor.resize(L.nslots);
  p->slot_dtype.resize(L.nslots, DType::Undefined);
  p->slot_shape.resize(L.nslots);
  p->slot_seen.resize(L.nslots, false);
  p->scratch_bytes.resize(graph_.nodes.size(), 0);
  p->scratch_offset.resize(graph_.nodes.size(), 0);
  p->async_step.resize(graph_.nodes.size(), false);
  p->slot_preset.resize(L.nslots, false);
  for (const auto& [src, _] : L.inplace_updates) p->slot_preset[src] = true;
  if (opts_.device.is_cpu()) p->pool = PlanningPool::create(PlanningPool::default_reserve());
  p->memory_limit = opts_.memory_limit;
  p->memory_hint = &opts_.memory_hint;
  plans_.push_back(std::move(p));
  return *plans_.back();
}

std::map<std::string, Tensor> Executor::run(const std::map<std::string, Tensor>& inputs) {
  validate_inputs(inputs);
  Plan& P = plan_for(inputs);
  last_ = &P;
  if (P.planned) return run_plan(P, inputs);
  // A first run that fails leaves no half-made plan behind: its buffers go back, and a run at the same
  // shape plans afresh (the evaluation retries a smaller batch after running out of memory).
  try {
    return run_plan(P, inputs);
  } catch (...) {
    for (auto it = plans_.begin(); it != plans_.end(); ++it)
      if (it->get() == &P) {
        plans_.erase(it);
        break;
      }
    last_ = plans_.empty() ? nullptr : plans_.back().get();
    throw;
  }
}

std::map<std::string, Tensor> Executor::run_plan(Plan& P, const std::map<std::string, Tensor>& inputs) {
  // A first run whose values alone, by their shapes, exceed the memory limit stops before any kernel
  // runs (a huge batch used to find out at the limit, after minutes of its first step).
  if (!P.planned && (P.pool || P.memory_limit)) {
    std::map<std::string, Shape> shapes;
    for (const auto& name : graph_.inputs) shapes[name] = inputs.at(name).shape();
    P.stats.static_peak_bytes = check_first_run_fits(shapes);
  }
  const Layout& L = *layout_;
  const int n = static_cast<int>(graph_.nodes.size());
  omp_set_num_threads(opts_.threads);
  DeviceBackend* backend = device_backend(opts_);

  // Bind inputs and state to their slots. A device executor copies host inputs into buffers of the plan.
  std::vector<const Tensor*> fixed(L.nslots, nullptr);
  if (P.input_copies.empty()) P.input_copies.resize(graph_.inputs.size());
  for (size_t k = 0; k < graph_.inputs.size(); ++k) {
    const std::string& name = graph_.inputs[k];
    const Tensor* given = &inputs.at(name);
    if (!shares_memory(given->device(), opts_.device)) {
      GR_CHECK(given->device().is_cpu(), "input '" << name << "' is on " << given->device().str()
                                                   << ", this executor runs on " << opts_.device.str());
      Tensor& buf = P.input_copies[k];
      if (!buf.defined()) buf = backend->empty(opts_.device, given->dtype(), given->shape());
      if (given->nbytes()) backend->copy_host_to_device(opts_.device, buf.raw(), given->raw(), given->nbytes());
      given = &buf;
    }
    P.slot_tensor[L.slot_of.at(name)] = *given;
    fixed[L.slot_of.at(name)] = given;
  }
  for (auto& [name, t] : state_) fixed[L.slot_of.at(name)] = &t;
  // In-place state updates write the state's buffer (which share_state may have replaced since the last run).
  for (const auto& [src, st] : L.inplace_updates)
    if (P.slot_preset[src]) P.slot_tensor[src] = *fixed[st];

  const int64_t opset = graph_.opset("");
  std::vector<Pending> pending(n);
  DrainOnUnwind drain{pending};
  std::vector<bool> held(P.planned ? 0 : L.nslots, false);  // planning run: buffers async work may still use
  ProfileTrack* prof = opts_.profile;
  std::vector<int64_t> span_begin;
  for (int s = 0; s < n; ++s) {
    const Node& node = graph_.nodes[s];
    for (int a : L.finishing_before[s]) finish_pending(pending, a, graph_.nodes[a], prof);
    // A node whose first reader comes right after it has nothing to overlap: it runs synchronously.
    RunContext ctx(node, opset, opts_.threads, opts_.device, opts_.comm, &rng_, P, L.out_slots[s], L.pooled, s, backend,
                   L.on_host(s), opts_.async_kernels && L.complete_at[s] > s + 1);
    ctx.poison_scratch(opts_.poison_scratch);
    auto& ins = ctx.inputs();
    ins.reserve(L.in_slots[s].size());
    for (int i : L.in_slots[s]) {
      if (i < 0) { ins.push_back(nullptr); continue; }
      const Tensor* t = fixed[i] ? fixed[i] : &P.slot_tensor[i];
      GR_CHECK(t->defined() || fixed[i], node.describe() << ": input '" << node.inputs[ins.size()]
                                                          << "' has no value (its producer did not write it)");
      ins.push_back(t);
    }
    if (!P.planned)
      // As the plan will (see below): each sum goes into its gradient's buffer where nothing reads the
      // gradient later, so that the planning run's peak, which the process touches, is the plan's.
      for (const auto& [step, in, out] : L.allreduce_aliases)
        if (step == s && !held[in] && L.pooled[in] && L.pooled[out] && P.slot_tensor[in].defined()) {
          P.slot_tensor[out] = P.slot_tensor[in];
          P.slot_preset[out] = true;
        }
    const int64_t t0 = prof ? prof->now() : 0;
    naming_node(node, [&] { fns_[s](ctx); });
    if (prof) {
      const Tensor* out0 = L.out_slots[s].empty() ? nullptr : &P.slot_tensor[L.out_slots[s][0]];
      record_node(*prof, opts_.profile_spans, span_begin, s, node, ins, out0, t0);
    }
    if (ctx.deferred()) {
      pending[s] = ctx.take_work();
      if (!P.planned) hold_async_buffers(s, P, held);
      // A node planned as synchronous has no extended lifetimes: finish it now.
      else if (!P.async_step[s]) finish_pending(pending, s, node, prof);
    }
    if (!P.planned) {
      // Free what is dead so the planning run's peak stays close to the planned one.
      // Host-placed values keep their buffers (they stay out of the device arena).
      for (int i : L.in_slots[s])
        if (i >= 0 && !fixed[i] && !held[i] && L.last_use[i] == s && !L.is_host(i)) P.slot_tensor[i] = Tensor();
      for (size_t k = 0; k < L.out_slots[s].size(); ++k) {
        int o = L.out_slots[s][k];
        GR_CHECK(P.slot_seen[o] || !node.has_output(k),
                 node.describe() << ": kernel did not write output '" << node.outputs[k] << "'");
        if (!held[o] && L.last_use[o] == s && !L.is_host(o)) P.slot_tensor[o] = Tensor();
      }
    }
  }
  for (int a : L.finishing_before[n]) finish_pending(pending, a, graph_.nodes[a], prof);

  std::map<std::string, Tensor> result;
  for (const auto& f : opts_.fetch) {
    int sl = L.slot_of.at(f);
    result[f] = fixed[sl] ? *fixed[sl] : P.slot_tensor[sl];
  }

  if (!P.planned) {
    // Plan memory: every produced value gets an interval [definition, last use]; state-update
    // sources get buffers of their own (they are swapped into the state after each run).
    std::set<int> own;
    for (const auto& [v, _] : opts_.state_updates) own.insert(L.slot_of.at(v));
    std::vector<Interval> items;
    size_t total = 0;
    int planned_values = 0;
    std::vector<int> last_use = L.last_use, scratch_end(n);
    extend_for_async(P, last_use, scratch_end);
    auto packed = [&](int sl) { return L.def_step[sl] >= 0 && P.slot_seen[sl] && !own.count(sl) && !L.is_host(sl); };
    auto bytes_of = [&](int sl) { return shape_numel(P.slot_shape[sl]) * dtype_size(P.slot_dtype[sl]); };
    // Views: the output of a view step shares the buffer of its input's root (the first value of a chain
    // of views), which then stays alive until the last use of every view of it.
    std::vector<int> root(L.nslots, -1), end(L.nslots, -1);
    for (int sl = 0; sl < L.nslots; ++sl) end[sl] = std::max(last_use[sl], L.def_step[sl]);
    for (int s = 0; s < n; ++s) {
      if (!L.view_step[s] || L.on_host(s)) continue;
      const int in = L.in_slots[s][0], out = L.out_slots[s][0];
      if (!packed(in) || !packed(out)) continue;
      const int base = root[in] >= 0 ? root[in] : in;
      if (bytes_of(base) != bytes_of(out) || P.slot_dtype[base] != P.slot_dtype[out]) continue;
      root[out] = base;
    }
    for (int sl = 0; sl < L.nslots; ++sl)
      if (root[sl] >= 0) end[root[sl]] = std::max(end[root[sl]], end[sl]);
    // A CPU AllReduce writes each sum into its gradient's buffer where nothing reads the gradient after
    // it (the kernel has packed every input into its bucket, or is summing that one tensor in place,
    // before it writes an output): a bucket's gradients and sums take one buffer, not two.
    for (const auto& [s, in, out] : L.allreduce_aliases) {
      if (!packed(in) || !packed(out) || root[in] >= 0 || root[out] >= 0 || std::count(root.begin(), root.end(), in) ||
          bytes_of(in) != bytes_of(out) || P.slot_dtype[in] != P.slot_dtype[out])
        continue;
      root[out] = in;
      for (int& r : root)
        if (r == out) r = in;
      end[in] = std::max(end[in], end[out]);
    }
    for (int sl = 0; sl < L.nslots; ++sl) {
      if (!packed(sl)) continue;
      size_t bytes = align_up(std::max<size_t>(1, bytes_of(sl)));
      total += bytes;
      ++planned_values;
      if (root[sl] >= 0) continue;
      items.push_back({L.def_step[sl], end[sl], bytes, 0, sl});
    }
    for (int s = 0; s < n; ++s)
      if (P.scratch_bytes[s] && !L.on_host(s)) {
        items.push_back({s, scratch_end[s], align_up(P.scratch_bytes[s]), 0, -1 - s});
        total += align_up(P.scratch_bytes[s]);
      }
    size_t arena_bytes = pack(items);
    // The planning run's buffers are dropped first: on the CPU the arena then takes the pool's range,
    // whose pages that run touched already.
    for (const Interval& it : items)
      if (it.slot >= 0) P.slot_tensor[it.slot] = Tensor();
    for (int sl = 0; sl < L.nslots; ++sl)
      if (root[sl] >= 0) P.slot_tensor[sl] = Tensor();
    if (P.pool) {
      P.stats.planning_peak_bytes = P.pool->high_water();
      P.stats.planning_live_peak_bytes = P.pool->peak_live();
      P.arena = P.pool->take_as_arena(std::max<size_t>(kAlign, arena_bytes));
      P.stats.arena_in_pool = P.arena != nullptr;
      P.pool.reset();
    }
    if (!P.arena) {
      const Device dev = opts_.device;
      void* mem = backend->allocate(dev, std::max<size_t>(kAlign, arena_bytes));
      P.arena = std::shared_ptr<void>(mem, [backend, dev](void* p) { backend->deallocate(dev, p); });
    }
    char* base = static_cast<char*>(P.arena.get());
    // This first run's fetched values stay owning tensors; later runs return arena views.
    // State-update sources keep the owning buffers they got (swapped with the state below).
    std::vector<size_t> offset(L.nslots, 0);
    for (const Interval& it : items) {
      if (it.slot >= 0) {
        P.slot_tensor[it.slot] = Tensor::view(P.slot_dtype[it.slot], P.slot_shape[it.slot], base + it.offset, opts_.device);
        offset[it.slot] = it.offset;
      } else {
        P.scratch_offset[-1 - it.slot] = it.offset;
      }
    }
    int views = 0;
    for (int sl = 0; sl < L.nslots; ++sl)
      if (root[sl] >= 0) {
        P.slot_tensor[sl] = Tensor::view(P.slot_dtype[sl], P.slot_shape[sl], base + offset[root[sl]], opts_.device);
        ++views;
      }
    P.stats.arena_bytes = arena_bytes;
    P.stats.intermediate_bytes = total;
    P.stats.values = planned_values;
    P.stats.views = views;
    P.stats.async_nodes = static_cast<int>(std::count(P.async_step.begin(), P.async_step.end(), true));
    size_t pers = 0;
    for (const auto& [_, t] : state_) pers += t.nbytes();
    P.stats.persistent_bytes = pers;
    P.planned = true;
  }

  // Persist state updates: the state takes the produced buffer; the plan keeps the old one to write next time.
  for (const auto& [v, init] : opts_.state_updates) {
    int sl = L.slot_of.at(v);
    if (P.slot_preset[sl]) continue;  // written in place (Layout::inplace_updates): the state holds it already
    Tensor& st = state_.at(init);
    Tensor& produced = P.slot_tensor[sl];
    GR_CHECK(produced.dtype() == st.dtype() && produced.numel() == st.numel(),
             "state update '" << v << "' -> '" << init << "': " << dtype_name(produced.dtype())
                              << shape_str(produced.shape()) << " does not fit " << dtype_name(st.dtype())
                              << shape_str(st.shape()));
    Shape st_shape = st.shape(), pr_shape = produced.shape();
    std::swap(st, produced);
    st = st.reshaped(st_shape);
    produced = produced.reshaped(pr_shape);
  }
  return result;
}

void Executor::hold_async_buffers(int s, Plan& P, std::vector<bool>& held) const {
  const Layout& L = *layout_;
  P.async_step[s] = true;
  for (int i : L.in_slots[s])
    if (i >= 0) held[i] = true;
  for (int o : L.out_slots[s]) held[o] = true;
}

// The inputs, outputs and scratch of an asynchronous step s stay live until its completion, which
// runs before step complete_at[s]: so through step complete_at[s] - 1 (the outputs of the step
// that reads the result may take their memory; the completion ran before it).
void Executor::extend_for_async(const Plan& P, std::vector<int>& last_use, std::vector<int>& scratch_end) const {
  const Layout& L = *layout_;
  const int n = static_cast<int>(scratch_end.size());
  for (int s = 0; s < n; ++s) {
    scratch_end[s] = s;
    if (!P.async_step[s]) continue;
    const int until = std::max(s, L.complete_at[s] - 1);
    scratch_end[s] = until;
    for (int i : L.in_slots[s])
      if (i >= 0) last_use[i] = std::max(last_use[i], until);
    for (int o : L.out_slots[s]) last_use[o] = std::max(last_use[o], until);
  }
}

PlanStats Executor::plan_stats() const { return last_ ? last_->stats : PlanStats{}; }

size_t Executor::held_bytes() const {
  size_t n = 0;
  for (const auto& p : plans_) n += p->stats.arena_bytes;
  return n;
}

void Executor::set_memory_limit(size_t bytes, const std::string& hint) {
  opts_.memory_limit = bytes;
  opts_.memory_hint = hint;  // (plans point to this string)
}

std::map<std::string, std::pair<DType, Shape>> Executor::value_types() const {
  std::map<std::string, std::pair<DType, Shape>> r;
  if (!last_) return r;
  const Layout& L = *layout_;
  for (const auto& [name, sl] : L.slot_of)
    if (last_->slot_seen[sl]) r[name] = {last_->slot_dtype[sl], last_->slot_shape[sl]};
  return r;
}

std::string Executor::rng_state() const {
  std::ostringstream os;
  os << rng_;
  return os.str();
}

void Executor::set_rng_state(const std::string& state) {
  std::istringstream is(state);
  std::mt19937_64 r;
  is >> r;
  GR_CHECK(!is.fail(), "bad random-generator state for graph '" << graph_.name << "'");
  rng_ = r;
}

}  // namespace graphrun::runtime

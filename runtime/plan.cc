// graphrun plan: the replica graph built and run as graphrun train would, its profile (FLOPs, node
// times), its memory plan and buckets, and the ring-allreduce schedule that predicts a step at N devices.
#include "runtime/plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iomanip>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <ostream>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "graph/passes/add_metrics.h"
#include "graph/passes/bucket_allreduce.h"
#include "runtime/comm/communicator.h"
#include "runtime/data/idx.h"
#include "runtime/device.h"
#include "runtime/executor.h"
#include "runtime/run_at_once.h"
#include "runtime/profile.h"

namespace graphrun::runtime {

namespace {

// Link presets: sustained per-device bandwidth of a ring's one direction (what NCCL's bus bandwidth
// reaches, not the data sheet's peak), and the latency of one message.
struct Preset {
  const char* name;
  double gbytes_per_s, latency_us;
  const char* what;
};
const Preset kPresets[] = {
    {"nvlink", 150, 5, "NVLink 3 (A100 class), one node"},
    {"pcie", 12, 10, "PCIe 4.0 x16 through the host, peer-to-peer off"},
    {"ib", 12, 5, "InfiniBand EDR 100 Gb/s, one NIC per device"},
    {"ethernet", 1.25, 50, "10 Gb/s Ethernet, TCP"},
    {"shm", 5, 2, "in-process replicas of graphrun train --devices cpu:N (shared memory)"},
};

std::string num(double v, int prec) {
  char b[48];
  std::snprintf(b, sizeof b, "%.*f", prec, v);
  return b;
}

// The shapes of the inputs graphrun train feeds one replica for a shard of n examples of the global batch.
// The leading dimension is the shard; other symbolic ones take their sizes from `o` (PlanOptions). The
// shard's inputs must fit in `avail` bytes (0: unknown), or one line ending in `hint`.
std::map<std::string, Shape> shard_shapes(const Graph& g, const TrainingGraphs& tg, int64_t n, const PlanOptions& o,
                                          size_t avail, const std::string& hint) {
  std::map<std::string, Shape> shapes;
  double bytes = 0;  // in double: no overflow
  for (const std::string& name : g.inputs) {
    if (name == tg.loss_scale || name == tg.lr || name == tg.step) {
      shapes[name] = {};
      continue;
    }
    const ValueInfo& vi = g.values.at(name);
    GR_CHECK(vi.has_shape, "plan: input '" << name << "' of graph '" << g.name << "' has no known rank");
    const auto example = o.example_shapes.find(name);
    const bool from_data = example != o.example_shapes.end() && example->second.size() + 1 == vi.shape.size();
    Shape s;
    for (size_t i = 0; i < vi.shape.size(); ++i) {
      const Dim& d = vi.shape[i];
      if (d.known()) s.push_back(d.size);
      else if (i == 0) s.push_back(n);
      else if (from_data) s.push_back(example->second[i - 1]);
      else if (!d.param.empty() && o.dims.count(d.param)) s.push_back(o.dims.at(d.param));
      else if (o.sized_by_data)
        GR_FAIL("plan: input '" << name << "' has the symbolic dimension '" << (d.param.empty() ? "?" : d.param)
                                << "' (axis " << i << "), which the training data does not size: that needs an array of "
                                << vi.shape.size() - 1 << " dimension(s) per example for '" << name << "'"
                                << (example != o.example_shapes.end()
                                        ? " (the data's has " + std::to_string(example->second.size()) + ")"
                                        : " (the data has none)"));
      else if (d.param.empty())
        GR_FAIL("plan: input '" << name << "' has a symbolic dimension without a name (axis " << i
                                << "): name it when exporting (torch.onnx.export's dynamic_axes) and give its size "
                                   "with --dims NAME=SIZE");
      else
        GR_FAIL("plan: input '" << name << "' has the symbolic dimension '" << d.param << "' (axis " << i
                                << "): give its size with --dims " << d.param << "=SIZE");
    }
    double need = static_cast<double>(dtype_size(vi.dtype));
    for (int64_t d : s) need *= static_cast<double>(d);
    bytes += need;
    GR_CHECK(!avail || bytes <= static_cast<double>(avail), "plan: the shard's inputs need at least "
                                                                << bytes_str(bytes) << " and this machine has "
                                                                << bytes_str(static_cast<double>(avail))
                                                                << " available; " << hint);
    shapes[name] = std::move(s);
  }
  return shapes;
}

// The inputs themselves, at `shapes` (shard_shapes): the model's input gets seeded uniform [0, 1) values,
// labels class 0 (their values do not change the work).
std::map<std::string, Tensor> shard_inputs(const Graph& g, const TrainingGraphs& tg, int64_t n, const PlanOptions& o,
                                           const std::map<std::string, Shape>& shapes) {
  std::map<std::string, Tensor> in;
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(0, 1);
  for (const std::string& name : g.inputs) {
    if (name == tg.loss_scale) {
      in[name] = loss_scale_value(g, name, n, o.batch_size);
      continue;
    }
    if (name == tg.lr) {  // 0: the weights stay as they are over the timed steps
      in[name] = Tensor::scalar<float>(0.f);
      continue;
    }
    if (name == tg.step) {
      in[name] = Tensor::scalar<int64_t>(1);
      continue;
    }
    Tensor t(g.values.at(name).dtype, shapes.at(name));
    if (t.dtype() == DType::F32) {
      float* p = t.data<float>();
      for (int64_t i = 0; i < t.numel(); ++i) p[i] = u(rng);
    }
    in[name] = std::move(t);
  }
  return in;
}

struct Measured {
  std::vector<PlannedNode> nodes;
  PlanStats stats;
  std::map<std::string, size_t> state_bytes;
};

// Runs the replica graph as the trainer's executor would (the same graph with the correct count, the
// same fetches and state updates) at shard n: once to plan, then `timed` times, timing every node.
// `copies` > 1: that many replicas run the timed steps at once on their own threads, as graphrun
// train's in-process replicas do (they share this machine's cores); the times are replica 0's.
Measured run_replica(const TrainingGraphs& tg, const DeviceGraph& dg, int64_t n, int timed, bool count,
                     const PlanOptions& o, int copies = 1) {
  Graph g = dg.graph;
  const auto figures = passes::append_step_figures(g, tg.loss, tg.logits, tg.labels, count);
  Profiler prof;
  std::vector<std::unique_ptr<Communicator>> comms;
  std::vector<std::unique_ptr<Executor>> execs;
  // The shard runs on this machine: its inputs and each copy's first run stay within the memory available
  // (one line naming --batch-size, before any kernel where the shapes say so, not the out-of-memory killer).
  const size_t avail = backend_for(Device::Kind::CPU)->free_memory(Device{});
  const bool baseline = n == o.batch_size && o.devices > 1;  // one device on the whole batch
  const std::string hint = "lower --batch-size (planning runs " + std::to_string(n) + " examples on this machine" +
                           (baseline ? ": the one-device baseline, which --device-tflops models instead)" : ")");
  for (int c = 0; c < copies; ++c) {
    for (auto& comm : backend_for(Device::Kind::CPU)->make_communicators({Device{}})) comms.push_back(std::move(comm));
    ExecOptions eo;
    eo.threads = o.threads;
    if (avail) eo.memory_limit = run_memory_limit(avail, static_cast<size_t>(copies)), eo.memory_hint = hint;
    eo.fetch = count ? std::vector<std::string>{figures.loss, figures.correct} : std::vector<std::string>{figures.loss};
    eo.state_updates = dg.state_updates;
    eo.comm = comms.back().get();
    eo.profile = &prof.track("plan " + std::to_string(c));
    execs.push_back(std::make_unique<Executor>(g, eo));
  }
  Executor& exec = *execs[0];
  const ProfileTrack& track = *exec.options().profile;
  // Counted from the shapes before the inputs are drawn (a batch too large used to spend its random draw first).
  const auto shapes = shard_shapes(g, tg, n, o, avail, hint);
  for (auto& e : execs) e->check_first_run_fits(shapes);
  const auto in = shard_inputs(g, tg, n, o, shapes);
  for (auto& e : execs) e->run(in);
  Measured m;
  m.stats = exec.plan_stats();
  for (const auto& [name, t] : exec.states()) m.state_bytes[name] = t.nbytes();
  const size_t per_run = track.events().size();
  std::map<std::string, int> index;
  for (size_t i = 0; i < per_run; ++i) {
    const ProfileEvent& e = track.events()[i];
    if (e.cat != "kernel") continue;
    index[std::string(e.node)] = static_cast<int>(m.nodes.size());
    PlannedNode pn{std::string(e.node), std::string(e.name), e.flops, 0, -1, 0, false, {}};
    if (e.name == "ReplicaSum") pn.sync = true, pn.sync_bytes = e.bytes_in;
    m.nodes.push_back(pn);
  }
  run_at_once(copies, [&](int c) {
    for (int s = 0; s < timed; ++s) execs[c]->run(in);
  });
  for (size_t i = per_run; i < track.events().size(); ++i) {
    const ProfileEvent& e = track.events()[i];
    auto it = index.find(std::string(e.node));
    if (e.cat == "kernel" && it != index.end()) m.nodes[it->second].seconds += e.dur_ns / 1e9 / timed;
  }
  return m;
}

double compute_seconds(const std::vector<PlannedNode>& nodes) {
  double s = 0;
  for (const PlannedNode& n : nodes)
    if (n.bucket < 0 && !n.sync) s += n.seconds;
  return s;
}

}  // namespace

std::string LinkModel::describe() const {
  return name + " (" + num(gbytes_per_s, gbytes_per_s < 10 ? 2 : 0) + " GB/s, " + num(latency_us, 0) +
         " us per message)";
}

LinkModel parse_link(const std::string& spec) {
  for (const Preset& p : kPresets)
    if (spec == p.name) return {p.name, p.gbytes_per_s, p.latency_us};
  char* end = nullptr;
  const double v = std::strtod(spec.c_str(), &end);
  GR_CHECK(!spec.empty() && *end == 0 && v >= 1e-3 && v <= 1e6,
           "--link '" << spec << "': give nvlink, pcie, ib, ethernet, shm or a bandwidth in GB/s from 0.001 to 1000000 (e.g. 25)");
  return {spec + " GB/s", v, 10};
}

double ring_allreduce_seconds(size_t bytes, int p, const LinkModel& link) {
  if (p <= 1) return 0;
  const double steps = 2.0 * (p - 1);
  return steps * link.latency_us * 1e-6 + steps / p * static_cast<double>(bytes) / (link.gbytes_per_s * 1e9);
}

void predict_step(Plan& plan, int p) {
  const PlanOptions& o = plan.options;
  double clock = 0, comm_free = 0;
  std::vector<double> done(plan.buckets.size(), 0);
  plan.comm_n = plan.sync_n = 0;
  for (PlannedNode& n : plan.nodes) {
    if (n.sync) {  // SyncBatchNorm's statistics: the step waits for them, on the buckets' link
      for (int b : n.reads_buckets) clock = std::max(clock, done[b]);
      n.seconds = ring_allreduce_seconds(n.sync_bytes, p, o.link);
      clock = comm_free = std::max(clock, comm_free) + n.seconds;
      plan.sync_n += n.seconds;
      continue;
    }
    if (n.bucket >= 0) {
      PlannedBucket& b = plan.buckets[n.bucket];
      n.seconds = ring_allreduce_seconds(b.bytes, p, o.link);
      b.ready_s = clock;
      b.start_s = std::max(clock, comm_free);  // one link: buckets go in order
      b.end_s = comm_free = done[n.bucket] = b.start_s + n.seconds;
      plan.comm_n += n.seconds;
      if (!o.overlap) clock = b.end_s;
      continue;
    }
    for (int b : n.reads_buckets) clock = std::max(clock, done[b]);
    clock += n.seconds;
  }
  plan.compute_n = compute_seconds(plan.nodes);
  plan.step_n = std::max(clock, comm_free);
  plan.exposed_comm = plan.step_n - plan.compute_n;
}

Plan make_plan(const Graph& model, const PlanOptions& options) {
  GR_CHECK(options.devices >= 1, "plan: devices must be at least 1, got " << options.devices);
  GR_CHECK(options.batch_size >= options.devices, "plan: batch size " << options.batch_size
                                                                       << " is smaller than the number of replicas ("
                                                                       << options.devices << ")");
  Plan plan;
  plan.model = model.name;
  plan.options = options;
  PipelineOptions po = options.pipeline;
  po.devices = {Device{}};  // every replica runs the same graph: one copy is enough
  po.executor_passes = true;  // train's replicas run the executor's graph (folded, fused, views)
  const TrainingGraphs tg = build_training_graphs(model, po);
  const DeviceGraph& dg = tg.replicas.at(0);
  const bool count = po.loss == autodiff::LossKind::CrossEntropy;  // (mse and output count nothing correct)
  const int64_t B = options.batch_size;
  plan.shard = data::shard(B, options.devices).size[0];
  const bool measure = options.predict && options.device_tflops <= 0;
  const int timed = measure ? std::max(1, options.measure_steps) : 0;
  Measured m = run_replica(tg, dg, plan.shard, timed, count, options, measure ? std::max(1, options.concurrent) : 1);

  // Memory, from the executor's plan and its state.
  const std::set<std::string> params(tg.params.begin(), tg.params.end());
  plan.memory.arena = m.stats.arena_bytes;
  plan.memory.first_step = m.stats.planning_peak_bytes;
  for (const auto& [name, bytes] : m.state_bytes) {
    if (params.count(name)) plan.memory.params += bytes;
    else if (!tg.training.is_initializer(name)) plan.memory.optimizer += bytes;  // added by add_optimizer
    else plan.memory.other_state += bytes;
  }
  plan.memory.grads = plan.memory.params;

  // Buckets, as bucket_allreduce cut them.
  const Graph& g = dg.graph;
  std::map<std::string, int> bucket_of_node, bucket_of_sum;
  int b = 0;
  for (const auto& bucket : passes::reduced_gradients(g)) {
    PlannedBucket pb;
    int last = -1;
    for (const auto& rg : bucket) {
      pb.bytes += g.initializers.at(rg.param).nbytes();
      ++pb.grads;
      bucket_of_sum[rg.sum] = b;
      const int at = g.producer(rg.grad);
      if (at >= last) last = at, pb.last_grad = rg.grad;
    }
    plan.allreduce_bytes += pb.bytes;
    plan.buckets.push_back(pb);
    ++b;
  }
  b = 0;
  for (const Node& n : g.nodes)
    if (n.op_type == "AllReduce" && n.domain == kGraphrunDomain) {
      plan.buckets.at(b).node = n.name;
      bucket_of_node[n.name] = b++;
    }
  std::map<std::string, const Node*> node_by_name;
  for (const Node& n : g.nodes) node_by_name[n.name] = &n;
  for (PlannedNode& n : m.nodes) {
    auto it = bucket_of_node.find(n.name);
    if (it != bucket_of_node.end()) n.bucket = it->second;
    auto nd = node_by_name.find(n.name);
    if (nd == node_by_name.end()) continue;
    std::set<int> reads;
    for (const std::string& v : nd->second->inputs)
      if (bucket_of_sum.count(v)) reads.insert(bucket_of_sum.at(v));
    n.reads_buckets.assign(reads.begin(), reads.end());
    if (n.sync) {
      ++plan.sync_nodes;
      plan.sync_bytes += n.sync_bytes;
    }
  }
  for (const PlannedNode& n : m.nodes) plan.flops_replica += n.flops;
  // Conv, ConvGrad, Gemm and MatMul FLOPs grow linearly in the batch.
  plan.flops_step = plan.flops_replica / static_cast<double>(plan.shard) * static_cast<double>(B);
  plan.nodes = std::move(m.nodes);
  if (!options.predict) return plan;

  if (measure) {
    // One device on the whole batch is timed too: per-node overheads do not shrink with the shard.
    plan.compute_1 = !options.baseline ? 0
                     : plan.shard == B ? compute_seconds(plan.nodes)
                                       : compute_seconds(run_replica(tg, dg, B, timed, count, options).nodes);
    plan.timing = "node times measured on this machine's CPU (" + std::to_string(options.threads) + " thread" +
                  (options.threads > 1 ? "s" : "") + ", mean of " + std::to_string(timed) + " steps" +
                  (options.concurrent > 1 ? ", " + std::to_string(options.concurrent) + " replicas at once" : "") + ")";
  } else {
    const double rate = options.device_tflops * 1e12, launch = options.kernel_us * 1e-6;
    plan.compute_1 = 0;
    for (PlannedNode& n : plan.nodes) {
      if (n.bucket >= 0) continue;
      n.seconds = n.flops / rate + launch;
      plan.compute_1 += n.flops * static_cast<double>(B) / static_cast<double>(plan.shard) / rate + launch;
    }
    plan.timing = "node times modelled: FLOPs / " + num(options.device_tflops, 1) + " TFLOP/s + " +
                  num(options.kernel_us, 0) + " us per node";
  }
  predict_step(plan, options.devices);
  return plan;
}

std::string CpuPlacement::str() const {
  return "cpu:" + std::to_string(replicas) + " x " + std::to_string(threads) + (threads == 1 ? " thread" : " threads");
}

std::vector<CpuPlacement> compare_cpu_placements(const Graph& model, const PlanOptions& base, int cores) {
  GR_CHECK(cores >= 1, "placement: cores must be at least 1, got " << cores);
  std::vector<CpuPlacement> ranked;
  for (int r = 1; r <= std::min(cores, 4); ++r) {
    if (cores % r != 0 || r > base.batch_size) continue;
    PlanOptions o = base;
    o.devices = o.concurrent = r;
    o.threads = cores / r;
    o.link = parse_link("shm");
    o.device_tflops = 0;
    o.predict = true;
    o.baseline = false;
    ranked.push_back({r, o.threads, make_plan(model, o).step_n});
  }
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const CpuPlacement& a, const CpuPlacement& b) { return a.step_s < b.step_s; });
  return ranked;
}

std::string describe_placements(const std::vector<CpuPlacement>& ranked) {
  if (ranked.empty()) return "placement: none";
  auto sig3 = [](double v) {  // 3 significant digits: 0.00412 and 6.23 alike
    std::ostringstream os;
    os << std::setprecision(3) << v;
    return os.str();
  };
  std::string s = "placement: " + ranked[0].str() + " (" + sig3(ranked[0].step_s) + " s/step predicted";
  for (size_t i = 1; i < ranked.size(); ++i) s += "; " + ranked[i].str() + ": " + sig3(ranked[i].step_s);
  return s + ")";
}

void print_plan_brief(std::ostream& os, const Plan& p) {
  const PlannedMemory& m = p.memory;
  os << "plan: " << num(p.flops_step / 1e9, 2) << " GFLOP per step; per replica (shard " << p.shard
     << "): arena " << bytes_str(double(m.arena)) << " + parameters " << bytes_str(double(m.params)) << " + optimizer state "
     << bytes_str(double(m.optimizer)) << " + other state " << bytes_str(double(m.other_state)) << " = " << bytes_str(double(m.peak()))
     << (m.first_step > m.arena ? " (the first step's buffers, " + bytes_str(double(m.first_step)) + ", in place of the arena)" : std::string())
     << "; " << p.buckets.size() << " AllReduce bucket" << (p.buckets.size() == 1 ? "" : "s") << ", "
     << bytes_str(double(p.allreduce_bytes)) << " per step";
  if (p.sync_nodes > 0)
    os << "; --sync-bn: " << p.sync_nodes << " ReplicaSum nodes, " << bytes_str(double(p.sync_bytes)) << " per step";
  os << std::endl;
}

void print_plan(std::ostream& os, const Plan& p) {
  const PlanOptions& o = p.options;
  const PlannedMemory& m = p.memory;
  char line[256];
  os << "plan for '" << p.model << "': " << o.devices << " replica" << (o.devices > 1 ? "s" : "") << ", global batch "
     << o.batch_size << " (shard " << p.shard << "), optimizer " << o.pipeline.optimizer.kind << ", buckets of "
     << bytes_str(double(o.pipeline.bucket_bytes)) << "\n\n";
  os << "FLOPs per step (forward + backward; Conv, ConvGrad, Gemm, MatMul)\n";
  std::snprintf(line, sizeof line, "  %-28s %14s\n  %-28s %14s\n", "global batch", (num(p.flops_step / 1e9, 3) + " GFLOP").c_str(),
                "one replica's shard", (num(p.flops_replica / 1e9, 3) + " GFLOP").c_str());
  os << line << "\n";
  os << "memory per replica (the executor's plan for the shard)\n";
  const std::pair<const char*, size_t> rows[] = {{"activations arena", m.arena},
                                                  {"first step (planning run)", m.first_step},
                                                  {"parameters", m.params},
                                                  {"optimizer state", m.optimizer},
                                                  {"other state", m.other_state},
                                                  {"peak", m.peak()}};
  for (const auto& [what, bytes] : rows) {
    std::snprintf(line, sizeof line, "  %-28s %14s\n", what, bytes_str(double(bytes)).c_str());
    os << line;
  }
  os << "  (gradients, " << bytes_str(double(m.grads)) << ", live in the arena; other state: BatchNorm running statistics,\n"
     << "  frozen parameters; the first step gives each value a buffer of its own until the arena is packed:\n"
     << "  the peak counts the larger of the two)\n\n";
  os << "AllReduce buckets, in the order the backward pass closes them: " << p.buckets.size() << ", "
     << bytes_str(double(p.allreduce_bytes)) << " per step\n";
  std::snprintf(line, sizeof line, "  %-16s %6s %12s  %-30s", "node", "grads", "bytes", "closed by");
  os << line << (o.predict ? "  ready ms  start ms    end ms" : "") << "\n";
  for (const PlannedBucket& b : p.buckets) {
    std::snprintf(line, sizeof line, "  %-16s %6d %12zu  %-30s", b.node.c_str(), b.grads, b.bytes, b.last_grad.c_str());
    os << line;
    if (o.predict) {
      std::snprintf(line, sizeof line, "  %8.3f  %8.3f  %8.3f", b.ready_s * 1e3, b.start_s * 1e3, b.end_s * 1e3);
      os << line;
    }
    os << "\n";
  }
  if (p.sync_nodes > 0)
    os << "\nSyncBatchNorm (--sync-bn): " << p.sync_nodes << " ReplicaSum nodes per step (BatchNorm statistics and\n"
       << "  their gradients), " << bytes_str(double(p.sync_bytes))
       << " per replica; each a blocking allreduce on the step's critical path\n";
  if (!o.predict) return;
  os << "\npredicted step at " << o.devices << " device" << (o.devices > 1 ? "s" : "") << ", link "
     << o.link.describe() << ", ring allreduce, overlap " << (o.overlap ? "on" : "off") << "\n  " << p.timing << "\n";
  const std::pair<std::string, double> t[] = {
      {"compute, 1 device, batch " + std::to_string(o.batch_size), p.compute_1},
      {"compute, 1 replica, shard " + std::to_string(p.shard), p.compute_n},
      {"allreduce, all buckets", p.comm_n},
      {"ReplicaSum (--sync-bn), blocking", p.sync_n},
      {"communication not hidden", p.exposed_comm},
      {"step at " + std::to_string(o.devices) + " devices", p.step_n}};
  for (const auto& [what, s] : t) {
    if (p.sync_nodes == 0 && what.rfind("ReplicaSum", 0) == 0) continue;
    std::snprintf(line, sizeof line, "  %-34s %12.3f ms\n", what.c_str(), s * 1e3);
    os << line;
  }
  std::snprintf(line, sizeof line, "  %-34s %12.2fx\n  %-34s %11.0f %%\n", "speedup over 1 device", p.speedup(),
                "scaling efficiency", 100 * p.efficiency());
  os << line;
}

std::string plan_json(const Plan& p) {
  const PlanOptions& o = p.options;
  nlohmann::json buckets = nlohmann::json::array();
  for (const PlannedBucket& b : p.buckets)
    buckets.push_back({{"node", b.node}, {"grads", b.grads}, {"bytes", b.bytes}, {"closed_by", b.last_grad},
                       {"ready_s", b.ready_s}, {"start_s", b.start_s}, {"end_s", b.end_s}});
  nlohmann::json j{
      {"model", p.model},
      {"devices", o.devices},
      {"batch_size", o.batch_size},
      {"shard", p.shard},
      {"optimizer", o.pipeline.optimizer.kind},
      {"bucket_bytes", o.pipeline.bucket_bytes},
      {"flops_per_step", p.flops_step},
      {"flops_per_replica", p.flops_replica},
      {"memory",
       {{"arena", p.memory.arena}, {"params", p.memory.params}, {"grads", p.memory.grads},
        {"optimizer", p.memory.optimizer}, {"other_state", p.memory.other_state},
        {"first_step", p.memory.first_step}, {"peak", p.memory.peak()}}},
      {"allreduce_bytes", p.allreduce_bytes},
      {"buckets", buckets},
      {"sync_bn", {{"replica_sum_nodes", p.sync_nodes}, {"bytes", p.sync_bytes}}}};
  if (o.predict)
    j["prediction"] = {{"link", o.link.name},
                       {"gbytes_per_s", o.link.gbytes_per_s},
                       {"latency_us", o.link.latency_us},
                       {"overlap", o.overlap},
                       {"timing", p.timing},
                       {"compute_1_s", p.compute_1},
                       {"compute_n_s", p.compute_n},
                       {"allreduce_s", p.comm_n},
                       {"exposed_allreduce_s", p.exposed_comm},
                       {"replica_sum_s", p.sync_n},
                       {"step_s", p.step_n},
                       {"speedup", p.speedup()},
                       {"efficiency", p.efficiency()}};
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string bytes_str(double bytes) {
  char b[32];
  if (bytes < 1024) std::snprintf(b, sizeof b, "%.0f B", bytes);
  else if (bytes < 1024.0 * 1024) std::snprintf(b, sizeof b, "%.1f KiB", bytes / 1024);
  else if (bytes < 1024.0 * 1024 * 1024) std::snprintf(b, sizeof b, "%.1f MiB", bytes / (1024.0 * 1024));
  else std::snprintf(b, sizeof b, "%.2f GiB", bytes / (1024.0 * 1024 * 1024));
  return b;
}

}  // namespace graphrun::runtime

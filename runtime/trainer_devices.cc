// Devices: the lists users write (cpu:2, cuda:0,1), whether they can be used here, and setting up one
// replica per device — its executor, feed, figures and communicator — on a thread of its own.
#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>
#include <thread>

#include "graph/passes/add_metrics.h"
#include "graph/passes/train_mode.h"
#include "runtime/comm/communicator.h"
#include "runtime/comm/mpi.h"
#include "runtime/kernels/cpu/gemm.h"
#include "runtime/plan.h"
#include "runtime/trainer_parts.h"

namespace graphrun::runtime {

namespace {

int64_t parse_index(const std::string& s, const std::string& spec) {
  GR_CHECK(!s.empty() && s.size() < 6 && std::all_of(s.begin(), s.end(), ::isdigit),
           "bad device list '" << spec << "' (expected cpu:N, cpu:0,cpu:1, cuda:0,1 or N)");
  return std::stoll(s);
}

}  // namespace

std::vector<Device> parse_devices(const std::string& spec) {
  std::vector<Device> r;
  GR_CHECK(!spec.empty(), "empty device list");
  if (std::all_of(spec.begin(), spec.end(), ::isdigit)) {
    int64_t n = parse_index(spec, spec);
    GR_CHECK(n >= 1 && n <= 256, "device count " << n << " must be between 1 and 256");
    for (int i = 0; i < n; ++i) r.push_back(Device{Device::Kind::CPU, i});
    return r;
  }
  // cpu:N alone means N replicas; otherwise a comma-separated list whose bare numbers reuse the last kind.
  if (spec.rfind("cpu:", 0) == 0 && spec.find(',') == std::string::npos) {
    int64_t n = parse_index(spec.substr(4), spec);
    if (n == 0) n = 1;  // "cpu:0" alone: the one device cpu:0
    GR_CHECK(n >= 1 && n <= 256, "'" << spec << "': the number of CPU replicas must be between 1 and 256");
    for (int i = 0; i < n; ++i) r.push_back(Device{Device::Kind::CPU, i});
    return r;
  }
  Device::Kind kind = Device::Kind::CPU;
  bool have_kind = false;
  std::stringstream ss(spec);
  std::string item;
  while (std::getline(ss, item, ',')) {
    std::string idx = item;
    if (item.rfind("cpu:", 0) == 0) { kind = Device::Kind::CPU; have_kind = true; idx = item.substr(4); }
    else if (item.rfind("cuda:", 0) == 0) { kind = Device::Kind::CUDA; have_kind = true; idx = item.substr(5); }
    else if (item == "cuda" || item == "gpu") GR_FAIL("bad device '" << item << "' in '" << spec << "' (write cuda:0)");
    GR_CHECK(have_kind, "bad device '" << item << "' in '" << spec << "' (expected cpu:N or cuda:N)");
    r.push_back(Device{kind, static_cast<int>(parse_index(idx, spec))});
  }
  GR_CHECK(!r.empty(), "empty device list '" << spec << "'");
  // One device, one replica: a GPU named twice would hold two replicas NCCL refuses to put in one
  // communicator, and a CPU device named twice is a typo, not a way to ask for more replicas (cpu:N is).
  for (size_t i = 0; i < r.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      GR_CHECK(r[i] != r[j], "device " << r[i].str() << " appears twice in '" << spec << "'"
                                       << (r[i].is_cpu() ? " (for N CPU replicas write cpu:N)" : ""));
  return r;
}

// What setup and the first step will surely allocate, against what the devices have: a clear error before
// anything large is allocated instead of the kernel's out-of-memory killer (CPU) or a failed allocation
// halfway through the first step (GPU). A lower bound (activations come on top): it never refuses a
// run that fits. On the CPU what is left is shared by the replicas' activations (activation_budget_), a
// limit their first step holds to.
void Trainer::check_memory() {
  const auto& devs = opts_.pipeline.devices;
  const Graph& g = graphs_.replicas[0].graph;
  size_t params = 0, updated = 0, all = 0;
  for (const auto& p : graphs_.params)
    if (g.initializers.count(p)) params += g.initializers.at(p).nbytes();
  for (const auto& [_, init] : graphs_.replicas[0].state_updates)
    if (g.initializers.count(init)) updated += g.initializers.at(init).nbytes();
  for (const auto& [_, t] : g.initializers) all += t.nbytes();
  const size_t buffers = updated > params ? updated - params : 0;
  const std::string model = "training '" + graphs_.forward.name + "'";
  if (devs[0].is_cpu()) {
    // The host: each replica's copy of the parameters, its gradients, and the optimizer buffers beyond
    // the one set the graph holds already (the model as loaded is the first replica's), for every replica
    // of this machine's ranks.
    const size_t avail = backend_->free_memory(devs[0]);
    if (!avail) return;
    const size_t replicas = devs.size() * static_cast<size_t>(mpi::local_size());
    const size_t need = replicas * 2 * params + (replicas - 1) * buffers;
    GR_CHECK(need <= avail, model << " on " << replicas << " replica" << (replicas > 1 ? "s" : "")
                                  << " on this machine needs at least " << bytes_str(need)
                                  << " more memory (per replica: its copy of the " << bytes_str(params)
                                  << " of parameters, their gradients and the optimizer's buffers), and "
                                  << bytes_str(avail) << " is available; train on fewer replicas (--devices cpu:1)");
    activation_budget_ = (avail - need) / replicas;
    return;
  }
  // A GPU: each of its replicas holds its graph's tensors (parameters, optimizer buffers, constants) and
  // the parameters' gradients; the resident data; on a device other than the first, the evaluation's
  // copies of what it does not read from its replica (evaluation_source: all but the parameters).
  size_t eval = 0;
  for (const auto& [name, t] : graphs_.forward.initializers)
    if (std::find(graphs_.params.begin(), graphs_.params.end(), name) == graphs_.params.end()) eval += t.nbytes();
  const size_t data = resident_data_bytes();
  std::map<int, size_t> on;  // device index -> replicas there
  for (const Device& d : devs) ++on[d.index];
  for (const auto& [index, n] : on) {
    const Device dev{devs[0].kind, index};
    const size_t avail = backend_->free_memory(dev);
    if (!avail) continue;
    const size_t need = n * (all + params) + data + (index != devs[0].index ? eval : 0);
    GR_CHECK(need <= avail, model << " needs at least " << bytes_str(need) << " of memory on " << dev.str() << " ("
                                  << n << " replica" << (n > 1 ? "s" : "") << " there, each holding "
                                  << bytes_str(all) << " of parameters, optimizer buffers and constants and "
                                  << bytes_str(params) << " of gradients"
                                  << (data ? ", and the data's " + bytes_str(data) : std::string()) << "), and "
                                  << bytes_str(avail) << " is free there; "
                                  << (n > 1 ? "put fewer replicas on it" : "train on a larger device")
                                  << (data ? " or keep the data on the host (--device-data-mb 0)" : ""));
    device_activation_budget_[index] = (avail - need) / n;
  }
}

bool Trainer::f32_images() const {
  const ValueInfo* image = graphs_.forward.info(graphs_.image);
  return !image || image->dtype == DType::F32 || image->dtype == DType::Undefined;
}

// The bytes place_data copies to each device that does not read the host's memory (0: none).
size_t Trainer::resident_data_bytes() const {
  return static_cast<size_t>(
      resident_bytes(train_, test_, opts_.pipeline.devices[0], f32_images() ? opts_.device_data_budget : 0));
}

std::string devices_str(const std::vector<Device>& ds) {
  std::string s = "[";
  for (size_t i = 0; i < ds.size(); ++i) s += (i ? ", " : "") + ds[i].str();
  return s + "]";
}

void check_devices_available(const std::vector<Device>& ds) {
  for (const Device& d : ds) {
    std::string why;
    if (!backend_available(d.kind, &why))
      GR_FAIL("cannot train on " << d.str() << ": " << why << "; train on CPU replicas with --devices cpu:N");
    const int count = backend_for(d.kind)->device_count();
    GR_CHECK(d.index >= 0 && d.index < count,
             "cannot train on " << d.str() << ": this machine has " << count << " CUDA device(s)");
  }
  for (const Device& d : ds)
    GR_CHECK(d.kind == ds[0].kind, "cannot mix CPU and GPU replicas in one run (" << devices_str(ds) << ")");
}

KernelWarmUp::KernelWarmUp() : thread_([] { cpu::warm_up_sgemm(); }) {}
KernelWarmUp::~KernelWarmUp() { thread_.join(); }

Trainer::Trainer(Graph model, TrainOptions opts) : opts_(std::move(opts)) {
  check_options();
  check_world_agrees(model);
  load_data(model);
  // Every replica needs an example of each step: fewer examples than replicas would train no step at all.
  GR_CHECK(opts_.test_only || train_src_->size() >= total_replicas_,
           "the training data (" << train_src_->describe() << ") has " << train_src_->size() << " example" << (train_src_->size() == 1 ? "" : "s")
                                    << ", fewer than the " << total_replicas_
                                    << " replicas: each needs at least one per step (train on fewer replicas)");
  set_schedule();
  PipelineOptions po = opts_.pipeline;
  po.executor_passes = true;  // the replicas run the executor's graph; nothing here is exported
  graphs_ = build_training_graphs(model, po);
  bn_updates_ = passes::batchnorm_state_updates(graphs_.replicas[0].graph);
  check_memory();
  setup_evaluation();
  setup_replicas();
  setup_evaluation_parts();
  std::vector<std::string> names;
  for (const auto& [name, _] : replica(0).states()) names.push_back(name);
  broadcast_states(names);
  // The model as given is held once: its trained parameters are replica 0's tensors from now on (on a
  // GPU too: trained_model() reads those anyway), and the training graph's copies go. A caller that moved
  // its model in no longer holds the weights as loaded beside the replicas' copies.
  for (const auto& p : graphs_.params) {
    auto it = graphs_.forward.initializers.find(p);
    const Tensor& st = replica(0).state(p);
    if (it != graphs_.forward.initializers.end() && it->second.dtype() == st.dtype() && it->second.shape() == st.shape())
      it->second = st;
  }
  graphs_.training.initializers.clear();
}

void Trainer::check_options() {
  const auto& devs = opts_.pipeline.devices;
  GR_CHECK(!devs.empty(), "no devices to train on");
  check_devices_available(devs);
  backend_ = backend_for(devs[0].kind);
  setup_world();
  const int D = total_replicas_;
  GR_CHECK(opts_.batch_size >= D, "batch size " << opts_.batch_size << " is smaller than the number of replicas ("
                                                << D << "): each replica needs at least one example");
  GR_CHECK(opts_.epochs >= 1, "epochs must be at least 1, got " << opts_.epochs);
  GR_CHECK(opts_.lr > 0 && std::isfinite(opts_.lr), "learning rate must be a positive number, got " << opts_.lr);
  GR_CHECK(opts_.threads >= 0, "threads must be at least 1");
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // Ranks on one machine share its cores.
  threads_ = opts_.threads > 0 ? opts_.threads : std::max(1, cores / (int(devs.size()) * mpi::local_size()));
}

// The schedule's base rate and, for cosine, the length of the whole run.
void Trainer::set_schedule() {
  const int64_t N = train_src_->size(), B = opts_.batch_size, D = total_replicas_;
  int64_t per_epoch = (N + B - 1) / B;
  if (N - (per_epoch - 1) * B < D) --per_epoch;
  if (opts_.max_steps > 0) per_epoch = std::min(per_epoch, opts_.max_steps);
  opts_.schedule.base_lr = opts_.lr;
  opts_.schedule.total_steps = per_epoch * opts_.epochs;
  steps_per_epoch_ = per_epoch;
  GR_CHECK(opts_.schedule.warmup_steps >= 0, "warmup steps must be >= 0");
  GR_CHECK(opts_.schedule.kind != LrSchedule::Kind::Step || opts_.schedule.step_size > 0,
           "the step schedule needs a step size > 0 (--lr-step-size)");
  if (opts_.resume) GR_CHECK(!opts_.checkpoint_dir.empty(), "resume needs a checkpoint directory (--checkpoint-dir)");
}

// One executor per replica on its device, fed by its own feed, reducing through the backend's
// communicators (the CPU's in-process group, NCCL across GPUs, a device-local sum on one GPU).
void Trainer::setup_replicas() {
  const auto& devs = opts_.pipeline.devices;
  const int D = static_cast<int>(devs.size());
  // Resident sets are fed as they are (f32): a float64 model (--float64) reads batches through its
  // source, which converts them.
  // (--loss output: the model's inputs are whatever arrays it names, read batch by batch, not the resident images
  // and labels.)
  const auto data =
      place_data(train_, test_, devs, f32_images() && !own_loss() ? opts_.device_data_budget : 0, opts_.log);
  comms_ = world_communicators();
  for (int d = 0; d < D; ++d) {
    auto r = std::make_unique<Replica>();
    r->rank = d;
    r->data = data[d];
    ExecOptions ro;
    ro.device = devs[d];
    ro.threads = threads_;
    // The first step's activations within a replica's share of what `where` had free for its `sharing` replicas.
    auto hold_to = [&](size_t share, const std::string& where, int64_t sharing) {
      ro.memory_limit = std::max<size_t>(share, 1);
      std::ostringstream hint;
      hint << "lower --batch-size (" << opts_.batch_size << " over " << total_replicas_ << " replica"
           << (total_replicas_ > 1 ? "s" : "") << "; " << where << " had " << bytes_str(share * sharing)
           << " free for the activations of its " << sharing << ")";
      ro.memory_hint = hint.str();
    };
    if (activation_budget_) {
      hold_to(activation_budget_, "this machine", D * mpi::local_size());
    } else if (auto b = device_activation_budget_.find(devs[d].index);
               !devs[d].is_cpu() && b != device_activation_budget_.end()) {
      // A GPU's first run takes its buffers from the device as it goes: a batch too large used to fail
      // allocating partway through the first step. The count from the shapes stops it before any kernel.
      hold_to(b->second, devs[d].str(), std::count(devs.begin(), devs.end(), devs[d]));
    }
    Graph g = graphs_.replicas[d].graph;
    // The replica's graph keeps its structure only: the executor takes the tensors, and lends rather than
    // copies those nothing else holds (the optimizer's zero-filled buffers).
    graphs_.replicas[d].graph.initializers.clear();
    // The figures read back, f32 (a float64 loss through a Cast node). --loss mse and output count nothing
    // correct: the loss stands in for the count, which is ignored.
    const auto figures = passes::append_step_figures(g, graphs_.loss, graphs_.logits, graphs_.labels, counts(),
                                                     opts_.pipeline.classes_last);
    loss_f32_ = figures.loss;
    correct_ = figures.correct;
    ro.fetch = counts() ? std::vector<std::string>{loss_f32_, correct_} : std::vector<std::string>{loss_f32_};
    ro.state_updates = graphs_.replicas[d].state_updates;
    ro.comm = comms_[d].get();
    ro.comm->set_timeout(opts_.comm_timeout);
    ro.seed = opts_.seed * 1000003 + first_replica_ + d;  // dropout masks differ between replicas, as between DDP ranks
    ro.async_kernels =
        opts_.overlap_allreduce < 0 ? backend_->overlap_allreduce_by_default() : opts_.overlap_allreduce > 0;
    if (opts_.profiler) {
      r->profile = ro.profile = &opts_.profiler->track("replica " + std::to_string(d) + " (" + devs[d].str() + ")");
      ro.profile_spans = {optimizer_span(graphs_.replicas[d].graph)};  // before the correct count appended above
      ro.comm->set_profile(ro.profile);
      if (d == D - 1) eval_->profile = &opts_.profiler->track("main (evaluation)");  // after the replicas' tracks
    }
    r->exec = std::make_unique<Executor>(std::move(g), ro);
    r->feed = make_feed(train_src_, *r->data, devs[d], feed_options(d));
    r->figures = std::make_unique<HostReadback>(backend_, devs[d], 2, 2);
    replicas_.push_back(std::move(r));
  }
  for (int d = 0; d < D; ++d) replicas_[d]->thread = std::thread([this, d] { worker_loop(d); });
}

Trainer::~Trainer() {
  {
    std::lock_guard<std::mutex> l(mu_);
    quit_ = true;
  }
  cv_.notify_all();
  for (auto& r : replicas_)
    if (r->thread.joinable()) r->thread.join();
}

Executor& Trainer::replica(int d) { return *replicas_.at(d)->exec; }

}  // namespace graphrun::runtime

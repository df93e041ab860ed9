// Trainer: builds the replicated training graphs, runs one executor per replica on a persistent
// thread (replicas meet only in their AllReduce nodes), evaluates the inference form, reports.
#include "runtime/trainer.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <sstream>

#include "graph/onnx_io.h"
#include "graph/passes/remove_noops.h"
#include "graph/passes/train_mode.h"
#include "runtime/checkpoint.h"
#include "runtime/device.h"

namespace graphrun::runtime {

namespace {

int64_t parse_index(const std::string& s, const std::string& spec) {
  GR_CHECK(!s.empty() && s.size() < 6 && std::all_of(s.begin(), s.end(), ::isdigit),
           "bad device list '" << spec << "' (expected cpu:N, cpu:0,cpu:1, cuda:0,1 or N)");
  return std::stoll(s);
}

std::string fmt(double v, int prec) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(prec) << v;
  return os.str();
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
  return r;
}

std::string devices_str(const std::vector<Device>& ds) {
  std::string s = "[";
  for (size_t i = 0; i < ds.size(); ++i) s += (i ? ", " : "") + ds[i].str();
  return s + "]";
}

std::string add_correct_count(Graph& g, const std::string& logits, const std::string& labels) {
  auto node = [&](const char* op, std::vector<std::string> ins, const char* out,
                  std::map<std::string, Attribute> attrs = {}) {
    Node n;
    n.op_type = op;
    n.name = g.unique_name(std::string("graphrun.metrics.") + out);
    n.inputs = std::move(ins);
    n.outputs = {g.unique_name(std::string("graphrun.") + out)};
    n.attrs = std::move(attrs);
    return g.add_node(std::move(n)).outputs[0];
  };
  const std::string pred = node("ArgMax", {logits}, "predicted", {{"axis", Attribute::Int(1)}, {"keepdims", Attribute::Int(0)}});
  const std::string hit = node("Equal", {pred, labels}, "hit");
  const std::string hitf = node("Cast", {hit}, "hit_f32", {{"to", Attribute::Int(static_cast<int64_t>(DType::F32))}});
  return node("ReduceSum", {hitf}, "correct", {{"keepdims", Attribute::Int(0)}});
}

void check_devices_available(const std::vector<Device>& ds) {
  bool cpu = false, gpu = false;
  for (const Device& d : ds) {
    if (d.is_cpu()) {
      cpu = true;
      continue;
    }
    gpu = true;
    std::string why;
    if (!backend_available(d.kind, &why))
      GR_FAIL("cannot train on " << d.str() << ": " << why << "; train on CPU replicas with --devices cpu:N");
    const int count = backend_for(d.kind)->device_count();
    GR_CHECK(d.index >= 0 && d.index < count,
             "cannot train on " << d.str() << ": this machine has " << count << " CUDA device(s)");
  }
  GR_CHECK(!(cpu && gpu), "cannot mix CPU and GPU replicas in one run (" << devices_str(ds) << ")");
}

TrainingGraphs build_training_graphs(const Graph& model, const PipelineOptions& opts) {
  TrainingGraphs tg;
  tg.forward = model;
  GR_CHECK(model.inputs.size() == 1, "model '" << model.name << "' has " << model.inputs.size()
                                               << " inputs; graphrun train feeds exactly one (the images)");
  GR_CHECK(!model.outputs.empty(), "model '" << model.name << "' has no outputs");
  tg.image = model.inputs[0];
  tg.logits = opts.output.empty() ? model.outputs[0] : opts.output;
  GR_CHECK(model.is_output(tg.logits), "model '" << model.name << "' has no output named '" << tg.logits << "'");
  Graph m = passes::to_training(passes::remove_noops(model));
  // The batch dimension varies (shards, the last batch): never fixed.
  auto it = m.values.find(tg.image);
  if (it != m.values.end() && it->second.has_shape && !it->second.shape.empty()) it->second.shape[0] = Dim("N");

  std::set<std::string> not_params = opts.freeze;
  for (const Node& n : m.nodes) {
    if (!n.domain.empty()) continue;
    if (n.op_type == "BatchNormalization")
      for (size_t k = 3; k < n.inputs.size(); ++k) not_params.insert(n.inputs[k]);
    if (n.op_type == "Dropout")
      for (size_t k = 1; k < n.inputs.size(); ++k) not_params.insert(n.inputs[k]);
  }
  for (const auto& [name, t] : m.initializers)
    if (t.dtype() == DType::F32 && !not_params.count(name)) tg.params.push_back(name);
  for (const auto& f : opts.freeze)
    GR_CHECK(m.initializers.count(f), "no parameter named '" << f << "' to freeze");
  GR_CHECK(!tg.params.empty(), "model '" << model.name << "' has no trainable f32 parameters");

  autodiff::LossOptions lo;
  lo.kind = opts.loss;
  lo.output = tg.logits;
  lo.labels = tg.labels;
  lo.loss = tg.loss;
  Graph with_loss = autodiff::attach_loss(m, lo);
  autodiff::BackwardOptions bo;
  bo.loss = tg.loss;
  bo.freeze = opts.freeze;
  bo.params = tg.params;
  bo.loss_grad_input = tg.loss_scale;
  tg.training = autodiff::backward(with_loss, bo);

  ReplicateOptions ro;
  ro.devices = opts.devices;
  ro.params = tg.params;
  ro.optimizer = opts.optimizer;
  ro.bucket_bytes = opts.bucket_bytes;
  tg.replicas = replicate(tg.training, ro);
  return tg;
}

bool overlap_default(const std::vector<Device>& devices) { return !devices.empty() && !devices[0].is_cpu(); }

Trainer::Trainer(const Graph& model, TrainOptions opts) : opts_(std::move(opts)) {
  const auto& devs = opts_.pipeline.devices;
  GR_CHECK(!devs.empty(), "no devices to train on");
  check_devices_available(devs);
  const int D = static_cast<int>(devs.size());
  GR_CHECK(opts_.batch_size >= D, "batch size " << opts_.batch_size << " is smaller than the number of replicas ("
                                                << D << "): each replica needs at least one example");
  GR_CHECK(opts_.epochs >= 1, "epochs must be at least 1, got " << opts_.epochs);
  GR_CHECK(opts_.lr > 0 && std::isfinite(opts_.lr), "learning rate must be a positive number, got " << opts_.lr);
  GR_CHECK(opts_.threads >= 0, "threads must be at least 1");
  int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  threads_ = opts_.threads > 0 ? opts_.threads : std::max(1, cores / D);

  // Data first: a missing dataset is the most likely mistake and the cheapest to report.
  train_ = data::load_split(opts_.data_dir, "train");
  test_ = data::load_split(opts_.data_dir, "t10k");
  auto limit = [](data::Dataset& ds, int64_t n) {
    if (n <= 0 || n >= ds.size()) return;
    Shape s = ds.images.shape();
    s[0] = n;
    data::Dataset r;
    r.images = Tensor(DType::F32, s);
    std::memcpy(r.images.raw(), ds.images.raw(), r.images.nbytes());
    r.labels = Tensor(DType::I64, {n});
    std::memcpy(r.labels.raw(), ds.labels.raw(), r.labels.nbytes());
    ds = r;
  };
  limit(train_, opts_.train_limit);
  limit(test_, opts_.test_limit);
  if (opts_.normalize) {
    GR_CHECK(opts_.norm_std > 0 && std::isfinite(opts_.norm_std) && std::isfinite(opts_.norm_mean),
             "normalize: the standard deviation must be a positive number, got " << opts_.norm_std);
    for (data::Dataset* ds : {&train_, &test_}) {
      float* p = ds->images.data<float>();
      const float mean = opts_.norm_mean, inv = 1.0f / opts_.norm_std;
      for (int64_t i = 0, n = ds->images.numel(); i < n; ++i) p[i] = (p[i] - mean) * inv;
    }
  }
  {
    // The schedule's base rate and, for cosine, the length of the whole run.
    const int64_t N = train_.size(), B = opts_.batch_size;
    int64_t per_epoch = (N + B - 1) / B;
    if (N - (per_epoch - 1) * B < D) --per_epoch;
    if (opts_.max_steps > 0) per_epoch = std::min(per_epoch, opts_.max_steps);
    opts_.schedule.base_lr = opts_.lr;
    opts_.schedule.total_steps = per_epoch * opts_.epochs;
    GR_CHECK(opts_.schedule.warmup_steps >= 0, "warmup steps must be >= 0");
    GR_CHECK(opts_.schedule.kind != LrSchedule::Kind::Step || opts_.schedule.step_size > 0,
             "the step schedule needs a step size > 0 (--lr-step-size)");
  }
  if (opts_.resume) GR_CHECK(!opts_.checkpoint_dir.empty(), "resume needs a checkpoint directory (--checkpoint-dir)");

  const std::string& in = model.inputs.empty() ? std::string() : model.inputs[0];
  if (const ValueInfo* vi = model.info(in); vi && vi->has_shape) {
    const Shape& ds = train_.images.shape();
    bool ok = vi->shape.size() == ds.size();
    for (size_t k = 1; ok && k < ds.size(); ++k) ok = !vi->shape[k].known() || vi->shape[k].size == ds[k];
    GR_CHECK(ok && (vi->dtype == DType::F32 || vi->dtype == DType::Undefined),
             "model input '" << in << "' is " << vi->str() << " but the images in '" << opts_.data_dir << "' are f32[N,"
                             << ds[1] << "," << ds[2] << "," << ds[3] << "]");
  }

  graphs_ = build_training_graphs(model, opts_.pipeline);
  bn_updates_ = passes::batchnorm_state_updates(graphs_.replicas[0].graph);

  ExecOptions eo;
  eo.device = devs[0];
  eo.threads = threads_ * D;
  eo.fetch = {graphs_.logits};
  eo.seed = opts_.seed;
  eval_ = std::make_unique<Executor>(passes::remove_noops(passes::to_inference(graphs_.forward)), eo);
  check_model_fits_labels();
  if (!devs[0].is_cpu()) {
    upload_resident_data();
    setup_device_eval();
  }

  group_ = CpuCommGroup::create(D);
  // GPU replicas reduce through the backend (NCCL across GPUs, a device-local sum on one GPU).
  if (!devs[0].is_cpu()) device_comms_ = backend_for(devs[0].kind)->make_communicators(devs);
  for (int d = 0; d < D; ++d) {
    auto w = std::make_unique<Worker>();
    ExecOptions ro;
    ro.device = devs[d];
    ro.threads = threads_;
    Graph g = graphs_.replicas[d].graph;
    correct_ = add_correct_count(g, graphs_.logits, graphs_.labels);
    ro.fetch = {graphs_.loss, correct_};
    ro.state_updates = graphs_.replicas[d].state_updates;
    ro.comm = device_comms_.empty() ? group_->rank(d) : device_comms_[d].get();
    ro.comm->set_timeout(opts_.comm_timeout);
    ro.seed = opts_.seed * 1000003 + d;  // dropout masks differ between replicas, as between DDP ranks
    ro.async_kernels = opts_.overlap_allreduce < 0 ? overlap_default(devs) : opts_.overlap_allreduce > 0;
    w->exec = std::make_unique<Executor>(g, ro);
    if (!devs[d].is_cpu()) setup_device_worker(*w, d);
    workers_.push_back(std::move(w));
  }
  for (int d = 0; d < D; ++d) workers_[d]->thread = std::thread([this, d] { worker_loop(d); });
}

Trainer::~Trainer() {
  {
    std::lock_guard<std::mutex> l(mu_);
    quit_ = true;
  }
  cv_.notify_all();
  for (auto& w : workers_)
    if (w->thread.joinable()) w->thread.join();
  free_device_metrics();
}

void Trainer::check_model_fits_labels() {
  const int64_t classes = std::max(train_.num_classes(), test_.num_classes());
  const int64_t n = std::min<int64_t>(2, test_.size());
  Shape s = test_.images.shape();
  s[0] = n;
  Tensor x = Tensor::view(DType::F32, s, test_.images.raw());
  Tensor out;
  try {
    out = eval_->run({{graphs_.image, x}}).at(graphs_.logits);
  } catch (const Error& e) {
    GR_FAIL("model '" << graphs_.forward.name << "' cannot run on the images of '" << opts_.data_dir << "': " << e.what());
  }
  GR_CHECK(out.dtype() == DType::F32 && out.rank() == 2 && out.dim(0) == n,
           "model output '" << graphs_.logits << "' is " << dtype_name(out.dtype()) << shape_str(out.shape())
                            << " for " << n << " images; training needs class scores f32[N,classes]");
  GR_CHECK(out.dim(1) >= classes, "model output '" << graphs_.logits << "' has " << out.dim(1)
                                                   << " classes but the labels in '" << opts_.data_dir
                                                   << "' go up to " << classes - 1 << " (" << classes << " classes)");
}

void Trainer::worker_loop(int d) {
  int64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [&] { return quit_ || generation_ != seen; });
      if (quit_) return;
      seen = generation_;
    }
    Worker& w = *workers_[d];
    try {
      run_replica_epoch(d);
    } catch (const std::exception& e) {
      w.error = e.what();
      group_->abort();
      for (auto& c : device_comms_) c->abort();
      if (!w.diverged_step) {
        std::lock_guard<std::mutex> l(peers_mu_);
        failed_ = true;
      }
      peers_cv_.notify_all();
    }
    {
      std::lock_guard<std::mutex> l(mu_);
      ++done_;
    }
    cv_.notify_all();
  }
}

void Trainer::run_replica_epoch(int d) {
  if (!opts_.pipeline.devices[d].is_cpu()) return run_device_steps(d);
  Worker& w = *workers_[d];
  const int D = replicas();
  const int64_t B = opts_.batch_size, N = train_.size();
  const bool stateful = graphs_.replicas[d].graph.is_input("step");
  ShardBuffers buffers;
  for (int64_t s = seg_begin_; s < seg_end_; ++s) {
    const int64_t b = std::min(B, N - s * B);
    const data::Shards sh = data::shard(b, D);
    const int64_t n = sh.size[d];
    std::map<std::string, Tensor> in = step_inputs(s, n, b, stateful);
    gather_host_shard(buffers, s * B + sh.begin[d], n, in);
    auto out = w.exec->run(in);
    const double lv = out.at(graphs_.loss).as_doubles().at(0);
    if (!record_step(w, d, s, lv, out.at(correct_).as_doubles().at(0), n))
      GR_FAIL("the training loss is " << lv << " at step " << w.diverged_step << " (epoch " << cur_epoch_ + 1
                                      << "): training diverged; lower --lr");
  }
}

std::map<std::string, Tensor> Trainer::step_inputs(int64_t s, int64_t n, int64_t b, bool stateful) const {
  std::map<std::string, Tensor> in{
      {graphs_.loss_scale, Tensor::scalar<float>(float(n) / float(b))},
      {"lr", Tensor::scalar<float>(static_cast<float>(learning_rate(opts_.schedule, step_base_ + s)))}};
  if (stateful) in["step"] = Tensor::scalar<int64_t>(step_base_ + s);
  return in;
}

void Trainer::gather_host_shard(ShardBuffers& buffers, int64_t first, int64_t n, std::map<std::string, Tensor>& in) const {
  auto& buf = buffers[n];
  if (!buf.first.defined()) {
    Shape is = train_.images.shape();
    is[0] = n;
    buf = {Tensor(DType::F32, is), Tensor(DType::I64, {n})};
  }
  data::gather(train_, order_.data() + first, n, buf.first, buf.second);
  in[graphs_.image] = buf.first;
  in[graphs_.labels] = buf.second;
}

// One step's figures, once known: false (and the step noted) when its loss is not finite.
bool Trainer::record_step(Worker& w, int d, int64_t s, double lv, double correct, int64_t n) {
  if (!std::isfinite(lv)) {
    if (!w.diverged_step) w.diverged_step = step_base_ + s + 1;
    return false;
  }
  w.loss_sum += lv * n;
  if (s < static_cast<int64_t>(w.step_loss.size())) w.step_loss[s] = lv * n;
  w.correct += static_cast<int64_t>(correct);
  w.images += n;
  if (d == 0) progress_.store(s + 1, std::memory_order_relaxed);
  w.steps_done.store(s + 1, std::memory_order_release);
  return true;
}

void Trainer::sync_running_stats() {
  // DDP broadcasts buffers from rank 0; so do we, once per epoch (replica 0's statistics are the
  // ones evaluated and saved either way).
  for (const auto& [_, init] : bn_updates_)
    for (int d = 1; d < replicas(); ++d) replica(d).set_state(init, replica(0).state(init));
}

void Trainer::run_segment(int epoch, int64_t begin, int64_t end, bool bar, double& seconds) {
  const int D = replicas();
  const int64_t B = opts_.batch_size, steps = steps_;
  seg_begin_ = begin;
  seg_end_ = end;
  for (auto& w : workers_) w->read = begin;  // before any worker starts: peers_allow reads them
  diverged_at_ = INT64_MAX;
  failed_ = false;
  auto t0 = std::chrono::steady_clock::now();
  {
    std::lock_guard<std::mutex> l(mu_);
    done_ = 0;
    ++generation_;
  }
  cv_.notify_all();
  {
    std::unique_lock<std::mutex> l(mu_);
    while (!cv_.wait_for(l, std::chrono::milliseconds(200), [&] { return done_ == D; })) {
      if (opts_.log_every > 0) {
        l.unlock();
        log_steps(-1);
        l.lock();
      }
      if (!bar) continue;
      const int64_t k = progress_.load();
      const double sec = seconds + std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const int width = 30, fill = static_cast<int>(width * k / std::max<int64_t>(1, steps));
      std::fprintf(stderr, "\repoch %d/%d [%s%s] %lld/%lld  %.1f s  %.0f img/s", epoch + 1, opts_.epochs,
                   std::string(fill, '=').c_str(), std::string(width - fill, ' ').c_str(), (long long)k,
                   (long long)steps, sec, sec > 0 ? k * B / sec : 0.0);
      std::fflush(stderr);
    }
  }
  seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (bar) std::fprintf(stderr, "\r\033[K");

  std::string first_error, any_error;
  int64_t diverged = 0;
  for (auto& w : workers_) {
    if (w->diverged_step && (!diverged || w->diverged_step < diverged)) diverged = w->diverged_step;
    if (w->error.empty()) continue;
    if (any_error.empty()) any_error = w->error;
    if (first_error.empty() && w->error.find("another replica failed") == std::string::npos) first_error = w->error;
  }
  if (diverged) {
    std::string msg = "training diverged: the loss is not finite at step " + std::to_string(diverged) + " (epoch " +
                      std::to_string(epoch + 1) + "); lower --lr";
    if (!opts_.checkpoint_dir.empty()) {
      const std::string last = latest_checkpoint(opts_.checkpoint_dir);
      msg += last.empty() ? "; no checkpoint was written before it" : "; the last good checkpoint is " + last;
    }
    throw DivergedError(msg, diverged);
  }
  if (!any_error.empty()) {
    // The group is aborted; a trainer that failed cannot continue.
    GR_FAIL("training failed in epoch " << epoch + 1 << ": " << (first_error.empty() ? any_error : first_error));
  }
  if (opts_.log_every > 0) log_steps(end);
}

void Trainer::log_steps(int64_t upto) {
  // Steps every replica has finished; lines cover whole blocks of log_every steps (and the end).
  int64_t done = steps_;
  for (auto& w : workers_) done = std::min<int64_t>(done, w->steps_done.load(std::memory_order_acquire));
  if (upto >= 0) done = std::min(done, upto);
  const int64_t k = opts_.log_every;
  while (logged_ < done) {
    int64_t next = (logged_ / k + 1) * k;
    if (next > done) {
      if (done != upto || upto < steps_) break;  // report a partial block only at the epoch's end
      next = done;
    }
    double loss = 0;
    int64_t images = 0;
    for (int64_t s = logged_; s < next; ++s) {
      const int64_t b = std::min(opts_.batch_size, train_.size() - s * opts_.batch_size);
      images += b;
      for (auto& w : workers_) loss += w->step_loss[s];
    }
    if (opts_.log)
      *opts_.log << "step " << step_base_ + next << "  epoch " << cur_epoch_ + 1 << "  loss "
                 << fmt(images ? loss / images : 0, 4) << "  lr " << learning_rate(opts_.schedule, step_base_ + next - 1)
                 << std::endl;
    logged_ = next;
  }
}

EpochStats Trainer::train_epoch(int epoch) {
  const int64_t N = train_.size(), B = opts_.batch_size;
  const int D = replicas();
  order_ = data::epoch_order(N, opts_.seed, epoch);
  ++order_gen_;
  int64_t steps = (N + B - 1) / B;
  if (N - (steps - 1) * B < D) --steps;  // a last batch too small to give every replica an example
  if (opts_.max_steps > 0) steps = std::min(steps, opts_.max_steps);
  steps_ = steps;
  // Resuming in the middle of this epoch: the steps before the checkpoint are done.
  int64_t first = 0;
  if (epoch == resume_epoch_) first = std::min(resume_step_, steps);
  resume_epoch_ = -1;
  step_base_ = global_step_ - first;
  cur_epoch_ = epoch;
  progress_ = first;
  logged_ = first;
  for (auto& w : workers_) {
    w->loss_sum = 0;
    w->correct = w->images = 0;
    w->error.clear();
    w->diverged_step = 0;
    w->step_loss.assign(steps, 0.0);
    w->steps_done = first;
  }

  const bool bar = opts_.progress == 1 || (opts_.progress == -1 && isatty(2));
  double seconds = 0;
  // With --checkpoint-every the epoch runs in segments that end on multiples of it (global steps).
  for (int64_t begin = first; begin < steps;) {
    int64_t end = steps;
    if (opts_.checkpoint_every > 0 && !opts_.checkpoint_dir.empty()) {
      const int64_t g = step_base_ + begin, k = opts_.checkpoint_every;
      end = std::min(steps, begin + (k - g % k));
    }
    run_segment(epoch, begin, end, bar, seconds);
    global_step_ = step_base_ + end;
    if (end < steps) save_checkpoint(epoch, end);
    begin = end;
  }
  global_step_ = step_base_;
  global_step_ += steps;
  sync_running_stats();

  EpochStats st;
  st.epoch = epoch + 1;
  st.steps = steps;
  st.seconds = seconds;
  st.lr = learning_rate(opts_.schedule, std::max<int64_t>(0, global_step_ - 1));  // the epoch's last step's
  double loss = 0;
  int64_t correct = 0;
  for (auto& w : workers_) {
    loss += w->loss_sum;
    correct += w->correct;
    st.images += w->images;
  }
  st.loss = st.images ? loss / st.images : 0;
  st.train_acc = st.images ? double(correct) / st.images : 0;
  st.test_acc = evaluate();
  return st;
}

double Trainer::evaluate() { return evaluate_stats().accuracy; }

Graph Trainer::trained_model() const {
  // The inference form: what evaluation ran, so `graphrun run` on the saved file reproduces the
  // printed test accuracy (a model exported in training mode differs only in BatchNormalization's
  // training_mode and Dropout's; graphrun train turns it back into the training form).
  Graph g = passes::to_inference(graphs_.forward);
  const auto& st = workers_.at(0)->exec->states();
  for (auto& [name, t] : g.initializers) {
    auto it = st.find(name);
    if (it != st.end() && it->second.dtype() == t.dtype() && it->second.numel() == t.numel())
      t = to_host(it->second).reshaped(t.shape());
  }
  return g;
}

void Trainer::save(const std::string& path) const { save_onnx(trained_model(), path); }

std::vector<EpochStats> Trainer::fit() {
  std::vector<EpochStats> all;
  std::ofstream metrics;
  if (!opts_.metrics_path.empty()) {
    metrics.open(opts_.metrics_path, std::ios::trunc);
    GR_CHECK(metrics, "--metrics: cannot open '" << opts_.metrics_path << "' for writing");
  }
  std::ostream* log = opts_.log;
  const std::string devs = devices_str(opts_.pipeline.devices);
  if (log)
    *log << "training '" << graphs_.forward.name << "' on " << devs << " (" << threads_ << " thread"
         << (threads_ > 1 ? "s" : "") << " per replica): " << train_.size() << " training, " << test_.size()
         << " test images, batch " << opts_.batch_size << ", lr " << opts_.lr << std::endl;
  int first_epoch = 0;
  if (opts_.resume) {
    const std::string ck = latest_checkpoint(opts_.checkpoint_dir);
    if (ck.empty()) {
      if (log) *log << "no checkpoint in " << opts_.checkpoint_dir << ": starting from the beginning" << std::endl;
    } else {
      load_checkpoint(ck);
      first_epoch = resume_epoch_ < 0 ? opts_.epochs : resume_epoch_;
      if (log) *log << "resumed from " << ck << " (epoch " << first_epoch + 1 << ", step " << global_step_ << ")" << std::endl;
    }
  }
  if (first_epoch >= opts_.epochs) {
    if (log) *log << "nothing left to train: all " << opts_.epochs << " epochs are done" << std::endl;
    if (!opts_.save_path.empty()) save(opts_.save_path);
    return all;
  }
  for (int e = first_epoch; e < opts_.epochs; ++e) {
    EpochStats st = train_epoch(e);
    if (!opts_.checkpoint_dir.empty()) save_checkpoint(e + 1, 0);
    all.push_back(st);
    const double ips = st.seconds > 0 ? st.images / st.seconds : 0;
    if (log)
      *log << "epoch " << st.epoch << "/" << opts_.epochs << "  loss " << fmt(st.loss, 4) << "  train acc "
           << fmt(st.train_acc, 3) << "  test acc " << fmt(st.test_acc, 3) << "  " << fmt(st.seconds, 1) << " sec  "
           << fmt(ips, 0) << " img/s" << std::endl;
    if (metrics.is_open()) {
      metrics << "{\"epoch\": " << st.epoch << ", \"steps\": " << st.steps << ", \"loss\": " << fmt(st.loss, 6)
              << ", \"train_acc\": " << fmt(st.train_acc, 6) << ", \"test_acc\": " << fmt(st.test_acc, 6)
              << ", \"seconds\": " << fmt(st.seconds, 3) << ", \"images_per_sec\": " << fmt(ips, 1)
              << ", \"lr\": " << st.lr << ", \"devices\": \"" << devs << "\", \"threads\": " << threads_ << "}"
              << std::endl;
      GR_CHECK(metrics, "--metrics: cannot write '" << opts_.metrics_path << "'");
    }
  }
  double sec = 0;
  for (const auto& st : all) sec += st.seconds;
  if (log)
    *log << "test acc: " << fmt(all.back().test_acc, 2) << ", " << fmt(sec / all.size(), 1) << " sec/epoch on " << devs
         << std::endl;
  if (!opts_.save_path.empty()) {
    save(opts_.save_path);
    if (log) *log << "saved the trained model to " << opts_.save_path << std::endl;
  }
  return all;
}

}  // namespace graphrun::runtime

// The trainer's GPU path: training and test data resident on each device, shards gathered there,
// and the per-step loss and accuracy read a step late through pinned memory, so the host never
// stalls the stream except to read figures the device has already produced.
#include <algorithm>
#include <climits>
#include <cmath>

#include "graph/passes/remove_noops.h"
#include "graph/passes/train_mode.h"
#include "runtime/device.h"
#include "runtime/trainer.h"

namespace graphrun::runtime {

namespace {

// A GPU replica's shard: rows `indices` of the resident images and labels.
Graph shard_gather_graph() {
  Graph g;
  g.name = "graphrun.shard";
  g.opsets[""] = 13;
  g.inputs = {"images", "labels", "indices"};
  for (const char* v : {"images", "labels"}) {
    Node n;
    n.op_type = "Gather";
    n.name = std::string("gather_") + v;
    n.inputs = {v, "indices"};
    n.outputs = {std::string(v) + ".shard"};
    n.attrs["axis"] = Attribute::Int(0);
    g.add_node(std::move(n));
  }
  g.outputs = {"images.shard", "labels.shard"};
  return g;
}

DeviceBackend* backend_of(Device dev) {
  DeviceBackend* b = backend_for(dev.kind);
  GR_CHECK(b, "no backend for " << dev.str() << " in this build");
  return b;
}

}  // namespace

void Trainer::upload_resident_data() {
  const int64_t bytes = static_cast<int64_t>(train_.images.nbytes() + train_.labels.nbytes() +
                                             test_.images.nbytes() + test_.labels.nbytes());
  if (bytes > opts_.device_data_budget) {
    if (opts_.log)
      *opts_.log << "the data (" << (bytes >> 20) << " MiB) exceeds the device data budget of "
                 << (opts_.device_data_budget >> 20) << " MiB: copying each batch to the devices" << std::endl;
    return;
  }
  // One copy per GPU, shared by the replicas on it (they only read it). Normalisation has already
  // been applied on the host when the data was loaded.
  for (const Device& dev : opts_.pipeline.devices) {
    if (resident_.count(dev.index)) continue;
    ResidentData& r = resident_[dev.index];
    r.train_images = to_device(train_.images, dev);
    r.train_labels = to_device(train_.labels, dev);
    r.test_images = to_device(test_.images, dev);
    r.test_labels = to_device(test_.labels, dev);
  }
}

const Trainer::ResidentData* Trainer::resident(Device dev) const {
  auto it = resident_.find(dev.index);
  return it == resident_.end() ? nullptr : &it->second;
}

void Trainer::setup_device_worker(Worker& w, int d) {
  const Device dev = opts_.pipeline.devices[d];
  DeviceBackend* be = backend_of(dev);
  if (resident(dev)) {
    ExecOptions go;
    go.device = dev;
    go.fetch = {"images.shard", "labels.shard"};
    w.gather = std::make_unique<Executor>(shard_gather_graph(), go);
    w.order = be->empty(dev, DType::I64, {std::max<int64_t>(1, train_.size())});
  }
  w.pinned = static_cast<float*>(be->allocate_pinned(dev, 4 * sizeof(float)));
  for (void*& e : w.events) e = be->create_event(dev);
}

void Trainer::free_device_metrics() {
  for (size_t d = 0; d < workers_.size(); ++d) {
    const Device dev = opts_.pipeline.devices[d];
    if (dev.is_cpu()) continue;
    DeviceBackend* be = backend_of(dev);
    Worker& w = *workers_[d];
    for (void*& e : w.events) {
      if (e) be->destroy_event(dev, e);
      e = nullptr;
    }
    if (w.pinned) be->free_pinned(dev, w.pinned);
    w.pinned = nullptr;
  }
  const Device dev0 = opts_.pipeline.devices[0];
  if (eval_event_) backend_of(dev0)->destroy_event(dev0, eval_event_);
  if (eval_pinned_) backend_of(dev0)->free_pinned(dev0, eval_pinned_);
  eval_event_ = nullptr;
  eval_pinned_ = nullptr;
}

// Replicas on GPUs run ahead of what the host has read, so one that finds a non-finite loss at step
// s has already enqueued step s+1. Every replica must enqueue the same steps (each has collectives
// the others wait for), so all stop after s+1: step t is enqueued only once every replica has read
// the steps before t-1, and not when one of those diverged. Waiting here is a host-side wait on the
// other replicas' threads, a step behind, not on the device.
bool Trainer::peers_allow(int d, int64_t t) {
  if (replicas() == 1 || t < seg_begin_ + 2) return true;
  std::unique_lock<std::mutex> l(peers_mu_);
  peers_cv_.wait(l, [&] {
    if (failed_) return true;
    for (int e = 0; e < replicas(); ++e)
      if (e != d && workers_[e]->read.load() < t - 1) return false;
    return true;
  });
  if (diverged_at_.load() <= t - 2) return false;
  GR_CHECK(!failed_, "another replica failed");
  return true;
}

void Trainer::run_device_steps(int d) {
  Worker& w = *workers_[d];
  const Device dev = opts_.pipeline.devices[d];
  DeviceBackend* be = backend_of(dev);
  const int D = replicas();
  const int64_t B = opts_.batch_size, N = train_.size();
  const bool stateful = graphs_.replicas[d].graph.is_input("step");
  const ResidentData* rd = resident(dev);
  if (rd && w.order_gen != order_gen_) {
    // The epoch's order, once per epoch: each step's indices are then a view into it. (Pageable
    // source: cudaMemcpyAsync has consumed order_ when it returns.)
    be->copy_host_to_device(dev, w.order.raw(), order_.data(), order_.size() * sizeof(int64_t));
    w.order_gen = order_gen_;
  }
  ShardBuffers host_buffers;  // data not resident
  auto shard_size = [&](int64_t s) { return data::shard(std::min(B, N - s * B), D).size[d]; };
  // Reads step s's figures: its copies into slot s % 2 were enqueued after it, its event after them.
  auto finish = [&](int64_t s) {
    const int k = static_cast<int>(s % 2);
    be->wait_event(dev, w.events[k]);
    const float loss = w.pinned[2 * k], correct = w.pinned[2 * k + 1];
    const bool ok = record_step(w, d, s, loss, correct, shard_size(s));
    if (!ok) {
      int64_t cur = diverged_at_.load();
      while (s < cur && !diverged_at_.compare_exchange_weak(cur, s)) {
      }
    }
    {
      std::lock_guard<std::mutex> l(peers_mu_);
      w.read = s + 1;  // after diverged_at_: a peer that sees this read also sees the divergence
    }
    peers_cv_.notify_all();
    return ok;
  };

  int64_t pending = -1;  // the step whose figures are in flight
  for (int64_t s = seg_begin_; s < seg_end_; ++s) {
    if (!peers_allow(d, s)) break;
    const int64_t b = std::min(B, N - s * B);
    const data::Shards sh = data::shard(b, D);
    const int64_t n = sh.size[d];
    std::map<std::string, Tensor> in = step_inputs(s, n, b, stateful);
    if (rd) {
      Tensor idx = Tensor::view(DType::I64, {n}, static_cast<int64_t*>(w.order.raw()) + s * B + sh.begin[d], dev);
      auto shard = w.gather->run({{"images", rd->train_images}, {"labels", rd->train_labels}, {"indices", idx}});
      in[graphs_.image] = shard.at("images.shard");
      in[graphs_.labels] = shard.at("labels.shard");
    } else {
      gather_host_shard(host_buffers, s * B + sh.begin[d], n, in);
    }
    auto out = w.exec->run(in);
    // Slot s % 2 was last written by step s-2, whose figures were read in the previous iteration.
    const int k = static_cast<int>(s % 2);
    be->copy_device_to_host_async(dev, w.pinned + 2 * k, out.at(graphs_.loss).raw(), sizeof(float));
    be->copy_device_to_host_async(dev, w.pinned + 2 * k + 1, out.at(correct_).raw(), sizeof(float));
    be->record_event(dev, w.events[k]);
    // Step s is queued behind step s-1: reading s-1 now leaves the device busy while the host waits.
    const bool ok = pending < 0 || finish(pending);
    pending = s;
    if (!ok) break;
  }
  if (pending >= 0) finish(pending);  // the last step in flight (after a divergence too: it is enqueued)
  if (w.diverged_step)
    GR_FAIL("the training loss is not finite at step " << w.diverged_step << " (epoch " << cur_epoch_ + 1
                                                       << "): training diverged; lower --lr");
}

// Evaluation on the first GPU: the inference graph plus the count of correct predictions and the
// summed cross-entropy, each added into an accumulator the executor keeps as state; one read at the end.
void Trainer::setup_device_eval() {
  const Device dev = opts_.pipeline.devices[0];
  Graph g = passes::remove_noops(passes::to_inference(graphs_.forward));
  const std::string labels = g.unique_name("graphrun.labels");
  g.inputs.push_back(labels);
  ValueInfo vi;
  vi.dtype = DType::I64;
  vi.has_shape = true;
  vi.shape = {Dim("N")};
  g.values[labels] = vi;
  const std::string correct = add_correct_count(g, graphs_.logits, labels);
  Node ce;
  ce.op_type = "SoftmaxCrossEntropyLoss";
  ce.name = g.unique_name("graphrun.metrics.loss");
  ce.inputs = {graphs_.logits, labels};
  ce.outputs = {g.unique_name("graphrun.loss_sum")};
  ce.attrs["reduction"] = Attribute::Str("sum");
  const std::string loss = g.add_node(std::move(ce)).outputs[0];
  ExecOptions eo = eval_->options();
  eo.fetch.clear();
  for (auto [value, acc] : {std::pair<std::string, std::string*>{correct, &eval_correct_}, {loss, &eval_loss_}}) {
    *acc = g.unique_name(value + ".total");
    g.initializers[*acc] = Tensor::scalar<float>(0.f);
    Node add;
    add.op_type = "Add";
    add.name = g.unique_name("graphrun.metrics.accumulate");
    add.inputs = {*acc, value};
    add.outputs = {g.unique_name(*acc + ".next")};
    const std::string next = g.add_node(std::move(add)).outputs[0];
    eo.state_updates.emplace_back(next, *acc);
    eo.fetch.push_back(next);
  }
  eval_ = std::make_unique<Executor>(g, eo);
  DeviceBackend* be = backend_of(dev);
  eval_pinned_ = static_cast<float*>(be->allocate_pinned(dev, 2 * sizeof(float)));
  eval_event_ = be->create_event(dev);
}

EvalStats Trainer::evaluate_device() {
  const Device dev = opts_.pipeline.devices[0];
  DeviceBackend* be = backend_of(dev);
  for (const auto& [name, _] : eval_->graph().initializers)
    if (replica(0).states().count(name)) eval_->set_state(name, replica(0).state(name));
  const Tensor zero = Tensor::scalar<float>(0.f);
  eval_->set_state(eval_correct_, zero);
  eval_->set_state(eval_loss_, zero);
  EvalStats st;
  const int64_t N = test_.size();
  st.images = N;
  if (!N) return st;
  const ResidentData* rd = resident(dev);
  const std::string& labels = eval_->graph().inputs.back();
  const int64_t per = test_.images.numel() / N;
  for (int64_t i = 0; i < N; i += opts_.eval_batch) {
    const int64_t n = std::min(opts_.eval_batch, N - i);
    Shape s = test_.images.shape();
    s[0] = n;
    // Batches are contiguous: views into the resident test set (or the host's, copied by the executor).
    Tensor images = rd ? rd->test_images : test_.images, labs = rd ? rd->test_labels : test_.labels;
    Tensor x = Tensor::view(DType::F32, s, static_cast<float*>(images.raw()) + i * per, images.device());
    Tensor y = Tensor::view(DType::I64, {n}, static_cast<int64_t*>(labs.raw()) + i, labs.device());
    eval_->run({{graphs_.image, x}, {labels, y}});
  }
  be->copy_device_to_host_async(dev, eval_pinned_, eval_->state(eval_correct_).raw(), sizeof(float));
  be->copy_device_to_host_async(dev, eval_pinned_ + 1, eval_->state(eval_loss_).raw(), sizeof(float));
  be->record_event(dev, eval_event_);
  be->wait_event(dev, eval_event_);
  st.accuracy = double(eval_pinned_[0]) / N;
  st.loss = double(eval_pinned_[1]) / N;
  return st;
}

}  // namespace graphrun::runtime

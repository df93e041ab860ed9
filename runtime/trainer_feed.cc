// Feeding data: the training and test sets (loaded, cut, normalised, checked against the model), where
// each device reads them, and the feeds that hand each replica its shard of every batch.
#include <cmath>
#include <cstring>
#include <map>
#include <ostream>
#include <thread>

#include "runtime/data/loader.h"
#include "runtime/trainer_parts.h"

namespace graphrun::runtime {

namespace {

// A replica's shard read through Source::read into a buffer kept per shard size (a memory-mapped
// .npy copies just these rows; the executor copies the buffer to the device when the device's memory
// is not the host's).
class HostFeed final : public Feed {
 public:
  HostFeed(data::SourcePtr train, std::vector<std::string> inputs, bool labels) : train_(std::move(train)) {
    names_ = std::move(inputs);
    if (labels) names_.push_back(data::kLabels);
  }
  void begin_epoch(const std::vector<int64_t>& order, int64_t, int64_t, int64_t) override { order_ = &order; }
  void shard(int64_t first, int64_t n, std::map<std::string, Tensor>& in) override {
    auto& bufs = buffers_[n];
    if (bufs.empty())
      for (const auto& name : names_) bufs[name] = batch_tensor(train_->spec(name), n);
    std::map<std::string, Tensor*> out;
    for (auto& [name, t] : bufs) out[name] = &t;
    train_->read(order_->data() + first, n, out);
    for (const auto& [name, t] : bufs) in[name] = t;
  }

 private:
  static Tensor batch_tensor(const data::ArraySpec& a, int64_t n) {
    Shape s{n};
    s.insert(s.end(), a.shape.begin(), a.shape.end());
    return Tensor(a.dtype, s);
  }
  data::SourcePtr train_;
  std::vector<std::string> names_;  // the inputs, then the labels (if fed)
  const std::vector<int64_t>* order_ = nullptr;
  std::map<int64_t, std::map<std::string, Tensor>> buffers_;  // by shard size
};

// A replica's shards assembled ahead by a data::Loader (its own threads decode images and augment),
// in the trainer's order: both are data::epoch_order(N, seed, epoch).
class LoaderFeed final : public Feed {
 public:
  LoaderFeed(data::SourcePtr train, const FeedOptions& o) : names_(o.inputs), steps_(o.steps_per_epoch) {
    if (o.labels) names_.push_back(data::kLabels);
    data::LoaderOptions lo;
    lo.batch = o.batch;
    lo.steps_per_epoch = o.steps_per_epoch;
    lo.threads = o.loader_threads;
    lo.seed = o.seed;
    lo.augment = o.augment;
    lo.fill = o.fill;
    lo.arrays = names_;
    lo.shard_rank = o.rank;
    lo.shard_count = o.replicas;
    loader_ = std::make_unique<data::Loader>(std::move(train), lo);
  }
  void begin_epoch(const std::vector<int64_t>&, int64_t, int64_t epoch, int64_t step) override {
    if (epoch != epoch_ || step != step_) loader_->start(epoch, step);  // a resumed run starts mid-epoch
    epoch_ = epoch;
    step_ = step;
  }
  void shard(int64_t, int64_t n, std::map<std::string, Tensor>& in) override {
    const data::Batch& b = loader_->next();
    GR_CHECK(b.epoch == epoch_ && b.step == step_ && b.size == n,
             "loader out of step: batch " << b.step << " of epoch " << b.epoch << " for step " << step_);
    if (++step_ == steps_) step_ = 0, ++epoch_;
    for (const auto& name : names_) in[name] = b.slice(name, 0, n);
  }

 private:
  std::vector<std::string> names_;  // the inputs, then the labels (if fed)
  int64_t steps_;
  std::unique_ptr<data::Loader> loader_;
  int64_t epoch_ = -1, step_ = -1;  // the batch next() hands out next
};

// A replica's shard gathered on its device: rows of the resident images and labels picked by a view
// into the epoch's order, which is uploaded once per epoch. No image crosses to the device per step.
class DeviceFeed final : public Feed {
 public:
  DeviceFeed(const DeviceData& data, Device device, std::string input) : data_(data), device_(device), input_(std::move(input)) {
    ExecOptions go;
    go.device = device;
    go.fetch = {"images.shard", "labels.shard"};
    gather_ = std::make_unique<Executor>(gather_graph(), go);
    order_ = backend_for(device.kind)->empty(device, DType::I64, {std::max<int64_t>(1, data.train_labels.numel())});
  }
  void begin_epoch(const std::vector<int64_t>& order, int64_t generation, int64_t, int64_t) override {
    if (generation == generation_) return;
    // (A pageable source: the copy has consumed `order` when it returns.)
    backend_for(device_.kind)->copy_host_to_device(device_, order_.raw(), order.data(), order.size() * sizeof(int64_t));
    generation_ = generation;
  }
  void shard(int64_t first, int64_t n, std::map<std::string, Tensor>& in) override {
    Tensor idx = Tensor::view(DType::I64, {n}, static_cast<int64_t*>(order_.raw()) + first, device_);
    auto out = gather_->run({{"images", data_.train_images}, {"labels", data_.train_labels}, {"indices", idx}});
    in[input_] = out.at("images.shard");
    in[data::kLabels] = out.at("labels.shard");
  }

 private:
  static Graph gather_graph() {
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

  const DeviceData& data_;
  Device device_;
  std::string input_;  // the model's (one) image input
  std::unique_ptr<Executor> gather_;
  Tensor order_;
  int64_t generation_ = -1;
};

}  // namespace

std::unique_ptr<Feed> make_feed(const data::SourcePtr& train, const DeviceData& data, Device device,
                                const FeedOptions& opts) {
  if (data.resident) return std::make_unique<DeviceFeed>(data, device, opts.inputs.at(0));
  if (opts.loader_threads > 0 || opts.augment) return std::make_unique<LoaderFeed>(train, opts);
  return std::make_unique<HostFeed>(train, opts.inputs, opts.labels);
}

int64_t data_bytes(const data::Dataset& train, const data::Dataset& test) {
  return static_cast<int64_t>(train.images.nbytes() + train.labels.nbytes() + test.images.nbytes() +
                              test.labels.nbytes());
}

int64_t resident_bytes(const data::Dataset& train, const data::Dataset& test, Device device, int64_t budget) {
  // A device that reads host memory reads the host's sets; nothing to upload. Sources other than an
  // MNIST folder (no Dataset) are read batch by batch.
  if (!train.images.defined() || shares_memory(device, train.images.device())) return 0;
  const int64_t bytes = data_bytes(train, test);
  return bytes > budget ? 0 : bytes;
}

std::vector<std::shared_ptr<const DeviceData>> place_data(const data::Dataset& train, const data::Dataset& test,
                                                          const std::vector<Device>& devices, int64_t budget,
                                                          std::ostream* log) {
  auto host = std::make_shared<DeviceData>();
  host->train_images = train.images;
  host->train_labels = train.labels;
  host->test_images = test.images;
  host->test_labels = test.labels;
  const int64_t bytes = data_bytes(train, test);
  std::vector<std::shared_ptr<const DeviceData>> r;
  std::map<std::string, std::shared_ptr<const DeviceData>> copies;  // by device: replicas on one device share it
  bool told = false;
  for (const Device& dev : devices) {
    if (!resident_bytes(train, test, dev, budget)) {
      if (train.images.defined() && !shares_memory(dev, train.images.device()) && !told && log) {
        *log << "the data (" << (bytes >> 20) << " MiB) exceeds the device data budget of " << (budget >> 20)
             << " MiB: copying each batch to the devices" << std::endl;
        told = true;
      }
      r.push_back(host);
      continue;
    }
    auto& c = copies[dev.str()];
    if (!c) {
      // Normalisation has already been applied on the host when the data was loaded.
      auto d = std::make_shared<DeviceData>();
      d->train_images = to_device(train.images, dev);
      d->train_labels = to_device(train.labels, dev);
      d->test_images = to_device(test.images, dev);
      d->test_labels = to_device(test.labels, dev);
      d->resident = true;
      c = d;
    }
    r.push_back(c);
  }
  return r;
}

namespace {

// What the model's input `name` takes per example: its dtype and shape without N (-1: any size).
data::InputSpec input_spec(const Graph& model, const std::string& name) {
  data::InputSpec in{name, DType::F32, {}};
  if (const ValueInfo* vi = model.info(name)) {
    if (vi->dtype != DType::Undefined) in.dtype = vi->dtype;
    if (vi->has_shape)
      for (size_t k = 1; k < vi->shape.size(); ++k) in.shape.push_back(vi->shape[k].known() ? vi->shape[k].size : -1);
  }
  return in;
}

// Per-position class ids (labels of `labels` per example, the output `scores` per example: -1 for a
// size unknown): whether the classes are the scores' last axis ([T] tokens of [T, V] scores: a
// language model) rather than ONNX's first ([H, W] pixels of [C, H, W]: a segmentation); the first
// when both fit. Error when neither fits.
bool classes_last(const Shape& scores, const Shape& labels, const std::string& what) {
  auto fits = [&](size_t from) {
    for (size_t i = 0; i < labels.size(); ++i)
      if (scores[from + i] >= 0 && scores[from + i] != labels[i]) return false;
    return true;
  };
  const bool ranks = scores.size() == labels.size() + 1;
  if (ranks && fits(1)) return false;
  if (ranks && fits(0)) return true;
  GR_FAIL(what << " per example, but class ids per position need scores [classes," << shape_str(labels).substr(1)
               << " or [" << shape_str(labels).substr(1, shape_str(labels).size() - 2) << ",classes]");
}

}  // namespace

// Data first: a missing dataset is the most likely mistake and the cheapest to report. An MNIST folder
// with its own test split is loaded whole (GPU replicas may keep it resident); every other source is
// opened (memory-mapped where it can be) and read batch by batch. Either way the replicas read it
// through a source fitted to the model: every check fit_to_model makes happens here, before training.
void Trainer::load_data(const Graph& model) {
  GR_CHECK(!model.inputs.empty(), "model '" << model.name << "' has no inputs to feed");
  std::vector<data::InputSpec> inputs;
  for (const auto& name : model.inputs) inputs.push_back(input_spec(model, name));
  const bool image = inputs[0].shape.size() == 3 && (inputs[0].dtype == DType::F32 || inputs[0].dtype == DType::F64);
  per_sec_unit_ = image ? "img" : "samples";
  data::FitOptions fo;
  fo.labels = opts_.labels;
  fo.targets = !own_loss();
  const std::string out = opts_.pipeline.output.empty() && !model.outputs.empty() ? model.outputs[0] : opts_.pipeline.output;
  const ValueInfo* ov = model.info(out);
  if (mse()) {
    // Targets in the output's type: f64 for a float64 model (train --float64), as its inputs are fed.
    fo.label_dtype = ov && ov->dtype == DType::F64 ? DType::F64 : DType::F32;
    fo.check_label_shape = ov && ov->has_shape;
    if (fo.check_label_shape) fo.label_shape = input_spec(model, out).shape;
  }
  const std::string kind = data::source_kind(opts_.data_dir);
  const bool whole = kind == "idx" && opts_.test_data.empty() && opts_.val_split < 0 && data::has_idx(opts_.data_dir, "t10k");
  // A user's labels out of range are an error naming the example; MNIST's are right, so there the
  // model is wrong, and setup_evaluation says how many classes each has.
  if (counts() && !whole && ov && ov->has_shape && ov->shape.size() == 2 && ov->shape[1].known())
    fo.num_classes = ov->shape[1].size;
  data::Normalize norm = opts_.channel_norm;
  if (opts_.normalize && whole) {
    GR_CHECK(norm.empty(), "--normalize given twice");
  } else if (opts_.normalize) {
    norm.mean = {opts_.norm_mean};
    norm.std = {opts_.norm_std};
  }
  if (!whole) fo.normalize = norm;
  // (An MNIST folder has one array of images: a model with more inputs is refused by fit_to_model,
  // naming the array it lacks.)
  auto fit = [&](data::SourcePtr s) {
    const data::ArraySpec* t = s->find(opts_.labels);
    GR_CHECK(!mse() || !t || t->dtype == DType::F32 || t->dtype == DType::F64,
             "--loss mse trains on float targets, but " << s->describe() << " array '" << opts_.labels << "' is "
                                                        << dtype_name(t->dtype)
                                                        << " (class ids train with --loss cross-entropy)");
    // Scores with more than a class axis: one class id per position ([T] for [T,V], [H,W] for [C,H,W]).
    const Shape scores = ov && ov->has_shape ? input_spec(model, out).shape : Shape{};
    if (counts() && t && scores.size() >= 2) {
      const bool last = classes_last(scores, t->shape, "model output '" + out + "' is " + ov->str() + " and " +
                                                           s->describe() + " has labels " + dtype_name(t->dtype) +
                                                           shape_str(t->shape));
      opts_.pipeline.classes_last = last;
      const int64_t c = last ? scores.back() : scores[0];
      if (c > 0) fo.num_classes = c;
    }
    return data::fit_to_model(std::move(s), inputs, fo);
  };
  data::OpenOptions oo;
  oo.labels = opts_.labels;
  oo.targets = !own_loss();
  oo.columns = opts_.columns;
  for (const auto& in : inputs) oo.inputs[in.name] = in.dtype;
  if (inputs[0].shape.size() == 3) oo.channels = inputs[0].shape[0], oo.height = inputs[0].shape[1], oo.width = inputs[0].shape[2];
  if (opts_.test_only && !opts_.test_data.empty()) {
    // --eval-only --test-data: the test set alone (the training data, given or default, is not read).
    oo.idx_prefix = "t10k";
    // The class names a trained model's ids stand for: a table's are numbered by them, a folder's must be them.
    for (const auto& [key, value] : model.meta.props)
      if (key == data::kClassesMetadataKey)
        oo.classes = data::classes_from_json(value, "model '" + model.name + "': metadata '" + key + "'");
    test_src_ = fit(data::open_source(opts_.test_data, oo));
    if (!oo.classes.empty() && !test_src_->classes().empty())
      data::check_same_classes(oo.classes, "model '" + model.name + "'", *test_src_, opts_.test_data);
    if (opts_.test_limit > 0) test_src_ = data::head(test_src_, opts_.test_limit);
    GR_CHECK(test_src_->size() > 0, "no examples to test on in '" << opts_.test_data << "'");
    train_src_ = test_src_;
    test_from_ = test_src_->describe();
    if (counts()) positions_ = std::max<int64_t>(1, test_src_->spec(data::kLabels).numel());
    return;
  }
  if (!whole) {
    data::DataSplits d = data::open_splits(opts_.data_dir, opts_.test_data, opts_.val_split, opts_.seed, oo, fit);
    train_src_ = opts_.train_limit > 0 ? data::head(d.train, opts_.train_limit) : d.train;
    test_src_ = opts_.test_limit > 0 ? data::head(d.test, opts_.test_limit) : d.test;
    test_from_ = d.test_from;
    GR_CHECK(train_src_->size() > 0 && test_src_->size() > 0, "no examples to train or test on in '" << opts_.data_dir << "'");
    if (counts()) positions_ = std::max<int64_t>(1, train_src_->spec(data::kLabels).numel());
    return;
  }
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
  if (!norm.empty()) {
    // In place, once, before the sets may be copied to the devices: x = (x - mean) / std on the one channel.
    GR_CHECK(norm.mean.size() == 1, "--normalize gives " << norm.mean.size() << " means but the images of '"
                                                         << opts_.data_dir << "' have 1 channel");
    GR_CHECK(norm.std[0] > 0 && std::isfinite(norm.std[0]) && std::isfinite(norm.mean[0]),
             "normalize: the standard deviation must be a positive number, got " << norm.std[0]);
    for (data::Dataset* ds : {&train_, &test_}) {
      float* p = ds->images.data<float>();
      const float mean = norm.mean[0], inv = 1.0f / norm.std[0];
      for (int64_t i = 0, n = ds->images.numel(); i < n; ++i) p[i] = (p[i] - mean) * inv;
    }
  }
  check_images_fit(model);
  train_src_ = fit(std::make_shared<data::IdxSource>(train_, "the train split of '" + opts_.data_dir + "'"));
  test_src_ = fit(std::make_shared<data::IdxSource>(test_, "the t10k split of '" + opts_.data_dir + "'"));
  test_from_ = test_src_->describe();
}

FeedOptions Trainer::feed_options(int d) const {
  FeedOptions f;
  f.inputs = graphs_.inputs;
  // A replica's loader fills its part of the global batch: its place among every rank's replicas.
  f.rank = first_replica_ + d;
  f.replicas = total_replicas_;
  f.batch = opts_.batch_size;
  f.steps_per_epoch = steps_per_epoch_;
  f.seed = opts_.seed;
  f.augment = opts_.augment;
  f.labels = !own_loss();
  if (opts_.augment) {
    // The loader augments every f32 [C,H,W] array; a model none of whose inputs is an image has none.
    bool image = false;
    std::string what;
    for (const auto& name : f.inputs) {
      const data::ArraySpec& a = train_src_->spec(name);
      image = image || (a.dtype == DType::F32 && a.shape.size() == 3);
      what += (what.empty() ? "'" : ", '") + name + "' " + dtype_name(a.dtype) + shape_str(a.shape);
    }
    GR_CHECK(image, "--augment crops and flips images, but the model's input" << (f.inputs.size() > 1 ? "s are " : " is ")
                                                                              << what << " per example, no f32 [C,H,W] image");
  }
  // The crop's padding is black, as torchvision pads before it normalises: (0 - mean) / std.
  data::Normalize nz = opts_.channel_norm;
  if (opts_.normalize) nz.mean = {opts_.norm_mean}, nz.std = {opts_.norm_std};
  for (size_t c = 0; c < nz.mean.size(); ++c) f.fill.push_back((0.f - nz.mean[c]) * (1.0f / nz.std[c]));
  f.loader_threads = opts_.loader_threads;
  if (f.loader_threads < 0) {
    // Decoding pays for threads of its own: those the replicas' intra-op threads leave over, at least 1.
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    const int local = static_cast<int>(opts_.pipeline.devices.size());  // this process's replicas
    f.loader_threads = train_src_->decode_heavy() || opts_.augment ? std::max(1, (cores - local * threads_) / local) : 0;
  }
  return f;
}

void Trainer::check_images_fit(const Graph& model) const {
  const std::string& in = model.inputs.empty() ? std::string() : model.inputs[0];
  const ValueInfo* vi = model.info(in);
  if (!vi || !vi->has_shape) return;
  const Shape& ds = train_.images.shape();
  bool ok = vi->shape.size() == ds.size();
  for (size_t k = 1; ok && k < ds.size(); ++k) ok = !vi->shape[k].known() || vi->shape[k].size == ds[k];
  GR_CHECK(ok && (vi->dtype == DType::F32 || vi->dtype == DType::F64 || vi->dtype == DType::Undefined),
           "model input '" << in << "' is " << vi->str() << " but the images in '" << opts_.data_dir << "' are f32[N,"
                           << ds[1] << "," << ds[2] << "," << ds[3] << "]");
}

}  // namespace graphrun::runtime

// Feeding data: the training and test sets (loaded, cut, normalised, checked against the model), where
// each device reads them, and the feeds that hand each replica its shard of every batch.
#include <cmath>
#include <cstring>
#include <map>
#include <ostream>

#include "runtime/trainer_parts.h"

namespace graphrun::runtime {

namespace {

// A replica's shard gathered on the host, into a buffer kept per shard size (the executor copies it
// to the device when the device's memory is not the host's).
class HostFeed final : public Feed {
 public:
  explicit HostFeed(const data::Dataset& train) : train_(train) {}
  void begin_epoch(const std::vector<int64_t>& order, int64_t) override { order_ = &order; }
  std::pair<Tensor, Tensor> shard(int64_t first, int64_t n) override {
    auto& buf = buffers_[n];
    if (!buf.first.defined()) {
      Shape is = train_.images.shape();
      is[0] = n;
      buf = {Tensor(DType::F32, is), Tensor(DType::I64, {n})};
    }
    data::gather(train_, order_->data() + first, n, buf.first, buf.second);
    return buf;
  }

 private:
  const data::Dataset& train_;
  const std::vector<int64_t>* order_ = nullptr;
  std::map<int64_t, std::pair<Tensor, Tensor>> buffers_;
};

// A replica's shard gathered on its device: rows of the resident images and labels picked by a view
// into the epoch's order, which is uploaded once per epoch. No image crosses to the device per step.
class DeviceFeed final : public Feed {
 public:
  DeviceFeed(const DeviceData& data, Device device) : data_(data), device_(device) {
    ExecOptions go;
    go.device = device;
    go.fetch = {"images.shard", "labels.shard"};
    gather_ = std::make_unique<Executor>(gather_graph(), go);
    order_ = backend_for(device.kind)->empty(device, DType::I64, {std::max<int64_t>(1, data.train_labels.numel())});
  }
  void begin_epoch(const std::vector<int64_t>& order, int64_t generation) override {
    if (generation == generation_) return;
    // (A pageable source: the copy has consumed `order` when it returns.)
    backend_for(device_.kind)->copy_host_to_device(device_, order_.raw(), order.data(), order.size() * sizeof(int64_t));
    generation_ = generation;
  }
  std::pair<Tensor, Tensor> shard(int64_t first, int64_t n) override {
    Tensor idx = Tensor::view(DType::I64, {n}, static_cast<int64_t*>(order_.raw()) + first, device_);
    auto out = gather_->run({{"images", data_.train_images}, {"labels", data_.train_labels}, {"indices", idx}});
    return {out.at("images.shard"), out.at("labels.shard")};
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
  std::unique_ptr<Executor> gather_;
  Tensor order_;
  int64_t generation_ = -1;
};

}  // namespace

std::unique_ptr<Feed> make_feed(const data::Dataset& train, const DeviceData& data, Device device) {
  if (data.resident) return std::make_unique<DeviceFeed>(data, device);
  return std::make_unique<HostFeed>(train);
}

std::vector<std::shared_ptr<const DeviceData>> place_data(const data::Dataset& train, const data::Dataset& test,
                                                          const std::vector<Device>& devices, int64_t budget,
                                                          std::ostream* log) {
  auto host = std::make_shared<DeviceData>();
  host->train_images = train.images;
  host->train_labels = train.labels;
  host->test_images = test.images;
  host->test_labels = test.labels;
  const int64_t bytes = static_cast<int64_t>(train.images.nbytes() + train.labels.nbytes() + test.images.nbytes() +
                                             test.labels.nbytes());
  std::vector<std::shared_ptr<const DeviceData>> r;
  std::map<std::string, std::shared_ptr<const DeviceData>> copies;  // by device: replicas on one device share it
  bool told = false;
  for (const Device& dev : devices) {
    // A device that reads host memory reads the host's sets; nothing to upload.
    if (shares_memory(dev, train.images.device()) || bytes > budget) {
      if (!shares_memory(dev, train.images.device()) && !told && log) {
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

// Data first: a missing dataset is the most likely mistake and the cheapest to report.
void Trainer::load_data() {
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
}

void Trainer::check_images_fit(const Graph& model) const {
  const std::string& in = model.inputs.empty() ? std::string() : model.inputs[0];
  const ValueInfo* vi = model.info(in);
  if (!vi || !vi->has_shape) return;
  const Shape& ds = train_.images.shape();
  bool ok = vi->shape.size() == ds.size();
  for (size_t k = 1; ok && k < ds.size(); ++k) ok = !vi->shape[k].known() || vi->shape[k].size == ds[k];
  GR_CHECK(ok && (vi->dtype == DType::F32 || vi->dtype == DType::Undefined),
           "model input '" << in << "' is " << vi->str() << " but the images in '" << opts_.data_dir << "' are f32[N,"
                           << ds[1] << "," << ds[2] << "," << ds[3] << "]");
}

}  // namespace graphrun::runtime

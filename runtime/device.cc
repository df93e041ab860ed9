// The device registry, host<->device tensor copies and asynchronous readback shared by every backend.
#include "runtime/device.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>

namespace graphrun::runtime {

Tensor DeviceBackend::empty(Device d, DType dtype, Shape shape) {
  GR_CHECK(dtype_size(dtype) > 0, "unsupported tensor element type " << dtype_name(dtype));
  for (int64_t x : shape) GR_CHECK(x >= 0, "negative dimension in tensor shape " << shape_str(shape));
  size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  void* p = allocate(d, bytes);
  std::shared_ptr<void> storage(p, [this, d](void* q) { deallocate(d, q); });
  return Tensor::adopt(dtype, std::move(shape), std::move(storage), p, d);
}

// Synchronous defaults of the asynchronous-read hooks: the copy itself waits, so events have nothing
// left to wait for.
void* DeviceBackend::allocate_pinned(Device, size_t bytes) {
  void* p = std::malloc(std::max<size_t>(1, bytes));
  GR_CHECK(p, "out of host memory allocating " << bytes << " bytes");
  return p;
}
void DeviceBackend::free_pinned(Device, void* p) { std::free(p); }
void DeviceBackend::copy_device_to_host_async(Device d, void* dst, const void* src, size_t bytes) {
  copy_device_to_host(d, dst, src, bytes);
}
void* DeviceBackend::create_event(Device) { return this; }
void DeviceBackend::destroy_event(Device, void*) {}
void DeviceBackend::record_event(Device, void*) {}
void DeviceBackend::wait_event(Device, void*) {}

namespace {
std::atomic<DeviceBackend*> g_override[2] = {nullptr, nullptr};  // by Device::Kind
std::atomic<DeviceBackend*>& override_slot(Device::Kind kind) { return g_override[static_cast<int>(kind)]; }
}  // namespace

void override_backend(Device::Kind kind, DeviceBackend* backend) {
  // The CPU kernels are every other device's reference: they stay the CPU's.
  GR_CHECK(kind != Device::Kind::CPU, "the CPU backend cannot be overridden");
  override_slot(kind).store(backend);
}

DeviceBackend* backend_for(Device::Kind kind) {
  if (kind == Device::Kind::CPU) return cpu_backend();
  if (DeviceBackend* o = override_slot(kind).load()) return o;
  if (kind == Device::Kind::CUDA) return cuda_backend();
  return nullptr;
}

bool backend_available(Device::Kind kind, std::string* why) {
  if (kind == Device::Kind::CPU) {
    if (why) why->clear();
    return true;
  }
  if (DeviceBackend* o = override_slot(kind).load()) {
    if (why) *why = o->unavailable_reason();
    return o->device_count() > 0;
  }
  if (kind == Device::Kind::CUDA) return builtin_cuda_available(why);
  if (why) *why = "no backend for this device kind in this build";
  return false;
}

bool cuda_available(std::string* why) { return backend_available(Device::Kind::CUDA, why); }

// Device kinds below are memory kinds: a CPU tensor is host memory, any other kind's is not.
bool shares_memory(Device a, Device b) { return a == b || (a.is_cpu() && b.is_cpu()); }

Tensor to_device(const Tensor& t, Device d) {
  if (!t.defined() || t.device() == d) return t;
  if (d.is_cpu()) return to_host(t);
  DeviceBackend* b = backend_for(d.kind);
  std::string why;
  const bool available = backend_available(d.kind, &why);  // first: it fills `why` also when b is null
  GR_CHECK(b && available, "cannot use " << d.str() << ": " << why);
  Tensor r = b->empty(d, t.dtype(), t.shape());
  if (!t.nbytes()) return r;
  if (t.device().is_cpu()) {
    b->copy_host_to_device(d, r.raw(), t.raw(), t.nbytes());
  } else {
    // Another device of the same kind: through the host keeps this simple and rare paths correct.
    Tensor h = to_host(t);
    b->copy_host_to_device(d, r.raw(), h.raw(), h.nbytes());
  }
  return r;
}

Tensor to_host(const Tensor& t) {
  if (!t.defined() || t.device().is_cpu()) return t.clone();
  DeviceBackend* b = backend_for(t.device().kind);
  GR_CHECK(b, "no backend for " << t.device().str() << " in this build");
  Tensor r(t.dtype(), t.shape());
  if (t.nbytes()) b->copy_device_to_host(t.device(), r.raw(), t.raw(), t.nbytes());
  return r;
}

Tensor host_readable(const Tensor& t) { return !t.defined() || t.device().is_cpu() ? t : to_host(t); }

HostReadback::HostReadback(DeviceBackend* backend, Device device, int slots, int values)
    : backend_(backend), device_(device), values_(values) {
  pinned_ = static_cast<float*>(backend_->allocate_pinned(device_, sizeof(float) * slots * values));
  for (int k = 0; k < slots; ++k) events_.push_back(backend_->create_event(device_));
}

HostReadback::~HostReadback() {
  for (void* e : events_) backend_->destroy_event(device_, e);
  backend_->free_pinned(device_, pinned_);
}

void HostReadback::post(int slot, const std::vector<const Tensor*>& values) {
  GR_CHECK(static_cast<int>(values.size()) == values_, "readback of " << values.size() << " values into rows of " << values_);
  for (int i = 0; i < values_; ++i) {
    const Tensor& t = *values[i];
    GR_CHECK(t.dtype() == DType::F32 && t.numel() == 1, "readback of a " << dtype_name(t.dtype()) << shape_str(t.shape())
                                                                         << " value (expected one f32)");
    backend_->copy_device_to_host_async(device_, pinned_ + slot * values_ + i, t.raw(), sizeof(float));
  }
  backend_->record_event(device_, events_.at(slot));
}

const float* HostReadback::read(int slot) {
  backend_->wait_event(device_, events_.at(slot));
  return pinned_ + slot * values_;
}

std::vector<std::unique_ptr<Communicator>> DeviceBackend::make_world_communicators(
    const std::vector<Device>& replicas, int, int, const std::function<void(void*, size_t)>&) {
  GR_FAIL("replicas on " << (replicas.empty() ? std::string("this device") : replicas[0].str())
                         << " cannot train across MPI ranks in this build");
}

}  // namespace graphrun::runtime

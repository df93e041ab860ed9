// The CUDA backend: device detection, per-GPU contexts (streams, handles, caching allocator) and the
// DeviceBackend the executor uses for cuda:N devices.

#include <algorithm>
#include <atomic>
#include <mutex>

#include "runtime/cuda/cuda_context.h"
#include "runtime/cuda/host_wait.h"
#include "runtime/cuda/nccl_comm.h"
#include "runtime/device.h"

namespace graphrun::runtime {
namespace cuda {

const KernelTable& cuda_kernels();  // runtime/kernels/cuda/registry.cc

namespace {

struct Detection {
  int count = 0;
  std::string why;  // "" when count > 0
};

const Detection& detection() {
  static const Detection d = [] {
    Detection r;
    int driver = 0;
    if (cudaDriverGetVersion(&driver) != cudaSuccess || driver == 0) {
      r.why = "no CUDA driver found (is this a machine with an NVIDIA GPU and its driver installed?)";
      return r;
    }
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaErrorInsufficientDriver) {
      int runtime = 0;
      cudaRuntimeGetVersion(&runtime);
      r.why = "the CUDA driver (" + std::to_string(driver / 1000) + "." + std::to_string(driver % 1000 / 10) +
              ") is older than graphrun's CUDA runtime (" + std::to_string(runtime / 1000) + "." +
              std::to_string(runtime % 1000 / 10) + ")";
    } else if (e == cudaErrorNoDevice || (e == cudaSuccess && n == 0)) {
      r.why = "no CUDA device";
    } else if (e != cudaSuccess) {
      r.why = std::string("cannot use CUDA: ") + cudaGetErrorString(e);
    } else {
      r.count = n;
    }
    cudaGetLastError();  // a failed query must not linger as the sticky "last error" of later launches
    return r;
  }();
  return d;
}

std::atomic<bool> g_deterministic{false};

}  // namespace

int device_count() { return detection().count; }
bool deterministic() { return g_deterministic.load(); }
void set_deterministic(bool on) { g_deterministic.store(on); }

size_t CachingAllocator::size_class(size_t bytes) {
  if (bytes == 0) bytes = 1;
  constexpr size_t kSmall = 512, kLarge = size_t(2) << 20;
  if (bytes <= (size_t(1) << 20)) return (bytes + kSmall - 1) / kSmall * kSmall;
  return (bytes + kLarge - 1) / kLarge * kLarge;
}

void* CachingAllocator::allocate(size_t bytes) {
  size_t cls = size_class(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = free_.find(cls);
  if (it != free_.end() && !it->second.empty()) {
    void* p = it->second.back();
    it->second.pop_back();
    live_[p] = cls;
    return p;
  }
  GR_CUDA_CHECK(cudaSetDevice(device_));
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, cls);
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    // Give the cached blocks back and try once more: fragmentation across size classes.
    GR_CUDA_CHECK(cudaDeviceSynchronize());
    for (auto& [c, blocks] : free_)
      for (void* b : blocks) {
        GR_CUDA_CHECK(cudaFree(b));
        reserved_ -= c;
      }
    free_.clear();
    e = cudaMalloc(&p, cls);
  }
  if (e != cudaSuccess) {
    cudaGetLastError();
    GR_FAIL_OUT_OF_MEMORY("out of GPU memory on cuda:" << device_ << " allocating " << bytes << " bytes ("
                          << reserved_ << " bytes already in use): " << cudaGetErrorString(e));
  }
  ++driver_allocations_;
  reserved_ += cls;
  live_[p] = cls;
  return p;
}

void CachingAllocator::deallocate(void* p) {
  if (!p) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(p);
  if (it == live_.end()) return;  // not ours: never happens unless memory is freed twice
  free_[it->second].push_back(p);
  live_.erase(it);
}

size_t CachingAllocator::cached_bytes() {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const auto& [c, blocks] : free_) n += c * blocks.size();
  return n;
}

void CachingAllocator::release_cached() {
  std::lock_guard<std::mutex> lock(mu_);
  GR_CUDA_CHECK(cudaSetDevice(device_));
  GR_CUDA_CHECK(cudaDeviceSynchronize());
  for (auto& [c, blocks] : free_)
    for (void* b : blocks) {
      GR_CUDA_CHECK(cudaFree(b));
      reserved_ -= c;
    }
  free_.clear();
}

DeviceContext& device_context(int index) {
  // Contexts live until the process ends (never destroyed: the CUDA runtime may be torn down first).
  static std::mutex mu;
  static std::vector<DeviceContext*> contexts;
  DeviceContext* dc = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (contexts.empty()) {
      const Detection& d = detection();
      GR_CHECK(d.count > 0, "cannot use cuda:" << index << ": " << d.why);
      contexts.assign(d.count, nullptr);
    }
    GR_CHECK(index >= 0 && index < static_cast<int>(contexts.size()),
             "no device cuda:" << index << " (" << contexts.size() << " CUDA device(s) present)");
    GR_CUDA_CHECK(cudaSetDevice(index));
    if (!contexts[index]) {
      auto c = std::make_unique<DeviceContext>();
      c->index = index;
      GR_CUDA_CHECK(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
      GR_CUDA_CHECK(cudaStreamCreateWithFlags(&c->comm_stream, cudaStreamNonBlocking));
      GR_CUBLAS_CHECK(cublasCreate(&c->cublas));
      GR_CUBLAS_CHECK(cublasSetStream(c->cublas, c->stream));
      GR_CUDNN_CHECK(cudnnCreate(&c->cudnn));
      GR_CUDNN_CHECK(cudnnSetStream(c->cudnn, c->stream));
      c->pinned_bytes = 4096;
      GR_CUDA_CHECK(cudaMallocHost(&c->pinned, c->pinned_bytes));
      c->allocator = std::make_unique<CachingAllocator>(index);
      contexts[index] = c.release();
    }
    dc = contexts[index];
  }
  return *dc;
}

namespace {

constexpr int kMaxWatchedDevices = 64;
std::atomic<HostWaitWatcher*> g_watchers[kMaxWatchedDevices];

HostWaitWatcher* watcher_of(int device) {
  return device >= 0 && device < kMaxWatchedDevices ? g_watchers[device].load() : nullptr;
}

}  // namespace

void set_host_wait_watcher(int device, HostWaitWatcher* w) {
  if (device >= 0 && device < kMaxWatchedDevices) g_watchers[device].store(w);
}

void clear_host_wait_watcher(int device, HostWaitWatcher* w) {
  if (device >= 0 && device < kMaxWatchedDevices) g_watchers[device].compare_exchange_strong(w, nullptr);
}

void host_wait_event(int device, cudaEvent_t done, const char* what) {
  if (HostWaitWatcher* w = watcher_of(device)) w->wait(done, what);
  else GR_CUDA_CHECK(cudaEventSynchronize(done));
}

void host_wait_stream(DeviceContext& dc, const char* what) {
  HostWaitWatcher* w = watcher_of(dc.index);
  if (!w) {
    GR_CUDA_CHECK(cudaStreamSynchronize(dc.stream));
    return;
  }
  cudaEvent_t e = nullptr;
  GR_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  try {
    GR_CUDA_CHECK(cudaEventRecord(e, dc.stream));
    w->wait(e, what);
  } catch (...) {
    cudaEventDestroy(e);
    throw;
  }
  cudaEventDestroy(e);
}

namespace {

class CudaBackend final : public DeviceBackend {
 public:
  Device::Kind kind() const override { return Device::Kind::CUDA; }
  int device_count() const override { return cuda::device_count(); }
  std::string unavailable_reason() const override { return detection().why; }

  void* allocate(Device d, size_t bytes) override { return device_context(d.index).allocator->allocate(bytes); }
  void deallocate(Device d, void* p) override {
    // Called from tensor destructors: must not throw.
    try {
      device_context(d.index).allocator->deallocate(p);
    } catch (...) {
    }
  }
  void copy_host_to_device(Device d, void* dst, const void* src, size_t bytes) override {
    DeviceContext& dc = device_context(d.index);
    // Small values (lr, step, shapes) travel as a kernel parameter: no staging, no wait.
    // Larger ones from pageable memory: cudaMemcpyAsync returns once `src` is staged, so the caller may
    // reuse it at once.
    if (bytes <= kSmallCopyBytes)
      copy_small_to_device(dst, src, bytes, dc.stream);
    else
      GR_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, dc.stream));
  }
  void copy_device_to_host(Device d, void* dst, const void* src, size_t bytes) override {
    DeviceContext& dc = device_context(d.index);
    GR_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, dc.stream));
    host_wait_stream(dc, "a copy to the host");
  }
  void copy_device_to_device(Device d, void* dst, const void* src, size_t bytes) override {
    DeviceContext& dc = device_context(d.index);
    GR_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, dc.stream));
  }
  void memset(Device d, void* dst, int value, size_t bytes) override {
    DeviceContext& dc = device_context(d.index);
    GR_CUDA_CHECK(cudaMemsetAsync(dst, value, bytes, dc.stream));
  }
  void synchronize(Device d) override { host_wait_stream(device_context(d.index), "a device synchronisation"); }
  size_t free_memory(Device d) override {
    DeviceContext& dc = device_context(d.index);
    size_t free = 0, total = 0;
    GR_CUDA_CHECK(cudaSetDevice(d.index));
    GR_CUDA_CHECK(cudaMemGetInfo(&free, &total));
    return free + dc.allocator->cached_bytes();
  }

  // Asynchronous reads. Ordering: the copy is enqueued on the compute stream, so it runs after every
  // kernel enqueued before it (the step that produced the value) and before any enqueued after it
  // (the next step, which may overwrite the source in its arena). An event recorded on the same
  // stream after the copy completes only once the copy has landed; cudaEventSynchronize on it is the
  // one host wait. Pinned (page-locked) memory is what makes cudaMemcpyAsync to the host truly
  // asynchronous: with pageable memory the driver would stage it and block the calling thread.
  void* allocate_pinned(Device d, size_t bytes) override {
    device_context(d.index);  // makes d current: the pinned block is mapped for its context
    void* p = nullptr;
    GR_CUDA_CHECK(cudaMallocHost(&p, std::max<size_t>(1, bytes)));
    return p;
  }
  void free_pinned(Device d, void* p) override {
    if (!p) return;
    try {
      device_context(d.index);
      cudaFreeHost(p);  // waits for the device; any copy into p has long been waited for
    } catch (...) {
    }
  }
  void copy_device_to_host_async(Device d, void* dst, const void* src, size_t bytes) override {
    DeviceContext& dc = device_context(d.index);
    GR_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, dc.stream));
  }
  void* create_event(Device d) override {
    device_context(d.index);  // an event belongs to the device current when it is created
    cudaEvent_t e = nullptr;
    // No timing (cheaper to record); blocking sync: a waiting host thread sleeps instead of
    // spinning, leaving the cores to the replicas' threads that are enqueueing work.
    GR_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming | cudaEventBlockingSync));
    return e;
  }
  void destroy_event(Device d, void* event) override {
    if (!event) return;
    try {
      device_context(d.index);
      cudaEventDestroy(static_cast<cudaEvent_t>(event));
    } catch (...) {
    }
  }
  void record_event(Device d, void* event) override {
    DeviceContext& dc = device_context(d.index);
    GR_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(event), dc.stream));
  }
  void wait_event(Device d, void* event) override {
    device_context(d.index);
    host_wait_event(d.index, static_cast<cudaEvent_t>(event), "a step's device work");
  }

  const KernelTable& kernels() const override { return cuda_kernels(); }
  std::vector<std::unique_ptr<Communicator>> make_communicators(const std::vector<Device>& replicas) override {
    return make_cuda_communicators(replicas);
  }
  std::vector<std::unique_ptr<Communicator>> make_world_communicators(
      const std::vector<Device>& replicas, int first, int total, const std::function<void(void*, size_t)>& bcast) override {
    return make_cuda_world_communicators(replicas, first, total, bcast);
  }
  void set_deterministic(bool on) override { cuda::set_deterministic(on); }
};

}  // namespace
}  // namespace cuda

DeviceBackend* cuda_backend() {
  static cuda::CudaBackend backend;
  return &backend;
}

bool builtin_cuda_available(std::string* why) {
  const auto& d = cuda::detection();
  if (why) *why = d.why;
  return d.count > 0;
}

}  // namespace graphrun::runtime

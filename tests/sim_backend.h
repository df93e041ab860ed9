// A simulated CUDA device for tests: the CPU kernels behind the DeviceBackend interface, over "device
// memory" the host cannot touch, so the executor's and trainer's device paths run (and fail loudly) here.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/device.h"

namespace graphrun::testing {

// What the simulated device did; compare snapshots around the code under test.
struct SimCounters {
  int64_t allocations = 0;     // allocate() calls (a real GPU's caching allocator may serve some from its cache)
  int64_t host_to_device = 0;  // copy_host_to_device calls
  int64_t device_to_host = 0;  // copy_device_to_host calls (each waits for the stream on a GPU)
  int64_t synchronizations = 0;
  // A kernel given a device tensor at an input its table reads on the host (a shape, axes, pads...):
  // on a GPU, a copy back and a stream synchronization.
  int64_t host_reads_of_device_values = 0;
  int64_t host_read_inputs = 0;  // inputs at those positions, wherever they were
  int64_t kernels = 0;           // kernel launches
  // Asynchronous reads (DeviceBackend::copy_device_to_host_async into pinned memory, then events).
  // The simulated device runs everything at once, so a copy lands at once; what is counted is what a
  // GPU would do: an async copy does not wait; an event wait is the host's one synchronisation, and it
  // is "deferred" when kernels were launched after the event was recorded (the stream stayed busy).
  int64_t async_device_to_host = 0;
  int64_t event_waits = 0;
  int64_t deferred_event_waits = 0;
};
SimCounters operator-(const SimCounters& a, const SimCounters& b);

// Device memory is one mmap'd pool kept PROT_NONE; the backend makes it accessible only while it
// runs a kernel, a copy or a reduction, under one process-wide (recursive) lock. Host code that reads
// or writes device memory directly, which on a GPU reads garbage or crashes, segfaults here.
// Kernels are the CPU table's, each wrapped that way (AllReduce and ReplicaSum reduce through make_communicators,
// in f32, or f64 for a float64 model, which the CUDA backend's NCCL AllReduce does not take).
// Devices cuda:0..devices-1 share the pool; replicas of any of them reduce like the CUDA backend's
// device-local group (the last rank to arrive sums in rank order).
class SimBackend final : public runtime::DeviceBackend {
 public:
  explicit SimBackend(int devices = 1, size_t pool_bytes = size_t(16) << 30);
  ~SimBackend() override;

  Device::Kind kind() const override { return Device::Kind::CUDA; }
  int device_count() const override { return devices_; }
  std::string unavailable_reason() const override { return devices_ > 0 ? "" : "no simulated device"; }

  void* allocate(Device d, size_t bytes) override;
  void deallocate(Device d, void* p) override;
  void copy_host_to_device(Device d, void* dst, const void* src, size_t bytes) override;
  void copy_device_to_host(Device d, void* dst, const void* src, size_t bytes) override;
  void copy_device_to_device(Device d, void* dst, const void* src, size_t bytes) override;
  void memset(Device d, void* dst, int value, size_t bytes) override;
  void synchronize(Device d) override;
  // The pool's untouched part, its cached free blocks and those given back (shared by every device).
  size_t free_memory(Device d) override;
  void* allocate_pinned(Device d, size_t bytes) override;
  void free_pinned(Device d, void* p) override;
  void copy_device_to_host_async(Device d, void* dst, const void* src, size_t bytes) override;
  void* create_event(Device d) override;
  void destroy_event(Device d, void* event) override;
  void record_event(Device d, void* event) override;
  void wait_event(Device d, void* event) override;

  const runtime::KernelTable& kernels() const override { return table_; }
  std::vector<std::unique_ptr<runtime::Communicator>> make_communicators(const std::vector<Device>& replicas) override;
  void set_deterministic(bool on) override {}

  SimCounters counters() const;
  // Rank `rank` of the communicator groups made from now on hangs at its collective number
  // `after_collectives` + 1: it never arrives there (so the others' timeout must end their wait)
  // and fails only once the group is aborted. rank -1: none.
  void stall_replica(int rank, int64_t after_collectives);
  // From now on an allocation of more than `bytes` runs out of memory, however much is free (a device
  // whose scratch and workspaces exceed every count); 0: no ceiling.
  void fail_allocations_over(size_t bytes);
  bool is_device_memory(const void* p) const;  // inside the pool
  size_t bytes_in_use() const;
  size_t high_water() const;  // the most of the device ever reserved (a device of this size serves the same run)

  // Holds the device lock with device memory accessible (kernels, copies, reductions; tests that
  // inspect memory deliberately). Nests.
  class Access {
   public:
    explicit Access(SimBackend& b);
    ~Access();
    Access(const Access&) = delete;
    Access& operator=(const Access&) = delete;

   private:
    SimBackend& b_;
  };

  // The SimBackend a wrapped kernel belongs to (the one installed; see ScopedSimDevice).
  static SimBackend* current();
  void count_kernel(const runtime::KernelContext& ctx);

 private:
  void check_device(Device d, const char* what) const;
  void check_range(const void* p, size_t bytes, const char* what) const;
  void set_access(bool on);
  void* from_pool(size_t cls);  // first fit among the blocks given back, else fresh from the pool's top; or null
  void release_cached();        // every cached free block back to the pool (the CUDA allocator's retry)

  int devices_;
  char* pool_ = nullptr;
  size_t pool_bytes_ = 0;
  size_t capacity_ = 0;      // the simulated device's memory
  size_t reserved_ = 0;      // of it, in blocks live or cached (what cudaMalloc has handed out)
  size_t high_water_ = 0;    // the most reserved_ has been
  size_t top_ = 0;           // address space of the pool handed out so far (bump pointer; never lowered)
  size_t accessible_ = 0;    // bytes at the start of the pool currently read/write
  int depth_ = 0;            // nesting of Access
  std::unordered_map<void*, size_t> live_;                 // block -> size class
  std::unordered_map<size_t, std::vector<void*>> free_;    // size class -> free blocks
  std::map<size_t, size_t> released_;                      // offset -> bytes given back below top_ (merged)
  std::unordered_map<void*, size_t> pinned_;               // allocate_pinned blocks -> bytes
  mutable std::recursive_mutex mu_;
  SimCounters counters_;
  runtime::KernelTable table_;
  size_t largest_ = 0;  // fail_allocations_over
  int stall_rank_ = -1;
  int64_t stall_after_ = 0;
};

// Installs a SimBackend as the backend of Device::Kind::CUDA for its lifetime: cuda:0.. run on it.
class ScopedSimDevice {
 public:
  explicit ScopedSimDevice(int devices = 1, size_t pool_bytes = size_t(16) << 30);
  ~ScopedSimDevice();
  ScopedSimDevice(const ScopedSimDevice&) = delete;
  ScopedSimDevice& operator=(const ScopedSimDevice&) = delete;
  SimBackend& backend() { return *backend_; }
  SimCounters counters() const { return backend_->counters(); }

 private:
  std::unique_ptr<SimBackend> backend_;
};

}  // namespace graphrun::testing

// The device hook: memory, copies, events, the kernel table and the communicators of a device kind
// (the CPU, CUDA, a test's simulated device), behind the one interface the executor and the trainer use.
#pragma once
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "graph/tensor.h"
#include "runtime/comm/communicator.h"  // make_communicators hands out owners: callers need the type
#include "runtime/kernel.h"

namespace graphrun::runtime {

// Work a backend enqueues is ordered on the device's compute stream; copies to the host and
// synchronize() wait for it. Every call takes the device it acts on (a backend serves all its devices).
// The CPU's backend (runtime/cpu_backend.cc) is the synchronous case: its memory is the host's, a copy
// is a memcpy, every call has finished when it returns, and cpu:0, cpu:1, ... are logical devices (one
// per replica) that share the host's memory.
class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  virtual Device::Kind kind() const = 0;
  virtual int device_count() const = 0;                // 0 when unavailable
  virtual std::string unavailable_reason() const = 0;  // "" when at least one device is usable

  // Device memory: from a caching allocator (no driver allocation in the steady state); 64-byte aligned.
  virtual void* allocate(Device d, size_t bytes) = 0;
  virtual void deallocate(Device d, void* p) = 0;
  virtual void copy_host_to_device(Device d, void* dst, const void* src, size_t bytes) = 0;
  virtual void copy_device_to_host(Device d, void* dst, const void* src, size_t bytes) = 0;  // waits
  virtual void copy_device_to_device(Device d, void* dst, const void* src, size_t bytes) = 0;
  virtual void memset(Device d, void* dst, int value, size_t bytes) = 0;
  virtual void synchronize(Device d) = 0;
  // What device d can still give this process, in bytes: the driver's free memory plus the backend's
  // own cached free blocks (the CPU: MemAvailable plus free swap, shared by its logical devices);
  // 0 where unknown. The trainer refuses replicas that cannot fit before it allocates them.
  virtual size_t free_memory(Device d) { return 0; }

  // Reading small results without stalling the stream (the trainer's per-step loss and accuracy):
  // copy them into pinned host memory after the work enqueued so far, mark that point with an event,
  // and wait for the event only when the values are needed. The defaults are synchronous (the copy
  // waits), which is correct for any backend; the CUDA backend overrides them all.
  virtual void* allocate_pinned(Device d, size_t bytes);  // host memory the device can copy into
  virtual void free_pinned(Device d, void* p);
  // Enqueues the copy on d's compute stream and returns at once; `dst` (from allocate_pinned) holds
  // the bytes once an event recorded after this call has been waited for.
  virtual void copy_device_to_host_async(Device d, void* dst, const void* src, size_t bytes);
  virtual void* create_event(Device d);  // reusable; never nullptr
  virtual void destroy_event(Device d, void* event);
  virtual void record_event(Device d, void* event);  // marks the work enqueued so far on d
  virtual void wait_event(Device d, void* event);    // blocks the host until that work is done

  virtual const KernelTable& kernels() const = 0;
  // One communicator per replica for AllReduce nodes (replicas: the devices, in rank order;
  // the same device may repeat, which reduces within that device).
  virtual std::vector<std::unique_ptr<Communicator>> make_communicators(const std::vector<Device>& replicas) = 0;
  // The same for this process's replicas as part of a job of several processes (MPI ranks): replica l
  // is global replica first + l of total; bcast(data, bytes) broadcasts bytes from the rank holding
  // global replica 0 to every rank (how NCCL's unique id travels). By default: an error.
  virtual std::vector<std::unique_ptr<Communicator>> make_world_communicators(
      const std::vector<Device>& replicas, int first, int total, const std::function<void(void*, size_t)>& bcast);
  // Deterministic algorithms (cuDNN) from now on, at some cost in speed.
  virtual void set_deterministic(bool on) = 0;
  // Whether AllReduce should overlap the backward pass unless told otherwise (ExecOptions::
  // async_kernels): it pays where collectives run on a stream of their own (GPUs); on the CPU the
  // communication threads compete with the replicas for the cores (README, "Measured").
  virtual bool overlap_allreduce_by_default() const { return true; }

  // An owning tensor in device memory; contents undefined.
  Tensor empty(Device d, DType dtype, Shape shape);
};

// The backend of a device kind, or nullptr (a kind this build does not include).
DeviceBackend* backend_for(Device::Kind kind);
// True when kernels of `kind` can run here; otherwise *why (if given) says why in one line.
bool backend_available(Device::Kind kind, std::string* why = nullptr);

// Test/embedding hook: from now on `backend` serves every device of `kind` in place of the built-in
// backend (nullptr restores it). backend_for(), backend_available() and cuda_available() honour it,
// and so do the executor and the trainer (tests/sim_backend.h runs the CUDA paths on the CPU with it).
// Install it before creating executors on that kind and keep it alive while they exist.
void override_backend(Device::Kind kind, DeviceBackend* backend);

// The CPU's backend (runtime/cpu_backend.cc): always there.
DeviceBackend* cpu_backend();
// The built-in CUDA backend, or nullptr when graphrun was built without CUDA (runtime/cuda/).
DeviceBackend* cuda_backend();
// True when CUDA kernels can run here (through an override_backend too); otherwise *why (if given)
// says why in one line: "graphrun was built without CUDA", "no CUDA driver found", "no CUDA device", ...
bool cuda_available(std::string* why = nullptr);
// The built-in CUDA backend's own answer, overrides aside (runtime/cuda/).
bool builtin_cuda_available(std::string* why);
// True when cuBLAS, which graphrun opens on first use rather than at start (runtime/cuda/cublas_loader.cc),
// can be opened here: a question about the library, not about a device; otherwise *why says why.
bool cublas_loadable(std::string* why = nullptr);

// True when memory of device `a` can be read as memory of device `b` without a copy: the same device,
// or two CPU devices (both are the host's memory).
bool shares_memory(Device a, Device b);

// Copies between host and devices.
Tensor to_device(const Tensor& t, Device d);  // t itself when already on d; else an owning copy on d
Tensor to_host(const Tensor& t);              // an owning host copy (clone() for host tensors)
Tensor host_readable(const Tensor& t);        // t itself when in host memory; else to_host(t)

// Small f32 results of a device read without stalling it (the trainer's per-step loss and correct
// count, an evaluation's totals): `slots` rows of `values` floats in pinned host memory. post() enqueues
// a row's copies after the work enqueued so far and marks them with the row's event; read() waits for
// that event only. On a synchronous backend (the CPU) the copies have landed when post() returns.
class HostReadback {
 public:
  HostReadback(DeviceBackend* backend, Device device, int slots, int values);
  ~HostReadback();
  HostReadback(const HostReadback&) = delete;
  HostReadback& operator=(const HostReadback&) = delete;
  // Each of `values` (one f32 on the device; a float64 graph casts its figures to f32 with a node,
  // passes::append_step_figures) goes to row `slot`; the row must not be posted again before it was read.
  void post(int slot, const std::vector<const Tensor*>& values);
  const float* read(int slot);

 private:
  DeviceBackend* backend_;
  Device device_;
  int values_;
  float* pinned_ = nullptr;
  std::vector<void*> events_;
};

}  // namespace graphrun::runtime

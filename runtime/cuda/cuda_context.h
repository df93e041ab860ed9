// Per-GPU state of the CUDA backend: streams, cuBLAS/cuDNN handles bound to the compute stream,
// the caching allocator, and the lock that serialises kernel launches of replicas sharing a GPU.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/cuda/cuda_check.h"

namespace graphrun::runtime::cuda {

// Size-class free lists of one device. Blocks are handed out for use on the compute stream only,
// so a freed block may be reused at once: later work on that stream runs after earlier work.
class CachingAllocator {
 public:
  explicit CachingAllocator(int device) : device_(device) {}
  void* allocate(size_t bytes);
  void deallocate(void* p);
  void release_cached();  // returns every free block to the driver (after a device sync)
  size_t reserved_bytes() const { return reserved_; }
  size_t cached_bytes();  // free blocks held for reuse
  size_t driver_allocations() const { return driver_allocations_; }  // cudaMalloc calls so far

  static size_t size_class(size_t bytes);

 private:
  int device_;
  std::mutex mu_;
  std::map<size_t, std::vector<void*>> free_;   // size class -> free blocks
  std::unordered_map<void*, size_t> live_;      // block -> its size class
  size_t reserved_ = 0;
  size_t driver_allocations_ = 0;
};

struct DeviceContext {
  int index = 0;
  cudaStream_t stream = nullptr;       // compute: every kernel and copy of this device
  cudaStream_t comm_stream = nullptr;  // NCCL collectives
  cublasHandle_t cublas = nullptr;
  cudnnHandle_t cudnn = nullptr;
  std::unique_ptr<CachingAllocator> allocator;
  std::mutex launch_mutex;  // held by a kernel while it enqueues (handles are not shared concurrently)
  void* pinned = nullptr;   // small pinned host buffer for reading shape-like values back
  size_t pinned_bytes = 0;
  // Per-shape caches of the kernel families (cuDNN algorithms, descriptors), keyed by a string the
  // family builds; values owned by the family through a type-erased deleter.
  std::unordered_map<std::string, std::shared_ptr<void>> cache;
};

// Copies up to kSmallCopyBytes from the host by value, as a kernel parameter: fully asynchronous
// (a pageable cudaMemcpyAsync may wait for the stream). Used for scalars, shapes, constants.
constexpr size_t kSmallCopyBytes = 256;
void copy_small_to_device(void* dst, const void* src, size_t bytes, cudaStream_t stream);  // kernels/cuda/common.cu

// The context of GPU `index`, created on first use; makes `index` the calling thread's current device.
DeviceContext& device_context(int index);
int device_count();  // 0 when no driver or no device
bool deterministic();
void set_deterministic(bool on);

}  // namespace graphrun::runtime::cuda

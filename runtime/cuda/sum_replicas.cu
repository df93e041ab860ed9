// The device-local reduction of replicas sharing a GPU: one kernel sums every replica's buffer.
#include "runtime/cuda/sum_replicas.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "runtime/cuda/cuda_check.h"

namespace graphrun::runtime::cuda {
namespace {

struct ReplicaPtrs {
  const float* send[kMaxLocalReplicas];
  float* recv[kMaxLocalReplicas];
};

// Every thread reads all sends of its element before writing any recv, so recv may alias send.
__global__ void sum_replicas_kernel(ReplicaPtrs p, int nranks, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)blockDim.x * gridDim.x) {
    float acc = 0.f;
    for (int r = 0; r < nranks; ++r) acc += p.send[r][i];
    for (int r = 0; r < nranks; ++r) p.recv[r][i] = acc;
  }
}

}  // namespace

void launch_sum_replicas(const float* const* sends, float* const* recvs, int nranks, int64_t count, void* stream) {
  GR_CHECK(nranks >= 1 && nranks <= kMaxLocalReplicas,
           "device-local reduction of " << nranks << " replicas (at most " << kMaxLocalReplicas << ")");
  if (count <= 0) return;
  ReplicaPtrs p{};
  for (int r = 0; r < nranks; ++r) {
    p.send[r] = sends[r];
    p.recv[r] = recvs[r];
  }
  constexpr int kThreads = 256;
  const auto blocks = static_cast<unsigned>(std::min<int64_t>((count + kThreads - 1) / kThreads, 65535LL * 32));
  sum_replicas_kernel<<<blocks, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(p, nranks, count);
  GR_LAUNCH_CHECK("sum_replicas");
}

}  // namespace graphrun::runtime::cuda

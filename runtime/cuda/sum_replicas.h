// The device-local reduction of replicas sharing one GPU (used by its communicator, nccl_comm.cc).
#pragma once
#include <cstdint>

namespace graphrun::runtime::cuda {

constexpr int kMaxLocalReplicas = 16;

// recvs[r][i] = sum over r' of sends[r'][i] for every r < nranks (<= kMaxLocalReplicas), summed in
// rank order, enqueued on `stream` (a cudaStream_t). recvs may alias sends.
void launch_sum_replicas(const float* const* sends, float* const* recvs, int nranks, int64_t count, void* stream);

}  // namespace graphrun::runtime::cuda

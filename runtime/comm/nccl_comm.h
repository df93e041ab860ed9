// Communicators for CUDA replicas (built only with GRAPHRUN_CUDA): NCCL across the GPUs of one process
// (ncclCommInitAll), and a device-local reduction for replicas sharing one GPU (cuda:0,cuda:0).
#pragma once
#include <memory>
#include <vector>

#include "graph/tensor.h"
#include "runtime/comm/communicator.h"

namespace graphrun::runtime {

// A communicator whose buffers live on its rank's GPU. Operations are stream-ordered: they are
// enqueued on the compute stream of that GPU (after everything enqueued before), and work enqueued
// afterwards sees their result. allreduce_sum/broadcast given host memory copy through the device
// and wait, so they also keep the blocking contract of Communicator for host buffers.
class DeviceCommunicator : public Communicator {
 public:
  struct Buffer {
    const float* send;
    float* recv;  // may equal send (in place)
    int64_t count;
  };
  // One grouped collective: recv[k] = sum over ranks of send[k], for every buffer k.
  virtual void allreduce_sum_group(const std::vector<Buffer>& buffers) = 0;
  virtual Device device() const = 0;

  void allreduce_sum(float* data, int64_t count) override;
  void broadcast(float* data, int64_t count, int root) override;

 protected:
  virtual void broadcast_device(float* data, int64_t count, int root) = 0;
};

// One communicator per replica, in rank order. All replicas on distinct GPUs: NCCL; all on one GPU:
// the device-local reduction. A mix of both is refused with a clear error.
std::vector<std::unique_ptr<Communicator>> make_cuda_communicators(const std::vector<Device>& replicas);

namespace cuda {
// runtime/kernels/cuda/collective.cu: recvs[r][i] = sum over r' of sends[r'][i], for r < nranks (<= 16).
void launch_sum_replicas(const float* const* sends, float* const* recvs, int nranks, int64_t count, void* stream);
}  // namespace cuda

}  // namespace graphrun::runtime

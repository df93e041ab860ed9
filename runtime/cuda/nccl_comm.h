// Communicators for CUDA replicas (built only with GRAPHRUN_CUDA): NCCL across the GPUs of one process
// (ncclCommInitAll), and a device-local reduction for replicas sharing one GPU (cuda:0,cuda:0).
#pragma once
#include <functional>
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
  // The same, overlapping the compute stream: starts the collective (after everything enqueued on
  // the compute stream so far) and returns a completion that, called once, makes work enqueued
  // afterwards on the compute stream wait for the result; calling it does not block the host.
  // Until it is called, work enqueued on the compute stream must neither read the recv buffers
  // nor write the send or recv buffers (the executor's planner guarantees this for AllReduce
  // nodes). An empty result means the work is already ordered on the compute stream (the default:
  // allreduce_sum_group; the device-local reduction runs on the compute stream anyway).
  virtual std::function<void()> allreduce_sum_group_async(const std::vector<Buffer>& buffers) {
    allreduce_sum_group(buffers);
    return {};
  }
  virtual Device device() const = 0;

  void allreduce_sum(float* data, int64_t count) override;
  void broadcast(float* data, int64_t count, int root) override;

 protected:
  virtual void broadcast_device(float* data, int64_t count, int root) = 0;
};

// One communicator per replica, in rank order. All replicas on distinct GPUs: NCCL; all on one GPU:
// the device-local reduction. A mix of both is refused with a clear error.
std::vector<std::unique_ptr<Communicator>> make_cuda_communicators(const std::vector<Device>& replicas);

// This process's GPUs as part of one NCCL communicator over every GPU of an MPI job: replica l is NCCL
// rank first + l of total. The rank holding replica 0 makes the unique id (ncclGetUniqueId), bcast
// hands it to every rank, and each process joins with ncclCommInitRank. One GPU per replica.
std::vector<std::unique_ptr<Communicator>> make_cuda_world_communicators(const std::vector<Device>& replicas,
                                                                         int first, int total,
                                                                         const std::function<void(void*, size_t)>& bcast);

}  // namespace graphrun::runtime

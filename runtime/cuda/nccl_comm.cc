// NCCL communicators (one process, one GPU per replica) and the device-local reduction for replicas
// sharing a GPU. Both enqueue on the GPU's streams; see nccl_comm.h for the ordering contract.
#include "runtime/cuda/nccl_comm.h"

#include <nccl.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <set>
#include <string>

#include "runtime/comm/replica_aborted.h"
#include "runtime/comm/round_group.h"
#include "runtime/comm/watchdog.h"
#include "runtime/cuda/cuda_context.h"
#include "runtime/cuda/host_wait.h"
#include "runtime/cuda/sum_replicas.h"

#define GR_NCCL_CHECK(call)                                                                     \
  do {                                                                                          \
    ncclResult_t gr_e_ = (call);                                                                \
    if (gr_e_ != ncclSuccess) GR_FAIL(#call << " failed: " << ncclGetErrorString(gr_e_));      \
  } while (0)

namespace graphrun::runtime {

namespace {

bool is_device_pointer(const void* p) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

// Runs `body` with device memory standing in for host memory `data` (count floats), then copies back
// and waits (through the GPU's watcher under NCCL: `what` names the collective in its error).
template <class F>
void through_device(Device dev, float* data, int64_t count, const char* what, F body) {
  cuda::DeviceContext& dc = cuda::device_context(dev.index);
  size_t bytes = static_cast<size_t>(count) * sizeof(float);
  float* tmp = static_cast<float*>(dc.allocator->allocate(bytes));
  try {
    GR_CUDA_CHECK(cudaMemcpyAsync(tmp, data, bytes, cudaMemcpyHostToDevice, dc.stream));
    body(tmp);
    GR_CUDA_CHECK(cudaMemcpyAsync(data, tmp, bytes, cudaMemcpyDeviceToHost, dc.stream));
    cuda::host_wait_stream(dc, what);
  } catch (...) {
    dc.allocator->deallocate(tmp);
    throw;
  }
  dc.allocator->deallocate(tmp);
}

// ---- NCCL: one communicator per GPU, all made by ncclCommInitAll ----

// Also the watcher of its GPU (cuda::HostWaitWatcher): every host wait on that GPU's compute stream
// (a step's figures, a copy to the host, a host-memory collective) polls the work's event and
// ncclCommGetAsyncError against the timeout, and on an error or timeout calls ncclCommAbort and
// throws an error naming this replica and the wait, as Horovod and torch's ProcessGroupNCCL do.
class NcclCommunicator final : public DeviceCommunicator, public cuda::HostWaitWatcher {
 public:
  // rank: the NCCL rank (over every process's GPUs); local: this process's index in `barrier`.
  NcclCommunicator(ncclComm_t comm, int rank, int size, int local, Device dev, std::shared_ptr<RoundGroup> barrier)
      : comm_(comm), rank_(rank), size_(size), local_(local), dev_(dev), barrier_(std::move(barrier)) {
    comm_stream_ = cuda::device_context(dev_.index).comm_stream;
    GR_CUDA_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
    GR_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
    cuda::set_host_wait_watcher(dev_.index, this);
  }
  // ncclCommDestroy waits for the communicator's work in flight, so it is called only once that work
  // is seen to finish within the timeout; a communicator the watchdog or a failed replica aborted is
  // gone (nothing to do), and one whose work fails or does not finish is aborted (teardown_action).
  ~NcclCommunicator() override {
    cuda::clear_host_wait_watcher(dev_.index, this);
    cudaSetDevice(dev_.index);
    cudaEvent_t drained = nullptr;  // the end of the NCCL work enqueued so far
    if (!aborted_ && (cudaEventCreateWithFlags(&drained, cudaEventDisableTiming) != cudaSuccess ||
                      cudaEventRecord(drained, comm_stream_) != cudaSuccess)) {
      cudaGetLastError();
      if (drained) cudaEventDestroy(drained);
      drained = nullptr;
    }
    const Teardown t = teardown_action(
        aborted_,
        [&](std::string* why) {
          if (drained) return poll(drained, why);
          *why = "could not record the end of its work";
          return Progress::Failed;
        },
        barrier_->timeout());
    if (t != Teardown::Nothing && !aborted_.exchange(true)) {
      if (t == Teardown::Destroy) ncclCommDestroy(comm_);
      else ncclCommAbort(comm_);
    }
    if (drained) cudaEventDestroy(drained);
    cudaEventDestroy(ready_);
    cudaEventDestroy(done_);
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Device device() const override { return dev_; }
  std::string name() const override { return "nccl"; }
  void barrier() override {
    barrier_->round(local_, "barrier", [] {});
  }
  // The host barrier's, and the watcher's for the host's waits on this GPU (see wait()).
  void set_timeout(double seconds) override { barrier_->set_timeout(seconds); }
  // Another replica failed: wake the ranks in the host barrier, and end this rank's NCCL operations
  // (ncclCommAbort is what a watchdog calls on a communicator another thread may be waiting on:
  // kernels waiting for a peer that will never send return, and later calls fail).
  void abort() override {
    barrier_->abort();
    std::lock_guard<std::mutex> lock(comm_mu_);  // no poll of comm_ while it goes
    if (!aborted_.exchange(true)) {
      cudaSetDevice(dev_.index);
      ncclCommAbort(comm_);
    }
  }

  void wait(cudaEvent_t done, const char* what) override {
    watch_until_done([&](std::string* why) { return poll(done, why); }, {what, rank_, size_, barrier_->timeout()},
                     [this] { abort(); });
  }

  // Blocking-style: the compute stream waits for the result before anything enqueued after this call.
  void allreduce_sum_group(const std::vector<Buffer>& buffers) override {
    std::function<void()> done = allreduce_sum_group_async(buffers);
    done();
  }

  // Stream ordering, per bucket:
  //   compute: ... gradients ... [record ready] ... later backward work ... [wait done_k] readers of the sums
  //   comm:                      [wait ready] ncclAllReduce(send -> recv) [record done_k]
  // The comm stream starts after every kernel enqueued on the compute stream so far: the gradients,
  // and every earlier user of the send/recv memory. Compute work enqueued between this call and
  // the completion runs concurrently with NCCL; it never touches send or recv, because the
  // executor keeps an asynchronous node's buffers out of the arena's reuse until its completion.
  // The completion enqueues the compute stream's wait for done_k, so the sums' readers, and every
  // later reuse of the buffers' memory, come after the reduction. Each bucket in flight has an
  // event of its own: a completion must wait for its bucket, not for a later one's record
  // (one shared event would make the first reader wait for every bucket enqueued since). The
  // `ready_` event may be shared: cudaStreamWaitEvent captures the record current at the call.
  std::function<void()> allreduce_sum_group_async(const std::vector<Buffer>& buffers) override {
    if (aborted_) throw ReplicaAborted(kAnotherReplicaFailed);
    cuda::DeviceContext& dc = cuda::device_context(dev_.index);
    GR_CUDA_CHECK(cudaEventRecord(ready_, dc.stream));
    GR_CUDA_CHECK(cudaStreamWaitEvent(dc.comm_stream, ready_, 0));
    GR_NCCL_CHECK(ncclGroupStart());
    for (const Buffer& b : buffers)
      GR_NCCL_CHECK(ncclAllReduce(b.send, b.recv, static_cast<size_t>(b.count), ncclFloat, ncclSum, comm_, dc.comm_stream));
    GR_NCCL_CHECK(ncclGroupEnd());
    cudaEvent_t done = acquire_event();
    if (cudaError_t e = cudaEventRecord(done, dc.comm_stream); e != cudaSuccess) {
      release_event(done);
      GR_FAIL("cudaEventRecord(done, comm_stream) failed: " << cudaGetErrorString(e));
    }
    cudaStream_t compute = dc.stream;
    return [this, done, compute] {
      // Once the wait is enqueued the event may be recorded again for another bucket: the wait
      // keeps referring to this record.
      cudaError_t e = cudaStreamWaitEvent(compute, done, 0);
      release_event(done);
      if (e != cudaSuccess) GR_FAIL("cudaStreamWaitEvent(compute, done) failed: " << cudaGetErrorString(e));
    };
  }

 protected:
  void broadcast_device(float* data, int64_t count, int root) override {
    if (aborted_) throw ReplicaAborted(kAnotherReplicaFailed);
    cuda::DeviceContext& dc = cuda::device_context(dev_.index);
    GR_CUDA_CHECK(cudaEventRecord(ready_, dc.stream));
    GR_CUDA_CHECK(cudaStreamWaitEvent(dc.comm_stream, ready_, 0));
    GR_NCCL_CHECK(ncclBroadcast(data, data, static_cast<size_t>(count), ncclFloat, root, comm_, dc.comm_stream));
    GR_CUDA_CHECK(cudaEventRecord(done_, dc.comm_stream));
    GR_CUDA_CHECK(cudaStreamWaitEvent(dc.stream, done_, 0));
  }

 private:
  ncclComm_t comm_;
  int rank_, size_, local_;
  Device dev_;
  // A free event for one bucket in flight (created on this communicator's device on demand; the
  // pool grows to the number of buckets in flight at once, then stays).
  cudaEvent_t acquire_event() {
    std::lock_guard<std::mutex> lock(events_mu_);
    if (!free_events_.empty()) {
      cudaEvent_t e = free_events_.back();
      free_events_.pop_back();
      return e;
    }
    cuda::device_context(dev_.index);
    cudaEvent_t e = nullptr;
    GR_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    events_.push_back(e);
    return e;
  }
  void release_event(cudaEvent_t e) {
    std::lock_guard<std::mutex> lock(events_mu_);
    free_events_.push_back(e);
  }

  // One look at the work the host waits for, and at NCCL's asynchronous error (a peer's connection
  // lost, a failed proxy; ncclInProgress only means that a non-blocking call is still under way).
  Progress poll(cudaEvent_t done, std::string* why) {
    std::lock_guard<std::mutex> lock(comm_mu_);
    if (aborted_) return Progress::Aborted;
    const cudaError_t q = cudaEventQuery(done);
    if (q == cudaSuccess) return Progress::Done;
    if (q != cudaErrorNotReady) {
      *why = std::string("CUDA error while waiting: ") + cudaGetErrorString(q);
      return Progress::Failed;
    }
    ncclResult_t async = ncclSuccess;
    if (const ncclResult_t r = ncclCommGetAsyncError(comm_, &async); r != ncclSuccess) async = r;
    if (async == ncclSuccess || async == ncclInProgress) return Progress::Pending;
    *why = std::string("NCCL reported an asynchronous error: ") + ncclGetErrorString(async);
    const char* last = ncclGetLastError(comm_);
    if (last && *last) *why += std::string(" (") + last + ")";
    return Progress::Failed;
  }

  std::shared_ptr<RoundGroup> barrier_;
  std::mutex comm_mu_;                // polls of comm_ against ncclCommAbort from another thread
  std::atomic<bool> aborted_{false};  // ncclCommAbort called: the communicator is gone
  cudaEvent_t ready_ = nullptr, done_ = nullptr;  // done_: broadcasts (blocking-style)
  cudaStream_t comm_stream_ = nullptr;            // its GPU's NCCL stream (the destructor's, without throwing)
  std::mutex events_mu_;
  std::vector<cudaEvent_t> events_, free_events_;  // every pooled event; those not in flight
};

// ---- Replicas on one GPU: the last rank to arrive enqueues one summing kernel per buffer ----
// All ranks share the GPU's compute stream, so each rank's gradients were enqueued before it arrived,
// and whatever any rank enqueues after returning runs after the reduction. It keeps the default
// allreduce_sum_group_async (ordered on the compute stream, nothing to wait for): replicas of one
// GPU share its compute stream, so there is no other stream to overlap with.

struct SameDeviceGroup {
  SameDeviceGroup(int n, Device d) : rounds(n), dev(d), pending(n, nullptr), roots(n, nullptr) {}
  RoundGroup rounds;
  Device dev;
  std::vector<const std::vector<DeviceCommunicator::Buffer>*> pending;  // per rank, this round's buffers
  std::vector<float*> roots;                                            // per rank, broadcast buffer
};

class SameDeviceCommunicator final : public DeviceCommunicator {
 public:
  SameDeviceCommunicator(std::shared_ptr<SameDeviceGroup> g, int rank) : g_(std::move(g)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return g_->rounds.size(); }
  Device device() const override { return g_->dev; }
  std::string name() const override { return "cuda-device-local"; }
  void barrier() override {
    g_->rounds.round(rank_, "barrier", [] {});
  }
  void abort() override { g_->rounds.abort(); }
  void set_timeout(double seconds) override { g_->rounds.set_timeout(seconds); }

  void allreduce_sum_group(const std::vector<Buffer>& buffers) override {
    SameDeviceGroup& g = *g_;
    {
      std::lock_guard<std::mutex> lock(g.rounds.mutex());
      g.pending[rank_] = &buffers;
    }
    g.rounds.round(rank_, "allreduce", [&] {
      const size_t nbuf = g.pending[0]->size();
      for (int r = 1; r < g.rounds.size(); ++r)
        GR_CHECK(g.pending[r]->size() == nbuf, "AllReduce: rank " << r << " reduces " << g.pending[r]->size()
                                                                   << " buffers, rank 0 reduces " << nbuf);
      cuda::DeviceContext& dc = cuda::device_context(g.dev.index);
      for (size_t k = 0; k < nbuf; ++k) {
        std::vector<const float*> sends(g.rounds.size());
        std::vector<float*> recvs(g.rounds.size());
        int64_t count = (*g.pending[0])[k].count;
        for (int r = 0; r < g.rounds.size(); ++r) {
          const Buffer& b = (*g.pending[r])[k];
          GR_CHECK(b.count == count, "AllReduce: buffer " << k << " has " << b.count << " values on rank " << r
                                                          << ", " << count << " on rank 0");
          sends[r] = b.send;
          recvs[r] = b.recv;
        }
        cuda::launch_sum_replicas(sends.data(), recvs.data(), g.rounds.size(), count, dc.stream);
      }
    });
  }

 protected:
  void broadcast_device(float* data, int64_t count, int root) override {
    SameDeviceGroup& g = *g_;
    {
      std::lock_guard<std::mutex> lock(g.rounds.mutex());
      g.roots[rank_] = data;
    }
    g.rounds.round(rank_, "broadcast", [&] {
      cuda::DeviceContext& dc = cuda::device_context(g.dev.index);
      for (int r = 0; r < g.rounds.size(); ++r)
        if (r != root && g.roots[r] != g.roots[root])
          GR_CUDA_CHECK(cudaMemcpyAsync(g.roots[r], g.roots[root], static_cast<size_t>(count) * sizeof(float),
                                        cudaMemcpyDeviceToDevice, dc.stream));
    });
  }

 private:
  std::shared_ptr<SameDeviceGroup> g_;
  int rank_;
};

}  // namespace

void DeviceCommunicator::allreduce_sum(float* data, int64_t count) {
  if (count <= 0) return;
  if (is_device_pointer(data)) {
    allreduce_sum_group({{data, data, count}});
    return;
  }
  through_device(device(), data, count, "allreduce", [&](float* d) { allreduce_sum_group({{d, d, count}}); });
}

void DeviceCommunicator::broadcast(float* data, int64_t count, int root) {
  GR_CHECK(root >= 0 && root < size(), "broadcast: root " << root << " of " << size() << " ranks");
  if (count <= 0) return;
  if (is_device_pointer(data)) {
    broadcast_device(data, count, root);
    return;
  }
  through_device(device(), data, count, "broadcast", [&](float* d) { broadcast_device(d, count, root); });
}

std::vector<std::unique_ptr<Communicator>> make_cuda_communicators(const std::vector<Device>& replicas) {
  GR_CHECK(!replicas.empty(), "no replicas to connect");
  GR_CHECK(replicas.size() <= 16, "at most 16 CUDA replicas per process, " << replicas.size() << " given");
  std::set<int> distinct;
  for (const Device& d : replicas) {
    GR_CHECK(d.kind == Device::Kind::CUDA, "cannot mix " << d.str() << " into CUDA replicas");
    cuda::device_context(d.index);  // checks that the device exists
    distinct.insert(d.index);
  }
  std::vector<std::unique_ptr<Communicator>> r;
  const int n = static_cast<int>(replicas.size());
  if (distinct.size() == 1) {
    auto g = std::make_shared<SameDeviceGroup>(n, replicas[0]);
    for (int i = 0; i < n; ++i) r.push_back(std::make_unique<SameDeviceCommunicator>(g, i));
    return r;
  }
  GR_CHECK(static_cast<int>(distinct.size()) == n,
           "CUDA replicas must be on distinct GPUs (NCCL) or all on one GPU (device-local reduction); got a mix");
  std::vector<int> devs;
  for (const Device& d : replicas) devs.push_back(d.index);
  std::vector<ncclComm_t> comms(n);
  GR_NCCL_CHECK(ncclCommInitAll(comms.data(), n, devs.data()));
  auto barrier = std::make_shared<RoundGroup>(n);
  for (int i = 0; i < n; ++i) r.push_back(std::make_unique<NcclCommunicator>(comms[i], i, n, i, replicas[i], barrier));
  return r;
}

std::vector<std::unique_ptr<Communicator>> make_cuda_world_communicators(const std::vector<Device>& replicas,
                                                                         int first, int total,
                                                                         const std::function<void(void*, size_t)>& bcast) {
  GR_CHECK(!replicas.empty(), "no replicas to connect");
  const int n = static_cast<int>(replicas.size());
  GR_CHECK(first >= 0 && first + n <= total, "replicas " << first << ".." << first + n - 1 << " outside " << total);
  std::set<int> distinct;
  for (const Device& d : replicas) {
    GR_CHECK(d.kind == Device::Kind::CUDA, "cannot mix " << d.str() << " into CUDA replicas");
    cuda::device_context(d.index);  // checks that the device exists
    distinct.insert(d.index);
  }
  // NCCL refuses two ranks on one GPU; so do we, with the reason.
  GR_CHECK(static_cast<int>(distinct.size()) == n,
           "across MPI ranks every CUDA replica needs a GPU of its own (NCCL: one rank per GPU)");
  ncclUniqueId id{};
  if (first == 0) GR_NCCL_CHECK(ncclGetUniqueId(&id));
  bcast(&id, sizeof id);
  std::vector<ncclComm_t> comms(n);
  // Several GPUs of one process join in one group (ncclCommInitRank per GPU would wait for the others).
  GR_NCCL_CHECK(ncclGroupStart());
  for (int i = 0; i < n; ++i) {
    GR_CUDA_CHECK(cudaSetDevice(replicas[i].index));
    GR_NCCL_CHECK(ncclCommInitRank(&comms[i], total, id, first + i));
  }
  GR_NCCL_CHECK(ncclGroupEnd());
  auto barrier = std::make_shared<RoundGroup>(n);
  std::vector<std::unique_ptr<Communicator>> r;
  for (int i = 0; i < n; ++i)
    r.push_back(std::make_unique<NcclCommunicator>(comms[i], first + i, total, i, replicas[i], barrier));
  return r;
}

}  // namespace graphrun::runtime

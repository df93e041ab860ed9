// The in-process CPU communicator: N replicas on N threads of one process, reducing through shared memory.
#pragma once
#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/comm/communicator.h"

namespace graphrun::runtime {

// The state all ranks of one group share. Create one group, then one communicator per rank
// (group->rank(r)); each rank's thread calls the collectives in the same order. A rank's
// allreduce_sum_async runs on a communication thread of that rank (started on first use), which
// performs the same reduction as the blocking call: results are bitwise the same.
class CpuCommGroup : public std::enable_shared_from_this<CpuCommGroup> {
 public:
  static std::shared_ptr<CpuCommGroup> create(int size);
  ~CpuCommGroup();
  int size() const { return size_; }
  // The communicator of rank r (owned by the group; valid while the group lives).
  Communicator* rank(int r);
  // Makes every rank blocked in (or later entering) a collective throw ReplicaAborted: how a replica
  // that failed releases the others instead of leaving them waiting forever.
  void abort();
  bool aborted() const { return aborted_.load(); }
  void set_timeout(double seconds);  // see Communicator::set_timeout

  // Internals used by the per-rank communicators. spin: wait briefly before sleeping in barriers
  // (off for the communication threads of allreduce_sum_async, which would take compute cores).
  // `what` names the collective in a timeout's error.
  void barrier(int rank, const char* what = "barrier", bool spin = true);
  // prof: --profile records "wait for replicas" and "sum" there (Communicator::set_profile).
  void allreduce_sum(int rank, float* data, int64_t count, bool spin = true, ProfileTrack* prof = nullptr);
  void allreduce_sum(int rank, double* data, int64_t count, bool spin = true, ProfileTrack* prof = nullptr);
  void broadcast(int rank, float* data, int64_t count, int root);

 private:
  explicit CpuCommGroup(int size);
  template <class T> void allreduce(int rank, T* data, int64_t count, bool spin, ProfileTrack* prof);
  int size_;
  std::vector<std::unique_ptr<Communicator>> ranks_;
  std::vector<void*> ptrs_;  // the current collective's buffers (float or double)
  std::vector<int64_t> counts_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  std::vector<bool> here_;  // who has arrived at the current barrier
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> aborted_{false};
  std::string abort_reason_;  // what aborted collectives throw
  double timeout_s_;
};

}  // namespace graphrun::runtime

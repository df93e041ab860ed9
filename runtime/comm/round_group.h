// In-process ranks meeting in rounds: the device-local reduction of replicas sharing a GPU, the host
// barrier of NCCL ranks, and the simulated device of the tests all wait for each other this way.
#pragma once
#include <condition_variable>
#include <exception>
#include <mutex>
#include <string>
#include <vector>

#include "graph/error.h"
#include "runtime/comm/replica_aborted.h"
#include "runtime/comm/wait.h"

namespace graphrun::runtime {

class RoundGroup {
 public:
  explicit RoundGroup(int size) : size_(size), here_(size, false) {}
  int size() const { return size_; }
  // Guards what ranks hand in before calling round() (their buffers for the last rank to use).
  std::mutex& mutex() { return mu_; }
  // How long a rank waits in round() for the others (Communicator::set_timeout).
  void set_timeout(double seconds) {
    std::lock_guard<std::mutex> lock(mu_);
    timeout_s_ = seconds;
  }

  // Every rank calls this; `work` runs once, on the last rank to arrive, under the group's lock, while
  // the others wait. An Error from `work` is thrown on every rank. A rank that waits longer than the
  // timeout aborts the group and throws an Error naming the ranks that did not arrive. After abort()
  // (or another rank's timeout), every waiting and every later call throws ReplicaAborted.
  template <class F>
  void round(int rank, const char* what, F work) {
    std::unique_lock<std::mutex> lock(mu_);
    if (aborted_) throw ReplicaAborted(abort_reason_);
    const unsigned long long gen = generation_;
    here_[rank] = true;
    if (++arrived_ == size_) {
      error_.clear();
      try {
        work();
      } catch (const std::exception& e) {
        error_ = e.what();
      }
      arrived_ = 0;
      here_.assign(size_, false);
      ++generation_;
      cv_.notify_all();
    } else {
      const auto deadline = comm_deadline(timeout_s_);
      if (!cv_.wait_until(lock, deadline, [&] { return generation_ != gen || aborted_; })) {
        abort_reason_ = missing_ranks_message(what, here_, timeout_s_);
        aborted_ = true;
        cv_.notify_all();
        throw Error(abort_reason_);  // this rank's own finding: the cause
      }
      if (generation_ == gen) throw ReplicaAborted(abort_reason_);
    }
    if (!error_.empty()) throw Error(error_);
  }

  // A replica failed: wake the ranks waiting for it; the group is unusable from now on.
  void abort() {
    std::lock_guard<std::mutex> lock(mu_);
    aborted_ = true;
    cv_.notify_all();
  }
  bool aborted() {
    std::lock_guard<std::mutex> lock(mu_);
    return aborted_;
  }
  double timeout() {
    std::lock_guard<std::mutex> lock(mu_);
    return timeout_s_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int size_;
  int arrived_ = 0;
  std::vector<bool> here_;  // who has arrived in this round
  unsigned long long generation_ = 0;
  bool aborted_ = false;
  std::string abort_reason_ = kAnotherReplicaFailed;
  std::string error_;
  double timeout_s_ = kDefaultCommTimeout;
};

}  // namespace graphrun::runtime

// In-process ranks meeting in rounds: the device-local reduction of replicas sharing a GPU, the host
// barrier of NCCL ranks, and the simulated device of the tests all wait for each other this way.
#pragma once
#include <condition_variable>
#include <exception>
#include <mutex>
#include <string>

#include "graph/error.h"

namespace graphrun::runtime {

class RoundGroup {
 public:
  explicit RoundGroup(int size) : size_(size) {}
  int size() const { return size_; }
  // Guards what ranks hand in before calling round() (their buffers for the last rank to use).
  std::mutex& mutex() { return mu_; }

  // Every rank calls this; `work` runs once, on the last rank to arrive, under the group's lock, while
  // the others wait. An Error from `work` is thrown on every rank. After abort(), every waiting and
  // every later call throws.
  template <class F>
  void round(F work) {
    std::unique_lock<std::mutex> lock(mu_);
    GR_CHECK(!aborted_, "another replica failed; stopping");
    const unsigned long long gen = generation_;
    if (++arrived_ == size_) {
      error_.clear();
      try {
        work();
      } catch (const std::exception& e) {
        error_ = e.what();
      }
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return generation_ != gen || aborted_; });
      GR_CHECK(generation_ != gen, "another replica failed; stopping");
    }
    if (!error_.empty()) throw Error(error_);
  }

  // A replica failed: wake the ranks waiting for it; the group is unusable from now on.
  void abort() {
    std::lock_guard<std::mutex> lock(mu_);
    aborted_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int size_;
  int arrived_ = 0;
  unsigned long long generation_ = 0;
  bool aborted_ = false;
  std::string error_;
};

}  // namespace graphrun::runtime

// CPU communicator: allreduce as a reduce-scatter over shared memory (rank r sums slice r of every
// rank's buffer, in rank order, so the result never depends on thread timing) followed by writing
// the sums back to every rank's buffer; barriers with a generation counter.
#include "runtime/comm/cpu_comm.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <string>
#include <thread>

#include "graph/error.h"
#include "runtime/comm/comm_thread.h"
#include "runtime/comm/replica_aborted.h"
#include "runtime/comm/wait.h"
#include "runtime/profile.h"

namespace graphrun::runtime {

namespace {

class CpuCommunicator final : public Communicator {
 public:
  CpuCommunicator(CpuCommGroup* group, int rank) : group_(group), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }
  // Blocking calls come after every operation this rank started (the order every rank shares).
  void allreduce_sum(float* data, int64_t count) override {
    drain();
    group_->allreduce_sum(rank_, data, count, true, track_);
  }
  void allreduce_sum_f64(double* data, int64_t count) override {
    drain();
    group_->allreduce_sum(rank_, data, count, true, track_);
  }
  void set_profile(ProfileTrack* track) override { track_ = track; }
  void broadcast(float* data, int64_t count, int root) override {
    drain();
    group_->broadcast(rank_, data, count, root);
  }
  void barrier() override {
    drain();
    group_->barrier(rank_);
  }
  void set_timeout(double seconds) override { group_->set_timeout(seconds); }
  std::string name() const override { return "cpu-shared-memory"; }

  std::function<void()> allreduce_sum_async(float* data, int64_t count) override {
    if (group_->size() == 1) return [] {};
    return comm_.submit([this, data, count] { group_->allreduce_sum(rank_, data, count, /*spin=*/false); });
  }

 private:
  void drain() { comm_.drain(); }

  CpuCommGroup* group_;
  int rank_;
  CommThread comm_;  // declared after what its jobs use, so it stops first
  ProfileTrack* track_ = nullptr;  // --profile, blocking calls only (the communication thread has no track)
};

}  // namespace

std::shared_ptr<CpuCommGroup> CpuCommGroup::create(int size) {
  GR_CHECK(size >= 1, "a communicator group needs at least one rank, got " << size);
  return std::shared_ptr<CpuCommGroup>(new CpuCommGroup(size));
}

CpuCommGroup::CpuCommGroup(int size)
    : size_(size), ptrs_(size, nullptr), counts_(size, 0), here_(size, false), abort_reason_(kAnotherReplicaFailed),
      timeout_s_(kDefaultCommTimeout) {
  for (int r = 0; r < size; ++r) ranks_.push_back(std::make_unique<CpuCommunicator>(this, r));
}

// Communication threads may be waiting in a collective: release them before the state they use goes.
CpuCommGroup::~CpuCommGroup() {
  abort();
  ranks_.clear();
}

Communicator* CpuCommGroup::rank(int r) {
  GR_CHECK(r >= 0 && r < size_, "rank " << r << " outside a group of " << size_);
  return ranks_[r].get();
}

void CpuCommGroup::abort() {
  std::lock_guard<std::mutex> lock(mu_);
  aborted_ = true;
  cv_.notify_all();
}

void CpuCommGroup::set_timeout(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  timeout_s_ = seconds;
}

void CpuCommGroup::barrier(int rank, const char* what, bool spin) {
  if (size_ == 1) return;
  std::unique_lock<std::mutex> lock(mu_);
  if (aborted_) throw ReplicaAborted(abort_reason_);
  const uint64_t gen = generation_.load();
  here_[rank] = true;
  if (++arrived_ == size_) {
    arrived_ = 0;
    here_.assign(size_, false);
    generation_.fetch_add(1);
    cv_.notify_all();
    return;
  }
  // Replicas doing equal work arrive within microseconds of each other: spin briefly before
  // sleeping, since a futex sleep and wake-up costs tens of microseconds twice per allreduce.
  // Only when every replica has a core of its own: otherwise the spinner would take the core the
  // last replica needs to arrive.
  static const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const auto deadline = comm_deadline(timeout_s_);
  if (spin && size_ <= cores) {
    lock.unlock();
    for (int i = 0; i < 20000 && generation_.load(std::memory_order_acquire) == gen && !aborted_; ++i) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#else
      std::this_thread::yield();
#endif
    }
    lock.lock();
  }
  if (!cv_.wait_until(lock, deadline, [&] { return generation_.load() != gen || aborted_; })) {
    // The ranks still missing are named once, by the first to give up; every waiting rank, and
    // every later collective, fails with it.
    abort_reason_ = missing_ranks_message(what, here_, timeout_s_);
    aborted_ = true;
    cv_.notify_all();
    throw Error(abort_reason_);  // this rank's own finding: the cause
  }
  // Woken by abort() or by another rank's timeout: an echo of that failure.
  if (generation_.load() == gen) throw ReplicaAborted(abort_reason_);
}

template <class T>
void CpuCommGroup::allreduce(int rank, T* data, int64_t count, bool spin, ProfileTrack* prof) {
  if (size_ == 1) return;
  ptrs_[rank] = data;
  counts_[rank] = count;
  const int64_t t0 = prof ? prof->now() : 0;
  barrier(rank, "allreduce", spin);
  const int64_t t1 = prof ? prof->now() : 0;
  if (prof) prof->add({"wait for replicas", "comm", "", t0, t1 - t0, 0});
  for (int r = 0; r < size_; ++r)
    GR_CHECK(counts_[r] == count, "allreduce: rank " << rank << " reduces " << count << " values but rank " << r
                                                     << " reduces " << counts_[r]);
  // Slices of whole cache lines (16 floats, 8 doubles) so that ranks never write the same line.
  constexpr int64_t line = 64 / sizeof(T);
  const int64_t lines = (count + line - 1) / line;
  const int64_t begin = std::min(count, lines * rank / size_ * line);
  const int64_t end = std::min(count, lines * (rank + 1) / size_ * line);
  if (end > begin) {
    const int64_t n = end - begin;
    // Summed in place in rank 0's slice (this thread owns the slice), then copied to the others.
    T* sum = static_cast<T*>(ptrs_[0]) + begin;
    for (int r = 1; r < size_; ++r) {
      const T* src = static_cast<const T*>(ptrs_[r]) + begin;
      for (int64_t i = 0; i < n; ++i) sum[i] += src[i];
    }
    for (int r = 1; r < size_; ++r) std::memcpy(static_cast<T*>(ptrs_[r]) + begin, sum, n * sizeof(T));
  }
  // Nobody may leave (and reuse its buffer or ptrs_) before every slice is written.
  barrier(rank, "allreduce", spin);
  if (prof) prof->add("sum", "comm", t1);  // this rank's slice, and waiting for the others' slices
}

void CpuCommGroup::allreduce_sum(int rank, float* data, int64_t count, bool spin, ProfileTrack* prof) {
  allreduce(rank, data, count, spin, prof);
}

void CpuCommGroup::allreduce_sum(int rank, double* data, int64_t count, bool spin, ProfileTrack* prof) {
  allreduce(rank, data, count, spin, prof);
}

void CpuCommGroup::broadcast(int rank, float* data, int64_t count, int root) {
  GR_CHECK(root >= 0 && root < size_, "broadcast: root " << root << " outside a group of " << size_);
  if (size_ == 1) return;
  ptrs_[rank] = data;
  counts_[rank] = count;
  barrier(rank, "broadcast");
  GR_CHECK(counts_[root] == count, "broadcast: rank " << rank << " expects " << count << " values but root "
                                                      << root << " sends " << counts_[root]);
  if (rank != root) std::memcpy(data, ptrs_[root], count * sizeof(float));
  barrier(rank, "broadcast");
}

}  // namespace graphrun::runtime

// CPU communicator: allreduce as a reduce-scatter over shared memory (rank r sums slice r of every
// rank's buffer, in rank order, so the result never depends on thread timing) followed by writing
// the sums back to every rank's buffer; barriers with a generation counter.
#include "runtime/comm/cpu_comm.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <thread>

#include "graph/error.h"

namespace graphrun::runtime {

namespace {

class CpuCommunicator final : public Communicator {
 public:
  CpuCommunicator(CpuCommGroup* group, int rank) : group_(group), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }
  void allreduce_sum(float* data, int64_t count) override { group_->allreduce_sum(rank_, data, count); }
  void broadcast(float* data, int64_t count, int root) override { group_->broadcast(rank_, data, count, root); }
  void barrier() override { group_->barrier(); }
  std::string name() const override { return "cpu-shared-memory"; }

 private:
  CpuCommGroup* group_;
  int rank_;
};

}  // namespace

std::shared_ptr<CpuCommGroup> CpuCommGroup::create(int size) {
  GR_CHECK(size >= 1, "a communicator group needs at least one rank, got " << size);
  return std::shared_ptr<CpuCommGroup>(new CpuCommGroup(size));
}

CpuCommGroup::CpuCommGroup(int size) : size_(size), ptrs_(size, nullptr), counts_(size, 0) {
  for (int r = 0; r < size; ++r) ranks_.push_back(std::make_unique<CpuCommunicator>(this, r));
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

void CpuCommGroup::barrier() {
  if (size_ == 1) return;
  std::unique_lock<std::mutex> lock(mu_);
  GR_CHECK(!aborted_, "another replica failed; stopping");
  const uint64_t gen = generation_.load();
  if (++arrived_ == size_) {
    arrived_ = 0;
    generation_.fetch_add(1);
    cv_.notify_all();
    return;
  }
  // Replicas doing equal work arrive within microseconds of each other: spin briefly before
  // sleeping, since a futex sleep and wake-up costs tens of microseconds twice per allreduce.
  // Only when every replica has a core of its own: otherwise the spinner would take the core the
  // last replica needs to arrive.
  static const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (size_ <= cores) {
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
  cv_.wait(lock, [&] { return generation_.load() != gen || aborted_; });
  GR_CHECK(generation_.load() != gen, "another replica failed; stopping");
}

void CpuCommGroup::allreduce_sum(int rank, float* data, int64_t count) {
  if (size_ == 1) return;
  ptrs_[rank] = data;
  counts_[rank] = count;
  barrier();
  for (int r = 0; r < size_; ++r)
    GR_CHECK(counts_[r] == count, "allreduce: rank " << rank << " reduces " << count << " values but rank " << r
                                                     << " reduces " << counts_[r]);
  // Slices of whole cache lines (16 floats) so that ranks never write the same line.
  const int64_t lines = (count + 15) / 16;
  const int64_t begin = std::min(count, lines * rank / size_ * 16);
  const int64_t end = std::min(count, lines * (rank + 1) / size_ * 16);
  if (end > begin) {
    const int64_t n = end - begin;
    // Summed in place in rank 0's slice (this thread owns the slice), then copied to the others.
    float* sum = ptrs_[0] + begin;
    for (int r = 1; r < size_; ++r) {
      const float* src = ptrs_[r] + begin;
      for (int64_t i = 0; i < n; ++i) sum[i] += src[i];
    }
    for (int r = 1; r < size_; ++r) std::memcpy(ptrs_[r] + begin, sum, n * sizeof(float));
  }
  // Nobody may leave (and reuse its buffer or ptrs_) before every slice is written.
  barrier();
}

void CpuCommGroup::broadcast(int rank, float* data, int64_t count, int root) {
  GR_CHECK(root >= 0 && root < size_, "broadcast: root " << root << " outside a group of " << size_);
  if (size_ == 1) return;
  ptrs_[rank] = data;
  counts_[rank] = count;
  barrier();
  GR_CHECK(counts_[root] == count, "broadcast: rank " << rank << " expects " << count << " values but root "
                                                      << root << " sends " << counts_[root]);
  if (rank != root) std::memcpy(data, ptrs_[root], count * sizeof(float));
  barrier();
}

}  // namespace graphrun::runtime

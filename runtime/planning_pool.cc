// PlanningPool: one reserved range, best-fit with coalescing, whose touched pages become the arena.
#include "runtime/planning_pool.h"

#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>

// Under AddressSanitizer the pool keeps ASan's power over the planning run's buffers, which would
// otherwise be plain mapped memory to it: a poisoned red zone after each buffer, and a released
// buffer poisoned until it is handed out again (reads past a buffer or after its release are reported).
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define GR_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define GR_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define GR_POISON(p, n) ((void)(p), (void)(n))
#define GR_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace graphrun::runtime {

namespace {
constexpr size_t kAlign = 64;
constexpr size_t kHuge = size_t(2) << 20;
size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }
}  // namespace

size_t PlanningPool::default_reserve() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  size_t ram = pages > 0 && page > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page) : size_t(0);
  size_t reserve = std::min(ram, size_t(256) << 30);
  // Under a limit on address space (ulimit -v, as some clusters set), every replica's planning run
  // holds a range at once: each takes a sixteenth of the limit at most, so that the buffers allocated
  // outside the pools still fit (a full pool only hands the rest of its run to the backend).
  rlimit as{};
  if (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY)
    reserve = std::min(reserve, static_cast<size_t>(as.rlim_cur / 16));
  return reserve;
}

std::shared_ptr<PlanningPool> PlanningPool::create(size_t reserve) {
  if (reserve == 0) return nullptr;
  reserve = round_up(reserve, kHuge);
  const size_t len = reserve + kHuge;  // room to align the start to 2 MiB
  // MAP_NORESERVE: the range is address space only until a page is touched.
  void* m = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) return nullptr;
  std::shared_ptr<PlanningPool> p(new PlanningPool());
  p->map_ = m;
  p->map_len_ = len;
  p->base_ = reinterpret_cast<void*>(round_up(reinterpret_cast<uintptr_t>(m), kHuge));
  p->reserve_ = reserve;
  madvise(p->base_, reserve, MADV_HUGEPAGE);  // advice only, as in graph/tensor.h's map_zeroed
  return p;
}

PlanningPool::~PlanningPool() {
  GR_UNPOISON(base_, high_water_);  // the addresses may be mapped again, for memory ASan must not flag
  if (map_) munmap(map_, map_len_);
}

std::shared_ptr<void> PlanningPool::allocate(size_t requested) {
  size_t bytes = round_up(std::max<size_t>(requested, 1), kAlign) + kRedZoneBytes;
  size_t offset = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return nullptr;
    auto best = free_.end();
    for (auto it = free_.begin(); it != free_.end(); ++it)
      if (it->second >= bytes && (best == free_.end() || it->second < best->second)) best = it;
    if (best != free_.end()) {
      offset = best->first;
      const size_t rest = best->second - bytes;
      free_.erase(best);
      if (rest) free_[offset + bytes] = rest;
    } else {
      // Grow at the end, starting inside the last free block when it reaches the end.
      offset = high_water_;
      if (!free_.empty()) {
        auto last = std::prev(free_.end());
        if (last->first + last->second == high_water_) {
          offset = last->first;
          free_.erase(last);
        }
      }
      if (offset + bytes > reserve_) {
        if (offset != high_water_) free_[offset] = high_water_ - offset;  // put the tail back
        return nullptr;
      }
      high_water_ = offset + bytes;
    }
    live_ += bytes;
    peak_live_ = std::max(peak_live_, live_);
  }
  char* p = static_cast<char*>(base_) + offset;
  GR_UNPOISON(p, requested);
  GR_POISON(p + requested, bytes - requested);
  auto self = shared_from_this();
  return std::shared_ptr<void>(p,
                               [self, offset, bytes](void*) { self->release(offset, bytes); });
}

void PlanningPool::release(size_t offset, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  live_ -= bytes;
  if (closed_) return;
  GR_POISON(static_cast<char*>(base_) + offset, bytes);
  auto next = free_.lower_bound(offset);
  if (next != free_.end() && offset + bytes == next->first) {
    bytes += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      prev->second += bytes;
      return;
    }
  }
  free_[offset] = bytes;
}

std::shared_ptr<void> PlanningPool::take_as_arena(size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  closed_ = true;
  free_.clear();
  if (live_ != 0 || bytes > reserve_) return nullptr;
  GR_UNPOISON(base_, high_water_);  // the arena, and the pages past it that go back to the kernel
  // Return the pages past the arena (the planning run may have touched more than the plan needs).
  const size_t keep = round_up(std::max<size_t>(bytes, 1), kHuge);
  char* end = static_cast<char*>(base_) + keep;
  char* map_end = static_cast<char*>(map_) + map_len_;
  if (end < map_end && munmap(end, static_cast<size_t>(map_end - end)) == 0)
    map_len_ = static_cast<size_t>(end - static_cast<char*>(map_));
  auto self = shared_from_this();
  return std::shared_ptr<void>(base_, [self](void*) {});
}

size_t PlanningPool::high_water() const {
  std::lock_guard<std::mutex> lock(mu_);
  return high_water_;
}

size_t PlanningPool::live() const {
  std::lock_guard<std::mutex> lock(mu_);
  return live_;
}

size_t PlanningPool::peak_live() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_live_;
}

}  // namespace graphrun::runtime

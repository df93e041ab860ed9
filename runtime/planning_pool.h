// The host memory of a CPU executor's planning run, and then its arena.
//
// The first run of an input signature (the planning run) gives every value a buffer of its own and
// records its shape; the planner then packs them into one arena. Mapped fresh from the kernel, every
// large buffer of that run (the sum of all activations and gradients, gigabytes for ResNet-18 at
// batch 256) was zeroed page by page by the kernel at its first touch, and the arena's pages were
// faulted again in the second run: a third of `train`'s CPU time over ResNet-18's first steps went to
// the kernel's clear_page. A PlanningPool reserves one range of addresses and hands the planning run's
// buffers out of it first-fit, reusing what the run has freed, so the run touches about its peak of
// live memory, not the sum; the arena is then placed at the start of the same range, on pages that
// are already there.
//
// Memory handed out is not zeroed when it is reused (the arena is not zeroed between runs either).
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>

namespace graphrun::runtime {

class PlanningPool : public std::enable_shared_from_this<PlanningPool> {
 public:
  // A pool over a reserved range of `reserve` bytes (untouched pages cost nothing); null when the
  // range cannot be reserved (then the caller allocates as before).
  static std::shared_ptr<PlanningPool> create(size_t reserve);
  // The default reservation: the machine's memory, at most 256 GiB, and at most a sixteenth of an
  // address-space limit (ulimit -v).
  static size_t default_reserve();
  // Bytes after each buffer that ASan builds poison (0 otherwise); buffers are 64-byte aligned.
#if defined(__SANITIZE_ADDRESS__)
  static constexpr size_t kRedZoneBytes = 64;
#else
  static constexpr size_t kRedZoneBytes = 0;
#endif
  ~PlanningPool();
  PlanningPool(const PlanningPool&) = delete;
  PlanningPool& operator=(const PlanningPool&) = delete;

  // `bytes` (64-byte aligned) from the range, reusing freed space first-fit; the memory returns to
  // the pool when the last copy of the pointer is dropped. Null when the range is full or the pool
  // already became an arena.
  std::shared_ptr<void> allocate(size_t bytes);  // (under ASan: with a poisoned red zone after it)

  // The range's first `bytes` as the arena, when nothing handed out is still alive and it fits:
  // the pages past it are returned to the kernel. Null otherwise (the caller allocates the arena).
  // Either way the pool hands out nothing more.
  std::shared_ptr<void> take_as_arena(size_t bytes);

  size_t high_water() const;  // bytes of the range touched so far
  size_t live() const;        // bytes handed out and not yet returned
  size_t peak_live() const;   // the most live() has been

 private:
  PlanningPool() = default;
  void release(size_t offset, size_t bytes);

  void* base_ = nullptr;  // 2 MiB-aligned start of the usable range
  void* map_ = nullptr;   // the mapping as mmap returned it
  size_t map_len_ = 0;
  size_t reserve_ = 0;    // usable bytes from base_
  mutable std::mutex mu_;
  std::map<size_t, size_t> free_;  // offset -> length, below high_water_, coalesced
  size_t high_water_ = 0;
  size_t live_ = 0;
  size_t peak_live_ = 0;
  bool closed_ = false;
};

}  // namespace graphrun::runtime

// The CPU as a DeviceBackend: host memory, memcpy copies, the synchronous defaults for events and
// pinned memory, the CPU kernel table and the in-process communicator (runtime/comm/cpu_comm.h).
#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <mutex>
#include <unordered_map>

#include "runtime/comm/cpu_comm.h"
#include "runtime/comm/mpi.h"
#include "runtime/device.h"

namespace graphrun::runtime {

namespace {

constexpr size_t kAlign = 64;  // what kernels may assume of a buffer (KernelContext::scratch)

// One rank of a CpuCommGroup, keeping the group alive: make_communicators hands out owners, the
// group owns its ranks.
class CpuRank final : public Communicator {
 public:
  CpuRank(std::shared_ptr<CpuCommGroup> group, int rank) : group_(std::move(group)), rank_(group_->rank(rank)) {}
  int rank() const override { return rank_->rank(); }
  int size() const override { return rank_->size(); }
  void allreduce_sum(float* data, int64_t count) override { rank_->allreduce_sum(data, count); }
  void allreduce_sum_f64(double* data, int64_t count) override { rank_->allreduce_sum_f64(data, count); }
  std::function<void()> allreduce_sum_async(float* data, int64_t count) override {
    return rank_->allreduce_sum_async(data, count);
  }
  void broadcast(float* data, int64_t count, int root) override { rank_->broadcast(data, count, root); }
  void barrier() override { rank_->barrier(); }
  void abort() override { group_->abort(); }
  void set_timeout(double seconds) override { rank_->set_timeout(seconds); }
  void set_profile(ProfileTrack* track) override { rank_->set_profile(track); }
  std::string name() const override { return rank_->name(); }

 private:
  std::shared_ptr<CpuCommGroup> group_;
  Communicator* rank_;
};

class CpuBackend final : public DeviceBackend {
 public:
  Device::Kind kind() const override { return Device::Kind::CPU; }
  // CPU devices are logical (one per replica, all sharing the host's cores and memory): any index.
  int device_count() const override { return INT_MAX; }
  std::string unavailable_reason() const override { return ""; }

  // Zeroed, as host tensors are (Tensor(dtype, shape)): a kernel that reads what it did not write is
  // at least deterministic.
  // Blocks of kMapBytes and more (an executor's arena, a planning run's activations) come zeroed
  // from graph/tensor.h's map_zeroed, as large tensors do.
  void* allocate(Device, size_t bytes) override {
    if (bytes >= kMapBytes) {
      const MappedBlock m = map_zeroed(bytes);
      std::lock_guard<std::mutex> lock(mapped_mu_);
      mapped_[m.data] = m;
      return m.data;
    }
    const size_t n = (std::max<size_t>(1, bytes) + kAlign - 1) / kAlign * kAlign;
    void* p = std::aligned_alloc(kAlign, n);
    GR_CHECK(p, "out of host memory allocating " << bytes << " bytes");
    std::memset(p, 0, n);
    return p;
  }
  void deallocate(Device, void* p) override {
    {
      std::lock_guard<std::mutex> lock(mapped_mu_);
      auto it = mapped_.find(p);
      if (it != mapped_.end()) {
        unmap_block(it->second);
        mapped_.erase(it);
        return;
      }
    }
    std::free(p);
  }
  void copy_host_to_device(Device, void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void copy_device_to_host(Device, void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void copy_device_to_device(Device, void* dst, const void* src, size_t bytes) override {
    std::memmove(dst, src, bytes);
  }
  void memset(Device, void* dst, int value, size_t bytes) override { std::memset(dst, value, bytes); }
  void synchronize(Device) override {}
  // GRAPHRUN_MEM_AVAILABLE_MB stands in for the machine's figure (tests). In a container whose control
  // group caps memory (docker --memory, Kubernetes limits, Slurm's cgroup plugin), what the cap leaves, when
  // that is less than the machine's MemAvailable (which sees the whole host).
  size_t free_memory(Device) override {
    if (const char* e = std::getenv("GRAPHRUN_MEM_AVAILABLE_MB")) return static_cast<size_t>(std::strtoull(e, nullptr, 10)) << 20;
    std::ifstream f("/proc/meminfo");
    std::string key, rest;
    size_t kb = 0, total = 0;
    bool found = false;
    while (f >> key >> kb) {
      std::getline(f, rest);
      if (key == "MemAvailable:" || key == "SwapFree:") {
        total += kb << 10;
        found = found || key == "MemAvailable:";
      }
    }
    if (!found) return 0;
    const size_t left = cgroup_memory_left();
    return left ? std::min(total, left) : total;
  }

  // The cgroup's limit less its usage (v2, then v1, as the container sees its own group at the root);
  // 0: no limit, or none readable.
  static size_t cgroup_memory_left() {
    auto read = [](const char* path, size_t& v) {
      std::ifstream in(path);
      std::string s;
      if (!(in >> s) || s.empty() || s.find_first_not_of("0123456789") != std::string::npos) return false;
      v = static_cast<size_t>(std::strtoull(s.c_str(), nullptr, 10));
      return true;
    };
    size_t limit = 0, used = 0;
    const bool v2 = read("/sys/fs/cgroup/memory.max", limit) && read("/sys/fs/cgroup/memory.current", used);
    if (!v2 && !(read("/sys/fs/cgroup/memory/memory.limit_in_bytes", limit) &&
                 read("/sys/fs/cgroup/memory/memory.usage_in_bytes", used)))
      return 0;
    if (limit >= (size_t(1) << 60)) return 0;  // v1's "no limit" is a huge number
    // Usage counts the page cache, which the kernel reclaims before it kills anything: not taken.
    std::ifstream stat(v2 ? "/sys/fs/cgroup/memory.stat" : "/sys/fs/cgroup/memory/memory.stat");
    std::string key;
    size_t value = 0;
    while (stat >> key >> value)
      if (key == (v2 ? "file" : "total_cache")) used -= std::min(used, value);
    return limit > used ? limit - used : 1;
  }

  const KernelTable& kernels() const override { return cpu_kernels(); }
  std::vector<std::unique_ptr<Communicator>> make_communicators(const std::vector<Device>& replicas) override {
    auto group = CpuCommGroup::create(static_cast<int>(replicas.size()));
    std::vector<std::unique_ptr<Communicator>> r;
    for (int d = 0; d < static_cast<int>(replicas.size()); ++d) r.push_back(std::make_unique<CpuRank>(group, d));
    return r;
  }
  // Across MPI ranks: hierarchical, summing in global replica order (runtime/comm/mpi.h).
  std::vector<std::unique_ptr<Communicator>> make_world_communicators(
      const std::vector<Device>& replicas, int first, int total, const std::function<void(void*, size_t)>&) override {
    return mpi::make_cpu_communicators(static_cast<int>(replicas.size()), first, total);
  }
  void set_deterministic(bool) override {}  // the CPU kernels are deterministic already
  bool overlap_allreduce_by_default() const override { return false; }

 private:
  std::mutex mapped_mu_;
  std::unordered_map<void*, MappedBlock> mapped_;  // the mapped blocks, by the address handed out
};

}  // namespace

DeviceBackend* cpu_backend() {
  static CpuBackend backend;
  return &backend;
}

}  // namespace graphrun::runtime

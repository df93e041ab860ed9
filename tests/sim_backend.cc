// The simulated CUDA device (see sim_backend.h): a PROT_NONE memory pool, CPU kernels wrapped to run
// with the pool accessible under one lock, and a device-local AllReduce group.
#include "tests/sim_backend.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <thread>

#include "runtime/comm/communicator.h"
#include "runtime/comm/round_group.h"

namespace graphrun::testing {

using runtime::Communicator;
using runtime::KernelContext;

SimCounters operator-(const SimCounters& a, const SimCounters& b) {
  SimCounters r;
  r.allocations = a.allocations - b.allocations;
  r.host_to_device = a.host_to_device - b.host_to_device;
  r.device_to_host = a.device_to_host - b.device_to_host;
  r.synchronizations = a.synchronizations - b.synchronizations;
  r.host_reads_of_device_values = a.host_reads_of_device_values - b.host_reads_of_device_values;
  r.host_read_inputs = a.host_read_inputs - b.host_read_inputs;
  r.kernels = a.kernels - b.kernels;
  r.async_device_to_host = a.async_device_to_host - b.async_device_to_host;
  r.event_waits = a.event_waits - b.event_waits;
  r.deferred_event_waits = a.deferred_event_waits - b.deferred_event_waits;
  return r;
}

namespace {

constexpr unsigned char kPoison = 0xFF;  // fresh and freed device memory: NaN as f32, -1 as integers

size_t page_size() {
  static const size_t p = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return p;
}
size_t round_up(size_t n, size_t k) { return (n + k - 1) / k * k; }

// Size classes as the CUDA caching allocator's: 512 bytes up to 1 MiB, then whole MiB.
size_t size_class(size_t bytes) {
  if (bytes == 0) bytes = 1;
  if (bytes <= (size_t(1) << 20)) return round_up(bytes, 512);
  return round_up(bytes, size_t(1) << 20);
}

// ---- Kernels: the CPU kernel of the node, run with device memory accessible ----

// What a CPU kernel sees on the simulated device: the executor's context, with every device tensor
// relabelled as host memory (the CPU kernels read shapes with Tensor::as_int64s, which refuses device
// tensors); the memory itself is only accessible while the kernel runs.
class HostViewContext final : public KernelContext {
 public:
  explicit HostViewContext(KernelContext& real) : real_(real), in_views_(real.num_inputs()), out_views_(real.num_outputs()) {
    node_ = &real.node();
    opset_ = real.opset();
    threads_ = real.threads();
    device_ = real.device();
    comm_ = real.comm();
    rng_ = &real.rng();
    for (int i = 0; i < real.num_inputs(); ++i) {
      if (!real.has_input(i)) {
        inputs_.push_back(nullptr);
        continue;
      }
      in_views_[i] = host_view(real.input(i));
      inputs_.push_back(&in_views_[i]);
    }
  }
  Tensor& output(int i, const Shape& shape, DType dtype) override {
    Tensor& t = real_.output(i, shape, dtype);
    if (i >= static_cast<int>(out_views_.size())) out_views_.resize(i + 1);
    out_views_[i] = host_view(t);
    return out_views_[i];
  }
  void* scratch(size_t bytes) override { return real_.scratch(bytes); }
  // Simulated kernels finish inside their Access scope: none may defer (async_allowed() is false here).
  void defer(runtime::Completion) override { GR_FAIL("a simulated kernel cannot finish asynchronously"); }

 private:
  static Tensor host_view(const Tensor& t) {
    return Tensor::view(t.dtype(), t.shape(), const_cast<void*>(t.raw()), Device{});
  }
  KernelContext& real_;
  std::vector<Tensor> in_views_;
  std::deque<Tensor> out_views_;  // references handed out stay valid
};

void sim_kernel(KernelContext& ctx) {
  SimBackend* sim = SimBackend::current();
  sim->count_kernel(ctx);
  runtime::KernelFn f = runtime::cpu_kernels().find(ctx.node());
  GR_CHECK(f, "no CPU kernel for " << ctx.node().op_key());
  SimBackend::Access access(*sim);
  HostViewContext host(ctx);
  f(host);
}

struct SimBuffer {
  const void* send;
  void* recv;  // may equal send
  int64_t count;
  bool f64 = false;  // float64 (a --float64 model's gradients; NCCL's AllReduce here is f32 only), else f32
};

// acc = sends[0] + sends[1] + ... in rank order, in T; every recv gets acc (read before any write).
template <typename T>
void sum_in_rank_order(const std::vector<const std::vector<SimBuffer>*>& pending, size_t k, int ranks) {
  const int64_t count = (*pending[0])[k].count;
  const T* s0 = static_cast<const T*>((*pending[0])[k].send);
  std::vector<T> acc(s0, s0 + count);
  for (int r = 1; r < ranks; ++r) {
    const T* s = static_cast<const T*>((*pending[r])[k].send);
    for (int64_t i = 0; i < count; ++i) acc[i] += s[i];
  }
  for (int r = 0; r < ranks; ++r) std::memcpy((*pending[r])[k].recv, acc.data(), count * sizeof(T));
}

// Replicas of the simulated device: every rank hands in its buffers; the last to arrive sums them in
// rank order with device memory accessible (the CUDA device-local group's contract); the others wait
// without holding the device lock, so their kernels can still run meanwhile.
struct SimGroup {
  SimGroup(SimBackend* b, int n, int stall_rank, int64_t stall_after)
      : sim(b), rounds(n), pending(n, nullptr), roots(n, nullptr), stall_rank(stall_rank), stall_after(stall_after) {}
  SimBackend* sim;
  runtime::RoundGroup rounds;
  std::vector<const std::vector<SimBuffer>*> pending;
  std::vector<float*> roots;
  int stall_rank;       // SimBackend::stall_replica
  int64_t stall_after;
  int64_t stall_rank_calls = 0;  // touched by that rank's thread only

  // The last rank's work runs with device memory accessible.
  template <class F>
  void round(int rank, const char* what, F work) {
    if (rank == stall_rank && stall_rank_calls++ >= stall_after) {
      // A hung replica: never arrives; released only when the group is aborted.
      while (!rounds.aborted()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      throw runtime::ReplicaAborted(runtime::kAnotherReplicaFailed);
    }
    rounds.round(rank, what, [&] {
      SimBackend::Access access(*sim);
      work();
    });
  }
};

class SimCommunicator final : public Communicator {
 public:
  SimCommunicator(std::shared_ptr<SimGroup> g, int rank) : g_(std::move(g)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return g_->rounds.size(); }
  std::string name() const override { return "sim-device-local"; }
  void barrier() override { g_->round(rank_, "barrier", [] {}); }
  void abort() override { g_->rounds.abort(); }
  void set_timeout(double seconds) override { g_->rounds.set_timeout(seconds); }

  void allreduce_group(const std::vector<SimBuffer>& buffers) {
    SimGroup& g = *g_;
    {
      std::lock_guard<std::mutex> lock(g.rounds.mutex());
      g.pending[rank_] = &buffers;
    }
    g.round(rank_, "allreduce", [&] {
      const size_t nbuf = g.pending[0]->size();
      for (int r = 1; r < g.rounds.size(); ++r)
        GR_CHECK(g.pending[r]->size() == nbuf, "AllReduce: rank " << r << " reduces " << g.pending[r]->size()
                                                                   << " buffers, rank 0 reduces " << nbuf);
      for (size_t k = 0; k < nbuf; ++k) {
        const int64_t count = (*g.pending[0])[k].count;
        const bool f64 = (*g.pending[0])[k].f64;
        for (int r = 1; r < g.rounds.size(); ++r)
          GR_CHECK((*g.pending[r])[k].count == count && (*g.pending[r])[k].f64 == f64,
                   "AllReduce: buffer " << k << " has " << (*g.pending[r])[k].count << " values on rank " << r << ", "
                                        << count << " on rank 0 (or another type)");
        // Read every send before writing any recv (recv may alias send); sum in rank order.
        if (f64)
          sum_in_rank_order<double>(g.pending, k, g.rounds.size());
        else
          sum_in_rank_order<float>(g.pending, k, g.rounds.size());
      }
    });
  }

  void allreduce_sum(float* data, int64_t count) override {
    if (count > 0) allreduce_group({{data, data, count}});
  }

  void broadcast(float* data, int64_t count, int root) override {
    GR_CHECK(root >= 0 && root < size(), "broadcast: root " << root << " of " << size() << " ranks");
    SimGroup& g = *g_;
    {
      std::lock_guard<std::mutex> lock(g.rounds.mutex());
      g.roots[rank_] = data;
    }
    g.round(rank_, "broadcast", [&] {
      for (int r = 0; r < g.rounds.size(); ++r)
        if (r != root && g.roots[r] != g.roots[root])
          std::memcpy(g.roots[r], g.roots[root], static_cast<size_t>(count) * sizeof(float));
    });
  }

 private:
  std::shared_ptr<SimGroup> g_;
  int rank_;
};

// Not wrapped like the others: a rank waits here for the rest, whose kernels must run meanwhile.
void sim_allreduce(KernelContext& ctx) {
  SimBackend* sim = SimBackend::current();
  sim->count_kernel(ctx);
  const int k = ctx.num_inputs();
  GR_CHECK(ctx.num_outputs() == k, "AllReduce has " << k << " inputs but " << ctx.num_outputs() << " outputs");
  GR_CHECK(ctx.node().attr_s("reduction", "sum") == "sum", "AllReduce supports reduction 'sum' only");
  std::vector<SimBuffer> bufs;
  for (int i = 0; i < k; ++i) {
    const Tensor& G = ctx.input(i);
    GR_CHECK(G.dtype() == DType::F32 || G.dtype() == DType::F64,
             "AllReduce takes f32 or f64, input " << i << " is " << dtype_name(G.dtype()));
    GR_CHECK(sim->is_device_memory(G.raw()), "AllReduce input " << i << " is not in device memory");
    Tensor& R = ctx.output(i, G.shape(), G.dtype());
    if (G.numel()) bufs.push_back({G.raw(), R.raw(), G.numel(), G.dtype() == DType::F64});
  }
  Communicator* comm = ctx.comm();
  if (!comm || comm->size() == 1) {
    SimBackend::Access access(*sim);
    for (const auto& b : bufs)
      if (b.recv != b.send) std::memcpy(b.recv, b.send, b.count * (b.f64 ? sizeof(double) : sizeof(float)));
    return;
  }
  auto* scomm = dynamic_cast<SimCommunicator*>(comm);
  GR_CHECK(scomm, "AllReduce on " << ctx.device().str() << " needs a simulated-device communicator, got '"
                                  << comm->name() << "'");
  scomm->allreduce_group(bufs);
}

}  // namespace

// ---- SimBackend ----

SimBackend::SimBackend(int devices, size_t pool_bytes) : devices_(devices) {
  capacity_ = pool_bytes;
  // Address space for a device of that capacity whose blocks, given back, leave holes (see from_pool).
  pool_bytes_ = round_up(pool_bytes + std::min(pool_bytes * 3, size_t(16) << 30) + (size_t(64) << 20), page_size());
  void* p = mmap(nullptr, pool_bytes_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  GR_CHECK(p != MAP_FAILED, "simulated device: cannot reserve " << pool_bytes_ << " bytes: " << std::strerror(errno));
  pool_ = static_cast<char*>(p);
  for (const std::string& key : runtime::cpu_kernels().ops()) {
    const size_t sep = key.find("::");
    const std::string domain = sep == std::string::npos ? "" : key.substr(0, sep);
    const std::string op = sep == std::string::npos ? key : key.substr(sep + 2);
    // ReplicaSum (--sync-bn's forward sums) is the CUDA backend's AllReduce kernel too.
    const bool collective = domain == kGraphrunDomain && (op == "AllReduce" || op == "ReplicaSum");
    table_.add(domain, op, collective ? sim_allreduce : sim_kernel);
  }
}

SimBackend::~SimBackend() {
  if (pool_) munmap(pool_, pool_bytes_);
}

SimBackend* SimBackend::current() {
  auto* sim = dynamic_cast<SimBackend*>(runtime::backend_for(Device::Kind::CUDA));
  GR_CHECK(sim, "a simulated-device kernel ran while no SimBackend is installed");
  return sim;
}

void SimBackend::set_access(bool on) {
  if (on) {
    const size_t want = round_up(top_, page_size());
    if (want > accessible_) {
      GR_CHECK(mprotect(pool_ + accessible_, want - accessible_, PROT_READ | PROT_WRITE) == 0,
               "simulated device: mprotect failed: " << std::strerror(errno));
      accessible_ = want;
    }
  } else if (accessible_) {
    GR_CHECK(mprotect(pool_, accessible_, PROT_NONE) == 0, "simulated device: mprotect failed: " << std::strerror(errno));
    accessible_ = 0;
  }
}

SimBackend::Access::Access(SimBackend& b) : b_(b) {
  b_.mu_.lock();
  if (b_.depth_++ == 0) b_.set_access(true);
}

SimBackend::Access::~Access() {
  if (--b_.depth_ == 0) b_.set_access(false);
  b_.mu_.unlock();
}

void SimBackend::check_device(Device d, const char* what) const {
  GR_CHECK(d.kind == Device::Kind::CUDA && d.index >= 0 && d.index < devices_,
           "simulated device: " << what << " on " << d.str() << " (" << devices_ << " device(s))");
}

bool SimBackend::is_device_memory(const void* p) const {
  const char* c = static_cast<const char*>(p);
  return c >= pool_ && c < pool_ + pool_bytes_;
}

void SimBackend::check_range(const void* p, size_t bytes, const char* what) const {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  const char* c = static_cast<const char*>(p);
  GR_CHECK(is_device_memory(p) && c + bytes <= pool_ + top_,
           "simulated device: " << what << " is not device memory (" << p << ", " << bytes << " bytes)");
}

// The pool stands for the device's memory as cudaMalloc hands it out, `free_` for the CUDA backend's
// caching allocator on top (freed blocks kept by size class, served again to that class only). As that
// allocator does when cudaMalloc fails, a request the device cannot serve gives every cached block back
// and tries once more. The device's capacity is counted in bytes, not in contiguous addresses: the pool
// reserves more address space than that (the driver maps a GPU's pages where it likes), and blocks given
// back are reused first fit, merged with their neighbours.
void* SimBackend::from_pool(size_t cls) {
  if (reserved_ + cls > capacity_) return nullptr;
  void* p = nullptr;
  for (auto it = released_.begin(); it != released_.end(); ++it) {
    if (it->second < cls) continue;
    const size_t at = it->first, left = it->second - cls;
    released_.erase(it);
    if (left) released_[at + cls] = left;
    p = pool_ + at;
    break;
  }
  if (!p) {
    if (top_ + cls > pool_bytes_) return nullptr;
    p = pool_ + top_;
    top_ += cls;
    set_access(true);  // extend the accessible range over the new block
  }
  reserved_ += cls;
  high_water_ = std::max(high_water_, reserved_);
  return p;
}

void SimBackend::release_cached() {
  for (auto& [cls, blocks] : free_)
    for (void* b : blocks) {
      reserved_ -= cls;
      auto [it, _] = released_.emplace(static_cast<size_t>(static_cast<char*>(b) - pool_), cls);
      if (auto next = std::next(it); next != released_.end() && it->first + it->second == next->first) {
        it->second += next->second;
        released_.erase(next);
      }
      if (it != released_.begin())
        if (auto prev = std::prev(it); prev->first + prev->second == it->first) {
          prev->second += it->second;
          released_.erase(it);
        }
    }
  free_.clear();
}

void* SimBackend::allocate(Device d, size_t bytes) {
  check_device(d, "allocate");
  const size_t cls = size_class(bytes);
  Access access(*this);
  ++counters_.allocations;
  if (largest_ && bytes > largest_)
    GR_FAIL_OUT_OF_MEMORY("out of simulated device memory allocating " << bytes << " bytes (more than the "
                                                                       << largest_ << " one allocation may take)");
  void* p = nullptr;
  auto it = free_.find(cls);
  if (it != free_.end() && !it->second.empty()) {
    p = it->second.back();
    it->second.pop_back();
  } else if (!(p = from_pool(cls))) {
    release_cached();
    p = from_pool(cls);
    if (!p) GR_FAIL_OUT_OF_MEMORY("out of simulated device memory allocating " << bytes << " bytes (" << bytes_in_use() << " in use)");
  }
  live_[p] = cls;
  std::memset(p, kPoison, cls);  // contents are undefined: kernels that rely on zeros fail
  return p;
}

void SimBackend::deallocate(Device d, void* p) {
  if (!p) return;
  try {
    Access access(*this);
    auto it = live_.find(p);
    if (it == live_.end()) return;
    std::memset(p, kPoison, it->second);  // a read after free sees NaN / -1
    free_[it->second].push_back(p);
    live_.erase(it);
  } catch (...) {  // called from tensor destructors
  }
}

size_t SimBackend::free_memory(Device d) {
  check_device(d, "free_memory");
  std::lock_guard<std::recursive_mutex> lock(mu_);
  size_t n = capacity_ - reserved_;
  for (const auto& [c, blocks] : free_) n += c * blocks.size();
  return n;
}

size_t SimBackend::high_water() const {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  return high_water_;
}

size_t SimBackend::bytes_in_use() const {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  size_t n = 0;
  for (const auto& [_, c] : live_) n += c;
  return n;
}

void SimBackend::copy_host_to_device(Device d, void* dst, const void* src, size_t bytes) {
  check_device(d, "copy_host_to_device");
  if (!bytes) return;
  check_range(dst, bytes, "copy_host_to_device destination");
  GR_CHECK(!is_device_memory(src), "simulated device: copy_host_to_device from device memory");
  Access access(*this);
  ++counters_.host_to_device;
  std::memcpy(dst, src, bytes);
}

void SimBackend::copy_device_to_host(Device d, void* dst, const void* src, size_t bytes) {
  check_device(d, "copy_device_to_host");
  if (!bytes) return;
  check_range(src, bytes, "copy_device_to_host source");
  GR_CHECK(!is_device_memory(dst), "simulated device: copy_device_to_host into device memory");
  Access access(*this);
  ++counters_.device_to_host;
  std::memcpy(dst, src, bytes);
}

void SimBackend::copy_device_to_device(Device d, void* dst, const void* src, size_t bytes) {
  check_device(d, "copy_device_to_device");
  if (!bytes) return;
  check_range(dst, bytes, "copy_device_to_device destination");
  check_range(src, bytes, "copy_device_to_device source");
  Access access(*this);
  std::memmove(dst, src, bytes);
}

void SimBackend::memset(Device d, void* dst, int value, size_t bytes) {
  check_device(d, "memset");
  if (!bytes) return;
  check_range(dst, bytes, "memset destination");
  Access access(*this);
  std::memset(dst, value, bytes);
}

void SimBackend::synchronize(Device d) {
  check_device(d, "synchronize");
  std::lock_guard<std::recursive_mutex> lock(mu_);
  ++counters_.synchronizations;
}

// ---- asynchronous reads: pinned memory and events ----

namespace {
struct SimEvent {
  bool recorded = false;
  int64_t kernels_at_record = 0;
};
}  // namespace

void* SimBackend::allocate_pinned(Device d, size_t bytes) {
  check_device(d, "allocate_pinned");
  void* p = std::malloc(std::max<size_t>(1, bytes));
  GR_CHECK(p, "simulated device: out of host memory");
  std::lock_guard<std::recursive_mutex> lock(mu_);
  pinned_[p] = bytes;
  return p;
}

void SimBackend::free_pinned(Device d, void* p) {
  if (!p) return;
  std::lock_guard<std::recursive_mutex> lock(mu_);
  pinned_.erase(p);
  std::free(p);
}

void SimBackend::copy_device_to_host_async(Device d, void* dst, const void* src, size_t bytes) {
  check_device(d, "copy_device_to_host_async");
  if (!bytes) return;
  check_range(src, bytes, "copy_device_to_host_async source");
  Access access(*this);
  bool pinned = false;
  for (const auto& [p, n] : pinned_)
    pinned = pinned || (static_cast<char*>(dst) >= static_cast<char*>(p) &&
                        static_cast<char*>(dst) + bytes <= static_cast<char*>(p) + n);
  GR_CHECK(pinned, "simulated device: copy_device_to_host_async into memory not from allocate_pinned "
                   "(a GPU would stage it and block)");
  ++counters_.async_device_to_host;
  std::memcpy(dst, src, bytes);
}

void* SimBackend::create_event(Device d) {
  check_device(d, "create_event");
  return new SimEvent;
}

void SimBackend::destroy_event(Device, void* event) { delete static_cast<SimEvent*>(event); }

void SimBackend::record_event(Device d, void* event) {
  check_device(d, "record_event");
  std::lock_guard<std::recursive_mutex> lock(mu_);
  auto* e = static_cast<SimEvent*>(event);
  e->recorded = true;
  e->kernels_at_record = counters_.kernels;
}

void SimBackend::wait_event(Device d, void* event) {
  check_device(d, "wait_event");
  std::lock_guard<std::recursive_mutex> lock(mu_);
  auto* e = static_cast<SimEvent*>(event);
  GR_CHECK(e->recorded, "simulated device: waiting for an event that was never recorded");
  ++counters_.event_waits;
  if (counters_.kernels > e->kernels_at_record) ++counters_.deferred_event_waits;
}

SimCounters SimBackend::counters() const {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  return counters_;
}

void SimBackend::count_kernel(const KernelContext& ctx) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  ++counters_.kernels;
  for (int i : table_.host_inputs(ctx.node().op_key()))
    if (ctx.has_input(i)) {
      ++counters_.host_read_inputs;
      if (!ctx.input(i).device().is_cpu()) ++counters_.host_reads_of_device_values;
    }
}

std::vector<std::unique_ptr<Communicator>> SimBackend::make_communicators(const std::vector<Device>& replicas) {
  GR_CHECK(!replicas.empty(), "no replicas to connect");
  for (const Device& d : replicas) check_device(d, "make_communicators");
  int stall_rank;
  int64_t stall_after;
  {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    stall_rank = stall_rank_;
    stall_after = stall_after_;
  }
  auto g = std::make_shared<SimGroup>(this, static_cast<int>(replicas.size()), stall_rank, stall_after);
  std::vector<std::unique_ptr<Communicator>> r;
  for (int i = 0; i < static_cast<int>(replicas.size()); ++i) r.push_back(std::make_unique<SimCommunicator>(g, i));
  return r;
}

void SimBackend::fail_allocations_over(size_t bytes) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  largest_ = bytes;
}

void SimBackend::stall_replica(int rank, int64_t after_collectives) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  stall_rank_ = rank;
  stall_after_ = after_collectives;
}

// ---- ScopedSimDevice ----

ScopedSimDevice::ScopedSimDevice(int devices, size_t pool_bytes)
    : backend_(std::make_unique<SimBackend>(devices, pool_bytes)) {
  GR_CHECK(!dynamic_cast<SimBackend*>(runtime::backend_for(Device::Kind::CUDA)), "a SimBackend is already installed");
  runtime::override_backend(Device::Kind::CUDA, backend_.get());
}

ScopedSimDevice::~ScopedSimDevice() { runtime::override_backend(Device::Kind::CUDA, nullptr); }

}  // namespace graphrun::testing

// --profile: a timeline of what each thread did (every node's kernel, AllReduce waits, data waits, the
// optimizer, evaluation), written as a Chrome trace, and a table of the ops by total time.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <iosfwd>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "graph/ir.h"
#include "graph/tensor.h"

namespace graphrun::runtime {

// Event categories: "kernel" (one node's kernel: name is the op type), "wait" (AllReduce completion,
// peers), "data", "phase" (step, optimizer, evaluate, run), "comm" (inside a blocking AllReduce: its
// waits for replicas and ranks, sum, transfer and copy; Communicator::set_profile).
struct ProfileEvent {
  // node: the graph node's name, for kernels and their waits. Views of the track's own copies
  // (ProfileTrack::add interns them): an event takes no allocation, and a step's events about half the
  // memory that three strings each took.
  std::string_view name, cat, node;
  int64_t begin_ns = 0, dur_ns = 0;
  double flops = 0;  // of a kernel whose FLOPs are known from its shapes (Conv, ConvGrad, Gemm, MatMul)
  size_t bytes_in = 0;  // kernels: the bytes of their inputs (graphrun plan: what a collective sends)
};

class Profiler;

// One timeline: appended to by one thread only, so recording takes no lock.
class ProfileTrack {
 public:
  ProfileTrack(Profiler& p, int id, std::string name) : profiler_(&p), id_(id), name_(std::move(name)) {}
  int64_t now() const;  // nanoseconds since the profiler started
  // `e`'s strings are copied (once per distinct string): they may be temporaries. Nothing while the
  // track is paused (set_recording(false): a step outside --profile-steps).
  void add(ProfileEvent e) {
    if (!recording_.load(std::memory_order_relaxed)) return;
    e.name = intern(e.name);
    e.cat = intern(e.cat);
    e.node = intern(e.node);
    events_.push_back(e);
  }
  void add(const char* name, const char* cat, int64_t begin_ns) { add({name, cat, "", begin_ns, now() - begin_ns, 0}); }
  void set_recording(bool on) { recording_.store(on, std::memory_order_relaxed); }
  int id() const { return id_; }
  const std::string& name() const { return name_; }
  const std::vector<ProfileEvent>& events() const { return events_; }

 private:
  std::string_view intern(std::string_view s) {
    if (s.empty()) return {};
    auto it = interned_.find(s);
    if (it != interned_.end()) return *it;
    strings_.emplace_back(s);
    return *interned_.insert(std::string_view(strings_.back())).first;
  }
  Profiler* profiler_;
  std::atomic<bool> recording_{true};
  int id_;
  std::string name_;
  std::vector<ProfileEvent> events_;
  std::deque<std::string> strings_;  // what the events' views point into (a deque: never moved)
  std::unordered_set<std::string_view> interned_;
};

// Per op type over every track: how often its kernels ran, for how long, and their FLOPs.
struct OpTotals {
  int64_t count = 0, ns = 0;
  double flops = 0;
};

class Profiler {
 public:
  Profiler() : start_(std::chrono::steady_clock::now()) {}
  // A new timeline (thread-safe; the reference stays valid for the profiler's life).
  ProfileTrack& track(const std::string& name);
  int64_t now() const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start_).count();
  }
  std::map<std::string, OpTotals> op_totals() const;
  // --profile-steps FIRST:LAST: the training steps recorded (global, 1-based; last 0: to the end).
  // The replicas pause their tracks outside it; evaluation's track records throughout.
  void set_step_window(int64_t first, int64_t last) { first_step_ = first, last_step_ = last; }
  bool records_step(int64_t step) const { return step >= first_step_ && (last_step_ <= 0 || step <= last_step_); }
  bool windowed() const { return first_step_ > 1 || last_step_ > 0; }
  // Summed duration of the "phase" events named `phase` ("step" in training, "run" in graphrun run).
  int64_t phase_ns(const std::string& phase) const;
  // The Chrome trace (JSON object format); throws Error naming the file when it cannot be written.
  void write_trace(const std::string& path) const;
  // Writes the trace to `path`, then prints the table and the line naming the file on `os`.
  void finish(const std::string& path, const std::string& phase, std::ostream& os) const;
  // The ops by total time: count, ms, % of the summed `phase` time, GFLOP/s where FLOPs are known.
  void print_table(std::ostream& os, const std::string& phase) const;
  // Calls f(track) for every track (tests; not while tracks are being recorded).
  template <class F>
  void for_each_track(F f) const {
    std::lock_guard<std::mutex> l(mu_);
    for (const ProfileTrack& t : tracks_) f(t);
  }

 private:
  void write_trace_file(const std::string& path) const;
  std::chrono::steady_clock::time_point start_;
  int64_t first_step_ = 1, last_step_ = 0;
  mutable std::mutex mu_;
  std::deque<ProfileTrack> tracks_;
};

inline int64_t ProfileTrack::now() const { return profiler_->now(); }

// Records [construction, destruction) as one event on `t`; nothing when t is null.
class ProfileScope {
 public:
  ProfileScope(ProfileTrack* t, const char* name, const char* cat)
      : t_(t), name_(name), cat_(cat), begin_(t ? t->now() : 0) {}
  ~ProfileScope() {
    if (t_) t_->add(name_, cat_, begin_);
  }
  ProfileScope(const ProfileScope&) = delete;
  ProfileScope& operator=(const ProfileScope&) = delete;

 private:
  ProfileTrack* t_;
  const char* name_;
  const char* cat_;
  int64_t begin_;
};

// A phase of a graph's nodes, first..last in execution order (the trainer's optimizer update).
struct ProfileSpan {
  std::string name;
  int first = 0, last = -1;
};

// The training graph's optimizer update: the nodes after its last AllReduce (add_optimizer appends them).
ProfileSpan optimizer_span(const Graph& g);

// What the executor records for node s, which began at begin_ns: its kernel event, and the events of
// the spans it opens or closes (span_begin holds each span's start).
void record_node(ProfileTrack& t, const std::vector<ProfileSpan>& spans, std::vector<int64_t>& span_begin, int s,
                 const Node& n, const std::vector<const Tensor*>& inputs, const Tensor* out0, int64_t begin_ns);

// FLOPs of one run of node n (multiply-adds count two) from its inputs and first output; 0 for ops
// whose FLOPs are not modelled.
double kernel_flops(const Node& n, const std::vector<const Tensor*>& inputs, const Tensor* out0);

}  // namespace graphrun::runtime

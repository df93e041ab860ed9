// graphrun under MPI: initialisation only when a launcher started us, host collectives that poll with
// a deadline (so a dead or hung rank becomes an error naming it, never a hang), and the hierarchical
// CPU communicator (local replicas meet in a RoundGroup; ranks chain the partial sum in rank order).
#include "runtime/comm/mpi.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <iostream>
#include <mutex>
#include <sstream>
#include <thread>

#include "graph/error.h"
#include "runtime/comm/round_group.h"
#include "runtime/comm/wait.h"
#include "runtime/profile.h"

#ifdef GRAPHRUN_HAVE_MPI
#include <mpi.h>

#include "runtime/comm/comm_thread.h"
#include "runtime/comm/mpi_chain.h"
#endif

namespace graphrun::runtime::mpi {

namespace {

std::atomic<int64_t> g_step{0};
std::atomic<double> g_timeout{kDefaultCommTimeout};

int env_int(const char* name, int dflt) {
  const char* v = std::getenv(name);
  if (!v || !*v) return dflt;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  return end && *end == 0 && x >= 0 && x < (1 << 24) ? static_cast<int>(x) : dflt;
}

}  // namespace

bool launched_by_mpi() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMIX_RANK") || std::getenv("PMI_SIZE");
}

void note_step(int64_t step) { g_step.store(step, std::memory_order_relaxed); }
int64_t noted_step() { return g_step.load(std::memory_order_relaxed); }
void set_timeout(double seconds) { g_timeout.store(seconds); }

#ifdef GRAPHRUN_HAVE_MPI

namespace {

bool g_initialised = false;
int g_rank = 0, g_size = 1;
// One thread at a time talks to MPI (MPI_THREAD_SERIALIZED); a whole collective holds it, so every
// rank's operations stay in the order it issued them.
std::mutex g_mu;

// Async-signal-safe decimal.
void put_int(char*& p, int64_t v) {
  char tmp[24];
  int n = 0;
  if (v < 0) *p++ = '-', v = -v;
  do tmp[n++] = static_cast<char>('0' + v % 10), v /= 10;
  while (v && n < 23);
  while (n) *p++ = tmp[--n];
}

// The stop vote's communicator (a duplicate of the world's) and the vote in flight.
MPI_Comm g_vote_comm = MPI_COMM_NULL;
MPI_Request g_vote_req = MPI_REQUEST_NULL;
int g_vote_mine = 0, g_vote_all = 0;
bool g_vote_pending = false;

// Set while a failed rank other than 0 waits to see whether rank 0 reports the job's error (report_error).
volatile std::sig_atomic_t g_error_pending = 0;

// The launcher stops the surviving ranks with SIGTERM when one rank died or failed: say where this
// rank was (mpirun's own message names the rank that failed), then go. A rank that failed itself and
// is waiting for rank 0's report says nothing: rank 0 has spoken for it.
void on_sigterm(int) {
  if (g_error_pending) _exit(143);
  char buf[200], *p = buf;
  const char a[] = "graphrun: rank ";
  std::memcpy(p, a, sizeof a - 1), p += sizeof a - 1;
  put_int(p, g_rank);
  const int64_t step = g_step.load();
  const char b[] = ": stopped at step ", b0[] = ": stopped before the first step";
  if (step > 0) {
    std::memcpy(p, b, sizeof b - 1), p += sizeof b - 1;
    put_int(p, step);
  } else {
    std::memcpy(p, b0, sizeof b0 - 1), p += sizeof b0 - 1;
  }
  const char c[] =
      ": the launcher ended the job: another rank failed (see its message), or mpirun was stopped (SIGUSR1 to "
      "mpirun stops the job at a step instead)\n";
  std::memcpy(p, c, sizeof c - 1), p += sizeof c - 1;
  ssize_t w = write(2, buf, p - buf);
  (void)w;
  _exit(143);
}

// The error of a wait that timed out: the rank that did not answer (peer < 0: some rank).
[[noreturn]] void no_answer(const char* what, int peer, double seconds) {
  std::ostringstream os;
  os << what << " at step " << g_step.load() << ": ";
  // With more than two ranks a chain or ring passes each wait on: the peer may be waiting for another.
  if (peer >= 0) os << "rank " << peer << (g_size > 2 ? " (or a rank it waits for)" : "") << " did not answer";
  else os << "not every rank arrived";
  os << " within " << seconds << " s: it failed, died or hung (raise --comm-timeout if it is only slow)";
  GR_FAIL(os.str());
}

// The rank a gather over all ranks waits for, when that is known: with two ranks, the other one.
int other_rank() { return g_size == 2 ? 1 - g_rank : -1; }

// Waits for `req` until the timeout: an Error naming the rank that did not answer (peer < 0: some rank).
// Waiting for a rank that may still be computing backs off: 2000 polls, then sleeps of 20 us, then of
// 500 us after 20000 polls. spin: the peers are known to be in the same operation (a transfer under
// way): 20000 polls before sleeping, and never 500 us, since Open MPI's shared-memory transport moves
// a large message in fragments only while both ranks poll (a sleeping receiver stalls the sender).
void wait_request(MPI_Request* req, const char* what, int peer, bool spin = false) {
  const double seconds = g_timeout.load();
  const auto deadline = comm_deadline(seconds);
  for (int i = 0;; ++i) {
    int done = 0;
    MPI_Status status;
    const int rc = MPI_Test(req, &done, &status);
    if (rc != MPI_SUCCESS) {
      // (MPI_ERRORS_RETURN: a failed request ends here instead of being waited on until the timeout.) A
      // message longer than the buffer posted for it means the ranks disagree on what they exchange.
      char text[MPI_MAX_ERROR_STRING] = {0};
      int len = 0, cls = 0;
      MPI_Error_string(rc, text, &len);
      MPI_Error_class(rc, &cls);
      GR_FAIL(what << " at step " << g_step.load() << ": MPI failed (" << std::string(text, len) << ")"
                   << (cls == MPI_ERR_TRUNCATE ? ": the ranks disagree on the sizes they exchange (the same model and "
                                                 "settings on every rank?)"
                                               : ""));
    }
    if (done) return;
    if (std::chrono::steady_clock::now() > deadline) no_answer(what, peer, seconds);
    if (i > (spin ? 20000 : 2000)) std::this_thread::sleep_for(std::chrono::microseconds(spin || i < 20000 ? 20 : 500));
  }
}

// Every rank meets here, within the communication timeout (wait_request's error otherwise).
void meet_all(const char* what, int peer) {
  MPI_Request req;
  MPI_Ibarrier(MPI_COMM_WORLD, &req);
  wait_request(&req, what, peer);
}

void check_count(int64_t n) {
  GR_CHECK(n >= 0 && n < (int64_t(1) << 31), "MPI transfer of " << n << " elements is too large for one message");
}

void bcast_locked(void* data, int64_t bytes, int root, const char* what, bool spin = false) {
  check_count(bytes);
  MPI_Request req;
  MPI_Ibcast(data, static_cast<int>(bytes), MPI_BYTE, root, MPI_COMM_WORLD, &req);
  wait_request(&req, what, root == g_rank ? -1 : root, spin);
}


}  // namespace

bool built_with_mpi() { return true; }

void init() {
  if (g_initialised || !launched_by_mpi()) return;
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
  g_initialised = true;
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  // Errors come back as codes (a failed request is reported, not a crash inside MPI).
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  GR_CHECK(provided >= MPI_THREAD_SERIALIZED, "MPI does not provide MPI_THREAD_SERIALIZED, which graphrun needs");
  if (g_size > 1) {
    std::signal(SIGTERM, on_sigterm);
    MPI_Comm_dup(MPI_COMM_WORLD, &g_vote_comm);
    MPI_Comm_set_errhandler(g_vote_comm, MPI_ERRORS_RETURN);
  }
}

void finalize() {
  if (!g_initialised) return;
  // MPI_Finalize waits for every rank without a deadline: meet them first within --comm-timeout, so a
  // rank that hangs after the last step (stopped, swapping) ends the job instead of hanging it.
  if (g_size > 1) {
    try {
      meet_all("the end of the job", other_rank());
    } catch (const Error& e) {
      std::cerr << "graphrun: rank " << g_rank << ": " << e.what() << std::endl;
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }
  MPI_Finalize();
  g_initialised = false;
}

bool active() { return g_initialised; }
int rank() { return g_rank; }
int size() { return g_size; }
int local_rank() { return g_initialised ? env_int("OMPI_COMM_WORLD_LOCAL_RANK", env_int("MPI_LOCALRANKID", 0)) : 0; }
int local_size() { return g_initialised ? env_int("OMPI_COMM_WORLD_LOCAL_SIZE", env_int("MPI_LOCALNRANKS", 1)) : 1; }

void report_error(const std::string& line) {
  if (g_initialised && g_size > 1 && g_rank != 0) {
    g_error_pending = 1;
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    g_error_pending = 0;
  }
  std::cerr << line << std::endl;
}

void abort_job(int code) {
  if (g_initialised && g_size > 1) MPI_Abort(MPI_COMM_WORLD, code);
  finalize();
  std::exit(code);
}

void broadcast_bytes(void* data, size_t bytes, int root) {
  if (!g_initialised || g_size == 1) return;
  std::lock_guard<std::mutex> lock(g_mu);
  bcast_locked(data, static_cast<int64_t>(bytes), root, "broadcast");
}

std::vector<std::string> allgather(const std::string& mine, const char* what) {
  if (!g_initialised || g_size == 1) return {mine};
  std::lock_guard<std::mutex> lock(g_mu);
  int n = static_cast<int>(mine.size());
  std::vector<int> sizes(g_size);
  MPI_Request req;
  MPI_Iallgather(&n, 1, MPI_INT, sizes.data(), 1, MPI_INT, MPI_COMM_WORLD, &req);
  wait_request(&req, what, other_rank());
  std::vector<int> offs(g_size, 0);
  for (int r = 1; r < g_size; ++r) offs[r] = offs[r - 1] + sizes[r - 1];
  std::string all(static_cast<size_t>(offs.back() + sizes.back()), '\0');
  MPI_Iallgatherv(mine.data(), n, MPI_CHAR, all.data(), sizes.data(), offs.data(), MPI_CHAR, MPI_COMM_WORLD, &req);
  wait_request(&req, what, other_rank());
  std::vector<std::string> r;
  for (int i = 0; i < g_size; ++i) r.push_back(all.substr(offs[i], sizes[i]));
  return r;
}

int stop_vote(int mine, bool post) {
  if (!g_initialised || g_size == 1) return 0;
  int all = 0;
  if (g_vote_pending) {
    // Every rank posted this vote before its part of the step this rank has finished, so the wait
    // is short; it polls without holding g_mu between tests, so other threads' collectives go on.
    const double seconds = g_timeout.load();
    const auto deadline = comm_deadline(seconds);
    for (int i = 0;; ++i) {
      int done = 0, rc = 0;
      {
        std::lock_guard<std::mutex> lock(g_mu);
        rc = MPI_Test(&g_vote_req, &done, MPI_STATUS_IGNORE);
      }
      GR_CHECK(rc == MPI_SUCCESS, "the stop vote at step " << g_step.load() << ": MPI failed");
      if (done) break;
      if (std::chrono::steady_clock::now() > deadline) no_answer("the stop vote", other_rank(), seconds);
      if (i > 2000) std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    g_vote_pending = false;
    all = g_vote_all;
  }
  if (all == 0 && post) {
    g_vote_mine = mine;
    std::lock_guard<std::mutex> lock(g_mu);
    MPI_Iallreduce(&g_vote_mine, &g_vote_all, 1, MPI_INT, MPI_MAX, g_vote_comm, &g_vote_req);
    g_vote_pending = true;
  }
  return all;
}

void sum_in_rank_order(double* values, int count, const char* what) {
  if (!g_initialised || g_size == 1) return;
  std::vector<double> all(static_cast<size_t>(count) * g_size);
  {
    std::lock_guard<std::mutex> lock(g_mu);
    MPI_Request req;
    MPI_Iallgather(values, count, MPI_DOUBLE, all.data(), count, MPI_DOUBLE, MPI_COMM_WORLD, &req);
    wait_request(&req, what, other_rank());
  }
  for (int i = 0; i < count; ++i) {
    double s = all[i];
    for (int r = 1; r < g_size; ++r) s += all[static_cast<size_t>(r) * count + i];
    values[i] = s;
  }
}

namespace {

// The chain's segment (runtime/comm/mpi_chain.h) in KiB; GRAPHRUN_MPI_SEGMENT_KB changes it (the tests
// split LeNet's small buckets with it; the bits do not depend on it).
constexpr int kChainSegmentKiB = 256;

// The replicas of this rank: they hand in their buffers, the last to arrive does the rank's part.
struct CpuGroup {
  CpuGroup(int local, int first, int total) : round(local), ptrs(local), counts(local), local(local), first(first), total(total) {}
  RoundGroup round;
  std::vector<void*> ptrs;    // the current collective's buffers: float, or double when f64
  std::vector<int64_t> counts;
  bool f64 = false;           // allreduce_sum_f64 (a float64 model): MPI_DOUBLE
  std::vector<double> incoming;  // (floats or doubles)
  std::vector<int> firsts;  // the first global replica of every rank
  bool pairwise = false;     // two ranks, the last with one replica: MPI_Iallreduce sums as the chain does
  int64_t segment = int64_t(kChainSegmentKiB) * 256;  // floats
  int local, first, total;

  int owner(int replica) const {
    int r = 0;
    while (r + 1 < static_cast<int>(firsts.size()) && firsts[r + 1] <= replica) ++r;
    return r;
  }
  void check_counts(const char* what) const {
    for (int l = 1; l < local; ++l)
      GR_CHECK(counts[l] == counts[0], what << ": replica " << first + l << " has " << counts[l]
                                            << " values but replica " << first << " has " << counts[0]);
    check_count(counts[0]);
  }
  void copy_out(int from) {
    for (int l = 0; l < local; ++l)
      if (l != from && ptrs[l] != ptrs[from]) std::memcpy(ptrs[l], ptrs[from], counts[from] * elem());
  }

  // --profile: the phases of the last allreduce (profile.h's clock), which every local replica then
  // records on its own track; `clock` is any replica's track (null: nobody profiles).
  ProfileTrack* clock = nullptr;
  struct Phase {
    const char* name;
    int64_t begin, end;
  };
  std::vector<Phase> phases;
  int64_t work_begin = 0;
  template <class F>
  void timed(const char* name, F f) {
    if (!clock) return f();
    const int64_t t0 = clock->now();
    f();
    phases.push_back({name, t0, clock->now()});
  }

  // Partial sums travel rank 0 -> 1 -> ... -> last, each rank adding its replicas in order, and the
  // total travels back, both in segments that overlap (pipelined_chain). Element i is
  // ((p0 + p1) + p2) + ... over global replicas, as in-process.
  // First a barrier: its time is the wait for the slowest rank to finish computing (load imbalance),
  // with a polling that backs off; the transfers after it poll without sleeping.
  size_t elem() const { return f64 ? sizeof(double) : sizeof(float); }
  void allreduce() { f64 ? allreduce_t<double>() : allreduce_t<float>(); }
  template <class T>
  void allreduce_t() {
    check_counts("allreduce");
    const int64_t n = counts[0];
    T* acc = static_cast<T*>(ptrs[0]);
    const MPI_Datatype type = f64 ? MPI_DOUBLE : MPI_FLOAT;
    phases.clear();
    std::lock_guard<std::mutex> lock(g_mu);
    timed("wait for ranks", [&] {
      meet_all("allreduce", g_size == 2 ? 1 - g_rank : -1);  // with more ranks: "not every rank"
    });
    if (pairwise) {
      // Two ranks, one replica on the last: each element is one addition, partial(rank 0) + g_last,
      // which is commutative, so MPI's own allreduce gives the chain's bits in one exchange.
      timed("sum", [&] {
        for (int l = 1; l < local; ++l) {
          const T* p = static_cast<const T*>(ptrs[l]);
          for (int64_t i = 0; i < n; ++i) acc[i] += p[i];
        }
      });
      timed("transfer", [&] {
        MPI_Request req;
        MPI_Iallreduce(MPI_IN_PLACE, acc, static_cast<int>(n), type, MPI_SUM, MPI_COMM_WORLD, &req);
        wait_request(&req, "allreduce", 1 - g_rank, true);
      });
      timed("copy", [&] { copy_out(0); });
      return;
    }
    if (g_rank > 0 && static_cast<int64_t>(incoming.size()) < n) incoming.resize(n);
    // The chain, pipelined in segments (runtime/comm/mpi_chain.h). --profile: the segments' sums and
    // the transfers between them, as they alternate.
    int64_t mark = clock ? clock->now() : 0;
    const double seconds = g_timeout.load();
    auto deadline = comm_deadline(seconds);
    const int64_t seg = std::max<int64_t>(1, segment * int64_t(sizeof(float)) / int64_t(sizeof(T)));  // same bytes
    pipelined_chain(
        acc, reinterpret_cast<T*>(incoming.data()), n, seg, g_rank, g_size, MPI_COMM_WORLD,
        [&](int64_t off, int len) {
          const int64_t t0 = clock ? clock->now() : 0;
          if (clock && t0 > mark) phases.push_back({"transfer", mark, t0});
          T* a = acc + off;
          if (g_rank > 0) {
            const T* in = reinterpret_cast<const T*>(incoming.data()) + off;
            for (int i = 0; i < len; ++i) a[i] = in[i] + a[i];
          }
          for (int l = 1; l < local; ++l) {
            const T* p = static_cast<const T*>(ptrs[l]) + off;
            for (int i = 0; i < len; ++i) a[i] += p[i];
          }
          if (clock) phases.push_back({"sum", t0, mark = clock->now()});
        },
        [&](int peer, int polls) {
          // A transfer under way: poll as wait_request(spin) does; the deadline counts from the last progress.
          if (polls == 1) deadline = comm_deadline(seconds);
          else if (std::chrono::steady_clock::now() > deadline) no_answer("allreduce", peer, seconds);
          if (polls > 20000) std::this_thread::sleep_for(std::chrono::microseconds(20));
        });
    if (clock) phases.push_back({"transfer", mark, clock->now()});
    timed("copy", [&] { copy_out(0); });
  }

  void broadcast(int root) {
    check_counts("broadcast");
    const int from_rank = owner(root);
    int from = 0;
    if (from_rank == g_rank) {
      from = root - first;
      GR_CHECK(from >= 0 && from < local, "broadcast: root " << root << " is not a replica of rank " << g_rank);
    }
    std::lock_guard<std::mutex> lock(g_mu);
    bcast_locked(ptrs[from], counts[from] * static_cast<int64_t>(elem()), from_rank, "broadcast");
    copy_out(from);
  }

  void barrier() {
    std::lock_guard<std::mutex> lock(g_mu);
    meet_all("barrier", -1);
  }
};

class MpiCpuRank final : public Communicator {
 public:
  MpiCpuRank(std::shared_ptr<CpuGroup> g, int l) : g_(std::move(g)), l_(l) {}
  int rank() const override { return g_->first + l_; }
  int size() const override { return g_->total; }
  // Blocking calls come after every allreduce this replica started (the order every replica and rank
  // shares), so the rounds and MPI's collectives stay in one order on every rank.
  void allreduce_sum(float* data, int64_t count) override {
    drain();
    allreduce_now(data, count, false, track_);
  }
  void allreduce_sum_f64(double* data, int64_t count) override {
    drain();
    allreduce_now(data, count, true, track_);
  }
  // --overlap-allreduce on: the round (and, for the replica that arrives last, the MPI transfer) runs
  // on a communication thread of this replica while its backward pass goes on. Not profiled (the
  // thread has no track), as in one process.
  std::function<void()> allreduce_sum_async(float* data, int64_t count) override {
    return comm_.submit([this, data, count] { allreduce_now(data, count, false, nullptr); });
  }
  void set_profile(ProfileTrack* track) override {
    track_ = track;
    std::lock_guard<std::mutex> lock(g_->round.mutex());
    if (track) g_->clock = track;
  }
  void broadcast(float* data, int64_t count, int root) override {
    drain();
    hand_in(data, count, false);
    g_->round.round(l_, "broadcast", [this, root] { g_->broadcast(root); });
  }
  void barrier() override {
    drain();
    g_->round.round(l_, "barrier", [this] { g_->barrier(); });
  }
  void abort() override { g_->round.abort(); }
  void set_timeout(double seconds) override {
    g_->round.set_timeout(seconds);
    mpi::set_timeout(seconds);
  }
  std::string name() const override { return "mpi"; }

 private:
  void allreduce_now(void* data, int64_t count, bool f64, ProfileTrack* track) {
    hand_in(data, count, f64);
    const int64_t t0 = track ? track->now() : 0;
    g_->round.round(l_, "allreduce", [this] {
      g_->work_begin = g_->clock ? g_->clock->now() : 0;
      g_->allreduce();
    });
    if (!track) return;
    // The round is over: the phases are stable until this replica's next call.
    if (g_->work_begin > t0) track->add({"wait for replicas", "comm", "", t0, g_->work_begin - t0, 0});
    for (const CpuGroup::Phase& p : g_->phases) track->add({p.name, "comm", "", p.begin, p.end - p.begin, 0});
  }

  void drain() { comm_.drain(); }

  void hand_in(void* data, int64_t count, bool f64) {
    std::lock_guard<std::mutex> lock(g_->round.mutex());
    g_->ptrs[l_] = data;
    g_->counts[l_] = count;
    g_->f64 = f64;  // (every local replica calls the same collective)
  }
  std::shared_ptr<CpuGroup> g_;
  int l_;
  ProfileTrack* track_ = nullptr;
  CommThread comm_;  // --overlap-allreduce's jobs; declared last, so it stops first
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_cpu_communicators(int local, int first, int total) {
  auto g = std::make_shared<CpuGroup>(local, first, total);
  for (const std::string& s : allgather(std::to_string(first))) g->firsts.push_back(std::stoi(s));
  g->pairwise = g_size == 2 && total - g->firsts.back() == 1;
  g->segment = std::max(1, env_int("GRAPHRUN_MPI_SEGMENT_KB", kChainSegmentKiB)) * int64_t(256);
  std::vector<std::unique_ptr<Communicator>> r;
  for (int l = 0; l < local; ++l) r.push_back(std::make_unique<MpiCpuRank>(g, l));
  return r;
}

#else  // built without MPI: one process is the whole job.

bool built_with_mpi() { return false; }
void init() {
  GR_CHECK(!launched_by_mpi() || env_int("OMPI_COMM_WORLD_SIZE", env_int("PMI_SIZE", 1)) <= 1,
           "started by an MPI launcher with several ranks, but this graphrun was built without MPI support "
           "(install libopenmpi-dev and rebuild)");
}
void finalize() {}
bool active() { return false; }
int rank() { return 0; }
int size() { return 1; }
int local_rank() { return 0; }
int local_size() { return 1; }
void abort_job(int code) { std::exit(code); }
void report_error(const std::string& line) { std::cerr << line << std::endl; }
void broadcast_bytes(void*, size_t, int) {}
std::vector<std::string> allgather(const std::string& mine, const char*) { return {mine}; }
void sum_in_rank_order(double*, int, const char*) {}
int stop_vote(int, bool) { return 0; }
std::vector<std::unique_ptr<Communicator>> make_cpu_communicators(int, int, int) {
  GR_FAIL("graphrun was built without MPI support");
}

#endif

}  // namespace graphrun::runtime::mpi

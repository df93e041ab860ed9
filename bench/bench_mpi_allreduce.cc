// bench_mpi_allreduce: the floor under graphrun's MPI AllReduce. Run it with 2 (or more) ranks:
//
//   mpirun -np 2 [--oversubscribe --mca btl self,vader --mca btl_vader_single_copy_mechanism none]
//          build/bench/bench_mpi_allreduce [--mb 42.6] [--bucket-mb 4] [--repeats 10] [--segment-kb 256]
//
// It sums --mb of float32 over the ranks, cut into buckets of --bucket-mb as graphrun's AllReduce
// nodes are, in these ways, each timed per whole pass (median of --repeats, after a warm-up pass):
//   memcpy           copying the buffer once within the process (the cost of one copy in or out)
//   MPI_Allreduce    MPI_Allreduce(MPI_IN_PLACE, ..., MPI_SUM), blocking (Open MPI picks the algorithm)
//   MPI_Iallreduce   the same, non-blocking and polled as graphrun polls a transfer (MPI_Test; 20000
//                    polls, then sleeps of 20 us): graphrun's way with 2 ranks (runtime/comm/mpi.cc)
//   chain            the order graphrun keeps with more ranks: the partial sum goes rank 0 -> 1 -> ...
//                    -> last, each rank adding its part, then MPI_Ibcast from the last rank, polled as
//                    above (graphrun's way before the pipelined chain)
//   pipelined chain  graphrun's way with more ranks (runtime/comm/mpi_chain.h, this very code): the
//                    same chain there and back in segments of --segment-kb that overlap; the same bits
// Every rank starts each pass after a barrier, so no row holds one rank waiting for the other.
// Rank 0 prints a table: ms per pass and the algorithm's bandwidth (bytes / time).
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "runtime/comm/mpi_chain.h"

namespace {

int g_rank = 0, g_size = 1;

// As runtime/comm/mpi.cc's wait_request (spin: a transfer under way), without the deadline.
void wait_polled(MPI_Request* req, bool spin = true) {
  for (int i = 0;; ++i) {
    int done = 0;
    MPI_Test(req, &done, MPI_STATUS_IGNORE);
    if (done) return;
    if (i > (spin ? 20000 : 2000)) std::this_thread::sleep_for(std::chrono::microseconds(spin || i < 20000 ? 20 : 500));
  }
}

void chain_polled(float* acc, int n, std::vector<float>& incoming) {
  if (g_rank > 0) {
    incoming.resize(n);
    MPI_Request req;
    MPI_Irecv(incoming.data(), n, MPI_FLOAT, g_rank - 1, 1, MPI_COMM_WORLD, &req);
    wait_polled(&req);
    for (int i = 0; i < n; ++i) acc[i] = incoming[i] + acc[i];
  }
  if (g_rank + 1 < g_size) {
    MPI_Request req;
    MPI_Isend(acc, n, MPI_FLOAT, g_rank + 1, 1, MPI_COMM_WORLD, &req);
    wait_polled(&req);
  }
  MPI_Request req;
  MPI_Ibcast(acc, n, MPI_FLOAT, g_size - 1, MPI_COMM_WORLD, &req);
  wait_polled(&req);
}

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  double mb = 42.6, bucket_mb = 4;
  double segment_kb = 256;
  int repeats = 10;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--mb") mb = std::atof(argv[i + 1]);
    else if (k == "--bucket-mb") bucket_mb = std::atof(argv[i + 1]);
    else if (k == "--repeats") repeats = std::atoi(argv[i + 1]);
    else if (k == "--segment-kb") segment_kb = std::atof(argv[i + 1]);
  }
  const int n = static_cast<int>(mb * 1e6 / 4), bucket = static_cast<int>(bucket_mb * (1 << 20) / 4);
  std::vector<float> data(n), copy(n), incoming;
  for (int i = 0; i < n; ++i) data[i] = static_cast<float>((i % 1000) * 1e-3 + g_rank);

  struct Row {
    const char* name;
    double ms;
  };
  std::vector<Row> rows;
  auto time = [&](const char* name, auto pass) {
    std::vector<double> t;
    for (int r = 0; r <= repeats; ++r) {
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = now_s();
      for (int off = 0; off < n; off += bucket) pass(data.data() + off, std::min(bucket, n - off));
      const double dt = now_s() - t0;
      if (r > 0) t.push_back(dt);
    }
    std::sort(t.begin(), t.end());
    double worst = 0, med = t[t.size() / 2];
    MPI_Allreduce(&med, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    rows.push_back({name, worst * 1e3});
  };
  time("memcpy (one copy, in-process)", [&](float* p, int len) { std::memcpy(copy.data(), p, len * sizeof(float)); });
  time("MPI_Allreduce in place", [&](float* p, int len) {
    MPI_Allreduce(MPI_IN_PLACE, p, len, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  });
  time("MPI_Iallreduce in place, polled", [&](float* p, int len) {
    MPI_Request req;
    MPI_Iallreduce(MPI_IN_PLACE, p, len, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &req);
    wait_polled(&req);
  });
  time("chain + Ibcast, polled", [&](float* p, int len) { chain_polled(p, len, incoming); });
  const int64_t segment = std::max<int64_t>(1, static_cast<int64_t>(segment_kb * 1024 / 4));
  time("pipelined chain, polled", [&](float* p, int len) {
    incoming.resize(n);
    graphrun::runtime::mpi::pipelined_chain(
        p, incoming.data(), len, segment, g_rank, g_size, MPI_COMM_WORLD,
        [&](int64_t off, int m) {
          if (g_rank > 0)
            for (int i = 0; i < m; ++i) p[off + i] = incoming[off + i] + p[off + i];
        },
        [](int, int polls) {
          if (polls > 20000) std::this_thread::sleep_for(std::chrono::microseconds(20));
        });
  });
  // The pipelined chain sums as the chain does: the same bits on every rank.
  std::vector<float> a(n), b(n);
  for (int i = 0; i < n; ++i) a[i] = b[i] = static_cast<float>(std::sin(i * 0.37 + g_rank) * 1e3 / (1 + g_rank));
  for (int off = 0; off < n; off += bucket) {
    const int len = std::min(bucket, n - off);
    chain_polled(a.data() + off, len, incoming);
    graphrun::runtime::mpi::pipelined_chain(
        b.data() + off, incoming.data(), len, segment, g_rank, g_size, MPI_COMM_WORLD,
        [&](int64_t o, int m) {
          if (g_rank > 0)
            for (int i = 0; i < m; ++i) b[off + o + i] = incoming[o + i] + b[off + o + i];
        },
        [](int, int) {});
  }
  int differ = std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) != 0, any = 0;
  MPI_Allreduce(&differ, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (g_rank == 0) {
    std::printf("%d ranks, %.1f MB of float32 in buckets of %.1f MB (%d), segments of %.0f KiB, median of %d passes, "
                "slowest rank\n", g_size, n * 4e-6, bucket_mb, (n + bucket - 1) / bucket, segment_kb, repeats);
    std::printf("%-34s %9s %12s\n", "way", "ms", "GB/s (bytes/t)");
    for (const Row& r : rows) std::printf("%-34s %9.1f %12.2f\n", r.name, r.ms, n * 4e-6 / r.ms);
    const double allreduce = rows[1].ms, chain = rows[3].ms, pipelined = rows[4].ms;
    std::printf("pipelined chain: %.2fx the chain's time, %.2fx MPI_Allreduce's (the chain: %.2fx); bits %s\n",
                pipelined / chain, pipelined / allreduce, chain / allreduce, any ? "DIFFER from the chain" : "equal to the chain's");
  }
  MPI_Finalize();
  return any ? 1 : 0;
}

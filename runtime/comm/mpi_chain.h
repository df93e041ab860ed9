// The pipelined chain: graphrun's MPI AllReduce for more than two ranks (runtime/comm/mpi.cc), in a
// header so that bench/bench_mpi_allreduce.cc times this very code.
//
// The partial sum travels rank 0 -> 1 -> ... -> last and the total travels back last -> ... -> 0, as
// in the whole-bucket chain, but segment by segment: rank r+1 adds segment i while rank r sends
// segment i+1, and the last rank sends segment i of the total back while segment i+1 is still coming.
// Every element is summed exactly as before (each rank adds its part to the partial of the ranks
// before it, in rank order), so the bits do not depend on the segment size. Every transfer is
// non-blocking; the caller's `stalled` decides how to wait and when to give up.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

namespace graphrun::runtime::mpi {

// acc: this rank's n values (its first replica's bucket); incoming: room for n values (unused on
// rank 0). sum(off, len): this rank's part of elements [off, off + len) (rank 0: add its other
// replicas to acc; rank r > 0: acc = incoming + acc, then its other replicas); it runs once per
// segment, in order. stalled(peer, polls): a poll found nothing new, `polls` times in a row; `peer`
// is the rank this rank waits for first. It may sleep, or throw to give up (the requests in flight
// are left behind: the job ends). On return acc holds the total on every rank.
template <class T, class Sum, class Stalled>
void pipelined_chain(T* acc, T* incoming, int64_t n, int64_t segment, int rank, int size, MPI_Comm comm,
                     Sum sum, Stalled stalled) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "float or double buckets");
  const MPI_Datatype type = std::is_same_v<T, double> ? MPI_DOUBLE : MPI_FLOAT;
  if (n <= 0 || size < 2) {
    if (n > 0) sum(0, n);
    return;
  }
  constexpr int kForward = 11, kBack = 12;
  const bool has_prev = rank > 0, has_next = rank + 1 < size;
  const int64_t m = (n + segment - 1) / segment;
  auto off = [&](int64_t s) { return s * segment; };
  auto len = [&](int64_t s) { return static_cast<int>(std::min(segment, n - s * segment)); };
  std::vector<MPI_Request> fr(m, MPI_REQUEST_NULL), fs(m, MPI_REQUEST_NULL), br(m, MPI_REQUEST_NULL),
      bs(m, MPI_REQUEST_NULL);
  if (has_prev)
    for (int64_t s = 0; s < m; ++s) MPI_Irecv(incoming + off(s), len(s), type, rank - 1, kForward, comm, &fr[s]);
  // Segments [0, summed) are summed and on their way on; [0, fsent) have left for the next rank (so
  // acc may receive their total); [0, brecvd) hold the total; [0, bsent) have reached the previous rank.
  int64_t summed = 0, fsent = 0, brecvd = 0, bsent = 0;
  auto done = [](MPI_Request* r) {
    int flag = 0;
    MPI_Test(r, &flag, MPI_STATUS_IGNORE);
    return flag != 0;
  };
  auto back = [&](int64_t s) { MPI_Isend(acc + off(s), len(s), type, rank - 1, kBack, comm, &bs[s]); };
  for (int polls = 0;;) {
    bool moved = false;
    if (summed < m && (!has_prev || done(&fr[summed]))) {
      sum(off(summed), len(summed));
      if (has_next) MPI_Isend(acc + off(summed), len(summed), type, rank + 1, kForward, comm, &fs[summed]);
      else back(summed);  // the last rank: this segment is the total
      ++summed, moved = true;
    }
    if (has_next) {
      for (; fsent < summed && done(&fs[fsent]); ++fsent, moved = true)
        MPI_Irecv(acc + off(fsent), len(fsent), type, rank + 1, kBack, comm, &br[fsent]);
      for (; brecvd < fsent && done(&br[brecvd]); ++brecvd, moved = true)
        if (has_prev) back(brecvd);
    }
    const int64_t back_posted = has_prev ? (has_next ? brecvd : summed) : 0;
    for (; bsent < back_posted && done(&bs[bsent]); ++bsent) moved = true;
    const bool finished = summed == m && (!has_next || brecvd == m) && (!has_prev || bsent == m);
    if (finished) return;
    if (moved) {
      polls = 0;
      continue;
    }
    // Whom this rank waits for: the partial from before it, else the total from after it, else the
    // previous rank taking the total.
    const int peer = summed < m && has_prev ? rank - 1 : has_next && brecvd < m ? rank + 1 : rank - 1;
    stalled(peer, ++polls);
  }
}

}  // namespace graphrun::runtime::mpi

// graphrun as one rank of an MPI job (mpirun -np K graphrun train ...): noticing the launcher, the
// world's ranks, the host collectives the trainer needs, and the hierarchical CPU communicator.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/comm/communicator.h"

namespace graphrun::runtime::mpi {

// Whether this build has MPI support (CMake found MPI).
bool built_with_mpi();
// Whether a launcher started this process as a rank: Open MPI's OMPI_COMM_WORLD_SIZE, PMIx's
// PMIX_RANK (srun --mpi=pmix), PMI's PMI_SIZE. Reads only the environment.
bool launched_by_mpi();
// MPI_Init_thread when launched_by_mpi(), else nothing (outside MPI no MPI call is made). Fails with one
// line when launched by mpirun with more than one rank but built without MPI.
void init();
// MPI_Finalize when init() initialised MPI, after a barrier bounded by the communication timeout: a
// rank still missing then (stopped or hung after the last step) gets one line and MPI_Abort, not a
// job that never ends.
void finalize();
// Whether this process is a rank of an initialised MPI job (of any size, 1 included).
bool active();
int rank();        // 0 outside MPI
int size();        // 1 outside MPI
int local_rank();  // the rank among the ranks of this machine (GPU selection); 0 outside MPI
int local_size();  // ranks on this machine; 1 outside MPI
// Ends every rank of the job now, with `code` as mpirun's exit status (MPI_Abort). Outside MPI: exit.
[[noreturn]] void abort_job(int code);
// Prints a rank's one-line error to stderr, once per job where the ranks share it: rank 0 (or a job of
// one rank) prints at once; another rank waits up to a second and a half first, and when the launcher
// ends it meanwhile (rank 0 failed and aborted the job, surely with the same error: a usage error, a
// missing file) it exits without a word. An error of its own is printed after the wait.
void report_error(const std::string& line);

// The trainer's step (1-based, global) for messages: a collective that times out, a rank stopped by
// the launcher, an error, all name it.
void note_step(int64_t step);
int64_t noted_step();
// How long the host collectives below wait for another rank before failing (Communicator::set_timeout).
void set_timeout(double seconds);

// Host collectives over all ranks (each rank calls them in the same order). Outside MPI they are
// the identity. A rank that does not arrive within the timeout fails them with an Error naming it.
// `what` names the operation in that error ("evaluation at step 12: rank 1 did not answer ...").
void broadcast_bytes(void* data, size_t bytes, int root);
std::vector<std::string> allgather(const std::string& mine, const char* what = "allgather");
// In place: every rank ends with the sum over ranks, added in rank order (repeatable).
void sum_in_rank_order(double* values, int count, const char* what = "allgather");

// The stop vote (runtime/interrupt.h, Trainer::poll_stop): every rank's replica 0 calls it at each
// step of a segment, so every rank makes the same sequence of calls. It completes the vote that the
// previous call posted on every rank and returns the largest signal number any rank put in it (0:
// none; also when no vote is pending); then, when that is 0 and `post`, posts `mine` for the next
// call. On its own communicator, so it never interleaves with other threads' collectives; the wait
// is bounded by the communication timeout. Outside MPI: 0.
int stop_vote(int mine, bool post);

// The communicators of this rank's `local` replicas when the job has several ranks: replica l is
// global replica `first + l` of `total`. An allreduce sums the local replicas' buffers and passes the
// partial sum on from rank to rank (rank 0 first, each adding its replicas in order), then broadcasts
// the total from the last rank: every element is added in global replica order, as the in-process
// communicator adds it, so the sums do not depend on how replicas are spread over ranks.
std::vector<std::unique_ptr<Communicator>> make_cpu_communicators(int local, int first, int total);

}  // namespace graphrun::runtime::mpi

// Stopping a training run at a step, on request: Ctrl-C (SIGINT), SIGTERM or SIGUSR1 asks `graphrun
// train` to stop after the steps under way, write a checkpoint (with --checkpoint-dir) and exit with
// 128 + the signal's number; a second such signal ends the process at once, as it would have without
// graphrun. In an MPI job of several ranks only SIGUSR1 does this (mpirun forwards SIGUSR1 to every rank,
// and answers SIGINT and SIGTERM by ending the job); the ranks agree on the step (Trainer::poll_stop).
#pragma once

namespace graphrun::runtime::interrupt {

// Installs the handlers of `signals` (SIGINT, SIGTERM, SIGUSR1 outside MPI; SIGUSR1 in an MPI job).
// `announce`: the first signal writes one line to stderr (rank 0's, or a lone process's).
void install(bool under_mpi, bool announce);
// The number of the first signal asking to stop since install() or clear(); 0 when none.
int requested();
// Asks to stop as the signal `sig` would (tests; no handler involved).
void request(int sig);
void clear();
// "SIGINT", "SIGTERM", "SIGUSR1", or "signal N".
const char* name(int sig);

}  // namespace graphrun::runtime::interrupt

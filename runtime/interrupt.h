// Stopping a training run at a step, on request: Ctrl-C (SIGINT), SIGTERM or SIGUSR1 asks `graphrun
// train` to stop after the steps under way, write a checkpoint (with --checkpoint-dir) and exit with
// 128 + the signal's number; a second such signal ends the process at once, as it would have without
// graphrun. In an MPI job of several ranks only SIGUSR1 does this (mpirun forwards SIGUSR1 to every rank,
// and answers SIGINT and SIGTERM by ending the job); the ranks agree on the step (Trainer::poll_stop).
//
// The signals are taken by a thread of their own (sigwait): every thread started after take_signals()
// blocks them, so none is ever interrupted by one. That matters: oneDNN's JIT GEMM kernels point the stack
// pointer into a heap buffer while they run (oneDNN issue 4845), so a signal delivered to a thread inside
// one writes its frame over the heap.
#pragma once

namespace graphrun::runtime::interrupt {

// Call first, before any thread is started: blocks the signals (SIGINT, SIGTERM, SIGUSR1; in an MPI job
// of several ranks SIGUSR1 only; SIGINT or SIGTERM that the process was started ignoring, as a
// background job's SIGINT, stay ignored) in this thread, so in every thread it starts, and starts the
// thread that takes them. Until arm(), a signal does what it would do without graphrun: it ends the
// process.
void take_signals(bool mpi_world);
// From now on the first signal asks to stop (requested()); `announce`: it writes one line to stderr.
void arm(bool announce);
// The number of the first signal asking to stop since arm() or clear(); 0 when none.
int requested();
// Asks to stop as the signal `sig` would (tests; no signal involved).
void request(int sig);
void clear();
// "SIGINT", "SIGTERM", "SIGUSR1", or "a signal".
const char* name(int sig);

}  // namespace graphrun::runtime::interrupt

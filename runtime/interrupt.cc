// Stop requests by signal (runtime/interrupt.h): a thread of its own takes the signals with sigwait, so
// they never interrupt a compute thread. Threads that existed before take_signals() (an MPI library's)
// may still receive one: for them a handler does the same, with async-signal-safe calls only.
#include "runtime/interrupt.h"

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstring>
#include <thread>
#include <vector>

namespace graphrun::runtime::interrupt {
namespace {

std::atomic<int> g_signal{0};
std::atomic<bool> g_armed{false}, g_announce{false}, g_taken{false};
static_assert(std::atomic<int>::is_always_lock_free && std::atomic<bool>::is_always_lock_free);
sigset_t g_set;

void say(const char* s) {
  ssize_t w = write(2, s, std::strlen(s));
  (void)w;
}

// What a signal does, on whichever thread takes it. Before arm(), and the second time, it ends the
// process as the signal's default action would.
void take(int sig) {
  if (!g_armed.load() || g_signal.load()) {
    std::signal(sig, SIG_DFL);
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, sig);
    pthread_sigmask(SIG_UNBLOCK, &one, nullptr);
    raise(sig);
    return;
  }
  g_signal.store(sig);
  if (!g_announce.load()) return;
  // A new line first: the progress bar may hold the terminal's line.
  say("\ngraphrun train: ");
  say(name(sig));
  say(": stopping after the steps under way (send it again to stop at once)\n");
}

void on_signal(int sig) { take(sig); }

}  // namespace

const char* name(int sig) {
  switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGUSR1: return "SIGUSR1";
    default: return "a signal";
  }
}

void take_signals(bool mpi_world) {
  if (g_taken.exchange(true)) return;
  sigemptyset(&g_set);
  std::vector<int> sigs{SIGUSR1};
  if (!mpi_world) sigs = {SIGINT, SIGTERM, SIGUSR1};
  struct sigaction sa, old;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int sig : sigs) {
    // (A signal the process was started ignoring stays ignored: `graphrun train ... &` from a script.)
    if (sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;
    sigaddset(&g_set, sig);
    sigaction(sig, &sa, nullptr);
  }
  pthread_sigmask(SIG_BLOCK, &g_set, nullptr);
  std::thread([] {
    for (;;) {
      int sig = 0;
      if (sigwait(&g_set, &sig) == 0) take(sig);
    }
  }).detach();
}

void arm(bool announce) {
  g_announce.store(announce);
  g_armed.store(true);
}

int requested() { return g_signal.load(); }
void request(int sig) { g_signal.store(sig); }
void clear() { g_signal.store(0); }

}  // namespace graphrun::runtime::interrupt

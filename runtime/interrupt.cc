// Stop requests by signal (runtime/interrupt.h). The handler only records the signal and, once, writes a
// line: both async-signal-safe.
#include "runtime/interrupt.h"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstring>

namespace graphrun::runtime::interrupt {
namespace {

// Lock-free atomics: safe in a signal handler, and read by the replicas' threads without a race.
std::atomic<int> g_signal{0};
std::atomic<bool> g_announce{false};
static_assert(std::atomic<int>::is_always_lock_free && std::atomic<bool>::is_always_lock_free);

void say(const char* s) {
  ssize_t w = write(2, s, std::strlen(s));
  (void)w;
}

void on_signal(int sig) {
  if (g_signal.load()) {
    // A second request: what the signal would have done without graphrun (end the process), now.
    std::signal(sig, SIG_DFL);
    std::raise(sig);
    return;
  }
  g_signal.store(sig);
  if (!g_announce.load()) return;
  // A new line first: the progress bar may hold the terminal's line.
  say("\ngraphrun train: ");
  say(name(sig));
  say(": stopping after the steps under way (send it again to stop at once)\n");
}

}  // namespace

const char* name(int sig) {
  switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGUSR1: return "SIGUSR1";
    default: return "a signal";
  }
}

void install(bool under_mpi, bool announce) {
  g_announce.store(announce);
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // reads of data files and waits carry on; the step loop polls requested()
  if (!under_mpi) {
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
  }
  sigaction(SIGUSR1, &sa, nullptr);
}

int requested() { return g_signal.load(); }
void request(int sig) { g_signal.store(sig); }
void clear() { g_signal.store(0); }

}  // namespace graphrun::runtime::interrupt

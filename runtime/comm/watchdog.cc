// The host's polling wait for device collectives, against the communicator's timeout.
#include "runtime/comm/watchdog.h"

#include <algorithm>
#include <sstream>
#include <thread>

#include "runtime/comm/replica_aborted.h"
#include "runtime/comm/wait.h"

namespace graphrun::runtime {

WatchClock WatchClock::steady() {
  return {[] { return std::chrono::steady_clock::now(); },
          [](std::chrono::microseconds d) { std::this_thread::sleep_for(d); }};
}

void watch_until_done(const std::function<Progress(std::string* why)>& poll, const WatchedWait& w,
                      const std::function<void()>& abort, const WatchClock& clock) {
  constexpr int kQuickPolls = 64;  // work about to finish is seen without a sleep's delay
  // comm_deadline's length (capped for huge timeouts), measured on `clock`.
  const auto deadline = clock.now() + (comm_deadline(w.timeout_s) - std::chrono::steady_clock::now());
  std::chrono::microseconds pause{1};
  for (int i = 0;; ++i) {
    std::string why;
    const Progress p = poll(&why);
    if (p == Progress::Done) return;
    if (p == Progress::Aborted) throw ReplicaAborted(kAnotherReplicaFailed);
    const bool failed = p == Progress::Failed;
    if (!failed && clock.now() <= deadline) {  // still pending: the message is built only on the way out
      if (i >= kQuickPolls) {
        clock.sleep(pause);
        pause = std::min(pause * 2, kMaxPollSleep);
      }
      continue;
    }
    std::ostringstream os;
    os << w.what << " on replica " << w.rank << " of " << w.size << ": ";
    if (failed) os << why;
    else os << "not done within " << w.timeout_s << " s: another replica hung or stopped (raise --comm-timeout if it is only slow)";
    abort();
    throw Error(os.str());
  }
}

Teardown teardown_action(bool aborted, const std::function<Progress(std::string* why)>& poll, double timeout_s,
                         const WatchClock& clock) {
  if (aborted) return Teardown::Nothing;  // no poll either: the communicator is gone
  try {
    watch_until_done(poll, {"teardown", 0, 1, timeout_s}, [] {}, clock);
    return Teardown::Destroy;
  } catch (const ReplicaAborted&) {
    return Teardown::Nothing;
  } catch (...) {  // the watch's Error (failed or timed out), or anything else: never throw from a destructor
    return Teardown::Abort;
  }
}

}  // namespace graphrun::runtime

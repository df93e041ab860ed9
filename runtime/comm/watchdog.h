// The host's wait for collectives that run on a device (NCCL): a polling loop instead of a blocking
// sync, so that a peer that hung, died or failed becomes an error naming the wait instead of a hang.
// No CUDA here: the NCCL communicator supplies the poll (cudaEventQuery + ncclCommGetAsyncError).
#pragma once
#include <chrono>
#include <functional>
#include <string>

namespace graphrun::runtime {

enum class Progress {
  Pending,  // not done yet
  Done,
  Failed,   // an error of this rank (a CUDA error, NCCL's asynchronous error): the poll says why
  Aborted,  // another replica aborted the communicator under this wait
};

struct WatchClock {
  std::function<std::chrono::steady_clock::time_point()> now;
  std::function<void(std::chrono::microseconds)> sleep;
  static WatchClock steady();  // the real clock and sleep
};

// Whose wait, for what, how long: "allreduce on replica 1 of 4".
struct WatchedWait {
  const char* what;
  int rank = 0, size = 1;
  double timeout_s = 60;
};

// The longest sleep between two polls: bounds how late the host notices that the work is done.
constexpr std::chrono::microseconds kMaxPollSleep{200};

// Polls until `poll` says Done (a few quick polls, then sleeps of up to kMaxPollSleep). When it says
// Failed (setting *why), or the timeout passes first, calls `abort` once (ncclCommAbort: the kernels
// still waiting for a peer return) and throws an Error naming the rank, the wait and the reason; when
// it says Aborted, throws ReplicaAborted (an echo: the replica that aborted reports the cause).
void watch_until_done(const std::function<Progress(std::string* why)>& poll, const WatchedWait& w,
                      const std::function<void()>& abort, const WatchClock& clock = WatchClock::steady());

// How a communicator ends (its destructor). ncclCommDestroy waits for the work in flight on the
// communicator, so on one whose peer hung it would hang the process on its way out:
//   Nothing  it was aborted (ncclCommAbort has freed it; destroying it again is a use after free),
//            before the call or while the work was being watched (`poll` said Aborted);
//   Destroy  the work in flight finished (`poll` said Done) within timeout_s;
//   Abort    it failed (NCCL's asynchronous error) or did not finish within timeout_s.
enum class Teardown { Nothing, Destroy, Abort };
Teardown teardown_action(bool aborted, const std::function<Progress(std::string* why)>& poll, double timeout_s,
                         const WatchClock& clock = WatchClock::steady());

}  // namespace graphrun::runtime

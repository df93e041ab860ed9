// The host's waits on a GPU: blocking, or, while an NCCL communicator uses the GPU, through that
// communicator's watcher (a polling wait against --comm-timeout that checks NCCL's asynchronous
// errors), so that work stuck behind a collective whose peer hung or failed becomes an error.
#pragma once
#include <cuda_runtime.h>

namespace graphrun::runtime::cuda {

struct DeviceContext;

class HostWaitWatcher {
 public:
  virtual ~HostWaitWatcher() = default;
  // Returns once `done` has completed; throws (having aborted its communicator) when it cannot.
  virtual void wait(cudaEvent_t done, const char* what) = 0;
};

// GPU `device`'s watcher from now on (one per GPU: the NCCL communicator of its replica).
void set_host_wait_watcher(int device, HostWaitWatcher* w);
// Back to blocking waits, if w is still the watcher.
void clear_host_wait_watcher(int device, HostWaitWatcher* w);

// Waits for `done` (an event of GPU `device`); `what` names the wait in the watcher's error.
void host_wait_event(int device, cudaEvent_t done, const char* what);
// Waits for everything enqueued on dc's compute stream so far.
void host_wait_stream(DeviceContext& dc, const char* what);

}  // namespace graphrun::runtime::cuda

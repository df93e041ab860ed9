// The communicator interface AllReduce nodes run on: one object per replica (its rank's view of the group).
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "graph/error.h"
#include "runtime/comm/wait.h"

namespace graphrun::runtime {

class ProfileTrack;

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // In place, blocking: every rank ends with the elementwise sum over ranks of `data`.
  virtual void allreduce_sum(float* data, int64_t count) = 0;
  // The same sum of f64 values (a float64 model, `graphrun train --float64`), blocking, in the same fixed
  // order as the f32 sum (bitwise repeatable). Only the CPU communicators (in-process and MPI) have it;
  // the others fail with one line.
  virtual void allreduce_sum_f64(double* data, int64_t count) {
    (void)data, (void)count;
    GR_FAIL("the " << name() << " communicator sums f32 only, not f64");
  }
  // Starts allreduce_sum(data, count) and returns; the returned callable waits for it (throwing its
  // Error) and must be called exactly once. `data` belongs to the operation until then. A rank's
  // operations run in the order it started them, and before any later blocking call of that rank;
  // every rank starts the same sequence. By default the sum is done before this returns.
  virtual std::function<void()> allreduce_sum_async(float* data, int64_t count) {
    allreduce_sum(data, count);
    return [] {};
  }
  // In place, blocking: every rank ends with root's `data`.
  virtual void broadcast(float* data, int64_t count, int root) = 0;
  virtual void barrier() = 0;
  // Another replica failed: ranks waiting in this group's operations (now or later) stop with a
  // ReplicaAborted (runtime/comm/wait.h) instead of waiting forever. The group is unusable afterwards. Any rank's object may call it.
  virtual void abort() {}
  // How long a collective waits for the other ranks (default kDefaultCommTimeout, runtime/comm/wait.h).
  // A rank that waits longer fails with an Error naming the ranks that did not arrive, and aborts the
  // group, so that the others fail too (ReplicaAborted, with the same message) instead of hanging. A setting of the group: any rank's object
  // sets it for all.
  virtual void set_timeout(double seconds) = 0;
  virtual std::string name() const = 0;  // "cpu-shared-memory", "nccl", "mpi"
  // --profile: the blocking allreduce_sum records where its time goes on `track` (this rank's
  // thread's track; null: off), as events of category "comm" inside the AllReduce kernel's:
  // "wait for replicas" (in-process peers arriving), "wait for ranks" (other MPI ranks arriving:
  // they are still computing, so this is load imbalance, not communication), "sum", "transfer"
  // (MPI messages) and "copy" (the sum copied to the other local replicas). Default: nothing recorded.
  virtual void set_profile(ProfileTrack* track) {}
};

}  // namespace graphrun::runtime

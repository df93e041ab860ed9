// The communicator interface AllReduce nodes run on: one object per replica (its rank's view of the group).
#pragma once
#include <cstdint>
#include <string>

namespace graphrun::runtime {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // In place, blocking: every rank ends with the elementwise sum over ranks of `data`.
  virtual void allreduce_sum(float* data, int64_t count) = 0;
  // In place, blocking: every rank ends with root's `data`.
  virtual void broadcast(float* data, int64_t count, int root) = 0;
  virtual void barrier() = 0;
  virtual std::string name() const = 0;  // "cpu-shared-memory", "nccl", "mpi"
};

}  // namespace graphrun::runtime

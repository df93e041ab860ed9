// Telling a replica's own failure from its echoes: what a rank throws when another replica's abort
// stopped it, and the rule that picks the error to report.
#pragma once
#include <exception>

#include "graph/error.h"

namespace graphrun::runtime {

// What a rank throws when it stops only because another replica's failure (or timeout) aborted its
// group under it: an echo, never the cause. Its message is the group's abort reason.
struct ReplicaAborted : Error {
  using Error::Error;
};

// The error to report when several replicas fail: the first one that is not a ReplicaAborted; an
// echo only when no replica gave a cause. Not synchronised: the caller holds its lock.
class FirstFailure {
 public:
  void offer(std::exception_ptr e);
  std::exception_ptr get() const { return first_; }
  void clear() { first_ = nullptr, echo_ = false; }

 private:
  std::exception_ptr first_;
  bool echo_ = false;  // first_ is a ReplicaAborted
};

}  // namespace graphrun::runtime

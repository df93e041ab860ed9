// The first failure that is not an echo of another replica's abort.
#include "runtime/comm/replica_aborted.h"

namespace graphrun::runtime {

namespace {

bool is_echo(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const ReplicaAborted&) {
    return true;
  } catch (...) {
    return false;
  }
}

}  // namespace

void FirstFailure::offer(std::exception_ptr e) {
  if (!e || (first_ && !echo_)) return;
  const bool echo = is_echo(e);
  if (first_ && echo) return;
  first_ = std::move(e);
  echo_ = echo;
}

}  // namespace graphrun::runtime

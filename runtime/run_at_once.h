// Fan-out for the few places that run one piece of work per replica or copy at once, on threads of
// their own, and must not lose an error: evaluation's shares (trainer_evaluate.cc) and plan's timed
// copies (plan.cc).
#pragma once
#include <exception>
#include <thread>
#include <vector>

namespace graphrun::runtime {

// Runs body(i) for every i in [0, n) at once: i = 0 on the calling thread, the others on a thread
// each. Returns when all have ended; then rethrows the error of the lowest i that threw, if any.
template <class F>
void run_at_once(int n, F&& body) {
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n > 0 ? n : 0));
  auto guarded = [&](int i) {
    try {
      body(i);
    } catch (...) {
      errors[static_cast<size_t>(i)] = std::current_exception();
    }
  };
  std::vector<std::thread> others;
  for (int i = 1; i < n; ++i) others.emplace_back(guarded, i);
  if (n > 0) guarded(0);
  for (auto& t : others) t.join();
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace graphrun::runtime

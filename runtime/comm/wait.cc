// The timeout of collective waits: deadlines and the message naming the ranks that never arrived.
#include "runtime/comm/wait.h"

#include <sstream>

namespace graphrun::runtime {

const char* const kAnotherReplicaFailed = "another replica failed; stopping";

std::chrono::steady_clock::time_point comm_deadline(double seconds) {
  const auto now = std::chrono::steady_clock::now();
  constexpr double kYear = 365.0 * 24 * 3600;  // beyond it, as good as forever (and no overflow)
  if (!(seconds < kYear)) return now + std::chrono::hours(24 * 365);
  return now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                   std::chrono::duration<double>(seconds > 0 ? seconds : 0));
}

std::string missing_ranks_message(const char* what, const std::vector<bool>& here, double seconds) {
  std::vector<int> missing;
  for (int r = 0; r < static_cast<int>(here.size()); ++r)
    if (!here[r]) missing.push_back(r);
  const bool one = missing.size() == 1;
  std::ostringstream os;
  os << what << ": replica" << (one ? " " : "s ");
  for (size_t i = 0; i < missing.size(); ++i) os << (i ? ", " : "") << missing[i];
  os << " of " << here.size() << " did not arrive within " << seconds << " s: " << (one ? "it" : "they")
     << " hung or stopped (raise --comm-timeout if " << (one ? "it is" : "they are") << " only slow)";
  return os.str();
}

}  // namespace graphrun::runtime

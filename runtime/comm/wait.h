// How long a rank waits in a collective for the others, and the error it gives when they do not come:
// a replica that hangs or died turns into a message naming it instead of a hang.
#pragma once
#include <chrono>
#include <string>
#include <vector>

namespace graphrun::runtime {

constexpr double kDefaultCommTimeout = 60;  // seconds; graphrun train --comm-timeout
// What a rank waiting in (or entering) a collective of an aborted group is told.
extern const char* const kAnotherReplicaFailed;

// The moment a wait of `seconds` that starts now ends (far in the future for huge or infinite ones).
std::chrono::steady_clock::time_point comm_deadline(double seconds);

// "allreduce: replica 2 of 4 did not arrive within 60 s; ...": `here` says which ranks did.
std::string missing_ranks_message(const char* what, const std::vector<bool>& here, double seconds);

}  // namespace graphrun::runtime

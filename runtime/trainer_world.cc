// The trainer as one rank of an MPI job (runtime/comm/mpi.h): where this rank's replicas sit among all
// replicas, their communicators, parameters broadcast from rank 0, and figures summed over ranks.
#include <cstring>
#include <sstream>

#include "runtime/checkpoint.h"
#include "runtime/comm/mpi.h"
#include "runtime/trainer_parts.h"

namespace graphrun::runtime {

bool Trainer::speaks() const { return mpi::rank() == 0; }

// Collective: every rank tells the others how many replicas it has (and on which devices).
void Trainer::setup_world() {
  const auto& devs = opts_.pipeline.devices;
  const int local = static_cast<int>(devs.size());
  first_replica_ = 0;
  total_replicas_ = local;
  world_devices_ = devices_str(devs);
  if (!mpi::active() || mpi::size() == 1) return;
  std::string mine = std::to_string(local);
  for (const Device& d : devs) mine += " " + d.str();
  const std::vector<std::string> all = mpi::allgather(mine);
  total_replicas_ = 0;
  world_devices_ = "[";
  for (int r = 0; r < static_cast<int>(all.size()); ++r) {
    const int n = std::stoi(all[r]);
    if (r == mpi::rank()) first_replica_ = total_replicas_;
    total_replicas_ += n;
    size_t at = all[r].find(' ');
    while (at != std::string::npos) {
      const size_t next = all[r].find(' ', at + 1);
      world_devices_ += (world_devices_.size() > 1 ? ", rank" : "rank") + std::to_string(r) + ":" +
                        all[r].substr(at + 1, next == std::string::npos ? std::string::npos : next - at - 1);
      at = next;
    }
  }
  world_devices_ += "]";
}

void Trainer::check_world_agrees(const Graph& model) {
  if (!mpi::active() || mpi::size() == 1) return;
  // What the ranks must share for one job: every setting of run_settings, one line each (the devices,
  // threads, paths and logging may differ by rank).
  std::string mine;
  for (const RunSetting& s : run_settings(opts_, model)) mine += s.flag + " " + s.value + "\n";
  const std::vector<std::string> all = mpi::allgather(mine);
  for (int r = 1; r < static_cast<int>(all.size()); ++r) {
    if (all[r] == all[0]) continue;
    // The first setting that differs, rank r's and rank 0's.
    std::istringstream a(all[0]), b(all[r]);
    std::string ours, theirs;
    while (std::getline(a, ours) && std::getline(b, theirs) && ours == theirs) {
    }
    GR_FAIL("rank " << r << " does not run what rank 0 runs: " << theirs << " against rank 0's " << ours
                    << " (every rank trains the same model with the same settings)");
  }
}

std::vector<std::unique_ptr<Communicator>> Trainer::world_communicators() {
  const auto& devs = opts_.pipeline.devices;
  if (total_replicas_ == static_cast<int>(devs.size())) return backend_->make_communicators(devs);
  return backend_->make_world_communicators(devs, first_replica_, total_replicas_,
                                            [](void* p, size_t n) { mpi::broadcast_bytes(p, n, 0); });
}

// DDP's rule: every replica starts from rank 0's state (bytes, so any dtype).
void Trainer::broadcast_states(const std::vector<std::string>& names) {
  if (!mpi::active() || mpi::size() == 1) return;
  for (const std::string& name : names) {
    Tensor t = to_host(replica(0).state(name));
    mpi::broadcast_bytes(t.raw(), t.nbytes(), 0);
    for (int d = 0; d < replicas(); ++d) replica(d).set_state(name, t);
  }
}

void Trainer::sum_over_ranks(double& loss, int64_t& correct, int64_t& images) const {
  if (!mpi::active() || mpi::size() == 1) return;
  double v[3] = {loss, static_cast<double>(correct), static_cast<double>(images)};
  mpi::sum_in_rank_order(v, 3, "the epoch's figures");
  loss = v[0];
  correct = static_cast<int64_t>(v[1] + 0.5);
  images = static_cast<int64_t>(v[2] + 0.5);
}

std::string Trainer::world_devices_str() const { return world_devices_; }

}  // namespace graphrun::runtime

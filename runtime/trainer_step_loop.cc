// The step loop: every replica, on its own thread, for each batch of a segment: shard, step, and read
// the figures of the step before (a device has the next step queued by then; on the CPU the read is
// free). Replicas meet only in their AllReduce nodes and, a step behind, where they agree to stop.
#include <chrono>
#include <cmath>
#include <tuple>

#include "runtime/checkpoint.h"
#include "runtime/comm/communicator.h"
#include "runtime/comm/mpi.h"
#include "runtime/comm/replica_aborted.h"
#include "runtime/interrupt.h"
#include "runtime/trainer_parts.h"

namespace graphrun::runtime {

void Trainer::worker_loop(int d) {
  int64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [&] { return quit_ || generation_ != seen; });
      if (quit_) return;
      seen = generation_;
    }
    try {
      run_steps(*replicas_[d]);
    } catch (...) {
      replica_failed(std::current_exception());
    }
    {
      std::lock_guard<std::mutex> l(mu_);
      ++done_;
    }
    cv_.notify_all();
  }
}

// The first replica to fail records its error before it releases the others (aborting the
// communicators, waking peers_allow), so what they throw afterwards (ReplicaAborted) is never taken for
// the cause. A collective that times out aborts its group itself, before the replica that timed out
// gets here: a replica woken by that abort may arrive first with its ReplicaAborted, which then gives
// way to the cause (the ranks that did not arrive) when it comes.
void Trainer::replica_failed(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> l(peers_mu_);
    failure_.offer(std::move(error));
    failed_ = true;
  }
  for (auto& c : comms_) c->abort();
  peers_cv_.notify_all();
}

void Trainer::run_steps(Replica& r) {
  const int64_t B = opts_.batch_size, N = train_src_->size();
  const bool stateful = graphs_.replicas[r.rank].graph.is_input(graphs_.step);
  r.feed->begin_epoch(order_, order_gen_, cur_epoch_, seg_begin_);
  int64_t pending = -1;  // the step whose figures are in flight
  for (int64_t s = seg_begin_; s < seg_end_; ++s) {
    if (r.profile) r.profile->set_recording(opts_.profiler->records_step(step_base_ + s + 1));  // --profile-steps
    {
      ProfileScope wait(r.profile, "wait for peers", "wait");
      if (!peers_allow(r.rank, s)) break;
    }
    if (r.rank == 0) poll_stop(s);
    if (step_base_ + s >= stop_at_.load()) break;
    ProfileScope step(r.profile, "step", "phase");
    const int64_t b = std::min(B, N - s * B);
    const data::Shards sh = data::shard(b, total_replicas_);
    const int g = first_replica_ + r.rank;  // this replica's shard among all ranks' replicas
    const int64_t n = sh.size[g];
    if (r.rank == 0) mpi::note_step(step_base_ + s + 1);
    std::map<std::string, Tensor> in = step_inputs(s, n, b, stateful);
    {
      ProfileScope feeding(r.profile, "data", "data");
      r.feed->shard(s * B + sh.begin[g], n, in);
    }
    auto out = r.exec->run(in);
    // Row s % 2 was last written by step s-2, whose figures were read in the previous iteration.
    r.figures->post(static_cast<int>(s % 2), {&out.at(loss_f32_), &out.at(correct_)});
    // Step s is queued behind step s-1: reading s-1 now leaves the device busy while the host waits.
    const bool ok = pending < 0 || read_figures(r, pending);
    pending = s;
    if (!ok) break;
  }
  if (pending >= 0) read_figures(r, pending);  // the last step in flight (after a divergence too: it ran)
}

std::map<std::string, Tensor> Trainer::step_inputs(int64_t s, int64_t n, int64_t b, bool stateful) const {
  std::map<std::string, Tensor> in{
      {graphs_.loss_scale, loss_scale_value(graphs_.training, graphs_.loss_scale, n, b)},
      {graphs_.lr, Tensor::scalar<float>(static_cast<float>(learning_rate(opts_.schedule, step_base_ + s)))}};
  if (stateful) in[graphs_.step] = Tensor::scalar<int64_t>(step_base_ + s);
  return in;
}

// Step s's figures, once its row has landed: false (and the step noted) when its loss is not finite.
bool Trainer::read_figures(Replica& r, int64_t s) {
  const float* row = r.figures->read(static_cast<int>(s % 2));
  const double loss = row[0], correct = row[1];
  const bool ok = std::isfinite(loss);
  if (ok) {
    const int64_t n = data::shard(std::min(opts_.batch_size, train_src_->size() - s * opts_.batch_size), total_replicas_).size[first_replica_ + r.rank];
    r.loss_sum += loss * n;
    if (s < static_cast<int64_t>(r.step_loss.size())) r.step_loss[s] = loss * n;
    r.correct += static_cast<int64_t>(correct);
    r.images += n;
    if (r.rank == 0) progress_.store(s + 1, std::memory_order_relaxed);
    r.steps_done.store(s + 1, std::memory_order_release);
  } else {
    if (!r.diverged_step) r.diverged_step = step_base_ + s + 1;
    int64_t cur = diverged_at_.load();
    while (s < cur && !diverged_at_.compare_exchange_weak(cur, s)) {
    }
  }
  {
    std::lock_guard<std::mutex> l(peers_mu_);
    r.read = s + 1;  // after diverged_at_: a peer that sees this read also sees the divergence
  }
  peers_cv_.notify_all();
  return ok;
}

// Replicas run ahead of what they have read, so one that finds a non-finite loss at step s has already
// run (or, on a device, queued) step s+1. Every replica must run the same steps (each has collectives
// the others wait for), so all stop after s+1: step t starts only once every replica has read the steps
// before t-1, and not when one of those diverged. The wait is on the other replicas' threads, a step
// behind, never on a device.
bool Trainer::peers_allow(int d, int64_t t) {
  if (replicas() == 1 || t < seg_begin_ + 2) return true;
  std::unique_lock<std::mutex> l(peers_mu_);
  peers_cv_.wait(l, [&] {
    if (failed_) return true;
    for (int e = 0; e < replicas(); ++e)
      if (e != d && replicas_[e]->read.load() < t - 1) return false;
    return true;
  });
  if (failed_) throw ReplicaAborted("another replica failed");
  return diverged_at_.load() > t - 2;
}

// A stop on request (runtime/interrupt.h), decided by replica 0 before step s. Every replica must run
// the same steps, so the others learn the decision before they could pass the step it names: alone,
// replica 0 stops at s itself; with local peers, at s + 2 (or the segment's end, where all stop
// anyway), which a peer reaches only through peers_allow, after replica 0 has read step s's figures
// and so after this decision. Under MPI the ranks vote (mpi::stop_vote): every rank's replica 0 takes
// at step s the result of the vote all posted at the step before (in this segment or an earlier one;
// stop_between_epochs takes the last of an epoch), so every rank decides alike at the same s.
void Trainer::poll_stop(int64_t s) {
  if (stop_at_.load() != INT64_MAX) return;
  int sig = interrupt::requested();
  if (mpi::active() && mpi::size() > 1) sig = mpi::stop_vote(sig, true);
  if (!sig) return;
  stop_signal_ = sig;
  stop_at_ = step_base_ + (replicas() == 1 ? s : std::min(s + 2, seg_end_));
}

// Runs steps [begin, end) of the current epoch on every replica; the main thread meanwhile draws the
// progress bar and the --log-every lines. Adds the segment's wall time to `seconds`.
void Trainer::run_segment(int epoch, int64_t begin, int64_t end, double& seconds) {
  const int D = replicas();
  seg_begin_ = begin;
  seg_end_ = end;
  for (auto& r : replicas_) r->read = begin;  // before any replica starts: peers_allow reads them
  diverged_at_ = INT64_MAX;
  failed_ = false;
  failure_.clear();
  auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  {
    std::lock_guard<std::mutex> l(mu_);
    done_ = 0;
    ++generation_;
  }
  cv_.notify_all();
  {
    std::unique_lock<std::mutex> l(mu_);
    while (!cv_.wait_for(l, std::chrono::milliseconds(200), [&] { return done_ == D; })) {
      l.unlock();
      if (opts_.log_every > 0) log_steps(-1);
      draw_progress(epoch, progress_.load(), seconds + elapsed());
      l.lock();
    }
  }
  seconds += elapsed();
  clear_progress();

  int64_t diverged = 0;
  for (auto& r : replicas_)
    if (r->diverged_step && (!diverged || r->diverged_step < diverged)) diverged = r->diverged_step;
  if (diverged) {
    std::string msg = "training diverged: the loss is not finite at step " + std::to_string(diverged) + " (epoch " +
                      std::to_string(epoch + 1) + "); lower --lr";
    if (!opts_.checkpoint_dir.empty()) {
      const std::string last = latest_checkpoint(opts_.checkpoint_dir);
      msg += last.empty() ? "; no checkpoint was written before it" : "; the last good checkpoint is " + last;
    }
    throw DivergedError(msg, diverged);
  }
  if (failed_) {
    // The communicators are aborted: a trainer that failed cannot continue.
    std::string why = "a replica stopped";
    try {
      if (failure_.get()) std::rethrow_exception(failure_.get());
    } catch (const std::exception& e) {
      why = e.what();
    } catch (...) {
    }
    GR_FAIL("training failed in epoch " << epoch + 1 << ": " << why);
  }
  if (opts_.log_every > 0) log_steps(end);
}

void Trainer::sync_running_stats() {
  // DDP broadcasts buffers from rank 0; so do we, once per epoch (replica 0's statistics are the
  // ones evaluated and saved either way).
  for (const auto& [_, init] : bn_updates_)
    for (int d = 1; d < replicas(); ++d) replica(d).set_state(init, replica(0).state(init));
  std::vector<std::string> names;
  for (const auto& [_, init] : bn_updates_) names.push_back(init);
  broadcast_states(names);  // and from rank 0 to the other ranks
}

}  // namespace graphrun::runtime

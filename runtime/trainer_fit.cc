// fit() and train_epoch(), as d2l's `train`: for each epoch, for each batch (on every replica, in
// segments between checkpoints): shard, step, read the figures; then evaluate, report, checkpoint.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "graph/onnx_io.h"
#include "graph/passes/train_mode.h"
#include "runtime/checkpoint.h"
#include "runtime/comm/mpi.h"
#include "runtime/interrupt.h"
#include "runtime/trainer_parts.h"

namespace graphrun::runtime {

std::vector<EpochStats> Trainer::fit() {
  report_start();
  const int first_epoch = resume();
  std::vector<EpochStats> all;
  if (first_epoch >= opts_.epochs) {
    // (--metrics keeps the lines of the run that did the epochs.)
    if (opts_.log) *opts_.log << "nothing left to train: all " << opts_.epochs << " epochs are done" << std::endl;
    if (!opts_.save_path.empty() && speaks()) save(opts_.save_path);
    return all;
  }
  std::ofstream metrics;
  if (!opts_.metrics_path.empty() && speaks()) {
    // A resumed run keeps the lines of the epochs its checkpoint has done (the run that did them wrote
    // them), and writes the rest: the file reads as the uninterrupted run's.
    std::vector<std::string> kept;
    if (first_epoch > 0 || resume_epoch_ >= 0) {
      std::ifstream old(opts_.metrics_path);
      for (std::string line; std::getline(old, line);) {
        const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
        if (j.is_object() && j.contains("epoch") && j["epoch"].is_number_integer() && j["epoch"].get<int64_t>() >= 1 &&
            j["epoch"].get<int64_t>() <= first_epoch)
          kept.push_back(line);
      }
    }
    metrics.open(opts_.metrics_path, std::ios::trunc);
    GR_CHECK(metrics, "--metrics: cannot open '" << opts_.metrics_path << "' for writing");
    for (const std::string& line : kept) metrics << line << "\n";
    metrics.flush();
  }
  for (int e = first_epoch; e < opts_.epochs; ++e) {
    EpochStats st = train_epoch(e);
    if (stop_at_.load() < step_base_ + steps_) stop_on_request(e, stop_at_.load() - step_base_, true);
    // The epoch's line and metrics before its checkpoint: a run ended between them (a closed pipe, a
    // kill) resumes from the epoch before and writes them again, where the other order left a resumed
    // --metrics without the epoch's line.
    all.push_back(st);
    report_epoch(st);
    if (metrics.is_open()) write_metrics(metrics, st);
    if (!opts_.checkpoint_dir.empty()) save_checkpoint(e + 1, 0);
    if (stop_between_epochs() && e + 1 < opts_.epochs) stop_on_request(e + 1, 0, false);
  }
  report_end(all);
  if (!opts_.save_path.empty() && speaks()) {
    save(opts_.save_path);
    if (opts_.log) *opts_.log << "saved the trained model to " << opts_.save_path << std::endl;
  }
  return all;
}

EvalStats Trainer::evaluate_only() {
  std::ofstream metrics;
  if (!opts_.metrics_path.empty() && speaks()) {
    metrics.open(opts_.metrics_path, std::ios::trunc);
    GR_CHECK(metrics, "--metrics: cannot open '" << opts_.metrics_path << "' for writing");
  }
  const EvalStats st = evaluate_stats();
  if (speaks()) report_evaluation(st);
  if (metrics.is_open()) write_eval_metrics(metrics, st);
  return st;
}

EpochStats Trainer::train_epoch(int epoch) {
  double seconds = 0;
  const int64_t first = begin_epoch(epoch, seconds);
  // With --checkpoint-every the epoch runs in segments that end on multiples of it (global steps).
  for (int64_t begin = first; begin < steps_;) {
    int64_t end = steps_;
    if (opts_.checkpoint_every > 0 && !opts_.checkpoint_dir.empty()) {
      const int64_t g = step_base_ + begin, k = opts_.checkpoint_every;
      end = std::min(steps_, begin + (k - g % k));
    }
    // Under MPI the --log-every lines need every rank's losses: the ranks gather them where a segment
    // ends, so segments end at the blocks' ends (of the epoch's steps).
    if (opts_.log_every > 0 && mpi::active() && mpi::size() > 1)
      end = std::min(end, begin + (opts_.log_every - begin % opts_.log_every));
    run_segment(epoch, begin, end, seconds);
    const int64_t stop = stop_at_.load() - step_base_;
    if (stop <= end && stop < steps_) {
      // Stopped on request before the epoch's end: fit() writes the checkpoint of where it stopped.
      global_step_ = step_base_ + stop;
      epoch_seconds_ = seconds;
      return {};
    }
    global_step_ = step_base_ + end;
    epoch_seconds_ = seconds;
    if (end < steps_ && opts_.checkpoint_every > 0 && !opts_.checkpoint_dir.empty() &&
        (step_base_ + end) % opts_.checkpoint_every == 0)
      save_checkpoint(epoch, end);
    begin = end;
  }
  global_step_ = step_base_ + steps_;
  sync_running_stats();
  EpochStats st = epoch_stats(epoch, seconds);
  const EvalStats ev = evaluate_stats();
  st.test_acc = ev.accuracy;
  st.test_loss = ev.loss;
  st.test_top5 = ev.top5;
  if (mse()) st.test_mse = ev.loss;
  return st;
}

// After an epoch: the signal of a stop request (0: none). Under MPI the ranks agree (the last vote of
// the epoch's steps, then one more that every rank waits for here), so all stop or none.
int Trainer::stop_between_epochs() {
  if (stop_at_.load() != INT64_MAX) return stop_signal_;
  int sig = interrupt::requested();
  if (mpi::active() && mpi::size() > 1) {
    const int last = mpi::stop_vote(sig, true);  // the epoch's last step's vote; this one if none was pending
    sig = last ? last : mpi::stop_vote(0, false);
  }
  if (sig) stop_signal_ = sig;
  return sig;
}

// Ends fit() after a stop request, at `step` of 0-based `epoch` (mid_epoch: where the steps stopped; else
// at the start of `epoch`, its predecessor done and checkpointed): the checkpoint, then the error that
// graphrun train reports (exit 128 + the signal).
void Trainer::stop_on_request(int epoch, int64_t step, bool mid_epoch) {
  const int sig = stop_signal_.load();
  std::string ck;
  if (!opts_.checkpoint_dir.empty() && mid_epoch) ck = save_checkpoint(epoch, step);
  if (!opts_.checkpoint_dir.empty() && !mid_epoch) ck = latest_checkpoint(opts_.checkpoint_dir);
  std::ostringstream os;
  os << "stopped by " << interrupt::name(sig);
  if (mid_epoch)
    os << " at step " << global_step_ << " (epoch " << epoch + 1 << ", step " << step << " of " << steps_ << ")";
  else
    os << " after epoch " << epoch << " of " << opts_.epochs << " (step " << global_step_ << ")";
  if (!ck.empty())
    os << ": wrote the checkpoint " << ck << "; run the same command with --resume to continue from it";
  else
    os << ": nothing saved (with --checkpoint-dir DIR a stopped run can be resumed)";
  if (!opts_.save_path.empty()) os << "; --save is written when training ends, so " << opts_.save_path << " was not";
  throw InterruptedError(os.str(), sig, global_step_);
}

// The epoch's order and steps; returns the step it starts at (after a checkpoint in its middle, the
// steps before it are done: their figures and `seconds` come from the checkpoint).
int64_t Trainer::begin_epoch(int epoch, double& seconds) {
  const int64_t N = train_src_->size(), B = opts_.batch_size;
  order_ = data::epoch_order(N, opts_.seed, epoch);
  ++order_gen_;
  int64_t steps = (N + B - 1) / B;
  if (N - (steps - 1) * B < total_replicas_) --steps;  // a last batch too small to give every replica an example
  if (opts_.max_steps > 0) steps = std::min(steps, opts_.max_steps);
  steps_ = steps;
  int64_t first = 0;
  if (epoch == resume_epoch_) first = std::min(resume_step_, steps);
  resume_epoch_ = -1;
  step_base_ = global_step_ - first;
  cur_epoch_ = epoch;
  progress_ = first;
  logged_ = first;
  const bool resumed = first > 0;
  for (size_t d = 0; d < replicas_.size(); ++d) {
    auto& r = replicas_[d];
    const Figures f = resumed && d < resume_figures_.size() ? resume_figures_[d] : Figures{};
    r->loss_sum = f.loss_sum;
    r->correct = f.correct;
    r->images = f.images;
    r->diverged_step = 0;
    r->step_loss.assign(steps, 0.0);
    r->steps_done = first;
  }
  seconds = resumed ? resume_seconds_ : 0;
  epoch_seconds_ = seconds;
  // A resume in a --log-every block's middle continues its sums (a checkpoint without them, or written
  // with another --log-every: the block's line covers the steps after the resume).
  const bool block = resumed && resume_log_images_ >= 0;
  log_loss_ = block ? resume_log_loss_ : 0;
  log_images_ = block ? resume_log_images_ : 0;
  resume_figures_.clear();
  resume_seconds_ = 0;
  resume_log_images_ = -1;
  return first;
}

EpochStats Trainer::epoch_stats(int epoch, double seconds) const {
  EpochStats st;
  st.epoch = epoch + 1;
  st.steps = steps_;
  st.seconds = seconds;
  st.lr = learning_rate(opts_.schedule, std::max<int64_t>(0, global_step_ - 1));  // the epoch's last step's
  double loss = 0;
  int64_t correct = 0;
  for (const auto& r : replicas_) {
    loss += r->loss_sum;
    correct += r->correct;
    st.images += r->images;
  }
  sum_over_ranks(loss, correct, st.images);
  st.loss = st.images ? loss / st.images : 0;
  st.train_acc = st.images && counts() ? double(correct) / (double(st.images) * positions_) : 0;
  return st;
}

// With --resume: restores the newest checkpoint; returns the epoch to continue in (0 without one).
int Trainer::resume() {
  if (!opts_.resume) return 0;
  const std::string ck = newest_good_checkpoint(opts_.checkpoint_dir, std::cerr);
  if (mpi::active() && mpi::size() > 1) {
    // Every rank reads its own --checkpoint-dir (a shared one, or copies): they must resume from the same
    // checkpoint, or their replicas would train from different steps.
    const std::string mine = ck.empty() ? std::string("none") : std::filesystem::path(ck).filename().string();
    const std::vector<std::string> all = mpi::allgather(mine);
    for (size_t r = 1; r < all.size(); ++r)
      GR_CHECK(all[r] == all[0], "--resume: rank " << r << " would resume from " << all[r] << " and rank 0 from "
                                     << all[0] << ": every rank needs the same checkpoints (a shared --checkpoint-dir, "
                                        "or copies of rank 0's)");
  }
  if (ck.empty()) {
    if (opts_.log) *opts_.log << "no checkpoint in " << opts_.checkpoint_dir << ": starting from the beginning" << std::endl;
    return 0;
  }
  load_checkpoint(ck);
  const int first = resume_epoch_ < 0 ? opts_.epochs : resume_epoch_;
  if (opts_.log) {
    *opts_.log << "resumed from " << ck << " (epoch " << first + 1 << ", step " << global_step_ << ")" << std::endl;
    for (const std::string& n : resume_notes_) *opts_.log << "resuming with " << n << std::endl;
  }
  return first;
}

Graph Trainer::trained_model() const {
  // The inference form: what evaluation ran, so `graphrun run` on the saved file reproduces the
  // printed test accuracy (a model exported in training mode differs only in BatchNormalization's
  // training_mode and Dropout's; graphrun train turns it back into the training form). A model whose Gradient
  // nodes the load expanded is saved as it was written, its Gradient nodes kept (Graph::as_written).
  const Graph& forward = graphs_.forward.as_written ? *graphs_.forward.as_written : graphs_.forward;
  Graph g = passes::to_inference(forward);
  const auto& st = replicas_.at(0)->exec->states();
  for (auto& [name, t] : g.initializers) {
    auto it = st.find(name);
    if (it != st.end() && it->second.dtype() == t.dtype() && it->second.numel() == t.numel())
      t = (it->second.device().is_cpu() ? it->second : to_host(it->second)).reshaped(t.shape());
  }
  // The class names the class ids stand for (an image folder's, a table's; none for arrays of ids), so that
  // --eval-only numbers a test set as this training did.
  auto& props = g.meta.props;
  props.erase(
      std::remove_if(props.begin(), props.end(), [](const auto& p) { return p.first == data::kClassesMetadataKey; }),
      props.end());
  if (train_src_ && !train_src_->classes().empty())
    props.emplace_back(data::kClassesMetadataKey, data::classes_json(train_src_->classes()));
  return g;
}

void Trainer::save(const std::string& path) const { save_onnx(trained_model(), path); }

}  // namespace graphrun::runtime

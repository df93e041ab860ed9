// Reporting: the progress bar (stderr, on a terminal), the --log-every lines, one line per epoch and
// d2l's closing line (TrainOptions::log), and the --metrics file (one JSON object per epoch).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <iomanip>
#include <ostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "runtime/comm/mpi.h"
#include "runtime/trainer_parts.h"

namespace graphrun::runtime {

namespace {

std::string fmt(double v, int prec) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(prec) << v;
  return os.str();
}

// The metrics hold the digits the file has always held: `decimals` after the point, or (-1) the six
// significant digits of an ostream's default format.
double rounded(double v, int decimals) {
  std::ostringstream os;
  if (decimals >= 0) os << std::fixed << std::setprecision(decimals);
  os << v;
  return std::stod(os.str());
}

bool progress_bar_on(int progress) { return progress == 1 || (progress == -1 && isatty(2)); }

}  // namespace

void Trainer::report_start() const {
  if (!opts_.log) return;
  const bool idx = !train_.images.defined();
  *opts_.log << "training '" << graphs_.forward.name << "' on " << world_devices_str() << " ("
             << threads_ << " thread" << (threads_ > 1 ? "s" : "") << " per replica): " << train_src_->size()
             << " training, " << test_src_->size() << (per_sec_unit_ == "img" ? " test images" : " test examples")
             << ", batch ";
  // A batch larger than the data set trains on the whole set at each step (as torch's DataLoader does).
  const int64_t N = train_src_->size();
  if (opts_.batch_size > N) *opts_.log << N << " (--batch-size " << opts_.batch_size << " is more than the data set)";
  else *opts_.log << opts_.batch_size;
  *opts_.log << ", lr " << opts_.lr << std::endl;
  // Sources other than an MNIST folder with its own test split say where the figures come from.
  if (idx) *opts_.log << "data: " << train_src_->describe() << "; test: " << test_from_ << std::endl;
}

void Trainer::report_epoch(const EpochStats& st) const {
  if (!opts_.log) return;
  const double ips = st.seconds > 0 ? st.images / st.seconds : 0;
  *opts_.log << "epoch " << st.epoch << "/" << opts_.epochs << "  loss " << fmt(st.loss, 4);
  if (mse())
    *opts_.log << "  test mse " << fmt(st.test_mse, 4);
  else if (own_loss())
    *opts_.log << "  test loss " << fmt(st.test_loss, 4);
  else
    *opts_.log << "  train acc " << fmt(st.train_acc, 3) << "  test acc " << fmt(st.test_acc, 3);
  if (st.test_top5 >= 0) *opts_.log << "  top-5 " << fmt(st.test_top5, 3);
  *opts_.log << "  " << fmt(st.seconds, 1) << " sec  " << fmt(ips, ips < 10 ? 1 : 0) << " " << per_sec_unit_ << "/s" << std::endl;
}

void Trainer::report_end(const std::vector<EpochStats>& all) const {
  if (!opts_.log || all.empty()) return;
  double sec = 0;
  for (const auto& st : all) sec += st.seconds;
  if (mse())
    *opts_.log << "test mse: " << fmt(all.back().test_mse, 4);
  else if (own_loss())
    *opts_.log << "test loss: " << fmt(all.back().test_loss, 4);
  else
    *opts_.log << "test acc: " << fmt(all.back().test_acc, 2);
  if (all.back().test_top5 >= 0) *opts_.log << ", top-5: " << fmt(all.back().test_top5, 2);
  *opts_.log << ", " << fmt(sec / all.size(), 1) << " sec/epoch on " << world_devices_str() << std::endl;
}

void Trainer::write_metrics(std::ostream& os, const EpochStats& st) const {
  const double ips = st.seconds > 0 ? st.images / st.seconds : 0;
  nlohmann::ordered_json j;
  j["epoch"] = st.epoch;
  j["steps"] = st.steps;
  j["loss"] = rounded(st.loss, 6);
  if (!own_loss()) {  // (--loss mse keeps its zeros: files have always held them)
    j["train_acc"] = rounded(st.train_acc, 6);
    j["test_acc"] = rounded(st.test_acc, 6);
  }
  if (!mse()) j["test_loss"] = rounded(st.test_loss, 6);
  if (st.test_top5 >= 0) j["test_top5"] = rounded(st.test_top5, 6);
  if (mse()) j["test_mse"] = rounded(st.test_mse, -1);
  if (!train_.images.defined()) j["test_data"] = test_from_;
  j["seconds"] = rounded(st.seconds, 3);
  j["images_per_sec"] = rounded(ips, 1);
  j["lr"] = rounded(st.lr, -1);
  j["devices"] = world_devices_str();
  j["threads"] = threads_;
  os << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << std::endl;  // a name from a file may hold any bytes
  GR_CHECK(os, "--metrics: cannot write '" << opts_.metrics_path << "'");
}

// --eval-only's line: the examples are "images" where the epoch lines count img/s (the model's first
// input is an f32 image), "examples" for any other data (tokens, feature rows), as the epoch lines'
// samples/s.
void Trainer::report_evaluation(const EvalStats& st) const {
  if (!opts_.log) return;
  // What was evaluated: the model, the count and where the examples come from (a held-out share says so).
  const std::string what = " (" + graphs_.forward.name + ", " + std::to_string(st.images) +
                           (per_sec_unit_ == "img" ? " images: " : " examples: ") + test_from_ + ")";
  if (mse())
    *opts_.log << "test mse: " << st.loss << what << "\n";
  else if (own_loss())
    *opts_.log << "test loss: " << fmt(st.loss, 4) << what << "\n";
  else
    *opts_.log << "test acc: " << fmt(st.accuracy, 4) << ", test loss: " << fmt(st.loss, 4)
               << (st.top5 >= 0 ? ", top-5: " + fmt(st.top5, 4) : std::string()) << what << "\n";
  opts_.log->flush();
}

// --eval-only's --metrics: one object, an epoch's keys where they apply (no training figures).
void Trainer::write_eval_metrics(std::ostream& os, const EvalStats& st) const {
  nlohmann::ordered_json j;
  if (mse()) {
    j["test_mse"] = rounded(st.loss, -1);
  } else if (own_loss()) {
    j["test_loss"] = rounded(st.loss, 6);
  } else {
    j["test_acc"] = rounded(st.accuracy, 6);
    j["test_loss"] = rounded(st.loss, 6);
    if (st.top5 >= 0) j["test_top5"] = rounded(st.top5, 6);
  }
  j["test_examples"] = st.images;
  if (!train_.images.defined()) j["test_data"] = test_from_;
  j["devices"] = world_devices_str();
  j["threads"] = threads_;
  os << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << std::endl;  // a name from a file may hold any bytes
  GR_CHECK(os, "--metrics: cannot write '" << opts_.metrics_path << "'");
}

void Trainer::draw_progress(int epoch, int64_t done, double seconds) const {
  if (!progress_bar_on(opts_.progress)) return;
  const int width = 30, fill = static_cast<int>(width * done / std::max<int64_t>(1, steps_));
  const double examples = static_cast<double>(std::min(done * opts_.batch_size, train_src_->size()));
  const double ips = seconds > 0 ? examples / seconds : 0.0;
  std::fprintf(stderr, "\repoch %d/%d [%s%s] %lld/%lld  %.1f s  %.*f %s/s", epoch + 1, opts_.epochs,
               std::string(fill, '=').c_str(), std::string(width - fill, ' ').c_str(), (long long)done,
               (long long)steps_, seconds, ips < 10 ? 1 : 0, ips, per_sec_unit_.c_str());
  std::fflush(stderr);
}

void Trainer::clear_progress() const {
  if (progress_bar_on(opts_.progress)) std::fprintf(stderr, "\r\033[K");
}

// --log-every: the mean loss of every block of log_every steps (of the epoch; a last partial block at
// its end), summed step by step in the global replica order, so that a line does not depend on how the
// replicas are spread over ranks, nor on a resume in the block's middle (the checkpoint holds the open
// block's sums). Under MPI the other ranks' losses come at the segment's end (upto >= 0), where every
// rank calls this (the epoch's segments end at block boundaries there); outside MPI at any time.
void Trainer::log_steps(int64_t upto) {
  const bool ranks = mpi::active() && mpi::size() > 1;
  if (ranks && upto < 0) return;
  // Steps every replica has finished.
  int64_t done = steps_;
  for (auto& r : replicas_) done = std::min<int64_t>(done, r->steps_done.load(std::memory_order_acquire));
  if (upto >= 0) done = std::min(done, upto);
  if (done <= logged_) return;
  // Every replica's loss * examples of the steps [logged_, done), step by step in global replica order.
  std::vector<double> losses;
  for (int64_t s = logged_; s < done; ++s)
    for (auto& r : replicas_) losses.push_back(r->step_loss[s]);
  if (ranks) {
    const std::string mine(reinterpret_cast<const char*>(losses.data()), losses.size() * sizeof(double));
    const std::vector<std::string> all = mpi::allgather(mine, "the --log-every losses");
    const int64_t steps = done - logged_;
    std::vector<std::vector<double>> per_rank;
    size_t replicas = 0;
    for (const std::string& b : all) {
      per_rank.emplace_back(b.size() / sizeof(double));
      std::memcpy(per_rank.back().data(), b.data(), per_rank.back().size() * sizeof(double));
      replicas += per_rank.back().size() / steps;
    }
    losses.clear();
    for (int64_t s = 0; s < steps; ++s)
      for (const auto& v : per_rank) {
        const size_t n = v.size() / steps;
        losses.insert(losses.end(), v.begin() + s * n, v.begin() + (s + 1) * n);
      }
    GR_CHECK(losses.size() == replicas * steps, "--log-every: the ranks' losses do not add up");
  }
  const size_t per_step = losses.size() / (done - logged_);
  const int64_t k = opts_.log_every;
  for (int64_t s = logged_, i = 0; s < done; ++s) {
    for (size_t g = 0; g < per_step; ++g) log_loss_ += losses[i++];
    log_images_ += std::min(opts_.batch_size, train_src_->size() - s * opts_.batch_size);
    const bool last = s + 1 == steps_ && upto == steps_;  // the epoch's last, partial block
    if ((s + 1) % k != 0 && !last) continue;
    if (opts_.log)
      *opts_.log << "step " << step_base_ + s + 1 << "  epoch " << cur_epoch_ + 1 << "  loss "
                 << fmt(log_images_ ? log_loss_ / log_images_ : 0, 4) << "  lr "
                 << learning_rate(opts_.schedule, step_base_ + s) << std::endl;
    log_loss_ = 0;
    log_images_ = 0;
  }
  logged_ = done;
}

}  // namespace graphrun::runtime

// Trainer checkpoints (save, prune, restore: every replica's state and RNG, epoch and step); the file
// format itself is runtime/checkpoint.h's.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>

#include "runtime/checkpoint.h"
#include "runtime/comm/mpi.h"
#include "runtime/device.h"
#include "runtime/trainer_parts.h"

namespace graphrun::runtime {

namespace {

constexpr const char* kFormat = "graphrun-train/1";

std::string replica_key(int d, const std::string& name) { return "replica" + std::to_string(d) + "/" + name; }

// A double exactly, as C99's hexadecimal float ("0x1.8p+3"): strtod reads it back bit for bit.
std::string exact(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%a", v);
  return buf;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

std::string setting_key(const std::string& flag) { return "setting" + flag; }  // "setting--lr"

// The key an older checkpoint (before run_settings) kept a setting under, or "".
const char* legacy_key(const std::string& flag) {
  if (flag == "--optimizer") return "optimizer";
  if (flag == "--batch-size") return "batch_size";
  if (flag == "--seed") return "seed";
  if (flag == "--augment") return "augment";
  return "";
}

const std::string& meta_of(const Checkpoint& ck, const std::string& key, const std::string& path) {
  auto it = ck.meta.find(key);
  GR_CHECK(it != ck.meta.end(), path << ": not a graphrun training checkpoint (no '" << key << "')");
  return it->second;
}

}  // namespace

std::string Trainer::save_checkpoint(int epoch, int64_t step) {
  namespace fs = std::filesystem;
  GR_CHECK(!opts_.checkpoint_dir.empty(), "no checkpoint directory given");
  std::error_code ec;
  fs::create_directories(opts_.checkpoint_dir, ec);
  GR_CHECK(fs::is_directory(opts_.checkpoint_dir),
           "--checkpoint-dir: cannot create directory '" << opts_.checkpoint_dir << "'");
  Checkpoint ck;
  ck.meta["format"] = kFormat;
  ck.meta["model"] = graphs_.forward.name;
  ck.meta["signature"] = shapes_signature(graphs_.forward.initializers);
  ck.meta["replicas"] = std::to_string(total_replicas_);
  // The run's settings (the data order is regenerated from (seed, epoch) over the same training set:
  // data::epoch_order; --augment's draws from (seed, epoch, example)).
  for (const RunSetting& s : run_settings(opts_, graphs_.forward))
    if (s.resume != RunSetting::Resume::Unchecked) ck.meta[setting_key(s.flag)] = s.value;
  ck.meta["train_size"] = std::to_string(train_src_->size());
  ck.meta["epoch"] = std::to_string(epoch);
  ck.meta["step"] = std::to_string(step);
  ck.meta["global_step"] = std::to_string(global_step_);
  // Weights, optimizer buffers and running statistics of replica 0; another replica's tensor only
  // where it differs (BatchNorm statistics between the epoch-end broadcasts).
  // (State in device memory is copied to the host first.)
  auto host_states = [&](int d) {
    std::map<std::string, Tensor> r;
    for (const auto& [name, t] : replica(d).states()) r[name] = host_readable(t);
    return r;
  };
  const std::map<std::string, Tensor> base = host_states(0);
  for (const auto& [name, t] : base) {
    // Never replace a good checkpoint by a diverged state (a loss can stay finite for a step after
    // the weights overflowed).
    if (t.dtype() == DType::F32) {
      const float* p = t.data<float>();
      for (int64_t i = 0, n = t.numel(); i < n; ++i)
        if (!std::isfinite(p[i])) {
          const std::string last = latest_checkpoint(opts_.checkpoint_dir);
          throw DivergedError("training diverged: '" + name + "' is not finite after step " +
                                  std::to_string(global_step_) + "; lower --lr" +
                                  (last.empty() ? std::string() : "; the last good checkpoint is " + last),
                              global_step_);
        }
    }
    ck.tensors[name] = t;
  }
  // Every replica's RNG, from every rank (a collective: all ranks save); the per-replica tensors of
  // this rank's replicas only: those of other ranks are BatchNorm statistics that the epoch-end
  // broadcast overwrites before anything reads them.
  std::string rngs;
  for (int d = 0; d < replicas(); ++d) {
    const std::string st = replica(d).rng_state();
    rngs += std::to_string(st.size()) + ":" + st;
  }
  const std::vector<std::string> all_rngs = mpi::allgather(rngs);
  for (int r = 0, g = 0; r < static_cast<int>(all_rngs.size()); ++r)
    for (size_t at = 0; at < all_rngs[r].size(); ++g) {
      const size_t colon = all_rngs[r].find(':', at);
      const size_t n = std::stoull(all_rngs[r].substr(at, colon - at));
      ck.meta["rng." + std::to_string(g)] = all_rngs[r].substr(colon + 1, n);
      at = colon + 1 + n;
    }
  // Mid-epoch: every replica's figures of the epoch's steps so far (from every rank: a collective),
  // and their seconds, so that the resumed epoch reports what the uninterrupted one does. Written as
  // "figures.<replica>" = "<loss sum> <correct> <examples>", the loss sum exactly.
  if (step > 0) {
    std::string mine;
    for (int d = 0; d < replicas(); ++d) {
      const Replica& r = *replicas_[d];
      mine += exact(r.loss_sum) + " " + std::to_string(r.correct) + " " + std::to_string(r.images) + ";";
    }
    const std::vector<std::string> all = mpi::allgather(mine);
    for (int r = 0, g = 0; r < static_cast<int>(all.size()); ++r)
      for (size_t at = 0, semi; (semi = all[r].find(';', at)) != std::string::npos; at = semi + 1, ++g)
        ck.meta["figures." + std::to_string(g)] = all[r].substr(at, semi - at);
    ck.meta["epoch_seconds"] = exact(epoch_seconds_);
    // The open --log-every block (every rank has its sums: log_steps gathers them).
    if (opts_.log_every > 0 && log_images_ > 0)
      ck.meta["log_block"] = std::to_string(opts_.log_every) + " " + exact(log_loss_) + " " + std::to_string(log_images_);
  }
  for (int d = 1; d < replicas(); ++d)
    for (const auto& [name, t] : host_states(d))
      if (!same_bits(t, base.at(name))) ck.tensors[replica_key(first_replica_ + d, name)] = t;
  const std::string path = (fs::path(opts_.checkpoint_dir) / checkpoint_name(epoch, global_step_)).string();
  if (!speaks()) return path;  // rank 0 writes
  runtime::save_checkpoint(path, ck);

  // Keep the newest few (names sort in (epoch, step) order).
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(opts_.checkpoint_dir, ec)) {
    std::string n = e.path().filename().string();
    if (n.rfind("ckpt-", 0) == 0 && n.size() > 5 && n.substr(n.size() - 5) == ".grck") names.push_back(n);
  }
  std::sort(names.begin(), names.end());
  const int keep = std::max(1, opts_.keep_checkpoints);
  for (size_t i = 0; i + keep < names.size(); ++i) fs::remove(fs::path(opts_.checkpoint_dir) / names[i], ec);
  return path;
}

void Trainer::load_checkpoint(const std::string& path) {
  const Checkpoint ck = runtime::load_checkpoint(path);
  GR_CHECK(meta_of(ck, "format", path) == kFormat,
           path << ": checkpoint format '" << ck.meta.at("format") << "' is not " << kFormat);
  // The run's settings against the checkpoint's, in run_settings' order: those of what is trained must
  // be the same (--float64 before the model's signature, which a float64 copy changes too), the step's
  // may change.
  const std::vector<RunSetting> settings = run_settings(opts_, graphs_.forward);
  std::string may_change;
  for (const RunSetting& s : settings)
    if (s.resume == RunSetting::Resume::MayChange) may_change += (may_change.empty() ? "" : ", ") + s.flag;
  resume_notes_.clear();
  std::string ck_momentum;
  auto compare = [&](const RunSetting& s) {
    auto it = ck.meta.find(setting_key(s.flag));
    if (it == ck.meta.end() && *legacy_key(s.flag)) it = ck.meta.find(legacy_key(s.flag));
    if (it == ck.meta.end() || it->second == s.value) return;  // (an older checkpoint has fewer)
    if (s.flag == "--momentum") ck_momentum = it->second;
    GR_CHECK(s.resume == RunSetting::Resume::MayChange,
             path << ": checkpoint was written with " << s.flag << " " << it->second << ", this run has " << s.value
                  << "; resume with the same settings (only " << may_change << " may change)");
    resume_notes_.push_back(s.flag + " " + s.value + " (the checkpoint's run had " + it->second +
                            (s.flag == "--momentum" && it->second == "0" ? "; its buffers start at zero)" : ")"));
  };
  for (const RunSetting& s : settings) {
    if (s.flag == "model") {
      const std::string sig = shapes_signature(graphs_.forward.initializers);
      const std::string other = ck.meta.count("model") ? ck.meta.at("model") : std::string("?");
      GR_CHECK(meta_of(ck, "signature", path) == sig,
               path << ": checkpoint of another model ('" << other << "', parameter signature " << ck.meta.at("signature")
                    << "; '" << graphs_.forward.name << "' has " << sig << ")");
    } else if (s.resume != RunSetting::Resume::Unchecked) {
      compare(s);
    }
  }
  GR_CHECK(ck.meta.count(setting_key("--optimizer")) || ck.meta.count("optimizer"),
           path << ": not a graphrun training checkpoint (no optimizer)");
  // Another number of replicas (in-process or over MPI ranks) takes replica 0's state for all; a
  // replica without its RNG in the checkpoint keeps its fresh one (only Dropout's masks use it).
  const bool same_world = meta_of(ck, "replicas", path) == std::to_string(total_replicas_);
  const std::string& theirs = meta_of(ck, "train_size", path), mine = std::to_string(train_src_->size());
  GR_CHECK(theirs == mine, path << ": checkpoint was written with training images: " << theirs << ", this run has "
                                << mine << "; resume with the same settings");
  // What is restored: the model's tensors and what training updates (optimizer buffers, running
  // statistics). The other constants (--weight-decay's, --clip-grad-norm's) are this run's settings.
  // Momentum turned on at resume starts its buffers at zero, as a new torch.optim.SGD does.
  std::set<std::string> restored;
  for (const auto& [name, _] : graphs_.forward.initializers) restored.insert(name);
  for (const auto& [_, init] : graphs_.replicas.at(0).state_updates)
    if (ck_momentum != "0" || ck.tensors.count(init)) restored.insert(init);
  auto source = [&](int d, const std::string& name) {
    auto it = same_world ? ck.tensors.find(replica_key(first_replica_ + d, name)) : ck.tensors.end();
    if (it == ck.tensors.end()) it = ck.tensors.find(name);
    return it;
  };
  for (int d = 0; d < replicas(); ++d) {
    Executor& ex = replica(d);
    for (const auto& [name, t] : ex.states()) {
      if (!restored.count(name)) continue;
      auto it = source(d, name);
      GR_CHECK(it != ck.tensors.end(), path << ": checkpoint has no tensor '" << name
                                            << "' (written for another model or optimizer?)");
      GR_CHECK(it->second.dtype() == t.dtype() && it->second.shape() == t.shape(),
               path << ": checkpoint tensor '" << name << "' is " << dtype_name(it->second.dtype())
                    << shape_str(it->second.shape()) << " but the model's is " << dtype_name(t.dtype())
                    << shape_str(t.shape()));
    }
  }
  try {
    for (int d = 0; d < replicas(); ++d) {
      Executor& ex = replica(d);
      std::vector<std::string> names;
      for (const auto& [name, _] : ex.states())
        if (restored.count(name)) names.push_back(name);
      for (const auto& name : names) ex.set_state(name, source(d, name)->second);
      const std::string rng = "rng." + std::to_string(first_replica_ + d);
      if (same_world || ck.meta.count(rng)) ex.set_rng_state(meta_of(ck, rng, path));
    }
    global_step_ = std::stoll(meta_of(ck, "global_step", path));
    const int64_t epoch = std::stoll(meta_of(ck, "epoch", path));
    resume_step_ = std::stoll(meta_of(ck, "step", path));
    check_resume_position(path, epoch, resume_step_, global_step_,
                          (train_src_->size() + opts_.batch_size - 1) / opts_.batch_size);
    // A checkpoint past this run's end belongs to a longer run (a folder reused): refused rather
    // than taken as "nothing left to train".
    GR_CHECK(epoch < opts_.epochs || (epoch == opts_.epochs && resume_step_ == 0),
             path << ": checkpoint "
                  << (resume_step_ ? "in epoch " + std::to_string(epoch + 1) : "at the end of epoch " + std::to_string(epoch))
                  << ", past this run's --epochs " << opts_.epochs
                  << ": resume it with more --epochs, or give this run its own --checkpoint-dir");
    resume_epoch_ = static_cast<int>(epoch);
    // The epoch's figures so far (a checkpoint written before they were kept has none: the resumed
    // epoch then reports its own steps only, as it did). Another number of replicas gets their sum on
    // the job's first replica.
    resume_figures_.assign(replicas(), Figures{});
    resume_seconds_ = 0;
    auto figures = [&](const std::string& v) {
      Figures f;
      char* end = nullptr;
      f.loss_sum = std::strtod(v.c_str(), &end);
      long long c = -1, n = -1;
      int used = 0;
      const bool ok = end && std::sscanf(end, " %lld %lld%n", &c, &n, &used) == 2 && end[used] == '\0' &&
                      std::isfinite(f.loss_sum) && c >= 0 && n >= 0;
      GR_CHECK(ok, path << ": checkpoint is corrupt (bad epoch figures '" << v << "')");
      f.correct = c;
      f.images = n;
      return f;
    };
    for (const auto& [key, v] : ck.meta) {
      if (key.rfind("figures.", 0) != 0) continue;
      const Figures f = figures(v);
      const int g = std::stoi(key.substr(8));
      int d = g - first_replica_;
      if (!same_world) d = first_replica_ == 0 ? 0 : -1;
      if (d < 0 || d >= replicas()) continue;
      resume_figures_[d].loss_sum += f.loss_sum;
      resume_figures_[d].correct += f.correct;
      resume_figures_[d].images += f.images;
    }
    // The open --log-every block's sums, when this run logs blocks of the same length.
    resume_log_images_ = -1;
    if (ck.meta.count("log_block")) {
      const std::string& v = ck.meta.at("log_block");
      long long k = 0, n = -1;
      char loss[64] = {0};
      int used = 0;
      const bool ok = std::sscanf(v.c_str(), "%lld %63s %lld%n", &k, loss, &n, &used) == 3 && v[used] == '\0' && k > 0 && n > 0;
      GR_CHECK(ok, path << ": checkpoint is corrupt (bad log_block '" << v << "')");
      resume_log_loss_ = std::strtod(loss, nullptr);
      GR_CHECK(std::isfinite(resume_log_loss_), path << ": checkpoint is corrupt (bad log_block '" << v << "')");
      if (k == opts_.log_every) resume_log_images_ = n;
    }
    if (ck.meta.count("epoch_seconds")) {
      resume_seconds_ = std::strtod(ck.meta.at("epoch_seconds").c_str(), nullptr);
      if (!std::isfinite(resume_seconds_) || resume_seconds_ < 0) resume_seconds_ = 0;
    }
  } catch (const std::invalid_argument&) {
    GR_FAIL(path << ": checkpoint is corrupt (bad epoch/step)");
  } catch (const std::out_of_range&) {
    GR_FAIL(path << ": checkpoint is corrupt (bad epoch/step)");
  }
  GR_CHECK(global_step_ >= 0 && resume_epoch_ >= 0 && resume_step_ >= 0, path << ": checkpoint is corrupt (negative step)");
}

}  // namespace graphrun::runtime

// The data-parallel trainer, written as d2l's `train`: set up one replica per device; then for each
// epoch, for each batch: shard, step, read the figures; evaluate; report. Its files, by concern:
//   trainer.cc             the training pipeline: the graphs every replica runs
//   trainer_devices.cc     device lists, and setting up the replicas (executor, feed, communicator)
//   trainer_feed.cc        feeding data: the data sets, shards gathered on the host or on the device
//   trainer_step_loop.cc   the step loop every replica runs on its thread, and how replicas stop together
//   trainer_evaluate.cc    evaluation: the metric graph (correct count, summed loss) on the first device
//   trainer_report.cc      reporting: progress bar, --log-every lines, epoch lines, --metrics JSON
//   trainer_checkpoint.cc  checkpoints: save, prune, restore
//   trainer_fit.cc         fit() and train_epoch(): the loop above
// runtime/trainer_parts.h declares what those files share; nothing in them depends on the device kind.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <iosfwd>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "autodiff/autodiff.h"
#include "graph/ir.h"
#include "runtime/comm/replica_aborted.h"
#include "runtime/comm/wait.h"
#include "runtime/data/fit.h"
#include "runtime/data/idx.h"
#include "runtime/executor.h"
#include "runtime/optim/schedule.h"
#include "runtime/pipeline.h"

namespace graphrun::runtime {

// "cpu:N" (N replicas cpu:0..cpu:N-1; "cpu:0" alone is the one device cpu:0), "N" (N CPU replicas),
// "cpu:0,cpu:1", "cuda:0,1", "cuda:0,cuda:1".
// Throws Error for anything else. Does not check that the devices exist.
std::vector<Device> parse_devices(const std::string& spec);
std::string devices_str(const std::vector<Device>& ds);  // "[cpu:0, cpu:1]"
// Fails with one clear line (naming the reason, e.g. built without CUDA, no GPU) unless every device
// is usable here and all are of one kind.
void check_devices_available(const std::vector<Device>& ds);

// Compiles the CPU GEMM's kernels (cpu::warm_up_sgemm) on a thread of its own from construction, so
// that a command's loading and setup hide it rather than its first step; the destructor joins it.
class KernelWarmUp {
 public:
  KernelWarmUp();
  ~KernelWarmUp();
  KernelWarmUp(const KernelWarmUp&) = delete;
  KernelWarmUp& operator=(const KernelWarmUp&) = delete;

 private:
  std::thread thread_;
};

struct TrainOptions {
  PipelineOptions pipeline;
  int64_t batch_size = 256;
  double lr = 0.2;
  int epochs = 10;
  int threads = 0;  // intra-op threads per replica; 0: cores / replicas (at least 1)
  uint64_t seed = 0;
  std::string data_dir = data::kDefaultDataDir;
  int64_t max_steps = 0;      // stop each epoch after this many steps (0: the whole epoch)
  int64_t train_limit = 0;    // use only the first N training examples (0: all)
  int64_t test_limit = 0;     // evaluate on the first N test examples (0: all)
  // Evaluation batch per device. The test set is split into one contiguous share per replica of the
  // whole job (every rank's), each evaluated in batches of this many: small enough that a batch's
  // activations stay in cache.
  int64_t eval_batch = 128;
  std::string metrics_path;   // one JSON object per epoch
  std::string save_path;      // the trained model as ONNX after the last epoch
  std::ostream* log = nullptr;  // epoch lines and the closing line; nullptr: silent
  int progress = -1;            // progress bar on stderr: 1 on, 0 off, -1 when stderr is a terminal
  // The learning rate of each step: schedule.kind, warmup_steps, step_size, gamma, min_lr are used;
  // base_lr is `lr` and a cosine's total_steps is the whole run's (both filled in by the trainer).
  LrSchedule schedule;
  int64_t log_every = 0;        // a loss line (mean over the last N steps' examples) every N steps; 0: none
  // Inputs are (pixels - mean) / std in the data pipeline (training and evaluation).
  bool normalize = false;
  float norm_mean = 0, norm_std = 1;
  // Checkpoints (runtime/checkpoint.h) in checkpoint_dir after every epoch and every
  // checkpoint_every steps; the newest keep_checkpoints are kept. resume: continue from the newest.
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;
  int keep_checkpoints = 3;
  bool resume = false;
  // GPU replicas keep the training and test data resident on each device (one copy per GPU) when it
  // takes at most this many bytes; otherwise each batch is gathered on the host and copied.
  int64_t device_data_budget = int64_t(4) << 30;
  // AllReduce finishes asynchronously, overlapping the rest of the backward pass
  // (ExecOptions::async_kernels): 1 on, 0 off, -1 the default of the devices
  // (DeviceBackend::overlap_allreduce_by_default: on for GPUs, off for CPU replicas).
  int overlap_allreduce = -1;
  // Seconds a replica waits in a collective for the others before training fails naming the missing
  // ones (a replica that hung or died): Communicator::set_timeout.
  double comm_timeout = kDefaultCommTimeout;
  // Data other than an MNIST folder (runtime/data/source.h: --data is recognised from what it points
  // at): test_data, or else a held-out val_split of the training data (< 0: an MNIST folder's t10k
  // split, 0.1 for other sources); the targets array; per-channel normalisation (on top of the
  // single normalize above); --augment's crop and flip on f32 [C,H,W] inputs; loader threads for
  // decode-heavy sources and augmentation (-1: chosen from the cores the replicas leave over).
  std::string test_data;
  bool test_only = false;  // --eval-only: with test_data, only it is opened (no training data is read)
  double val_split = -1;
  std::string labels = data::kLabels;
  std::vector<data::ColumnGroup> columns;  // --columns: a table's columns per model input
  data::Normalize channel_norm;
  bool augment = false;
  int loader_threads = -1;
  // --profile: one track per replica (kernels, waits, data, optimizer, steps) and one for the main
  // thread (evaluation) on this profiler, which the caller owns and writes out; nullptr: off.
  Profiler* profiler = nullptr;
};

// A NaN or Inf training loss: training stopped at `step` (1-based global step); checkpoints on disk
// are those written before it. graphrun train exits with code 3.
struct DivergedError : Error {
  DivergedError(const std::string& msg, int64_t s) : Error(msg), step(s) {}
  int64_t step;
};

// A stop on request (runtime/interrupt.h: Ctrl-C, SIGTERM, SIGUSR1): training stopped after global
// step `step`, with a checkpoint of it where --checkpoint-dir was given. graphrun train exits with
// 128 + signal.
struct InterruptedError : Error {
  InterruptedError(const std::string& msg, int sig, int64_t s) : Error(msg), signal(sig), step(s) {}
  int signal;
  int64_t step;
};

struct EvalStats {
  // Over the test set; loss: mean cross-entropy of the model output (summed in f32 on every device).
  // --loss mse: accuracy is 0 and loss the mean squared error per target element. top5: the share of
  // examples whose label is among the 5 highest scores, when there are more than 10 classes (else -1).
  // --loss output: accuracy is 0 and loss the mean of the model's loss output over the test examples (each
  // batch's output averaged, weighted by its examples).
  double accuracy = 0, loss = 0, top5 = -1;
  int64_t images = 0;
};

struct EpochStats {
  int epoch = 0;         // 1-based
  int64_t steps = 0, images = 0;
  double loss = 0;       // mean training loss over the epoch's examples
  double train_acc = 0;  // from the logits of the training forward passes
  double test_acc = 0;
  double test_loss = 0;   // the mean cross-entropy over the test set (--loss mse: test_mse instead; --loss
                          // output: the model's own loss, train_acc and test_acc 0)
  double test_top5 = -1;  // more than 10 classes only
  double test_mse = -1;   // --loss mse only (test_acc and train_acc are then 0)
  double seconds = 0;    // training steps only (not evaluation), as d2l's timer
  double lr = 0;
};

class Communicator;
class DeviceBackend;
struct FeedOptions;

class Trainer {
 public:
  // A model moved in (`Trainer(std::move(model), ...)`) is not held twice: see the end of the constructor.
  Trainer(Graph model, TrainOptions opts);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Runs all epochs (printing, metrics, saving as the options say); returns their stats.
  std::vector<EpochStats> fit();
  // One epoch of training (and its evaluation); `epoch` is 0-based.
  EpochStats train_epoch(int epoch);
  // Test accuracy of replica 0's weights and running statistics, through the inference graph.
  double evaluate();
  // Test accuracy and mean cross-entropy loss (graphrun train --eval-only).
  EvalStats evaluate_stats();
  // graphrun train --eval-only: evaluate_stats(), then one line on opts.log ("test acc: ..., test loss:
  // ... (N images|examples, MODEL)\n", or "test mse: ..." with --loss mse) and, with opts.metrics_path,
  // one JSON object (the test figures, test_examples, test_data where an epoch has it, devices, threads).
  EvalStats evaluate_only();
  // Writes a checkpoint of the whole training state (every replica's state and RNG, epoch, step)
  // into opts.checkpoint_dir and removes all but the newest keep_checkpoints; returns its path.
  // `epoch` is the 0-based epoch to continue in, `step` the step within it to start at.
  std::string save_checkpoint(int epoch, int64_t step);
  // Restores a checkpoint written by a Trainer of the same model, optimizer, replicas and batch
  // size; throws Error naming the file and the mismatch otherwise.
  void load_checkpoint(const std::string& path);
  int64_t global_step() const { return global_step_; }
  // The learning-rate schedule as the steps use it (base_lr and total_steps filled in).
  const LrSchedule& schedule() const { return opts_.schedule; }
  // The forward model in its inference form (graph/passes/train_mode.h) with the trained weights
  // and running statistics (replica 0's): what --save writes. On CPU replicas its tensors are replica
  // 0's own (no copy of a large model's weights): clone() what must outlive further training.
  Graph trained_model() const;
  void save(const std::string& path) const;

  const TrainingGraphs& graphs() const { return graphs_; }
  Executor& replica(int d);
  int replicas() const { return static_cast<int>(replicas_.size()); }
  int total_replicas() const { return total_replicas_; }  // of the job: every rank's
  int threads_per_replica() const { return threads_; }
  // An MNIST folder's sets as loaded (empty for other sources); every source as the replicas read it.
  const data::Dataset& train_data() const { return train_; }
  const data::Dataset& test_data() const { return test_; }
  const data::SourcePtr& train_source() const { return train_src_; }
  const data::SourcePtr& test_source() const { return test_src_; }
  bool mse() const { return opts_.pipeline.loss == autodiff::LossKind::MSE; }
  // --loss output: the model computes its loss; no labels are fed, and the figures are that loss alone.
  bool own_loss() const { return opts_.pipeline.loss == autodiff::LossKind::Output; }
  // Cross-entropy: class ids, so correct counts and accuracies.
  bool counts() const { return opts_.pipeline.loss == autodiff::LossKind::CrossEntropy; }

 private:
  struct Replica;     // runtime/trainer_parts.h
  struct Evaluation;

  // Setting up (trainer_devices.cc, trainer_feed.cc, trainer_evaluate.cc).
  void check_options();
  void load_data(const Graph& model);
  void set_schedule();
  void check_images_fit(const Graph& model) const;
  FeedOptions feed_options(int d) const;
  void setup_evaluation();
  void setup_replicas();
  void setup_evaluation_parts();
  void check_memory();
  bool f32_images() const;            // the model's images are f32 (resident data is fed as it is)
  size_t resident_data_bytes() const;  // what place_data copies to each device that needs a copy
  void share_evaluation_state();
  const Tensor* evaluation_source(int d, const std::string& name);
  int64_t evaluation_batch();
  int64_t device_evaluation_batch(int64_t batch);
  // The step loop (trainer_step_loop.cc).
  void worker_loop(int d);
  void run_steps(Replica& r);
  std::map<std::string, Tensor> step_inputs(int64_t s, int64_t n, int64_t b, bool stateful) const;
  bool read_figures(Replica& r, int64_t s);
  bool peers_allow(int d, int64_t s);
  void poll_stop(int64_t s);
  int stop_between_epochs();
  [[noreturn]] void stop_on_request(int epoch, int64_t step, bool mid_epoch);
  void replica_failed(std::exception_ptr error);
  void run_segment(int epoch, int64_t begin, int64_t end, double& seconds);
  void sync_running_stats();
  // The epoch (trainer_fit.cc).
  int64_t begin_epoch(int epoch, double& seconds);
  EpochStats epoch_stats(int epoch, double seconds) const;
  int resume();
  // Reporting (trainer_report.cc).
  void report_start() const;
  void report_epoch(const EpochStats& st) const;
  void report_end(const std::vector<EpochStats>& all) const;
  void write_metrics(std::ostream& os, const EpochStats& st) const;
  void report_evaluation(const EvalStats& st) const;
  void write_eval_metrics(std::ostream& os, const EvalStats& st) const;
  void draw_progress(int epoch, int64_t done, double seconds) const;
  void clear_progress() const;
  void log_steps(int64_t upto);

  TrainOptions opts_;
  TrainingGraphs graphs_;
  data::Dataset train_, test_;
  data::SourcePtr train_src_, test_src_;  // fitted to the model (runtime/data/fit.h)
  std::string test_from_;                 // where the test figures come from, in words
  // What the epoch lines count per second: "img" where the model's first input is one image
  // (C,H,W) of floats, "samples" otherwise (token ids, feature rows, volumes).
  std::string per_sec_unit_ = "img";
  int threads_ = 1;
  DeviceBackend* backend_ = nullptr;  // the devices' (one kind per run)
  std::vector<std::unique_ptr<Communicator>> comms_;
  std::vector<std::unique_ptr<Replica>> replicas_;
  std::unique_ptr<Evaluation> eval_;
  std::vector<std::pair<std::string, std::string>> bn_updates_;
  std::string loss_f32_;  // the training graph's loss as read back: f32 (a float64 loss cast by a node)
  std::string correct_;   // the training graph's count of correct predictions (f32 scalar)
  // Class labels per example: 1, or the positions of per-position labels ([T] tokens, [H,W] pixels);
  // accuracy is over labels, not examples.
  int64_t positions_ = 1;

  // Under MPI (runtime/trainer_world.cc) this rank's replicas are the global replicas
  // [first_replica_, first_replica_ + replicas()) of total_replicas_; alone, 0 and replicas().
  int first_replica_ = 0, total_replicas_ = 1;
  // CPU: the memory each replica's first step may take for its activations, what check_memory found free
  // beyond the parameters, gradients and optimizer buffers, shared by this machine's replicas (0: unknown).
  size_t activation_budget_ = 0;
  // On GPUs: the device memory check_memory found left per replica there, by device index (its first run's
  // activations are held to it, counted from their shapes before any kernel runs).
  std::map<int, size_t> device_activation_budget_;
  bool speaks() const;  // rank 0 (or no MPI): prints, writes --metrics, --save and checkpoints
  void setup_world();
  // Under MPI: every rank runs the same model (its parameters' names and shapes) and the same training
  // settings as rank 0, or every rank fails naming the first that differs and how.
  void check_world_agrees(const Graph& model);
  std::vector<std::unique_ptr<Communicator>> world_communicators();
  void broadcast_states(const std::vector<std::string>& names);  // replica 0's on rank 0 to all replicas
  void sum_over_ranks(double& loss, int64_t& correct, int64_t& images) const;  // the epoch's figures
  std::string world_devices_str() const;  // "[cpu:0, cpu:1]", or "[rank0:cpu:0, rank1:cpu:0]" under MPI
  std::string world_devices_;

  // The epoch the replicas run: its order, its steps, the segment [seg_begin_, seg_end_) they run next.
  std::vector<int64_t> order_;
  int64_t order_gen_ = 0;  // bumped with each epoch's order
  int cur_epoch_ = 0;
  int64_t steps_ = 0, step_base_ = 0;
  int64_t steps_per_epoch_ = 0;  // every epoch's steps (set_schedule)
  int64_t seg_begin_ = 0, seg_end_ = 0;
  std::atomic<int64_t> progress_{0};  // steps replica 0 has read
  int64_t logged_ = 0;                // steps of this epoch already reported by --log-every
  double log_loss_ = 0;               // the open --log-every block's loss * examples so far (log_steps)
  int64_t log_images_ = 0;            // and its examples
  int64_t global_step_ = 0;
  int resume_epoch_ = -1;  // after load_checkpoint: the epoch to continue, at resume_step_
  int64_t resume_step_ = 0;
  // The running figures of an epoch's steps so far, per local replica: what a mid-epoch checkpoint
  // holds (with the seconds they took), so that the resumed epoch's line and --metrics are the
  // uninterrupted run's. After load_checkpoint, those of the steps before resume_step_ (empty: none).
  struct Figures {
    double loss_sum = 0;
    int64_t correct = 0, images = 0;
  };
  std::vector<Figures> resume_figures_;
  double resume_log_loss_ = 0;      // the open --log-every block's sums at resume_step_ (examples -1: none kept)
  int64_t resume_log_images_ = -1;
  std::vector<std::string> resume_notes_;  // the step's settings this run changed ("--lr 0.05 (... had 0.1)")
  double resume_seconds_ = 0;
  double epoch_seconds_ = 0;  // the current epoch's training seconds so far (saved in a checkpoint)

  // Segment hand-off between the main thread and the replicas' threads.
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t generation_ = 0;  // bumped to start a segment
  int done_ = 0;
  bool quit_ = false;

  // Replicas read their figures a step late, so they agree where to stop (peers_allow).
  std::mutex peers_mu_;
  std::condition_variable peers_cv_;
  std::atomic<int64_t> diverged_at_{INT64_MAX};  // 0-based step of this epoch, or INT64_MAX
  std::atomic<bool> failed_{false};
  FirstFailure failure_;  // the first replica's error; the others' follow from it

  // A stop on request (runtime/interrupt.h): the global step before which every replica stops
  // (INT64_MAX: none decided; replica 0 decides, poll_stop), and the signal that asked.
  std::atomic<int64_t> stop_at_{INT64_MAX};
  std::atomic<int> stop_signal_{0};
};

}  // namespace graphrun::runtime

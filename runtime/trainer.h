// The data-parallel trainer: Fashion-MNIST (or any MNIST-format data) through replicated training
// graphs, one executor per replica on its own persistent thread, evaluation, metrics, saving.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
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
#include "runtime/comm/cpu_comm.h"
#include "runtime/data/idx.h"
#include "runtime/executor.h"
#include "runtime/optim/schedule.h"
#include "runtime/replicate.h"

namespace graphrun::runtime {

// "cpu:N" (N replicas cpu:0..cpu:N-1; "cpu:0" alone is the one device cpu:0), "N" (N CPU replicas),
// "cpu:0,cpu:1", "cuda:0,1", "cuda:0,cuda:1".
// Throws Error for anything else. Does not check that the devices exist.
std::vector<Device> parse_devices(const std::string& spec);
std::string devices_str(const std::vector<Device>& ds);  // "[cpu:0, cpu:1]"
// Fails with one clear line (naming the reason, e.g. built without CUDA, no GPU) unless every
// device is a CPU: the trainer runs CPU replicas.
void check_devices_available(const std::vector<Device>& ds);

// Appends ArgMax(logits, axis 1) == labels counted as an f32 scalar (exact up to 2^24 examples; CUDA's
// ReduceSum takes f32) to g, so a step reports its accuracy without the logits leaving the device.
// Returns the count's value name.
std::string add_correct_count(Graph& g, const std::string& logits, const std::string& labels);

// Everything derived from a forward model for data-parallel training.
struct TrainingGraphs {
  Graph forward;    // the model as given
  Graph training;   // training form + loss + backward (one replica's loss scaled to the global batch)
  std::vector<DeviceGraph> replicas;
  std::vector<std::string> params;  // trained parameters
  std::string image, logits, labels = "labels", loss = "loss", loss_scale = "loss_scale";
};

struct PipelineOptions {
  std::vector<Device> devices{Device{}};
  autodiff::LossKind loss = autodiff::LossKind::CrossEntropy;
  std::string output;  // the model output the loss reads; default the first
  std::set<std::string> freeze;
  OptimizerOptions optimizer;
  size_t bucket_bytes = size_t(4) << 20;
};

// remove_noops -> to_training -> attach_loss -> backward (seed gradient from the `loss_scale` input) -> replicate.
// The one model input is the images (its batch dimension made symbolic).
// The trained parameters are the float initializers minus BatchNorm running statistics, Dropout
// ratios and `freeze`.
TrainingGraphs build_training_graphs(const Graph& model, const PipelineOptions& opts);

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
  int64_t eval_batch = 1000;
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
  // (ExecOptions::async_kernels): 1 on, 0 off, -1 the default of the devices (see overlap_default).
  int overlap_allreduce = -1;
  // Seconds a replica waits in a collective for the others before training fails naming the missing
  // ones (a replica that hung or died): Communicator::set_timeout.
  double comm_timeout = kDefaultCommTimeout;
};

// Whether AllReduce overlaps the backward pass by default on these replicas: on for GPUs (NCCL on
// its own stream), off for CPU replicas (measured in README: the communication threads compete
// with the replicas for the cores).
bool overlap_default(const std::vector<Device>& devices);

// A NaN or Inf training loss: training stopped at `step` (1-based global step); checkpoints on disk
// are those written before it. graphrun train exits with code 3.
struct DivergedError : Error {
  DivergedError(const std::string& msg, int64_t s) : Error(msg), step(s) {}
  int64_t step;
};

struct EvalStats {
  double accuracy = 0, loss = 0;  // over the test set; loss: mean cross-entropy of the model output
  int64_t images = 0;
};

struct EpochStats {
  int epoch = 0;         // 1-based
  int64_t steps = 0, images = 0;
  double loss = 0;       // mean training loss over the epoch's examples
  double train_acc = 0;  // from the logits of the training forward passes
  double test_acc = 0;
  double seconds = 0;    // training steps only (not evaluation), as d2l's timer
  double lr = 0;
};

class Trainer {
 public:
  Trainer(const Graph& model, TrainOptions opts);
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
  // Writes a checkpoint of the whole training state (every replica's state and RNG, epoch, step)
  // into opts.checkpoint_dir and removes all but the newest keep_checkpoints; returns its path.
  // `epoch` is the 0-based epoch to continue in, `step` the step within it to start at.
  std::string save_checkpoint(int epoch, int64_t step);
  // Restores a checkpoint written by a Trainer of the same model, optimizer, replicas and batch
  // size; throws Error naming the file and the mismatch otherwise.
  void load_checkpoint(const std::string& path);
  int64_t global_step() const { return global_step_; }
  // The forward model in its inference form (graph/passes/train_mode.h) with the trained weights
  // and running statistics (replica 0's): what --save writes.
  Graph trained_model() const;
  void save(const std::string& path) const;

  const TrainingGraphs& graphs() const { return graphs_; }
  Executor& replica(int d) { return *workers_.at(d)->exec; }
  int replicas() const { return static_cast<int>(workers_.size()); }
  int threads_per_replica() const { return threads_; }
  const data::Dataset& train_data() const { return train_; }
  const data::Dataset& test_data() const { return test_; }

 private:
  struct Worker {
    std::unique_ptr<Executor> exec;
    std::thread thread;
    double loss_sum = 0;  // sum over examples of the per-example loss
    int64_t correct = 0, images = 0;
    std::string error;
    int64_t diverged_step = 0;       // global 1-based step of a non-finite loss, 0: none
    std::vector<double> step_loss;   // loss * examples per step of this epoch (for --log-every)
    std::atomic<int64_t> steps_done{0};
    // GPU replicas (run_device_steps): the shard is gathered on the device from the resident data
    // by `gather` through `order` (the epoch's order, uploaded once per epoch); each step's loss and
    // correct count land in pinned[2*(s%2)], marked by events[s%2], and are read a step later.
    std::unique_ptr<Executor> gather;
    Tensor order;
    int64_t order_gen = -1;
    float* pinned = nullptr;
    void* events[2] = {nullptr, nullptr};
    std::atomic<int64_t> read{0};  // the steps of this epoch before `read` have had their metrics read
  };
  // The data uploaded to one device (GPU replicas when it fits device_data_budget).
  struct ResidentData {
    Tensor train_images, train_labels, test_images, test_labels;
  };
  void upload_resident_data();
  const ResidentData* resident(Device dev) const;
  void setup_device_worker(Worker& w, int d);
  void setup_device_eval();
  void run_device_steps(int d);
  bool peers_allow(int d, int64_t s);
  bool record_step(Worker& w, int d, int64_t s, double loss, double correct, int64_t n);
  // Step s's inputs besides the batch: the loss scale of an n-image shard of a b-image batch, the
  // learning rate, and the step when the graph takes it.
  std::map<std::string, Tensor> step_inputs(int64_t s, int64_t n, int64_t b, bool stateful) const;
  // Gathers images order_[first, first + n) and their labels on the host into `in`, through a buffer
  // kept per shard size in `buffers`.
  using ShardBuffers = std::map<int64_t, std::pair<Tensor, Tensor>>;
  void gather_host_shard(ShardBuffers& buffers, int64_t first, int64_t n, std::map<std::string, Tensor>& in) const;
  EvalStats evaluate_device();
  void free_device_metrics();
  void run_segment(int epoch, int64_t begin, int64_t end, bool bar, double& seconds);
  void log_steps(int64_t upto);
  void worker_loop(int d);
  void run_replica_epoch(int d);
  void check_model_fits_labels();
  void sync_running_stats();

  TrainOptions opts_;
  TrainingGraphs graphs_;
  data::Dataset train_, test_;
  int threads_ = 1;
  std::shared_ptr<CpuCommGroup> group_;
  std::vector<std::unique_ptr<Communicator>> device_comms_;  // GPU replicas only
  std::vector<std::unique_ptr<Worker>> workers_;
  std::unique_ptr<Executor> eval_;
  std::vector<std::pair<std::string, std::string>> bn_updates_;
  std::string correct_;                     // the training graph's count of correct predictions (f32 scalar)
  std::map<int, ResidentData> resident_;    // by CUDA device index; empty: per-batch copies
  std::string eval_correct_, eval_loss_;    // GPU evaluation: accumulators (states of eval_)
  float* eval_pinned_ = nullptr;
  void* eval_event_ = nullptr;
  int64_t order_gen_ = 0;                   // bumped with each epoch's order
  // GPU replicas agree on where to stop after a divergence (peers_allow).
  std::mutex peers_mu_;
  std::condition_variable peers_cv_;
  std::atomic<int64_t> diverged_at_{INT64_MAX};  // 0-based step of this epoch, or INT64_MAX
  std::atomic<bool> failed_{false};
  // Epoch hand-off between the main thread and the workers.
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t generation_ = 0;  // bumped to start an epoch
  int done_ = 0;
  bool quit_ = false;
  std::vector<int64_t> order_;
  int64_t steps_ = 0, step_base_ = 0;
  std::atomic<int64_t> progress_{0};
  int64_t global_step_ = 0;
  int64_t seg_begin_ = 0, seg_end_ = 0;  // the steps of the epoch the workers run next
  int resume_epoch_ = -1;                // after load_checkpoint: the epoch to continue, at resume_step_
  int64_t resume_step_ = 0;
  int64_t logged_ = 0;                   // steps of this epoch already reported by --log-every
  int cur_epoch_ = 0;
};

}  // namespace graphrun::runtime

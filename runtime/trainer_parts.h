// What the trainer's files share (see runtime/trainer.h): a replica, the data as a device reads it,
// the feed that hands a replica its shards, and the evaluation. Not part of the public interface.
#pragma once
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "runtime/device.h"
#include "runtime/trainer.h"

namespace graphrun::runtime {

// The training and test sets as one device reads them: its own copies (`resident`, uploaded once),
// or views of the host's sets.
struct DeviceData {
  Tensor train_images, train_labels, test_images, test_labels;
  bool resident = false;
};

// Per device of `devices`, its DeviceData (devices that repeat share one): a copy on each device whose
// memory is not the host's when all four tensors fit in `budget` bytes, else the host's sets (saying so
// on `log`, once).
// What place_data copies to `device` under `budget` (the four sets' bytes), or 0 where the device reads the
// host's sets (it shares the host's memory, the source has no Dataset, or the sets exceed the budget).
int64_t resident_bytes(const data::Dataset& train, const data::Dataset& test, Device device, int64_t budget);
std::vector<std::shared_ptr<const DeviceData>> place_data(const data::Dataset& train, const data::Dataset& test,
                                                          const std::vector<Device>& devices, int64_t budget,
                                                          std::ostream* log);

// Hands one replica its shards: the inputs and labels of examples order[first, first + n).
class Feed {
 public:
  virtual ~Feed() = default;
  // The epoch's order (`generation` changes whenever the order does), before step `step` of 0-based
  // `epoch`: the steps then follow in order.
  virtual void begin_epoch(const std::vector<int64_t>& order, int64_t generation, int64_t epoch, int64_t step) = 0;
  // Sets in[name] for every model input it feeds and in["labels"]: valid until the next call; on the
  // replica's device or on the host (the executor copies those).
  virtual void shard(int64_t first, int64_t n, std::map<std::string, Tensor>& in) = 0;
};

// How a replica's feed reads a source that is not resident on its device.
struct FeedOptions {
  std::vector<std::string> inputs;  // the model inputs' arrays in the source
  int rank = 0, replicas = 1;
  int64_t batch = 0, steps_per_epoch = 0;
  uint64_t seed = 0;
  bool augment = false;
  std::vector<float> fill;    // augment: the padding's value per channel (normalised black)
  int loader_threads = 0;     // > 0 or augment: through a data::Loader (prefetching the replica's shards)
  bool labels = true;         // the targets too, as data::kLabels (not with --loss output)
};

// A gather on the device from resident data (the order uploaded once per epoch); a gather on the host
// through Source::read into buffers kept per shard size; or a data::Loader filling the shards ahead.
std::unique_ptr<Feed> make_feed(const data::SourcePtr& train, const DeviceData& data, Device device,
                                const FeedOptions& opts);

struct Trainer::Replica {
  int rank = 0;
  std::shared_ptr<const DeviceData> data;
  std::unique_ptr<Executor> exec;
  std::unique_ptr<Feed> feed;
  // Row s % 2 holds step s's loss and correct count until they are read, a step later.
  std::unique_ptr<HostReadback> figures;
  std::thread thread;

  // This epoch's figures, as read.
  double loss_sum = 0;  // sum over examples of the per-example loss
  int64_t correct = 0, images = 0;
  std::vector<double> step_loss;  // loss * examples per step (for --log-every)
  int64_t diverged_step = 0;      // global 1-based step of a non-finite loss, 0: none
  std::atomic<int64_t> steps_done{0};
  std::atomic<int64_t> read{0};  // the steps of this epoch before `read` have had their figures read
  ProfileTrack* profile = nullptr;  // --profile: this replica's track
};

// One setting of a training run as its flag and value ("--momentum", "0.9"; switches "on"/"off"): what
// MPI ranks must share (all of them) and what --resume compares with the checkpoint's run. Same: a
// resumed run refuses another value; MayChange: it takes the new one and says so; Unchecked: not
// compared on resume (the model's signature, which the checkpoint checks itself; the data limits,
// whose effect its training-set size checks).
struct RunSetting {
  enum class Resume { Same, MayChange, Unchecked };
  std::string flag, value;
  Resume resume;
};
std::vector<RunSetting> run_settings(const TrainOptions& o, const Graph& model);

// The metric graph: the inference graph plus the test set's correct count and summed cross-entropy,
// accumulated as state over the batches and read once at the end. One copy per local device: each
// evaluates its replica's contiguous share of the test set on that replica's threads, all at once,
// and the host adds every replica's totals (other ranks' too) in double, in the job's replica order.
struct Trainer::Evaluation {
  struct Part {
    std::unique_ptr<Executor> exec;
    std::unique_ptr<HostReadback> totals;
    ProfileTrack* profile = nullptr;  // --profile of an --eval-only run: this part's kernels and its "evaluate"
  };
  std::vector<Part> parts;                        // one per device of the run, in order
  Graph graph;            // the metric graph, until the parts are made (setup_evaluation_parts)
  ExecOptions options;    // and their options, but for the device
  std::string labels, correct_total, loss_total;  // empty with --loss mse: the host sums the errors
  int64_t classes = 0;                            // > 10: top-5 counted on the host from the scores
  int64_t batch = 0;  // examples per run, chosen at the first evaluation (Trainer::evaluation_batch)
  ProfileTrack* profile = nullptr;  // --profile: the main thread's track
};

}  // namespace graphrun::runtime

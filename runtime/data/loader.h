// Batches from a Source, assembled ahead of the step on background threads into reusable buffers, in
// an order and with an augmentation that depend only on (seed, epoch, example), never on timing.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/data/source.h"

namespace graphrun::runtime::data {

struct LoaderOptions {
  int64_t batch = 256;
  // Batches per epoch; 0: ceil(N / batch). Fewer drops an epoch's last ones (the trainer drops a last
  // batch too small to give every replica an example, and stops at --max-steps).
  int64_t steps_per_epoch = 0;
  int threads = 0;        // background loader threads; 0 reads on the caller's thread, in next()
  int prefetch = 0;       // batches assembled ahead of the one in use; 0: 2 per thread
  bool shuffle = true;    // each epoch in epoch_order(N, seed, epoch); false: 0 .. N-1
  uint64_t seed = 0;
  // torchvision's standard recipe on every f32 [C,H,W] array: a random crop of the image padded by
  // `pad` pixels (padding valued fill[c], or 0), then a horizontal flip with probability 1/2.
  bool augment = false;
  int64_t pad = 4;
  std::vector<float> fill;
  std::vector<std::string> arrays;  // the arrays to read; empty: all of the source's
  // Each batch holds only shard `shard_rank` of `shard_count` (data::shard) of the global batch: a
  // replica's loader reads only its examples. Augmentation depends on the example, not the shard.
  int shard_rank = 0, shard_count = 1;
};

// One global batch. Its buffers hold `batch` examples; the first `size` are this batch's (the last
// batch of an epoch may be short).
struct Batch {
  int64_t epoch = 0, step = 0, size = 0;
  std::vector<int64_t> indices;           // the examples, as indices into the source
  std::map<std::string, Tensor> arrays;   // each [batch, ...per-example shape]
  // Examples [begin, begin + count) of array `name` as a view (a replica's shard), no copy.
  Tensor slice(const std::string& name, int64_t begin, int64_t count) const;
};

// The augmentation draws of one example: (crop offset y, crop offset x, flip), from (seed, epoch,
// example) alone, so a resumed run (same seed and epoch) augments exactly as the first one did.
struct AugmentDraw {
  int64_t dy, dx;
  bool flip;
};
AugmentDraw augment_draw(uint64_t seed, int64_t epoch, int64_t example, int64_t pad);
// Applies `d` to one f32 [C,H,W] image in place (`scratch` holds C*H*W floats).
void augment_image(float* img, int64_t C, int64_t H, int64_t W, int64_t pad, const std::vector<float>& fill,
                   const AugmentDraw& d, float* scratch);

class Loader {
 public:
  Loader(SourcePtr src, LoaderOptions opts);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  int64_t steps_per_epoch() const { return steps_; }
  // (Re)starts at batch `step` of `epoch` (a resumed run starts mid-epoch); batches then follow in
  // order, on through later epochs, until the next start().
  void start(int64_t epoch, int64_t step = 0);
  // The next batch; valid until the next call of next() or start(), when its buffer is reused. An
  // error reading it (a corrupt image) is thrown here, at the same batch whatever the thread count.
  const Batch& next();
  // Seconds next() has waited for a batch that was not ready yet.
  double wait_seconds() const { return wait_s_; }

 private:
  struct Slot {
    Batch batch;
    int64_t ready = -1;  // the sequence number it holds, once filled
    std::exception_ptr error;
  };
  void fill(Slot& slot, int64_t seq);
  void worker();
  void stop_workers();
  std::shared_ptr<const std::vector<int64_t>> order_of(int64_t epoch);

  SourcePtr src_;
  LoaderOptions opts_;
  int64_t steps_ = 0;
  std::vector<ArraySpec> specs_;  // the arrays read
  std::vector<Slot> slots_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::thread> threads_;
  bool stop_ = false;
  int64_t first_ = 0;      // global batch number (epoch * steps + step) of sequence number 0
  int64_t claimed_ = 0;    // sequence numbers handed to workers so far
  int64_t released_ = 0;   // batches the consumer is done with
  int64_t current_ = -1;   // the batch the consumer holds
  std::map<int64_t, std::shared_ptr<const std::vector<int64_t>>> orders_;
  double wait_s_ = 0;
};

// Reads every example once (on `threads` loader threads), so a corrupt image fails before training
// rather than in its middle. The error names the file.
void verify_all(SourcePtr src, int threads, int64_t batch = 64);

}  // namespace graphrun::runtime::data

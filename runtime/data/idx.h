// MNIST-format (IDX) datasets: reading image/label files (gzipped or not) with checks, and the
// shuffled, replica-sharded batch order the trainer walks through.
#pragma once
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "graph/tensor.h"

namespace graphrun::runtime::data {

// Debian's dataset-fashion-mnist installs here.
inline const char* kDefaultDataDir = "/usr/share/datasets/fashion-mnist";

// One split of an MNIST-format dataset: images as f32 [N,1,H,W] scaled to [0,1], labels as int64 [N].
struct Dataset {
  Tensor images;
  Tensor labels;
  int64_t size() const { return labels.defined() ? labels.dim(0) : 0; }
  int64_t num_classes() const;  // largest label + 1
};

// Reads one IDX file (magic 0x0000080N: unsigned bytes, rank N) as u8 with its dims. Accepts gzip
// or raw files (detected by content). Errors name the file: missing, truncated, bad magic, wrong
// size, not unsigned bytes.
Tensor read_idx_u8(const std::string& path);
// The same over a file's bytes (`path` names it in errors): gzip data is decompressed, and must end
// where its last gzip member ends.
Tensor parse_idx_u8(const std::string& file, const std::string& path);

// Reads an images file (rank 3: N,H,W) and a labels file (rank 1: N) and checks they agree.
Dataset load_idx_pair(const std::string& images_path, const std::string& labels_path);

// Finds `<prefix>-images-idx3-ubyte[.gz]` and `<prefix>-labels-idx1-ubyte[.gz]` in `dir`
// (prefix "train" or "t10k") and loads them.
Dataset load_split(const std::string& dir, const std::string& prefix);

// Copies the examples `indices` of `ds` into `images` [n,1,H,W] and `labels` [n] (which must
// already have those shapes).
void gather(const Dataset& ds, const int64_t* indices, int64_t n, Tensor& images, Tensor& labels);

// The batch order of one epoch: a permutation of [0, n) from a std::mt19937_64 seeded with
// seed + epoch * 0x9E3779B97F4A7C15 (Fisher-Yates driven by the engine's raw 64-bit output, so it is reproducible across
// standard libraries), cut into global batches of `batch` (the last one may be smaller: kept, as
// PyTorch's DataLoader does by default).
std::vector<int64_t> epoch_order(int64_t n, uint64_t seed, int64_t epoch);

// Splits a global batch of `batch` examples over `replicas`: shard r starts at begin[r] and has
// size[r] examples; sizes differ by at most one (the first batch % replicas shards get one more).
struct Shards {
  std::vector<int64_t> begin, size;
};
Shards shard(int64_t batch, int replicas);

}  // namespace graphrun::runtime::data

// Data sources: what a training set is to the trainer (N examples, each a few named arrays) and the
// kinds of files a user's data arrives in: MNIST folders, .npz files, .npy folders, image folders, CSV tables.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "graph/tensor.h"
#include "runtime/data/idx.h"

namespace graphrun::runtime::data {

// The name of the targets array, unless the user names another.
inline const char* kLabels = "labels";

// One array each example has: its name, element type and shape without the leading N.
struct ArraySpec {
  std::string name;
  DType dtype = DType::Undefined;
  Shape shape;
  int64_t numel() const { return shape_numel(shape); }
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
};

// N examples, each the same named arrays. read() gathers examples into buffers the caller owns (so a
// steady-state step allocates nothing) and may be called from several threads at once, each with its
// own buffers.
class Source {
 public:
  virtual ~Source() = default;
  // The file or folder it reads, quoted, for messages: "'train.npz'".
  virtual std::string describe() const = 0;
  virtual int64_t size() const = 0;
  virtual const std::vector<ArraySpec>& arrays() const = 0;
  // Writes examples indices[0..n) into out[name] for each name in `out` (a subset of arrays()):
  // each Tensor must have the array's dtype and room for n examples; example i lands at offset
  // i * spec.numel(). Indices must be in [0, size()). Errors (a corrupt image) name the file.
  virtual void read(const int64_t* indices, int64_t n, const std::map<std::string, Tensor*>& out) const = 0;
  // True when read() costs far more than a copy (images are decoded): worth loader threads.
  virtual bool decode_heavy() const { return false; }
  // For image folders: the class names, in label order. Empty for other sources.
  virtual std::vector<std::string> classes() const { return {}; }

  const ArraySpec* find(const std::string& name) const;  // nullptr when absent
  const ArraySpec& spec(const std::string& name) const;  // throws naming the source
};

using SourcePtr = std::shared_ptr<const Source>;

// A buffer of this thread for `owner` (a source instance) to reuse across reads, so a steady-state
// read allocates nothing; distinct owners get distinct buffers, so sources stacked on one another
// (a subset of a fitted source of a subset) never share one.
std::vector<unsigned char>& thread_scratch(const void* owner, int slot = 0);

// Checks that every buffer of `out` names an array of `src` with that dtype and room for n
// examples; the common preamble of read() implementations.
void check_read_buffers(const Source& src, int64_t n, const std::map<std::string, Tensor*>& out);

// An MNIST-format split (today's reader): arrays "image" f32[1,H,W] in [0,1] and "labels" i64[].
class IdxSource : public Source {
 public:
  IdxSource(Dataset ds, std::string origin);
  std::string describe() const override { return origin_; }
  int64_t size() const override { return ds_.size(); }
  const std::vector<ArraySpec>& arrays() const override { return specs_; }
  void read(const int64_t* indices, int64_t n, const std::map<std::string, Tensor*>& out) const override;
  const Dataset& dataset() const { return ds_; }

 private:
  Dataset ds_;
  std::string origin_;
  std::vector<ArraySpec> specs_;
};
// Loads `<prefix>-images/labels-...` of `dir` (load_split) as a Source.
SourcePtr open_idx(const std::string& dir, const std::string& prefix);

// The examples `indices` of another source, in that order (a held-out split, a --train-limit).
class Subset : public Source {
 public:
  Subset(SourcePtr base, std::vector<int64_t> indices, std::string origin);
  std::string describe() const override { return origin_; }
  int64_t size() const override { return static_cast<int64_t>(indices_.size()); }
  const std::vector<ArraySpec>& arrays() const override { return base_->arrays(); }
  void read(const int64_t* indices, int64_t n, const std::map<std::string, Tensor*>& out) const override;
  bool decode_heavy() const override { return base_->decode_heavy(); }
  std::vector<std::string> classes() const override { return base_->classes(); }
  const std::vector<int64_t>& indices() const { return indices_; }

 private:
  SourcePtr base_;
  std::vector<int64_t> indices_;
  std::string origin_;
};

// The first `n` examples (all when n >= size()).
SourcePtr head(SourcePtr src, int64_t n);

// A seeded held-out split: round(fraction * N) examples (at least 1) drawn by a permutation that
// depends only on (N, seed) go to `held_out`, the rest to `train`; both keep ascending order.
struct Split {
  SourcePtr train, held_out;
};
Split split_holdout(SourcePtr src, double fraction, uint64_t seed);

// A numpy .npz (np.savez or np.savez_compressed): one array per .npy entry, named without ".npy".
// Stored entries are read straight from the file; deflated ones are inflated once, into memory.
SourcePtr open_npz(const std::string& path);
// A folder of .npy files, one array per file named after it, each memory-mapped.
SourcePtr open_npy_folder(const std::string& dir);
// One subfolder per class (sorted by name: label 0 is the first), PNG and JPEG images inside
// (recursively, files sorted), decoded on read() to "image" f32[C,H,W] in [0,1], "labels" i64[].
SourcePtr open_image_folder(const std::string& dir, int64_t channels, int64_t height, int64_t width);

// Options for sources whose examples take a shape from the model (image folders are decoded to it).
// Columns of a table that feed one model input, in this order (--columns INPUT=COL,COL,...).
struct ColumnGroup {
  std::string input;
  std::vector<std::string> columns;
};

struct OpenOptions {
  int64_t channels = 0, height = 0, width = 0;  // image folders: the model's C x H x W (C = 1 or 3)
  std::string idx_prefix = "train";             // MNIST folders: "train" or "t10k"
  // Tables (CSV, TSV): the column of targets (--labels), whether targets are needed (not for --loss output), and
  // the class names a training table numbered its targets by (a test table numbers its own the same way).
  std::string labels = kLabels;
  bool targets = true;
  std::vector<std::string> classes{};
  // Tables: the columns that feed each model input (--columns INPUT=COL,...), and the model's inputs with their
  // element types. Without groups, a model of one input takes every column but the targets (the array
  // "features"), a model of several each input the column of its name.
  std::vector<ColumnGroup> columns{};
  std::map<std::string, DType> inputs{};
};

// A CSV (.csv) or TSV (.tsv) table with a header of column names: the column opts.labels as the targets
// array of that name (int64 class ids, float64 numbers, or class names numbered in sorted order, or by
// opts.classes); the feature columns as arrays by opts.columns and opts.inputs: f64[k] of k columns, or int64
// (int32) for an input of that type. Read whole into memory; a missing or non-numeric feature is an error naming
// the file, line and column.
SourcePtr open_csv(const std::string& path, const OpenOptions& opts);

// What a path holds, judged by what it points at: "idx", "npz", "npy-folder", "image-folder", "csv".
// Errors name the path when it is none of these.
std::string source_kind(const std::string& path);
// Whether MNIST folder `dir` has the images of split `prefix` ("train", "t10k").
bool has_idx(const std::string& dir, const std::string& prefix);
// Opens `path` as the kind source_kind() names.
SourcePtr open_source(const std::string& path, const OpenOptions& opts = {});

// Where the class names of `got` (opened from `got_path`) are not `want` (those of `want_from`: the training data,
// or a trained model's metadata): an error listing the differences.
void check_same_classes(const std::vector<std::string>& want, const std::string& want_from, const Source& got,
                        const std::string& got_path);

// The metadata key under which a trained model keeps the class names its class ids stand for (an image folder's
// or a table's, as a JSON list), so that --eval-only numbers a test set as training did.
inline const char* kClassesMetadataKey = "graphrun.classes";
std::string classes_json(const std::vector<std::string>& classes);
// The list again; `what` names the model and key in the one-line error for anything else.
std::vector<std::string> classes_from_json(const std::string& text, const std::string& what);

// Training data and the data the figures are measured on, from --data, --test-data and --val-split.
// `test_from` says in words where the test data came from, for the printed lines and --metrics.
struct DataSplits {
  SourcePtr train, test;
  std::string test_from;
};
// test_path given: that is the test set (a --val-split as well is an error). Otherwise an MNIST
// folder's t10k split when it has one and val_split < 0; otherwise a held-out fraction (val_split,
// 0.1 when negative) of the training data, seeded by `seed`. Each opened source passes through `fit`
// (fit_to_model) when given, before any split, so errors name an example by its index in the file.
// Image folders for training and test must have the same classes.
DataSplits open_splits(const std::string& data_path, const std::string& test_path, double val_split, uint64_t seed,
                       const OpenOptions& opts = {}, const std::function<SourcePtr(SourcePtr)>& fit = nullptr);

}  // namespace graphrun::runtime::data

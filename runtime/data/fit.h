// Fitting a data source to a model: its arrays matched to the model's inputs by name, dtypes converted
// where that loses nothing that matters, per-channel normalisation, and the checks on the data that
// can be made before training starts (missing arrays, shapes, labels out of range, NaN/Inf targets).
#pragma once
#include <string>
#include <vector>

#include "runtime/data/source.h"

namespace graphrun::runtime::data {

// What the model wants of one input: its name, dtype and shape per example (-1: any size).
struct InputSpec {
  std::string name;
  DType dtype = DType::F32;
  Shape shape;
};

// --normalize MEAN,.../STD,...: x = (x - mean[c]) / std[c] on the channels (first per-example
// dimension) of float inputs; one value each applies to every channel.
struct Normalize {
  std::vector<float> mean, std;
  bool empty() const { return mean.empty(); }
};
Normalize parse_normalize(const std::string& text);  // errors name --normalize

struct FitOptions {
  std::string labels = kLabels;    // the targets array in the source (--labels NAME)
  // false (--loss output: the model computes its own loss): no targets are fed. The array `labels` may then feed a
  // model input of that name; it is still no candidate for a one-input model's only array.
  bool targets = true;
  DType label_dtype = DType::I64;  // I64: class ids (cross-entropy); F32: float targets (--loss mse)
  bool check_label_shape = false;  // when set, the targets must have label_shape per example
  Shape label_shape;               // -1: any size
  int64_t num_classes = 0;         // class ids must lie in [0, num_classes) when > 0
  Normalize normalize;
};

// A view of `src` with exactly the arrays the trainer feeds: each model input under the model's name
// and dtype, and the targets as "labels" (unless opts.targets is false). A model with one input takes the source's only
// non-target array whatever its name. Conversions: u8 -> f32 is x / 255 (images, as the MNIST reader does), f64 -> f32
// narrows (numpy's default float), integers widen to i64/i32, f32 -> f64; targets are never scaled. Per-example shapes
// must match up to dimensions of size 1 (u8[28,28] feeds f32[1,28,28]). The targets are scanned once here: class ids
// out of range and NaN/Inf float targets are errors naming the source and the example.
SourcePtr fit_to_model(SourcePtr src, const std::vector<InputSpec>& inputs, const FitOptions& opts);

// The largest class id in the integer array `labels` of `src`, plus one (an image folder: its class
// count, without reading a file): what Dataset::num_classes() is for the MNIST reader.
int64_t num_classes(const Source& src, const std::string& labels = kLabels);

}  // namespace graphrun::runtime::data

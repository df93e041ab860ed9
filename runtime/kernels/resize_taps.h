// The sampling plan of Resize, Upsample and ResizeGrad, shared by the CPU and CUDA kernels: for each
// axis, the input positions (taps) and weights every output coordinate reads, as ONNX's reference does.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "runtime/kernel.h"

namespace graphrun::runtime {

struct Tap {
  int64_t index;
  double weight;
};

// The taps of every output coordinate of one axis; outside[i] marks tf_crop_and_resize coordinates that
// fall outside the input (they take extrapolation_value).
struct AxisTaps {
  std::vector<std::vector<Tap>> taps;
  std::vector<bool> outside;
  bool identity = true;  // every output coordinate i reads input i with weight 1
};

// Reads the values of the node's input i (roi, scales, sizes) on the host, wherever the tensor lives.
using ResizeValueReader = std::function<std::vector<double>(int input)>;

// The per-axis taps of a resize from `in` to the output shape: for Resize and Upsample from their sizes
// or scales (set in *out); for ResizeGrad (grad) *out is dY's shape. Throws naming what is wrong.
std::vector<AxisTaps> plan_resize(const KernelContext& ctx, const Shape& in, Shape* out, bool grad,
                                  const ResizeValueReader& read);

}  // namespace graphrun::runtime

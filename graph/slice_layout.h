// Which elements a Slice takes, as the ONNX spec clamps its bounds (negative steps included): the one index
// function of Slice's CPU and CUDA kernels, of its gradient op SliceGrad (both devices) and of its gradient rule,
// so that they cannot disagree.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "graph/error.h"
#include "graph/tensor.h"

namespace graphrun {

// One axis: Slice takes elements first, first + step, ... (count of them) of an axis of size dim.
struct SliceRange {
  int64_t first = 0, step = 1, count = 0;
};

// ONNX's clamping: a negative bound counts from the end; for step > 0 start and end are clamped to [0, dim],
// for step < 0 start to [0, dim - 1] and end to [-1, dim - 1]. step must not be 0.
inline SliceRange slice_range(int64_t dim, int64_t start, int64_t end, int64_t step) {
  SliceRange r;
  r.step = step;
  if (start < 0) start += dim;  // INT64_MIN + dim does not overflow for dim >= 0
  if (end < 0) end += dim;
  if (step > 0) {
    start = std::clamp<int64_t>(start, 0, dim);
    end = std::clamp<int64_t>(end, 0, dim);
    // (end - start + step - 1) could overflow for a huge step: divide first.
    r.count = end > start ? (end - start - 1) / step + 1 : 0;
  } else {
    start = std::clamp<int64_t>(start, 0, std::max<int64_t>(dim - 1, 0));
    end = std::clamp<int64_t>(end, -1, dim - 1);
    const uint64_t stride = uint64_t{0} - static_cast<uint64_t>(step);  // -step, also for INT64_MIN
    r.count = dim > 0 && start > end ? static_cast<int64_t>(static_cast<uint64_t>(start - end - 1) / stride) + 1 : 0;
  }
  r.first = r.count > 0 ? start : 0;
  return r;
}

// A whole Slice: the output shape, the input element of output element 0 (`base`, in elements of the row-major
// input) and, per axis, the input stride between neighbouring output elements. Output element (i0, i1, ...) is
// input element base + sum_k i_k * strides[k].
struct SliceLayout {
  Shape out;
  int64_t base = 0;
  std::vector<int64_t> strides;
  std::vector<SliceRange> ranges;  // per input axis (unsliced axes: first 0, step 1, count dim)
};

// starts and ends as given; axes empty means 0, 1, ...; steps empty means all 1. `what` starts each error
// ("Slice", "SliceGrad"). Throws on lengths that differ, an axis out of range or given twice, a step 0.
inline SliceLayout slice_layout(const Shape& in, const std::vector<int64_t>& starts, const std::vector<int64_t>& ends,
                                std::vector<int64_t> axes, std::vector<int64_t> steps, const char* what) {
  const int64_t r = static_cast<int64_t>(in.size());
  GR_CHECK(starts.size() == ends.size(), what << ": " << starts.size() << " starts but " << ends.size() << " ends");
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  if (steps.empty()) steps.assign(starts.size(), 1);
  GR_CHECK(axes.size() == starts.size() && steps.size() == starts.size(),
           what << ": starts, ends, axes and steps must have the same length (" << starts.size() << ", "
                << ends.size() << ", " << axes.size() << ", " << steps.size() << ")");
  SliceLayout L;
  L.out = in;
  L.ranges.resize(in.size());
  for (int64_t k = 0; k < r; ++k) L.ranges[k] = SliceRange{0, 1, in[k]};
  std::vector<bool> seen(in.size(), false);
  for (size_t i = 0; i < axes.size(); ++i) {
    GR_CHECK(axes[i] >= -r && axes[i] < r, what << ": axis " << axes[i] << " is out of range for rank " << r);
    const int64_t k = axes[i] < 0 ? axes[i] + r : axes[i];
    GR_CHECK(!seen[k], what << ": axis " << axes[i] << " is given twice");
    seen[k] = true;
    GR_CHECK(steps[i] != 0, what << ": step 0 on axis " << axes[i]);
    L.ranges[k] = slice_range(in[k], starts[i], ends[i], steps[i]);
  }
  L.strides.assign(in.size(), 0);
  int64_t in_stride = 1;
  for (int64_t k = r - 1; k >= 0; --k) {
    const SliceRange& s = L.ranges[k];
    L.out[k] = s.count;
    L.strides[k] = s.count > 1 ? in_stride * s.step : 0;  // |step| < dim when it matters: no overflow
    L.base += s.first * in_stride;
    in_stride *= in[k];
  }
  return L;
}

}  // namespace graphrun

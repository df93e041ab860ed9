// ONNX Unique's plan (unique_plan.h): which slices are equal, in which order they come out.
#include "runtime/kernels/unique_plan.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <type_traits>

#include "graph/error.h"
#include "runtime/kernels/nan_order.h"

namespace graphrun::runtime {
namespace {

// -1, 0, 1 as a is below, equal to or above b, in runtime/kernels/nan_order.h's order.
template <class T> int order(T a, T b) { return nan_above(a, b) ? 1 : (nan_above(b, a) ? -1 : 0); }

template <class T>
void plan_typed(const T* x, UniquePlan& p, bool sorted) {
  // Slice i's elements in row-major order: x[(o * n + i) * inner + k] for o, then k.
  auto cmp = [&](int64_t a, int64_t b) {
    for (int64_t o = 0; o < p.outer; ++o)
      for (int64_t k = 0; k < p.inner; ++k) {
        const int c = order(x[(o * p.n + a) * p.inner + k], x[(o * p.n + b) * p.inner + k]);
        if (c) return c;
      }
    return 0;
  };
  std::vector<int64_t> by_value(static_cast<size_t>(p.n));
  std::iota(by_value.begin(), by_value.end(), 0);
  std::stable_sort(by_value.begin(), by_value.end(), [&](int64_t a, int64_t b) { return cmp(a, b) < 0; });
  // Runs of equal slices; the stable sort leaves each run's first occurrence at its front.
  std::vector<int64_t> run_of(static_cast<size_t>(p.n));
  std::vector<int64_t> run_first, run_count;
  for (size_t s = 0; s < by_value.size(); ++s) {
    if (s == 0 || cmp(by_value[s - 1], by_value[s]) != 0) {
      run_first.push_back(by_value[s]);
      run_count.push_back(0);
    }
    run_of[static_cast<size_t>(by_value[s])] = static_cast<int64_t>(run_first.size()) - 1;
    ++run_count.back();
  }
  // Y's order: the runs as sorted, or by first occurrence.
  std::vector<int64_t> runs(run_first.size());
  std::iota(runs.begin(), runs.end(), 0);
  if (!sorted) std::sort(runs.begin(), runs.end(), [&](int64_t a, int64_t b) { return run_first[a] < run_first[b]; });
  std::vector<int64_t> slot(runs.size());
  for (size_t j = 0; j < runs.size(); ++j) {
    slot[static_cast<size_t>(runs[j])] = static_cast<int64_t>(j);
    p.first.push_back(run_first[static_cast<size_t>(runs[j])]);
    p.counts.push_back(run_count[static_cast<size_t>(runs[j])]);
  }
  p.inverse.resize(static_cast<size_t>(p.n));
  for (int64_t i = 0; i < p.n; ++i) p.inverse[static_cast<size_t>(i)] = slot[static_cast<size_t>(run_of[static_cast<size_t>(i)])];
}

}  // namespace

UniquePlan plan_unique(const Node& node, const Tensor& x) {
  UniquePlan p;
  const int64_t sorted = node.attr_i("sorted", 1);
  GR_CHECK(sorted == 0 || sorted == 1, "Unique: attribute 'sorted' must be 0 or 1, got " << sorted);
  const Shape& xs = x.shape();
  int axis = -1;
  if (node.has_attr("axis")) {
    const int r = x.rank();
    const int64_t a = node.attr_i("axis", 0);
    GR_CHECK(r >= 1 && a >= -r && a < r, "Unique: axis " << a << " is out of range for rank " << r);
    axis = static_cast<int>(a < 0 ? a + r : a);
    for (int d = 0; d < axis; ++d) p.outer *= xs[d];
    p.n = xs[axis];
    for (int d = axis + 1; d < r; ++d) p.inner *= xs[d];
  } else {
    p.n = x.numel();
  }
  switch (x.dtype()) {
    case DType::F32: plan_typed(x.data<float>(), p, sorted); break;
    case DType::F64: plan_typed(x.data<double>(), p, sorted); break;
    case DType::I64: plan_typed(x.data<int64_t>(), p, sorted); break;
    case DType::I32: plan_typed(static_cast<const int32_t*>(x.raw()), p, sorted); break;
    case DType::I16: plan_typed(static_cast<const int16_t*>(x.raw()), p, sorted); break;
    case DType::I8: plan_typed(static_cast<const int8_t*>(x.raw()), p, sorted); break;
    case DType::U8: case DType::Bool: plan_typed(static_cast<const uint8_t*>(x.raw()), p, sorted); break;
    case DType::U16: plan_typed(static_cast<const uint16_t*>(x.raw()), p, sorted); break;
    case DType::U32: plan_typed(static_cast<const uint32_t*>(x.raw()), p, sorted); break;
    case DType::U64: plan_typed(static_cast<const uint64_t*>(x.raw()), p, sorted); break;
    default: GR_FAIL("Unique: element type " << dtype_name(x.dtype()) << " is not supported");
  }
  // (Slices of no elements compare equal: they make one unique.)
  const int64_t u = static_cast<int64_t>(p.first.size());
  if (axis < 0) {
    p.y_shape = {u};
  } else {
    p.y_shape = xs;
    p.y_shape[static_cast<size_t>(axis)] = u;
  }
  return p;
}

void gather_unique(const UniquePlan& p, const Tensor& x, void* y) {
  const size_t esz = dtype_size(x.dtype()), row = static_cast<size_t>(p.inner) * esz;
  const char* src = static_cast<const char*>(x.raw());
  char* dst = static_cast<char*>(y);
  const size_t u = p.first.size();
  for (int64_t o = 0; o < p.outer; ++o)
    for (size_t j = 0; j < u; ++j)
      std::memcpy(dst + (static_cast<size_t>(o) * u + j) * row, src + static_cast<size_t>(o * p.n + p.first[j]) * row, row);
}

std::vector<int64_t> nonzero_indices(const Tensor& x, int64_t* count) {
  const std::vector<double> v = x.as_doubles();
  std::vector<int64_t> at;
  for (int64_t i = 0; i < x.numel(); ++i)
    if (v[static_cast<size_t>(i)] != 0) at.push_back(i);
  const int r = x.rank();
  const size_t nnz = at.size();
  *count = static_cast<int64_t>(nnz);
  std::vector<int64_t> y(static_cast<size_t>(r) * nnz);
  int64_t stride = 1;
  for (int k = r - 1; k >= 0; --k) {
    for (size_t j = 0; j < nnz; ++j) y[static_cast<size_t>(k) * nnz + j] = (at[j] / stride) % x.dim(k);
    stride *= x.dim(k);
  }
  return y;
}

}  // namespace graphrun::runtime

// Helpers shared by the CPU math, shape, reduce and loss kernels: dtype dispatch, axis handling,
// multidirectional broadcasting plans and OpenMP thresholds.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/kernel.h"

namespace graphrun::runtime::cpu {

// Loops shorter than this run on one thread: spawning a team costs more than it saves.
constexpr int64_t kParallelMin = 32768;

inline int threads_for(const KernelContext& ctx, int64_t work) {
  return work > kParallelMin ? ctx.threads() : 1;
}

// The sum of f(0), ..., f(n - 1) in A, added in kSumLanes independent chains (term j in chain j % kSumLanes;
// the chains then added in order, then the terms past the last full group), which the compiler maps onto
// vector registers where one chain would wait on each addition's latency. The order is fixed by n alone:
// the bits do not depend on the processor or its vector width.
constexpr int64_t kSumLanes = 16;
template <class A, class F> inline A lane_sum(int64_t n, F&& f) {
  A s[kSumLanes] = {};
  int64_t j = 0;
  for (; j + kSumLanes <= n; j += kSumLanes)
    for (int64_t l = 0; l < kSumLanes; ++l) s[l] += f(j + l);
  A sum = 0;
  for (int64_t l = 0; l < kSumLanes; ++l) sum += s[l];
  for (; j < n; ++j) sum += f(j);
  return sum;
}

// Typed pointers without Tensor::data<T>'s dtype check (which knows only a few element types).
template <class T> inline T* ptr(Tensor& t) { return static_cast<T*>(t.raw()); }
template <class T> inline const T* ptr(const Tensor& t) { return static_cast<const T*>(t.raw()); }

// Calls f(T{}) with the C++ type of `dt`; fails naming `what` for other types.
template <class F> void dispatch_float(DType dt, const char* what, F&& f) {
  switch (dt) {
    case DType::F32: f(float{}); break;
    case DType::F64: f(double{}); break;
    default: GR_FAIL(what << ": element type " << dtype_name(dt) << " is not supported (f32, f64)");
  }
}

template <class F> void dispatch_signed(DType dt, const char* what, F&& f) {
  switch (dt) {
    case DType::F32: f(float{}); break;
    case DType::F64: f(double{}); break;
    case DType::I32: f(int32_t{}); break;
    case DType::I64: f(int64_t{}); break;
    case DType::I8: f(int8_t{}); break;
    case DType::I16: f(int16_t{}); break;
    default: GR_FAIL(what << ": element type " << dtype_name(dt) << " is not supported (f32, f64, signed ints)");
  }
}

template <class F> void dispatch_numeric(DType dt, const char* what, F&& f) {
  switch (dt) {
    case DType::F32: f(float{}); break;
    case DType::F64: f(double{}); break;
    case DType::I32: f(int32_t{}); break;
    case DType::I64: f(int64_t{}); break;
    case DType::I8: f(int8_t{}); break;
    case DType::I16: f(int16_t{}); break;
    case DType::U8: f(uint8_t{}); break;
    case DType::U16: f(uint16_t{}); break;
    case DType::U32: f(uint32_t{}); break;
    case DType::U64: f(uint64_t{}); break;
    default: GR_FAIL(what << ": element type " << dtype_name(dt) << " is not supported (numeric types)");
  }
}

// Numeric types plus bool (stored as one byte, 0 or 1).
template <class F> void dispatch_numeric_bool(DType dt, const char* what, F&& f) {
  if (dt == DType::Bool) { f(bool{}); return; }
  dispatch_numeric(dt, what, f);
}

inline void check_bool(const Tensor& t, const char* what) {
  GR_CHECK(t.dtype() == DType::Bool, what << ": expects a bool tensor, got " << dtype_name(t.dtype()));
}

// Normalises an axis in [-rank, rank) to [0, rank).
inline int norm_axis(int64_t axis, int64_t rank, const char* what) {
  GR_CHECK(axis >= -rank && axis < (rank == 0 ? 1 : rank),
           what << ": axis " << axis << " is out of range for rank " << rank);
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

inline int64_t prod(const Shape& s, size_t from, size_t to) {
  int64_t n = 1;
  for (size_t i = from; i < to && i < s.size(); ++i) n *= s[i];
  return n;
}

// Multidirectional (numpy) broadcast of several shapes; the error names every shape.
inline Shape broadcast_shapes(const std::vector<const Shape*>& shapes, const char* what) {
  size_t rank = 0;
  for (auto* s : shapes) rank = std::max(rank, s->size());
  Shape out(rank, 1);
  for (size_t k = 0; k < rank; ++k) {
    int64_t d = 1;
    bool ok = true;
    for (auto* s : shapes) {
      size_t off = rank - s->size();
      if (k < off) continue;
      int64_t e = (*s)[k - off];
      if (e == 1) continue;
      if (d == 1) d = e;
      else if (d != e) ok = false;
    }
    if (!ok) {
      std::string list;
      for (size_t i = 0; i < shapes.size(); ++i) list += (i ? " and " : "") + shape_str(*shapes[i]);
      GR_FAIL(what << ": shapes " << list << " are not broadcastable");
    }
    // A dimension of 0 wins over 1 (numpy: broadcasting against an empty axis gives an empty axis).
    for (auto* s : shapes) {
      size_t off = rank - s->size();
      if (k >= off && (*s)[k - off] == 0) d = 0;
    }
    out[k] = d;
  }
  return out;
}

// How several inputs map onto a broadcast output: dims are coalesced where every input has the
// same pattern; the innermost dim is looped directly with per-input stride 0 or 1.
struct BroadcastPlan {
  Shape out;                                  // the broadcast output shape
  std::vector<int64_t> dims;                  // coalesced dims, innermost last (at least one)
  std::vector<std::vector<int64_t>> strides;  // per input, per coalesced dim (0 where broadcast)
  int64_t inner() const { return dims.back(); }
  int64_t rows() const {
    int64_t r = 1;
    for (size_t i = 0; i + 1 < dims.size(); ++i) r *= dims[i];
    return r;
  }
};

inline BroadcastPlan make_broadcast_plan(const std::vector<const Shape*>& shapes, const Shape& out) {
  BroadcastPlan p;
  p.out = out;
  size_t rank = out.size(), n = shapes.size();
  // Per-input, per-output-dim: does the input have this dim (not broadcast)?
  std::vector<std::vector<bool>> has(n, std::vector<bool>(rank));
  for (size_t i = 0; i < n; ++i) {
    size_t off = rank - shapes[i]->size();
    for (size_t k = 0; k < rank; ++k) has[i][k] = k >= off && (*shapes[i])[k - off] == out[k];
  }
  std::vector<int64_t> dims;
  std::vector<std::vector<bool>> pat;
  for (size_t k = 0; k < rank; ++k) {
    if (out[k] == 1) continue;  // size-1 dims do not matter
    std::vector<bool> col(n);
    for (size_t i = 0; i < n; ++i) col[i] = has[i][k];
    if (!dims.empty() && pat.back() == col) {
      dims.back() *= out[k];
    } else {
      dims.push_back(out[k]);
      pat.push_back(col);
    }
  }
  if (dims.empty()) {
    dims.push_back(1);
    pat.push_back(std::vector<bool>(n, true));
  }
  p.dims = dims;
  p.strides.assign(n, std::vector<int64_t>(dims.size(), 0));
  for (size_t i = 0; i < n; ++i) {
    int64_t s = 1;
    for (size_t k = dims.size(); k-- > 0;) {
      if (pat[k][i]) {
        p.strides[i][k] = s;
        s *= dims[k];
      }
    }
  }
  return p;
}

// Calls row(r, offsets) for each row (all coalesced dims but the innermost), with the element
// offset of each input at the row's start. Rows are split over threads when the work is large.
template <class RowFn>
void for_each_row(const BroadcastPlan& p, int threads, RowFn&& row) {
  const int64_t rows = p.rows();
  const size_t nd = p.dims.size(), n = p.strides.size();
  auto run_range = [&](int64_t r0, int64_t r1) {
    std::vector<int64_t> idx(nd, 0), off(n, 0);
    // Decompose r0 into outer indices.
    int64_t rem = r0;
    for (size_t k = nd - 1; k-- > 0;) {
      idx[k] = rem % p.dims[k];
      rem /= p.dims[k];
    }
    for (size_t i = 0; i < n; ++i)
      for (size_t k = 0; k + 1 < nd; ++k) off[i] += idx[k] * p.strides[i][k];
    for (int64_t r = r0; r < r1; ++r) {
      row(r, off.data());
      for (size_t k = nd - 1; k-- > 0;) {
        for (size_t i = 0; i < n; ++i) off[i] += p.strides[i][k];
        if (++idx[k] < p.dims[k]) break;
        for (size_t i = 0; i < n; ++i) off[i] -= p.strides[i][k] * p.dims[k];
        idx[k] = 0;
      }
    }
  };
  if (threads <= 1 || rows < 2) {
    run_range(0, rows);
    return;
  }
  int nt = static_cast<int>(std::min<int64_t>(threads, rows));
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int t = 0; t < nt; ++t) run_range(rows * t / nt, rows * (t + 1) / nt);
}

// Reads a 1-D (or scalar) integer tensor, e.g. axes, pads, shape inputs.
inline std::vector<int64_t> int_list(const Tensor& t, const char* what) {
  GR_CHECK(t.dtype() == DType::I64 || t.dtype() == DType::I32,
           what << ": expects an int64 tensor, got " << dtype_name(t.dtype()));
  GR_CHECK(t.rank() <= 1, what << ": expects a 1-D tensor, got shape " << shape_str(t.shape()));
  return t.as_int64s();
}

}  // namespace graphrun::runtime::cpu

// ONNX Unique (opset 11) and NonZero on a tensor the host can read, shared by the CPU kernels and the CUDA
// kernels (which read their input back first: the output's shape depends on the values). Without `axis` the elements of the
// flattened input are compared, with it the slices along `axis` (lexicographically, element by element in
// row-major order, as numpy.unique(axis=...) compares them); `sorted` (default 1) orders the unique values
// ascending, 0 by first occurrence. NaN sorts above every number and equals NaN, as TopK's order.
#pragma once
#include <cstdint>
#include <vector>

#include "graph/ir.h"
#include "graph/tensor.h"

namespace graphrun::runtime {

struct UniquePlan {
  int64_t outer = 1, n = 0, inner = 1;  // the input as [outer, n, inner]: n slices of outer x inner elements
  Shape y_shape;                        // Y: [U] without axis, the input's shape with U along axis
  std::vector<int64_t> first;           // per unique slice, in Y's order: its first index (output `indices`)
  std::vector<int64_t> inverse;         // per input slice: its unique's index in Y (`inverse_indices`)
  std::vector<int64_t> counts;          // per unique slice: how often it occurs (`counts`)
};

// Plans Unique of `x` (host memory) for `node`; throws naming the attribute or element type it cannot take.
UniquePlan plan_unique(const Node& node, const Tensor& x);

// Y's bytes: the first slice of every unique, gathered (`y` holds prod(y_shape) elements of x's type).
void gather_unique(const UniquePlan& p, const Tensor& x, void* y);

// NonZero's output [rank, *count] in row-major order: the coordinates of x's *count nonzero elements, in order
// (a scalar's output holds none, only its count).
std::vector<int64_t> nonzero_indices(const Tensor& x, int64_t* count);

}  // namespace graphrun::runtime

// Load-time pass fill_slice_ranks: the output types of Slices whose starts or ends ONNX shape inference
// cannot read (torch's chunk computes them from Shape), which ONNX 1.12 leaves without even a rank.
// Like fill_reshape_dims it rewrites the ONNX proto during graph::load_onnx's shape inference.
#pragma once
#include <onnx/onnx_pb.h>

#include <string>
#include <unordered_map>

namespace graphrun::passes {

// A Slice keeps its input's rank whatever its bounds, and the sizes of the axes it does not slice
// (known when `axes` is a constant or data propagation found it in `shape_data`; without `axes` every
// axis may be sliced). Fills the output types of `m` where they are unknown; returns whether it
// filled anything.
bool fill_slice_ranks(onnx::ModelProto& m, const std::unordered_map<std::string, onnx::TensorShapeProto>& shape_data);

}  // namespace graphrun::passes

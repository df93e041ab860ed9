// Load-time pass fill_resize_ranks: the output types of Resize and Upsample nodes whose scales or sizes ONNX
// shape inference cannot read (torch computes a size from Shape), which ONNX 1.12 leaves without a rank.
// Like fill_slice_ranks it rewrites the ONNX proto during graph::load_onnx's shape inference.
#pragma once
#include <onnx/onnx_pb.h>

#include <string>
#include <unordered_map>

namespace graphrun::passes {

// A Resize keeps its input's rank; its dims are `sizes` where data propagation found them (in `shape_data`),
// else floor(input dim * scale) where the scales are constants. Fills the output types of `m` where they are unknown; returns whether it
// filled anything.
bool fill_resize_ranks(onnx::ModelProto& m, const std::unordered_map<std::string, onnx::TensorShapeProto>& shape_data);

}  // namespace graphrun::passes

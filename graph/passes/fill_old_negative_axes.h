// Load-time pass fill_old_negative_axes: negative axes that ops before opset 11 do not take, counted
// from the front where the input's rank is known. torch writes `torch.cat(..., dim=-1)` as Concat with
// axis -1 at every opset; ONNX's inference of Concat-4 refuses it, so the value and everything after it
// stays without a rank, and the version converter (which a training run below opset 13 goes through)
// fails on the first Softmax it cannot size. Like fill_reshape_dims it rewrites the ONNX proto during
// graph::load_onnx's shape inference.
#pragma once
#include <onnx/onnx_pb.h>

namespace graphrun::passes {

// For a model whose default opset is below 11: the `axis` of Concat, Gather, Split, Flatten, Softmax,
// LogSoftmax, Hardmax, ArgMax, ArgMin, Compress and Scatter, and the `axes` of Squeeze, Unsqueeze and
// the Reduce ops, made non-negative (axis + rank; Unsqueeze counts the output's rank) where the rank
// of the input is known. Returns whether it changed anything.
bool fill_old_negative_axes(onnx::ModelProto& m);

}  // namespace graphrun::passes

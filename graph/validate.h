// Checks an untrusted ONNX model before ONNX's checker and shape inference (libonnx 1.12) and graphrun's
// own code see it: what the checker lets through but inference or the kernels trip over. Each
// violation is one line naming the model, the node, the attribute and the allowed range.
#pragma once
#include <onnx/onnx_pb.h>

#include <functional>
#include <string>

namespace graphrun {

// "node 'conv1' (Conv)", or "node #3 (Conv)" for a node without a name.
std::string proto_node_desc(const onnx::NodeProto& np, int index);

// Whether the node is one of ONNX's sequence or optional ops (SequenceConstruct, SplitToSequence,
// ConcatFromSequence, OptionalHasElement, ...). graphrun's kernels read tensors only: these run where the
// load-time pass resolve_static_sequences turns them into the tensors they hold, and are refused elsewhere.
bool sequence_or_optional_op(const onnx::NodeProto& n);
// How a refusal of sequence and optional values begins; graphrun run loads such a model again with its inputs known.
constexpr const char* kSequenceRefusal = "optional/sequence types are not supported";
constexpr const char* kSequenceRefusalWhy =
    "(graphrun reads tensors: graphrun run takes sequence and optional inputs and outputs, and a list whose length "
    "is known when the model loads becomes its tensors)";

// Before the checker: value types (tensors only), names, graph outputs, initializer sizes against their
// data, and every node's attributes that do not depend on shapes (strides > 0, list lengths that
// agree, known enum values).
void validate_model(const onnx::ModelProto& m, const std::string& what);

// Before shape inference: the ops whose ONNX inference indexes attribute lists by their inputs' ranks
// (Conv, ConvTranspose, the pools) against those ranks, as inference would see them: `infer` (the
// inference graphrun runs) is run on the part of the graph before each such node.
void validate_before_inference(const onnx::ModelProto& m, const std::string& what,
                               const std::function<void(onnx::ModelProto&)>& infer);

// After shape inference, before the model becomes a Graph: axes, permutations, pads and constant
// shapes against the ranks inference found, the input ranks ops require, element types against each
// op's schema, and the size of every value whose shape is known against the tensor limit.
void validate_inferred(const onnx::ModelProto& m, const std::string& what);

}  // namespace graphrun

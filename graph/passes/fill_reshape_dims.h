// Load-time pass fill_reshape_dims: the output shapes of Reshapes whose target ONNX shape inference
// computed but could not divide out (torch's flatten), filled in before a second inference round.
// It rewrites the ONNX proto during graph::load_onnx's shape inference, so it is not a Graph pass.
#pragma once
#include <onnx/onnx_pb.h>

#include <map>
#include <string>
#include <unordered_map>

namespace graphrun::passes {

// The tensor types of the graph's inputs, value infos and outputs, by value name, to fill in place
// (shared by the load-time fill passes).
std::map<std::string, onnx::TypeProto*> tensor_types(onnx::GraphProto& g);
// The types of the graph's initializers (which need not be graph inputs, so `tensor_types` lacks them):
// their element types and sizes, for passes that read an input's type.
std::map<std::string, onnx::TypeProto> initializer_types(const onnx::GraphProto& g);
// The type of value `name` in `types`, or of a value_info added to `g` (and to `types`) for it.
onnx::TypeProto* output_type(onnx::GraphProto& g, std::map<std::string, onnx::TypeProto*>& types,
                             const std::string& name);

// Reshape(x[N,50,4,4], [N,-1]) (the target computed by Shape/Gather/Concat) comes out of ONNX shape
// inference as [N,?] or, before opset 14, untyped: ONNX does not divide out symbols. `shape_data`
// holds what ONNX's data propagation found for such shape tensors. When input and output hold the
// same symbols, the -1 dimension is the quotient of the known sizes (800 here). Fills the output
// types of `m` where they are unknown (keeping what is known); returns whether it filled anything.
// A target whose values are unknown but whose length k is known still gives the output its rank k.
bool fill_reshape_dims(onnx::ModelProto& m, const std::unordered_map<std::string, onnx::TensorShapeProto>& shape_data);

}  // namespace graphrun::passes

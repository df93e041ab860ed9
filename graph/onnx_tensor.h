// Conversions between graphrun Tensors and ONNX TensorProtos, shared by the model and tensor-file readers.
// Internal to graph/: the rest of graphrun never sees protobuf types.
#pragma once
#include <onnx/onnx_pb.h>

#include <string>

#include "graph/tensor.h"

namespace graphrun {

// What a TensorProto's header promises: element type, shape and data bytes, checked (a supported type,
// no negative dimension, within the tensor size limit) before anything is read or allocated.
struct ProtoLayout {
  DType dtype = DType::Undefined;
  Shape shape;
  size_t bytes = 0;
};
ProtoLayout proto_layout(const onnx::TensorProto& p, const std::string& what);

// Reads raw_data or the typed fields (float_data, int32_data, ...); `what` names the tensor in errors
// ("model.onnx: initializer 'conv1.weight'"). External data and unsupported element types are errors.
Tensor tensor_from_proto(const onnx::TensorProto& p, const std::string& what);
// Writes dims, data_type and raw_data (little-endian, as ONNX stores it).
void tensor_to_proto(const Tensor& t, const std::string& name, onnx::TensorProto* p);

// The ONNX name of an element type ("FLOAT", "INT64") for messages.
std::string onnx_dtype_name(int32_t onnx_type);

}  // namespace graphrun

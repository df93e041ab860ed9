// Tensor files: numpy .npy and ONNX TensorProto .pb (as the ONNX backend tests store them).
#pragma once
#include <string>

#include "graph/tensor.h"

namespace graphrun {

Tensor read_npy(const std::string& path);
void write_npy(const std::string& path, const Tensor& t);
Tensor read_tensor_pb(const std::string& path);
void write_tensor_pb(const std::string& path, const Tensor& t, const std::string& name = "");
// By extension: .npy or .pb. Errors name the file.
Tensor read_tensor_file(const std::string& path);

}  // namespace graphrun

// Tensor files: numpy .npy and ONNX TensorProto .pb (as the ONNX backend tests store them).
#pragma once
#include <string>

#include "graph/tensor.h"

namespace graphrun {

Tensor read_npy(const std::string& path);
void write_npy(const std::string& path, const Tensor& t);
// A .pb file names its tensor; when `expected_name` is given, a tensor named otherwise is an error
// (the file is probably meant for another input).
Tensor read_tensor_pb(const std::string& path, const std::string& expected_name = "");
void write_tensor_pb(const std::string& path, const Tensor& t, const std::string& name = "");
// The same readers over a file's bytes (`path` names it in errors); the fuzz targets call these.
Tensor parse_npy(const std::string& bytes, const std::string& path);
Tensor parse_tensor_pb(const std::string& bytes, const std::string& path, const std::string& expected_name = "");
// By extension: .npy or .pb. Errors name the file.
Tensor read_tensor_file(const std::string& path, const std::string& expected_name = "");

}  // namespace graphrun

// Tensor files: numpy .npy and ONNX TensorProto .pb (as the ONNX backend tests store them).
#pragma once
#include <string>
#include <vector>

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

// A value of ONNX's sequence and optional types, as onnx's SequenceProto and OptionalProto hold it (the backend
// tests' input_N.pb and output_N.pb; onnx.numpy_helper.from_list and from_optional write them): a sequence of
// tensors, or an optional that holds nothing, a tensor or a sequence of tensors. Sequences of sequences, maps and
// sparse tensors are not read.
struct CompositeValue {
  bool optional = false;  // an optional (else a sequence)
  bool none = false;      // an optional without a value
  bool sequence = true;   // a sequence, or an optional holding one (else an optional holding tensors[0])
  std::vector<Tensor> tensors;
  std::string type() const;  // "sequence", "optional" (of a tensor) or "optional(sequence)"
};
// The most tensors a sequence holds in graphrun (each becomes a value of the graph: an input, a Split's output).
constexpr int64_t kMaxSequenceLength = 4096;
// A .pb file holding an onnx SequenceProto (`optional` false) or OptionalProto, of at most kMaxSequenceLength
// tensors; errors name the file.
CompositeValue read_composite_pb(const std::string& path, bool optional, const std::string& expected_name = "");
CompositeValue parse_composite_pb(const std::string& bytes, const std::string& path, bool optional,
                                  const std::string& expected_name = "");
void write_composite_pb(const std::string& path, const CompositeValue& v, const std::string& name = "");

}  // namespace graphrun

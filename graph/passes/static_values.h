// What a load-time pass can know of a model's small integer and bool tensors
// before it runs: the values of conditions, trip counts and shapes computed
// from Constants, initializers and the shape values ONNX's inference finds, and
// the renaming an inlined subgraph needs. Shared by inline_static_ifs and
// unroll_static_loops, which rewrite the ONNX proto in graph::load_onnx.
#pragma once
#include <onnx/onnx_pb.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "graph/tensor.h"

namespace graphrun::passes {

// Shape inference on a model (checked first, as the whole model would be),
// returning the values of its small int64 shape tensors (ONNX's data
// propagation and propagate_shape_values) by value name.
using ShapeData = std::unordered_map<std::string, onnx::TensorShapeProto>;
using InferShapeData = std::function<ShapeData(onnx::ModelProto& prefix)>;

namespace static_values {

// A small integer or bool tensor: its ONNX element type, dimensions and
// elements in row-major order.
struct Value {
  int32_t type = onnx::TensorProto::INT64;
  std::vector<int64_t> dims;
  std::vector<int64_t> data;
};

// Conditions and the shapes and pads they are computed from are scalars and
// short vectors: a longer tensor is not evaluated.
constexpr int64_t kMaxElements = 64;
constexpr int kMaxDepth = 256;

bool default_domain(const std::string& d);
bool integer_type(int32_t t);
bool has_subgraph(const onnx::NodeProto& n);
// A node a pass cannot see through when it infers what decides control flow: one with a subgraph, or one of
// sequences or optionals (which only resolve_static_sequences takes, after unrolling).
bool opaque(const onnx::NodeProto& n);
const onnx::AttributeProto* attr(const onnx::NodeProto& n, const char* name);

// The values of the small integer and bool tensors a condition is computed
// from: Constants, initializers, the shape values inference found (`data`), and
// the shape arithmetic torch exports over them.
class Evaluator {
 public:
  // `outer`, when given, answers for the names `g` does not define (a loop body
  // reads its outer graph).
  Evaluator(const onnx::GraphProto& g, const ShapeData& data, Evaluator* outer = nullptr);
  // `name` has value `v` (a loop body's inputs in one iteration).
  void bind(const std::string& name, Value v) {
    locals_.insert(name);
    memo_[name] = std::move(v);
  }
  // `name` is not known here (a loop body's input that carries data), whatever `outer` knows by that name.
  void unknown(const std::string& name) {
    locals_.insert(name);
    memo_[name] = std::nullopt;
  }
  // `name`, whatever computes it, has dimensions `dims` (found by inference), which Shape and Size read.
  void set_dims(const std::string& name, std::vector<int64_t> dims) { dims_[name] = std::move(dims); }
  std::optional<Value> value_of(const std::string& name);
  // The dimensions of a constant (initializer or Constant node), whatever its
  // element type.
  std::optional<std::vector<int64_t>> constant_dims(const std::string& name) const;
  static std::optional<Value> tensor_value(const onnx::TensorProto& t);

 private:
  std::optional<Value> compute(const std::string& name);
  std::optional<Value> input(const onnx::NodeProto& n, int i);
  std::optional<Value> evaluate(const onnx::NodeProto& n);
  // Same elements, new dimensions.
  std::optional<Value> reshaped(const onnx::NodeProto& n);
  std::optional<Value> concat(const onnx::NodeProto& n);
  std::optional<Value> slice(const onnx::NodeProto& n);
  std::optional<Value> transpose(const onnx::NodeProto& n);
  // Gather along axis 0 of a vector.
  std::optional<Value> gather(const onnx::NodeProto& n);
  // Element-wise, with one side a single element or both of the same
  // dimensions.
  std::optional<Value> elementwise(const onnx::NodeProto& n);
  const onnx::GraphProto& g_;
  const ShapeData& data_;
  std::map<std::string, int> producer_;
  std::map<std::string, const onnx::TensorProto*> inits_;
  std::map<std::string, std::optional<Value>> memo_;
  Evaluator* outer_ = nullptr;
  std::set<std::string> locals_;  // bound or unknown here: never asked of `outer_`
  std::map<std::string, std::vector<int64_t>> dims_;
  int depth_ = 0;
};

// Every node of `g` whose output the constants alone decide becomes a Constant
// of that value (torch computes F.pad's pads from Constants through
// ConstantOfShape, Slice and Transpose; ONNX's inference needs them as a
// constant to give the padded value a shape).
void fold_constant_integers(onnx::GraphProto& g);

// The nodes that compute `name`, through their inputs.
std::set<int> ancestors(const onnx::GraphProto& g, const std::map<std::string, int>& producer, const std::string& name);

// A model of the nodes `nodes` (indices) of m's main graph alone, in the file's order, without graph outputs or value
// infos: what a pass infers to learn the values its decisions need.
onnx::ModelProto model_of(const onnx::ModelProto& m, const std::set<int>& nodes);

// Every value and node name a graph and its subgraphs define: an inlined
// subgraph's must not take one.
void collect_names(const onnx::GraphProto& g, std::set<std::string>& values, std::set<std::string>& nodes);

// `base`, or `base__K` for the first K that is not in `taken`; taken from then
// on.
std::string unused(const std::string& base, std::set<std::string>& taken);

// A nested subgraph reads the renamed values of the subgraph it sits in by
// their new names (except where it defines the name itself).
void rename_reads(onnx::GraphProto& g, const std::map<std::string, std::string>& rename);

// A Constant node `name` writing `t` to `output`.
onnx::NodeProto constant_node(const Tensor& t, const std::string& name, const std::string& output);

// Appends one copy of `body` to `out`: its inputs read `inputs` (by position; an empty name for an input the body
// does not read), the names in `renamed` read what they map to (the body's initializers, as Constants), its nodes'
// outputs take fresh names ending in `tag` (not in `values`, which gains them), its named nodes fresh names (from
// `nodes`). Returns the names of the copy's outputs.
std::vector<std::string> instantiate(const onnx::GraphProto& body, const std::vector<std::string>& inputs,
                                     std::map<std::string, std::string> renamed, const std::string& tag,
                                     std::set<std::string>& values, std::set<std::string>& nodes,
                                     google::protobuf::RepeatedPtrField<onnx::NodeProto>& out);

}  // namespace static_values
}  // namespace graphrun::passes

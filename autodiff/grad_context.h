// What a gradient rule sees (the forward node, the gradients of its outputs, which inputs need one)
// and how it emits backward nodes: rules build graph nodes through this class, they never compute numbers.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "graph/ir.h"

namespace graphrun::autodiff {

// Element types of values, inferred from the graph's value infos, initializers and producers.
class ValueTypes {
 public:
  explicit ValueTypes(const Graph& g) : g_(g) {}
  DType dtype(const std::string& value);
  void set(const std::string& value, DType t) { memo_[value] = t; }
  // Scalar constants already emitted ("f64:0.5" -> value name): one Constant node serves every rule.
  std::map<std::string, std::string> scalars;

 private:
  const Graph& g_;
  std::map<std::string, DType> memo_;
  std::map<std::string, int> producer_;
};

class GradContext {
 public:
  GradContext(Graph& g, int node_index, ValueTypes& types, std::vector<std::string> output_grads,
              std::vector<bool> input_needs_grad);

  // ---- the forward node
  const Node& fwd() const { return fwd_; }
  const std::string& in(size_t i) const;   // forward input name ("" when absent)
  const std::string& out(size_t i) const;  // forward output name ("" when unused)
  size_t num_inputs() const { return fwd_.inputs.size(); }
  // The forward output i, added to the forward node when it was not requested (MaxPool's Indices,
  // Dropout's mask, SoftmaxCrossEntropyLoss's log_prob): forward values are reused, never recomputed.
  std::string fwd_output(size_t i);

  // ---- gradients
  // The gradient of output i, or "" when no gradient flows into it (it is zero).
  const std::string& dy(size_t i = 0) const;
  // The gradient of output i, materialized as zeros of the output's shape when none flows.
  std::string dy_or_zeros(size_t i);
  // Whether input i needs a gradient. Rules emit nothing for inputs that do not.
  bool needs(size_t i) const { return i < needs_.size() && needs_[i]; }
  // Sets the gradient of input i (only for inputs that need one).
  void set_dx(size_t i, const std::string& grad);
  const std::map<size_t, std::string>& dx() const { return dx_; }

  // ---- graph facts
  Graph& graph() { return g_; }
  int64_t opset() const { return g_.opset(""); }
  DType dtype(const std::string& v) { return types_.dtype(v); }
  const ValueInfo* info(const std::string& v) const { return g_.info(v); }
  // The value's type from its value info, else from its initializer; has_shape false when unknown.
  ValueInfo type_of(const std::string& v) const;
  int rank(const std::string& v) const;                 // -1 when unknown
  bool static_shape(const std::string& v, Shape& s) const;  // true when every dim is known
  // The value of a constant (initializer or Constant node output), or an undefined Tensor.
  Tensor constant_value(const std::string& v) const;

  // ---- emitting nodes (names derive from the forward node's name)
  std::string op(const std::string& type, const std::vector<std::string>& inputs,
                 std::map<std::string, Attribute> attrs = {}, const std::string& domain = "");
  // A node with several outputs; want[i] false leaves output i unnamed ("").
  std::vector<std::string> op_n(const std::string& type, const std::vector<std::string>& inputs,
                                const std::vector<bool>& want, std::map<std::string, Attribute> attrs = {},
                                const std::string& domain = "");
  std::string scalar(double v, DType t);                // Constant scalar
  std::string ints(const std::vector<int64_t>& v);      // Constant i64 1-D
  std::string shape_of(const std::string& v);           // Constant when static, else Shape(v)
  // A Reshape target giving v's shape: a Constant when at most one dim is unknown (as -1), else Shape(v).
  std::string reshape_target(const std::string& v);
  std::string zeros_like(const std::string& v);         // zeros of v's shape and type

  // ---- opset-aware building blocks
  std::string reduce_sum(const std::string& x, const std::vector<int64_t>& axes, bool keepdims);
  std::string unsqueeze(const std::string& x, const std::vector<int64_t>& axes);
  std::string squeeze(const std::string& x, const std::vector<int64_t>& axes);
  std::string reshape(const std::string& x, const std::string& shape);
  std::string slice(const std::string& x, const std::vector<int64_t>& starts, const std::vector<int64_t>& ends,
                    const std::vector<int64_t>& axes, const std::vector<int64_t>& steps = {});
  // Pad in "constant" (zero) mode; pads as ONNX orders them ([x1_begin, x2_begin, ..., x1_end, ...]).
  std::string pad(const std::string& x, const std::vector<int64_t>& pads);
  std::string transpose(const std::string& x, const std::vector<int64_t>& perm);
  // Sums `grad` (the gradient of a broadcast result) back to the shape of `x`: ReduceSum (+Reshape or
  // Squeeze) when the shapes are known well enough, else ai.graphrun.SumToShape(grad, Shape(x)).
  // `grad_like` names a value with the shape of grad (usually the forward output).
  std::string reduce_to(const std::string& grad, const std::string& grad_like, const std::string& x);
  // Same, against explicit static shape info for x (for reshaped views such as MatMul's 1-D operands).
  std::string reduce_to_info(const std::string& grad, const ValueInfo* grad_info, const ValueInfo& x_info,
                             const std::string& x_for_shape);

 private:
  std::string fresh(const std::string& what);
  Graph& g_;
  int index_;
  Node fwd_;
  ValueTypes& types_;
  std::vector<std::string> dys_;
  std::vector<bool> needs_;
  std::map<size_t, std::string> dx_;
};

}  // namespace graphrun::autodiff

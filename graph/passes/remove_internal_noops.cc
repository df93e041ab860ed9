// Pass remove_internal_noops: no-op Dropout, Cast and Reshape out of the executor's graph, readers rewired.
#include "graph/passes/remove_internal_noops.h"

#include <optional>

#include "graph/passes/remove_noops.h"

namespace graphrun::passes {

namespace {

const PassInfo& kInfo = register_pass(
    "remove_internal_noops",
    "executor only: also drops Dropout passing X through, Cast to X's type, Reshape to X's shape (readers rewired)");

// A constant scalar's value, or `otherwise` when `v` is absent; nullopt when it is not a constant scalar.
std::optional<double> constant_scalar(const Graph& g, const Node& n, size_t input, double otherwise) {
  if (!n.has_input(input)) return otherwise;
  const Tensor* t = constant_of(g, n.inputs[input]);
  if (!t || !t->defined() || t->numel() != 1) return std::nullopt;
  return t->as_doubles().at(0);
}

// The kernel's rule (runtime/kernels/cpu/norm.cc): identity before opset 12; from 12 on unless
// training_mode is true, and a zero ratio draws nothing either (so dropping it keeps the random stream).
bool passes_through_dropout(const Graph& g, const Node& n) {
  if (g.opset("") < 12) return true;
  const std::optional<double> training = constant_scalar(g, n, 2, 0), ratio = constant_scalar(g, n, 1, 0.5);
  return (training && *training == 0) || (ratio && *ratio == 0);
}

bool same_type_cast(const Graph& g, const Node& n) {
  const ValueInfo* x = g.info(n.inputs[0]);
  return x && x->dtype != DType::Undefined && n.has_attr("to") && n.attr_i("to", 0) == static_cast<int64_t>(x->dtype);
}

// Reshape to a constant shape that is X's: each target entry equals X's dimension, or is 0 (copy it,
// without allowzero), or is the one -1 while every other dimension matched (so -1 is X's too).
bool same_shape_reshape(const Graph& g, const Node& n) {
  const ValueInfo* x = g.info(n.inputs[0]);
  if (!x || !x->has_shape || !n.has_input(1) || n.attr_i("allowzero", 0) != 0) return false;
  const Tensor* t = constant_of(g, n.inputs[1]);
  if (!t || !t->defined() || t->rank() != 1) return false;
  const std::vector<int64_t> target = t->as_int64s();
  if (target.size() != x->shape.size()) return false;
  int inferred = 0;
  for (size_t k = 0; k < target.size(); ++k) {
    if (target[k] == 0) continue;
    if (target[k] == -1) {
      ++inferred;
      continue;
    }
    if (!x->shape[k].known() || x->shape[k].size != target[k]) return false;
  }
  return inferred <= 1;
}

bool is_internal_noop(const Graph& g, const Node& n) {
  if (is_identity_or_zero_pad(g, n)) return true;
  if (n.op_type == "Dropout") return passes_through_dropout(g, n);
  if (n.op_type == "Cast") return same_type_cast(g, n);
  if (n.op_type == "Reshape") return same_shape_reshape(g, n);
  return false;
}

}  // namespace

Graph remove_internal_noops(const Graph& g) { return remove_noops_if(g, is_internal_noop); }

Pass remove_internal_noops_pass() { return make_pass(kInfo, "", remove_internal_noops); }

}  // namespace graphrun::passes

// The gradient facts of the op table as autodiff reads them: op -> rule (a function that emits the backward
// nodes of one forward node), or "no gradient" for ops whose outputs are not differentiable (Shape, ...).
// Each family file, autodiff/rules/<family>.cc, registers its ops' rules with GR_REGISTER_OPS.
#pragma once
#include <string>
#include <unordered_map>

#include "autodiff/grad_context.h"
#include "graph/op_table.h"

namespace graphrun::autodiff {

using GradRule = graphrun::GradRule;

struct RuleEntry {
  GradRule rule = nullptr;    // nullptr together with differentiable=false: no gradient
  bool differentiable = true;
};

// Keyed by Node::op_key() ("Conv", "ai.graphrun::ConvGrad"): every op of the op table with a rule or
// marked as having no gradient. An op missing here that lies between a parameter and the loss is an
// error naming op and node.
const std::unordered_map<std::string, RuleEntry>& gradient_rules();

// A node's axis attribute in [0, rank): negative counts from the end; an error naming the node when the
// rank is unknown (-1) or the axis outside it.
inline int64_t norm_axis(int64_t axis, int rank, const Node& n) {
  int64_t a = axis < 0 ? axis + rank : axis;
  GR_CHECK(rank >= 0 && a >= 0 && a < (rank > 1 ? rank : 1), n.describe() << ": axis " << axis << " needs a known rank");
  return a;
}

}  // namespace graphrun::autodiff

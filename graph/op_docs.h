// docs/ops.md's generated part: the op table as Markdown (graphrun's own ops with their schemas, every
// op with its kernels, host facts and gradient, the ops without a gradient rule).
#pragma once
#include <string>
#include <vector>

#include "graph/op_table.h"

namespace graphrun {

// The Markdown between docs/ops.md's "generated" markers; tests/op_table_test.cc keeps the file equal to it.
std::string op_table_markdown(const OpTable& table);

// Ops of the default ONNX domain that have a kernel but no gradient rule (and are not marked as
// having no gradient): a model using one on the path to the loss cannot be trained yet.
std::vector<std::string> ops_missing_a_gradient_rule(const OpTable& table);

}  // namespace graphrun

// Renders the op table as the generated part of docs/ops.md.
#include "graph/op_docs.h"

#include <sstream>

namespace graphrun {

namespace {

// "dloss, log_prob, labels[, weights]"; outputs are all optional in ONNX's sense ("" leaves one unused).
std::string formals(const std::vector<OpSchemaSpec::Formal>& fs, bool mark_optional) {
  std::string r;
  for (const auto& f : fs) {
    std::string item = (r.empty() ? "" : ", ") + f.name + (f.arity == OpSchemaSpec::Arity::Variadic ? "..." : "");
    r += mark_optional && f.arity == OpSchemaSpec::Arity::Optional ? "[" + item + "]" : item;
  }
  return r;
}

std::string attrs(const std::vector<OpSchemaSpec::Attr>& as) {
  if (as.empty()) return "none";
  std::string r;
  for (const auto& a : as) {
    r += (r.empty() ? "" : ", ") + a.name;
    if (a.default_value) r += " = " + a.default_value->str();
  }
  return r;
}

bool has_kernel(const OpFacts& f) {
  for (KernelFn k : f.kernels)
    if (k) return true;
  return false;
}

std::string gradient(const OpFacts& f) {
  switch (f.gradient) {
    case GradientKind::Rule: return "rule (" + f.family_of("gradient") + ")";
    case GradientKind::None: return "none (" + f.family_of("gradient") + ")";
    default: return "**missing**";
  }
}

std::string host_inputs(const OpFacts& f) {
  std::string r;
  for (int i : f.host_inputs) r += (r.empty() ? "" : ", ") + std::to_string(i);
  return r;
}

std::string code_list(const std::vector<std::string>& v) {
  std::string r;
  for (const auto& s : v) r += (r.empty() ? "`" : ", `") + s + "`";
  return r.empty() ? "none" : r;
}

}  // namespace

std::vector<std::string> ops_missing_a_gradient_rule(const OpTable& table) {
  std::vector<std::string> r;
  for (const auto& [key, f] : table.ops())
    if (f.domain.empty() && has_kernel(f) && f.gradient == GradientKind::Missing) r.push_back(key);
  return r;
}

std::string op_table_markdown(const OpTable& table) {
  std::ostringstream os;
  os << "### graphrun's own ops (domain `ai.graphrun`, version 1)\n\n"
     << "| op | inputs | outputs | attributes | meaning |\n|---|---|---|---|---|\n";
  for (const auto& [key, f] : table.ops())
    if (f.schema)
      os << "| `" << f.op << "` | " << formals(f.schema->inputs, true) << " | " << formals(f.schema->outputs, false) << " | "
         << attrs(f.schema->attrs) << " | " << f.schema->doc << " |\n";

  os << "\n### Every op\n\n"
     << "CPU, CUDA: the family file of the kernel (`runtime/kernels/cpu/<family>.cc`, "
        "`runtime/kernels/cuda/<family>.cu`). Host inputs: the input positions its kernels read on the host. "
        "Host shapes: may run on the host in a device graph's shape computations (metadata: reads only its "
        "inputs' shapes). Gradient: a rule in `autodiff/rules/<family>.cc`, none (its outputs carry no "
        "gradient), or missing.\n\n"
     << "| op | CPU | CUDA | host inputs | host shapes | gradient |\n|---|---|---|---|---|---|\n";
  for (const auto& [key, f] : table.ops())
    os << "| `" << key << "` | " << f.family_of("CPU kernel") << " | " << f.family_of("CUDA kernel") << " | "
       << host_inputs(f) << " | " << (f.host_shapes ? (f.metadata_only ? "metadata" : "yes") : "") << " | "
       << gradient(f) << " |\n";

  std::vector<std::string> never;
  for (const auto& [key, f] : table.ops())
    if (!f.domain.empty() && f.gradient == GradientKind::Missing) never.push_back(key);
  os << "\n### Ops without a gradient rule\n\n"
     << "ONNX ops with a kernel but no gradient rule yet (a model using one on the path to the loss fails "
        "with the op and node names): "
     << code_list(ops_missing_a_gradient_rule(table)) << ".\n\n"
     << "graphrun's own ops without a rule (a second derivative through one, an ONNX Gradient node on the loss's "
        "path, fails naming it; the training ops are never on that path; LSTM, GRU and RNN nodes that a Gradient "
        "node differentiates twice are unrolled into standard ops instead, so their gradient ops are not reached): "
     << code_list(never) << ".\n";
  return os.str();
}

}  // namespace graphrun

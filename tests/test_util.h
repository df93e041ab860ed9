// Helpers shared by the test suites: random tensors, one-node graphs, comparisons, running Python and the CLI.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "graph/ir.h"
#include "runtime/executor.h"

namespace graphrun::testing {

// Uniform in [lo, hi), deterministic in seed.
Tensor random_tensor(const Shape& shape, uint64_t seed, float lo = -1.f, float hi = 1.f);
Tensor random_int_tensor(const Shape& shape, uint64_t seed, int64_t lo, int64_t hi);  // [lo, hi)

// A graph of one node: inputs named in0.. (an undefined Tensor is an absent optional input, left out
// of `feeds`), outputs out0..; `feeds` receives the graph inputs by name.
Graph single_node_graph(const std::string& op, const std::vector<Tensor>& inputs,
                        const std::map<std::string, Attribute>& attrs, int num_outputs, int64_t opset,
                        const std::string& domain, std::map<std::string, Tensor>& feeds);

// A node named `name` of the default domain, without attributes.
Node make_node(const std::string& name, const std::string& op, std::vector<std::string> inputs,
               std::vector<std::string> outputs);

// Builds a graph of one node (inputs named in0.., outputs out0..), runs it on the CPU, returns its outputs.
// Inputs with an empty (undefined) Tensor are passed as absent optional inputs.
// `initializers` names inputs (by index) that become initializers rather than graph inputs.
std::vector<Tensor> run_node(const std::string& op, const std::vector<Tensor>& inputs,
                             const std::map<std::string, Attribute>& attrs = {}, int num_outputs = 1,
                             int64_t opset = 17, const std::string& domain = "");

double max_abs_diff(const Tensor& a, const Tensor& b);  // shapes and dtypes must match
// Max |a-b| / max(1, max|b|): the error "relative to the output scale".
double max_rel_diff(const Tensor& a, const Tensor& b);

std::string source_dir();   // the repository root ($GRAPHRUN_SOURCE_DIR when set)
std::string binary_dir();   // the CMake build folder ($GRAPHRUN_BINARY_DIR when set)
std::string python();       // /usr/bin/python3 by default (Debian's torch, onnx, numpy)
std::string graphrun_cli(); // path of the built graphrun binary

struct CommandResult {
  int exit_code;
  std::string output;  // stdout and stderr together
};
CommandResult run_command(const std::string& cmd);
// A fresh empty folder under the build dir for this test's files.
std::string temp_dir(const std::string& name);

}  // namespace graphrun::testing

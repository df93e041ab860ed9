// Human-readable views of a graph: text (one node a line, with dtypes and shapes) and Graphviz dot.
#pragma once
#include <string>

#include "graph/ir.h"

namespace graphrun {

// e.g. "%relu1: f32[N,20,26,26] = Relu(%conv1)"; control characters in names escaped (printable: "\n").
std::string print_text(const Graph& g);
std::string print_dot(const Graph& g);

}  // namespace graphrun

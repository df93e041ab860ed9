// Pass place_shape_computations: in a graph that runs on a device, the small integer computations
// whose results a device kernel reads on the host (a Reshape's shape, Slice's starts...) stay on the
// host, run by the CPU kernels, so that no step copies them back and waits for the device.
#pragma once
#include <set>
#include <string>
#include <vector>

#include "graph/ir.h"

namespace graphrun::passes {

struct HostPlacement {
  std::vector<bool> host_nodes;       // per node of the graph: runs on the host
  std::set<std::string> host_values;  // values kept in host memory
};

// A value stays on the host when every consumer reads it on the host (op table: host_inputs) or is
// itself a host node; host nodes are ops the op table marks host_shapes (Shape, Gather, Concat, Add,
// Cast, ...) with a CPU kernel, whose inputs are host values (small integer initializers, Constant and
// Shape/Size outputs); ops marked metadata_only (Shape, Size) may read a device value. `pinned` values
// (fetched values, state) stay where they were. The greatest fixpoint: start from every candidate and
// drop what a device consumer needs until nothing changes.
HostPlacement place_shape_computations(const Graph& g, const std::set<std::string>& pinned);

}  // namespace graphrun::passes

// The loop of an Einsum node, shared by the CPU and CUDA kernels: every label's range in one order (the
// output's labels first, then the summed ones) and each operand's stride per label.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "graph/tensor.h"

namespace graphrun::runtime {

struct EinsumPlan {
  Shape out_shape;
  int out_labels = 0;                         // the first out_labels entries of dims are the output's
  std::vector<int64_t> dims;                  // every label's range, in loop order
  std::vector<std::vector<int64_t>> strides;  // [operand][label]: summed over repeated labels, 0 where broadcast
};

// The plan of `equation` over operands of these shapes; throws naming the equation when they disagree.
EinsumPlan plan_einsum(const std::string& equation, const std::vector<Shape>& shapes);

}  // namespace graphrun::runtime

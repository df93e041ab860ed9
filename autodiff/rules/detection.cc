// Gradient rules of the detection family: NonMaxSuppression's output is box indices, which carry no gradient.
// RoiAlign has no rule yet (`check` lists it where a loss depends on it).
#include "autodiff/rules/rules.h"

namespace graphrun::autodiff {

GR_REGISTER_OPS(detection) { ops.op("NonMaxSuppression").no_gradient().output_dtype(0, DType::I64); }

}  // namespace graphrun::autodiff

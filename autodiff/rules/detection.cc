// Gradient rules of the detection family: NonMaxSuppression's output is box indices, which carry no gradient.
#include "autodiff/rules/rules.h"

namespace graphrun::autodiff {

GR_REGISTER_OPS(detection) { ops.op("NonMaxSuppression").no_gradient().output_dtype(0, DType::I64); }

}  // namespace graphrun::autodiff

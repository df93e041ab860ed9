// Gradient rules of the text family: TfIdfVectorizer's input is integer tokens, which carry no gradient.
#include "autodiff/rules/rules.h"

namespace graphrun::autodiff {

GR_REGISTER_OPS(text) { ops.op("TfIdfVectorizer").no_gradient().output_dtype(0, DType::F32); }

}  // namespace graphrun::autodiff

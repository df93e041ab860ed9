// Load-time pass inline_static_ifs: an If whose condition is known when the model loads is replaced by
// the branch it takes. torch exports `x.squeeze(dim)` of a dimension it could not size as
// If(Shape(x)[dim] == 1, Squeeze, Identity) (nn.LocalResponseNorm does so), a condition on shapes alone.
// It rewrites the ONNX proto in graph::load_onnx before the model is checked, so it is not a Graph pass;
// an If that depends on the data stays and is refused with the other control flow.
#pragma once
#include <onnx/onnx_pb.h>

#include <string>

#include "graph/passes/static_values.h"

namespace graphrun::passes {

// Repeatedly: the Ifs of the main graph whose condition's inputs come from no other If get their
// conditions from the part of the graph that computes them. That part's nodes that Constants alone decide
// are folded into Constants first (torch computes F.pad's pads through ConstantOfShape, Slice and
// Transpose; ONNX's inference needs them constant to size the padded value), then `infer` runs on it, then
// the condition is evaluated over Constants, integer and bool initializers and the shape values found:
// Equal, Not, And, Or, Xor, Greater, Less, GreaterOrEqual, LessOrEqual, Add, Sub, Mul, Div, Min, Max, Neg,
// Abs, Cast, Identity, Squeeze, Unsqueeze, Reshape, Flatten, Shape, Size, Gather, Concat, Slice, Transpose,
// ConstantOfShape and Range, on tensors of at most 64 elements. Each known condition's If becomes its
// branch's nodes (a value of the branch that has the name of one outside is renamed; the branch's
// initializers become Constants) and an Identity from each branch output to the If's output. Returns how
// many Ifs it replaced. An If whose condition stays unknown is left as it is (the caller refuses it naming
// the node).
int inline_static_ifs(onnx::ModelProto& m, const std::string& what, const InferShapeData& infer);

}  // namespace graphrun::passes

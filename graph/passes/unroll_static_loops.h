// Load-time pass unroll_static_loops: a Loop or Scan whose number of iterations is known when the model loads
// becomes that many copies of its body, chained through the loop-carried values, so that it runs, differentiates
// and trains like any other graph (on every device: the copies are ordinary ops). torch exports a scripted
// `for i in range(n)` over a constant or a static shape as such a Loop; ONNX's own tests and converters from
// other frameworks write Scans over a static sequence.
//
// A Loop is unrolled when its trip count M and its initial condition are known (as inline_static_ifs knows a
// condition: Constants, initializers, shape values), and its body's condition output is known in every
// iteration from the iteration number, the incoming condition, loop-carried integers that are themselves known,
// and known outer values (a `while i < n` over a counter is unrolled; a condition on the data is not). A Scan
// (opset 9 and later; opset 8's form without sequence_lens) is unrolled when the lengths of its scan inputs are
// known. Each iteration's scan outputs are stacked by Unsqueeze and one Concat per output; a scan input is read
// by Gather at the iteration's index, in its direction. What it gives is the ONNX meaning of the op.
//
// The iterations are bounded: unrolling that would add more nodes than the budget is refused with a line naming
// the node (a file cannot make graphrun build a graph it cannot justify). A Loop that runs zero times has empty
// scan outputs; graphrun sizes them only where the body declares their shape. A Loop or Scan whose count stays
// unknown is left as it is and refused with the other control flow.
#pragma once
#include <onnx/onnx_pb.h>

#include <cstdint>
#include <string>

#include "graph/passes/static_values.h"

namespace graphrun::passes {

// How many nodes unrolling may add to one model.
constexpr int64_t kMaxUnrolledNodes = int64_t(1) << 17;

// Unrolls every Loop and Scan of the main graph whose count is known and whose count does not depend on another
// control-flow node's output; returns how many. `budget` is what unrolling may still add, in nodes; it is
// spent. Called again after inline_static_ifs until neither changes the model (a Loop inside a Loop's body, an If
// on the iteration number). `quiet`: no line on stderr (a scratch copy of the model).
int unroll_static_loops(onnx::ModelProto& m, const std::string& what, const InferShapeData& infer, int64_t& budget,
                        bool quiet = false);

}  // namespace graphrun::passes

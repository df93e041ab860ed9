// Load-time pass vectorize_bag_loops: the Loop torch exports for nn.EmbeddingBag becomes the same
// computation without a loop, so that such a model runs, differentiates and trains like any other (on the
// CPU and on GPUs: every op it writes has a kernel on both). torch writes one iteration per bag: the bag's
// token ids are Slice(text, starts[i], ends[i]), their rows Gather(weight, ids) (times the bag's
// per_sample_weights, sliced the same way, when given), reduced over the rows by ReduceSum, ReduceMean or
// ReduceMax into the Loop's one scan output; the loop condition stays true. The rewrite builds a bag mask
// [bags, tokens] (token p is in bag i when start_i <= p < end_i, with Slice's own clamping of negative and
// out-of-range bounds) and computes every bag at once: MatMul(mask, rows) for sum, divided by the bag's size
// for mean (an empty bag: 0 / 0, as ReduceMean over no rows), a masked ReduceMax for max (an empty bag:
// -inf). What it gives is the ONNX meaning of the Loop, up to the order of float additions.
//
// It rewrites the ONNX proto in graph::load_onnx before the model is checked (opsets 11 to 17: the forms of
// the ops it writes), so it is not a Graph pass. A Loop that does anything else is left as it is, and
// refused with the other control flow.
#pragma once
#include <onnx/onnx_pb.h>

#include <string>

namespace graphrun::passes {

// Rewrites every Loop of the main graph that has the shape above; returns how many.
int vectorize_bag_loops(onnx::ModelProto& m, const std::string& what);

}  // namespace graphrun::passes

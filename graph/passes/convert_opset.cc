// Pass convert_opset: old opsets converted before training (see the header).
#include "graph/passes/convert_opset.h"

#include "graph/onnx_io.h"

namespace graphrun::passes {

namespace {
const PassInfo& kInfo = register_pass(
    "convert_opset", "a model below opset 13 converted to opset 15 by onnx's version converter: training reads "
                     "Clip's bounds, Dropout's ratio, Pad's pads, Slice's starts and Unsqueeze's axes as inputs");
}  // namespace

Graph convert_opset_for_training(const Graph& g) {
  const int64_t v = g.opset("");
  return v > 0 && v < kTrainingMinOpset ? convert_opset(g, kTrainingOpset) : g;
}

Pass convert_opset_pass() { return make_pass(kInfo, "", convert_opset_for_training); }

}  // namespace graphrun::passes

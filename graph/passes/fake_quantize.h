// Pass fake_quantize (training pipelines only): a QuantizeLinear whose every reader is a DequantizeLinear with
// the same scale, zero point and axis (or whose one reader is a Clip to constant bounds, torch's narrower
// range, read only by such DequantizeLinears: the bounds become FakeQuantize's quant_min and quant_max) (the Q/DQ pair torch exports for a FakeQuantize module of quantization-
// aware training, and quantization tools write around weights and activations) becomes one
// ai.graphrun::FakeQuantize per DequantizeLinear: a float node computing what PyTorch's fake_quantize computes
// (X * (1 / scale) rounded, where QuantizeLinear divides: the same values but where the quotient's last bit
// decides a tie), whose gradient is PyTorch's straight-through estimator (dY inside the quantized range, 0
// where it saturates).
// By ONNX's meaning the pair's integer middle passes no gradient at all, and nothing behind it would train;
// this is where training follows PyTorch, with a node of its own. `graphrun run` and saved models keep the
// standard pair.
#pragma once
#include "graph/ir.h"
#include "graph/passes/pass.h"

namespace graphrun::passes {

Graph fake_quantize(const Graph& g);
Pass fake_quantize_pass();

}  // namespace graphrun::passes

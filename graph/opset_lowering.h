// Opsets 18 to 28 read as opset 17: each node rewritten into its opset-17 form on load (graph/opset_lowering.cc).
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <functional>
#include <string>

namespace graphrun {

constexpr int64_t kMaxOpset = 17;         // what graphrun's kernels and rules know, and the opset it writes
constexpr int64_t kMaxLoweredOpset = 28;  // newer opsets are read by lowering them to kMaxOpset

// "" for the default domain, however a model spells it.
inline std::string normal_domain(const std::string& d) { return d == "ai.onnx" ? "" : d; }

// The attribute `name` of `n`, or null.
onnx::AttributeProto* find_attr(onnx::NodeProto& n, const std::string& name);

// Infers the types of an opset-17 model in place (its value_info), checking it first as a model file is checked.
using InferTypes = std::function<void(onnx::ModelProto&)>;

// A model of opset 18 to kMaxLoweredOpset becomes a model of opset 17 (nodes rewritten, or refused in one line
// naming the node and `what` where 17 cannot express them); says so once per model on stderr. Other models are
// left as they are. A node whose rewriting needs a shape the file does not state (an Attention's rank, a CumProd's
// length) gets the types of its inputs from `infer_types` run on the nodes rewritten before it, where given.
void lower_new_opset(onnx::ModelProto& m, const std::string& what, const InferTypes& infer_types = nullptr);

// LpNormalization, LpPool and GlobalLpPool, which graphrun has no kernels for, written in ops it has (reductions,
// AveragePool, Pow), valid at the model's opset (7 to 17: after lower_new_opset); so is DFT's inverse of a one-sided
// spectrum (irfft), as the full inverse DFT of the spectrum made whole by its symmetry; and ONNX Runtime's fused
// transformer ops (com.microsoft Gelu, FastGelu, SkipLayerNormalization, Attention, EmbedLayerNormalization, ...), as
// its contrib schemas define them. `infer_types`: as lower_new_opset's.
void decompose_missing_ops(onnx::ModelProto& m, const std::string& what, const InferTypes& infer_types = nullptr);

}  // namespace graphrun

// Load-time pass resolve_static_sequences: sequences and optionals whose contents are known when the model loads
// become the tensors they hold. torch.jit.script writes a Python list that a loop appends to as SequenceEmpty, one
// SequenceInsert per iteration and ConcatFromSequence (torch.stack, torch.cat); once unroll_static_loops has
// unrolled the loop, each sequence is a known list of tensors. graphrun run's sequence and optional inputs are known
// lists too (graph::load_onnx binds them). The pass follows SequenceEmpty, SequenceConstruct, SequenceInsert and
// SequenceErase (at a constant position, or the end), Identity of a sequence, SplitToSequence (constant split
// sizes, or a count the input's static shape gives), SequenceMap (one copy of its body per element) and Optional, and
// rewrites their readers: SequenceAt at a constant position becomes an Identity, SequenceLength and OptionalHasElement
// Constants, OptionalGetElement what the optional holds, ConcatFromSequence a Concat (of Unsqueezes with new_axis).
// What it gives is the ONNX meaning of the ops.
//
// All or nothing: where any sequence or optional value is read by something else (a Loop or If that is left, an op
// not listed, a position not constant), the model keeps its sequence ops and is refused in one line as before. Only
// SequenceLength and OptionalHasElement of known values become Constants then, so that an If or a Loop they decide
// can be resolved and the pass run again. It rewrites the ONNX proto in graph::load_onnx, before the model is checked.
#pragma once
#include <onnx/onnx_pb.h>

#include <string>
#include <vector>

#include "graph/ir.h"
#include "graph/passes/static_values.h"

namespace graphrun::passes {

// Rewrites the main graph's sequences and optionals as above; returns how many nodes it replaced (0: left as it
// was). A graph output that is a sequence or an optional becomes the tensor outputs of its elements (NAME[0],
// NAME[1], ...), described in `outputs`, where `outputs` is given (a graph loaded for one run); else such an output
// keeps the sequence ops.
// With `infer`, a SplitToSequence without constant split sizes takes its count of parts from the dimension
// inference finds along its axis (at most kMaxSequenceLength parts). `said` gains what a user should be told (a
// keepdims the spec ignores), where given.
int resolve_static_sequences(onnx::ModelProto& m, const std::string& what,
                             std::vector<CompositeSlot>* outputs = nullptr, const InferShapeData* infer = nullptr,
                             std::vector<std::string>* said = nullptr);

}  // namespace graphrun::passes

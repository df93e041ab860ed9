// Load-time pass resolve_static_sequences: sequences whose contents are known when the model loads become the
// tensors they hold. torch.jit.script writes a Python list that a loop appends to as SequenceEmpty, one
// SequenceInsert per iteration and ConcatFromSequence (torch.stack, torch.cat); once unroll_static_loops has
// unrolled the loop, each sequence is a known list of tensors. The pass follows SequenceEmpty, SequenceConstruct,
// SequenceInsert and SequenceErase (at a constant position, or the end), Identity of a sequence and SplitToSequence
// with constant split sizes, and rewrites their readers: SequenceAt at a constant position becomes an Identity,
// SequenceLength a Constant, ConcatFromSequence a Concat (of Unsqueezes with new_axis). What it gives is the ONNX
// meaning of the ops.
//
// All or nothing: where any sequence value is read by something else (a graph output, a Loop or If that is left, an
// op not listed, a position not constant), the model is left as it is and refused in one line as before. It rewrites
// the ONNX proto in graph::load_onnx, before the model is checked.
#pragma once
#include <onnx/onnx_pb.h>

#include <string>

namespace graphrun::passes {

// Rewrites the main graph's sequences as above; returns how many sequence nodes it removed (0: left as it was).
int resolve_static_sequences(onnx::ModelProto& m, const std::string& what);

}  // namespace graphrun::passes

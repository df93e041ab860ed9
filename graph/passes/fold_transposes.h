// Pass fold_transposes: on the executor's graph only, Transposes that undo one another or that a Gemm can do
// are removed (exported graphs keep them, standard and unchanged):
//   - Transpose(Transpose(X, p), q) -> Transpose(X, p o q), or X itself where that is the identity (readers
//     rewired). The gradient of MatMul(A, Transpose(W)) transposes the transposed weight back: torch's export
//     of Linear on a 3-D input (every transformer) has one per layer, the backward pass one more per weight;
//   - Transpose(Gemm(A, B), [1, 0]) -> Gemm(B, A) with transA = !transB, transB = !transA (no C): that
//     weight's gradient, computed for its transpose.
// A Transpose left unread is dropped. A Gemm is rewritten only where the Transpose alone reads it (and it is
// no graph output or state update). Composing permutations moves no value, so those results are bit for
// bit; the swapped Gemm sums the same products, in an order its library picks for the new layout.
//
// Measured and left out: folding a MatMul's operand Transposes into strided GEMM operands (an internal
// PermutedMatMul reading A and B where they lie) made a GPT-style model's step slower on the CPU, the
// operand-transposed and large-stride GEMMs of the library costing more than the Transposes they replaced
// (README, "The pipeline of passes").
#pragma once
#include "graph/ir.h"
#include "graph/passes/pass.h"

namespace graphrun::passes {

Graph fold_transposes(const Graph& g);
Pass fold_transposes_pass();

}  // namespace graphrun::passes

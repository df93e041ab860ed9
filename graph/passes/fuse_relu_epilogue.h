// Pass fuse_relu_epilogue: on the executor's graph only, a Relu whose input only it reads is done by
// that input's producer as it writes its output: Conv -> FusedConv, Gemm -> FusedGemm, MatMul + bias
// Add -> FusedMatMul (ai.graphrun, attribute activation="Relu"): no pre-activation tensor, no extra passes.
#pragma once
#include "graph/ir.h"
#include "graph/passes/pass.h"

namespace graphrun::passes {

// Fuses Relu(Conv(...)), Relu(Gemm(...)) and Relu(Add(MatMul(A, B), bias)) (either Add operand order)
// where every intermediate value is f32 or f64, read by the next node alone and no graph output or
// state-update source (so the backward pass cannot need it: the Relu gradient reads the Relu's output);
// for MatMul, A has rank >= 2, B rank 2 and bias is [N] (or [1,...,1,N]) for B's N columns. The fused
// node takes the Relu's place and output; its arithmetic is the unfused nodes', so the bits are theirs.
Graph fuse_relu_epilogue(const Graph& g);
Pass fuse_relu_epilogue_pass();

}  // namespace graphrun::passes

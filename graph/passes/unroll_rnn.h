// unroll_rnn: an ONNX LSTM, GRU or RNN node written as its time steps in standard ops (Gather of each step's
// input projection, MatMul by R, the gates' Sigmoid and Tanh, Mul and Add; Where for sequence_lens; Concat of
// the steps into Y), computing what the node computes: the directions, layouts 0 and 1, B, sequence_lens,
// initial_h, initial_c, the peepholes P, clip, GRU's linear_before_reset and RNN's activations, as the kernels
// (runtime/kernels/cpu/rnn.cc) accept them.
//
// The fused node's gradient is one LSTMGrad, GRUGrad or RNNGrad node, which has no gradient of its own; the
// unrolled steps differentiate to any order by the rules of their ops. ONNX's Gradient expansion
// (autodiff/gradient_op.cc) unrolls the recurrent nodes whose gradient is itself differentiated: a gradient
// penalty on a recurrent critic, a MAML step through an LSTM. The unrolled node is slower than the fused one,
// so nothing else unrolls.
#pragma once
#include <cstddef>
#include <string>

#include "graph/ir.h"

namespace graphrun::passes {

// An ai.onnx LSTM, GRU or RNN node.
bool is_recurrent(const Node& n);

// Replaces g.nodes[i] (is_recurrent) by its unrolled steps, appended to g.nodes (the caller sorts the graph).
// The number of time steps must be known when loading (X's shape), as must the hidden size; a node the
// kernels would refuse (activations other than theirs, LSTM's input_forget) is refused in one line naming it
// and `what`, as is a sequence whose steps would pass kMaxUnrolledSteps.
void unroll_rnn(Graph& g, size_t i, const std::string& what);

constexpr long kMaxUnrolledSteps = 4096;

}  // namespace graphrun::passes

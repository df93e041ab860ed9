// The plan of an LSTM/GRU/RNN node or of its gradient (LSTMGrad, GRUGrad, RNNGrad), shared by the CPU and CUDA kernels:
// attributes, sizes, directions, the layout's offsets and each sequence's length, checked once.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "graph/rnn_attrs.h"
#include "runtime/kernel.h"

namespace graphrun::runtime {

enum class RnnCell { LSTM, GRU, RNN };

// RnnAct (graph/rnn_attrs.h): the activations RNN accepts. The derivative is taken from the activation's output,
// which the trace keeps.

// The sizes and attributes of one LSTM/GRU/RNN node (forward or gradient: the same inputs 0..nin-1).
struct RnnPlan : RnnAttrs {
  RnnCell cell = RnnCell::LSTM;
  const char* what = "LSTM";
  int nin = 8;     // forward inputs: LSTM X W R B sequence_lens initial_h initial_c P; GRU, RNN without the last two
  int64_t G = 4;   // gates: LSTM i o f c, GRU z r h, RNN the activation's output
  int64_t T = 0, N = 0, I = 0, H = 0;
  std::vector<int64_t> lens;
  // Offset of Y[t, d, n, :] in layout 0 [T, D, N, H] or layout 1 [N, T, D, H].
  int64_t y_at(int64_t t, int d, int64_t n) const {
    return layout1 ? ((n * T + t) * D + d) * H : ((t * D + d) * N + n) * H;
  }
  // Offset of a state [d, n, :] in layout 0 [D, N, H] or layout 1 [N, D, H].
  int64_t s_at(int d, int64_t n) const { return layout1 ? (n * D + d) * H : (d * N + n) * H; }
  Shape y_shape() const { return layout1 ? Shape{N, T, D, H} : Shape{T, D, N, H}; }
  Shape s_shape() const { return layout1 ? Shape{N, D, H} : Shape{D, N, H}; }
};

// Reads the node's input i (sequence_lens) as integers on the host, wherever the tensor lives.
using RnnIntReader = std::function<std::vector<int64_t>(int input)>;

// The plan of the node in ctx (LSTM, GRU, RNN or their gradients); throws naming the attribute or input
// that is wrong. For a gradient node it also checks dY, dY_h and dY_c where given.
RnnPlan plan_rnn(const KernelContext& ctx, RnnCell cell, const RnnIntReader& read_ints);

}  // namespace graphrun::runtime

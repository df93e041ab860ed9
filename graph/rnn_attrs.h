// The attributes of an ONNX LSTM, GRU or RNN node as graphrun accepts them, read and checked in one place: by the
// kernels' plan (runtime/kernels/rnn_plan.h) and by the pass that writes the node as its time steps
// (graph/passes/unroll_rnn.h), so that both accept the same nodes with the same messages.
#pragma once
#include <string>
#include <vector>

#include "graph/ir.h"

namespace graphrun {

// The activations RNN accepts (LSTM and GRU: only their defaults, Sigmoid and Tanh).
enum class RnnAct { Tanh, Relu, Sigmoid };

struct RnnAttrs {
  std::string direction = "forward";  // forward, reverse, bidirectional
  int D = 1;                          // directions
  bool layout1 = false;               // layout 1: X [N, T, I], Y [N, T, D, H], states [N, D, H]
  bool has_clip = false;
  double clip = 0;
  bool lbr = false;          // GRU linear_before_reset
  std::vector<RnnAct> acts;  // RNN: one per direction
  bool reverse(int d) const { return direction == "reverse" || d == 1; }
};

// The attributes of `node` (LSTM, GRU, RNN or their gradient ops); throws one line, prefixed by `what`, naming an
// attribute graphrun does not accept: another direction or layout, a clip that is not positive, LSTM's
// input_forget, activations other than RNN's Tanh, Relu and Sigmoid or LSTM's and GRU's defaults.
RnnAttrs rnn_attrs(const Node& node, const std::string& what);

}  // namespace graphrun

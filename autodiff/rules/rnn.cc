// Gradient rules of LSTM, GRU and RNN: one ai.graphrun LSTMGrad / GRUGrad / RNNGrad node, which recomputes the
// gates from the forward's inputs and back-propagates through time (runtime/kernels/cpu/rnn.cc).
#include "autodiff/rules/rules.h"

namespace graphrun::autodiff {
namespace {

enum class Cell { LSTM, GRU, RNN };

template <Cell C>
void rnn_grad(GradContext& ctx) {
  constexpr bool Lstm = C == Cell::LSTM;
  // The forward inputs that have a gradient output, in the grad node's output order (sequence_lens has none).
  const std::vector<size_t> diff = Lstm ? std::vector<size_t>{0, 1, 2, 3, 5, 6, 7} : std::vector<size_t>{0, 1, 2, 3, 5};
  const size_t nin = Lstm ? 8 : 6, nout = Lstm ? 3 : 2;
  bool any_dy = false, any_need = false;
  for (size_t i = 0; i < nout; ++i) any_dy |= !ctx.dy(i).empty();
  std::vector<bool> want;
  for (size_t i : diff) {
    want.push_back(ctx.needs(i));
    any_need |= ctx.needs(i);
  }
  if (!any_dy || !any_need) return;
  std::vector<std::string> inputs;
  for (size_t i = 0; i < nin; ++i) inputs.push_back(i < ctx.num_inputs() ? ctx.in(i) : std::string());
  for (size_t i = 0; i < nout; ++i) inputs.push_back(ctx.dy(i));
  auto d = ctx.op_n(Lstm ? "LSTMGrad" : C == Cell::GRU ? "GRUGrad" : "RNNGrad", inputs, want, ctx.fwd().attrs, kGraphrunDomain);
  for (size_t k = 0; k < diff.size(); ++k)
    if (!d[k].empty()) ctx.set_dx(diff[k], d[k]);
}

}  // namespace

GR_REGISTER_OPS(rnn) {
  ops.op("LSTM").gradient(rnn_grad<Cell::LSTM>);
  ops.op("GRU").gradient(rnn_grad<Cell::GRU>);
  ops.op("RNN").gradient(rnn_grad<Cell::RNN>);
}

}  // namespace graphrun::autodiff

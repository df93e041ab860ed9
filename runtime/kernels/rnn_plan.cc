// The shared plan of LSTM, GRU, RNN and their gradients (rnn_plan.h): the CPU and CUDA kernels check and size
// a node in one place, so both devices accept the same nodes and compute over the same plan.
#include "runtime/kernels/rnn_plan.h"

namespace graphrun::runtime {
namespace {

void check_shape(const Tensor& t, const Shape& want, const char* what, const char* name) {
  GR_CHECK(t.shape() == want, what << ": input '" << name << "' must have shape " << shape_str(want) << ", got "
                                   << shape_str(t.shape()));
}

}  // namespace

RnnPlan plan_rnn(const KernelContext& ctx, RnnCell cell, const RnnIntReader& read_ints) {
  RnnPlan r;
  r.cell = cell;
  const bool lstm = cell == RnnCell::LSTM;
  r.what = ctx.node().op_type.c_str();
  r.nin = lstm ? 8 : 6;
  r.G = lstm ? 4 : cell == RnnCell::GRU ? 3 : 1;
  const Node& node = ctx.node();
  const char* what = r.what;
  static_cast<RnnAttrs&>(r) = rnn_attrs(node, what);

  const Tensor &x = ctx.input(0), &w = ctx.input(1), &rr = ctx.input(2);
  GR_CHECK(x.rank() == 3, what << ": input 'X' must have rank 3, got " << shape_str(x.shape()));
  GR_CHECK(w.dtype() == x.dtype() && rr.dtype() == x.dtype(),
           what << ": X, W and R must have one element type, got " << dtype_name(x.dtype()) << ", "
                << dtype_name(w.dtype()) << ", " << dtype_name(rr.dtype()));
  r.T = r.layout1 ? x.dim(1) : x.dim(0);
  r.N = r.layout1 ? x.dim(0) : x.dim(1);
  r.I = x.dim(2);
  GR_CHECK(rr.rank() == 3, what << ": input 'R' must have rank 3, got " << shape_str(rr.shape()));
  r.H = rr.dim(2);
  const int64_t hs = node.attr_i("hidden_size", r.H);
  GR_CHECK(hs == r.H, what << ": attribute 'hidden_size' is " << hs << " but R " << shape_str(rr.shape())
                           << " says " << r.H);
  check_shape(w, {r.D, r.G * r.H, r.I}, what, "W");
  check_shape(rr, {r.D, r.G * r.H, r.H}, what, "R");
  auto check_opt = [&](int i, const Shape& s, const char* name) {
    if (!ctx.has_input(i)) return;
    check_shape(ctx.input(i), s, what, name);
    GR_CHECK(ctx.input(i).dtype() == x.dtype(), what << ": input '" << name << "' must be " << dtype_name(x.dtype()));
  };
  check_opt(3, {r.D, 2 * r.G * r.H}, "B");
  check_opt(5, r.s_shape(), "initial_h");
  if (lstm) {
    check_opt(6, r.s_shape(), "initial_c");
    check_opt(7, {r.D, 3 * r.H}, "P");
  }
  r.lens.assign(r.N, r.T);
  if (ctx.has_input(4)) {
    const Tensor& sl = ctx.input(4);
    check_shape(sl, {r.N}, what, "sequence_lens");
    r.lens = read_ints(4);
    for (int64_t v : r.lens)
      GR_CHECK(v >= 0 && v <= r.T, what << ": sequence_lens holds " << v << "; each must be in [0, " << r.T << "]");
  }
  // A gradient node: the output gradients follow the forward's inputs.
  const bool grad = node.op_type == std::string(lstm ? "LSTMGrad" : cell == RnnCell::GRU ? "GRUGrad" : "RNNGrad");
  if (grad) {
    check_opt(r.nin, r.y_shape(), "dY");
    check_opt(r.nin + 1, r.s_shape(), "dY_h");
    if (lstm) check_opt(r.nin + 2, r.s_shape(), "dY_c");
  }
  return r;
}

}  // namespace graphrun::runtime

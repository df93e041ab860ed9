// The shared plan of LSTM, GRU, RNN and their gradients (rnn_plan.h): the CPU and CUDA kernels check and size
// a node in one place, so both devices accept the same nodes and compute over the same plan.
#include "runtime/kernels/rnn_plan.h"

#include <cctype>

namespace graphrun::runtime {
namespace {

std::string lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

void check_shape(const Tensor& t, const Shape& want, const char* what, const char* name) {
  GR_CHECK(t.shape() == want, what << ": input '" << name << "' must have shape " << shape_str(want) << ", got "
                                   << shape_str(t.shape()));
}

// RNN's activations: one per direction (one given for both directions applies to each), Tanh by default.
std::vector<RnnAct> rnn_activations(const Node& node, int D, const char* what) {
  const Attribute* a = node.attr("activations");
  if (!a) return std::vector<RnnAct>(D, RnnAct::Tanh);
  std::string list;
  for (const auto& s : a->strings) list += (list.empty() ? "" : ",") + s;
  const size_t n = a->strings.size();
  GR_CHECK(n == 1 || n == static_cast<size_t>(D),
           what << ": attribute 'activations' [" << list << "] must list one activation per direction (" << D << ")");
  std::vector<RnnAct> acts;
  for (int d = 0; d < D; ++d) {
    const std::string f = lower(a->strings[n == 1 ? 0 : d]);
    GR_CHECK(f == "tanh" || f == "relu" || f == "sigmoid",
             what << ": attribute 'activations' [" << list << "] is not supported; only Tanh, Relu and Sigmoid are");
    acts.push_back(f == "tanh" ? RnnAct::Tanh : f == "relu" ? RnnAct::Relu : RnnAct::Sigmoid);
  }
  return acts;
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
  r.direction = node.attr_s("direction", "forward");
  GR_CHECK(r.direction == "forward" || r.direction == "reverse" || r.direction == "bidirectional",
           what << ": attribute 'direction' is '" << r.direction << "'; must be forward, reverse or bidirectional");
  r.D = r.direction == "bidirectional" ? 2 : 1;
  const int64_t layout = node.attr_i("layout", 0);
  GR_CHECK(layout == 0 || layout == 1, what << ": attribute 'layout' is " << layout << "; must be 0 or 1");
  r.layout1 = layout == 1;
  if (const Attribute* a = node.attr("clip")) {
    r.has_clip = true;
    r.clip = a->f;
    GR_CHECK(r.clip > 0, what << ": attribute 'clip' is " << r.clip << "; must be positive");
  }
  if (lstm)
    GR_CHECK(node.attr_i("input_forget", 0) == 0,
             what << ": attribute 'input_forget' = 1 (coupled input and forget gates) is not supported");
  else
    r.lbr = node.attr_i("linear_before_reset", 0) != 0;
  if (cell == RnnCell::RNN) {
    r.acts = rnn_activations(node, r.D, what);
  } else if (const Attribute* a = node.attr("activations")) {
    const std::vector<std::string> defaults =
        lstm ? std::vector<std::string>{"sigmoid", "tanh", "tanh"} : std::vector<std::string>{"sigmoid", "tanh"};
    bool ok = a->strings.size() == defaults.size() * r.D;
    for (size_t i = 0; ok && i < a->strings.size(); ++i) ok = lower(a->strings[i]) == defaults[i % defaults.size()];
    std::string list;
    for (const auto& s : a->strings) list += (list.empty() ? "" : ",") + s;
    GR_CHECK(ok, what << ": attribute 'activations' [" << list << "] is not supported; only the defaults ("
                      << (lstm ? "Sigmoid, Tanh, Tanh" : "Sigmoid, Tanh") << " per direction) are");
  }

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

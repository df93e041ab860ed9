// unroll_rnn: an LSTM, GRU or RNN node as its time steps in standard ops (see the header).
#include "graph/passes/unroll_rnn.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <optional>
#include <utility>
#include <vector>

#include "graph/rnn_attrs.h"

namespace graphrun::passes {
namespace {

// Writes the nodes of one unrolled node; names derive from the node's.
class Steps {
 public:
  Steps(Graph& g, std::string base, DType t) : g_(g), base_(std::move(base)), t_(t) {}

  std::string op(const char* type, std::vector<std::string> inputs, std::map<std::string, Attribute> attrs = {}) {
    Node n;
    n.op_type = type;
    n.name = g_.unique_name(base_ + "/" + type);
    n.inputs = std::move(inputs);
    n.attrs = std::move(attrs);
    n.outputs.push_back(g_.unique_name(n.name + "_output_0"));
    g_.add_node(n);
    return n.outputs[0];
  }
  // The last node written now writes `name` (one of the unrolled node's outputs).
  void rename_last(const std::string& name) { g_.nodes.back().outputs[0] = name; }
  // Constant nodes (not initializers: an initializer of float type would count as a parameter).
  std::string ints(std::vector<int64_t> v, bool scalar = false) {
    const Shape s = scalar ? Shape{} : Shape{static_cast<int64_t>(v.size())};
    return op("Constant", {}, {{"value", Attribute::Tens(Tensor::from_vector<int64_t>(s, v))}});
  }
  std::string index(int64_t i) { return ints({i}, true); }
  std::string range(int64_t from, int64_t to) {
    std::vector<int64_t> v(static_cast<size_t>(to - from));
    std::iota(v.begin(), v.end(), from);
    return ints(v);
  }
  std::string real(double v, Shape s = {}) {
    const size_t n = static_cast<size_t>(shape_numel(s));
    Tensor x = t_ == DType::F64 ? Tensor::from_vector<double>(s, std::vector<double>(n, v))
                                : Tensor::from_vector<float>(s, std::vector<float>(n, static_cast<float>(v)));
    return op("Constant", {}, {{"value", Attribute::Tens(std::move(x))}});
  }
  std::string gather(const std::string& x, const std::string& idx, int64_t axis) {
    return op("Gather", {x, idx}, {{"axis", Attribute::Int(axis)}});
  }
  std::string transpose(const std::string& x, std::vector<int64_t> perm) {
    return op("Transpose", {x}, {{"perm", Attribute::Ints(std::move(perm))}});
  }

 private:
  Graph& g_;
  std::string base_;
  DType t_;
};

// The static type of v: a value's info or an initializer's own.
std::optional<ValueInfo> info_of(const Graph& g, const std::string& v) {
  if (g.is_initializer(v)) return value_info_of(g.initializers.at(v));
  if (const ValueInfo* vi = g.info(v)) return *vi;
  return std::nullopt;
}

}  // namespace

bool is_recurrent(const Node& n) {
  return n.domain.empty() && (n.op_type == "LSTM" || n.op_type == "GRU" || n.op_type == "RNN");
}

void unroll_rnn(Graph& g, size_t at, const std::string& what) {
  const Node node = g.nodes[at];
  const std::string desc = what + ": " + node.describe();
  const bool lstm = node.op_type == "LSTM", gru = node.op_type == "GRU";
  const int64_t G = lstm ? 4 : gru ? 3 : 1;
  const RnnAttrs attrs = rnn_attrs(node, desc);
  const int D = attrs.D;
  const int64_t layout = attrs.layout1 ? 1 : 0;
  const std::optional<double> clip = attrs.has_clip ? std::optional<double>(attrs.clip) : std::nullopt;
  const bool lbr = attrs.lbr;
  auto act_op = [](RnnAct a) { return a == RnnAct::Relu ? "Relu" : a == RnnAct::Sigmoid ? "Sigmoid" : "Tanh"; };

  auto input = [&](size_t i) { return node.has_input(i) ? node.inputs[i] : std::string(); };
  const std::string x = input(0), w = input(1), r = input(2), b = input(3), lens = input(4), h0 = input(5),
                    c0 = lstm ? input(6) : std::string(), p = lstm ? input(7) : std::string();
  GR_CHECK(!x.empty() && !w.empty() && !r.empty(), desc << ": needs its inputs X, W and R");
  const std::optional<ValueInfo> xi = info_of(g, x);
  GR_CHECK(xi && xi->has_shape && xi->shape.size() == 3,
           desc << ": unrolling its time steps needs X of rank 3, got " << (xi ? xi->str() : "an unknown shape"));
  const Dim steps = xi->shape[layout == 1 ? 1 : 0];
  GR_CHECK(steps.known() && steps.size >= 1,
           desc << ": unrolling its time steps needs their number known when loading; X is " << xi->str());
  GR_CHECK(steps.size <= kMaxUnrolledSteps,
           desc << ": unrolling its " << steps.size << " time steps passes graphrun's limit of " << kMaxUnrolledSteps);
  const int64_t T = steps.size;
  const std::optional<ValueInfo> ri = info_of(g, r);
  int64_t H = node.attr_i("hidden_size", -1);
  if (ri && ri->has_shape && ri->shape.size() == 3 && ri->shape[2].known()) H = ri->shape[2].size;
  GR_CHECK(H >= 1, desc << ": unrolling its time steps needs the hidden size (attribute hidden_size or R's shape)");
  const DType t = xi->dtype == DType::Undefined ? DType::F32 : xi->dtype;
  GR_CHECK(t == DType::F32 || t == DType::F64,
           desc << ": unrolling its time steps needs X of type f32 or f64, got " << dtype_name(t));
  const int64_t GH = G * H;
  const bool clip_inputs = g.opset("") >= 11;

  const std::string base = node.name.empty() ? node.op_type : node.name;
  Steps e(g, base, t);
  auto add = [&](const std::string& a, const std::string& b2) { return e.op("Add", {a, b2}); };
  auto mul = [&](const std::string& a, const std::string& b2) { return e.op("Mul", {a, b2}); };
  std::string lo, hi;
  if (clip && clip_inputs) lo = e.real(-*clip), hi = e.real(*clip);
  auto clipped = [&](const std::string& v) {
    if (!clip) return v;
    if (clip_inputs) return e.op("Clip", {v, lo, hi});
    return e.op(
        "Clip", {v},
        {{"min", Attribute::Float(static_cast<float>(-*clip))}, {"max", Attribute::Float(static_cast<float>(*clip))}});
  };
  std::vector<std::string> gate_at;  // the columns of gate k, one Constant each
  for (int64_t k = 0; k < G; ++k) gate_at.push_back(e.range(k * H, (k + 1) * H));
  auto gate = [&](const std::string& v, int64_t k) { return e.gather(v, gate_at[static_cast<size_t>(k)], 1); };

  // X as [T, N, I]; each step's input projection X W^T (+ the biases that add to it) in one MatMul.
  const std::string xs = layout == 1 ? e.transpose(x, {1, 0, 2}) : x;
  std::string zero, one, live_shape;
  if (!lens.empty()) zero = e.real(0), live_shape = e.ints({-1, 1});
  if (gru) one = e.real(1);
  const std::optional<ValueInfo> li = lens.empty() ? std::nullopt : info_of(g, lens);
  const DType lens_type = li && li->dtype != DType::Undefined ? li->dtype : DType::I32;
  GR_CHECK(lens_type == DType::I32 || lens_type == DType::I64,
           desc << ": input 'sequence_lens' must be int32, got " << dtype_name(lens_type));

  std::vector<std::string> ys(static_cast<size_t>(D)), hs(static_cast<size_t>(D)), cs(static_cast<size_t>(D));
  for (int d = 0; d < D; ++d) {
    const bool reverse = attrs.reverse(d);
    const std::string di = e.index(d);
    const std::string wd = e.gather(w, di, 0);                       // [GH, I]
    const std::string rd = e.gather(r, di, 0);                       // [GH, H]
    std::string xw = e.op("MatMul", {xs, e.transpose(wd, {1, 0})});  // [T, N, GH]
    std::string rbh;                                                 // GRU linear_before_reset: Rb of the h gate
    if (!b.empty()) {
      const std::string bd = e.gather(b, di, 0);  // [2 GH]
      const std::string wb = e.gather(bd, e.range(0, GH), 0), rb = e.gather(bd, e.range(GH, 2 * GH), 0);
      std::string bias;
      if (lbr) {
        // Rb of the z and r gates adds to X's side; r scales the h gate's.
        bias = add(wb, mul(rb, e.op("Concat", {e.real(1, {2 * H}), e.real(0, {H})}, {{"axis", Attribute::Int(0)}})));
        rbh = e.gather(rb, gate_at[2], 0);
      } else {
        bias = add(wb, rb);
      }
      xw = add(xw, bias);
    }
    // R^T: GRU without linear_before_reset multiplies r * h by the h gate's rows apart.
    std::string rt, rzr_t, rh_t;
    if (gru && !lbr) {
      rzr_t = e.transpose(e.gather(rd, e.range(0, 2 * H), 0), {1, 0});
      rh_t = e.transpose(e.gather(rd, gate_at[2], 0), {1, 0});
    } else {
      rt = e.transpose(rd, {1, 0});
    }
    std::string pi, po, pf;
    if (!p.empty()) {
      const std::string pd = e.gather(p, di, 0);  // [3H]: i o f
      pi = e.gather(pd, gate_at[0], 0), po = e.gather(pd, gate_at[1], 0), pf = e.gather(pd, gate_at[2], 0);
    }
    // The states [N, H] (absent: zero, which the first step leaves out of its sums).
    std::string h = h0.empty() ? std::string() : e.gather(h0, di, layout == 1 ? 1 : 0);
    std::string c = c0.empty() ? std::string() : e.gather(c0, di, layout == 1 ? 1 : 0);
    std::vector<std::string> y_at(static_cast<size_t>(T));
    for (int64_t s = 0; s < T; ++s) {
      const int64_t step = reverse ? T - 1 - s : s;
      const std::string xt = e.gather(xw, e.index(step), 0);  // [N, GH]
      std::string hn, cn;
      if (lstm) {
        const std::string pre = h.empty() ? xt : add(xt, e.op("MatMul", {h, rt}));
        std::string ai = gate(pre, 0), af = gate(pre, 2);
        if (!p.empty() && !c.empty()) ai = add(ai, mul(pi, c)), af = add(af, mul(pf, c));
        const std::string ig = e.op("Sigmoid", {clipped(ai)}), fg = e.op("Sigmoid", {clipped(af)});
        const std::string cg = e.op("Tanh", {clipped(gate(pre, 3))});
        cn = c.empty() ? mul(ig, cg) : add(mul(fg, c), mul(ig, cg));
        std::string ao = gate(pre, 1);
        if (!p.empty()) ao = add(ao, mul(po, cn));
        hn = mul(e.op("Sigmoid", {clipped(ao)}), e.op("Tanh", {cn}));
      } else if (gru) {
        std::string zr = gate(xt, 0), rr = gate(xt, 1), xh = gate(xt, 2), lin;
        if (!h.empty()) {
          if (lbr) {
            const std::string hr = e.op("MatMul", {h, rt});
            zr = add(zr, gate(hr, 0)), rr = add(rr, gate(hr, 1));
            lin = gate(hr, 2);
          } else {
            const std::string hr = e.op("MatMul", {h, rzr_t});
            zr = add(zr, gate(hr, 0)), rr = add(rr, gate(hr, 1));
          }
        }
        const std::string z = e.op("Sigmoid", {clipped(zr)}), rg = e.op("Sigmoid", {clipped(rr)});
        std::string a = xh;
        if (lbr) {
          if (!rbh.empty()) lin = lin.empty() ? rbh : add(lin, rbh);
          if (!lin.empty()) a = add(a, mul(rg, lin));
        } else if (!h.empty()) {
          a = add(a, e.op("MatMul", {mul(rg, h), rh_t}));
        }
        const std::string hh = e.op("Tanh", {clipped(a)});
        hn = mul(e.op("Sub", {one, z}), hh);
        if (!h.empty()) hn = add(hn, mul(z, h));
      } else {
        const std::string pre = h.empty() ? xt : add(xt, e.op("MatMul", {h, rt}));
        hn = e.op(act_op(attrs.acts[static_cast<size_t>(d)]), {clipped(pre)});
      }
      // sequence_lens: a sequence past its length keeps its states, and its Y rows are zero.
      if (!lens.empty()) {
        Tensor ts = lens_type == DType::I64 ? Tensor::from_vector<int64_t>({}, {step})
                                            : Tensor::from_vector<int32_t>({}, {static_cast<int32_t>(step)});
        const std::string tc = e.op("Constant", {}, {{"value", Attribute::Tens(std::move(ts))}});
        const std::string live = e.op("Reshape", {e.op("Less", {tc, lens}), live_shape});  // [N, 1]
        y_at[static_cast<size_t>(step)] = e.op("Where", {live, hn, zero});
        hn = e.op("Where", {live, hn, h.empty() ? zero : h});
        if (lstm) cn = e.op("Where", {live, cn, c.empty() ? zero : c});
      } else {
        y_at[static_cast<size_t>(step)] = hn;
      }
      h = hn, c = cn;
    }
    if (node.has_output(0)) {
      const std::string shape = e.ints({1, 1, -1, H});
      std::vector<std::string> parts;
      for (const std::string& v : y_at) parts.push_back(e.op("Reshape", {v, shape}));
      ys[static_cast<size_t>(d)] = T == 1 ? parts[0] : e.op("Concat", parts, {{"axis", Attribute::Int(0)}});
    }
    hs[static_cast<size_t>(d)] = h, cs[static_cast<size_t>(d)] = c;
  }

  // The outputs: Y [T, D, N, H] (layout 1: [N, T, D, H]), Y_h and Y_c [D, N, H] (layout 1: [N, D, H]).
  auto finish = [&](const std::string& v, const std::vector<int64_t>& perm, size_t out) {
    e.op(layout == 1 ? "Transpose" : "Identity", {v},
         layout == 1 ? std::map<std::string, Attribute>{{"perm", Attribute::Ints(perm)}}
                     : std::map<std::string, Attribute>{});
    e.rename_last(node.outputs[out]);
  };
  if (node.has_output(0)) finish(D == 1 ? ys[0] : e.op("Concat", ys, {{"axis", Attribute::Int(1)}}), {2, 0, 1, 3}, 0);
  auto states = [&](const std::vector<std::string>& v, size_t out) {
    if (!node.has_output(out)) return;
    const std::string shape = e.ints({1, -1, H});
    std::vector<std::string> parts;
    for (const std::string& s : v) parts.push_back(e.op("Reshape", {s, shape}));
    finish(D == 1 ? parts[0] : e.op("Concat", parts, {{"axis", Attribute::Int(0)}}), {1, 0, 2}, out);
  };
  states(hs, 1);
  if (lstm) states(cs, 2);
  g.nodes.erase(g.nodes.begin() + static_cast<std::ptrdiff_t>(at));
}

}  // namespace graphrun::passes

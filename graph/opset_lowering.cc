// Opsets 18 to 28, lowered to 17.
#include "graph/opset_lowering.h"

#include <onnx/defs/schema.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <iostream>
#include <limits>
#include <set>
#include <vector>

#include "graph/error.h"
#include "graph/onnx_tensor.h"
#include "graph/resize_weights.h"
#include "graph/validate.h"

namespace graphrun {

namespace {

constexpr int64_t kMaxRank = 64;  // a tensor of more axes is refused anyway: an axis counted back further is wrong
constexpr int64_t kMaxCol2ImBlock = 4096;  // values in one Col2Im block (its lowering's weights are the square)
constexpr int64_t kMaxCol2ImDim = int64_t(1) << 30;  // each of its sizes, so that their sums and products fit

//
// ONNX 1.12 (the checker and shape inference graphrun builds on) knows opsets up to 17. What opsets 18
// to 28 changed is, for the ops graphrun runs, mostly where an attribute lives (the Reduce ops' axes
// became an input in 18), attributes whose defaults mean what 17 means (Resize's antialias, Cast's
// saturate), element types graphrun does not have (float8, int4, float4, int2) and new ops. Each node is rewritten
// into its opset-17 form; a node whose meaning 17 cannot express (non-default new attributes, axes
// computed at run time, new ops without a decomposition) is refused in one line naming it.

// The tensor `name` holds when it is an initializer or a Constant node's output (value, value_int(s),
// value_float(s)); false where it is neither.
bool constant_tensor(const onnx::GraphProto& g, const std::string& name, Tensor& out, const std::string& what) {
  for (const auto& t : g.initializer())
    if (t.name() == name) return out = tensor_from_proto(t, what + ": '" + name + "'"), true;
  for (const auto& n : g.node()) {
    if (n.op_type() != "Constant" || n.output_size() != 1 || n.output(0) != name) continue;
    for (const auto& a : n.attribute()) {
      const auto count = static_cast<int64_t>(a.name() == "value_ints" ? a.ints_size() : a.floats_size());
      if (a.name() == "value" && a.has_t()) return out = tensor_from_proto(a.t(), what + ": '" + name + "'"), true;
      if (a.name() == "value_ints")
        return out = Tensor::from_vector<int64_t>({count}, {a.ints().begin(), a.ints().end()}), true;
      if (a.name() == "value_int") return out = Tensor::scalar<int64_t>(a.i()), true;
      if (a.name() == "value_floats")
        return out = Tensor::from_vector<float>({count}, {a.floats().begin(), a.floats().end()}), true;
      if (a.name() == "value_float") return out = Tensor::scalar<float>(a.f()), true;
    }
  }
  return false;
}

// The integer values of `name` (int64, or int32 widened) when it is a constant (above); throws for another type.
bool constant_ints(const onnx::GraphProto& g, const std::string& name, std::vector<int64_t>& out,
                   const std::string& what) {
  Tensor v;
  if (!constant_tensor(g, name, v, what)) return false;
  GR_CHECK(v.dtype() == DType::I64 || v.dtype() == DType::I32,
           what << ": '" << name << "' holds " << dtype_name(v.dtype()) << ", not int64 or int32");
  if (v.dtype() == DType::I32) {
    const std::vector<int32_t> narrow = v.to_vector<int32_t>();
    out.assign(narrow.begin(), narrow.end());
  } else {
    out = v.to_vector<int64_t>();
  }
  return true;
}

// The values of `name` as doubles when it is a float constant (above).
bool constant_floats(const onnx::GraphProto& g, const std::string& name, std::vector<double>& out,
                     const std::string& what) {
  Tensor v;
  if (!constant_tensor(g, name, v, what) || !dtype_is_float(v.dtype())) return false;
  out = v.as_doubles();
  return true;
}

}  // namespace

onnx::AttributeProto* find_attr(onnx::NodeProto& n, const std::string& name) {
  for (auto& a : *n.mutable_attribute())
    if (a.name() == name) return &a;
  return nullptr;
}

namespace {

void drop_attr(onnx::NodeProto& n, const std::string& name) {
  auto* attrs = n.mutable_attribute();
  for (int i = 0; i < attrs->size(); ++i)
    if (attrs->Get(i).name() == name) {
      attrs->DeleteSubrange(i, 1);
      return;
    }
}

// What the rewrites read of a node: inputs and outputs ("" where the node leaves one out) and attributes.
struct NodeView {
  const onnx::NodeProto& n;
  std::string input(int i) const { return i < n.input_size() ? n.input(i) : std::string(); }
  std::string output(int i) const { return i < n.output_size() ? n.output(i) : std::string(); }
  const onnx::AttributeProto* attr(const char* name) const {
    for (const auto& a : n.attribute())
      if (a.name() == name) return &a;
    return nullptr;
  }
  int64_t attr_int(const char* name, int64_t dflt) const { return attr(name) ? attr(name)->i() : dflt; }
  std::string attr_str(const char* name, const std::string& dflt) const { return attr(name) ? attr(name)->s() : dflt; }
};

onnx::NodeProto make_proto_node(const std::string& op, std::vector<std::string> inputs, const std::string& output,
                                const std::string& name) {
  onnx::NodeProto n;
  n.set_op_type(op);
  n.set_name(name);
  for (auto& i : inputs) n.add_input(i);
  n.add_output(output);
  return n;
}

// A float scalar constant cast to the type of `like` (CastLike), so a decomposition works for any float type.
void scalar_like(std::vector<onnx::NodeProto>& out, const std::string& name, float v, const std::string& like) {
  onnx::NodeProto c = make_proto_node("Constant", {}, name + "_f", name + "_f");
  auto* a = c.add_attribute();
  a->set_name("value_float");
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(v);
  out.push_back(c);
  out.push_back(make_proto_node("CastLike", {name + "_f", like}, name, name));
}

void set_int_attr(onnx::NodeProto& n, const char* name, int64_t v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}

void set_ints_attr(onnx::NodeProto& n, const char* name, const std::vector<int64_t>& v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}

// A Constant node writing `name`: int64 values (a scalar: one value of shape []), or float32 ones (of shape `dims`).
onnx::NodeProto ints_constant(const std::string& name, const std::vector<int64_t>& v, bool scalar = false) {
  onnx::NodeProto c = make_proto_node("Constant", {}, name, name);
  auto* a = c.add_attribute();
  a->set_name("value");
  a->set_type(onnx::AttributeProto::TENSOR);
  a->mutable_t()->set_data_type(onnx::TensorProto::INT64);
  if (!scalar) a->mutable_t()->add_dims(static_cast<int64_t>(v.size()));
  for (int64_t x : v) a->mutable_t()->add_int64_data(x);
  return c;
}
onnx::NodeProto floats_constant(const std::string& name, const std::vector<int64_t>& dims,
                                const std::vector<float>& v) {
  onnx::NodeProto c = make_proto_node("Constant", {}, name, name);
  auto* a = c.add_attribute();
  a->set_name("value");
  a->set_type(onnx::AttributeProto::TENSOR);
  a->mutable_t()->set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : dims) a->mutable_t()->add_dims(d);
  for (float x : v) a->mutable_t()->add_float_data(x);
  return c;
}

// The shape the graph states for `name`: an initializer's dims, or an input's, output's or value_info's shape (-1
// for a dimension without a value); false where none is stated.
bool stated_shape(const onnx::GraphProto& g, const std::string& name, std::vector<int64_t>& dims) {
  for (const auto& t : g.initializer())
    if (t.name() == name) return dims.assign(t.dims().begin(), t.dims().end()), true;
  for (const auto* list : {&g.input(), &g.value_info(), &g.output()})
    for (const auto& v : *list) {
      if (v.name() != name || !v.type().has_tensor_type() || !v.type().tensor_type().has_shape()) continue;
      dims.clear();
      for (const auto& d : v.type().tensor_type().shape().dim()) dims.push_back(d.has_dim_value() ? d.dim_value() : -1);
      return true;
    }
  return false;
}

// The stated rank of `name`, or -1.
int64_t stated_rank(const onnx::GraphProto& g, const std::string& name) {
  std::vector<int64_t> dims;
  return stated_shape(g, name, dims) ? static_cast<int64_t>(dims.size()) : -1;
}

// Dimension `axis` of `name` where the graph states it; -1 otherwise.
int64_t stated_dim(const onnx::GraphProto& g, const std::string& name, size_t axis) {
  std::vector<int64_t> dims;
  return stated_shape(g, name, dims) && axis < dims.size() ? dims[axis] : -1;
}

// The element type the graph states for `name` (an onnx::TensorProto::DataType), 0 where none is stated.
int32_t stated_elem_type(const onnx::GraphProto& g, const std::string& name) {
  for (const auto& t : g.initializer())
    if (t.name() == name) return t.data_type();
  for (const auto* list : {&g.input(), &g.value_info(), &g.output()})
    for (const auto& v : *list)
      if (v.name() == name && v.type().has_tensor_type()) return v.type().tensor_type().elem_type();
  return 0;
}

// Writes the nodes of one lowering into `out`, each value named `base` and a suffix.
struct Emitter {
  std::vector<onnx::NodeProto>& out;
  std::string base;

  // A node of one output, base + suffix; returns that name (attributes go on `last()`).
  std::string node(const std::string& op, std::vector<std::string> ins, const std::string& suffix) {
    out.push_back(make_proto_node(op, std::move(ins), base + suffix, base + suffix));
    return base + suffix;
  }
  onnx::NodeProto& last() { return out.back(); }
  // int64 values (a scalar: one value of shape []).
  std::string ints(const std::string& suffix, const std::vector<int64_t>& v, bool scalar = false) {
    out.push_back(ints_constant(base + suffix, v, scalar));
    return base + suffix;
  }
  // A float scalar of the type of `like`.
  std::string scalar(const std::string& suffix, float v, const std::string& like) {
    scalar_like(out, base + suffix, v, like);
    return base + suffix;
  }
  // Dimensions [start, end) of `x`'s shape, as a 1-D int64 tensor.
  std::string dims(const std::string& x, int64_t start, int64_t end, const std::string& suffix) {
    node("Shape", {x}, suffix);
    set_int_attr(last(), "start", start);
    set_int_attr(last(), "end", end);
    return base + suffix;
  }
};

// Attention (23: torch's F.scaled_dot_product_attention) in opset-17 ops, as ONNX's reference computes it:
//   3-D Q [B, S, Hq*D], K and V [B, T, Hkv*D] as heads [B, H, S, D] (Reshape, Transpose); past_key/past_value
//   prepended to K and V along the sequence (Concat; present_key/present_value are the results); for Hq > Hkv
//   (grouped-query attention) each K and V head repeated Hq/Hkv times (Unsqueeze, Expand, Reshape);
//   scores = (Q * scale) K^T, scale 1/sqrt(D) unless given; softcap * tanh(scores / softcap) where softcap > 0;
//   the mask added (a bool mask as 0 where true and -inf where false; one shorter than the keys padded with -inf);
//   is_causal: query i sees key j only where j <= i + offset (Where, -inf elsewhere), the offset the past's length,
//   or with nonpad_kv_seqlen (24: a cache written outside, padded) that count of sample b's keys less the queries,
//   per sample and possibly negative; left_window_size / right_window_size (25): where not -1, query i sees key j
//   only where i + offset - left <= j <= i + offset + right; nonpad_kv_seqlen also hides sample b's keys from that
//   count on; Softmax over the keys (in softmax_precision where given), a row whose keys are all masked 0 rather
//   than NaN (as ONNX's reference guards it: Where; the Softmax reads 0s there, so its gradient stays finite);
//   times V; 3-D heads back to [B, S, Hq*Dv].
// qk_matmul_output (the fourth output), as the reference gives it: the scaled QK^T after softcap (modes 0 and 1),
// with the mask and causal bias (mode 2), or the softmax (mode 3).
std::vector<onnx::NodeProto> lower_attention(const onnx::GraphProto& g, const onnx::NodeProto& n,
                                             const std::function<void(const std::string&)>& refuse) {
  const NodeView nv{n};
  const std::string q = nv.input(0), k = nv.input(1), v = nv.input(2), mask = nv.input(3), past_k = nv.input(4),
                    past_v = nv.input(5), nonpad = nv.input(6);
  if (q.empty() || k.empty() || v.empty()) refuse("needs Q, K and V");
  if (past_k.empty() != past_v.empty()) refuse("past_key and past_value must be given together");
  if (!nonpad.empty() && !past_k.empty()) refuse("nonpad_kv_seqlen cannot be combined with past_key and past_value");
  int64_t left = nv.attr_int("left_window_size", -1), right = nv.attr_int("right_window_size", -1);
  if (left < -1 || right < -1) refuse("left_window_size and right_window_size must be -1 or at least 0");
  // A window wider than any sequence bounds nothing (and its bounds stay far from int64's limits).
  constexpr int64_t kUnbounded = int64_t(1) << 40;
  if (left > kUnbounded) left = -1;
  if (right > kUnbounded) right = -1;
  const bool window = left >= 0 || right >= 0;
  const int64_t hq = nv.attr_int("q_num_heads", 0), hkv = nv.attr_int("kv_num_heads", 0);
  // Where no shape says, the head counts do: 3-D Q, K and V need them, and 4-D ones are given none.
  int64_t r = stated_rank(g, q);
  if (r < 0) r = stated_rank(g, k);
  if (r < 0) r = hq > 0 || hkv > 0 ? 3 : 4;
  if (r != 3 && r != 4) refuse("Q, K and V must be 3-D or 4-D");
  if (r == 3 && (hq < 1 || hkv < 1)) refuse("3-D Q, K and V need q_num_heads and kv_num_heads, at least 1");
  const float softcap = nv.attr("softcap") ? nv.attr("softcap")->f() : 0.0f;
  const int64_t mode = nv.attr_int("qk_matmul_output_mode", 0);
  if (!nv.output(3).empty() && (mode < 0 || mode > 3))
    refuse("qk_matmul_output_mode " + std::to_string(mode) + " is not 0, 1, 2 or 3");
  const bool causal = nv.attr_int("is_causal", 0) != 0;

  std::vector<onnx::NodeProto> out;
  Emitter e{out, n.output(0) + "/opset17"};
  // [B, S, H*D] -> [B, H, S, D]
  auto split_heads = [&](const std::string& x, int64_t h, const std::string& tag) {
    const std::string split = e.node("Reshape", {x, e.ints(tag + "_split_shape", {0, 0, h, -1})}, tag + "_split");
    e.node("Transpose", {split}, tag + "_heads");
    set_ints_attr(e.last(), "perm", {0, 2, 1, 3});
    return e.base + tag + "_heads";
  };
  const std::string q4 = r == 3 ? split_heads(q, hq, "_q") : q;
  std::string k4 = r == 3 ? split_heads(k, hkv, "_k") : k, v4 = r == 3 ? split_heads(v, hkv, "_v") : v;
  if (!past_k.empty()) {
    k4 = e.node("Concat", {past_k, k4}, "_all_k");
    set_int_attr(e.last(), "axis", 2);
    v4 = e.node("Concat", {past_v, v4}, "_all_v");
    set_int_attr(e.last(), "axis", 2);
  }
  if (!nv.output(1).empty()) out.push_back(make_proto_node("Identity", {k4}, nv.output(1), e.base + "_present_key"));
  if (!nv.output(2).empty()) out.push_back(make_proto_node("Identity", {v4}, nv.output(2), e.base + "_present_value"));

  // Grouped-query attention: the heads of K and V repeated to Q's count, each head's copies side by side.
  int64_t reps = 1, q_heads = hq;  // reps 0: counted at run time
  if (r == 3) {
    if (hq % hkv != 0) refuse("q_num_heads must be a multiple of kv_num_heads");
    reps = hq / hkv;
  } else {
    const int64_t dq = stated_dim(g, q, 1), dk = stated_dim(g, k, 1);
    q_heads = dq;
    if (dq > 0 && dk > 0 && dq % dk != 0) refuse("Q's heads must be a multiple of K's");
    reps = dq > 0 && dk > 0 ? dq / dk : 0;
  }
  if (reps != 1) {
    const std::string reps_1d =
        reps > 0 ? e.ints("_reps", {reps})
                 : e.node("Div", {e.dims(q4, 1, 2, "_q_heads"), e.dims(k4, 1, 2, "_kv_heads")}, "_reps");
    const std::string heads_1d = q_heads > 0 ? e.ints("_heads", {q_heads}) : e.dims(q4, 1, 2, "_heads");
    const std::string one2 = e.ints("_one2", {1, 1}), at2 = e.ints("_at2", {2});
    e.node("Concat", {one2, reps_1d, one2}, "_expand_shape");
    set_int_attr(e.last(), "axis", 0);
    auto repeat = [&](const std::string& x, const std::string& tag) {
      const std::string x5 = e.node("Unsqueeze", {x, at2}, tag + "_5d");
      const std::string wide = e.node("Expand", {x5, e.base + "_expand_shape"}, tag + "_repeated");
      e.node("Concat", {e.dims(x, 0, 1, tag + "_b"), heads_1d, e.dims(x, 2, 4, tag + "_sd")}, tag + "_q_shape");
      set_int_attr(e.last(), "axis", 0);
      return e.node("Reshape", {wide, e.base + tag + "_q_shape"}, tag + "_grouped");
    };
    k4 = repeat(k4, "_k"), v4 = repeat(v4, "_v");
  }

  // scores = (Q * scale) K^T
  std::string scale;
  if (const auto* s = nv.attr("scale")) {
    scale = e.scalar("_scale", s->f(), q);
  } else {
    const int64_t d = r == 4 ? stated_dim(g, q, 3) : stated_dim(g, q, 2) > 0 ? stated_dim(g, q, 2) / hq : -1;
    if (d > 0) {
      scale = e.scalar("_scale", static_cast<float>(1 / std::sqrt(static_cast<double>(d))), q);
    } else {
      const std::string df = e.node("CastLike", {e.dims(q4, 3, 4, "_d"), q}, "_df");
      scale = e.node("Reciprocal", {e.node("Sqrt", {df}, "_sqrt_d")}, "_scale");
    }
  }
  const std::string kt = e.node("Transpose", {k4}, "_kt");
  set_ints_attr(e.last(), "perm", {0, 1, 3, 2});
  const std::string qk = e.node("MatMul", {e.node("Mul", {q4, scale}, "_q_scaled"), kt}, "_qk");
  std::string scores = qk;
  if (softcap > 0) {
    const std::string cap = e.scalar("_softcap", softcap, q);
    scores = e.node("Mul", {e.node("Tanh", {e.node("Div", {scores, cap}, "_over_cap")}, "_tanh"), cap}, "_capped");
  }
  const std::string capped = scores;
  std::string neg_inf, keep;  // keep: the keys each query may see, where a mask says
  if (!mask.empty() || causal || window || !nonpad.empty())
    neg_inf = e.scalar("_neg_inf", -std::numeric_limits<float>::infinity(), q);
  if (!mask.empty()) {
    const int32_t type = stated_elem_type(g, mask);
    const int64_t mr = stated_rank(g, mask);
    if (type == 0 || mr < 1) refuse("the attention mask's element type and rank must be stated");
    std::string bias = mask;
    const bool bool_mask = type == onnx::TensorProto::BOOL;
    if (bool_mask) {
      bias = e.node("Where", {mask, e.scalar("_zero", 0.0f, q), neg_inf}, "_mask_bias");
    } else if (type != stated_elem_type(g, q) && stated_elem_type(g, q) != 0) {
      refuse("the attention mask must be bool or of Q's type");
    }
    // A mask over fewer keys than there are (the past's included) is padded with -inf.
    const int64_t keys = r == 4 ? stated_dim(g, k, 2) : stated_dim(g, k, 1);
    const int64_t past = past_k.empty() ? 0 : stated_dim(g, past_k, 2);
    if (keys < 0 || past < 0 || stated_dim(g, mask, static_cast<size_t>(mr - 1)) != keys + past) {
      const std::string width =
          e.node("Sub", {e.dims(k4, 2, 3, "_keys"), e.dims(mask, mr - 1, mr, "_mask_keys")}, "_mask_pad");
      e.node("Concat", {e.ints("_pad_zeros", std::vector<int64_t>(static_cast<size_t>(2 * mr - 1), 0)), width},
             "_pads");
      set_int_attr(e.last(), "axis", 0);
      bias = e.node("Pad", {bias, e.base + "_pads", neg_inf}, "_mask_padded");
    }
    scores = e.node("Add", {scores, bias}, "_masked");
    keep = e.node("Not", {e.node("Equal", {bias, neg_inf}, "_mask_off")}, "_mask_keep");
  }
  if (causal || window || !nonpad.empty()) {
    // Query i's position: i + P after the past's P keys, i + nonpad[b] - S per sample b ([B, 1, S, 1]), else i.
    const std::string zero = e.ints("_i0", {0}, true), one = e.ints("_i1", {1}, true), two = e.ints("_i2", {2}, true);
    const std::string queries = e.node("Gather", {e.node("Shape", {q4}, "_q_shape4"), two}, "_queries");
    const std::string keys = e.node("Gather", {e.node("Shape", {k4}, "_k_shape4"), two}, "_all_keys");
    const std::string cols = e.node("Range", {zero, keys, one}, "_cols");
    std::string rows =
        e.node("Unsqueeze", {e.node("Range", {zero, queries, one}, "_rows"), e.ints("_at1", {1})}, "_rows_col");
    std::string per_sample;  // nonpad_kv_seqlen as [B, 1, 1, 1]
    if (!nonpad.empty()) {
      per_sample = e.node("Reshape", {nonpad, e.ints("_per_sample", {-1, 1, 1, 1})}, "_nonpad4");
      rows = e.node("Add", {rows, e.node("Sub", {per_sample, queries}, "_offset")}, "_positions");
    } else if (!past_k.empty()) {
      rows = e.node("Add", {rows, e.node("Gather", {e.node("Shape", {past_k}, "_past_shape"), two}, "_past")},
                    "_positions");
    }
    std::string allowed;
    auto both = [&](const std::string& cond) {
      allowed = allowed.empty() ? cond : e.node("And", {allowed, cond}, cond.substr(e.base.size()) + "_and");
    };
    if (causal) both(e.node("LessOrEqual", {cols, rows}, "_causal_allowed"));
    if (left >= 0)
      both(e.node("GreaterOrEqual", {cols, e.node("Sub", {rows, e.ints("_left", {left}, true)}, "_window_start")},
                  "_left_allowed"));
    if (right >= 0)
      both(e.node("LessOrEqual", {cols, e.node("Add", {rows, e.ints("_right", {right}, true)}, "_window_end")},
                  "_right_allowed"));
    if (!nonpad.empty()) both(e.node("Less", {cols, per_sample}, "_nonpad_allowed"));
    scores = e.node("Where", {allowed, scores, neg_inf}, "_causal");
    // Key 0 is always seen under a causal bias alone; a window, a count of 0 keys or a negative offset can hide
    // every key from a query.
    if (!keep.empty()) keep = e.node("And", {keep, allowed}, "_keep");
    else if (window || !nonpad.empty())
      keep = allowed;
  }
  const std::string biased = scores;
  // A mask may leave a query no key. Decided on the mask, as the reference decides it (float32 counts: the mask's
  // size, not the scores').
  std::string empty_rows, row_zero;
  if (!keep.empty()) {
    e.node("Cast", {keep}, "_keep_f");
    set_int_attr(e.last(), "to", onnx::TensorProto::FLOAT);
    e.node("ReduceMax", {e.base + "_keep_f"}, "_row_keeps");
    set_ints_attr(e.last(), "axes", {-1});
    empty_rows = e.node("Equal", {e.base + "_row_keeps", e.scalar("_f0", 0.0f, e.base + "_keep_f")}, "_row_empty");
    row_zero = e.scalar("_row_zero", 0.0f, q);
    scores = e.node("Where", {empty_rows, row_zero, scores}, "_scores_guarded");
  }
  std::string probs;
  const auto* precision = nv.attr("softmax_precision");
  if (precision && stated_elem_type(g, q) != 0 && precision->i() != stated_elem_type(g, q)) {
    e.node("Cast", {scores}, "_scores_wide");
    set_int_attr(e.last(), "to", precision->i());
    e.node("Softmax", {e.base + "_scores_wide"}, "_probs_wide");
    set_int_attr(e.last(), "axis", -1);
    probs = e.node("CastLike", {e.base + "_probs_wide", q}, "_probs");
  } else {
    e.node("Softmax", {scores}, "_probs");
    set_int_attr(e.last(), "axis", -1);
    probs = e.base + "_probs";
  }
  if (!empty_rows.empty()) probs = e.node("Where", {empty_rows, row_zero, probs}, "_probs_guarded");
  if (!nv.output(3).empty())
    out.push_back(make_proto_node("Identity",
                                  {mode == 3   ? probs
                                   : mode == 2 ? biased
                                               : capped},
                                  nv.output(3), e.base + "_qk_output"));
  const std::string name = n.name().empty() ? e.base : n.name();
  if (r == 4) {
    out.push_back(make_proto_node("MatMul", {probs, v4}, nv.output(0), name));
  } else {
    const std::string y4 = e.node("MatMul", {probs, v4}, "_y_heads");
    e.node("Transpose", {y4}, "_y_seq");
    set_ints_attr(e.last(), "perm", {0, 2, 1, 3});
    out.push_back(make_proto_node("Reshape", {e.base + "_y_seq", e.ints("_y_shape", {0, 0, -1})}, nv.output(0), name));
  }
  return out;
}

// RotaryEmbedding (23) in opset-17 ops: X [B, H, S, D], or [B, S, H*D] split into num_heads heads; the cos and sin
// caches gathered at position_ids (or given per batch and position) and broadcast over the heads; the first
// rotary_embedding_dim values of each head (all by default) rotated as pairs (x1, x2) -> (cos x1 - sin x2,
// sin x1 + cos x2), the pairs the two halves or, interleaved, the even and odd values; the rest kept.
std::vector<onnx::NodeProto> lower_rotary_embedding(const onnx::GraphProto& g, const onnx::NodeProto& n,
                                                    const std::function<void(const std::string&)>& refuse) {
  const NodeView nv{n};
  const std::string x = nv.input(0), cos_cache = nv.input(1), sin_cache = nv.input(2), positions = nv.input(3);
  if (x.empty() || cos_cache.empty() || sin_cache.empty()) refuse("needs X, cos_cache and sin_cache");
  const int64_t heads = nv.attr_int("num_heads", 0), dim = nv.attr_int("rotary_embedding_dim", 0);
  const bool interleaved = nv.attr_int("interleaved", 0) != 0;
  int64_t r = stated_rank(g, x);
  if (r < 0 && heads > 0) r = 3;
  if (r != 3 && r != 4) refuse("X must be 3-D with num_heads or 4-D, its rank stated");
  if (r == 3 && heads < 1) refuse("a 3-D X needs num_heads, at least 1");
  if (dim < 0 || dim % 2 != 0) refuse("rotary_embedding_dim must be even and not negative");

  std::vector<onnx::NodeProto> out;
  Emitter e{out, n.output(0) + "/opset17"};
  // X as [B, S, H, D] (3-D) or [B, H, S, D]; the caches [B, S, R/2] made to broadcast over H.
  const std::string x4 = r == 3 ? e.node("Reshape", {x, e.ints("_split_shape", {0, 0, heads, -1})}, "_heads") : x;
  std::string cos = cos_cache, sin = sin_cache;
  if (!positions.empty()) {
    cos = e.node("Gather", {cos_cache, positions}, "_cos_at"),
    sin = e.node("Gather", {sin_cache, positions}, "_sin_at");
  }
  const std::string head_axis = e.ints("_head_axis", {r == 3 ? 2 : 1});
  cos = e.node("Unsqueeze", {cos, head_axis}, "_cos"), sin = e.node("Unsqueeze", {sin, head_axis}, "_sin");
  const std::string last = e.ints("_last", {-1});
  auto slice = [&](const std::string& v, int64_t from, int64_t to, int64_t step, const std::string& tag) {
    std::vector<std::string> ins{v, e.ints(tag + "_from", {from}), e.ints(tag + "_to", {to}), last};
    if (step != 1) ins.push_back(e.ints(tag + "_step", {step}));
    return e.node("Slice", ins, tag);
  };
  constexpr int64_t kEnd = std::numeric_limits<int64_t>::max();
  const std::string rotated = dim > 0 ? slice(x4, 0, dim, 1, "_rotated_part") : x4;
  std::string x1, x2;
  if (interleaved) {
    x1 = slice(rotated, 0, kEnd, 2, "_even"), x2 = slice(rotated, 1, kEnd, 2, "_odd");
  } else {
    out.push_back(make_proto_node("Split", {rotated}, e.base + "_x1", e.base + "_halves"));
    out.back().add_output(e.base + "_x2");
    set_int_attr(out.back(), "axis", -1);
    x1 = e.base + "_x1", x2 = e.base + "_x2";
  }
  const std::string real =
      e.node("Sub", {e.node("Mul", {cos, x1}, "_cos_x1"), e.node("Mul", {sin, x2}, "_sin_x2")}, "_real");
  const std::string imag =
      e.node("Add", {e.node("Mul", {sin, x1}, "_sin_x1"), e.node("Mul", {cos, x2}, "_cos_x2")}, "_imag");
  std::string result;
  if (interleaved) {
    e.node("Concat",
           {e.node("Unsqueeze", {real, last}, "_real_pairs"), e.node("Unsqueeze", {imag, last}, "_imag_pairs")},
           "_pairs");
    set_int_attr(e.last(), "axis", -1);
    result = e.node("Reshape", {e.base + "_pairs", e.node("Shape", {rotated}, "_rotated_shape")}, "_rotated");
  } else {
    result = e.node("Concat", {real, imag}, "_rotated");
    set_int_attr(e.last(), "axis", -1);
  }
  if (dim > 0) {
    result = e.node("Concat", {result, slice(x4, dim, kEnd, 1, "_kept_part")}, "_joined");
    set_int_attr(e.last(), "axis", -1);
  }
  const std::string name = n.name().empty() ? e.base : n.name();
  if (r == 3)
    out.push_back(make_proto_node("Reshape", {result, e.ints("_out_shape", {0, 0, -1})}, n.output(0), name));
  else
    out.push_back(make_proto_node("Identity", {result}, n.output(0), name));
  return out;
}

// Resize with what opset 17's cannot say (antialias, keep_aspect_ratio_policy, half_pixel_symmetric), for an input
// of sizes stated when loading and constant scales or sizes: per resized axis, a MatMul by the [in, out] matrix of
// graph/resize_weights.h (the axis moved last and back by Transposes where it is not last). Differentiable and on
// every device as MatMul is; each matrix at most 2^24 values.
std::vector<onnx::NodeProto> lower_resize_by_matrices(const onnx::GraphProto& g, const onnx::NodeProto& n,
                                                      const std::function<void(const std::string&)>& refuse,
                                                      const std::string& what) {
  const NodeView nv{n};
  const std::string x = nv.input(0);
  if (x.empty()) refuse("needs X");
  const std::string ct = nv.attr_str("coordinate_transformation_mode", "half_pixel");
  const std::string what_for = "antialias, keep_aspect_ratio_policy or half_pixel_symmetric";
  if (ct == "tf_crop_and_resize") refuse(what_for + " with tf_crop_and_resize is not supported");
  std::vector<int64_t> dims;
  if (!stated_shape(g, x, dims)) refuse(what_for + " needs X's sizes known when loading (its shape stated)");
  // The size of each axis the resize changes must be known (an axis of scale 1 may stay symbolic: the batch).
  auto known = [&](int64_t ax) {
    if (dims[static_cast<size_t>(ax)] < 1)
      refuse(what_for + " needs X's sizes known when loading (its shape stated), axis " + std::to_string(ax) +
             "'s among them");
  };
  const int32_t type = stated_elem_type(g, x);
  if (type != onnx::TensorProto::FLOAT && type != onnx::TensorProto::DOUBLE && type != onnx::TensorProto::FLOAT16 &&
      type != onnx::TensorProto::BFLOAT16)
    refuse(what_for + " needs a float X");
  const auto r = static_cast<int64_t>(dims.size());
  std::vector<int64_t> axes;
  if (const auto* a = nv.attr("axes")) {
    for (int64_t v : a->ints()) {
      const int64_t ax = v < 0 ? v + r : v;
      if (ax < 0 || ax >= r || std::count(axes.begin(), axes.end(), ax))
        refuse("axes must name distinct axes of the input's rank " + std::to_string(r));
      axes.push_back(ax);
    }
  } else {
    for (int64_t i = 0; i < r; ++i) axes.push_back(i);
  }
  const auto k = axes.size();
  std::vector<double> scale(static_cast<size_t>(r), 1.0);
  std::vector<int64_t> size(dims);
  std::vector<double> scales;
  std::vector<int64_t> sizes;
  if (!nv.input(3).empty()) {
    if (!constant_ints(g, nv.input(3), sizes, what) || sizes.size() != k)
      refuse("sizes must be constants, one per resized axis");
    for (size_t i = 0; i < k; ++i) {
      if (sizes[i] < 0 || sizes[i] > (int64_t(1) << 30)) refuse("sizes must be between 0 and 2^30");
      known(axes[i]);
      scale[static_cast<size_t>(axes[i])] =
          static_cast<double>(sizes[i]) / static_cast<double>(dims[static_cast<size_t>(axes[i])]);
      size[static_cast<size_t>(axes[i])] = sizes[i];
    }
    const std::string policy = nv.attr_str("keep_aspect_ratio_policy", "stretch");
    if (policy != "stretch") {
      if (policy != "not_larger" && policy != "not_smaller")
        refuse("keep_aspect_ratio_policy '" + policy + "' is not stretch, not_larger or not_smaller");
      double kept = policy == "not_larger" ? std::numeric_limits<double>::infinity() : 0;
      for (int64_t ax : axes)
        kept = policy == "not_larger" ? std::min(kept, scale[static_cast<size_t>(ax)])
                                      : std::max(kept, scale[static_cast<size_t>(ax)]);
      for (int64_t ax : axes) {  // one scale for every resized axis, the sizes rounded half up
        const double kept_size = kept * static_cast<double>(dims[static_cast<size_t>(ax)]) + 0.5;
        if (!(kept_size <= double(int64_t(1) << 30))) refuse("keep_aspect_ratio_policy gives a size over 2^30");
        scale[static_cast<size_t>(ax)] = kept;
        size[static_cast<size_t>(ax)] = static_cast<int64_t>(kept_size);
      }
    }
  } else if (!nv.input(2).empty()) {
    if (!constant_floats(g, nv.input(2), scales, what) || scales.size() != k)
      refuse("scales must be constants, one per resized axis");
    for (size_t i = 0; i < k; ++i) {
      const double s = scales[i];
      if (s == 1) continue;  // (that axis unchanged, its size known or not)
      known(axes[i]);
      const double d = static_cast<double>(dims[static_cast<size_t>(axes[i])]);
      if (!(s > 0) || !(s * d <= double(int64_t(1) << 30))) refuse("scales must be positive and give sizes up to 2^30");
      scale[static_cast<size_t>(axes[i])] = s;
      size[static_cast<size_t>(axes[i])] = static_cast<int64_t>(s * d);
    }
  } else {
    refuse("needs scales or sizes");
  }
  ResizeAxis proto;
  proto.mode = nv.attr_str("mode", "nearest");
  proto.coordinate_transformation_mode = ct;
  proto.nearest_mode = nv.attr_str("nearest_mode", "round_prefer_floor");
  proto.cubic_coeff_a = nv.attr("cubic_coeff_a") ? nv.attr("cubic_coeff_a")->f() : -0.75;
  proto.exclude_outside = nv.attr_int("exclude_outside", 0) != 0;
  proto.antialias = nv.attr_int("antialias", 0) != 0;
  if (proto.antialias && proto.mode == "nearest") refuse("antialias applies to linear and cubic modes, not nearest");
  std::vector<onnx::NodeProto> out;
  Emitter e{out, n.output(0) + "/opset17"};
  std::string y = x;
  for (int64_t ax : axes) {
    const auto a = static_cast<size_t>(ax);
    if (std::fabs(scale[a] - 1) <= 1e-9 && size[a] == dims[a]) continue;  // (as the reference skips it)
    known(ax);
    constexpr int64_t kMaxWeights = int64_t(1) << 24;
    if (size[a] > kMaxWeights || dims[a] > kMaxWeights || size[a] * dims[a] > kMaxWeights)
      refuse("resizing an axis of " + std::to_string(dims[a]) + " to " + std::to_string(size[a]) +
             " needs a matrix of more than 2^24 values");
    ResizeAxis ra = proto;
    ra.in = dims[a], ra.out = size[a], ra.scale = scale[a];
    std::vector<double> w;
    try {
      w = resize_axis_weights(ra);
    } catch (const Error& err) {
      refuse(err.what());
    }
    std::vector<float> wt(w.size());  // transposed: [in, out]
    for (int64_t i = 0; i < ra.out; ++i)
      for (int64_t j = 0; j < ra.in; ++j)
        wt[static_cast<size_t>(j * ra.out + i)] = static_cast<float>(w[static_cast<size_t>(i * ra.in + j)]);
    const std::string tag = "_axis" + std::to_string(ax);
    out.push_back(floats_constant(e.base + tag + "_w", {ra.in, ra.out}, wt));
    const std::string weights = e.node("CastLike", {e.base + tag + "_w", x}, tag + "_weights");
    if (ax == r - 1) {
      y = e.node("MatMul", {y, weights}, tag + "_resized");
    } else {
      std::vector<int64_t> perm(static_cast<size_t>(r));
      for (int64_t i = 0; i < r; ++i) perm[static_cast<size_t>(i)] = i;
      std::swap(perm[a], perm.back());
      y = e.node("Transpose", {y}, tag + "_last");
      set_ints_attr(e.last(), "perm", perm);
      y = e.node("MatMul", {y, weights}, tag + "_resized");
      y = e.node("Transpose", {y}, tag + "_back");
      set_ints_attr(e.last(), "perm", perm);
    }
  }
  out.push_back(make_proto_node("Identity", {y}, n.output(0), n.name().empty() ? e.base : n.name()));
  return out;
}

// The opset-17 nodes computing what opset-18+ node `n` computes (usually just `n`, rewritten).
std::vector<onnx::NodeProto> lower_node(const onnx::GraphProto& g, onnx::NodeProto n, int index, int64_t from,
                                        const std::string& what) {
  const std::string op = n.op_type();
  auto refuse = [&](const std::string& why) {
    GR_FAIL(what << ": ONNX opset " << from << " cannot be read as opset " << kMaxOpset << ": "
                 << proto_node_desc(n, index) << ": " << why);
  };
  const NodeView nv{n};
  // Written values are named after the node's first output, which no other node writes (node names may repeat).
  const std::string base = n.output(0) + "/opset17";
  static const std::set<std::string> reduce18 = {"ReduceL1",  "ReduceL2",  "ReduceLogSum", "ReduceLogSumExp", "ReduceMax",
                                                 "ReduceMean", "ReduceMin", "ReduceProd",   "ReduceSumSquare"};
  if (reduce18.count(op)) {  // 18: axes an input, noop_with_empty_axes
    const bool noop = nv.attr_int("noop_with_empty_axes", 0) != 0;
    drop_attr(n, "noop_with_empty_axes");
    std::vector<int64_t> axes;
    if (!nv.input(1).empty() && !constant_ints(g, nv.input(1), axes, what)) refuse("its axes are computed at run time");
    while (n.input_size() > 1) n.mutable_input()->RemoveLast();
    if (axes.empty() && noop) {
      n.set_op_type("Identity");
      n.clear_attribute();
    } else if (!axes.empty()) {
      set_ints_attr(n, "axes", axes);
    }
    // 20: ReduceMax/ReduceMin of bool (any, all) as int32 (an empty set: the smallest or largest int32, so that
    // Greater than 0 gives false for max and true for min, as ONNX's reference).
    if ((op == "ReduceMax" || op == "ReduceMin") && n.op_type() == op &&
        stated_elem_type(g, nv.input(0)) == onnx::TensorProto::BOOL) {
      std::vector<onnx::NodeProto> out;
      Emitter e{out, base};
      e.node("Cast", {nv.input(0)}, "_int");
      set_int_attr(e.last(), "to", onnx::TensorProto::INT32);
      const std::string zero = e.node("Cast", {e.ints("_zero", {0}, true)}, "_zero32");
      set_int_attr(e.last(), "to", onnx::TensorProto::INT32);
      const std::string y = n.output(0);
      n.set_input(0, base + "_int");
      n.set_output(0, base + "_reduced");
      out.push_back(n);
      out.push_back(make_proto_node("Greater", {base + "_reduced", zero}, y, base + "_bool"));
      return out;
    }
  } else if (op == "Split") {  // 18: num_outputs (the last part smaller where the axis does not split evenly)
    if (const auto* a = find_attr(n, "num_outputs")) {
      const int64_t k = a->i();
      if (k != n.output_size())
        refuse("num_outputs " + std::to_string(k) + " with " + std::to_string(n.output_size()) + " outputs");
      drop_attr(n, "num_outputs");
      const int64_t axis = nv.attr_int("axis", 0);
      std::vector<int64_t> dims;
      const int64_t r = stated_shape(g, nv.input(0), dims) ? static_cast<int64_t>(dims.size()) : -1;
      const int64_t size = r > 0 && axis >= -r && axis < r ? dims[static_cast<size_t>(axis < 0 ? axis + r : axis)] : -1;
      if (k > 1 && nv.input(1).empty() && !(size >= 0 && size % k == 0)) {
        // Parts of ceil(size / k), the last what remains: from the stated size, else computed at run time.
        std::vector<onnx::NodeProto> out;
        Emitter e{out, base};
        std::string sizes;
        if (size >= 0) {
          const int64_t part = (size + k - 1) / k;
          std::vector<int64_t> v(static_cast<size_t>(k - 1), part);
          v.push_back(size - part * (k - 1));
          sizes = e.ints("_sizes", v);
        } else {
          const std::string len =
              e.node("Gather", {e.node("Shape", {nv.input(0)}, "_shape"), e.ints("_axis", {axis})}, "_len");
          const std::string rest_parts = e.ints("_k1", {k - 1});
          const std::string part =
              e.node("Div", {e.node("Add", {len, rest_parts}, "_len_up"), e.ints("_k", {k})}, "_part");
          const std::string last = e.node("Sub", {len, e.node("Mul", {part, rest_parts}, "_front")}, "_last");
          e.node("Concat", {e.node("Expand", {part, rest_parts}, "_parts"), last}, "_sizes");
          set_int_attr(e.last(), "axis", 0);
          sizes = base + "_sizes";
        }
        if (n.input_size() < 2)
          n.add_input(sizes);
        else
          n.set_input(1, sizes);
        out.push_back(n);
        return out;
      }
    }
  } else if (op == "Resize") {  // 18: antialias, axes, keep_aspect_ratio_policy; 19: half_pixel_symmetric
    if (nv.attr_int("antialias", 0) != 0 || nv.attr_str("keep_aspect_ratio_policy", "stretch") != "stretch" ||
        nv.attr_str("coordinate_transformation_mode", "") == "half_pixel_symmetric")
      return lower_resize_by_matrices(g, n, refuse, what);
    drop_attr(n, "antialias");
    drop_attr(n, "keep_aspect_ratio_policy");
    if (const auto* a = find_attr(n, "axes")) {
      // Scales, sizes and roi for some axes only: those of every axis, the others' scale 1, size their own, roi
      // [0, 1] (ScatterElements into the defaults, so that values computed at run time serve too).
      const int64_t r = stated_rank(g, nv.input(0));
      if (r < 1) refuse("axes needs the input's rank stated");
      std::vector<int64_t> axes;
      std::set<int64_t> seen;
      for (int64_t x : a->ints()) {
        const int64_t ax = x < 0 ? x + r : x;
        if (ax < 0 || ax >= r || !seen.insert(ax).second)
          refuse("axes must name distinct axes of the input's rank " + std::to_string(r));
        axes.push_back(ax);
      }
      drop_attr(n, "axes");
      std::vector<onnx::NodeProto> out;
      Emitter e{out, base};
      const std::string at = e.ints("_axes", axes);
      auto full = [&](int slot, const std::string& defaults, const std::string& indices, const std::string& tag) {
        if (nv.input(slot).empty()) return;
        e.node("ScatterElements", {defaults, indices, nv.input(slot)}, tag);
        n.set_input(slot, base + tag);
      };
      std::vector<int64_t> both = axes;
      for (int64_t ax : axes) both.push_back(r + ax);
      std::vector<float> roi(static_cast<size_t>(2 * r), 0.0f);
      std::fill(roi.begin() + r, roi.end(), 1.0f);
      if (!nv.input(1).empty()) {
        out.push_back(floats_constant(base + "_roi_default", {2 * r}, roi));
        full(1, e.node("CastLike", {base + "_roi_default", nv.input(1)}, "_roi_typed"), e.ints("_roi_at", both),
             "_roi");
      }
      if (!nv.input(2).empty()) {
        out.push_back(floats_constant(base + "_ones", {r}, std::vector<float>(static_cast<size_t>(r), 1.0f)));
        full(2, base + "_ones", at, "_scales");
      }
      full(3, e.node("Shape", {nv.input(0)}, "_shape"), at, "_sizes");
      out.push_back(n);
      return out;
    }
  } else if (op == "Pad") {  // 18: axes; 19: wrap
    const bool wrap = nv.attr_str("mode", "constant") == "wrap";
    if (nv.input(3).empty() && !wrap) return {n};
    // The pads of every axis: constants, and with axes (some axes only) the input's rank stated.
    std::vector<int64_t> pads, axes;
    if (!constant_ints(g, nv.input(1), pads, what))
      refuse(wrap ? "mode 'wrap' needs constant pads" : "pads for some axes only (the axes input) need constant pads");
    int64_t r = static_cast<int64_t>(pads.size() / 2);
    if (!nv.input(3).empty()) {
      r = stated_rank(g, nv.input(0));
      if (r < 0 || !constant_ints(g, nv.input(3), axes, what))
        refuse("pads for some axes only (the axes input) need constant axes and the input's rank stated");
      if (pads.size() != 2 * axes.size()) refuse("pads must hold two values per axis");
      std::vector<int64_t> full(static_cast<size_t>(2 * r), 0);
      std::set<int64_t> seen;
      for (size_t i = 0; i < axes.size(); ++i) {
        const int64_t a = axes[i] < 0 ? axes[i] + r : axes[i];
        if (a < 0 || a >= r || !seen.insert(a).second)
          refuse("axes must name distinct axes of the input's rank " + std::to_string(r));
        full[static_cast<size_t>(a)] = pads[i];
        full[static_cast<size_t>(r + a)] = pads[axes.size() + i];
      }
      pads = full;
    }
    std::vector<onnx::NodeProto> out;
    if (!wrap) {
      out.push_back(ints_constant(base + "_pads", pads));
      n.set_input(1, base + "_pads");
      while (n.input_size() > 3) n.mutable_input()->RemoveLast();
      out.push_back(n);
      return out;
    }
    // wrap (torch's circular padding): along each padded axis, its last b and first e slices around it (Slice,
    // Concat), the axes one after another, so that the corners wrap too. Pads up to the axis's stated size.
    std::vector<int64_t> dims;
    const bool stated = stated_shape(g, nv.input(0), dims) && dims.size() == static_cast<size_t>(r);
    std::string v = nv.input(0);
    for (int64_t ax = 0; ax < r; ++ax) {
      const int64_t b = pads[static_cast<size_t>(ax)], e = pads[static_cast<size_t>(r + ax)];
      if (b == 0 && e == 0) continue;
      if (b < 0 || e < 0) refuse("mode 'wrap' with negative pads is not supported");
      if (!stated || dims[static_cast<size_t>(ax)] < std::max(b, e))
        refuse("mode 'wrap' needs pads no larger than the axis, whose size must be stated (axis " + std::to_string(ax) +
               ")");
      const std::string sa = base + "_axis" + std::to_string(ax);
      out.push_back(ints_constant(sa, {ax}));
      std::vector<std::string> parts;
      auto slice = [&](const std::string& tag, int64_t from, int64_t to) {
        out.push_back(ints_constant(sa + tag + "_from", {from}));
        out.push_back(ints_constant(sa + tag + "_to", {to}));
        out.push_back(make_proto_node("Slice", {v, sa + tag + "_from", sa + tag + "_to", sa}, sa + tag, sa + tag));
        parts.push_back(sa + tag);
      };
      if (b > 0) slice("_before", -b, std::numeric_limits<int64_t>::max());
      parts.push_back(v);
      if (e > 0) slice("_after", 0, e);
      out.push_back(make_proto_node("Concat", parts, sa + "_wrapped", sa + "_wrapped"));
      set_int_attr(out.back(), "axis", ax);
      v = sa + "_wrapped";
    }
    out.push_back(make_proto_node("Identity", {v}, n.output(0), n.name().empty() ? base : n.name()));
    return out;
  } else if (op == "ScatterElements" || op == "ScatterND") {  // 18: max, min
    const std::string r = nv.attr_str("reduction", "none");
    if (r != "max" && r != "min") return {n};
    if (op == "ScatterND") refuse("reduction '" + r + "' is not supported (ScatterElements' is)");
    // torch's scatter_reduce(amax/amin, include_self=True). Along the axis, the updates sorted so that the largest
    // (max) or smallest (min) comes last, their indices with them (TopK, GatherElements); ScatterElements without
    // a reduction writes updates that meet in one element in their order (graphrun's rule on every device), so
    // the last, the extreme, stays there; Max (Min) with data then keeps what data held where it is larger.
    const std::string data = nv.input(0), idx = nv.input(1), upd = nv.input(2);
    int64_t axis = nv.attr_int("axis", 0);
    if (axis < 0) {
      int64_t rank = stated_rank(g, data);
      if (rank < 0) rank = stated_rank(g, idx);
      if (rank < 0) rank = stated_rank(g, upd);
      if (rank < 0) refuse("a negative axis needs the rank of data, indices or updates stated");
      axis += rank;
      if (axis < 0) refuse("axis " + std::to_string(nv.attr_int("axis", 0)) + " is out of range");
    }
    std::vector<onnx::NodeProto> out;
    Emitter e{out, base};
    const std::string count = e.dims(upd, axis, axis + 1, "_count");
    out.push_back(make_proto_node("TopK", {upd, count}, base + "_sorted", base + "_sort"));
    out.back().add_output(base + "_order");
    set_int_attr(out.back(), "axis", axis);
    set_int_attr(out.back(), "largest", r == "min" ? 1 : 0);
    e.node("GatherElements", {idx, base + "_order"}, "_sorted_indices");
    set_int_attr(e.last(), "axis", axis);
    e.node("ScatterElements", {data, base + "_sorted_indices", base + "_sorted"}, "_written");
    set_int_attr(e.last(), "axis", axis);
    out.push_back(make_proto_node(r == "max" ? "Max" : "Min", {data, base + "_written"}, n.output(0),
                                  n.name().empty() ? base : n.name()));
    return out;
  } else if (op == "LpPool") {  // 18: ceil_mode, dilations
    if (nv.attr_int("ceil_mode", 0) != 0) refuse("ceil_mode 1 is not supported");
    drop_attr(n, "ceil_mode");
    if (const auto* a = find_attr(n, "dilations")) {
      for (int64_t d : a->ints())
        if (d != 1) refuse("dilations other than 1 are not supported");
      drop_attr(n, "dilations");
    }
  } else if (op == "AveragePool") {  // 19: dilations
    if (const auto* a = find_attr(n, "dilations")) {
      for (int64_t d : a->ints())
        if (d != 1) refuse("dilations other than 1 are not supported");
      drop_attr(n, "dilations");
    }
  } else if (op == "Cast" || op == "CastLike" || op == "QuantizeLinear") {
    // 19: saturate (float8 only); 24: round_mode (float8e8m0 only): types graphrun has none of.
    drop_attr(n, "saturate");
    drop_attr(n, "round_mode");
  } else if (op == "Range") {  // 27: stash_type, the precision of float16 ranges (graphrun computes them in f32)
    drop_attr(n, "stash_type");
  } else if (op == "Swish" || op == "SwiGLU") {
    // 24: Swish(X) = X * Sigmoid(alpha * X); 28: SwiGLU(A, B) = Swish(A) * B, A and B of one shape.
    const std::string x = nv.input(0);
    if (x.empty() || (op == "SwiGLU" && nv.input(1).empty())) refuse(op == "Swish" ? "needs X" : "needs A and B");
    const float alpha = nv.attr("alpha") ? nv.attr("alpha")->f() : 1.0f;
    std::vector<onnx::NodeProto> out;
    Emitter e{out, base};
    const std::string gate =
        e.node("Sigmoid", {alpha == 1.0f ? x : e.node("Mul", {x, e.scalar("_alpha", alpha, x)}, "_scaled")}, "_gate");
    const std::string name = n.name().empty() ? base : n.name();
    if (op == "Swish") {
      out.push_back(make_proto_node("Mul", {x, gate}, n.output(0), name));
    } else {
      out.push_back(make_proto_node("Mul", {e.node("Mul", {x, gate}, "_swish"), nv.input(1)}, n.output(0), name));
    }
    return out;
  } else if (op == "CumProd") {
    // 26: the running product along a constant axis of a length stated when loading, by doubling (Hillis and
    // Steele): y *= y shifted by 1, 2, 4, ... along the axis (1s shifted in), ceil(log2(L)) Pad, Slice and Mul
    // nodes, differentiable as they are (a 0 included, where exp(cumsum(log)) is not). exclusive shifts the
    // result by one; reverse runs it on the axis reversed.
    const std::string x = nv.input(0);
    std::vector<int64_t> axis_values;
    if (x.empty() || nv.input(1).empty()) refuse("needs x and axis");
    if (!constant_ints(g, nv.input(1), axis_values, what) || axis_values.size() != 1)
      refuse("its axis must be one constant value (an initializer or Constant node)");
    std::vector<int64_t> dims;
    if (!stated_shape(g, x, dims)) refuse("the rank of x must be known when loading (its shape stated)");
    const int64_t r = static_cast<int64_t>(dims.size());
    int64_t axis = axis_values[0];
    if (axis < -r || axis >= r) refuse("axis " + std::to_string(axis) + " is outside the rank " + std::to_string(r));
    if (axis < 0) axis += r;
    const int64_t len = dims[static_cast<size_t>(axis)];
    if (len < 0) refuse("the length of x along the axis must be known when loading (its shape stated)");
    if (len > (int64_t(1) << 40)) refuse("a length over 2^40 along the axis is not supported");
    const bool exclusive = nv.attr_int("exclusive", 0) != 0, reverse = nv.attr_int("reverse", 0) != 0;
    std::vector<onnx::NodeProto> out;
    Emitter e{out, base};
    const std::string axes = e.ints("_axes", {axis}), zero = e.ints("_zero", {0});
    const std::string one = e.node("CastLike", {e.ints("_one64", {1}, true), x}, "_one");
    constexpr int64_t kBefore = std::numeric_limits<int64_t>::min();
    auto flip = [&](const std::string& v, const std::string& tag) {
      return e.node("Slice",
                    {v, e.ints(tag + "_from", {-1}), e.ints(tag + "_to", {kBefore}), axes, e.ints(tag + "_step", {-1})},
                    tag);
    };
    // v shifted by `by` along the axis, 1s in front: Pad of its first len - by values.
    auto shifted = [&](const std::string& v, int64_t by, const std::string& tag) {
      const std::string kept = e.node("Slice", {v, zero, e.ints(tag + "_to", {len - by}), axes}, tag + "_kept");
      std::vector<int64_t> pads(static_cast<size_t>(2 * r), 0);
      pads[static_cast<size_t>(axis)] = by;
      return e.node("Pad", {kept, e.ints(tag + "_pads", pads), one}, tag);
    };
    std::string y = reverse ? flip(x, "_reversed") : x;
    int step = 0;
    for (int64_t by = 1; by < len; by *= 2, ++step) {
      const std::string tag = "_step" + std::to_string(step);
      y = e.node("Mul", {y, shifted(y, by, tag + "_shifted")}, tag);
    }
    if (exclusive && len > 0) y = shifted(y, 1, "_exclusive");
    if (reverse) y = flip(y, "_back");
    out.push_back(make_proto_node("Identity", {y}, n.output(0), n.name().empty() ? base : n.name()));
    return out;
  } else if (op == "CausalConvWithState") {
    // 27: a causal depthwise convolution along the last axis of [B, C, L], k - 1 values of state in front (the
    // past_state, else 0s): Concat or Pad, Conv with group C and no padding, then SiLU where asked; present_state
    // the last k - 1 values of what was convolved. C and k from the weight's stated shape [C, 1, k].
    const std::string x = nv.input(0), w = nv.input(1), bias = nv.input(2), past = nv.input(3);
    if (x.empty() || w.empty()) refuse("needs input and weight");
    const int64_t channels = stated_dim(g, w, 0), k = stated_dim(g, w, 2);
    if (channels < 1 || k < 1 || stated_rank(g, w) != 3)
      refuse("the weight's shape [channels, 1, k] must be known when loading (its shape stated)");
    const std::string act = nv.attr_str("activation", "none");
    if (act != "none" && act != "silu" && act != "swish") refuse("activation '" + act + "' is not none, silu or swish");
    std::vector<onnx::NodeProto> out;
    Emitter e{out, base};
    std::string padded = x;
    if (!past.empty()) {
      padded = e.node("Concat", {past, x}, "_padded");
      set_int_attr(e.last(), "axis", 2);
    } else if (k > 1) {
      padded = e.node("Pad", {x, e.ints("_pads", {0, 0, k - 1, 0, 0, 0})}, "_padded");
    }
    std::vector<std::string> conv_in{padded, w};
    if (!bias.empty()) conv_in.push_back(bias);
    const std::string name = n.name().empty() ? base : n.name();
    const bool silu = act != "none";
    out.push_back(make_proto_node("Conv", conv_in, silu ? base + "_conv" : n.output(0), silu ? base + "_conv" : name));
    set_int_attr(out.back(), "group", channels);
    set_ints_attr(out.back(), "kernel_shape", {k});
    if (silu)
      out.push_back(
          make_proto_node("Mul", {base + "_conv", e.node("Sigmoid", {base + "_conv"}, "_gate")}, n.output(0), name));
    if (!nv.output(1).empty()) {
      constexpr int64_t kEnd = std::numeric_limits<int64_t>::max();
      out.push_back(make_proto_node("Slice",
                                    {padded, e.ints("_state_from", {k > 1 ? 1 - k : kEnd}), e.ints("_state_to", {kEnd}),
                                     e.ints("_state_axis", {2})},
                                    nv.output(1), base + "_present_state"));
    }
    return out;
  } else if (op == "TensorScatter") {
    // 24: a KV cache update. present = past with update's S positions along `axis` written at write_indices[b]
    // onwards (modulo the cache's length M in mode circular): ScatterElements of the update at indices
    // write_indices[b] + s, broadcast over the other axes. Linear writes beyond M are an error at run time (the
    // index out of range), as the spec requires them to stay within it.
    const std::string past = nv.input(0), update = nv.input(1), write = nv.input(2);
    if (past.empty() || update.empty()) refuse("needs past_cache and update");
    const std::string mode = nv.attr_str("mode", "linear");
    if (mode != "linear" && mode != "circular") refuse("mode '" + mode + "' is not linear or circular");
    int64_t r = stated_rank(g, past);
    if (r < 0) r = stated_rank(g, update);
    if (r < 2)
      refuse(r < 0 ? "the rank of past_cache must be known when loading (its shape stated)"
                   : "past_cache must have a batch axis and a sequence axis");
    int64_t axis = nv.attr_int("axis", -2);
    if (axis < -r || axis >= r) refuse("axis " + std::to_string(axis) + " is outside the rank " + std::to_string(r));
    if (axis < 0) axis += r;
    if (axis == 0) refuse("axis cannot be the batch axis (0)");
    std::vector<onnx::NodeProto> out;
    Emitter e{out, base};
    const std::string zero = e.ints("_zero", {0}, true), one = e.ints("_one", {1}, true);
    const std::string at_axis = e.ints("_axis", {axis}, true);
    const std::string length = e.node("Gather", {e.node("Shape", {update}, "_update_shape"), at_axis}, "_length");
    // s along the axis: [S, 1, ...] (ones for the axes after it).
    std::vector<int64_t> seq_shape(static_cast<size_t>(r - axis), 1);
    seq_shape[0] = -1;
    std::string index =
        e.node("Reshape", {e.node("Range", {zero, length, one}, "_positions"), e.ints("_seq_shape", seq_shape)}, "_s");
    if (!write.empty()) {
      std::vector<int64_t> batch_shape(static_cast<size_t>(r), 1);
      batch_shape[0] = -1;
      index =
          e.node("Add", {index, e.node("Reshape", {write, e.ints("_batch_shape", batch_shape)}, "_write")}, "_written");
    }
    if (mode == "circular")
      index = e.node("Mod", {index, e.node("Gather", {e.node("Shape", {past}, "_cache_shape"), at_axis}, "_max")},
                     "_wrapped");
    const std::string indices = e.node("Expand", {index, base + "_update_shape"}, "_indices");
    out.push_back(
        make_proto_node("ScatterElements", {past, indices, update}, n.output(0), n.name().empty() ? base : n.name()));
    set_int_attr(out.back(), "axis", axis);
    return out;
  } else if (op == "GridSample") {  // 20: mode names
    if (auto* a = find_attr(n, "mode")) {
      if (a->s() == "linear") a->set_s("bilinear");
      else if (a->s() == "cubic") a->set_s("bicubic");
    }
  } else if (op == "DFT" && from >= 20) {  // 20: axis an input (default -2), 17's attribute (default 1)
    std::vector<int64_t> axis{-2};
    if (!nv.input(2).empty() && (!constant_ints(g, nv.input(2), axis, what) || axis.size() != 1))
      refuse("its axis must be one constant value (an initializer or Constant node)");
    while (n.input_size() > 2) n.mutable_input()->RemoveLast();
    drop_attr(n, "axis");
    set_int_attr(n, "axis", axis[0]);
  } else if (op == "RMSNormalization") {
    // 23 (torch's nn.RMSNorm): X / sqrt(mean(X^2 over the axes from `axis` on) + epsilon) * scale. The axes are
    // negative (counted from the end) where `axis` is, else need the input's stated rank.
    const std::string x = nv.input(0), scale = nv.input(1);
    int64_t axis = nv.attr_int("axis", -1);
    std::vector<int64_t> axes;
    if (axis >= 0) {
      const int64_t r = stated_rank(g, x);
      if (r < 0) refuse("a non-negative axis needs the input's rank stated");
      if (axis >= r) refuse("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(r));
      axis -= r;
    }
    const int64_t rank = stated_rank(g, x);
    if (axis < -(rank >= 0 ? rank : kMaxRank))
      refuse("axis " + std::to_string(nv.attr_int("axis", -1)) + " is out of range for " +
             (rank >= 0 ? "rank " + std::to_string(rank) : "any rank"));
    for (int64_t a = axis; a < 0; ++a) axes.push_back(a);
    const auto* eps = find_attr(n, "epsilon");
    std::vector<onnx::NodeProto> out;
    out.push_back(make_proto_node("Mul", {x, x}, base + "_sq", base + "_sq"));
    out.push_back(make_proto_node("ReduceMean", {base + "_sq"}, base + "_ms", base + "_ms"));
    set_ints_attr(out.back(), "axes", axes);
    set_int_attr(out.back(), "keepdims", 1);
    scalar_like(out, base + "_eps", eps ? eps->f() : 1e-5f, x);
    out.push_back(make_proto_node("Add", {base + "_ms", base + "_eps"}, base + "_var", base + "_var"));
    out.push_back(make_proto_node("Sqrt", {base + "_var"}, base + "_rms", base + "_rms"));
    out.push_back(make_proto_node("Div", {x, base + "_rms"}, base + "_normed", base + "_normed"));
    out.push_back(make_proto_node("Mul", {base + "_normed", scale}, n.output(0), n.name().empty() ? base : n.name()));
    return out;
  } else if (op == "Mish") {  // 18: x * tanh(softplus(x))
    const std::string x = nv.input(0);
    return {make_proto_node("Softplus", {x}, base + "_softplus", base + "_softplus"),
            make_proto_node("Tanh", {base + "_softplus"}, base + "_tanh", base + "_tanh"),
            make_proto_node("Mul", {x, base + "_tanh"}, n.output(0), n.name().empty() ? base : n.name())};
  } else if (op == "Gelu") {  // 20: 0.5 x (1 + erf(x / sqrt 2)), or with approximate = tanh its tanh form
    const std::string x = nv.input(0), approx = nv.attr_str("approximate", "none");
    std::vector<onnx::NodeProto> out;
    std::string inner;
    if (approx == "none") {
      scalar_like(out, base + "_rsqrt2", static_cast<float>(0.70710678118654752), x);
      out.push_back(make_proto_node("Mul", {x, base + "_rsqrt2"}, base + "_scaled", base + "_scaled"));
      out.push_back(make_proto_node("Erf", {base + "_scaled"}, base + "_erf", base + "_erf"));
      inner = base + "_erf";
    } else if (approx == "tanh") {
      scalar_like(out, base + "_c", 0.044715f, x);
      scalar_like(out, base + "_k", static_cast<float>(0.79788456080286536), x);  // sqrt(2 / pi)
      out.push_back(make_proto_node("Mul", {x, x}, base + "_x2", base + "_x2"));
      out.push_back(make_proto_node("Mul", {base + "_x2", x}, base + "_x3", base + "_x3"));
      out.push_back(make_proto_node("Mul", {base + "_x3", base + "_c"}, base + "_cx3", base + "_cx3"));
      out.push_back(make_proto_node("Add", {x, base + "_cx3"}, base + "_sum", base + "_sum"));
      out.push_back(make_proto_node("Mul", {base + "_sum", base + "_k"}, base + "_arg", base + "_arg"));
      out.push_back(make_proto_node("Tanh", {base + "_arg"}, base + "_tanh", base + "_tanh"));
      inner = base + "_tanh";
    } else {
      refuse("approximate '" + approx + "' is not 'none' or 'tanh'");
    }
    scalar_like(out, base + "_one", 1.0f, x);
    scalar_like(out, base + "_half", 0.5f, x);
    out.push_back(make_proto_node("Add", {inner, base + "_one"}, base + "_1p", base + "_1p"));
    out.push_back(make_proto_node("Mul", {x, base + "_half"}, base + "_hx", base + "_hx"));
    out.push_back(make_proto_node("Mul", {base + "_hx", base + "_1p"}, n.output(0), n.name().empty() ? base : n.name()));
    return out;
  } else if (op == "GroupNormalization") {
    // 18 (scale and bias per group) and 21 (per channel), as torch writes F.group_norm at opset 17: X as
    // [N, G, rest], InstanceNormalization over the rest, the scale and bias applied per group there (18) or per
    // channel on X as [N, C, rest] (21), back to X's shape.
    const std::string x = nv.input(0), scale = nv.input(1), bias = nv.input(2);
    const auto* groups = find_attr(n, "num_groups");
    if (!groups || groups->i() < 1) refuse("needs the attribute num_groups, at least 1");
    const int64_t G = groups->i();
    const auto* eps = find_attr(n, "epsilon");
    const bool per_group = from < 21;
    const std::string name = n.name().empty() ? base : n.name();
    std::vector<onnx::NodeProto> out;
    out.push_back(ints_constant(base + "_groups_shape", {0, G, -1}));
    out.push_back(make_proto_node("Reshape", {x, base + "_groups_shape"}, base + "_groups", base + "_groups"));
    std::string s = scale, b = bias;
    if (!per_group) {
      // Ones and zeros of G values, sized from X as [N, G, rest] (what the data holds, not what the file says).
      out.push_back(make_proto_node("Shape", {base + "_groups"}, base + "_g", base + "_g"));
      set_int_attr(out.back(), "start", 1);
      set_int_attr(out.back(), "end", 2);
      scalar_like(out, base + "_one", 1.0f, x);
      scalar_like(out, base + "_zero", 0.0f, x);
      out.push_back(make_proto_node("Expand", {base + "_one", base + "_g"}, base + "_ones", base + "_ones"));
      out.push_back(make_proto_node("Expand", {base + "_zero", base + "_g"}, base + "_zeros", base + "_zeros"));
      s = base + "_ones", b = base + "_zeros";
    }
    onnx::NodeProto norm =
        make_proto_node("InstanceNormalization", {base + "_groups", s, b}, base + "_normed", base + "_normed");
    if (eps) *norm.add_attribute() = *eps;
    out.push_back(norm);
    out.push_back(make_proto_node("Shape", {x}, base + "_shape", base + "_shape"));
    std::string y = base + "_normed";
    if (!per_group) {
      out.push_back(make_proto_node("Shape", {x}, base + "_nc", base + "_nc"));
      set_int_attr(out.back(), "end", 2);
      out.push_back(ints_constant(base + "_rest", {-1}));
      out.push_back(make_proto_node("Concat", {base + "_nc", base + "_rest"}, base + "_nc_rest", base + "_nc_rest"));
      set_int_attr(out.back(), "axis", 0);
      out.push_back(make_proto_node("Reshape", {y, base + "_nc_rest"}, base + "_channels", base + "_channels"));
      out.push_back(ints_constant(base + "_column", {-1, 1}));
      out.push_back(make_proto_node("Reshape", {scale, base + "_column"}, base + "_scale", base + "_scale"));
      out.push_back(make_proto_node("Reshape", {bias, base + "_column"}, base + "_bias", base + "_bias"));
      out.push_back(make_proto_node("Mul", {base + "_channels", base + "_scale"}, base + "_scaled", base + "_scaled"));
      out.push_back(make_proto_node("Add", {base + "_scaled", base + "_bias"}, base + "_shifted", base + "_shifted"));
      y = base + "_shifted";
    }
    out.push_back(make_proto_node("Reshape", {y, base + "_shape"}, n.output(0), name));
    return out;
  } else if (op == "Col2Im") {
    // 18: the sum of the sliding blocks into the image (torch's F.fold): a ConvTranspose of each channel's
    // columns [N*C, K, L1, ..., Ls] by the one-hot blocks [K, 1, b1, ..., bs], output_padding making up what the
    // strides leave over at the far edge.
    std::vector<int64_t> image, block;
    if (!constant_ints(g, nv.input(1), image, what) || !constant_ints(g, nv.input(2), block, what))
      refuse("image_shape and block_shape must be constants (initializers or Constant nodes)");
    const size_t S = image.size();
    if (S == 0 || block.size() != S) refuse("image_shape and block_shape must list the same number of dimensions");
    auto ints_attr = [&](const char* k, size_t count, int64_t dflt) {
      std::vector<int64_t> v(count, dflt);
      if (const auto* a = find_attr(n, k)) v.assign(a->ints().begin(), a->ints().end());
      if (v.size() != count)
        refuse(std::string("attribute '") + k + "' must list " + std::to_string(count) + " values");
      return v;
    };
    const std::vector<int64_t> dil = ints_attr("dilations", S, 1), pads = ints_attr("pads", 2 * S, 0),
                               strides = ints_attr("strides", S, 1);
    int64_t K = 1;
    std::vector<int64_t> counts, extra;
    for (size_t i = 0; i < S; ++i) {
      if (image[i] < 1 || block[i] < 1 || dil[i] < 1 || strides[i] < 1 || pads[i] < 0 || pads[S + i] < 0)
        refuse("image_shape, block_shape, dilations and strides must be positive, pads not negative");
      for (int64_t v : {image[i], block[i], dil[i], strides[i], pads[i], pads[S + i]})
        if (v > kMaxCol2ImDim) refuse("image_shape, block_shape, dilations, strides and pads must be at most 2^30");
      const int64_t span = dil[i] * (block[i] - 1) + 1, room = image[i] + pads[i] + pads[S + i] - span;
      if (room < 0) refuse("a block of dimension " + std::to_string(i) + " is larger than the padded image");
      counts.push_back(room / strides[i] + 1);
      extra.push_back(room % strides[i]);
      K *= block[i];
      // The one-hot blocks are K x K values: a block of 64 x 64 is 64 MiB of them.
      if (K > kMaxCol2ImBlock)
        refuse("blocks of more than " + std::to_string(kMaxCol2ImBlock) + " values are not supported");
    }
    std::vector<int64_t> wdims{K, 1};
    wdims.insert(wdims.end(), block.begin(), block.end());
    std::vector<float> w(static_cast<size_t>(K * K), 0.0f);
    for (int64_t k = 0; k < K; ++k) w[static_cast<size_t>(k * K + k)] = 1.0f;  // block position k of column k
    std::vector<int64_t> cols{-1, K};
    cols.insert(cols.end(), counts.begin(), counts.end());
    std::vector<int64_t> rest{-1};
    rest.insert(rest.end(), image.begin(), image.end());
    std::vector<onnx::NodeProto> out;
    out.push_back(ints_constant(base + "_cols_shape", cols));
    out.push_back(make_proto_node("Reshape", {nv.input(0), base + "_cols_shape"}, base + "_cols", base + "_cols"));
    out.push_back(floats_constant(base + "_blocks_f", wdims, w));
    out.push_back(make_proto_node("CastLike", {base + "_blocks_f", nv.input(0)}, base + "_blocks", base + "_blocks"));
    onnx::NodeProto ct = make_proto_node("ConvTranspose", {base + "_cols", base + "_blocks"}, base + "_images",
                                         n.name().empty() ? base : n.name());
    set_ints_attr(ct, "kernel_shape", block);
    set_ints_attr(ct, "dilations", dil);
    set_ints_attr(ct, "pads", pads);
    set_ints_attr(ct, "strides", strides);
    set_ints_attr(ct, "output_padding", extra);
    out.push_back(ct);
    out.push_back(make_proto_node("Shape", {nv.input(0)}, base + "_batch", base + "_batch"));
    set_int_attr(out.back(), "end", 1);
    out.push_back(ints_constant(base + "_rest", rest));
    out.push_back(make_proto_node("Concat", {base + "_batch", base + "_rest"}, base + "_shape", base + "_shape"));
    set_int_attr(out.back(), "axis", 0);
    out.push_back(make_proto_node("Reshape", {base + "_images", base + "_shape"}, n.output(0), base + "_out"));
    return out;
  } else if (op == "Attention") {
    return lower_attention(g, n, refuse);
  } else if (op == "RotaryEmbedding") {
    return lower_rotary_embedding(g, n, refuse);
  } else if (op == "AffineGrid") {
    // 20: torch's F.affine_grid. The grid of normalised coordinates (x along W, y along H, z along D, and 1) times
    // theta^T, in ops of opset 17: per axis of length L, (2 i - (L - 1)) / L, or / max(L - 1, 1) with
    // align_corners (a single step at 0, as torch). The size is read at run time; whether the grid is 2-D
    // (theta [N, 2, 3], size [N, C, H, W]) or 3-D (theta [N, 3, 4], size of 5) must be known when loading.
    const std::string theta = nv.input(0), size = nv.input(1);
    int64_t r = stated_dim(g, theta, 1);
    std::vector<int64_t> size_values;
    if (r < 0 && constant_ints(g, size, size_values, what)) r = static_cast<int64_t>(size_values.size()) - 2;
    if (r < 0 && stated_dim(g, size, 0) > 0) r = stated_dim(g, size, 0) - 2;
    if (r != 2 && r != 3)
      refuse(r < 0 ? "whether it is 2-D or 3-D must be known when loading (theta's shape or size's length)"
                   : "theta must be [N, 2, 3] or [N, 3, 4]");
    const bool corners = nv.attr_int("align_corners", 0) != 0;
    std::vector<onnx::NodeProto> out;
    Emitter e{out, base};
    const std::string zero = e.ints("_zero", {0}, true), one = e.ints("_one", {1}, true),
                      two = e.ints("_two", {2}, true);
    const std::string onef = e.scalar("_onef", 1.0f, theta);
    // The coordinates along spatial axis k (size index 2 + k), shaped to broadcast over the grid [D?, H, W].
    std::vector<std::string> coords(static_cast<size_t>(r));
    std::vector<std::string> dims;  // each spatial length as a 1-D tensor of one value
    for (int64_t k = 0; k < r; ++k) {
      const std::string sk = std::to_string(k);
      const std::string len = e.node("Gather", {size, e.ints("_at" + sk, {2 + k}, true)}, "_len" + sk);
      dims.push_back(e.node("Gather", {size, e.ints("_at1d" + sk, {2 + k}, false)}, "_dim" + sk));
      const std::string i = e.node("Range", {zero, len, one}, "_i" + sk);
      const std::string last = e.node("Sub", {len, one}, "_last" + sk);
      const std::string num = e.node("Sub", {e.node("Mul", {i, two}, "_2i" + sk), last}, "_num" + sk);
      const std::string den = corners ? e.node("Max", {last, one}, "_den" + sk) : len;
      const std::string numf = e.node("CastLike", {num, theta}, "_numf" + sk);
      const std::string denf = e.node("CastLike", {den, theta}, "_denf" + sk);
      // Axis k of the grid [D?, H, W, 1] (0: D or H, ...): that length, ones elsewhere.
      std::vector<int64_t> shape(static_cast<size_t>(r + 1), 1);
      shape[static_cast<size_t>(k)] = -1;
      coords[static_cast<size_t>(k)] = e.node(
          "Reshape", {e.node("Div", {numf, denf}, "_lin" + sk), e.ints("_shape" + sk, shape, false)}, "_axis" + sk);
    }
    std::vector<std::string> grid_dims = dims;
    grid_dims.push_back(e.ints("_one1d", {1}, false));
    out.push_back(make_proto_node("Concat", grid_dims, base + "_grid_shape", base + "_grid_shape"));
    set_int_attr(out.back(), "axis", 0);
    // The homogeneous coordinates (x, y[, z], 1): x runs along the last axis (W).
    std::vector<std::string> parts;
    for (int64_t k = r - 1; k >= 0; --k)
      parts.push_back(
          e.node("Expand", {coords[static_cast<size_t>(k)], base + "_grid_shape"}, "_coord" + std::to_string(k)));
    parts.push_back(e.node("Expand", {onef, base + "_grid_shape"}, "_ones"));
    out.push_back(make_proto_node("Concat", parts, base + "_base", base + "_base"));
    set_int_attr(out.back(), "axis", r);
    const std::string flat = e.node("Reshape", {base + "_base", e.ints("_points", {-1, r + 1}, false)}, "_flat");
    out.push_back(make_proto_node("Transpose", {theta}, base + "_theta_t", base + "_theta_t"));
    set_ints_attr(out.back(), "perm", {0, 2, 1});
    const std::string points = e.node("MatMul", {flat, base + "_theta_t"}, "_points_out");  // [N, P, r]
    std::vector<std::string> final_dims{e.node("Gather", {size, e.ints("_at1d_n", {0}, false)}, "_batch")};
    final_dims.insert(final_dims.end(), dims.begin(), dims.end());
    final_dims.push_back(e.ints("_r", {r}, false));
    out.push_back(make_proto_node("Concat", final_dims, base + "_out_shape", base + "_out_shape"));
    set_int_attr(out.back(), "axis", 0);
    out.push_back(
        make_proto_node("Reshape", {points, base + "_out_shape"}, n.output(0), n.name().empty() ? base : n.name()));
    return out;
  } else if (op == "SimplifiedLayerNormalization") {
    return {n};  // ONNX Runtime's, in the default domain: decompose_missing_ops writes it
  } else if (!onnx::OpSchemaRegistry::Schema(op, static_cast<int>(kMaxOpset), "")) {
    refuse("op " + op + " is newer than opset " + std::to_string(kMaxOpset) + " and has no form there");
  }
  return {n};
}

// LpNormalization, LpPool and GlobalLpPool (any opset) in ops graphrun has kernels and gradients for: X over its
// ReduceL1/ReduceL2 along the axis (1 where that is 0: a zero vector stays 0, as ONNX's reference); (AveragePool
// of |X|^p counting pads, times the window's size)^(1/p); (GlobalAveragePool of |X|^p times the spatial size)^(1/p).
// Valid at every opset from 7 to 17 (Reduce*'s axes attribute, Pow's exponent of X's type, AveragePool's
// count_include_pad).
std::vector<onnx::NodeProto> decompose_lp(const onnx::GraphProto& g, const onnx::NodeProto& n, int index, int64_t opset,
                                          const std::string& what) {
  auto refuse = [&](const std::string& why) { GR_FAIL(what << ": " << proto_node_desc(n, index) << ": " << why); };
  const NodeView nv{n};
  if (n.input_size() < 1 || n.input(0).empty() || n.output_size() < 1) refuse("needs an input and an output");
  const std::string x = n.input(0), y = n.output(0), op = n.op_type();
  const std::string base = y + "/lp";
  const std::string name = n.name().empty() ? base : n.name();
  const int64_t p = nv.attr_int("p", 2);
  if (p < 1 || (op == "LpNormalization" && p > 2) || p > 64)
    refuse("p " + std::to_string(p) + " is not supported (" + (op == "LpNormalization" ? "1 or 2" : "1 to 64") + ")");
  int32_t type = stated_elem_type(g, x);
  if (type == 0) type = onnx::TensorProto::FLOAT;
  std::vector<onnx::NodeProto> out;
  Emitter e{out, base};
  auto typed = [&](const std::string& suffix, float v) {  // a scalar of X's element type
    out.push_back(floats_constant(base + suffix + "_f", {}, {v}));
    e.node("Cast", {base + suffix + "_f"}, suffix);
    set_int_attr(e.last(), "to", type);
    return base + suffix;
  };
  auto reduce = [&](const char* reduction, const std::string& v, const std::vector<int64_t>& axes, const std::string& o,
                    const std::string& node_name) {
    out.push_back(make_proto_node(reduction, {v}, o, node_name));
    set_ints_attr(out.back(), "axes", axes);
    set_int_attr(out.back(), "keepdims", 1);
    return o;
  };
  // |X|^p, or what sums to it under p = 1 or 2's own reductions.
  auto powered = [&] {
    if (p == 1) return e.node("Abs", {x}, "_abs");
    if (p == 2) return e.node("Mul", {x, x}, "_sq");
    return e.node("Pow", {e.node("Abs", {x}, "_abs"), typed("_p", static_cast<float>(p))}, "_pow");
  };
  auto root = [&](const std::string& sum) {  // sum^(1/p) written as the output
    if (p == 1)
      out.push_back(make_proto_node("Identity", {sum}, y, name));
    else if (p == 2)
      out.push_back(make_proto_node("Sqrt", {sum}, y, name));
    else
      out.push_back(make_proto_node("Pow", {sum, typed("_inv_p", 1.0f / static_cast<float>(p))}, y, name));
  };
  const int64_t rank = stated_rank(g, x);
  if (op == "LpNormalization") {
    int64_t axis = nv.attr_int("axis", -1);
    if (axis < 0 && rank > 0) axis += rank;
    const std::string norm = reduce(p == 1 ? "ReduceL1" : "ReduceL2", x, {axis}, base + "_norm", base + "_norm");
    // A zero vector stays 0 (ONNX's reference), divided by 1 (from opset 11, where Equal takes floats).
    std::string divisor = norm;
    if (opset >= 11) {
      const std::string zero = e.node("Equal", {norm, typed("_zero", 0.0f)}, "_is_zero");
      divisor = e.node("Where", {zero, typed("_one", 1.0f), norm}, "_safe_norm");
    }
    out.push_back(make_proto_node("Div", {x, divisor}, y, name));
  } else if (op == "GlobalLpPool") {
    // The sum over the spatial axes, whatever the rank: their mean times their count, Size(X) / Size(mean).
    const std::string mean = e.node("GlobalAveragePool", {powered()}, "_mean");
    e.node("Div", {e.node("Size", {x}, "_size"), e.node("Size", {mean}, "_planes")}, "_count");
    e.node("Cast", {base + "_count"}, "_count_f");
    set_int_attr(e.last(), "to", type);
    root(e.node("Mul", {mean, base + "_count_f"}, "_sum"));
  } else {  // LpPool
    const auto* kernel = nv.attr("kernel_shape");
    if (!kernel || kernel->ints_size() == 0) refuse("needs kernel_shape");
    int64_t window = 1;
    for (int64_t k : kernel->ints()) {
      if (k < 1 || k > (int64_t(1) << 20)) refuse("kernel_shape values must be between 1 and 2^20");
      window *= k;
      if (window > (int64_t(1) << 30)) refuse("a window of more than 2^30 values is not supported");
    }
    if (const auto* d = nv.attr("dilations"))
      for (int64_t v : d->ints())
        if (v != 1) refuse("dilations other than 1 are not supported");
    onnx::NodeProto pool = make_proto_node("AveragePool", {powered()}, base + "_mean", base + "_mean");
    for (const auto& a : n.attribute())
      if (a.name() == "kernel_shape" || a.name() == "strides" || a.name() == "pads" || a.name() == "auto_pad")
        *pool.add_attribute() = a;
    set_int_attr(pool, "count_include_pad", 1);
    out.push_back(pool);
    root(e.node("Mul", {base + "_mean", typed("_window", static_cast<float>(window))}, "_sum"));
  }
  return out;
}

// DFT's inverse of a one-sided spectrum (irfft: inverse and onesided both 1; numpy's irfft, torch.fft.irfft) as the
// full inverse DFT graphrun has, of the spectrum made whole by its Hermitian symmetry: of n points (dft_length, a
// constant, else 2 (m - 1) for m bins stated), bins 0 to n/2 as given (cut, or padded with 0s), bins n/2 + 1 to
// n - 1 the conjugates of bins (n + 1)/2 - 1 down to 1; the real part of the result, [..., n, ..., 1]. (The
// imaginary parts of bin 0 and of bin n/2 fall into the imaginary part, as numpy drops them.) Needs the input's
// rank stated.
std::vector<onnx::NodeProto> decompose_irfft(const onnx::GraphProto& g, const onnx::NodeProto& n, int index,
                                             const std::string& what) {
  auto refuse = [&](const std::string& why) {
    GR_FAIL(what << ": " << proto_node_desc(n, index) << ": the inverse of a one-sided spectrum " << why);
  };
  const NodeView nv{n};
  const std::string x = nv.input(0), y = nv.output(0);
  if (x.empty() || y.empty()) refuse("needs an input and an output");
  std::vector<int64_t> dims;
  if (!stated_shape(g, x, dims) || dims.size() < 2) refuse("needs the input's rank stated (at least 2)");
  const int64_t r = static_cast<int64_t>(dims.size());
  int64_t axis = nv.attr_int("axis", 1);
  if (axis < -r || axis > r - 2 || axis == -1) refuse("has axis " + std::to_string(axis) + " outside the signal");
  if (axis < 0) axis += r;
  if (dims.back() != 1 && dims.back() != 2) refuse("needs a last dimension of 1 or 2 (real or complex) stated");
  const int64_t bins = dims[static_cast<size_t>(axis)];
  int64_t len = -1;
  if (!nv.input(1).empty()) {
    std::vector<int64_t> v;
    if (!constant_ints(g, nv.input(1), v, what) || v.size() != 1) refuse("needs dft_length a constant");
    len = v[0];
  } else if (bins > 0) {
    len = 2 * (bins - 1);
  }
  if (len < 0 && nv.input(1).empty()) refuse("needs dft_length, or the number of bins stated");
  if (len < 1 || len > (int64_t(1) << 24)) refuse("has a length of " + std::to_string(len) + ", not 1 to 2^24");
  const int64_t half = len / 2 + 1, mirrored = len - half;
  const std::string base = y + "/irfft";
  std::vector<onnx::NodeProto> out;
  Emitter e{out, base};
  const std::string axes = e.ints("_axes", {axis});
  std::string spectrum = x;
  if (dims.back() == 1) {  // real bins: their imaginary parts 0
    spectrum = e.node("Concat", {x, e.node("Mul", {x, e.scalar("_zero", 0.0f, x)}, "_imag")}, "_complex");
    set_int_attr(e.last(), "axis", -1);
  }
  // Bins 0 to n/2: cut, or padded with 0s where fewer are given (the count known or not).
  if (bins < 0 || bins < half) {
    std::vector<int64_t> pads(static_cast<size_t>(2 * r), 0);
    pads[static_cast<size_t>(r + axis)] = bins < 0 ? half : half - bins;
    spectrum = e.node("Pad", {spectrum, e.ints("_pads", pads)}, "_padded");
  }
  if (bins != half) spectrum = e.node("Slice", {spectrum, e.ints("_from", {0}), e.ints("_to", {half}), axes}, "_half");
  std::string whole = spectrum;
  if (mirrored > 0) {
    const std::string back = e.node("Slice",
                                    {spectrum, e.ints("_mirror_from", {(len + 1) / 2 - 1}), e.ints("_mirror_to", {0}),
                                     axes, e.ints("_mirror_step", {-1})},
                                    "_mirror");
    out.push_back(floats_constant(base + "_conj_f", {2}, {1.0f, -1.0f}));
    const std::string conj = e.node("CastLike", {base + "_conj_f", x}, "_conj");
    whole = e.node("Concat", {spectrum, e.node("Mul", {back, conj}, "_conjugates")}, "_whole");
    set_int_attr(e.last(), "axis", axis);
  }
  const std::string full = e.node("DFT", {whole}, "_full");
  set_int_attr(e.last(), "axis", axis);
  set_int_attr(e.last(), "inverse", 1);
  out.push_back(make_proto_node("Slice", {full, e.ints("_re_from", {0}), e.ints("_re_to", {1}), e.ints("_last", {-1})},
                                y, n.name().empty() ? base : n.name()));
  return out;
}

// The types of `n`'s inputs that the graph does not state, from `infer_types` run on a model of the nodes
// rewritten before it (of `opset`): written into m's value_info, the dimension symbols inference made up ("unk__3")
// left unnamed. Returns whether any was learnt (not where inference of those nodes fails: the node's own error
// stands then).
bool learn_input_types(onnx::ModelProto& m, const google::protobuf::RepeatedPtrField<onnx::NodeProto>& before,
                       const onnx::NodeProto& n, int64_t opset, const InferTypes& infer_types) {
  auto* gp = m.mutable_graph();
  std::set<std::string> missing;
  for (const auto& in : n.input())
    if (!in.empty() && stated_rank(*gp, in) < 0) missing.insert(in);
  if (missing.empty()) return false;
  onnx::ModelProto prefix;
  prefix.set_ir_version(m.ir_version());
  for (const auto& op : m.opset_import()) {
    auto* o = prefix.add_opset_import();
    *o = op;
    if (normal_domain(op.domain()).empty()) o->set_version(opset);
  }
  auto* pg = prefix.mutable_graph();
  pg->set_name(gp->name());
  *pg->mutable_input() = gp->input();
  *pg->mutable_initializer() = gp->initializer();  // (large weights are placeholders by now: typed inputs)
  *pg->mutable_node() = before;
  std::set<std::string> produced;
  for (const auto& b : before)
    for (const auto& o : b.output()) produced.insert(o);
  for (const auto& v : gp->value_info())
    if (produced.count(v.name())) *pg->add_value_info() = v;
  try {
    infer_types(prefix);
  } catch (const std::exception&) {
    return false;
  }
  bool learnt = false;
  for (const auto& v : prefix.graph().value_info()) {
    if (!missing.count(v.name()) || !v.type().has_tensor_type() || !v.type().tensor_type().has_shape()) continue;
    auto* copy = gp->add_value_info();
    *copy = v;
    for (auto& d : *copy->mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim())
      if (d.has_dim_param() && d.dim_param().rfind("unk__", 0) == 0) d.clear_dim_param();
    missing.erase(v.name());
    learnt = true;
  }
  return learnt;
}

// ONNX Runtime's fused ops of its optimised transformer models (com.microsoft Gelu, FastGelu, BiasGelu, QuickGelu,
// BiasAdd, SkipLayerNormalization, SkipSimplifiedLayerNormalization, and SimplifiedLayerNormalization, which it
// registers in the default domain), written in standard ops as ONNX Runtime's contrib-op schemas define them:
// erf or tanh GELU of X (plus a bias), X * Sigmoid(alpha X) (alpha 1.702), X + bias + skip, LayerNormalization
// or RMS normalisation over the last axis of input + skip (+ bias), epsilon 1e-12 by default for the skip forms and
// 1e-5 for SimplifiedLayerNormalization, the optional outputs (mean, inverse standard deviation, the sum) where
// asked. Valid from opset 9 (Erf); LayerNormalization from 17, written in reductions below it.
bool is_contrib_op(const onnx::NodeProto& n) {
  static const std::set<std::string> ms = {"Gelu",
                                           "FastGelu",
                                           "BiasGelu",
                                           "QuickGelu",
                                           "BiasAdd",
                                           "SkipLayerNormalization",
                                           "SkipSimplifiedLayerNormalization",
                                           "Attention",
                                           "EmbedLayerNormalization"};
  const std::string d = normal_domain(n.domain());
  return (d == "com.microsoft" && ms.count(n.op_type())) ||
         (d.empty() && n.op_type() == "SimplifiedLayerNormalization");
}

std::vector<onnx::NodeProto> decompose_contrib(const onnx::GraphProto& g, const onnx::NodeProto& n, int index,
                                               int64_t opset, const std::string& what) {
  auto refuse = [&](const std::string& why) { GR_FAIL(what << ": " << proto_node_desc(n, index) << ": " << why); };
  const NodeView nv{n};
  const std::string op = n.op_type(), x = nv.input(0), y = nv.output(0);
  if (x.empty() || y.empty()) refuse("needs an input and an output");
  if (opset < 9) refuse("ONNX Runtime's " + op + " is read from opset 9 on (Erf)");
  if (opset < 11 && (op == "Attention" || op == "EmbedLayerNormalization"))
    refuse("ONNX Runtime's " + op + " is read from opset 11 on (Range)");
  const std::string base = y + "/ort";
  const std::string name = n.name().empty() ? base : n.name();
  std::vector<onnx::NodeProto> out;
  Emitter e{out, base};
  // A scalar of the computation's float type (X's; the word embedding's for EmbedLayerNormalization, whose X is ids):
  // CastLike from opset 15, before it a Cast to the stated type (float where none is).
  const std::string float_like = op == "EmbedLayerNormalization" ? nv.input(2) : x;
  int32_t type = stated_elem_type(g, float_like);
  if (type == 0) type = onnx::TensorProto::FLOAT;
  auto scalar = [&](const std::string& suffix, float v) {
    if (opset >= 15) return e.scalar(suffix, v, float_like);
    out.push_back(floats_constant(base + suffix + "_f", {}, {v}));
    e.node("Cast", {base + suffix + "_f"}, suffix);
    set_int_attr(e.last(), "to", type);
    return base + suffix;
  };
  // A 0 of the integer type stated for `v` (int32 where none is: ONNX Runtime's masks and ids are int32).
  auto int_zero_like = [&](const std::string& v) {
    const int32_t t = stated_elem_type(g, v);
    e.node("Cast", {e.ints("_zero_of_" + std::to_string(out.size()), {0}, true)},
           "_zero_like_" + std::to_string(out.size()));
    set_int_attr(e.last(), "to", t ? t : onnx::TensorProto::INT32);
    return e.last().output(0);
  };
  // Unsqueeze at `axes`: an input from opset 13, an attribute before (the constant made before the node).
  auto unsqueeze = [&](const std::string& v, const std::vector<int64_t>& axes, const std::string& tag) {
    if (opset >= 13) return e.node("Unsqueeze", {v, e.ints(tag + "_axes", axes)}, tag);
    const std::string u = e.node("Unsqueeze", {v}, tag);
    set_ints_attr(e.last(), "axes", axes);
    return u;
  };
  auto need = [&](int i, const char* what_input) {
    if (nv.input(i).empty()) refuse(std::string("needs ") + what_input);
    return nv.input(i);
  };
  auto add = [&](const std::string& a, const std::string& b, const std::string& tag) {
    return b.empty() ? a : e.node("Add", {a, b}, tag);
  };
  // 0.5 v (1 + erf(v / sqrt 2)), or with tanh 0.5 v (1 + tanh(sqrt(2 / pi) (v + 0.044715 v^3))), written to y.
  auto gelu = [&](const std::string& v, bool tanh_form) {
    std::string inner;
    if (tanh_form) {
      const std::string cube = e.node("Mul", {e.node("Mul", {v, v}, "_sq"), v}, "_cube");
      const std::string poly = e.node("Add", {v, e.node("Mul", {cube, scalar("_c", 0.044715f)}, "_c_cube")}, "_poly");
      inner = e.node("Tanh", {e.node("Mul", {poly, scalar("_k", 0.7978845608028654f)}, "_arg")}, "_tanh");
    } else {
      inner = e.node("Erf", {e.node("Mul", {v, scalar("_rsqrt2", 0.70710678118654752f)}, "_scaled")}, "_erf");
    }
    const std::string half = e.node("Mul", {v, scalar("_half", 0.5f)}, "_half_v");
    out.push_back(make_proto_node("Mul", {half, e.node("Add", {inner, scalar("_one", 1.0f)}, "_one_plus")}, y, name));
  };
  const float eps_attr = nv.attr("epsilon") ? nv.attr("epsilon")->f() : -1.0f;
  // Normalisation of v over `axes` (RMS, or mean and variance), times gamma (plus beta), written to `to`; the mean
  // and inverse standard deviation to those outputs where named.
  auto normalise = [&](const std::string& v, bool rms, const std::string& gamma, const std::string& beta, float eps,
                       const std::string& to, const std::string& mean_out, const std::string& inv_std_out,
                       std::vector<int64_t> axes) {
    const std::string eps_v = scalar("_eps", eps);
    std::string centred = v;
    if (!rms) {
      if (opset >= 17 && axes == std::vector<int64_t>{-1}) {
        std::vector<std::string> outs{to, mean_out, inv_std_out};
        while (!outs.empty() && outs.back().empty()) outs.pop_back();
        onnx::NodeProto ln = make_proto_node("LayerNormalization", {v, gamma}, to, to == y ? name : base + "_ln");
        if (!beta.empty()) ln.add_input(beta);
        for (size_t i = 1; i < outs.size(); ++i) ln.add_output(outs[i]);
        set_int_attr(ln, "axis", -1);
        auto* a = ln.add_attribute();
        a->set_name("epsilon");
        a->set_type(onnx::AttributeProto::FLOAT);
        a->set_f(eps);
        out.push_back(ln);
        return;
      }
      const std::string mean = e.node("ReduceMean", {v}, "_mean");
      set_ints_attr(e.last(), "axes", axes);
      if (!mean_out.empty()) out.push_back(make_proto_node("Identity", {mean}, mean_out, base + "_mean_out"));
      centred = e.node("Sub", {v, mean}, "_centred");
    }
    const std::string var = e.node("ReduceMean", {e.node("Mul", {centred, centred}, "_sq_dev")}, "_var");
    set_ints_attr(e.last(), "axes", axes);
    const std::string inv_std =
        e.node("Reciprocal", {e.node("Sqrt", {e.node("Add", {var, eps_v}, "_var_eps")}, "_std")}, "_inv_std");
    if (!inv_std_out.empty()) out.push_back(make_proto_node("Identity", {inv_std}, inv_std_out, base + "_inv_std_out"));
    const std::string scaled = e.node("Mul", {e.node("Mul", {centred, inv_std}, "_normed"), gamma}, "_scaled_norm");
    out.push_back(
        make_proto_node(beta.empty() ? "Identity" : "Add",
                        beta.empty() ? std::vector<std::string>{scaled} : std::vector<std::string>{scaled, beta}, to,
                        to == y ? name : base + "_normalised"));
  };
  if (op == "Gelu") {
    gelu(x, false);
  } else if (op == "BiasGelu") {
    gelu(add(x, need(1, "a bias"), "_biased"), false);
  } else if (op == "FastGelu") {
    gelu(add(x, nv.input(1), "_biased"), true);
  } else if (op == "QuickGelu") {
    const float alpha = nv.attr("alpha") ? nv.attr("alpha")->f() : 1.702f;
    const std::string gate = e.node("Sigmoid", {e.node("Mul", {x, scalar("_alpha", alpha)}, "_scaled")}, "_gate");
    out.push_back(make_proto_node("Mul", {x, gate}, y, name));
  } else if (op == "BiasAdd") {
    out.push_back(make_proto_node("Add", {add(x, need(1, "a bias"), "_biased"), need(2, "a skip")}, y, name));
  } else if (op == "SimplifiedLayerNormalization") {
    int64_t axis = nv.attr_int("axis", -1);
    const int64_t r = stated_rank(g, x);
    if (axis >= 0) {
      if (r < 0) refuse("a non-negative axis needs the input's rank stated");
      axis -= r;
    }
    if (axis < -(r >= 0 ? r : kMaxRank))
      refuse("axis " + std::to_string(nv.attr_int("axis", -1)) + " is out of range for " +
             (r >= 0 ? "rank " + std::to_string(r) : "any rank"));
    std::vector<int64_t> axes;
    for (int64_t a = axis; a < 0; ++a) axes.push_back(a);
    if (axes.empty()) refuse("axis " + std::to_string(nv.attr_int("axis", -1)) + " leaves no axis to normalise");
    normalise(x, true, need(1, "a scale"), "", eps_attr >= 0 ? eps_attr : 1e-5f, y, "", nv.output(1), axes);
  } else if (op == "EmbedLayerNormalization") {
    // BERT's embeddings: word, position (position_ids, else 0 to S - 1) and segment embeddings added, then
    // LayerNormalization; mask_index the count of each sample's non-zero mask values (int32); embedding_sum the sum.
    const std::string ids = x, segments = nv.input(1), words = need(2, "word_embedding"),
                      positions_table = need(3, "position_embedding"), segment_table = nv.input(4),
                      gamma = need(5, "gamma"), beta = need(6, "beta"), mask = nv.input(7), position_ids = nv.input(8);
    if (segments.empty() != segment_table.empty()) refuse("segment_ids and segment_embedding go together");
    std::string pos = position_ids;
    if (pos.empty()) {
      const std::string len =
          e.node("Gather", {e.node("Shape", {ids}, "_ids_shape"), e.ints("_at1", {1}, true)}, "_len");
      pos = unsqueeze(e.node("Range", {e.ints("_zero", {0}, true), len, e.ints("_one", {1}, true)}, "_positions"), {0},
                      "_position_ids");
    }
    std::string sum =
        e.node("Add", {e.node("Gather", {words, ids}, "_word"), e.node("Gather", {positions_table, pos}, "_pos")},
               "_word_pos");
    if (!segments.empty())
      sum = e.node("Add", {sum, e.node("Gather", {segment_table, segments}, "_segment")}, "_embedded");
    if (!nv.output(2).empty()) out.push_back(make_proto_node("Identity", {sum}, nv.output(2), base + "_sum_out"));
    if (!nv.output(1).empty()) {
      if (mask.empty()) refuse("its mask_index output needs the mask input");
      const std::string ones = e.node(
          "Cast", {e.node("Not", {e.node("Equal", {mask, int_zero_like(mask)}, "_masked")}, "_kept")}, "_kept_i");
      set_int_attr(e.last(), "to", onnx::TensorProto::INT32);
      onnx::NodeProto count = make_proto_node("ReduceSum", {ones}, nv.output(1), base + "_mask_index");
      if (opset >= 13)
        count.add_input(e.ints("_axis1", {1}));
      else
        set_ints_attr(count, "axes", {1});
      set_int_attr(count, "keepdims", 0);
      out.push_back(count);
    }
    normalise(sum, false, gamma, beta, eps_attr >= 0 ? eps_attr : 1e-12f, y, "", "", {-1});
  } else if (op == "Attention") {
    // ONNX Runtime's self-attention of BERT and GPT-2 exports: Q, K, V = input x weights (+ bias), split by
    // qkv_hidden_sizes (else three equal parts) into num_heads heads; a past [2, B, N, P, D] prepended to K and V
    // (present the result, stacked); scores = Q K^T x scale (1/sqrt(head size)) + attention_bias, plus
    // mask_filter_value (-10000) where the mask hides a key (a raw [B, T] or [B, S, T] mask of 0s, key counts [B]
    // of right padding, or ends and starts [2B] of left padding) and, unidirectional, where a key follows the query;
    // Softmax; times V; heads joined.
    if (nv.attr_int("do_rotary", 0) != 0) refuse("do_rotary is not supported");
    if (nv.attr_int("past_present_share_buffer", 0) != 0) refuse("past_present_share_buffer is not supported");
    const int64_t heads = nv.attr_int("num_heads", 0);
    if (heads < 1) refuse("needs num_heads, at least 1");
    const std::string weights = need(1, "weights"), bias = nv.input(2), mask = nv.input(3), past = nv.input(4),
                      attention_bias = nv.input(5);
    std::vector<int64_t> sizes;
    if (const auto* a = nv.attr("qkv_hidden_sizes")) sizes.assign(a->ints().begin(), a->ints().end());
    if (sizes.empty()) {
      const int64_t total = stated_dim(g, weights, 1);
      if (total < 3 || total % 3 != 0) refuse("needs the weights' second dimension stated, 3 x the hidden size");
      sizes = {total / 3, total / 3, total / 3};
    }
    if (sizes.size() != 3 || sizes[0] < 1 || sizes[1] != sizes[0] || sizes[2] < 1 || sizes[0] % heads != 0 ||
        sizes[2] % heads != 0)
      refuse("qkv_hidden_sizes must be three positive sizes, Q's and K's equal, each a multiple of num_heads");
    const int64_t head = sizes[0] / heads;
    std::string qkv = e.node("MatMul", {x, weights}, "_qkv");
    if (!bias.empty()) qkv = e.node("Add", {qkv, bias}, "_qkv_biased");
    onnx::NodeProto split = make_proto_node("Split", {qkv}, base + "_q", base + "_split");
    split.add_output(base + "_k");
    split.add_output(base + "_v");
    set_int_attr(split, "axis", -1);
    if (opset >= 13)
      split.add_input(e.ints("_sizes", sizes));
    else
      set_ints_attr(split, "split", sizes);
    out.push_back(split);
    auto split_heads = [&](const std::string& v, const std::string& tag) {  // [B, S, N*D] -> [B, N, S, D]
      const std::string r = e.node("Reshape", {v, e.ints(tag + "_shape", {0, 0, heads, -1})}, tag + "_split");
      e.node("Transpose", {r}, tag + "_heads");
      set_ints_attr(e.last(), "perm", {0, 2, 1, 3});
      return e.base + tag + "_heads";
    };
    const std::string q = split_heads(base + "_q", "_q");
    std::string k = split_heads(base + "_k", "_k"), v = split_heads(base + "_v", "_v");
    if (!past.empty()) {
      if (sizes[2] != sizes[0]) refuse("a past needs Q, K and V of one hidden size");
      const std::string zero = e.ints("_past0", {0}, true), one = e.ints("_past1", {1}, true);
      k = e.node("Concat", {e.node("Gather", {past, zero}, "_past_k"), k}, "_all_k");
      set_int_attr(e.last(), "axis", 2);
      v = e.node("Concat", {e.node("Gather", {past, one}, "_past_v"), v}, "_all_v");
      set_int_attr(e.last(), "axis", 2);
    }
    if (!nv.output(1).empty()) {
      const std::string pk = unsqueeze(k, {0}, "_present_k"), pv = unsqueeze(v, {0}, "_present_v");
      out.push_back(make_proto_node("Concat", {pk, pv}, nv.output(1), base + "_present"));
      set_int_attr(out.back(), "axis", 0);
    }
    const float scale_v = nv.attr("scale") && nv.attr("scale")->f() != 0
                              ? nv.attr("scale")->f()
                              : static_cast<float>(1 / std::sqrt(static_cast<double>(head)));
    const std::string kt = e.node("Transpose", {k}, "_kt");
    set_ints_attr(e.last(), "perm", {0, 1, 3, 2});
    std::string scores = e.node("Mul", {e.node("MatMul", {q, kt}, "_qk"), scalar("_scale", scale_v)}, "_scores");
    if (!attention_bias.empty()) scores = e.node("Add", {scores, attention_bias}, "_biased_scores");
    const float filter = nv.attr("mask_filter_value") ? nv.attr("mask_filter_value")->f() : -10000.0f;
    const std::string filter_v = scalar("_filter", filter), zero_f = scalar("_zero_f", 0.0f);
    const std::string izero = e.ints("_i0", {0}, true), ione = e.ints("_i1", {1}, true),
                      itwo = e.ints("_i2", {2}, true);
    const std::string queries = e.node("Gather", {e.node("Shape", {q}, "_q_shape4"), itwo}, "_queries");
    const std::string keys = e.node("Gather", {e.node("Shape", {k}, "_k_shape4"), itwo}, "_keys");
    const std::string cols = e.node("Range", {izero, keys, ione}, "_cols");  // [T]
    auto hide = [&](const std::string& hidden, const std::string& tag) {     // scores + filter where `hidden`
      scores = e.node("Add", {scores, e.node("Where", {hidden, filter_v, zero_f}, tag + "_bias")}, tag + "_masked");
    };
    if (!mask.empty()) {
      const int64_t mr = stated_rank(g, mask);
      const std::string mzero = int_zero_like(mask);
      if (mr == 2 || mr == 3) {  // raw: 0 hides; [B, T] -> [B, 1, 1, T], [B, S, T] -> [B, 1, S, T]
        const std::string hidden = e.node("Equal", {mask, mzero}, "_raw_hidden");
        hide(unsqueeze(hidden, mr == 2 ? std::vector<int64_t>{1, 2} : std::vector<int64_t>{1}, "_raw_4d"), "_raw");
      } else if (mr == 1) {  // [B] key counts (right padding), or [2B] ends then starts (left padding)
        std::vector<int64_t> xdims, mdims;
        stated_shape(g, x, xdims);
        stated_shape(g, mask, mdims);
        std::string xb, mb;
        for (const auto* list : {&g.input(), &g.value_info()})
          for (const auto& vinfo : *list) {
            if (vinfo.name() == x && vinfo.type().tensor_type().shape().dim_size() > 0)
              xb = vinfo.type().tensor_type().shape().dim(0).dim_param();
            if (vinfo.name() == mask && vinfo.type().tensor_type().shape().dim_size() > 0)
              mb = vinfo.type().tensor_type().shape().dim(0).dim_param();
          }
        const bool counts =
            (!xdims.empty() && !mdims.empty() && xdims[0] > 0 && mdims[0] == xdims[0]) || (!xb.empty() && xb == mb);
        const bool ends_starts = !xdims.empty() && !mdims.empty() && xdims[0] > 0 && mdims[0] == 2 * xdims[0];
        if (!counts && !ends_starts)
          refuse("a 1-D mask_index must be stated as [batch] or [2 x batch] against the input's batch");
        const std::string m64 = e.node("Cast", {mask}, "_mask64");
        set_int_attr(e.last(), "to", onnx::TensorProto::INT64);
        const std::string per_sample = e.ints("_per_sample", {-1, 1, 1, 1});
        if (counts) {
          hide(e.node("GreaterOrEqual", {cols, e.node("Reshape", {m64, per_sample}, "_ends")}, "_past_end"), "_len");
        } else {
          const std::string halves = e.node("Reshape", {m64, e.ints("_two_rows", {2, -1})}, "_halves");
          const std::string ends =
              e.node("Reshape", {e.node("Gather", {halves, izero}, "_end_row"), per_sample}, "_ends");
          const std::string starts =
              e.node("Reshape", {e.node("Gather", {halves, ione}, "_start_row"), per_sample}, "_starts");
          hide(e.node("Or",
                      {e.node("GreaterOrEqual", {cols, ends}, "_after"), e.node("Less", {cols, starts}, "_before")},
                      "_outside"),
               "_pad");
        }
      } else {
        refuse(
            "mask_index must be stated as raw [batch, keys] or [batch, queries, keys], or counts [batch] or [2 x batch]"
            " (the 4-D and [3 x batch + 2] forms are not supported)");
      }
    }
    if (nv.attr_int("unidirectional", 0) != 0) {  // query i (after the past's P keys) sees keys j <= i + P
      const std::string offset = e.node("Sub", {keys, queries}, "_offset");
      const std::string rows = unsqueeze(
          e.node("Add", {e.node("Range", {izero, queries, ione}, "_rows"), offset}, "_positions"), {1}, "_rows_col");
      hide(e.node("Greater", {cols, rows}, "_future"), "_causal");
    }
    const std::string probs = e.node("Softmax", {scores}, "_probs");
    set_int_attr(e.last(), "axis", -1);
    const std::string joined = e.node("Transpose", {e.node("MatMul", {probs, v}, "_heads_out")}, "_seq_out");
    set_ints_attr(e.last(), "perm", {0, 2, 1, 3});
    out.push_back(make_proto_node("Reshape", {joined, e.ints("_out_shape", {0, 0, -1})}, y, name));
  } else {  // SkipLayerNormalization, SkipSimplifiedLayerNormalization
    const bool rms = op == "SkipSimplifiedLayerNormalization";
    const std::string bias = nv.input(rms ? 3 : 4);
    const std::string sum = add(e.node("Add", {x, need(1, "a skip")}, "_skipped"), bias, "_biased");
    if (!nv.output(3).empty()) out.push_back(make_proto_node("Identity", {sum}, nv.output(3), base + "_sum_out"));
    if (rms && !nv.output(1).empty()) refuse("its mean output (1) is not defined for RMS normalisation");
    normalise(sum, rms, need(2, "gamma"), rms ? "" : nv.input(3), eps_attr >= 0 ? eps_attr : 1e-12f, y,
              rms ? "" : nv.output(1), nv.output(2), {-1});
  }
  return out;
}

}  // namespace

void decompose_missing_ops(onnx::ModelProto& m, const std::string& what, const InferTypes& infer_types) {
  auto* gp = m.mutable_graph();
  int64_t opset = kMaxOpset;
  for (const auto& op : m.opset_import())
    if (normal_domain(op.domain()).empty()) opset = op.version();
  auto is_lp = [](const onnx::NodeProto& n) {
    return normal_domain(n.domain()).empty() &&
           (n.op_type() == "LpNormalization" || n.op_type() == "LpPool" || n.op_type() == "GlobalLpPool");
  };
  auto is_irfft = [](const onnx::NodeProto& n) {
    const NodeView nv{n};
    return normal_domain(n.domain()).empty() && n.op_type() == "DFT" && nv.attr_int("inverse", 0) != 0 &&
           nv.attr_int("onesided", 0) != 0;
  };
  if (std::none_of(gp->node().begin(), gp->node().end(),
                   [&](const onnx::NodeProto& n) { return is_lp(n) || is_irfft(n) || is_contrib_op(n); }))
    return;
  google::protobuf::RepeatedPtrField<onnx::NodeProto> nodes;
  for (int i = 0; i < gp->node_size(); ++i) {
    const auto& n = gp->node(i);
    if (is_lp(n)) {
      for (auto& d : decompose_lp(*gp, n, i, opset, what)) *nodes.Add() = std::move(d);
    } else if (is_contrib_op(n) || is_irfft(n)) {
      auto decompose = [&] {
        return is_irfft(n) ? decompose_irfft(*gp, n, i, what) : decompose_contrib(*gp, n, i, opset, what);
      };
      std::vector<onnx::NodeProto> parts;
      try {
        parts = decompose();
      } catch (const std::exception&) {  // its inputs' shapes from the nodes before it, where the file states none
        if (!infer_types || !learn_input_types(m, nodes, n, opset, infer_types)) throw;
        parts = decompose();
      }
      for (auto& d : parts) *nodes.Add() = std::move(d);
    } else {
      *nodes.Add() = n;
    }
  }
  gp->mutable_node()->Swap(&nodes);
}

// Opsets 18 to 28 are brought to opset 17 (above); says so once per model on stderr.
void lower_new_opset(onnx::ModelProto& m, const std::string& what, const InferTypes& infer_types) {
  int64_t from = 0;
  for (const auto& op : m.opset_import())
    if (normal_domain(op.domain()).empty()) from = op.version();
  if (from <= kMaxOpset) return;
  auto* gp = m.mutable_graph();
  google::protobuf::RepeatedPtrField<onnx::NodeProto> nodes;
  for (int i = 0; i < gp->node_size(); ++i) {
    const onnx::NodeProto n = gp->node(i);  // (a copy: learning types may grow the graph's value_info)
    if (!normal_domain(n.domain()).empty() || n.output_size() == 0) {
      *nodes.Add() = n;
      continue;
    }
    std::vector<onnx::NodeProto> lowered;
    try {
      lowered = lower_node(*gp, n, i, from, what);
    } catch (const std::exception&) {
      // A rewriting that needs a shape the file does not state gets the types the nodes before it give, once.
      if (!infer_types || !learn_input_types(m, nodes, n, kMaxOpset, infer_types)) throw;
      lowered = lower_node(*gp, n, i, from, what);
    }
    for (auto& l : lowered) *nodes.Add() = std::move(l);
  }
  gp->mutable_node()->Swap(&nodes);
  for (auto& op : *m.mutable_opset_import())
    if (normal_domain(op.domain()).empty()) op.set_version(kMaxOpset);
  static std::set<std::string> said;
  if (said.insert(what).second)
    std::cerr << "graphrun: " << what << ": opset " << from << " read as opset " << kMaxOpset
              << " (nodes rewritten where opset" << (from == 18 ? " 18" : "s 18 to " + std::to_string(from))
              << " changed them)\n";
}

}  // namespace graphrun

#include "graph/passes/resolve_static_sequences.h"

#include <algorithm>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "graph/error.h"
#include "graph/onnx_tensor.h"
#include "graph/passes/static_values.h"
#include "graph/tensor_io.h"
#include "graph/validate.h"

namespace graphrun::passes {
namespace {

using namespace static_values;

// Whether a subgraph of `n` (at any depth) reads one of `names`.
template <typename Known>
bool subgraph_reads(const onnx::NodeProto& n, const Known& names) {
  for (const auto& a : n.attribute()) {
    std::vector<const onnx::GraphProto*> graphs;
    if (a.has_g()) graphs.push_back(&a.g());
    for (const auto& sub : a.graphs()) graphs.push_back(&sub);
    for (const auto* sg : graphs)
      for (const auto& sn : sg->node()) {
        for (const auto& in : sn.input())
          if (names.count(in)) return true;
        if (subgraph_reads(sn, names)) return true;
      }
  }
  return false;
}

// What an optional value holds, where that is known.
struct Held {
  bool none = false;
  bool sequence = false;
  std::string tensor;              // what it holds, not a sequence
  std::vector<std::string> elems;  // what it holds, a sequence
};

// "node 'NAME' (OP)", or for a node without a name (the pass walks copies too) the value it writes.
std::string node_desc(const onnx::NodeProto& n) {
  if (!n.name().empty() || n.output_size() == 0) return proto_node_desc(n, 0);
  return "the " + n.op_type() + " node writing '" + n.output(0) + "'";
}

}  // namespace

int resolve_static_sequences(onnx::ModelProto& m, const std::string& what, std::vector<CompositeSlot>* outputs,
                             const InferShapeData* infer, std::vector<std::string>* said) {
  auto& g = *m.mutable_graph();
  if (std::none_of(g.node().begin(), g.node().end(), sequence_or_optional_op)) return 0;
  int64_t opset = 0;
  for (const auto& op : m.opset_import())
    if (default_domain(op.domain())) opset = op.version();
  const ShapeData none;
  Evaluator ev(g, none);  // the constant positions and split sizes
  std::set<std::string> values, node_names;
  collect_names(g, values, node_names);
  // unused(), each base's suffixes resumed where its last name left them: the sets only grow here, so the first
  // free suffix never lies below (the same names, without probing from base__1 for every element of a long
  // sequence: quadratic, 20 s for 11525 elements).
  std::map<std::string, int64_t> next_value, next_node;
  auto fresh = [](const std::string& base, std::set<std::string>& taken, std::map<std::string, int64_t>& next) {
    int64_t& k = next[base];
    std::string name = k == 0 ? base : base + "__" + std::to_string(k);
    while (taken.count(name)) name = base + "__" + std::to_string(++k);
    taken.insert(name);
    return name;
  };
  auto value_name = [&](const std::string& base) { return fresh(base, values, next_value); };
  std::map<std::string, std::vector<std::string>> seqs;  // each sequence value: the tensors it holds, in order
  std::map<std::string, Held> opts;                      // each optional value: what it holds
  std::map<std::string, Tensor> facts;  // SequenceLength and OptionalHasElement outputs known, by value name
  google::protobuf::RepeatedPtrField<onnx::NodeProto> out;
  int removed = 0;
  bool complete = true;
  std::vector<std::string> notes;  // said where the pass completes

  auto add = [&](const std::string& op, const std::string& name, const std::vector<std::string>& inputs,
                 const std::vector<std::string>& outputs) -> onnx::NodeProto& {
    onnx::NodeProto& n = *out.Add();
    n.set_op_type(op);
    n.set_name(fresh(name.empty() ? op : name, node_names, next_node));
    for (const auto& in : inputs) n.add_input(in);
    for (const auto& o : outputs) n.add_output(o);
    return n;
  };
  auto int_attr = [](onnx::NodeProto& n, const char* key, int64_t v) {
    auto* a = n.add_attribute();
    a->set_name(key);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
  };
  auto ints_attr = [](onnx::NodeProto& n, const char* key, const std::vector<int64_t>& v) {
    auto* a = n.add_attribute();
    a->set_name(key);
    a->set_type(onnx::AttributeProto::INTS);
    for (int64_t x : v) a->add_ints(x);
  };
  auto constant_proto = [&](const onnx::TensorProto& t, const std::string& base) {
    const std::string v = value_name(base);
    auto* a = add("Constant", base, {}, {v}).add_attribute();
    a->set_name("value");
    a->set_type(onnx::AttributeProto::TENSOR);
    *a->mutable_t() = t;
    a->mutable_t()->clear_name();
    return v;
  };
  auto constant = [&](const Tensor& t, const std::string& base) {
    onnx::TensorProto p;
    tensor_to_proto(t, "", &p);
    return constant_proto(p, base);
  };
  // Squeeze or Unsqueeze `input` along `axis`: from opset 13 the axes are an input (`axes`, a Constant from
  // axes_constant that such nodes share), before an attribute.
  auto axes_constant = [&](int64_t axis, const std::string& base) {
    return opset >= 13 ? constant(Tensor::from_vector<int64_t>({1}, {axis}), base + "/axes") : std::string();
  };
  auto along_axis = [&](const std::string& op, const std::string& name, const std::string& input,
                        const std::string& output, const std::string& axes, int64_t axis) {
    if (opset >= 13) {
      add(op, name, {input, axes}, {output});
    } else {
      ints_attr(add(op, name, {input}, {output}), "axes", {axis});
    }
  };
  // A position input: absent gives `fallback`; a constant in [-size, size + extra) gives its index; else none.
  auto position = [&](const onnx::NodeProto& n, int i, int64_t size, int64_t extra,
                      int64_t fallback) -> std::optional<int64_t> {
    if (n.input_size() <= i || n.input(i).empty()) return fallback;
    std::optional<Value> p = ev.value_of(n.input(i));
    if (!p || p->data.size() != 1) return std::nullopt;
    const int64_t at = p->data[0] < 0 ? p->data[0] + size : p->data[0];
    if (at < 0 || at >= size + extra) return std::nullopt;
    return at;
  };
  // The static dimensions of a value of the main graph, from inferring the nodes that compute it (none where
  // control flow or sequences compute it, a dimension is not known, or no inference is given).
  std::map<std::string, int> producer;
  for (int i = 0; i < g.node_size(); ++i)
    for (const auto& o : g.node(i).output()) producer[o] = i;
  auto dims_of = [&](const std::string& v) -> std::optional<std::vector<int64_t>> {
    if (!infer) return std::nullopt;
    const std::set<int> a = ancestors(g, producer, v);
    if (std::any_of(a.begin(), a.end(), [&](int j) { return opaque(g.node(j)); })) return std::nullopt;
    bool defined = producer.count(v) != 0;
    for (const auto& in : g.input()) defined |= in.name() == v;
    for (const auto& t : g.initializer()) defined |= t.name() == v;
    if (!defined) return std::nullopt;  // a copy's value (SequenceMap's body), not in the graph yet
    onnx::ModelProto prefix = model_of(m, a);
    std::set<std::string> taken = values;
    const std::string shape = unused(v + "/shape", taken);
    auto* sn = prefix.mutable_graph()->add_node();
    sn->set_op_type("Shape");
    sn->add_input(v);
    sn->add_output(shape);
    fold_constant_integers(*prefix.mutable_graph());
    const ShapeData data = (*infer)(prefix);
    auto it = data.find(shape);
    if (it == data.end()) return std::nullopt;
    std::vector<int64_t> dims;
    for (const auto& d : it->second.dim()) {
      if (!d.has_dim_value()) return std::nullopt;
      dims.push_back(d.dim_value());
    }
    return dims;
  };
  // Whether a name is a sequence or optional value the pass follows.
  struct Followed {
    const std::map<std::string, std::vector<std::string>>& seqs;
    const std::map<std::string, Held>& opts;
    size_t count(const std::string& v) const { return seqs.count(v) + opts.count(v); }
  } followed{seqs, opts};

  std::deque<onnx::NodeProto> work(g.node().begin(), g.node().end());
  for (; !work.empty(); work.pop_front()) {
    const onnx::NodeProto& n = work.front();
    const std::string& op = n.op_type();
    auto seq = [&](int i) -> const std::vector<std::string>* {
      if (n.input_size() <= i) return nullptr;
      auto it = seqs.find(n.input(i));
      return it == seqs.end() ? nullptr : &it->second;
    };
    auto opt = [&](int i) -> const Held* {
      if (n.input_size() <= i) return nullptr;
      auto it = opts.find(n.input(i));
      return it == opts.end() ? nullptr : &it->second;
    };
    const std::string base = n.name().empty() ? op : n.name();
    if (op == "Identity" && default_domain(n.domain()) && n.input_size() == 1 && n.output_size() == 1 &&
        followed.count(n.input(0))) {
      if (seq(0)) seqs[n.output(0)] = *seq(0);
      if (opt(0)) opts[n.output(0)] = *opt(0);
      ++removed;
      continue;
    }
    if (!sequence_or_optional_op(n)) {
      for (const auto& in : n.input())
        if (followed.count(in)) complete = false;  // an op that reads a sequence or optional as such
      if (subgraph_reads(n, followed)) complete = false;
      *out.Add() = n;
      continue;
    }
    bool done = true;
    if (n.output_size() < 1 || n.output(0).empty()) {
      done = false;
    } else if (op == "SequenceEmpty") {
      seqs[n.output(0)] = {};
    } else if (op == "SequenceConstruct") {
      seqs[n.output(0)] = {n.input().begin(), n.input().end()};
    } else if (op == "SequenceInsert") {
      const auto* s = seq(0);
      const std::optional<int64_t> at =
          s && n.input_size() >= 2 ? position(n, 2, static_cast<int64_t>(s->size()), 1, static_cast<int64_t>(s->size()))
                                   : std::nullopt;
      if ((done = at.has_value())) {
        std::vector<std::string> l = *s;
        l.insert(l.begin() + *at, n.input(1));
        seqs[n.output(0)] = std::move(l);
      }
    } else if (op == "SequenceErase") {
      const auto* s = seq(0);
      const auto size = s ? static_cast<int64_t>(s->size()) : 0;
      const std::optional<int64_t> at = size > 0 ? position(n, 1, size, 0, size - 1) : std::nullopt;
      if ((done = at.has_value())) {
        std::vector<std::string> l = *s;
        l.erase(l.begin() + *at);
        seqs[n.output(0)] = std::move(l);
      }
    } else if (op == "SequenceAt") {
      const auto* s = seq(0);
      const std::optional<int64_t> at = s ? position(n, 1, static_cast<int64_t>(s->size()), 0, -1) : std::nullopt;
      if ((done = at && *at >= 0)) add("Identity", base, {(*s)[static_cast<size_t>(*at)]}, {n.output(0)});
    } else if (op == "SequenceLength") {
      if (const auto* s = seq(0)) {
        const Tensor length = Tensor::scalar<int64_t>(static_cast<int64_t>(s->size()));
        facts[n.output(0)] = length;
        add("Identity", base, {constant(length, base + "/length")}, {n.output(0)});
      } else {
        done = false;
      }
    } else if (op == "ConcatFromSequence") {
      const auto* s = seq(0);
      const auto* axis = attr(n, "axis");
      if ((done = s && !s->empty() && axis)) {
        const auto* new_axis = attr(n, "new_axis");
        std::vector<std::string> parts = *s;
        if (new_axis && new_axis->i() != 0) {
          const std::string axes = axes_constant(axis->i(), base);
          for (auto& p : parts) {
            const std::string u = value_name(p + "/unsqueezed");
            along_axis("Unsqueeze", base + "/unsqueeze", p, u, axes, axis->i());
            p = u;
          }
        }
        int_attr(add("Concat", base, parts, {n.output(0)}), "axis", axis->i());
      }
    } else if (op == "SplitToSequence") {
      // Split sizes from the split input where it is constant; without it (parts of 1, squeezed unless keepdims)
      // or with one size for every part, the count of parts follows from the input's dimension along the axis.
      const auto* axis_attr = attr(n, "axis");
      const int64_t axis = axis_attr ? axis_attr->i() : 0;
      const bool given = n.input_size() >= 2 && !n.input(1).empty();
      std::optional<Value> split;
      if (given) split = ev.value_of(n.input(1));
      std::vector<int64_t> sizes;
      bool squeeze = false;
      done = false;
      if (split && split->dims.size() == 1 && !split->data.empty()) {
        sizes = split->data;
        done = true;
      } else if (!given || (split && split->dims.empty() && split->data.size() == 1)) {
        if (const auto dims = dims_of(n.input(0))) {
          const auto rank = static_cast<int64_t>(dims->size());
          GR_CHECK(axis >= -rank && axis < rank, what << ": " << node_desc(n) << ": axis " << axis
                                                      << " is out of range for '" << n.input(0) << "' of rank "
                                                      << rank);
          const int64_t dim = (*dims)[static_cast<size_t>(axis < 0 ? axis + rank : axis)];
          const int64_t each = given ? split->data[0] : 1;
          GR_CHECK(each > 0, what << ": " << node_desc(n) << ": split " << each << " must be positive");
          const int64_t count = dim == 0 ? 0 : (dim + each - 1) / each;
          GR_CHECK(count <= kMaxSequenceLength, what << ": " << node_desc(n) << ": splitting '" << n.input(0)
                                                     << "' makes " << count << " tensors; a sequence holds at most "
                                                     << kMaxSequenceLength);
          for (int64_t at = 0; at < dim; at += each) sizes.push_back(std::min(each, dim - at));
          const auto* keepdims = attr(n, "keepdims");
          squeeze = !given && keepdims && keepdims->i() == 0;
          if (given && keepdims && keepdims->i() == 0)
            notes.push_back(node_desc(n) +
                            ": keepdims 0 is ignored where split is given (the ONNX spec): its parts "
                            "keep axis " +
                            std::to_string(axis) +
                            "; ONNX Runtime drops the axis for a scalar "
                            "split, as torch's export of torch.unbind in a script expects");
          done = true;
        }
      }
      if (!sizes.empty()) {
        std::vector<std::string> parts;
        for (size_t k = 0; k < sizes.size(); ++k) parts.push_back(value_name(n.output(0) + "/" + std::to_string(k)));
        std::vector<std::string> split_out = parts;
        if (squeeze)
          for (auto& p : split_out) p = value_name(p + "/unsqueezed");
        onnx::NodeProto& sp =
            opset >= 13
                ? add("Split", base,
                      {n.input(0), constant(Tensor::from_vector<int64_t>({static_cast<int64_t>(sizes.size())}, sizes),
                                            base + "/split")},
                      split_out)
                : add("Split", base, {n.input(0)}, split_out);
        int_attr(sp, "axis", axis);
        if (opset < 13) ints_attr(sp, "split", sizes);
        if (squeeze) {
          const std::string axes = axes_constant(axis, base);
          for (size_t k = 0; k < parts.size(); ++k)
            along_axis("Squeeze", base + "/squeeze", split_out[k], parts[k], axes, axis);
        }
        seqs[n.output(0)] = parts;
      } else if (done) {
        seqs[n.output(0)] = {};  // a dimension of 0: no parts
      }
    } else if (op == "SequenceMap") {
      // One copy of the body per element; the copies go through this pass in turn.
      const auto* body = attr(n, "body");
      const auto* s = seq(0);
      if ((done = s && body && body->has_g() && body->g().input_size() == n.input_size() &&
                  body->g().output_size() == n.output_size())) {
        const onnx::GraphProto& b = body->g();
        for (int k = 1; k < n.input_size(); ++k)
          if (const auto* other = seq(k))
            GR_CHECK(other->size() == s->size(), what << ": " << node_desc(n) << ": its sequences '" << n.input(0)
                                                      << "' and '" << n.input(k) << "' hold " << s->size() << " and "
                                                      << other->size()
                                                      << " tensors; SequenceMap needs them of one length");
        std::map<std::string, std::string> inits;
        for (const auto& t : b.initializer()) inits[t.name()] = constant_proto(t, base + "/" + t.name());
        google::protobuf::RepeatedPtrField<onnx::NodeProto> copies;
        std::vector<std::vector<std::string>> results(static_cast<size_t>(n.output_size()));
        for (size_t i = 0; i < s->size(); ++i) {
          std::vector<std::string> inputs;
          for (int k = 0; k < n.input_size(); ++k) inputs.push_back(seq(k) ? (*seq(k))[i] : n.input(k));
          const std::vector<std::string> outs =
              instantiate(b, inputs, inits, "/map" + std::to_string(i), values, node_names, copies);
          for (size_t j = 0; j < outs.size(); ++j) results[j].push_back(outs[j]);
        }
        for (int j = 0; j < n.output_size(); ++j)
          if (!n.output(j).empty()) seqs[n.output(j)] = results[static_cast<size_t>(j)];
        const onnx::NodeProto self = n;
        work.pop_front();
        for (int k = copies.size() - 1; k >= 0; --k) work.push_front(copies.Get(k));
        work.push_front(self);  // popped by the loop
        ++removed;
        continue;
      }
    } else if (op == "Optional") {
      Held h;
      if (n.input_size() == 0 || n.input(0).empty()) {
        h.none = true;
      } else if (const auto* s = seq(0)) {
        h.sequence = true;
        h.elems = *s;
      } else {
        h.tensor = n.input(0);
      }
      opts[n.output(0)] = h;
    } else if (op == "OptionalHasElement") {
      // Opset 18 takes a tensor or a sequence too, and no input (none).
      const bool absent = n.input_size() == 0 || n.input(0).empty();
      if ((done = absent || opt(0) || seq(0))) {
        const Tensor has = Tensor::scalar<bool>(!absent && !(opt(0) && opt(0)->none));
        facts[n.output(0)] = has;
        add("Identity", base, {constant(has, base + "/has_element")}, {n.output(0)});
      }
    } else if (op == "OptionalGetElement") {
      if (const auto* h = opt(0)) {
        GR_CHECK(!h->none, what << ": " << node_desc(n) << ": the optional '" << n.input(0)
                                << "' holds no value here, so it has no element to get");
        if (h->sequence)
          seqs[n.output(0)] = h->elems;
        else
          add("Identity", base, {h->tensor}, {n.output(0)});
      } else if (const auto* s = seq(0)) {
        seqs[n.output(0)] = *s;  // opset 18: a sequence is its own element
      } else {
        done = false;
      }
    } else {
      done = false;
    }
    if (!done) {
      complete = false;
      *out.Add() = n;
      continue;
    }
    ++removed;
  }

  // The graph's sequence and optional outputs become the tensor outputs of their elements.
  google::protobuf::RepeatedPtrField<onnx::ValueInfoProto> kept;
  std::vector<CompositeSlot> slots;
  for (int pos = 0; complete && pos < g.output_size(); ++pos) {
    const onnx::ValueInfoProto& o = g.output(pos);
    const bool is_seq = seqs.count(o.name()) != 0, is_opt = opts.count(o.name()) != 0;
    if (!is_seq && !is_opt) {
      *kept.Add() = o;
      continue;
    }
    if (!outputs) {
      complete = false;
      break;
    }
    CompositeSlot slot;
    slot.name = o.name();
    slot.position = pos;
    std::vector<std::string> elems;
    if (is_seq) {
      slot.type = "sequence";
      elems = seqs.at(o.name());
    } else {
      const Held& h = opts.at(o.name());
      const bool of_seq = h.none ? o.type().optional_type().elem_type().has_sequence_type() : h.sequence;
      slot.type = of_seq ? "optional(sequence)" : "optional";
      slot.none = h.none;
      if (!h.none) elems = h.sequence ? h.elems : std::vector<std::string>{h.tensor};
    }
    for (size_t k = 0; k < elems.size(); ++k) {
      const std::string part = value_name(o.name() + "[" + std::to_string(k) + "]");
      add("Identity", o.name() + "/element", {elems[k]}, {part});
      kept.Add()->set_name(part);  // its type as inference finds it
      slot.parts.push_back(part);
    }
    slots.push_back(std::move(slot));
  }

  if (!complete) {
    // Only the facts the rest of the model may be decided by: SequenceLength and OptionalHasElement of known values.
    int replaced = 0;
    for (auto& n : *g.mutable_node()) {
      if (n.output_size() != 1 || !facts.count(n.output(0)) || !sequence_or_optional_op(n)) continue;
      n = constant_node(facts.at(n.output(0)), n.name(), n.output(0));
      ++replaced;
    }
    return replaced;
  }
  g.mutable_node()->Swap(&out);
  if (said)
    for (const auto& note : notes) said->push_back(note);
  if (outputs) {
    g.mutable_output()->Swap(&kept);
    outputs->insert(outputs->end(), slots.begin(), slots.end());
  }
  auto* vi = g.mutable_value_info();
  for (int i = vi->size() - 1; i >= 0; --i)
    if (followed.count(vi->Get(i).name())) vi->DeleteSubrange(i, 1);
  return removed;
}

}  // namespace graphrun::passes

#include "graph/passes/resolve_static_sequences.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "graph/onnx_tensor.h"
#include "graph/passes/static_values.h"

namespace graphrun::passes {
namespace {

using namespace static_values;

bool sequence_op(const onnx::NodeProto& n) {
  const std::string& op = n.op_type();
  return default_domain(n.domain()) && (op.rfind("Sequence", 0) == 0 || op == "SplitToSequence" ||
                                        op == "ConcatFromSequence" || op.rfind("Optional", 0) == 0);
}

// Whether a subgraph of `n` (at any depth) reads one of `names`.
bool subgraph_reads(const onnx::NodeProto& n, const std::map<std::string, std::vector<std::string>>& names) {
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

}  // namespace

int resolve_static_sequences(onnx::ModelProto& m, const std::string& what) {
  (void)what;
  auto& g = *m.mutable_graph();
  if (std::none_of(g.node().begin(), g.node().end(), sequence_op)) return 0;
  int64_t opset = 0;
  for (const auto& op : m.opset_import())
    if (default_domain(op.domain())) opset = op.version();
  const ShapeData none;
  Evaluator ev(g, none);  // the constant positions and split sizes
  std::set<std::string> values, node_names;
  collect_names(g, values, node_names);
  std::map<std::string, std::vector<std::string>> seqs;  // each sequence value: the tensors it holds, in order
  google::protobuf::RepeatedPtrField<onnx::NodeProto> out;
  int removed = 0;

  auto add = [&](const std::string& op, const std::string& name, const std::vector<std::string>& inputs,
                 const std::vector<std::string>& outputs) -> onnx::NodeProto& {
    onnx::NodeProto& n = *out.Add();
    n.set_op_type(op);
    n.set_name(unused(name.empty() ? op : name, node_names));
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
  auto constant = [&](const Tensor& t, const std::string& base) {
    const std::string v = unused(base, values);
    auto* a = add("Constant", base, {}, {v}).add_attribute();
    a->set_name("value");
    a->set_type(onnx::AttributeProto::TENSOR);
    tensor_to_proto(t, "", a->mutable_t());
    return v;
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

  for (const auto& n : g.node()) {
    const std::string& op = n.op_type();
    auto seq = [&](int i) -> const std::vector<std::string>* {
      if (n.input_size() <= i) return nullptr;
      auto it = seqs.find(n.input(i));
      return it == seqs.end() ? nullptr : &it->second;
    };
    const std::string base = n.name().empty() ? op : n.name();
    if (op == "Identity" && default_domain(n.domain()) && seq(0)) {
      seqs[n.output(0)] = *seq(0);
      ++removed;
      continue;
    }
    if (!sequence_op(n)) {
      for (const auto& in : n.input())
        if (seqs.count(in)) return 0;  // an op that reads a sequence as such
      if (subgraph_reads(n, seqs)) return 0;
      *out.Add() = n;
      continue;
    }
    if (n.output_size() < 1 || n.output(0).empty()) return 0;
    if (op == "SequenceEmpty") {
      seqs[n.output(0)] = {};
    } else if (op == "SequenceConstruct") {
      seqs[n.output(0)] = {n.input().begin(), n.input().end()};
    } else if (op == "SequenceInsert") {
      const auto* s = seq(0);
      if (!s || n.input_size() < 2) return 0;
      const auto size = static_cast<int64_t>(s->size());
      const std::optional<int64_t> at = position(n, 2, size, 1, size);
      if (!at) return 0;
      std::vector<std::string> l = *s;
      l.insert(l.begin() + *at, n.input(1));
      seqs[n.output(0)] = std::move(l);
    } else if (op == "SequenceErase") {
      const auto* s = seq(0);
      if (!s || s->empty()) return 0;
      const auto size = static_cast<int64_t>(s->size());
      const std::optional<int64_t> at = position(n, 1, size, 0, size - 1);
      if (!at) return 0;
      std::vector<std::string> l = *s;
      l.erase(l.begin() + *at);
      seqs[n.output(0)] = std::move(l);
    } else if (op == "SequenceAt") {
      const auto* s = seq(0);
      if (!s) return 0;
      const std::optional<int64_t> at = position(n, 1, static_cast<int64_t>(s->size()), 0, -1);
      if (!at || *at < 0) return 0;
      add("Identity", base, {(*s)[static_cast<size_t>(*at)]}, {n.output(0)});
    } else if (op == "SequenceLength") {
      const auto* s = seq(0);
      if (!s) return 0;
      add("Identity", base, {constant(Tensor::scalar<int64_t>(static_cast<int64_t>(s->size())), base + "/length")},
          {n.output(0)});
    } else if (op == "ConcatFromSequence") {
      const auto* s = seq(0);
      const auto* axis = attr(n, "axis");
      if (!s || s->empty() || !axis) return 0;
      const auto* new_axis = attr(n, "new_axis");
      std::vector<std::string> parts = *s;
      if (new_axis && new_axis->i() != 0) {
        const std::string axes =
            opset >= 13 ? constant(Tensor::from_vector<int64_t>({1}, {axis->i()}), base + "/axes") : std::string();
        for (auto& p : parts) {
          const std::string u = unused(p + "/unsqueezed", values);
          if (opset >= 13) {
            add("Unsqueeze", base + "/unsqueeze", {p, axes}, {u});
          } else {
            auto* a = add("Unsqueeze", base + "/unsqueeze", {p}, {u}).add_attribute();
            a->set_name("axes");
            a->set_type(onnx::AttributeProto::INTS);
            a->add_ints(axis->i());
          }
          p = u;
        }
      }
      int_attr(add("Concat", base, parts, {n.output(0)}), "axis", axis->i());
    } else if (op == "SplitToSequence") {
      // Constant split sizes only: without them the count of parts depends on the input's shape.
      if (n.input_size() < 2 || n.input(1).empty()) return 0;
      std::optional<Value> split = ev.value_of(n.input(1));
      if (!split || split->dims.size() != 1 || split->data.empty()) return 0;
      const auto* axis = attr(n, "axis");
      std::vector<std::string> parts;
      for (size_t k = 0; k < split->data.size(); ++k)
        parts.push_back(unused(n.output(0) + "/" + std::to_string(k), values));
      onnx::NodeProto& sp =
          opset >= 13
              ? add("Split", base,
                    {n.input(0),
                     constant(Tensor::from_vector<int64_t>({static_cast<int64_t>(split->data.size())}, split->data),
                              base + "/split")},
                    parts)
              : add("Split", base, {n.input(0)}, parts);
      int_attr(sp, "axis", axis ? axis->i() : 0);
      if (opset < 13) {
        auto* a = sp.add_attribute();
        a->set_name("split");
        a->set_type(onnx::AttributeProto::INTS);
        for (int64_t v : split->data) a->add_ints(v);
      }
      seqs[n.output(0)] = parts;
    } else {
      return 0;  // SequenceMap, the optionals
    }
    ++removed;
  }
  for (const auto& o : g.output())
    if (seqs.count(o.name())) return 0;
  g.mutable_node()->Swap(&out);
  auto* vi = g.mutable_value_info();
  for (int i = vi->size() - 1; i >= 0; --i)
    if (seqs.count(vi->Get(i).name())) vi->DeleteSubrange(i, 1);
  return removed;
}

}  // namespace graphrun::passes

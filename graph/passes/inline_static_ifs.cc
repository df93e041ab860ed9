#include "graph/passes/inline_static_ifs.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "graph/error.h"
#include "graph/onnx_tensor.h"

namespace graphrun::passes {
namespace {

using namespace static_values;

// The nodes that replace If node `n` taking `branch`.
void inline_branch(const onnx::NodeProto& n, const onnx::GraphProto& branch, const std::string& desc,
                   std::set<std::string>& values, std::set<std::string>& node_names,
                   google::protobuf::RepeatedPtrField<onnx::NodeProto>& out) {
  GR_CHECK(branch.output_size() == n.output_size(),
           desc << ": its taken branch has " << branch.output_size() << " outputs but the If has " << n.output_size());
  GR_CHECK(branch.sparse_initializer_size() == 0, desc << ": a sparse initializer in a branch is not supported");
  std::map<std::string, std::string> rename;
  auto node_name = [&](const std::string& name) { return name.empty() ? name : unused(name, node_names); };
  for (const auto& t : branch.initializer()) {
    onnx::NodeProto c;
    c.set_op_type("Constant");
    c.set_name(node_name(n.name() + "/" + t.name()));
    const std::string v = unused(t.name(), values);
    rename[t.name()] = v;
    c.add_output(v);
    auto* a = c.add_attribute();
    a->set_name("value");
    a->set_type(onnx::AttributeProto::TENSOR);
    *a->mutable_t() = t;
    a->mutable_t()->clear_name();
    *out.Add() = std::move(c);
  }
  for (const auto& bn : branch.node())
    for (const auto& o : bn.output())
      if (!o.empty()) rename[o] = unused(o, values);
  auto renamed = [&](const std::string& v) {
    auto it = rename.find(v);
    return it == rename.end() ? v : it->second;
  };
  for (const auto& bn : branch.node()) {
    onnx::NodeProto c = bn;
    c.set_name(node_name(bn.name()));
    for (auto& in : *c.mutable_input()) in = renamed(in);
    for (auto& o : *c.mutable_output()) o = renamed(o);
    for (auto& a : *c.mutable_attribute()) {
      if (a.has_g()) rename_reads(*a.mutable_g(), rename);
      for (auto& sub : *a.mutable_graphs()) rename_reads(sub, rename);
    }
    *out.Add() = std::move(c);
  }
  for (int k = 0; k < n.output_size(); ++k) {
    if (n.output(k).empty()) continue;
    onnx::NodeProto id;
    id.set_op_type("Identity");
    id.set_name(node_name((n.name().empty() ? std::string("If") : n.name()) + "/output_" + std::to_string(k)));
    id.add_input(renamed(branch.output(k).name()));
    id.add_output(n.output(k));
    *out.Add() = std::move(id);
  }
}

}  // namespace

int inline_static_ifs(onnx::ModelProto& m, const std::string& what, const InferShapeData& infer) {
  int replaced = 0;
  for (;;) {
    auto& g = *m.mutable_graph();
    std::map<std::string, int> producer;
    for (int i = 0; i < g.node_size(); ++i)
      for (const auto& o : g.node(i).output()) producer[o] = i;
    // The Ifs whose conditions no control flow computes, and the nodes that compute them.
    std::vector<int> ready;
    std::set<int> needed;
    for (int i = 0; i < g.node_size(); ++i) {
      const auto& n = g.node(i);
      if (n.op_type() != "If" || !default_domain(n.domain()) || n.input_size() < 1 || n.input(0).empty()) continue;
      const std::set<int> a = ancestors(g, producer, n.input(0));
      if (std::any_of(a.begin(), a.end(), [&](int j) { return opaque(g.node(j)); })) continue;
      ready.push_back(i);
      needed.insert(a.begin(), a.end());
    }
    if (ready.empty()) return replaced;
    // A model of those nodes alone (in the file's order), inferred as the whole model would be.
    onnx::ModelProto prefix = model_of(m, needed);
    fold_constant_integers(*prefix.mutable_graph());
    const ShapeData data = infer(prefix);
    Evaluator ev(prefix.graph(), data);
    std::map<int, bool> taken;  // by If node index: the branch it takes (then: true)
    for (int i : ready) {
      std::optional<Value> c = ev.value_of(g.node(i).input(0));
      if (c && c->data.size() == 1) taken[i] = c->data[0] != 0;
    }
    if (taken.empty()) return replaced;
    std::set<std::string> values, node_names;
    collect_names(g, values, node_names);
    google::protobuf::RepeatedPtrField<onnx::NodeProto> nodes;
    for (int i = 0; i < g.node_size(); ++i) {
      auto t = taken.find(i);
      if (t == taken.end()) {
        *nodes.Add() = g.node(i);
        continue;
      }
      const auto& n = g.node(i);
      const onnx::GraphProto* branch = nullptr;
      for (const auto& a : n.attribute())
        if (a.name() == (t->second ? "then_branch" : "else_branch") && a.has_g()) branch = &a.g();
      const std::string desc = what + ": node '" + n.name() + "' (If)";
      GR_CHECK(branch, desc << " has no " << (t->second ? "then_branch" : "else_branch"));
      inline_branch(n, *branch, desc, values, node_names, nodes);
      ++replaced;
    }
    g.mutable_node()->Swap(&nodes);
  }
}

}  // namespace graphrun::passes

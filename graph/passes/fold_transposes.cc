// Pass fold_transposes: Transposes of Transposes composed, Transposes of Gemms done by the Gemm (fold_transposes.h).
#include "graph/passes/fold_transposes.h"

#include <optional>
#include <set>
#include <unordered_map>

#include "graph/passes/fusion.h"

namespace graphrun::passes {

namespace {

const PassInfo& kInfo = register_pass(
    "fold_transposes",
    "executor only: Transpose(Transpose(X)) -> one Transpose of X, or X; Transpose(Gemm(A, B)) -> Gemm(B, A) with "
    "the transposes swapped");

using Perm = std::vector<int64_t>;

bool is_plain(const Node& n, const char* op) { return n.domain.empty() && n.op_type == op && n.outputs.size() == 1; }

std::optional<size_t> rank_of(const Graph& g, const std::string& v) {
  const ValueInfo* i = g.info(v);
  if (!i || !i->has_shape) return std::nullopt;
  return i->shape.size();
}

// A Transpose's permutation (its input's axes reversed when the attribute is absent), if known.
std::optional<Perm> perm_of(const Graph& g, const Node& t) {
  if (t.inputs.size() != 1 || t.inputs[0].empty()) return std::nullopt;
  if (t.has_attr("perm")) return t.attr_ints("perm");
  const std::optional<size_t> r = rank_of(g, t.inputs[0]);
  if (!r) return std::nullopt;
  Perm p;
  for (size_t i = *r; i-- > 0;) p.push_back(static_cast<int64_t>(i));
  return p;
}

bool is_identity(const Perm& p) {
  for (size_t i = 0; i < p.size(); ++i)
    if (p[i] != static_cast<int64_t>(i)) return false;
  return true;
}

// Transpose(Transpose(X, p), q) reads X with p o q; an identity is dropped, its readers reading X. Transposes
// left unread are dropped.
Graph compose_transposes(const Graph& g) {
  const SoleReader keep(g, true);  // only for persisted(): the rewrite leaves outputs and state updates alone
  Graph r = g;
  std::unordered_map<std::string, int> producer;
  std::unordered_map<std::string, std::string> alias;
  std::set<int> drop;
  for (int i = 0; i < static_cast<int>(r.nodes.size()); ++i) {
    Node& n = r.nodes[i];
    for (auto& in : n.inputs) {
      const auto a = alias.find(in);
      if (a != alias.end()) in = a->second;
    }
    if (is_plain(n, "Transpose")) {
      const auto p = producer.find(n.inputs.empty() ? "" : n.inputs[0]);
      if (p != producer.end() && is_plain(r.nodes[p->second], "Transpose")) {
        const Node& inner = r.nodes[p->second];
        const std::optional<Perm> a = perm_of(r, inner), b = perm_of(r, n);
        if (a && b && a->size() == b->size()) {
          Perm c(b->size());
          for (size_t k = 0; k < c.size(); ++k) c[k] = (*a)[(*b)[k]];
          n.inputs[0] = inner.inputs[0];
          n.attrs["perm"] = Attribute::Ints(c);
          if (is_identity(c) && !keep.persisted(n.outputs[0])) {
            alias[n.outputs[0]] = n.inputs[0];
            r.values.erase(n.outputs[0]);
            drop.insert(i);
            continue;
          }
        }
      }
    }
    for (const auto& out : n.outputs)
      if (!out.empty()) producer[out] = i;
  }
  // Transposes nothing reads any more (the inner ones above), found in one sweep from the last node: by the
  // time it reaches a node, every reader of its output has been kept or dropped.
  std::set<std::string> read;
  for (int i = static_cast<int>(r.nodes.size()) - 1; i >= 0; --i) {
    if (drop.count(i)) continue;
    const Node& n = r.nodes[i];
    if (is_plain(n, "Transpose") && !read.count(n.outputs[0]) && !keep.persisted(n.outputs[0])) {
      r.values.erase(n.outputs[0]);
      drop.insert(i);
      continue;
    }
    for (const auto& in : n.inputs) read.insert(in);
  }
  return without_nodes(std::move(r), drop);
}

// Transpose(Gemm(A, B), [1, 0]) = Gemm(B, A) with the transposes swapped and flipped, when the Gemm has no C.
Graph swap_transposed_gemms(const Graph& g) {
  const SoleReader only_for(g, true);
  Graph r = g;
  std::set<int> drop;
  for (int i = 0; i < static_cast<int>(g.nodes.size()); ++i) {
    const Node& t = g.nodes[i];
    if (!is_plain(t, "Transpose")) continue;
    const std::optional<Perm> p = perm_of(g, t);
    const int q = g.producer(t.inputs[0]);
    if (!p || *p != Perm{1, 0} || q < 0 || !only_for(t.inputs[0], i)) continue;
    const Node& gemm = g.nodes[q];
    const bool has_c = gemm.inputs.size() > 2 && !gemm.inputs[2].empty() && gemm.attr_f("beta", 1.f) != 0.f;
    if (!is_plain(gemm, "Gemm") || gemm.inputs.size() < 2 || has_c) continue;
    Node swapped = gemm;
    swapped.inputs = {gemm.inputs[1], gemm.inputs[0]};
    swapped.attrs.erase("beta");
    swapped.attrs["transA"] = Attribute::Int(gemm.attr_i("transB", 0) ? 0 : 1);
    swapped.attrs["transB"] = Attribute::Int(gemm.attr_i("transA", 0) ? 0 : 1);
    swapped.outputs = t.outputs;
    r.values.erase(gemm.outputs[0]);
    r.nodes[i] = std::move(swapped);
    drop.insert(q);
  }
  return without_nodes(std::move(r), drop);
}

}  // namespace

Graph fold_transposes(const Graph& g) { return swap_transposed_gemms(compose_transposes(g)); }

Pass fold_transposes_pass() { return make_pass(kInfo, "", fold_transposes); }

}  // namespace graphrun::passes

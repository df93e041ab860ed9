// What the executor-only fusion passes (fuse_relu_epilogue, fuse_relu_bn_add) share: when a value may
// disappear inside a fused node.
#pragma once

#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "graph/ir.h"

namespace graphrun::passes {

// v is f32 or f64, the types the fused kernels take.
bool is_float_value(const Graph& g, const std::string& v);

// r without the nodes at the indices in `drop`.
Graph without_nodes(Graph r, const std::set<int>& drop);
// The same for the Relus and ReluGrads a fused node absorbed, declaring the ai.graphrun opset the fused nodes
// belong to when any were dropped.
Graph without_fused(Graph r, const std::set<int>& drop);

// Whether v is read by node `by` alone and is neither a graph output nor a state update's source, and is
// float (unless any_type): once its reader is fused with its producer nothing else needs it. Built once
// per pass over g.
class SoleReader {
 public:
  explicit SoleReader(const Graph& g, bool any_type = false);
  bool operator()(const std::string& v, int by) const;
  // The one node that reads v, or -1 when none or several do.
  int reader(const std::string& v) const;
  // v is a graph output or a state update's source: it must stay a value of its own.
  bool persisted(const std::string& v) const;

 private:
  const Graph& g_;
  bool any_type_;
  std::unordered_map<std::string, std::vector<int>> readers_;
  std::set<std::string> persisted_;
};

}  // namespace graphrun::passes

// Text and Graphviz views of a graph: what `graphrun show` prints.
#include "graph/printer.h"

#include <cstdio>
#include <map>
#include <sstream>

namespace graphrun {

namespace {

std::string typed(const Graph& g, const std::string& v) {
  const ValueInfo* vi = g.info(v);
  std::string r = "%" + v;
  if (vi && (vi->dtype != DType::Undefined || vi->has_shape)) r += ": " + vi->str();
  return r;
}

std::string op_name(const Node& n) {
  const bool default_domain = n.domain.empty() || n.domain == "ai.onnx";
  return default_domain ? n.op_type : n.domain + "." + n.op_type;
}

std::string human_bytes(size_t b) {
  char buf[32];
  if (b < 1024) std::snprintf(buf, sizeof buf, "%zu B", b);
  else if (b < 1024 * 1024) std::snprintf(buf, sizeof buf, "%.1f KiB", b / 1024.0);
  else if (b < size_t{1} << 30) std::snprintf(buf, sizeof buf, "%.1f MiB", b / (1024.0 * 1024));
  else std::snprintf(buf, sizeof buf, "%.2f GiB", b / (1024.0 * 1024 * 1024));
  return buf;
}

std::string opsets_str(const Graph& g) {
  std::string r;
  for (const auto& [d, v] : g.opsets) r += (r.empty() ? "" : ", ") + (d.empty() ? std::string("ai.onnx") : d) + " v" + std::to_string(v);
  return r;
}

// Graphviz double-quoted string contents.
std::string dot_escape(const std::string& s) {
  std::string r;
  for (char c : s) {
    if (c == '"' || c == '\\') r += '\\';
    if (c == '\n') { r += "\\n"; continue; }
    r += c;
  }
  return r;
}

}  // namespace

std::string print_text(const Graph& g) {
  std::ostringstream os;
  // One line each, whatever the names hold: a newline in a name shows as \n (printable), as in messages.
  auto line = [&](const std::string& l) { os << printable(l) << "\n"; };
  line("graph " + g.name + (g.opsets.empty() ? "" : " (" + opsets_str(g) + ")"));
  line("inputs:");
  for (const auto& v : g.inputs) line("  " + typed(g, v));
  if (!g.initializers.empty()) {
    line("parameters:");
    size_t bytes = 0;
    int64_t elems = 0;
    for (const auto& [name, t] : g.initializers) {
      line("  %" + name + ": " + dtype_name(t.dtype()) + shape_str(t.shape()));
      bytes += t.nbytes();
      elems += t.numel();
    }
    line("  (" + std::to_string(g.initializers.size()) + " parameter" + (g.initializers.size() == 1 ? "" : "s") + ", " +
         std::to_string(elems) + " values, " + human_bytes(bytes) + ")");
  }
  line("nodes:");
  for (const Node& n : g.nodes) {
    std::string l = "  ";
    bool first = true;
    for (const auto& o : n.outputs) {
      l += (first ? "" : ", ") + (o.empty() ? "_" : typed(g, o));
      first = false;
    }
    if (!n.outputs.empty()) l += " = ";
    l += op_name(n) + "(";
    for (size_t i = 0; i < n.inputs.size(); ++i) l += (i ? ", " : "") + (n.inputs[i].empty() ? "_" : "%" + n.inputs[i]);
    l += ")";
    if (!n.attrs.empty()) {
      l += " {";
      bool f = true;
      for (const auto& [k, a] : n.attrs) {
        l += (f ? "" : ", ") + k + "=" + a.str();
        f = false;
      }
      l += "}";
    }
    // The node's name, when it says more than its first output's name does.
    if (!n.name.empty() && (n.outputs.empty() || n.name != n.outputs[0])) l += "  # " + n.name;
    line(l);
  }
  line("outputs:");
  for (const auto& v : g.outputs) line("  " + typed(g, v));
  return os.str();
}

std::string print_dot(const Graph& g) {
  std::ostringstream os;
  os << "digraph \"" << dot_escape(g.name) << "\" {\n";
  os << "  rankdir=TB;\n";
  os << "  node [shape=box, style=\"rounded,filled\", fillcolor=\"#dde8f5\", fontname=\"Helvetica\", fontsize=11];\n";
  os << "  edge [fontname=\"Helvetica\", fontsize=9];\n";
  // Every value's source: a node, a graph input or a parameter; ids are generated so names need no quoting.
  std::map<std::string, std::string> source;
  int next = 0;
  for (const auto& v : g.inputs) {
    std::string id = "in" + std::to_string(next++);
    source[v] = id;
    const ValueInfo* vi = g.info(v);
    os << "  " << id << " [shape=ellipse, style=filled, fillcolor=\"#c8f0c8\", label=\"" << dot_escape(v)
       << (vi ? "\\n" + dot_escape(vi->str()) : "") << "\"];\n";
  }
  for (const auto& [name, t] : g.initializers) {
    std::string id = "p" + std::to_string(next++);
    source[name] = id;
    os << "  " << id << " [shape=note, style=filled, fillcolor=\"#eeeeee\", fontsize=9, label=\"" << dot_escape(name)
       << "\\n" << dtype_name(t.dtype()) << dot_escape(shape_str(t.shape())) << "\"];\n";
  }
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    std::string id = "n" + std::to_string(i);
    std::string label = op_name(n);
    if (!n.name.empty() && n.name != n.op_type) label += "\n" + n.name;
    os << "  " << id << " [label=\"" << dot_escape(label) << "\"];\n";
    for (const auto& o : n.outputs)
      if (!o.empty()) source[o] = id;
  }
  auto edge_label = [&](const std::string& v) {
    const ValueInfo* vi = g.info(v);
    return dot_escape(v + (vi && vi->dtype != DType::Undefined ? "\n" + vi->str() : ""));
  };
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    for (const auto& in : g.nodes[i].inputs) {
      if (in.empty()) continue;
      auto it = source.find(in);
      if (it == source.end()) {
        std::string id = "u" + std::to_string(next++);
        os << "  " << id << " [shape=plaintext, style=\"\", label=\"" << dot_escape(in) << " (undefined)\"];\n";
        it = source.emplace(in, id).first;
      }
      os << "  " << it->second << " -> n" << i << " [label=\"" << edge_label(in) << "\"];\n";
    }
  }
  for (const auto& v : g.outputs) {
    std::string id = "out" + std::to_string(next++);
    os << "  " << id << " [shape=ellipse, style=filled, fillcolor=\"#f5d5c8\", label=\"" << dot_escape(v) << "\"];\n";
    auto it = source.find(v);
    if (it != source.end()) os << "  " << it->second << " -> " << id << " [label=\"" << edge_label(v) << "\"];\n";
  }
  os << "}\n";
  return os.str();
}

}  // namespace graphrun

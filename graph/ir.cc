// Graph IR helpers: naming, producers/consumers, topological order, short printers of types and attributes.
#include "graph/ir.h"

#include <algorithm>
#include <cstdio>
#include <queue>
#include <set>
#include <sstream>

namespace graphrun {

std::string ValueInfo::str() const {
  std::string r = dtype_name(dtype);
  if (!has_shape) return r;
  r += "[";
  for (size_t i = 0; i < shape.size(); ++i) r += (i ? "," : "") + shape[i].str();
  return r + "]";
}

bool batch_norm_training(const Node& n, int64_t opset) {
  if (opset >= 14) return n.attr_i("training_mode", 0) != 0;
  for (size_t i = 1; i < n.outputs.size(); ++i)
    if (!n.outputs[i].empty()) return true;
  return false;
}

std::string printable(const std::string& s) {
  std::string r;
  for (unsigned char c : s) {
    if (c == '\n') r += "\\n";
    else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      r += buf;
    } else r += static_cast<char>(c);
  }
  return r;
}

bool ValueInfo::fully_known() const {
  if (!has_shape) return false;
  for (const Dim& d : shape)
    if (!d.known()) return false;
  return true;
}

Shape ValueInfo::concrete() const {
  GR_CHECK(fully_known(), "shape " << str() << " is not fully known");
  Shape s;
  for (const Dim& d : shape) s.push_back(d.size);
  return s;
}

std::string Attribute::str() const {
  std::ostringstream os;
  auto list = [&](const auto& v, bool quote) {
    os << "[";
    for (size_t i = 0; i < v.size(); ++i) {
      if (i) os << ",";
      if (quote) os << '"' << v[i] << '"'; else os << v[i];
    }
    os << "]";
  };
  switch (kind) {
    case Kind::Float: os << f; break;
    case Kind::Int: os << i; break;
    case Kind::String: os << '"' << s << '"'; break;
    case Kind::Tensor:
      if (t.numel() <= 8) os << t.str(8); else os << "<" << dtype_name(t.dtype()) << shape_str(t.shape()) << ">";
      break;
    case Kind::Floats: list(floats, false); break;
    case Kind::Ints: list(ints, false); break;
    case Kind::Strings: list(strings, true); break;
    default: os << "?";
  }
  return os.str();
}

const Attribute* Node::attr(const std::string& k) const {
  auto it = attrs.find(k);
  return it == attrs.end() ? nullptr : &it->second;
}

int64_t Node::attr_i(const std::string& k, int64_t def) const {
  const Attribute* a = attr(k);
  if (!a) return def;
  GR_CHECK(a->kind == Attribute::Kind::Int, describe() << ": attribute '" << k << "' must be an int");
  return a->i;
}

float Node::attr_f(const std::string& k, float def) const {
  const Attribute* a = attr(k);
  if (!a) return def;
  if (a->kind == Attribute::Kind::Int) return static_cast<float>(a->i);
  GR_CHECK(a->kind == Attribute::Kind::Float, describe() << ": attribute '" << k << "' must be a float");
  return a->f;
}

std::string Node::attr_s(const std::string& k, const std::string& def) const {
  const Attribute* a = attr(k);
  if (!a) return def;
  GR_CHECK(a->kind == Attribute::Kind::String, describe() << ": attribute '" << k << "' must be a string");
  return a->s;
}

std::vector<int64_t> Node::attr_ints(const std::string& k, std::vector<int64_t> def) const {
  const Attribute* a = attr(k);
  if (!a) return def;
  GR_CHECK(a->kind == Attribute::Kind::Ints, describe() << ": attribute '" << k << "' must be a list of ints");
  return a->ints;
}

std::vector<float> Node::attr_floats(const std::string& k, std::vector<float> def) const {
  const Attribute* a = attr(k);
  if (!a) return def;
  GR_CHECK(a->kind == Attribute::Kind::Floats, describe() << ": attribute '" << k << "' must be a list of floats");
  return a->floats;
}

std::string Node::describe() const {
  return "node '" + name + "' (" + (domain.empty() || domain == "ai.onnx" ? "" : domain + ".") + op_type + ")";
}

std::string Node::op_key() const {
  if (domain.empty() || domain == "ai.onnx") return op_type;
  return domain + "::" + op_type;
}

int64_t Graph::opset(const std::string& domain) const {
  auto it = opsets.find(domain);
  if (it == opsets.end() && domain.empty()) it = opsets.find("ai.onnx");
  return it == opsets.end() ? 0 : it->second;
}

const ValueInfo* Graph::info(const std::string& value) const {
  auto it = values.find(value);
  return it == values.end() ? nullptr : &it->second;
}

bool Graph::is_input(const std::string& v) const {
  return std::find(inputs.begin(), inputs.end(), v) != inputs.end();
}

bool Graph::is_output(const std::string& v) const {
  return std::find(outputs.begin(), outputs.end(), v) != outputs.end();
}

std::string Graph::unique_name(const std::string& base) {
  if (name_counter_.empty()) {
    // Seed with every name in use so fresh names never collide.
    for (const auto& [k, _] : values) name_counter_[k] = 0;
    for (const auto& [k, _] : initializers) name_counter_[k] = 0;
    for (const auto& s : inputs) name_counter_[s] = 0;
    for (const auto& n : nodes) {
      name_counter_[n.name] = 0;
      for (const auto& o : n.outputs) name_counter_[o] = 0;
    }
  }
  if (!name_counter_.count(base)) {
    name_counter_[base] = 0;
    return base;
  }
  for (;;) {
    std::string cand = base + "_" + std::to_string(++name_counter_[base]);
    if (!name_counter_.count(cand)) {
      name_counter_[cand] = 0;
      return cand;
    }
  }
}

Node& Graph::add_node(Node n) {
  if (!name_counter_.empty()) {
    name_counter_.emplace(n.name, 0);
    for (const auto& o : n.outputs) name_counter_.emplace(o, 0);
  }
  nodes.push_back(std::move(n));
  return nodes.back();
}

int Graph::producer(const std::string& value) const {
  for (size_t i = 0; i < nodes.size(); ++i)
    for (const auto& o : nodes[i].outputs)
      if (o == value) return static_cast<int>(i);
  return -1;
}

std::unordered_map<std::string, int> Graph::producers() const {
  std::unordered_map<std::string, int> r;
  for (size_t i = 0; i < nodes.size(); ++i)
    for (const auto& o : nodes[i].outputs)
      if (!o.empty()) r[o] = static_cast<int>(i);
  return r;
}

std::unordered_map<std::string, std::vector<int>> Graph::consumers() const {
  std::unordered_map<std::string, std::vector<int>> r;
  for (size_t i = 0; i < nodes.size(); ++i)
    for (const auto& in : nodes[i].inputs)
      if (!in.empty()) r[in].push_back(static_cast<int>(i));
  return r;
}

TopoOrder topological_order(size_t n, const std::function<std::vector<std::string>(size_t)>& inputs,
                            const std::function<std::vector<std::string>(size_t)>& outputs,
                            const std::set<std::string>& available) {
  TopoOrder r;
  std::unordered_map<std::string, int> prod;
  for (size_t i = 0; i < n; ++i)
    for (const auto& o : outputs(i))
      if (!o.empty()) prod[o] = static_cast<int>(i);
  std::vector<int> indeg(n, 0);
  std::vector<std::vector<int>> users(n);
  r.already_sorted = true;
  for (size_t i = 0; i < n; ++i) {
    std::set<int> deps;
    for (const auto& in : inputs(i)) {
      if (in.empty() || available.count(in)) continue;
      auto it = prod.find(in);
      if (it == prod.end()) {
        r.undefined_node = static_cast<int>(i);
        r.undefined_input = in;
        r.already_sorted = false;
        return r;
      }
      deps.insert(it->second);
      r.already_sorted &= it->second < static_cast<int>(i);
    }
    indeg[i] = static_cast<int>(deps.size());
    for (int d : deps) users[d].push_back(static_cast<int>(i));
  }
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (size_t i = 0; i < n; ++i)
    if (indeg[i] == 0) ready.push(static_cast<int>(i));
  while (!ready.empty()) {
    int i = ready.top();
    ready.pop();
    r.order.push_back(i);
    for (int u : users[i])
      if (--indeg[u] == 0) ready.push(u);
  }
  if (r.order.size() != n) {
    for (size_t i = 0; i < n && r.cycle_node < 0; ++i)
      if (indeg[i] > 0) r.cycle_node = static_cast<int>(i);
    r.already_sorted = false;
  }
  return r;
}

void Graph::topo_sort() {
  std::set<std::string> available(inputs.begin(), inputs.end());
  for (const auto& [k, _] : initializers) available.insert(k);
  const TopoOrder t = topological_order(
      nodes.size(), [&](size_t i) { return nodes[i].inputs; }, [&](size_t i) { return nodes[i].outputs; }, available);
  if (t.undefined_node >= 0)
    GR_FAIL(nodes[t.undefined_node].describe() << ": input '" << t.undefined_input
                                                << "' is not produced by any node, input or initializer");
  if (t.cycle_node >= 0) GR_FAIL("graph has a cycle through " << nodes[t.cycle_node].describe());
  if (t.already_sorted) return;
  std::vector<Node> sorted;
  sorted.reserve(nodes.size());
  for (int i : t.order) sorted.push_back(std::move(nodes[i]));
  nodes = std::move(sorted);
}

ValueInfo value_info_of(const Tensor& t) {
  ValueInfo v;
  v.dtype = t.dtype();
  v.has_shape = true;
  for (int64_t d : t.shape()) v.shape.push_back(Dim(d));
  return v;
}

}  // namespace graphrun

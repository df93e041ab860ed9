// Kernel tables (views of the op table) and the unsupported-op check every executor runs before planning.
#include "runtime/kernel.h"

#include <algorithm>
#include <map>
#include <set>

namespace graphrun::runtime {

static std::string key_of(const std::string& domain, const std::string& op) {
  if (domain.empty() || domain == "ai.onnx") return op;
  return domain + "::" + op;
}

KernelTable KernelTable::of_device(Device::Kind kind) {
  KernelTable t;
  for (const auto& [key, f] : op_table().ops())
    if (KernelFn fn = f.kernel(kind)) t.fns_[key] = fn;
  return t;
}

const KernelTable& cpu_kernels() {
  static const KernelTable table = KernelTable::of_device(Device::Kind::CPU);
  return table;
}

void KernelTable::add(const std::string& domain, const std::string& op, KernelFn fn) { fns_[key_of(domain, op)] = fn; }

const std::vector<int>& KernelTable::host_inputs(const std::string& op_key) const {
  static const std::vector<int> none;
  const OpFacts* f = op_table().find(op_key);
  return f ? f->host_inputs : none;
}

bool KernelTable::reads_on_host(const Node& n, int input) const {
  const OpFacts* f = op_table().find(n);
  return f && f->reads_on_host(input);
}

KernelFn KernelTable::find(const Node& n) const {
  auto it = fns_.find(n.op_key());
  return it == fns_.end() ? nullptr : it->second;
}

std::vector<std::string> KernelTable::ops() const {
  std::vector<std::string> r;
  for (const auto& [k, _] : fns_) r.push_back(k);
  std::sort(r.begin(), r.end());
  return r;
}

void check_supported(const Graph& g, const KernelTable& table, const std::string& where) {
  std::map<std::string, std::vector<std::string>> missing;
  for (const Node& n : g.nodes)
    if (!table.find(n)) missing[n.op_key()].push_back(n.name);
  if (missing.empty()) return;
  std::ostringstream os;
  os << where << ": unsupported op" << (missing.size() > 1 ? "s" : "") << ": ";
  bool first = true;
  for (const auto& [op, names] : missing) {
    os << (first ? "" : "; ") << op << " (node" << (names.size() > 1 ? "s " : " ");
    for (size_t i = 0; i < names.size() && i < 5; ++i) os << (i ? ", " : "") << "'" << names[i] << "'";
    if (names.size() > 5) os << ", ... " << names.size() - 5 << " more";
    os << ")";
    first = false;
  }
  throw Error(os.str());
}

const Tensor& KernelContext::input(int i) const {
  GR_CHECK(has_input(i), node_->describe() << ": input " << i << " is required but absent");
  return *inputs_[i];
}

}  // namespace graphrun::runtime

// The op table: collects the family files' registrations at static initialization and builds the
// table from them on first use, reporting every fact that two registrations both claim.
#include "graph/op_table.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace graphrun {

namespace {

// Function-local statics: registrars in other translation units may run before this file's globals.
std::vector<std::pair<std::string, OpRegistration>>& registrations() {
  static std::vector<std::pair<std::string, OpRegistration>> r;
  return r;
}
bool& table_built() {
  static bool built = false;
  return built;
}

const char* kind_name(Device::Kind k) { return k == Device::Kind::CPU ? "CPU" : "CUDA"; }

}  // namespace

bool add_op_registration(const char* family, OpRegistration fn) {
  if (table_built()) {
    // A registration after the table was read would be silently missing from it.
    std::fprintf(stderr, "graphrun: op family '%s' registered after the op table was built\n", family);
    std::abort();
  }
  registrations().emplace_back(family, fn);
  return true;
}

OpTable build_op_table(std::vector<std::pair<std::string, OpRegistration>> regs) {
  OpTable t;
  std::vector<std::string> errors;
  // Static initialization order differs between builds; the table must not.
  std::stable_sort(regs.begin(), regs.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  OpRegistrar r(t, errors);
  for (const auto& [family, fn] : regs) {
    r.family_ = family;
    fn(r);
  }
  if (!errors.empty()) {
    std::string msg = "the op table has conflicting registrations:";
    for (const std::string& e : errors) msg += "\n  " + e;
    throw Error(msg);
  }
  return t;
}

const OpTable& op_table() {
  static const OpTable table = [] {
    table_built() = true;
    return build_op_table(registrations());
  }();
  return table;
}

const OpFacts* OpTable::find(const std::string& op_key) const {
  auto it = ops_.find(op_key);
  return it == ops_.end() ? nullptr : &it->second;
}

bool OpFacts::reads_on_host(int input) const {
  return std::find(host_inputs.begin(), host_inputs.end(), input) != host_inputs.end();
}

const std::string& OpFacts::family_of(const std::string& fact) const {
  static const std::string none;
  auto it = families.find(fact);
  return it == families.end() ? none : it->second;
}

// ---- registration ----

OpEntry OpRegistrar::op(const std::string& domain, const std::string& op) {
  const std::string d = domain == "ai.onnx" ? "" : domain;
  const std::string key = d.empty() ? op : d + "::" + op;
  OpFacts& f = table_.ops_[key];
  if (f.key.empty()) {
    f.domain = d;
    f.op = op;
    f.key = key;
  }
  return OpEntry(*this, f);
}

void OpRegistrar::claim(OpFacts& f, const std::string& fact) {
  auto [it, fresh] = f.families.emplace(fact, family_);
  if (!fresh)
    errors_.push_back("op " + f.key + ": its " + fact + " is registered twice (family " + it->second + " and family " +
                      family_ + ")");
}

OpEntry& OpEntry::kernel(Device::Kind k, KernelFn fn) {
  reg_.claim(facts_, std::string(kind_name(k)) + " kernel");
  facts_.kernels[kind_index(k)] = fn;
  return *this;
}

OpEntry& OpEntry::host_inputs(std::vector<int> inputs) {
  reg_.claim(facts_, "host inputs");
  facts_.host_inputs = std::move(inputs);
  return *this;
}

OpEntry& OpEntry::host_shapes(bool metadata_only) {
  reg_.claim(facts_, "host shapes");
  facts_.host_shapes = true;
  facts_.metadata_only = metadata_only;
  return *this;
}

OpEntry& OpEntry::gradient(GradRule rule) {
  reg_.claim(facts_, "gradient");
  facts_.gradient = GradientKind::Rule;
  facts_.rule = rule;
  return *this;
}

OpEntry& OpEntry::no_gradient() {
  reg_.claim(facts_, "gradient");
  facts_.gradient = GradientKind::None;
  return *this;
}

OpEntry& OpEntry::output_dtype(int output, DType t) {
  reg_.claim(facts_, "type of output " + std::to_string(output));
  facts_.output_dtypes[output] = t;
  return *this;
}

OpEntry& OpEntry::schema(OpSchemaSpec s) {
  reg_.claim(facts_, "schema");
  facts_.schema = std::move(s);
  return *this;
}

// ---- schema specs ----

OpSchemaSpec& OpSchemaSpec::input(std::string name, std::string d, std::string type, Arity a) {
  inputs.push_back({std::move(name), std::move(d), std::move(type), a});
  return *this;
}

OpSchemaSpec& OpSchemaSpec::output(std::string name, std::string d, std::string type, Arity a) {
  outputs.push_back({std::move(name), std::move(d), std::move(type), a});
  return *this;
}

OpSchemaSpec& OpSchemaSpec::attr(std::string name, std::string d, Attribute default_value) {
  const Attribute::Kind k = default_value.kind;
  attrs.push_back({std::move(name), std::move(d), k, std::move(default_value)});
  return *this;
}

OpSchemaSpec& OpSchemaSpec::attr(std::string name, std::string d, Attribute::Kind kind) {
  attrs.push_back({std::move(name), std::move(d), kind, std::nullopt});
  return *this;
}

OpSchemaSpec& OpSchemaSpec::type(std::string name, std::vector<std::string> ts, std::string d) {
  types.push_back({std::move(name), std::move(ts), std::move(d)});
  return *this;
}

OpSchemaSpec& OpSchemaSpec::output_like(int out, int in) {
  inference.push_back({Inference::Kind::LikeInput, out, in, 0, ""});
  return *this;
}

OpSchemaSpec& OpSchemaSpec::optimizer_updates(int groups) {
  inference.push_back({Inference::Kind::OptimizerUpdates, 0, 0, groups, ""});
  return *this;
}

OpSchemaSpec& OpSchemaSpec::outputs_like_inputs() {
  inference.push_back({Inference::Kind::EachLikeInput, 0, 0, 0, ""});
  return *this;
}

OpSchemaSpec& OpSchemaSpec::output_bias_of(int out, int in, int axis, std::string times_attr) {
  inference.push_back({Inference::Kind::BiasOf, out, in, axis, std::move(times_attr)});
  return *this;
}

OpSchemaSpec& OpSchemaSpec::output_shape_from(int out, int in) {
  inference.push_back({Inference::Kind::ShapeFromValue, out, in, 0, ""});
  return *this;
}

OpSchemaSpec& OpSchemaSpec::layer_gradient(const std::string& param) {
  return input("dY", "gradient of Y", "T")
      .input("X", "forward input", "T")
      .input(param, "forward " + param, "T")
      .output("dX", "gradient of X", "T", Arity::Optional)
      .output("d" + param, "gradient of " + param, "T", Arity::Optional)
      .output("dB", "gradient of B", "T", Arity::Optional)
      .type("T", float_tensor_types(), "float tensors")
      .output_like(0, 1)
      .output_like(1, 2);
}

const std::vector<std::string>& float_tensor_types() {
  static const std::vector<std::string> t = {"tensor(float16)", "tensor(float)", "tensor(double)", "tensor(bfloat16)"};
  return t;
}

const std::vector<std::string>& numeric_tensor_types() {
  static const std::vector<std::string> t = {
      "tensor(float16)", "tensor(float)", "tensor(double)", "tensor(bfloat16)", "tensor(int8)",
      "tensor(int16)",   "tensor(int32)", "tensor(int64)",  "tensor(uint8)",    "tensor(uint16)",
      "tensor(uint32)",  "tensor(uint64)"};
  return t;
}

}  // namespace graphrun

// Autodiff entry points shared by losses and the backward builder: which initializers are trainable.
#include "autodiff/autodiff.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <unordered_map>
#include <unordered_set>

#include "graph/passes/train_mode.h"

namespace graphrun::autodiff {

namespace {
// Whether parameter `p` belongs to module `m`, as torch names them: "m." followed by something (fc1.weight is fc1's,
// fc10.weight is not).
bool in_module(const std::string& p, const std::string& m) {
  return p.size() > m.size() + 1 && p.compare(0, m.size(), m) == 0 && p[m.size()] == '.';
}
}  // namespace

std::vector<std::string> trainable_params(const Graph& g, const std::set<std::string>& freeze) {
  // BatchNormalization's running mean and variance are state the forward pass updates, and Dropout's
  // ratio and Clip's bounds settings: not parameters, read directly or through Identity nodes (which train's pipeline
  // drops first, but `check` and `grad` see).
  std::unordered_set<std::string> state;
  const std::unordered_map<std::string, int> producer = g.producers();
  auto add_state = [&](const std::string& v) {
    for (const std::string& s : passes::identity_chain(g, v, producer)) state.insert(s);
  };
  for (const Node& n : g.nodes) {
    if (!n.domain.empty() && n.domain != "ai.onnx") continue;
    if (n.op_type == "BatchNormalization")
      for (size_t i = 3; i < 5 && i < n.inputs.size(); ++i) add_state(n.inputs[i]);
    if (n.op_type == "Dropout")
      for (size_t i = 1; i < n.inputs.size(); ++i) add_state(n.inputs[i]);
    // Clip's bounds given as initializers are settings too (ReLU6's 0 and 6; the attributes of an old opset become
    // them): torch.clamp's number bounds. Bounds a model computes (from its parameters) get their gradient.
    if (n.op_type == "Clip")
      for (size_t i = 1; i < n.inputs.size(); ++i)
        if (!n.inputs[i].empty()) add_state(n.inputs[i]);
  }
  // So is what a pass already made state (sync_batchnorm's running statistics).
  for (const auto& [next, init] : g.state_updates) state.insert(init);
  // And what the model's metadata says is no parameter (torch's buffers, frozen parameters).
  for (const std::string& f : metadata_frozen(g)) state.insert(f);
  // A tensor holding -inf or NaN is a constant, not a parameter: torch exports its buffers (a causal
  // attention mask of -inf) as initializers like the weights, and no step could train one.
  auto finite = [](const Tensor& t) {
    if (t.dtype() == DType::F32) {
      const float* p = t.data<float>();
      return std::all_of(p, p + t.numel(), [](float v) { return std::isfinite(v); });
    }
    if (t.dtype() == DType::F64) {
      const double* p = t.data<double>();
      return std::all_of(p, p + t.numel(), [](double v) { return std::isfinite(v); });
    }
    return true;
  };
  std::vector<std::string> r;
  for (const auto& [name, t] : g.initializers)
    if (dtype_is_float(t.dtype()) && !state.count(name) && finite(t)) r.push_back(name);
  const std::set<std::string> frozen = resolve_freeze(r, g, freeze);
  std::vector<std::string> kept;
  for (const auto& p : r)
    if (!frozen.count(p)) kept.push_back(p);
  return kept;
}

std::vector<std::string> metadata_frozen(const Graph& g) {
  std::set<std::string> r;
  for (const auto& [key, value] : g.meta.props) {
    if (key != kFrozenMetadataKey) continue;
    std::string name;
    auto take = [&] {
      if (name.empty()) return;
      if (g.initializers.count(name)) {
        r.insert(name);
      } else {  // a module: every initializer named name + "." + something
        for (const auto& [init, t] : g.initializers)
          if (in_module(init, name)) r.insert(init);
      }
      name.clear();
    };
    for (char c : value) {
      if (c == ',' || std::isspace(static_cast<unsigned char>(c)))
        take();
      else
        name += c;
    }
    take();
  }
  return {r.begin(), r.end()};
}

std::set<std::string> resolve_freeze(const std::vector<std::string>& params, const Graph& g,
                                     const std::set<std::string>& freeze) {
  std::set<std::string> frozen;
  for (const auto& f : freeze) {
    if (g.initializers.count(f)) {
      frozen.insert(f);
      continue;
    }
    // A module, as torch's model.fc1.parameters(): every parameter named f + "." + something.
    bool any = false;
    for (const auto& p : params)
      if (in_module(p, f)) frozen.insert(p), any = true;
    if (any) continue;
    std::string names;
    for (const auto& p : params) names += (names.empty() ? "" : ", ") + p;
    GR_FAIL("--freeze: no parameter named '" << f << "' (parameters: " << names << ")");
  }
  return frozen;
}

}  // namespace graphrun::autodiff

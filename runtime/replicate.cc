// replicate: bucketing gradients in backward order, inserting AllReduce and optimizer nodes, and
// listing the state updates; the result is an ordinary Graph per device (printable, exportable).
#include "runtime/replicate.h"

#include <algorithm>
#include <map>
#include <set>

#include "graph/passes/train_mode.h"

namespace graphrun::runtime {

namespace {

ValueInfo info_of(const Tensor& t) {
  ValueInfo v;
  v.dtype = t.dtype();
  v.has_shape = true;
  for (int64_t d : t.shape()) v.shape.push_back(Dim(d));
  return v;
}

ValueInfo scalar_info(DType t) {
  ValueInfo v;
  v.dtype = t;
  v.has_shape = true;
  return v;
}

struct Param {
  std::string name, grad;
  int producer;  // index of the node producing the gradient; -1 when none does
  size_t bytes;
};

}  // namespace

std::vector<DeviceGraph> replicate(const Graph& training, const ReplicateOptions& opts) {
  GR_CHECK(!opts.devices.empty(), "replicate: no devices");
  const OptimizerOptions& opt = opts.optimizer;
  GR_CHECK(opt.kind == "sgd" || opt.kind == "adam" || opt.kind == "adamw",
           "unknown optimizer '" << opt.kind << "' (sgd, adam, adamw)");
  const bool adam_like = opt.kind == "adam" || opt.kind == "adamw";
  GR_CHECK(opt.momentum >= 0 && opt.weight_decay >= 0, "momentum and weight decay must be >= 0");
  GR_CHECK(!opt.nesterov || opt.momentum > 0, "nesterov needs a momentum > 0");

  // The parameters and their gradients, in the order the backward pass produces them.
  std::vector<std::string> names = opts.params;
  if (names.empty()) {
    const size_t k = opts.grad_suffix.size();
    for (const auto& out : training.outputs)
      if (out.size() > k && out.compare(out.size() - k, k, opts.grad_suffix) == 0 &&
          training.is_initializer(out.substr(0, out.size() - k)))
        names.push_back(out.substr(0, out.size() - k));
  }
  GR_CHECK(!names.empty(), "replicate: graph '" << training.name << "' has no parameter gradients (outputs named <param>"
                                                << opts.grad_suffix << ")");
  std::vector<Param> params;
  std::set<std::string> grad_outputs;
  for (const auto& p : names) {
    GR_CHECK(training.is_initializer(p), "replicate: '" << p << "' is not a parameter (initializer) of graph '"
                                                        << training.name << "'");
    const Tensor& t = training.initializers.at(p);
    GR_CHECK(t.dtype() == DType::F32, "replicate: parameter '" << p << "' is " << dtype_name(t.dtype())
                                                               << "; only f32 parameters are trained");
    std::string g = p + opts.grad_suffix;
    GR_CHECK(training.is_output(g), "replicate: graph '" << training.name << "' has no gradient output '" << g << "'");
    params.push_back({p, g, training.producer(g), t.nbytes()});
    grad_outputs.insert(g);
  }
  std::stable_sort(params.begin(), params.end(), [](const Param& a, const Param& b) { return a.producer < b.producer; });

  std::vector<std::vector<Param>> buckets(1);
  size_t bytes = 0;
  for (const Param& p : params) {
    if (bytes >= opts.bucket_bytes && !buckets.back().empty()) {
      buckets.emplace_back();
      bytes = 0;
    }
    buckets.back().push_back(p);
    bytes += p.bytes;
  }

  Graph g = training;
  g.opsets[kGraphrunDomain] = 1;
  const bool stateful = adam_like || opt.momentum > 0;
  if (stateful) g.opsets[kTrainingDomain] = 1;
  if (g.opset("") == 0) g.opsets[""] = 17;
  GR_CHECK(!g.is_input(opts.lr_input) && !g.values.count(opts.lr_input),
           "replicate: graph '" << training.name << "' already has a value named '" << opts.lr_input << "'");
  g.inputs.push_back(opts.lr_input);
  g.values[opts.lr_input] = scalar_info(DType::F32);
  if (stateful) {
    GR_CHECK(!g.values.count(opts.step_input) && !g.is_input(opts.step_input),
             "replicate: graph '" << training.name << "' already has a value named '" << opts.step_input << "'");
    g.inputs.push_back(opts.step_input);
    g.values[opts.step_input] = scalar_info(DType::I64);
  }

  std::vector<std::pair<std::string, std::string>> updates;
  std::vector<std::string> new_outputs;
  // Nodes to insert after original node i (key -1: before the first node).
  std::map<int, std::vector<Node>> inserts;
  // The optimizer nodes come after the whole backward pass (as DDP steps after backward), so that
  // each AllReduce can overlap the backward work after it: nothing reads its sums until then.
  std::vector<Node> optimizer_nodes;
  auto add_value = [&](const std::string& base, const ValueInfo& vi) {
    std::string n = g.unique_name(base);
    g.values[n] = vi;
    return n;
  };

  std::string decay_const, adam_t;
  for (size_t b = 0; b < buckets.size(); ++b) {
    const auto& bucket = buckets[b];
    int at = -1;
    for (const Param& p : bucket) at = std::max(at, p.producer);
    std::vector<Node>& out = optimizer_nodes;

    Node ar;
    ar.name = g.unique_name("allreduce_" + std::to_string(b));
    ar.op_type = "AllReduce";
    ar.domain = kGraphrunDomain;
    ar.attrs["reduction"] = Attribute::Str("sum");
    std::vector<std::string> summed;
    for (const Param& p : bucket) {
      ar.inputs.push_back(p.grad);
      summed.push_back(add_value(p.grad + ".sum", info_of(g.initializers.at(p.name))));
      ar.outputs.push_back(summed.back());
    }
    inserts[at].push_back(ar);

    if (!stateful) {
      // Plain SGD as standard ops: X_new = X - lr * (G + wd * X).
      if (opt.weight_decay > 0 && decay_const.empty()) {
        decay_const = g.unique_name("weight_decay");
        g.initializers[decay_const] = Tensor::scalar<float>(opt.weight_decay);
        g.values[decay_const] = scalar_info(DType::F32);
      }
      for (size_t i = 0; i < bucket.size(); ++i) {
        const Param& p = bucket[i];
        const ValueInfo vi = info_of(g.initializers.at(p.name));
        std::string grad = summed[i];
        if (opt.weight_decay > 0) {
          std::string decay = add_value(p.name + ".decay", vi), reg = add_value(p.name + ".grad_l2", vi);
          out.push_back(Node{g.unique_name("sgd_decay_" + p.name), "Mul", "", {decay_const, p.name}, {decay}, {}});
          out.push_back(Node{g.unique_name("sgd_l2_" + p.name), "Add", "", {grad, decay}, {reg}, {}});
          grad = reg;
        }
        std::string step = add_value(p.name + ".step", vi), next = add_value(p.name + ".new", vi);
        out.push_back(Node{g.unique_name("sgd_scale_" + p.name), "Mul", "", {opts.lr_input, grad}, {step}, {}});
        out.push_back(Node{g.unique_name("sgd_update_" + p.name), "Sub", "", {p.name, step}, {next}, {}});
        updates.emplace_back(next, p.name);
      }
      continue;
    }

    Node up;
    up.domain = kTrainingDomain;
    std::vector<std::string> xs, gs, xnew;
    std::vector<std::vector<std::string>> bufs(adam_like ? 2 : 1), bufnew(bufs.size());
    const char* buf_names[2] = {adam_like ? ".adam_m" : ".momentum", ".adam_v"};
    // AdamW (torch.optim.AdamW): X_new = X - lr * wd * X - adam_step(G). The decay is decoupled from
    // the moments and scaled by this step's lr, which ONNX Adam's norm_coefficient_post (a constant
    // factor on the whole update) cannot say; so the Adam node (norm_coefficient 0) yields
    // X - adam_step and standard Mul/Sub nodes subtract (lr * wd) * X.
    const bool decoupled = opt.kind == "adamw" && opt.weight_decay > 0;
    std::vector<std::pair<std::string, std::string>> adam_outs;  // (Adam output, final new value) for AdamW
    for (size_t i = 0; i < bucket.size(); ++i) {
      const Param& p = bucket[i];
      const Tensor& w = g.initializers.at(p.name);
      xs.push_back(p.name);
      gs.push_back(summed[i]);
      xnew.push_back(add_value(p.name + ".new", info_of(w)));
      updates.emplace_back(xnew.back(), p.name);
      if (decoupled) {
        adam_outs.emplace_back(add_value(p.name + ".adam", info_of(w)), xnew.back());
        xnew.back() = adam_outs.back().first;
      }
      for (size_t k = 0; k < bufs.size(); ++k) {
        std::string buf = g.unique_name(p.name + buf_names[k]);
        g.initializers[buf] = Tensor(DType::F32, w.shape());
        g.values[buf] = info_of(w);
        bufs[k].push_back(buf);
        bufnew[k].push_back(add_value(buf + ".new", info_of(w)));
        updates.emplace_back(bufnew[k].back(), buf);
      }
    }
    std::string t_input = opts.step_input;
    if (adam_like) {
      // ONNX Adam's T counts updates including this one (bias correction 1 - beta^T, as torch's step).
      if (adam_t.empty()) {
        std::string one = g.unique_name("one_i64");
        g.initializers[one] = Tensor::scalar<int64_t>(1);
        g.values[one] = scalar_info(DType::I64);
        adam_t = add_value("adam_t", scalar_info(DType::I64));
        inserts[-1].push_back(Node{g.unique_name("adam_count"), "Add", "", {opts.step_input, one}, {adam_t}, {}});
      }
      t_input = adam_t;
      up.op_type = "Adam";
      up.name = g.unique_name("adam_" + std::to_string(b));
      up.attrs["alpha"] = Attribute::Float(opt.beta1);
      up.attrs["beta"] = Attribute::Float(opt.beta2);
      up.attrs["epsilon"] = Attribute::Float(opt.eps);
      up.attrs["norm_coefficient"] = Attribute::Float(decoupled || opt.kind == "adamw" ? 0.f : opt.weight_decay);
    } else {
      up.op_type = "Momentum";
      up.name = g.unique_name("momentum_" + std::to_string(b));
      up.attrs["alpha"] = Attribute::Float(opt.momentum);
      up.attrs["beta"] = Attribute::Float(1.0f);
      up.attrs["mode"] = Attribute::Str(opt.nesterov ? "nesterov" : "standard");
      up.attrs["norm_coefficient"] = Attribute::Float(opt.weight_decay);
    }
    up.inputs = {opts.lr_input, t_input};
    for (auto* v : {&xs, &gs}) up.inputs.insert(up.inputs.end(), v->begin(), v->end());
    for (auto& v : bufs) up.inputs.insert(up.inputs.end(), v.begin(), v.end());
    up.outputs = xnew;
    for (auto& v : bufnew) up.outputs.insert(up.outputs.end(), v.begin(), v.end());
    out.push_back(up);
    if (decoupled) {
      if (decay_const.empty()) {
        std::string wd = g.unique_name("weight_decay");
        g.initializers[wd] = Tensor::scalar<float>(opt.weight_decay);
        g.values[wd] = scalar_info(DType::F32);
        decay_const = add_value("lr_weight_decay", scalar_info(DType::F32));
        inserts[-1].push_back(Node{g.unique_name("adamw_lr_decay"), "Mul", "", {opts.lr_input, wd}, {decay_const}, {}});
      }
      for (size_t i = 0; i < bucket.size(); ++i) {
        const Param& p = bucket[i];
        std::string decay = add_value(p.name + ".decay", info_of(g.initializers.at(p.name)));
        out.push_back(Node{g.unique_name("adamw_decay_" + p.name), "Mul", "", {decay_const, p.name}, {decay}, {}});
        out.push_back(Node{g.unique_name("adamw_update_" + p.name), "Sub", "", {adam_outs[i].first, decay},
                           {adam_outs[i].second}, {}});
      }
    }
  }

  std::vector<Node> nodes;
  auto flush = [&](int i) {
    auto it = inserts.find(i);
    if (it != inserts.end()) nodes.insert(nodes.end(), it->second.begin(), it->second.end());
  };
  flush(-1);
  for (int i = 0; i < static_cast<int>(g.nodes.size()); ++i) {
    nodes.push_back(g.nodes[i]);
    flush(i);
  }
  nodes.insert(nodes.end(), optimizer_nodes.begin(), optimizer_nodes.end());
  g.nodes = std::move(nodes);

  for (const auto& u : passes::batchnorm_state_updates(g)) updates.push_back(u);
  std::vector<std::string> outputs;
  for (const auto& o : training.outputs)
    if (!grad_outputs.count(o)) outputs.push_back(o);
  for (const auto& [v, _] : updates)
    if (std::find(outputs.begin(), outputs.end(), v) == outputs.end()) outputs.push_back(v);
  g.outputs = outputs;

  std::vector<DeviceGraph> result;
  for (const Device& d : opts.devices) {
    DeviceGraph dg;
    dg.device = d;
    dg.graph = g;
    std::string dev = d.str();
    std::replace(dev.begin(), dev.end(), ':', '_');
    dg.graph.name = training.name + "." + dev;
    dg.state_updates = updates;
    result.push_back(std::move(dg));
  }
  return result;
}

}  // namespace graphrun::runtime

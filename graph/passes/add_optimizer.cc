// Pass add_optimizer: optimizer nodes per bucket of summed gradients, and the state they update.
#include "graph/passes/add_optimizer.h"

#include <cmath>
#include <map>
#include <sstream>

#include "graph/passes/bucket_allreduce.h"

namespace graphrun::passes {

namespace {

const PassInfo& kInfo = register_pass(
    "add_optimizer", "the optimizer nodes after the backward pass: new parameters (and buffers) from the sums");

ValueInfo scalar_info(DType t) {
  ValueInfo v;
  v.dtype = t;
  v.has_shape = true;
  return v;
}

}  // namespace

Graph add_optimizer(const Graph& in, const AddOptimizerOptions& opts) {
  const OptimizerOptions& opt = opts.optimizer;
  GR_CHECK(opt.kind == "sgd" || opt.kind == "adam" || opt.kind == "adamw" || opt.kind == "adagrad",
           "unknown optimizer '" << opt.kind << "' (sgd, adam, adamw, adagrad)");
  const bool adam_like = opt.kind == "adam" || opt.kind == "adamw";
  const bool adagrad = opt.kind == "adagrad";
  GR_CHECK(opt.lr_decay >= 0 && std::isfinite(opt.lr_decay), "lr_decay must be >= 0");
  GR_CHECK(opt.momentum >= 0 && opt.weight_decay >= 0, "momentum and weight decay must be >= 0");
  GR_CHECK(!opt.nesterov || opt.momentum > 0, "nesterov needs a momentum > 0");
  const auto buckets = reduced_gradients(in, opts.grad_suffix);
  GR_CHECK(!buckets.empty(),
           "add_optimizer: graph '" << in.name << "' has no AllReduce node (run bucket_allreduce first)");

  Graph g = in;
  const bool stateful = adam_like || adagrad || opt.momentum > 0;
  if ((opt.momentum > 0 && !adam_like) || adagrad) g.opsets[kTrainingDomain] = 1;
  if (adam_like) g.opsets[kGraphrunDomain] = 1;
  if (g.opset("") == 0) g.opsets[""] = 17;
  GR_CHECK(!g.is_input(opts.lr_input) && !g.values.count(opts.lr_input),
           "add_optimizer: model '" << in.name << "' has a value named '" << opts.lr_input
                                    << "', the name of the learning rate graphrun's optimizer adds: rename it in the "
                                       "model");
  g.inputs.push_back(opts.lr_input);
  g.values[opts.lr_input] = scalar_info(DType::F32);
  if (stateful) {
    GR_CHECK(!g.values.count(opts.step_input) && !g.is_input(opts.step_input),
             "add_optimizer: model '" << in.name << "' has a value named '" << opts.step_input
                                      << "', the name of the step count graphrun's optimizer adds: rename it in the "
                                         "model");
    g.inputs.push_back(opts.step_input);
    g.values[opts.step_input] = scalar_info(DType::I64);
  }

  auto& updates = g.state_updates;
  std::vector<Node> front;  // nodes before the first node: step-wide constants derived from inputs
  std::vector<Node> out;    // the optimizer nodes, after every other node
  auto add_value = [&](const std::string& base, const ValueInfo& vi) {
    std::string n = g.unique_name(base);
    g.values[n] = vi;
    return n;
  };

  // --clip-grad-norm: the global L2 norm of every summed gradient (in f64 when every parameter is f64,
  // else f32), and each gradient scaled by min(1, max / (norm + 1e-6)), as torch's clip_grad_norm_.
  std::map<std::string, std::string> clipped;  // summed gradient -> its clipped value
  GR_CHECK(opt.clip_grad_norm >= 0 && std::isfinite(opt.clip_grad_norm), "clip_grad_norm must be >= 0");
  if (opt.clip_grad_norm > 0) {
    bool all64 = true;
    for (const auto& bucket : buckets)
      for (const ReducedGradient& p : bucket) all64 &= g.initializers.at(p.param).dtype() == DType::F64;
    const DType nt = all64 ? DType::F64 : DType::F32;
    auto constant = [&](const std::string& base, double v) {
      std::string n = g.unique_name(base);
      g.initializers[n] = nt == DType::F64 ? Tensor::scalar<double>(v) : Tensor::scalar<float>(static_cast<float>(v));
      g.values[n] = scalar_info(nt);
      return n;
    };
    std::vector<std::string> squares;
    for (const auto& bucket : buckets)
      for (const ReducedGradient& p : bucket) {
        const ValueInfo vi = value_info_of(g.initializers.at(p.param));
        std::string sq = add_value(p.param + ".grad_sq", vi), sum = add_value(p.param + ".grad_sq_sum", scalar_info(vi.dtype));
        out.push_back(Node{g.unique_name("grad_clip_square_" + p.param), "Mul", "", {p.sum, p.sum}, {sq}, {}});
        out.push_back(Node{g.unique_name("grad_clip_sum_" + p.param), "ReduceSum", "", {sq}, {sum}, {{"keepdims", Attribute::Int(0)}}});
        if (vi.dtype != nt) {
          std::string cast = add_value(sum + "_cast", scalar_info(nt));
          out.push_back(Node{g.unique_name("grad_clip_cast_" + p.param), "Cast", "", {sum}, {cast},
                             {{"to", Attribute::Int(static_cast<int64_t>(nt))}}});
          sum = cast;
        }
        squares.push_back(sum);
      }
    const std::string total = add_value("grad_norm_squared", scalar_info(nt)), norm = add_value("grad_norm", scalar_info(nt)),
                      denom = add_value("grad_norm_plus_eps", scalar_info(nt)), ratio = add_value("grad_clip_ratio", scalar_info(nt)),
                      coef = add_value("grad_clip_coef", scalar_info(nt));
    out.push_back(Node{g.unique_name("grad_clip_total"), "Sum", "", squares, {total}, {}});
    out.push_back(Node{g.unique_name("grad_clip_norm"), "Sqrt", "", {total}, {norm}, {}});
    out.push_back(Node{g.unique_name("grad_clip_eps"), "Add", "", {norm, constant("grad_clip_epsilon", 1e-6)}, {denom}, {}});
    out.push_back(Node{g.unique_name("grad_clip_max_over_norm"), "Div", "", {constant("grad_clip_max_norm", opt.clip_grad_norm), denom},
                       {ratio}, {}});
    out.push_back(Node{g.unique_name("grad_clip_at_most_one"), "Min", "", {ratio, constant("grad_clip_one", 1.0)}, {coef}, {}});
    std::string coef_cast;  // the coefficient in f64, for the f64 gradients of a model that mixes types
    for (const auto& bucket : buckets)
      for (const ReducedGradient& p : bucket) {
        const ValueInfo vi = value_info_of(g.initializers.at(p.param));
        std::string c = coef;
        if (vi.dtype != nt) {
          std::string& cc = coef_cast;
          if (cc.empty()) {
            cc = add_value("grad_clip_coef_" + std::string(dtype_name(vi.dtype)), scalar_info(vi.dtype));
            out.push_back(Node{g.unique_name("grad_clip_coef_cast"), "Cast", "", {coef}, {cc},
                               {{"to", Attribute::Int(static_cast<int64_t>(vi.dtype))}}});
          }
          c = cc;
        }
        std::string scaled = add_value(p.param + ".grad_clipped", vi);
        out.push_back(Node{g.unique_name("grad_clip_scale_" + p.param), "Mul", "", {p.sum, c}, {scaled}, {}});
        clipped[p.sum] = scaled;
      }
  }
  auto grad_of = [&](const ReducedGradient& p) {
    auto it = clipped.find(p.sum);
    return it == clipped.end() ? p.sum : it->second;
  };

  std::string decay_const, adam_t, lr64, decay64, lr_decay, lr_decay64;
  for (size_t b = 0; b < buckets.size(); ++b) {
    const auto& bucket = buckets[b];
    // A bucket of f64 parameters (a float64 model, bucket_allreduce keeps types apart): the lr cast
    // to f64 once per step, the decay an f64 constant, the optimizer state f64.
    const bool f64 = !bucket.empty() && g.initializers.at(bucket[0].param).dtype() == DType::F64;
    if (f64 && lr64.empty()) {
      lr64 = add_value(opts.lr_input + "_f64", scalar_info(DType::F64));
      front.push_back(Node{g.unique_name("lr_to_f64"), "Cast", "", {opts.lr_input}, {lr64},
                           {{"to", Attribute::Int(static_cast<int64_t>(DType::F64))}}});
    }
    if (f64 && opt.weight_decay > 0 && decay64.empty()) {
      decay64 = g.unique_name("weight_decay_f64");
      g.initializers[decay64] = Tensor::scalar<double>(opt.weight_decay);
      g.values[decay64] = scalar_info(DType::F64);
    }
    const std::string& lr = f64 ? lr64 : opts.lr_input;
    if (!stateful) {
      // Plain SGD as standard ops: X_new = X - lr * (G + wd * X).
      if (opt.weight_decay > 0 && !f64 && decay_const.empty()) {
        decay_const = g.unique_name("weight_decay");
        g.initializers[decay_const] = Tensor::scalar<float>(opt.weight_decay);
        g.values[decay_const] = scalar_info(DType::F32);
      }
      const std::string& wd = f64 ? decay64 : decay_const;
      for (const ReducedGradient& p : bucket) {
        const ValueInfo vi = value_info_of(g.initializers.at(p.param));
        std::string grad = grad_of(p);
        if (opt.weight_decay > 0) {
          std::string decay = add_value(p.param + ".decay", vi), reg = add_value(p.param + ".grad_l2", vi);
          out.push_back(Node{g.unique_name("sgd_decay_" + p.param), "Mul", "", {wd, p.param}, {decay}, {}});
          out.push_back(Node{g.unique_name("sgd_l2_" + p.param), "Add", "", {grad, decay}, {reg}, {}});
          grad = reg;
        }
        std::string step = add_value(p.param + ".step", vi), next = add_value(p.param + ".new", vi);
        out.push_back(Node{g.unique_name("sgd_scale_" + p.param), "Mul", "", {lr, grad}, {step}, {}});
        out.push_back(Node{g.unique_name("sgd_update_" + p.param), "Sub", "", {p.param, step}, {next}, {}});
        updates.emplace_back(next, p.param);
      }
      continue;
    }

    Node up;
    // Adam is graphrun's: ai.onnx.preview.training's Adam adds epsilon where torch.optim.Adam does not.
    up.domain = adam_like ? kGraphrunDomain : kTrainingDomain;
    std::vector<std::string> xs, gs, xnew;
    std::vector<std::vector<std::string>> bufs(adam_like ? 2 : 1), bufnew(bufs.size());
    const char* buf_names[2] = {adam_like ? ".adam_m" : adagrad ? ".adagrad_sum" : ".momentum", ".adam_v"};
    // AdamW (torch.optim.AdamW): X_new = X - lr * wd * X - adam_step(G). The decay is decoupled from
    // the moments and scaled by this step's lr, which ONNX Adam's norm_coefficient_post (a constant
    // factor on the whole update) cannot say; so the Adam node (norm_coefficient 0) yields
    // X - adam_step and standard Mul/Sub nodes subtract (lr * wd) * X.
    const bool decoupled = opt.kind == "adamw" && opt.weight_decay > 0;
    std::vector<std::pair<std::string, std::string>> adam_outs;  // (Adam output, final new value) for AdamW
    for (const ReducedGradient& p : bucket) {
      const Tensor& w = g.initializers.at(p.param);
      xs.push_back(p.param);
      gs.push_back(grad_of(p));
      xnew.push_back(add_value(p.param + ".new", value_info_of(w)));
      updates.emplace_back(xnew.back(), p.param);
      if (decoupled) {
        adam_outs.emplace_back(add_value(p.param + ".adam", value_info_of(w)), xnew.back());
        xnew.back() = adam_outs.back().first;
      }
      for (size_t k = 0; k < bufs.size(); ++k) {
        std::string buf = g.unique_name(p.param + buf_names[k]);
        g.initializers[buf] = Tensor(w.dtype(), w.shape());
        g.values[buf] = value_info_of(w);
        bufs[k].push_back(buf);
        bufnew[k].push_back(add_value(buf + ".new", value_info_of(w)));
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
        front.push_back(Node{g.unique_name("adam_count"), "Add", "", {opts.step_input, one}, {adam_t}, {}});
      }
      t_input = adam_t;
      up.op_type = "Adam";
      up.name = g.unique_name("adam_" + std::to_string(b));
      up.attrs["alpha"] = Attribute::Float(opt.beta1);
      up.attrs["beta"] = Attribute::Float(opt.beta2);
      up.attrs["epsilon"] = Attribute::Float(opt.eps);
      up.attrs["norm_coefficient"] = Attribute::Float(opt.kind == "adamw" ? 0.f : opt.weight_decay);
    } else if (adagrad) {
      // T = the updates before this one: torch's lr / (1 + (step - 1) * lr_decay).
      up.op_type = "Adagrad";
      up.name = g.unique_name("adagrad_" + std::to_string(b));
      up.attrs["decay_factor"] = Attribute::Float(opt.lr_decay);
      up.attrs["epsilon"] = Attribute::Float(opt.eps);
      up.attrs["norm_coefficient"] = Attribute::Float(opt.weight_decay);
    } else {
      up.op_type = "Momentum";
      up.name = g.unique_name("momentum_" + std::to_string(b));
      up.attrs["alpha"] = Attribute::Float(opt.momentum);
      up.attrs["beta"] = Attribute::Float(1.0f);
      up.attrs["mode"] = Attribute::Str(opt.nesterov ? "nesterov" : "standard");
      up.attrs["norm_coefficient"] = Attribute::Float(opt.weight_decay);
    }
    up.inputs = {lr, t_input};
    for (auto* v : {&xs, &gs}) up.inputs.insert(up.inputs.end(), v->begin(), v->end());
    for (auto& v : bufs) up.inputs.insert(up.inputs.end(), v.begin(), v.end());
    up.outputs = xnew;
    for (auto& v : bufnew) up.outputs.insert(up.outputs.end(), v.begin(), v.end());
    out.push_back(up);
    if (decoupled) {
      // lr * wd once per step, in the bucket's type.
      std::string& lr_wd = f64 ? lr_decay64 : lr_decay;
      if (lr_wd.empty()) {
        std::string wd = decay64;
        if (!f64) {
          wd = g.unique_name("weight_decay");
          g.initializers[wd] = Tensor::scalar<float>(opt.weight_decay);
          g.values[wd] = scalar_info(DType::F32);
        }
        lr_wd = add_value(f64 ? "lr_weight_decay_f64" : "lr_weight_decay", scalar_info(f64 ? DType::F64 : DType::F32));
        front.push_back(Node{g.unique_name("adamw_lr_decay"), "Mul", "", {lr, wd}, {lr_wd}, {}});
      }
      for (size_t i = 0; i < bucket.size(); ++i) {
        const std::string& p = bucket[i].param;
        std::string decay = add_value(p + ".decay", value_info_of(g.initializers.at(p)));
        out.push_back(Node{g.unique_name("adamw_decay_" + p), "Mul", "", {lr_wd, p}, {decay}, {}});
        const auto& [adam_out, final_out] = adam_outs[i];
        out.push_back(Node{g.unique_name("adamw_update_" + p), "Sub", "", {adam_out, decay}, {final_out}, {}});
      }
    }
  }
  front.insert(front.end(), g.nodes.begin(), g.nodes.end());
  front.insert(front.end(), out.begin(), out.end());
  g.nodes = std::move(front);
  return g;
}

Pass add_optimizer_pass(const AddOptimizerOptions& opts) {
  const OptimizerOptions& o = opts.optimizer;
  auto num = [](float v) {
    std::ostringstream os;
    os << v;
    return os.str();
  };
  std::vector<std::pair<std::string, std::string>> kv{{"optimizer", o.kind}};
  if (o.clip_grad_norm > 0) kv.push_back({"clip_grad_norm", num(o.clip_grad_norm)});
  if (o.kind == "sgd") {
    if (o.momentum > 0) kv.push_back({"momentum", num(o.momentum)});
    if (o.nesterov) kv.push_back({"nesterov", "1"});
  } else if (o.kind == "adagrad") {
    kv.push_back({"eps", num(o.eps)});
    if (o.lr_decay > 0) kv.push_back({"lr_decay", num(o.lr_decay)});
  } else {
    kv.insert(kv.end(), {{"beta1", num(o.beta1)}, {"beta2", num(o.beta2)}, {"eps", num(o.eps)}});
  }
  if (o.weight_decay > 0) kv.push_back({"weight_decay", num(o.weight_decay)});
  return make_pass(kInfo, format_options(kv), [opts](const Graph& g) { return add_optimizer(g, opts); });
}

}  // namespace graphrun::passes

// graphrun check: can this model be trained? One report: every op without a kernel or a gradient rule,
// every value without a rank, then a numeric gradient check of the model itself in float64; one verdict.
#include <algorithm>
#include <cmath>
#include <iomanip>
#include <limits>
#include <map>
#include <iostream>
#include <random>
#include <set>
#include <sstream>

#include "autodiff/autodiff.h"
#include "graph/float64.h"
#include "graph/onnx_io.h"
#include "graph/op_table.h"
#include "graph/passes/convert_opset.h"
#include "graph/passes/fake_quantize.h"
#include "graph/passes/make_batch_symbolic.h"
#include "graph/passes/train_mode.h"
#include "runtime/device.h"
#include "runtime/executor.h"
#include "runtime/plan.h"
#include "runtime/pipeline.h"
#include "tools/backward_options.h"
#include "tools/cli.h"

namespace graphrun::cli {

namespace {

const Command& check_command() {
  static const Command cmd = [] {
    Command c{"check",
              "graphrun check MODEL.onnx [--directions K] [--seed S] [--dims NAME=SIZE,...]",
              "Says whether graphrun can train the model, in one report: every node whose op has no CPU kernel\n"
              "or no gradient rule (all of them, with node names), every value shape inference leaves without a\n"
              "rank, then a numeric gradient check of the model itself; last, one verdict line.",
              {{"directions", "K", "random directions of the gradient check (default 3)"},
               {"seed", "S", "seed of the random batch, loss weights and directions (default 1)"},
               {"dims", "NAME=SIZE,...", "sizes of the inputs' symbolic dimensions in the random batch (default 2\n"
                                         "                            each; e.g. H=32,W=32 for a model that pools several times)"},
               {"label-smoothing", "EPS", "check train's loss instead of sum(output * R): cross-entropy with label\n"
                                          "                            smoothing EPS (0 <= EPS < 1; 0: plain) on the first output,\n"
                                          "                            scores [N, classes, ...], against random labels"}},
              "The gradient check runs a float64 copy of the model, in the training form train differentiates\n"
              "(BatchNormalization on batch statistics, Dropout drawing fixed masks), on a random batch of its\n"
              "declared input shapes (symbolic dimensions: 2, or as --dims says; the batch symbolic as train\n"
              "makes it, N for a fixed export batch, and large enough to give a training-mode BatchNormalization\n"
              "8 values per channel), with the loss sum(output * R) for a fixed random R, and compares the\n"
              "backward graph's directional derivative along K random directions of all trainable parameters with\n"
              "central differences of the loss (relative error at most 1e-5; where a direction fails, steps 4 and\n"
              "16 times smaller are tried, which leave a ReLU's or max's kink that the first step crossed\n"
              "outside, while a wrong gradient fails at every step; where both lie below 4 unit roundoffs of the\n"
              "run's largest value per step, a loss flat beyond rounding, the direction passes and says so);\n"
              "where it still disagrees, the check runs again at weights moved by 1e-4 of each tensor's scale,\n"
              "off any corner the weights themselves sit on (a zeroed layer, a grid at exact pixel centres).\n"
              "With --label-smoothing the loss is graphrun train's cross-entropy (its attach_loss nodes)\n"
              "instead.\n"
              "\n"
              "exit status: 0 trainable, 1 the check failed (the report says why), 2 the model cannot be loaded.\n"
              "\n"
              "examples:\n"
              "  graphrun check models/lenet.onnx\n"
              "  graphrun check vit.onnx --directions 5\n"
              "  graphrun check models/lenet.onnx --label-smoothing 0.1"};
    return c;
  }();
  return cmd;
}

// The random batch's tensor for a declared input: its type (f32 drawn as f64) and shape (symbolic
// dimensions take their --dims size, else 2).
DType random_dtype(const ValueInfo& vi) { return vi.dtype == DType::F32 ? DType::F64 : vi.dtype; }
Shape random_shape(const ValueInfo& vi, const std::map<std::string, int64_t>& dims) {
  Shape s;
  for (const Dim& d : vi.shape) s.push_back(d.known() ? d.size : dims.count(d.param) ? dims.at(d.param) : 2);
  return s;
}

// A random tensor of a declared input type, of random_dtype and random_shape.
Tensor random_input(const ValueInfo& vi, std::mt19937_64& rng, const std::map<std::string, int64_t>& dims = {}) {
  const DType t = random_dtype(vi);
  Tensor r(t, random_shape(vi, dims));
  std::normal_distribution<double> normal;
  for (int64_t i = 0; i < r.numel(); ++i) {
    if (t == DType::F64) r.data<double>()[i] = normal(rng);
    else if (t == DType::I64) r.data<int64_t>()[i] = static_cast<int64_t>(rng() % 2);
    else if (t == DType::I32) r.data<int32_t>()[i] = static_cast<int32_t>(rng() % 2);
    else if (t == DType::Bool) static_cast<uint8_t*>(r.raw())[i] = 0;
    else GR_FAIL("input of type " << dtype_name(t) << " cannot be drawn at random for the gradient check");
  }
  return r;
}

void print_list(const std::string& title, const std::vector<std::string>& items) {
  std::cout << title << ": " << (items.empty() ? "none" : std::to_string(items.size())) << "\n";
  for (const auto& i : items) std::cout << "  " << i << "\n";
}

struct GradCheck {
  bool passed = false;
  std::string failure;             // why it could not run or failed
  std::vector<std::string> lines;  // the report of each direction
};

// Every node on a path from a parameter to an output whose op has no gradient rule (autodiff lists them
// all, separated by "; "), for the loss sum(outputs); "" or the other reason the backward graph fails.
std::string missing_rules(const Graph& model, std::vector<std::string>* no_rule) {
  Graph g = model;
  std::string loss;
  for (const auto& o : model.outputs) {
    const ValueInfo* vi = g.info(o);
    const DType t = vi && vi->dtype != DType::Undefined ? vi->dtype : DType::F32;
    if (t != DType::F32 && t != DType::F64) continue;
    const std::string sum = g.unique_name("check_sum_" + o);
    g.nodes.push_back(Node{sum, "ReduceSum", "", {o}, {sum}, {{"keepdims", Attribute::Int(0)}}});
    g.values[sum] = ValueInfo{t, true, {}};
    if (loss.empty()) {
      loss = sum;
      continue;
    }
    const std::string add = g.unique_name("check_loss");
    g.nodes.push_back(Node{add, "Add", "", {loss, sum}, {add}, {}});
    g.values[add] = ValueInfo{t, true, {}};
    loss = add;
  }
  if (loss.empty()) return "the model has no float output to differentiate";
  g.outputs = {loss};
  autodiff::BackwardOptions bo;
  bo.loss = loss;
  try {
    autodiff::backward(g, bo);
  } catch (const Error& e) {
    std::string msg = e.what();
    if (msg.rfind("no gradient rule", 0) != 0) return "the backward graph cannot be built: " + msg;
    for (size_t at = 0; at != std::string::npos;) {
      const size_t next = msg.find("; ", at);
      no_rule->push_back(msg.substr(at, next == std::string::npos ? next : next - at));
      at = next == std::string::npos ? next : next + 2;
    }
    return "gradient rules are missing";
  }
  return "";
}

// The loss of --label-smoothing: train's cross-entropy (autodiff::attach_loss, smoothing `eps`) on the
// first output of g, against labels drawn from [0, classes) into feeds; its name.
std::string attach_training_loss(Graph& g, const Tensor& scores, double eps, std::mt19937_64& rng,
                                 std::map<std::string, Tensor>& feeds) {
  GR_CHECK(scores.rank() >= 2, "--label-smoothing: the first output '" << g.outputs[0] << "' is "
                                                                       << shape_str(scores.shape())
                                                                       << ", not scores [N, classes, ...]");
  autodiff::LossOptions lo;
  lo.output = g.outputs[0];
  lo.labels = g.unique_name("check_labels");
  lo.loss = g.unique_name("check_loss");
  lo.label_smoothing = eps;
  g = autodiff::attach_loss(g, lo);
  Shape ls{scores.dim(0)};
  for (int64_t i = 2; i < scores.rank(); ++i) ls.push_back(scores.dim(i));
  Tensor labels(DType::I64, ls);
  for (int64_t i = 0; i < labels.numel(); ++i) labels.data<int64_t>()[i] = static_cast<int64_t>(rng() % scores.dim(1));
  feeds[lo.labels] = labels;
  return lo.loss;
}

const char* const kDisagrees = "the backward graph disagrees with central differences";

// The numeric gradient check of a float64 copy of `model`; with `smoothing` (>= 0), of train's
// cross-entropy with that label smoothing instead of sum(output * R).
GradCheck gradient_check(const Graph& model, int directions, uint64_t seed, const std::map<std::string, int64_t>& dims,
                         double smoothing = -1, double jitter = 0) {
  GradCheck r;
  Graph g = float64_copy(model, /*fixed_random=*/true);
  std::mt19937_64 rng(seed);
  std::map<std::string, Tensor> feeds;
  // The random batch within this machine's memory (--dims N=100000 took 24 GB before it passed): its
  // inputs are counted before they are drawn, and each executor's first run stops, naming --dims, where
  // its activations would take more than is free.
  const size_t avail = runtime::backend_for(Device::Kind::CPU)->free_memory(Device{});
  double input_bytes = 0;
  for (const auto& in : g.inputs) {
    if (g.is_initializer(in)) continue;
    const ValueInfo* vi = g.info(in);
    GR_CHECK(vi && vi->has_shape, "input '" << in << "' has no declared shape");
    double n = static_cast<double>(dtype_size(random_dtype(*vi)));
    for (int64_t size : random_shape(*vi, dims)) n *= static_cast<double>(size);  // (in double: no overflow)
    input_bytes += n;
  }
  GR_CHECK(!avail || input_bytes <= static_cast<double>(avail),
           "the gradient check's random batch needs " << runtime::bytes_str(input_bytes) << " for its inputs, and "
                                                      << runtime::bytes_str(static_cast<double>(avail))
                                                      << " is available: give its dimensions smaller sizes with --dims");
  const std::string hint = "give the random batch's dimensions smaller sizes with --dims";
  auto within_memory = [&](runtime::ExecOptions o) {
    const size_t free = runtime::backend_for(Device::Kind::CPU)->free_memory(Device{});
    if (free) o.memory_limit = runtime::run_memory_limit(free), o.memory_hint = hint;
    return o;
  };
  for (const auto& in : g.inputs) {
    if (g.is_initializer(in)) continue;
    feeds[in] = random_input(*g.info(in), rng, dims);
  }
  // The outputs' shapes, from a forward run; the loss is sum over float outputs of sum(output * R).
  // and the largest magnitude any float value of that run takes: the loss is computed to about the
  // unit roundoff times that, which bounds what central differences can resolve (below).
  std::map<std::string, Tensor> outs;
  double largest = 0;
  {
    runtime::ExecOptions all;
    all.fetch = g.outputs;
    std::set<std::string> fetched(g.outputs.begin(), g.outputs.end());
    for (const Node& n : g.nodes)
      for (const auto& o : n.outputs)
        if (!o.empty() && fetched.insert(o).second) all.fetch.push_back(o);
    runtime::Executor ex(g, within_memory(all));
    for (auto& [k, v] : ex.run(feeds)) {
      if (v.dtype() == DType::F64)
        for (int64_t i = 0; i < v.numel(); ++i)
          if (std::isfinite(v.data<double>()[i])) largest = std::max(largest, std::fabs(v.data<double>()[i]));
      if (std::find(g.outputs.begin(), g.outputs.end(), k) != g.outputs.end()) outs[k] = v.clone();
    }
  }
  std::string loss;
  if (smoothing >= 0) loss = attach_training_loss(g, outs.at(g.outputs[0]), smoothing, rng, feeds);
  for (const auto& o : model.outputs) {
    if (smoothing >= 0 || outs.at(o).dtype() != DType::F64) continue;
    const std::string w = g.unique_name("check_weights_" + o), prod = g.unique_name("check_prod_" + o),
                      sum = g.unique_name("check_sum_" + o);
    ValueInfo wi{DType::F64, true, {}};
    for (int64_t d : outs.at(o).shape()) wi.shape.push_back(Dim(d));
    g.inputs.push_back(w);
    g.values[w] = wi;
    feeds[w] = random_input(wi, rng);
    g.nodes.push_back(Node{prod, "Mul", "", {o, w}, {prod}, {}});
    g.nodes.push_back(Node{sum, "ReduceSum", "", {prod}, {sum}, {{"keepdims", Attribute::Int(0)}}});
    if (loss.empty()) {
      loss = sum;
    } else {
      const std::string add = g.unique_name("check_loss");
      g.nodes.push_back(Node{add, "Add", "", {loss, sum}, {add}, {}});
      loss = add;
    }
  }
  if (loss.empty()) return {false, "the model has no float output to differentiate", {}};
  g.values[loss] = ValueInfo{DType::F64, true, {}};
  g.outputs = {loss};
  autodiff::BackwardOptions bo;
  bo.loss = loss;
  bo.params = autodiff::trainable_params(g, {});
  if (bo.params.empty()) return {false, "the model has no trainable parameter (float initializer)", {}};
  if (jitter > 0) {
    // Each parameter moved by `jitter` times its root mean square (1 for an all-zero tensor) times N(0, 1)
    // noise of its own generator: the batch, R and the directions stay those of the first check.
    std::mt19937_64 noise_rng(seed ^ 0x9e3779b97f4a7c15ull);
    std::normal_distribution<double> noise;
    for (const auto& p : bo.params) {
      Tensor& w = g.initializers.at(p);
      double* v = w.data<double>();
      double sq = 0;
      for (int64_t i = 0; i < w.numel(); ++i) sq += v[i] * v[i];
      const double rms = w.numel() ? std::sqrt(sq / static_cast<double>(w.numel())) : 0;
      for (int64_t i = 0; i < w.numel(); ++i) v[i] += jitter * (rms > 0 ? rms : 1) * noise(noise_rng);
    }
  }
  Graph bg = autodiff::backward(g, bo);
  runtime::ExecOptions bo_exec;
  bo_exec.fetch = {loss};
  for (const auto& p : bo.params) bo_exec.fetch.push_back(p + bo.grad_suffix);
  runtime::Executor bex(bg, within_memory(bo_exec));
  auto got = bex.run(feeds);
  // The differences hold what StopGradient nodes pass (torch's .detach()) at its value here, as the backward graph
  // does: each becomes an input, fed that value.
  Graph fg = g;
  {
    std::vector<std::string> stopped;
    std::vector<Node> kept;
    for (const Node& n : fg.nodes)
      if (n.domain == kGraphrunDomain && n.op_type == "StopGradient" && !n.outputs.empty())
        stopped.push_back(n.outputs[0]);
      else
        kept.push_back(n);
    if (!stopped.empty()) {
      runtime::ExecOptions so;
      so.fetch = stopped;
      runtime::Executor sex(g, within_memory(so));
      for (auto& [k, v] : sex.run(feeds)) feeds[k] = v.clone();
      fg.nodes = std::move(kept);
      fg.inputs.insert(fg.inputs.end(), stopped.begin(), stopped.end());
    }
  }
  runtime::ExecOptions fo;
  fo.fetch = {loss};
  runtime::Executor fex(fg, within_memory(fo));
  const double loss0 = fex.run(feeds).at(loss).as_doubles()[0];
  if (!std::isfinite(loss0))
    return {false, "the gradient check cannot run: the loss of its random batch is not finite (a model that masks with "
                   "-inf, or sizes too small for it: --dims NAME=SIZE gives symbolic dimensions other sizes)", {}};
  {
    std::ostringstream head;
    head << "gradient check: float64, " << bo.params.size() << " parameters, loss " << loss0;
    if (smoothing >= 0) head << " (cross-entropy, label smoothing " << smoothing << ")";
    r.lines.push_back(head.str());
  }
  const double eps = 1e-6;
  r.passed = true;
  int flat = 0;
  std::normal_distribution<double> normal;
  for (int k = 0; k < directions; ++k) {
    std::map<std::string, std::vector<double>> dir;
    double norm2 = 0, analytic = 0;
    for (const auto& p : bo.params) {
      auto& v = dir[p];
      v.resize(g.initializers.at(p).numel());
      for (double& x : v) {
        x = normal(rng);
        norm2 += x * x;
      }
    }
    const double inv = 1 / std::sqrt(std::max(norm2, 1e-300));
    for (const auto& p : bo.params) {
      const std::vector<double> grad = got.at(p + bo.grad_suffix).as_doubles();
      for (size_t i = 0; i < grad.size(); ++i) analytic += grad[i] * dir[p][i] * inv;
    }
    auto loss_at = [&](double step) {
      for (const auto& p : bo.params) {
        Tensor w = g.initializers.at(p).clone();
        for (int64_t i = 0; i < w.numel(); ++i) w.data<double>()[i] += step * dir[p][i] * inv;
        fex.set_state(p, w);
      }
      return fex.run(feeds).at(loss).as_doubles()[0];
    };
    auto error_at = [&](double step, double* numeric) {
      *numeric = (loss_at(step) - loss_at(-step)) / (2 * step);
      return std::fabs(analytic - *numeric) / std::max({std::fabs(analytic), std::fabs(*numeric), 1e-6});
    };
    double numeric = 0;
    const double err = error_at(eps, &numeric);
    bool ok = err <= 1e-5;
    std::ostringstream line;
    line.precision(8);
    line << "  direction " << k + 1 << ": backward " << analytic << ", central difference " << numeric
         << ", relative error " << std::scientific << std::setprecision(1) << err;
    // A loss that barely moves with the weights (two normalisations of one value subtracted) has a derivative
    // below the rounding of the loss over the step: both sides are then noise, which no step resolves.
    // Where both lie below 4 unit roundoffs of the run's largest value per step, the direction says so and
    // passes; a backward above that floor is still compared.
    const double floor = 4 * std::numeric_limits<double>::epsilon() * std::max(largest, 1.0) / eps;
    if (!ok && std::fabs(analytic) <= floor && std::fabs(numeric) <= floor) {
      ok = true;
      ++flat;
      line << "; both below what central differences resolve here (" << std::setprecision(1) << floor
           << ": 4 roundoffs of the largest value, " << std::setprecision(2) << largest << ", per step)";
    }
    // A ReLU, max or clip whose kink lies within the step makes the difference disagree where the backward is
    // right: smaller steps leave the kink outside and agree. A wrong gradient disagrees at every step.
    for (double step = eps / 4; !ok && step >= eps / 16; step /= 4) {
      double fine = 0;
      const double e = error_at(step, &fine);
      ok = e <= 1e-5;
      if (ok)
        line << "; a kink (ReLU, max, clip) within that step: at step " << step << " the difference is " << std::fixed
             << std::setprecision(8) << fine << ", relative error " << std::scientific << std::setprecision(1) << e;
    }
    if (!ok) line << "  FAILED";
    r.lines.push_back(line.str());
    if (!ok) {
      r.passed = false;
      r.failure = kDisagrees;
    }
  }
  if (flat == directions)
    r.lines.push_back("  the loss does not change with the weights beyond rounding: training would change nothing");
  for (const auto& p : bo.params) fex.set_state(p, g.initializers.at(p));
  return r;
}

// A training-mode BatchNormalization over very few values per channel (a 32x32 image at its last stage
// is 1x1, so a batch of 2 gives 2 values: each output is then +-1 whatever the input, up to eps) has a
// loss so steep that central differences disagree with any backward graph (torchvision's MobileNet V2,
// RegNet, DenseNet and EfficientNet exported for 32x32 failed the check at the default batch of 2 and
// pass at 8). Where --dims leaves the batch symbol unsized, it gets the smallest size giving every such
// node at least 8 values per channel (at most 64): its name goes into `dims`, and `why` says so. Returns
// the symbol sized, or "".
std::string batch_for_batchnorm(const Graph& model, std::map<std::string, int64_t>& dims, std::string* why) {
  std::string batch;
  for (const auto& in : model.inputs) {
    const ValueInfo* vi = model.is_initializer(in) ? nullptr : model.info(in);
    if (vi && vi->has_shape && !vi->shape.empty() && !vi->shape[0].param.empty()) {
      batch = vi->shape[0].param;
      break;
    }
  }
  if (batch.empty() || dims.count(batch)) return "";
  constexpr int64_t kMinValues = 8;
  int64_t fewest = 0;  // values per example and channel
  std::string node;
  for (const Node& n : model.nodes) {
    if (n.op_type != "BatchNormalization" || !n.domain.empty() || n.inputs.empty()) continue;
    if (!batch_norm_training(n, model.opset(""))) continue;
    const ValueInfo* vi = model.info(n.inputs[0]);
    if (!vi || !vi->has_shape || vi->shape.empty() || vi->shape[0].param != batch) continue;
    int64_t per_example = 1;
    for (size_t i = 2; i < vi->shape.size(); ++i) {
      const Dim& d = vi->shape[i];
      per_example *= d.known() ? d.size : dims.count(d.param) ? dims.at(d.param) : 2;
      if (per_example >= kMinValues) break;
    }
    if (node.empty() || per_example < fewest) fewest = per_example, node = n.name;
  }
  if (node.empty() || 2 * fewest >= kMinValues || fewest < 1) return "";
  const int64_t size = std::min<int64_t>(64, (kMinValues + fewest - 1) / fewest);
  dims[batch] = size;
  std::ostringstream s;
  s << "random batch: " << batch << "=" << size << ", since BatchNormalization '" << node << "' normalises "
    << fewest << " value" << (fewest > 1 ? "s" : "") << " per example and channel (over 2 examples its loss is "
    << "too steep for central differences; --dims " << batch << "=SIZE sets it)";
  *why = s.str();
  return batch;
}

}  // namespace

int cmd_check(const std::vector<std::string>& argv) {
  const Command& cmd = check_command();
  Args args(cmd, argv);
  if (args.help()) {
    std::cout << cmd.help();
    return 0;
  }
  if (args.positional().size() != 1)
    throw Error(args.usage_error(args.positional().empty() ? "no model given"
                                                           : "expected one model file, got " +
                                                                 std::to_string(args.positional().size())));
  const int64_t directions64 = args.get_int("directions", 3);  // (checked before it narrows to int)
  if (directions64 < 1 || directions64 > 100) throw Error(args.usage_error("--directions must be in 1..100"));
  const int directions = static_cast<int>(directions64);
  const int64_t seed64 = args.get_int("seed", 1);
  if (seed64 < 0) throw Error(args.usage_error("--seed must be >= 0, got " + args.get("seed")));
  const uint64_t seed = static_cast<uint64_t>(seed64);
  const double smoothing = args.has("label-smoothing") ? parse_label_smoothing(args, autodiff::LossKind::CrossEntropy) : -1;
  std::map<std::string, int64_t> dims = parse_dims(args);
  const std::string path = args.positional()[0];
  // (As train and grad do before their backward pass: loaded for training (initializers the exporter merged by value
  // separate, Gradient nodes expanded in the training form), a model below opset 13 converted to opset 15,
  // BatchNormalization and Dropout in their training form, pads torch computes from Constants folded. The check
  // differentiates what train differentiates: a model exported in eval mode normalises by its batch's statistics
  // there, not by its running ones.)
  Graph loaded = load_onnx_for_training(path);  // Error: exit 2
  Graph model = runtime::fold_pads_on_cpu(passes::to_training(passes::convert_opset_for_training(loaded)));
  // Q/DQ pairs train straight through (pass fake_quantize, as PyTorch's QAT): that gradient is no derivative of
  // the rounding, so no difference quotient can confirm it. The check takes each pair as the identity it is
  // straight through and checks the rest of the model.
  int fake_quantized = 0;
  {
    Graph fq = passes::fake_quantize(model);
    for (Node& n : fq.nodes)
      if (n.op_type == "FakeQuantize" && n.domain == kGraphrunDomain) {
        n = Node{n.name, "Identity", "", {n.inputs[0]}, n.outputs, {}};
        ++fake_quantized;
      }
    if (fake_quantized) model = fq;
  }
  // The batch symbolic as train makes it (a fixed export batch becomes N), so that --dims can size it;
  // a model that bakes its batch into a constant, which train refuses, is checked at its own batch.
  const Graph exported = model;
  bool made_symbolic = false;
  const bool dims_given = !dims.empty();
  try {
    std::vector<std::string> data_inputs;
    for (const auto& in : model.inputs)
      if (!model.is_initializer(in)) data_inputs.push_back(in);
    model = passes::make_batch_symbolic_pass(data_inputs).run(model);
    made_symbolic = true;
  } catch (const Error&) {
  }
  check_dims_known(args, dims, model, false);
  std::set<std::string> read(model.outputs.begin(), model.outputs.end());
  for (const Node& n : model.nodes) read.insert(n.inputs.begin(), n.inputs.end());

  std::cout << "graphrun check " << path << ": " << model.nodes.size() << " nodes\n";
  if (fake_quantized)
    std::cout << "note: " << fake_quantized << " QuantizeLinear/DequantizeLinear pair" << (fake_quantized > 1 ? "s" : "")
              << " train straight through (as PyTorch's quantization-aware training): the check takes them as "
                 "identities, since a straight-through gradient is no derivative of the rounding\n";
  if (std::string why; !batch_for_batchnorm(model, dims, &why).empty()) std::cout << why << "\n";
  std::vector<std::string> no_kernel, no_rule, no_rank;
  for (const Node& n : model.nodes) {
    const OpFacts* f = op_table().find(n);
    if (!f || !f->kernel(Device::Kind::CPU)) no_kernel.push_back("op '" + n.op_key() + "' (node '" + n.name + "')");
    for (const auto& o : n.outputs) {
      // (An output nothing reads, such as a training BatchNormalization's running statistics, does not matter.)
      const ValueInfo* vi = o.empty() ? nullptr : model.info(o);
      if (!o.empty() && read.count(o) && (!vi || !vi->has_shape)) no_rank.push_back("'" + o + "' (output of node '" + n.name + "')");
    }
  }
  print_list("ops without a kernel", no_kernel);
  print_list("values without a rank", no_rank);
  GradCheck gc;
  gc.failure = missing_rules(model, &no_rule);
  print_list("ops without a gradient rule on the path to the outputs", no_rule);
  for (const auto& note : autodiff::colliding_scatter_notes(runtime::fold_constants_on_cpu(model))) std::cout << "note: " << note << "\n";
  if (!no_kernel.empty()) {
    gc.failure = no_rule.empty() && gc.failure.empty() ? "ops have no kernel" : "ops have no kernel; " + gc.failure;
  } else if (gc.failure.empty()) {
    auto check = [&](const Graph& m, std::map<std::string, int64_t>& d) {
      GradCheck r = gradient_check(m, directions, seed, d, smoothing);
      // The weights themselves may sit on corners of the loss that no step leaves: an identity grid samples
      // exactly at pixel centres (PyTorch's spatial transformer tutorial zeroes the localisation net's last
      // layer), where bilinear interpolation has a corner, and a zeroed layer makes values tie. Then the
      // check runs again at weights moved by 1e-4 of each tensor's scale, off those corners; a wrong
      // gradient fails there as well.
      if (!r.passed && r.failure == kDisagrees) {
        GradCheck moved = gradient_check(m, directions, seed, d, smoothing, 1e-4);
        r.lines.push_back("at weights moved by 1e-4 of each tensor's scale (off corners the weights themselves may "
                          "sit on: a grid at exact pixel centres, a zeroed layer's ties):");
        if (!moved.lines.empty())  // (not its header line again)
          r.lines.insert(r.lines.end(), moved.lines.begin() + 1, moved.lines.end());
        r.passed = moved.passed;
        r.failure = moved.failure;
      }
      return r;
    };
    try {
      gc = check(model, dims);
    } catch (const Error& e) {
      gc = {false, std::string("the gradient check cannot run: ") + e.what() +
                       (dims.empty() ? " (its random batch gives symbolic dimensions the size 2: --dims NAME=SIZE)" : ""),
            {}};
      // An export that keeps its batch in a constant (a Reshape to [4, -1, ...]) cannot run at another batch
      // size: without --dims, the check runs again at the batch the model was exported with.
      if (made_symbolic && !dims_given) {
        try {
          std::map<std::string, int64_t> none;
          GradCheck own = check(exported, none);
          own.lines.insert(own.lines.begin(), std::string("random batch: the export's own batch, since at another size ") +
                                                  e.what());
          gc = own;
        } catch (const Error&) {
        }
      }
    }
    for (const auto& l : gc.lines) std::cout << l << "\n";
  }
  if (gc.passed) {
    std::cout << "verdict: trainable (every op has a kernel and a gradient; the gradient check passed)\n";
    return 0;
  }
  // A check that could not run on its random batch says so: the model may well train on real data.
  std::cout << (gc.failure.rfind("the gradient check cannot run", 0) == 0 ? "verdict: not checked: "
                                                                            : "verdict: not trainable: ")
            << gc.failure << "\n";
  return 1;
}

}  // namespace graphrun::cli

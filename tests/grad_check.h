// Test helpers for autodiff: small graphs built node by node, and a numeric gradient check that runs
// forward + backward through the executor in double precision and compares with central differences.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>

#include "autodiff/autodiff.h"
#include "runtime/executor.h"
#include "tests/test_util.h"

namespace graphrun::testing {

inline Tensor random_f64(const Shape& shape, uint64_t seed, double lo = -1, double hi = 1) {
  Tensor t(DType::F64, shape);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> d(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] = d(rng);
  return t;
}

inline Tensor i64s(const std::vector<int64_t>& v, Shape shape = {-1}) {
  if (shape == Shape{-1}) shape = {static_cast<int64_t>(v.size())};
  return Tensor::from_vector<int64_t>(shape, v);
}

// A graph assembled node by node. Float initializers are the values the check differentiates.
struct TestGraph {
  Graph g;
  std::map<std::string, Tensor> feeds;
  int counter = 0;

  explicit TestGraph(int64_t opset = 17) {
    g.name = "test";
    g.opsets[""] = opset;
  }
  std::string param(const std::string& name, Tensor t) {
    g.initializers[name] = t;
    return name;
  }
  std::string param(const std::string& name, const Shape& s, uint64_t seed, double lo = -1, double hi = 1) {
    return param(name, random_f64(s, seed, lo, hi));
  }
  std::string input(const std::string& name, Tensor t) {
    g.inputs.push_back(name);
    ValueInfo vi{t.dtype(), true, {}};
    for (int64_t d : t.shape()) vi.shape.push_back(Dim(d));
    g.values[name] = vi;
    feeds[name] = t;
    return name;
  }
  std::vector<std::string> node_n(const std::string& op, const std::vector<std::string>& ins, int nout,
                                  std::map<std::string, Attribute> attrs = {}, const std::string& domain = "") {
    Node n;
    n.op_type = op;
    n.domain = domain;
    n.name = op + "_" + std::to_string(counter++);
    n.inputs = ins;
    for (int i = 0; i < nout; ++i) n.outputs.push_back(n.name + "_out" + std::to_string(i));
    n.attrs = std::move(attrs);
    g.nodes.push_back(n);
    return n.outputs;
  }
  std::string node(const std::string& op, const std::vector<std::string>& ins,
                   std::map<std::string, Attribute> attrs = {}) {
    return node_n(op, ins, 1, std::move(attrs))[0];
  }
};

enum class ShapeInfo { Static, RankOnly, None };

// Records the dtype and shape every value had in a run of g: the shape information an importer gives.
inline void fill_value_infos(Graph& g, const std::map<std::string, Tensor>& feeds, ShapeInfo how) {
  Graph probe = g;
  std::vector<std::string> all;
  for (const Node& n : probe.nodes)
    for (const auto& o : n.outputs)
      if (!o.empty()) all.push_back(o);
  runtime::ExecOptions o;
  o.fetch = all;
  runtime::Executor ex(probe, o);
  ex.run(feeds);
  for (const auto& [name, ts] : ex.value_types()) {
    if (g.values.count(name) && how != ShapeInfo::Static) continue;
    ValueInfo vi{ts.first, how != ShapeInfo::None, {}};
    if (how != ShapeInfo::None)
      for (int64_t d : ts.second) vi.shape.push_back(how == ShapeInfo::Static ? Dim(d) : Dim());
    g.values[name] = vi;
  }
  if (how == ShapeInfo::RankOnly)  // the batch-like unknowns also for inputs
    for (const auto& in : g.inputs)
      for (auto& d : g.values[in].shape) d = Dim();
}

struct CheckOptions {
  ShapeInfo shapes = ShapeInfo::Static;
  std::set<std::string> wrt;  // default: every f64 initializer
  double eps = 1e-6;
  double tol = 1e-6;          // on |analytic - numeric| / max(1, max |numeric|)
  int max_points = 48;        // elements perturbed per parameter
};

inline CheckOptions shapes(ShapeInfo si) { CheckOptions o; o.shapes = si; return o; }
inline CheckOptions wrt(std::set<std::string> names) { CheckOptions o; o.wrt = std::move(names); return o; }
inline CheckOptions tolerance(double tol) { CheckOptions o; o.tol = tol; return o; }

// Loss = sum(y * R) for a fixed random R, so every element of dL/dy differs. Returns the backward graph.
inline Graph check_gradients(TestGraph tg, const std::string& y, CheckOptions opt = {}) {
  Graph g = tg.g;
  g.outputs = {y};
  fill_value_infos(g, tg.feeds, opt.shapes);
  // The output's shape, from a forward run.
  Shape ys;
  {
    runtime::Executor ex(g);
    ys = ex.run(tg.feeds).at(y).shape();
  }
  tg.feeds["loss_weights"] = random_f64(ys, 977);
  g.inputs.push_back("loss_weights");
  g.values["loss_weights"] = ValueInfo{DType::F64, true, {}};
  for (int64_t d : ys) g.values["loss_weights"].shape.push_back(opt.shapes == ShapeInfo::Static ? Dim(d) : Dim());
  g.nodes.push_back(Node{"loss_mul", "Mul", "", {y, "loss_weights"}, {"loss_prod"}, {}});
  g.nodes.push_back(Node{"loss_sum", "ReduceSum", "", {"loss_prod"}, {"loss"}, {{"keepdims", Attribute::Int(0)}}});
  g.values["loss"] = ValueInfo{DType::F64, true, {}};
  g.outputs.push_back("loss");

  autodiff::BackwardOptions bo;
  if (opt.wrt.empty()) {
    for (const auto& [name, t] : g.initializers)
      if (t.dtype() == DType::F64) bo.params.push_back(name);
  } else {
    bo.params.assign(opt.wrt.begin(), opt.wrt.end());
  }
  Graph bg = autodiff::backward(g, bo);

  runtime::ExecOptions eo;
  eo.fetch = {"loss"};
  for (const auto& p : bo.params) eo.fetch.push_back(p + "_grad");
  runtime::Executor bex(bg, eo);
  auto got = bex.run(tg.feeds);
  runtime::ExecOptions fo;
  fo.fetch = {"loss"};
  runtime::Executor fex(g, fo);
  double loss0 = fex.run(tg.feeds).at("loss").data<double>()[0];
  EXPECT_NEAR(got.at("loss").data<double>()[0], loss0, 1e-12 * std::max(1.0, std::fabs(loss0)));

  for (const auto& p : bo.params) {
    const Tensor grad = got.at(p + "_grad").clone();
    const Tensor w0 = g.initializers.at(p).clone();
    EXPECT_EQ(shape_str(grad.shape()), shape_str(w0.shape())) << "gradient of " << p;
    if (grad.shape() != w0.shape()) continue;
    const int64_t n = w0.numel();
    const int64_t stride = std::max<int64_t>(1, n / opt.max_points);
    double scale = 1, worst = 0;
    int64_t worst_at = -1;
    std::vector<std::pair<int64_t, double>> numeric;
    for (int64_t k = 0; k < n; k += stride) {
      Tensor w = w0.clone();
      w.data<double>()[k] = w0.data<double>()[k] + opt.eps;
      fex.set_state(p, w);
      double lp = fex.run(tg.feeds).at("loss").data<double>()[0];
      w.data<double>()[k] = w0.data<double>()[k] - opt.eps;
      fex.set_state(p, w);
      double lm = fex.run(tg.feeds).at("loss").data<double>()[0];
      double num = (lp - lm) / (2 * opt.eps);
      numeric.emplace_back(k, num);
      scale = std::max(scale, std::fabs(num));
    }
    fex.set_state(p, w0);
    for (auto [k, num] : numeric) {
      double err = std::fabs(grad.data<double>()[k] - num);
      if (err > worst) worst = err, worst_at = k;
    }
    EXPECT_LE(worst / scale, opt.tol) << "d loss / d " << p << " at element " << worst_at << ": analytic "
                                      << grad.data<double>()[worst_at] << ", numeric "
                                      << [&] { for (auto [k, v] : numeric) if (k == worst_at) return v; return 0.0; }();
  }
  return bg;
}

inline int count_ops(const Graph& g, const std::string& op) {
  int c = 0;
  for (const Node& n : g.nodes) c += n.op_type == op;
  return c;
}

}  // namespace graphrun::testing

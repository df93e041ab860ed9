// Helpers for the neural-network kernel tests (conv, pool, norm, linalg): dtype conversion,
// attribute shorthands and central-difference gradients of a forward op.
#pragma once
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "tests/test_util.h"

namespace graphrun::testing {

using Attrs = std::map<std::string, Attribute>;

inline Tensor to_f64(const Tensor& t) { return Tensor::from_vector<double>(t.shape(), t.as_doubles()); }
inline Tensor to_f32(const Tensor& t) {
  std::vector<double> d = t.as_doubles();
  return Tensor::from_vector<float>(t.shape(), std::vector<float>(d.begin(), d.end()));
}
inline Tensor as_dtype(const Tensor& t, DType dt) { return dt == DType::F64 ? to_f64(t) : to_f32(t); }
inline Tensor random_f64(const Shape& s, uint64_t seed, float lo = -1.f, float hi = 1.f) {
  return to_f64(random_tensor(s, seed, lo, hi));
}

// sum(f(inputs) * weight): the scalar whose gradient a gradient op computes when given dY = weight.
inline double weighted_sum(const Tensor& y, const Tensor& weight) {
  std::vector<double> a = y.as_doubles(), b = weight.as_doubles();
  EXPECT_EQ(a.size(), b.size());
  double s = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) s += a[i] * b[i];
  return s;
}

// Central differences of sum(f(inputs) * dy) with respect to inputs[which] (an f64 tensor).
inline Tensor numeric_gradient(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                               std::vector<Tensor> inputs, int which, const Tensor& dy, double eps = 1e-5) {
  Tensor& v = inputs[which];
  v = v.clone();
  Tensor g(DType::F64, v.shape());
  double* p = v.data<double>();
  for (int64_t i = 0; i < v.numel(); ++i) {
    const double keep = p[i];
    p[i] = keep + eps;
    const double up = weighted_sum(f(inputs), dy);
    p[i] = keep - eps;
    const double down = weighted_sum(f(inputs), dy);
    p[i] = keep;
    g.data<double>()[i] = (up - down) / (2 * eps);
  }
  return g;
}

// Like run_node, with control over which outputs exist ("" = absent optional output; absent outputs
// come back undefined), intra-op threads, and a second (planned) run whose outputs are returned.
inline std::vector<Tensor> run_node_ex(const std::string& op, const std::vector<Tensor>& inputs, const Attrs& attrs,
                                       const std::vector<bool>& outputs, int threads = 1, int64_t opset = 17,
                                       const std::string& domain = "") {
  std::map<std::string, Tensor> feeds;
  Graph g = testing::single_node_graph(op, inputs, attrs, static_cast<int>(outputs.size()), opset, domain, feeds);
  Node& n = g.nodes[0];
  g.outputs.clear();
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!outputs[i]) n.outputs[i] = "";
    else g.outputs.push_back(n.outputs[i]);
  }
  runtime::ExecOptions opts;
  opts.threads = threads;
  opts.poison_scratch = true;  // a kernel reading scratch it did not write gives NaN
  runtime::Executor ex(g, opts);
  ex.run(feeds);
  auto out = ex.run(feeds);
  std::vector<Tensor> r;
  for (const auto& name : g.nodes[0].outputs) r.push_back(name.empty() ? Tensor() : out.at(name).clone());
  return r;
}

inline Attribute ints(std::vector<int64_t> v) { return Attribute::Ints(std::move(v)); }
inline Attribute int1(int64_t v) { return Attribute::Int(v); }
inline Attribute str(std::string v) { return Attribute::Str(std::move(v)); }
inline Attribute flt(float v) { return Attribute::Float(v); }

}  // namespace graphrun::testing

// The random ops (RandomNormal, RandomUniform, their *Like forms, Bernoulli): shapes and types as the spec
// says, moments of many draws, fresh draws at each run from the executor's generator and the same draws at each
// run where the node has a seed; and graphrun check on a VAE's reparameterisation, whose noise the float64
// copy fixes so that central differences see one function.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "graph/float64.h"
#include "runtime/executor.h"
#include "tests/test_util.h"

namespace graphrun::testing {
namespace {

using A = Attribute;

std::pair<double, double> moments(const Tensor& t) {
  const std::vector<double> v = t.as_doubles();
  double mean = 0, sq = 0;
  for (double x : v) mean += x;
  mean /= static_cast<double>(v.size());
  for (double x : v) sq += (x - mean) * (x - mean);
  return {mean, std::sqrt(sq / static_cast<double>(v.size()))};
}

TEST(Random, ShapesTypesAndMoments) {
  {
    const Tensor y = run_node("RandomNormal", {}, {{"shape", A::Ints({100, 200})}, {"mean", A::Float(2.f)},
                                                   {"scale", A::Float(0.5f)}})[0];
    EXPECT_EQ(y.dtype(), DType::F32);
    EXPECT_EQ(shape_str(y.shape()), "[100,200]");
    const auto [m, s] = moments(y);
    EXPECT_NEAR(m, 2.0, 0.01);
    EXPECT_NEAR(s, 0.5, 0.01);
  }
  {
    const Tensor y = run_node("RandomUniform", {}, {{"shape", A::Ints({20000})}, {"low", A::Float(-1.f)},
                                                    {"high", A::Float(3.f)}, {"dtype", A::Int(11)}})[0];
    EXPECT_EQ(y.dtype(), DType::F64);
    const std::vector<double> v = y.as_doubles();
    EXPECT_GE(*std::min_element(v.begin(), v.end()), -1.0);
    EXPECT_LT(*std::max_element(v.begin(), v.end()), 3.0);
    EXPECT_NEAR(moments(y).first, 1.0, 0.05);
  }
  {  // *Like: the input's shape and, without dtype, its type
    const Tensor x(DType::F64, {3, 5});
    const Tensor y = run_node("RandomNormalLike", {x})[0];
    EXPECT_EQ(y.dtype(), DType::F64);
    EXPECT_EQ(shape_str(y.shape()), "[3,5]");
    EXPECT_EQ(run_node("RandomUniformLike", {x}, {{"dtype", A::Int(10)}})[0].dtype(), DType::F16);
  }
  {  // Bernoulli: 0 or 1, about p of them 1, exactly where p is 0 or 1
    std::vector<float> p(10000, 0.3f);
    p[0] = 0.f, p[1] = 1.f;
    const Tensor y = run_node("Bernoulli", {Tensor::from_vector<float>({10000}, p)}, {}, 1, 15)[0];
    EXPECT_EQ(y.dtype(), DType::F32);
    const std::vector<double> v = y.as_doubles();
    EXPECT_EQ(v[0], 0);
    EXPECT_EQ(v[1], 1);
    for (double b : v) ASSERT_TRUE(b == 0 || b == 1);
    EXPECT_NEAR(moments(y).first, 0.3, 0.02);
    EXPECT_EQ(run_node("Bernoulli", {Tensor::from_vector<float>({2}, {0.f, 1.f})}, {{"dtype", A::Int(9)}}, 1, 15)[0]
                  .dtype(),
              DType::Bool);
  }
}

// Without a seed each run draws afresh (a VAE's noise changes at every step), from the executor's generator,
// which checkpoints save; with one, every run draws the same numbers, as ONNX's reference does.
TEST(Random, FreshDrawsEachRunUnlessSeeded) {
  for (bool seeded : {false, true}) {
    SCOPED_TRACE(seeded ? "seeded" : "unseeded");
    std::map<std::string, Tensor> feeds;
    std::map<std::string, Attribute> attrs{{"shape", A::Ints({8})}};
    if (seeded) attrs["seed"] = A::Float(7.f);
    const Graph g = single_node_graph("RandomNormal", {}, attrs, 1, 17, "", feeds);
    runtime::Executor ex(g);
    const std::vector<float> a = ex.run(feeds).at(g.outputs[0]).to_vector<float>();
    const std::vector<float> b = ex.run(feeds).at(g.outputs[0]).to_vector<float>();
    EXPECT_EQ(a == b, seeded);
    runtime::Executor other(g);  // a fresh executor starts its generator at the same state
    EXPECT_EQ(other.run(feeds).at(g.outputs[0]).to_vector<float>(), a);
  }
  EXPECT_THROW(run_node("RandomNormal", {}, {}), Error);  // no shape
  EXPECT_THROW(run_node("RandomUniform", {}, {{"shape", A::Ints({2})}, {"low", A::Float(2.f)}, {"high", A::Float(1.f)}}),
               Error);
  EXPECT_THROW(run_node("Bernoulli", {Tensor::from_vector<float>({1}, {1.5f})}, {}, 1, 15), Error);
}

// The float64 copy fixes the draws only for graphrun check: train --float64 keeps Dropout's mask and the random ops'
// noise fresh at each step (it once fixed Dropout's mask for a whole run).
TEST(Random, Float64CopySeedsOnlyWhenAsked) {
  Graph g;
  g.inputs = {"x"};
  g.values["x"] = ValueInfo{DType::F32, true, {Dim(2), Dim(3)}};
  g.nodes.push_back(make_node("drop", "Dropout", {"x"}, {"d"}));
  g.nodes.push_back(make_node("noise", "RandomNormalLike", {"d"}, {"n"}));
  g.nodes.push_back(make_node("uniform", "RandomUniform", {}, {"u"}));
  g.nodes.back().attrs["shape"] = A::Ints({2});
  g.outputs = {"n", "u"};
  for (bool fixed : {false, true}) {
    const Graph d = float64_copy(g, fixed);
    EXPECT_EQ(d.nodes[0].has_attr("seed"), fixed);
    EXPECT_EQ(d.nodes[1].has_attr("seed"), fixed);
    EXPECT_EQ(d.nodes[2].has_attr("seed"), fixed);
    EXPECT_EQ(d.nodes[2].attr_i("dtype", 0), static_cast<int64_t>(DType::F64));  // RandomUniform's default float
  }
}

// A VAE's reparameterisation z = mu + eps * exp(logvar / 2), eps = RandomNormalLike(mu), as torch exports
// torch.randn_like: graphrun check passes (its float64 copy seeds the noise; unseeded, central differences
// would compare two different functions).
TEST(Random, CheckPassesOnAVaeReparameterisation) {
  const std::string dir = temp_dir("random_vae");
  const std::string path = dir + "/vae.onnx";
  std::ofstream(dir + "/make.py")
      << "import numpy as np, onnx\n"
         "from onnx import helper as h, numpy_helper as nh, TensorProto as T\n"
         "r = np.random.default_rng(0)\n"
         "inits = [nh.from_array(r.standard_normal((4, 2)).astype(np.float32), 'wm'),\n"
         "         nh.from_array(r.standard_normal((4, 2)).astype(np.float32), 'wv'),\n"
         "         nh.from_array(np.array([0.5], np.float32), 'half')]\n"
         "g = h.make_graph([h.make_node('MatMul', ['x', 'wm'], ['mu']), h.make_node('MatMul', ['x', 'wv'], ['lv']),\n"
         "                  h.make_node('RandomNormalLike', ['mu'], ['eps']), h.make_node('Mul', ['lv', 'half'], ['hl']),\n"
         "                  h.make_node('Exp', ['hl'], ['sd']), h.make_node('Mul', ['eps', 'sd'], ['n']),\n"
         "                  h.make_node('Add', ['mu', 'n'], ['z'])], 'vae',\n"
         "                 [h.make_tensor_value_info('x', T.FLOAT, ['N', 4])], [h.make_tensor_value_info('z', T.FLOAT, ['N', 2])],\n"
         "                 inits)\n"
         "onnx.save(h.make_model(g, opset_imports=[h.make_opsetid('', 17)]), '" + path + "')\n";
  auto py = run_command(python() + " " + dir + "/make.py");
  ASSERT_EQ(py.exit_code, 0) << py.output;
  auto r = run_command(graphrun_cli() + " check " + path + " 2>&1");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("verdict: trainable"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace graphrun::testing

// BatchNormalization (inference, training in opsets 9 and 15, opset 7's spatial=0), LayerNormalization,
// InstanceNormalization, Dropout and the Grad ops of the three norms on the CPU: against formulas in double,
// PyTorch's training-mode running statistics, and central differences of the forward ops.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "graph/passes/train_mode.h"
#include "graph/tensor_io.h"
#include "runtime/executor.h"
#include "tests/nn_test_util.h"

namespace graphrun::testing {
namespace {

// Per-channel (or per-feature when per_channel is false) BatchNormalization in double. Returns
// Y, batch mean, biased batch var.
struct BnRef {
  Tensor y;
  std::vector<double> mean, var;
};
BnRef ref_bn(const Tensor& X, const Tensor& scale, const Tensor& B, const Tensor& mean_in, const Tensor& var_in,
             bool training, double eps, bool per_channel = true) {
  auto x = X.as_doubles(), sc = scale.as_doubles(), b = B.as_doubles(), m0 = mean_in.as_doubles(), v0 = var_in.as_doubles();
  int64_t N = X.dim(0), F = X.dim(1), S = X.numel() / (N * F);
  if (!per_channel) F *= S, S = 1;
  BnRef r{Tensor(DType::F64, X.shape()), m0, v0};
  for (int64_t f = 0; f < F; ++f) {
    if (training) {
      double s = 0, sq = 0;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t i = 0; i < S; ++i) s += x[(n * F + f) * S + i];
      r.mean[f] = s / (N * S);
      for (int64_t n = 0; n < N; ++n)
        for (int64_t i = 0; i < S; ++i) sq += std::pow(x[(n * F + f) * S + i] - r.mean[f], 2);
      r.var[f] = sq / (N * S);
    }
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < S; ++i) {
        const int64_t k = (n * F + f) * S + i;
        r.y.data<double>()[k] = (x[k] - r.mean[f]) / std::sqrt(r.var[f] + eps) * sc[f] + b[f];
      }
  }
  return r;
}

Tensor vec(const std::vector<double>& v, DType dt) { return as_dtype(Tensor::from_vector<double>({(int64_t)v.size()}, v), dt); }

class Norm : public ::testing::TestWithParam<DType> {};

TEST_P(Norm, BatchNormInferenceUsesTheGivenStatistics) {
  const DType dt = GetParam();
  for (const Shape& s : {Shape{4, 3}, Shape{2, 3, 4, 5}, Shape{2, 2, 3}}) {
    const int64_t C = s[1];
    Tensor x = as_dtype(random_tensor(s, 1), dt), scale = as_dtype(random_tensor({C}, 2), dt),
           b = as_dtype(random_tensor({C}, 3), dt), mean = as_dtype(random_tensor({C}, 4), dt),
           var = as_dtype(random_tensor({C}, 5, 0.5f, 2.f), dt);
    const Attrs at{{"epsilon", flt(1e-3f)}};
    Tensor want = ref_bn(x, scale, b, mean, var, false, static_cast<double>(1e-3f)).y;
    for (int64_t opset : {9, 15}) {
      Tensor got = run_node("BatchNormalization", {x, scale, b, mean, var}, at, 1, opset)[0];
      EXPECT_LT(max_rel_diff(got, want), dt == DType::F64 ? 1e-12 : 1e-5) << shape_str(s) << " opset " << opset;
    }
  }
}

TEST_P(Norm, BatchNormTrainingUsesBatchStatisticsAndBiasedRunningVar) {
  const DType dt = GetParam();
  const Shape s{4, 3, 2, 5};
  const int64_t C = 3;
  Tensor x = as_dtype(random_tensor(s, 11, -2, 3), dt), scale = as_dtype(random_tensor({C}, 12), dt),
         b = as_dtype(random_tensor({C}, 13), dt), mean = as_dtype(random_tensor({C}, 14), dt),
         var = as_dtype(random_tensor({C}, 15, 0.5f, 2.f), dt);
  const double momentum = static_cast<double>(0.8f), eps = static_cast<double>(1e-5f);
  BnRef r = ref_bn(x, scale, b, mean, var, true, eps);
  std::vector<double> rm(C), rv(C), m0 = mean.as_doubles(), v0 = var.as_doubles();
  for (int64_t c = 0; c < C; ++c) {
    rm[c] = m0[c] * momentum + r.mean[c] * (1 - momentum);
    rv[c] = v0[c] * momentum + r.var[c] * (1 - momentum);  // the biased variance, as ONNX's spec
  }
  const double tol = dt == DType::F64 ? 1e-12 : 1e-5;
  // opset 15: training_mode=1, outputs Y, running_mean, running_var.
  auto got = run_node("BatchNormalization", {x, scale, b, mean, var},
                      {{"training_mode", int1(1)}, {"momentum", flt(0.8f)}}, 3, 15);
  EXPECT_LT(max_rel_diff(got[0], r.y), tol);
  EXPECT_LT(max_rel_diff(got[1], vec(rm, DType::F64)), tol);
  EXPECT_LT(max_rel_diff(got[2], vec(rv, DType::F64)), tol);
  // opset 9: training is selected by the extra outputs; saved_mean/saved_var are the batch statistics.
  auto got9 = run_node("BatchNormalization", {x, scale, b, mean, var}, {{"momentum", flt(0.8f)}}, 5, 9);
  EXPECT_LT(max_rel_diff(got9[0], r.y), tol);
  EXPECT_LT(max_rel_diff(got9[1], vec(rm, DType::F64)), tol);
  EXPECT_LT(max_rel_diff(got9[2], vec(rv, DType::F64)), tol);
  EXPECT_LT(max_rel_diff(got9[3], vec(r.mean, DType::F64)), tol);
  EXPECT_LT(max_rel_diff(got9[4], vec(r.var, DType::F64)), tol);
  // opset 15 without training_mode is inference even on the same inputs.
  Tensor inf = run_node("BatchNormalization", {x, scale, b, mean, var}, {}, 1, 15)[0];
  EXPECT_LT(max_rel_diff(inf, ref_bn(x, scale, b, mean, var, false, eps).y), tol);
}

TEST_P(Norm, BatchNormOpset7SpatialZeroHasPerActivationStatistics) {
  const DType dt = GetParam();
  const Shape s{3, 2, 2, 2};
  Tensor x = as_dtype(random_tensor(s, 21), dt);
  auto param = [&](uint64_t seed, float lo, float hi) { return as_dtype(random_tensor({2, 2, 2}, seed, lo, hi), dt); };
  Tensor scale = param(22, -1, 1), b = param(23, -1, 1), mean = param(24, -1, 1), var = param(25, 0.5f, 2);
  Tensor got = run_node("BatchNormalization", {x, scale, b, mean, var}, {{"spatial", int1(0)}}, 1, 7)[0];
  EXPECT_LT(max_rel_diff(got, ref_bn(x, scale, b, mean, var, false, static_cast<double>(1e-5f), false).y),
            dt == DType::F64 ? 1e-12 : 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, Norm, ::testing::Values(DType::F32, DType::F64),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// PyTorch's BatchNorm2d in training mode (momentum 0.1 = ONNX momentum 0.9) on the same numbers: the
// op itself gives ONNX's running_var (biased batch variance); the training form's correction nodes
// give PyTorch's (unbiased), and the state update persists theirs.
TEST(Norm, BatchNormTrainingMatchesPyTorchRunningStatistics) {
  const std::string dir = temp_dir("norm_torch");
  const std::string script = dir + "/bn.py";
  std::ofstream(script) << "import torch\n"
                           "torch.manual_seed(0)\n"
                           "x = torch.randn(4, 3, 5, 5, dtype=torch.float64)\n"
                           "bn = torch.nn.BatchNorm2d(3, momentum=0.1, eps=1e-5).double().train()\n"
                           "bn.running_mean.fill_(0.25); bn.running_var.fill_(1.5)\n"
                           "y = bn(x)\n"
                           "for t in (x, y, bn.running_mean, bn.running_var):\n"
                           "    print(' '.join(repr(float(v)) for v in t.detach().flatten()))\n";
  CommandResult r = run_command(python() + " " + script);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::istringstream lines(r.output);
  std::vector<std::vector<double>> v;
  for (std::string line; std::getline(lines, line);) {
    std::istringstream ls(line);
    v.emplace_back();
    for (double d; ls >> d;) v.back().push_back(d);
  }
  ASSERT_GE(v.size(), 4u) << r.output;
  Tensor x = Tensor::from_vector<double>({4, 3, 5, 5}, v[0]);
  Tensor ones = vec({1, 1, 1}, DType::F64), zeros = vec({0, 0, 0}, DType::F64);
  Tensor mean0 = vec({0.25, 0.25, 0.25}, DType::F64), var0 = vec({1.5, 1.5, 1.5}, DType::F64);
  const double m = static_cast<double>(0.9f);  // momentum is a float attribute
  std::vector<double> biased(3);
  const BnRef ref = ref_bn(x, ones, zeros, mean0, var0, true, 1e-5);
  for (int c = 0; c < 3; ++c) biased[c] = 1.5 * m + ref.var[c] * (1 - m);
  auto got = run_node("BatchNormalization", {x, ones, zeros, mean0, var0},
                      {{"training_mode", int1(1)}, {"momentum", flt(0.9f)}}, 3, 15);
  EXPECT_LT(max_abs_diff(got[0], Tensor::from_vector<double>({4, 3, 5, 5}, v[1])), 1e-9);
  EXPECT_LT(max_abs_diff(got[1], Tensor::from_vector<double>({3}, v[2])), 1e-7);
  EXPECT_LT(max_abs_diff(got[2], Tensor::from_vector<double>({3}, biased)), 1e-12);
  EXPECT_GT(max_abs_diff(got[2], Tensor::from_vector<double>({3}, v[3])), 1e-4);  // the two conventions differ

  Graph g;
  g.name = "bn";
  g.opsets[""] = 15;
  g.inputs = {"x"};
  g.outputs = {"y"};
  g.values["x"] = value_info_of(x);
  g.initializers = {{"scale", ones}, {"bias", zeros}, {"mean", mean0}, {"var", var0}};
  g.nodes = {Node{"bn", "BatchNormalization", "", {"x", "scale", "bias", "mean", "var"}, {"y"}, {{"momentum", flt(0.9f)}}}};
  const Graph t = passes::unbiased_running_var(passes::to_training(g));
  const Node* fix = nullptr;
  for (const Node& n : t.nodes)
    if (n.name == "bn/unbiased_running_var") fix = &n;
  ASSERT_NE(fix, nullptr) << "no correction node after the training-mode BatchNormalization";
  const auto ups = passes::batchnorm_state_updates(t);
  ASSERT_EQ(ups.size(), 2u);
  EXPECT_EQ(ups[1], std::make_pair(fix->outputs[0], std::string("var")));
  Graph fetch = t;
  fetch.outputs.push_back(t.nodes[0].outputs[1]);
  fetch.outputs.push_back(t.nodes[0].outputs[2]);
  auto out = runtime::Executor(fetch).run({{"x", x}});
  EXPECT_LT(max_abs_diff(out.at(ups[0].first), Tensor::from_vector<double>({3}, v[2])), 1e-7);
  EXPECT_LT(max_abs_diff(out.at(ups[1].first), Tensor::from_vector<double>({3}, v[3])), 1e-7);
  EXPECT_LT(max_abs_diff(out.at(t.nodes[0].outputs[2]), Tensor::from_vector<double>({3}, biased)), 1e-12);
}

// `graphrun run` on a training-mode BatchNormalization: ONNX's running_var, the biased batch variance
// (numpy's x.var), not PyTorch's unbiased one.
TEST(Norm, RunGivesOnnxBiasedRunningVar) {
  const std::string dir = temp_dir("norm_run_bn");
  std::ofstream(dir + "/make.py")
      << "import numpy as np, onnx, sys\n"
         "from onnx import helper as h, numpy_helper as nh, TensorProto as T\n"
         "d = sys.argv[1]\n"
         "x = np.random.default_rng(3).normal(size=(2, 3, 2, 2)).astype(np.float32)\n"
         "v = np.array([1.5, 0.5, 2.0], np.float32)\n"
         "init = [nh.from_array(np.ones(3, np.float32), 's'), nh.from_array(np.zeros(3, np.float32), 'b'),\n"
         "        nh.from_array(np.zeros(3, np.float32), 'm'), nh.from_array(v, 'v')]\n"
         "bn = h.make_node('BatchNormalization', ['x', 's', 'b', 'm', 'v'], ['y', 'rm', 'rv'], training_mode=1,\n"
         "                 momentum=0.75)\n"
         "out = [h.make_tensor_value_info(n, T.FLOAT, s) for n, s in (('y', x.shape), ('rm', [3]), ('rv', [3]))]\n"
         "g = h.make_graph([bn], 'bn', [h.make_tensor_value_info('x', T.FLOAT, x.shape)], out, init)\n"
         "onnx.save(h.make_model(g, opset_imports=[h.make_opsetid('', 15)]), d + '/bn.onnx')\n"
         "np.save(d + '/x.npy', x)\n"
         "np.save(d + '/want.npy', (0.75 * v + 0.25 * x.var(axis=(0, 2, 3))).astype(np.float32))\n";
  CommandResult made = run_command(python() + " " + dir + "/make.py " + dir);
  ASSERT_EQ(made.exit_code, 0) << made.output;
  CommandResult r = run_command(graphrun_cli() + " run " + dir + "/bn.onnx --input x=" + dir + "/x.npy --output-dir " + dir);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_LT(max_abs_diff(read_npy(dir + "/rv.npy"), read_npy(dir + "/want.npy")), 1e-6);
}

TEST(Norm, BatchNormalizationGradMatchesCentralDifferences) {
  for (const Shape& s : {Shape{5, 3}, Shape{3, 2, 3, 4}}) {
    const int64_t C = s[1];
    Tensor x = random_f64(s, 31, -2, 2), scale = random_f64({C}, 32), b = random_f64({C}, 33);
    Tensor mean = random_f64({C}, 34), var = random_f64({C}, 35, 0.5f, 2.f);
    const Attrs at{{"training_mode", int1(1)}, {"epsilon", flt(1e-3f)}};
    auto bn = [&](const std::vector<Tensor>& in) { return run_node("BatchNormalization", in, at, 1, 15)[0]; };
    Tensor dy = random_f64(s, 36);
    for (int threads : {1, 2}) {
      auto g = run_node_ex("BatchNormalizationGrad", {dy, x, scale}, {{"epsilon", flt(1e-3f)}}, {true, true, true},
                           threads, 15, "ai.graphrun");
      const std::vector<Tensor> in{x, scale, b, mean, var};
      EXPECT_LT(max_rel_diff(g[0], numeric_gradient(bn, in, 0, dy)), 1e-7) << shape_str(s) << " dX";
      EXPECT_LT(max_rel_diff(g[1], numeric_gradient(bn, in, 1, dy)), 1e-7) << shape_str(s) << " dscale";
      EXPECT_LT(max_rel_diff(g[2], numeric_gradient(bn, in, 2, dy)), 1e-7) << shape_str(s) << " dB";
    }
    auto only_dx = run_node_ex("BatchNormalizationGrad", {dy, x, scale}, {{"epsilon", flt(1e-3f)}},
                               {true, false, false}, 1, 15, "ai.graphrun");
    EXPECT_FALSE(only_dx[1].defined());
  }
}

// A channel whose mean is 1e5 of its spread (x = 1000 + 0.01 u): float32 keeps x's digits, and so must the
// normalisation. Y = x * a + b with b = B - mean * a (a = scale / std) cancels two numbers 1e5 times larger than Y
// and loses five digits (5e-4 of Y here); (x - mean) * a + B does not, with mean split in two floats (hi + lo)
// so that its own float32 rounding (6e-5 here, 6e-3 once scaled by a) does not come back. The gradient's
// sum(dY * (x - mean)) likewise. Against the same float32 values in double (the F64 kernel, which central
// differences check above).
TEST(Norm, BatchNormFloat32KeepsTheDigitsOfALargeMean) {
  const Shape s{4, 3, 8, 8};
  std::vector<double> xs = random_f64(s, 41).as_doubles();
  for (double& v : xs) v = 1000 + 0.01 * v;
  Tensor x32 = to_f32(Tensor::from_vector<double>(s, xs)), x64 = to_f64(x32);
  const std::vector<double> sc{1.5, -0.75, 2}, bias{0.25, -1, 0}, zero(3, 0.0), one(3, 1.0);
  auto rel = [](const Tensor& got, const Tensor& want) {
    double scale = 0;
    for (double v : want.as_doubles()) scale = std::max(scale, std::fabs(v));
    return max_abs_diff(to_f64(got), to_f64(want)) / scale;
  };
  const Attrs at{{"training_mode", int1(1)}};
  for (const char* op : {"BatchNormalization", "FusedBatchNormalization"}) {
    const bool fused = op[0] == 'F';
    Attrs a = at;
    if (fused) a["activation"] = Attribute::Str("Relu");
    auto y = [&](DType dt, const Tensor& x) {
      return run_node_ex(op, {x, vec(sc, dt), vec(bias, dt), vec(zero, dt), vec(one, dt)}, a, {true}, 1, 15,
                         fused ? "ai.graphrun" : "")[0];
    };
    EXPECT_LT(rel(y(DType::F32, x32), y(DType::F64, x64)), 1e-6) << op;
  }
  // Inference with the batch's own statistics (rounded to float32) as the running ones: the same cancellation.
  BnRef batch = ref_bn(x64, vec(sc, DType::F64), vec(bias, DType::F64), vec(zero, DType::F64), vec(one, DType::F64),
                       true, static_cast<double>(1e-5f));
  const Tensor m32 = vec(batch.mean, DType::F32), v32 = vec(batch.var, DType::F32);
  Tensor inf = run_node("BatchNormalization", {x32, vec(sc, DType::F32), vec(bias, DType::F32), m32, v32}, {}, 1, 15)[0];
  EXPECT_LT(rel(inf, ref_bn(x64, vec(sc, DType::F64), vec(bias, DType::F64), to_f64(m32), to_f64(v32), false,
                            static_cast<double>(1e-5f)).y), 1e-6);
  Tensor dy64 = random_f64(s, 42), dy32 = to_f32(dy64);
  dy64 = to_f64(dy32);
  auto grad = [&](DType dt, const Tensor& dy, const Tensor& x) {
    return run_node_ex("BatchNormalizationGrad", {dy, x, vec(sc, dt)}, {}, {true, true, true}, 1, 15, "ai.graphrun");
  };
  auto g32 = grad(DType::F32, dy32, x32), g64 = grad(DType::F64, dy64, x64);
  const char* what[] = {"dX", "dscale", "dB"};
  for (int i = 0; i < 3; ++i) EXPECT_LT(rel(g32[i], g64[i]), 1e-6) << what[i];
}

// LayerNormalization in double: Y, and the per-row mean and inverse standard deviation.
struct LnRef {
  Tensor y;
  std::vector<double> mean, invstd;
};
LnRef ref_ln(const Tensor& X, const Tensor& scale, const Tensor& B, int axis, double eps) {
  auto x = X.as_doubles(), sc = scale.as_doubles();
  std::vector<double> b = B.defined() ? B.as_doubles() : std::vector<double>(sc.size(), 0.0);
  int64_t inner = 1;
  for (int i = axis; i < X.rank(); ++i) inner *= X.dim(i);
  const int64_t outer = X.numel() / inner;
  LnRef r{Tensor(DType::F64, X.shape()), {}, {}};
  for (int64_t o = 0; o < outer; ++o) {
    double m = 0, v = 0;
    for (int64_t j = 0; j < inner; ++j) m += x[o * inner + j] / inner;
    for (int64_t j = 0; j < inner; ++j) v += std::pow(x[o * inner + j] - m, 2) / inner;
    r.mean.push_back(m);
    r.invstd.push_back(1 / std::sqrt(v + eps));
    for (int64_t j = 0; j < inner; ++j)
      r.y.data<double>()[o * inner + j] = (x[o * inner + j] - m) * r.invstd.back() * sc[j] + b[j];
  }
  return r;
}

TEST_P(Norm, LayerNormMatchesTheDefinitionOnEveryAxis) {
  const DType dt = GetParam();
  const Shape s{2, 3, 4};
  Tensor x = as_dtype(random_tensor(s, 41, -3, 3), dt);
  for (int64_t axis : {-1, -2, 0, 1, 2}) {
    const int a = static_cast<int>(axis < 0 ? axis + 3 : axis);
    const Shape ps(s.begin() + a, s.end());
    Tensor scale = as_dtype(random_tensor(ps, 42), dt), b = as_dtype(random_tensor(ps, 43), dt);
    for (bool with_b : {true, false}) {
      const double eps = static_cast<double>(1e-3f);
      LnRef want = ref_ln(x, scale, with_b ? b : Tensor(), a, eps);
      std::vector<Tensor> in{x, scale};
      if (with_b) in.push_back(b);
      auto got = run_node("LayerNormalization", in, {{"axis", int1(axis)}, {"epsilon", flt(1e-3f)}}, 3, 17);
      const double tol = dt == DType::F64 ? 1e-12 : 1e-5;
      EXPECT_LT(max_rel_diff(got[0], want.y), tol) << "axis " << axis;
      Shape stats = s;
      for (int i = a; i < 3; ++i) stats[i] = 1;
      ASSERT_EQ(shape_str(got[1].shape()), shape_str(stats));
      EXPECT_EQ(got[1].dtype(), DType::F32) << "stash_type 1 keeps float statistics";
      EXPECT_LT(max_rel_diff(got[1], Tensor::from_vector<double>(stats, want.mean)), 1e-6);
      EXPECT_LT(max_rel_diff(got[2], Tensor::from_vector<double>(stats, want.invstd)), 1e-6);
    }
  }
}

TEST(Norm, LayerNormalizationGradMatchesCentralDifferences) {
  for (auto [s, axis] : std::vector<std::pair<Shape, int>>{{{4, 5}, -1}, {{2, 3, 4}, 1}, {{3, 2, 2}, 0}}) {
    const Shape ps(s.begin() + (axis < 0 ? axis + (int)s.size() : axis), s.end());
    Tensor x = random_f64(s, 51, -2, 2), scale = random_f64(ps, 52), b = random_f64(ps, 53), dy = random_f64(s, 54);
    const Attrs at{{"axis", int1(axis)}, {"epsilon", flt(1e-3f)}, {"stash_type", int1(11)}};
    auto ln = [&](const std::vector<Tensor>& in) { return run_node("LayerNormalization", in, at, 1, 17)[0]; };
    auto fwd = run_node("LayerNormalization", {x, scale, b}, at, 3, 17);
    ASSERT_EQ(fwd[1].dtype(), DType::F64);
    for (int threads : {1, 2}) {
      auto g = run_node_ex("LayerNormalizationGrad", {dy, x, scale, fwd[1], fwd[2]}, {{"axis", int1(axis)}},
                           {true, true, true}, threads, 17, "ai.graphrun");
      const std::vector<Tensor> in{x, scale, b};
      EXPECT_LT(max_rel_diff(g[0], numeric_gradient(ln, in, 0, dy)), 1e-7) << shape_str(s) << " dX";
      EXPECT_LT(max_rel_diff(g[1], numeric_gradient(ln, in, 1, dy)), 1e-7) << shape_str(s) << " dScale";
      EXPECT_LT(max_rel_diff(g[2], numeric_gradient(ln, in, 2, dy)), 1e-7) << shape_str(s) << " dB";
    }
  }
}

// dScale and dB of a transformer's width (columns split over the threads) are each column's sum over the
// rows in order: the same bits on 1 and 2 threads, and a double sum of the rule.
TEST(Norm, LayerNormalizationGradOfWideRowsIsTheSameOnTwoThreads) {
  const Shape s{40, 256};
  Tensor x = random_tensor(s, 71, -2, 2), scale = random_tensor({256}, 72), b = random_tensor({256}, 73),
         dy = random_tensor(s, 74);
  auto fwd = run_node("LayerNormalization", {x, scale, b}, {{"axis", int1(-1)}}, 3, 17);
  std::vector<std::vector<Tensor>> got;
  for (int threads : {1, 2})
    got.push_back(run_node_ex("LayerNormalizationGrad", {dy, x, scale, fwd[1], fwd[2]}, {{"axis", int1(-1)}},
                              {true, true, true}, threads, 17, "ai.graphrun"));
  for (int k = 0; k < 3; ++k) EXPECT_EQ(max_abs_diff(got[0][k], got[1][k]), 0) << "output " << k;
  const std::vector<double> xv = x.as_doubles(), gv = dy.as_doubles(), m = fwd[1].as_doubles(), is = fwd[2].as_doubles();
  std::vector<double> ds(256, 0.0), db(256, 0.0);
  for (int64_t r = 0; r < 40; ++r)
    for (int64_t j = 0; j < 256; ++j) {
      ds[j] += gv[r * 256 + j] * (xv[r * 256 + j] - m[r]) * is[r];
      db[j] += gv[r * 256 + j];
    }
  EXPECT_LT(max_rel_diff(got[1][1], Tensor::from_vector<double>({256}, ds)), 1e-6);
  EXPECT_LT(max_rel_diff(got[1][2], Tensor::from_vector<double>({256}, db)), 1e-6);
}

// InstanceNormalization is LayerNormalization of each (n, c) row over the spatial axes, then scale[c] and B[c].
TEST_P(Norm, InstanceNormMatchesLayerNormOfEachRow) {
  const DType dt = GetParam();
  for (Shape s : {Shape{2, 3, 4}, Shape{1, 2, 3, 5}}) {
    Tensor x = as_dtype(random_tensor(s, 61, -3, 3), dt), scale = as_dtype(random_tensor({s[1]}, 62), dt),
           b = as_dtype(random_tensor({s[1]}, 63), dt);
    const int64_t S = x.numel() / (s[0] * s[1]);
    LnRef rows = ref_ln(Tensor::from_vector<double>({s[0] * s[1], S}, x.as_doubles()),
                        Tensor::from_vector<double>({S}, std::vector<double>(S, 1.0)), Tensor(), 1, 1e-3f);
    std::vector<double> want = rows.y.as_doubles(), sc = scale.as_doubles(), bb = b.as_doubles();
    for (size_t i = 0; i < want.size(); ++i) {
      const int64_t c = static_cast<int64_t>(i / S) % s[1];
      want[i] = want[i] * sc[c] + bb[c];
    }
    auto got = run_node("InstanceNormalization", {x, scale, b}, {{"epsilon", flt(1e-3f)}}, 1, 17);
    EXPECT_LT(max_rel_diff(got[0], Tensor::from_vector<double>(s, want)), dt == DType::F64 ? 1e-12 : 1e-5)
        << shape_str(s);
  }
}

TEST(Norm, InstanceNormalizationGradMatchesCentralDifferences) {
  for (Shape s : {Shape{2, 3, 4}, Shape{3, 2, 2, 3}, Shape{1, 1, 1}}) {
    Tensor x = random_f64(s, 71, -2, 2), scale = random_f64({s[1]}, 72), b = random_f64({s[1]}, 73),
           dy = random_f64(s, 74);
    const Attrs at{{"epsilon", flt(1e-3f)}};
    auto in_norm = [&](const std::vector<Tensor>& in) { return run_node("InstanceNormalization", in, at, 1, 17)[0]; };
    for (int threads : {1, 2}) {
      auto g = run_node_ex("InstanceNormalizationGrad", {dy, x, scale}, at, {true, true, true}, threads, 17,
                           "ai.graphrun");
      const std::vector<Tensor> in{x, scale, b};
      EXPECT_LT(max_rel_diff(g[0], numeric_gradient(in_norm, in, 0, dy)), 1e-7) << shape_str(s) << " dX";
      EXPECT_LT(max_rel_diff(g[1], numeric_gradient(in_norm, in, 1, dy)), 1e-7) << shape_str(s) << " dscale";
      EXPECT_LT(max_rel_diff(g[2], numeric_gradient(in_norm, in, 2, dy)), 1e-7) << shape_str(s) << " dB";
    }
    auto only_dx = run_node_ex("InstanceNormalizationGrad", {dy, x, scale}, at, {true, false, false}, 1, 17,
                               "ai.graphrun");
    EXPECT_LT(max_rel_diff(only_dx[0], numeric_gradient(in_norm, {x, scale, b}, 0, dy)), 1e-7);
  }
}

Tensor bool_scalar(bool v) {
  Tensor t(DType::Bool, {});
  *static_cast<uint8_t*>(t.raw()) = v;
  return t;
}

TEST(Dropout, InferenceIsIdentityWithAnAllTrueMask) {
  Tensor x = random_tensor({3, 4, 5}, 41);
  for (int64_t opset : {10, 13, 17}) {
    auto got = run_node("Dropout", {x}, {}, 2, opset);
    EXPECT_EQ(max_abs_diff(got[0], x), 0);
    ASSERT_EQ(got[1].dtype(), DType::Bool);
    for (auto v : got[1].as_int64s()) EXPECT_EQ(v, 1);
  }
  auto off = run_node("Dropout", {x, Tensor::scalar<float>(0.7f), bool_scalar(false)}, {}, 2, 13);
  EXPECT_EQ(max_abs_diff(off[0], x), 0);
  auto old = run_node("Dropout", {x}, {{"ratio", flt(0.3f)}}, 1, 7);
  EXPECT_EQ(max_abs_diff(old[0], x), 0);
}

TEST(Dropout, TrainingDropsAboutRatioAndScalesTheRest) {
  for (DType dt : {DType::F32, DType::F64}) {
    Tensor x = as_dtype(random_tensor({100, 100}, 42, 0.5f, 1.f), dt);
    auto got = run_node("Dropout", {x, Tensor::scalar<float>(0.3f), bool_scalar(true)}, {}, 2, 13);
    auto y = got[0].as_doubles(), xv = x.as_doubles();
    auto m = got[1].as_int64s();
    int64_t kept = 0;
    for (size_t i = 0; i < y.size(); ++i) {
      kept += m[i];
      EXPECT_NEAR(y[i], m[i] ? xv[i] / 0.7 : 0.0, 1e-6);
    }
    EXPECT_GT(kept, 6700);  // 7000 expected, sd 46
    EXPECT_LT(kept, 7300);
    // A seed attribute makes the mask reproducible; training with ratio 0 is the identity.
    auto s1 = run_node("Dropout", {x, Tensor::scalar<double>(0.5), bool_scalar(true)}, {{"seed", int1(7)}}, 1, 13);
    auto s2 = run_node("Dropout", {x, Tensor::scalar<double>(0.5), bool_scalar(true)}, {{"seed", int1(7)}}, 1, 13);
    EXPECT_EQ(max_abs_diff(s1[0], s2[0]), 0);
    auto zero = run_node("Dropout", {x, Tensor::scalar<float>(0.f), bool_scalar(true)}, {}, 1, 13);
    EXPECT_EQ(max_abs_diff(zero[0], x), 0);
  }
}

TEST(Norm, BadInputGivesClearErrors) {
  auto expect_error = [](const std::string& op, const std::vector<Tensor>& in, const Attrs& at, const std::string& part,
                         int64_t opset = 15) {
    try {
      run_node(op, in, at, 1, opset);
      ADD_FAILURE() << "expected an error containing '" << part << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  Tensor x = random_tensor({2, 3, 4}, 1), p3 = random_tensor({3}, 2), p4 = random_tensor({4}, 3);
  expect_error("BatchNormalization", {x, p4, p3, p3, p3}, {}, "scale");
  expect_error("BatchNormalization", {x, p3, p3, p3, to_f64(p3)}, {}, "input_var");
  expect_error("BatchNormalization", {random_tensor({3}, 1), p3, p3, p3, p3}, {}, "rank");
  expect_error("Dropout", {x, Tensor::scalar<float>(1.5f), bool_scalar(true)}, {}, "ratio");
  expect_error("LayerNormalization", {x, p3}, {}, "Scale", 17);
  expect_error("LayerNormalization", {x, p4, p3}, {}, "B", 17);
  expect_error("LayerNormalization", {x, p4}, {{"axis", int1(3)}}, "axis", 17);
  expect_error("LayerNormalization", {x, p4}, {{"stash_type", int1(10)}}, "stash_type", 17);
  expect_error("InstanceNormalization", {x, p4, p3}, {}, "scale", 17);
  expect_error("InstanceNormalization", {x, p3, p4}, {}, "B", 17);
  expect_error("InstanceNormalization", {random_tensor({2, 3}, 1), p3, p3}, {}, "rank >= 3", 17);
}

}  // namespace
}  // namespace graphrun::testing

// Loss-family CPU kernels: SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss against ONNX's own
// numpy reference (evaluated at test time), and ai.graphrun SoftmaxCrossEntropyLossGrad against
// central finite differences of SoftmaxCrossEntropyLoss in double precision.
#include <gtest/gtest.h>

#include "tests/math_test_util.h"

namespace graphrun {
namespace {

using mathtest::as_f64;
using mathtest::expect_close;
using mathtest::expect_error;
using mathtest::make;
using mathtest::numpy_eval;
using mathtest::run_op;
using mathtest::sin_tensor;

std::string py_list(const std::vector<double>& v) {
  std::string s = "[";
  for (double x : v) s += std::to_string(x) + ",";
  return s + "]";
}

std::string py_shape(const Shape& s) {
  std::string r = "(";
  for (int64_t d : s) r += std::to_string(d) + ",";
  return r + ")";
}

struct LossCase {
  Shape scores;
  std::string reduction;
  bool weights;
  bool has_ignore;
  int64_t ignore;
};

std::vector<LossCase> loss_cases() {
  std::vector<LossCase> cases;
  for (Shape s : {Shape{6, 5}, Shape{2, 4, 3}, Shape{2, 3, 2, 2}})
    for (const char* red : {"none", "sum", "mean"})
      for (bool w : {false, true})
        for (int ig : {0, 1, 2}) cases.push_back({s, red, w, ig != 0, ig == 1 ? int64_t{1} : int64_t{-100}});
  return cases;
}

// Labels in [0, C), with the ignore value in a couple of places when the case ignores one.
Tensor labels_for(const LossCase& c, DType dt = DType::I64) {
  Shape ls = {c.scores[0]};
  ls.insert(ls.end(), c.scores.begin() + 2, c.scores.end());
  std::vector<double> v(shape_numel(ls));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>((i * 7 + 3) % c.scores[1]);
  if (c.has_ignore) {
    v[0] = static_cast<double>(c.ignore);
    if (v.size() > 3) v[3] = static_cast<double>(c.ignore);
  }
  return make(dt, ls, v);
}

Tensor weights_for(const LossCase& c, DType dt) {
  std::vector<double> w(c.scores[1]);
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.5 + 0.25 * static_cast<double>(i);
  return make(dt, {c.scores[1]}, w);
}

std::map<std::string, Attribute> loss_attrs(const LossCase& c) {
  std::map<std::string, Attribute> a = {{"reduction", Attribute::Str(c.reduction)}};
  if (c.has_ignore) a["ignore_index"] = Attribute::Int(c.ignore);
  return a;
}

std::string describe(const LossCase& c) {
  return shape_str(c.scores) + " " + c.reduction + (c.weights ? " weights" : "") +
         (c.has_ignore ? " ignore " + std::to_string(c.ignore) : "");
}

TEST(Loss, SoftmaxCrossEntropyAndNllMatchOnnxReference) {
  const auto cases = loss_cases();
  std::vector<std::string> exprs;
  for (const auto& c : cases) {
    Tensor x = sin_tensor(c.scores, 2);
    Tensor lab = labels_for(c);
    std::string px = "np.array(" + py_list(make(DType::F32, c.scores, x.as_doubles()).as_doubles()) +
                     ", dtype=np.float32).reshape(" + py_shape(c.scores) + ")";
    std::string pl = "np.array(" + py_list(lab.as_doubles()) + ", dtype=np.int64).reshape(" + py_shape(lab.shape()) + ")";
    std::string pw = c.weights ? "np.array(" + py_list(weights_for(c, DType::F32).as_doubles()) + ", dtype=np.float32)" : "None";
    std::string args = pl + ", weight=" + pw + ", reduction='" + c.reduction + "', ignore_index=" +
                       (c.has_ignore ? std::to_string(c.ignore) : "None");
    exprs.push_back("sce.softmaxcrossentropy(" + px + ", " + args + ", get_log_prob=True)[0]");
    exprs.push_back("sce.softmaxcrossentropy(" + px + ", " + args + ", get_log_prob=True)[1]");
    exprs.push_back("nll.compute_negative_log_likelihood_loss(" + px + ", " + args + ")");
  }
  // The reference functions live in ONNX's backend test cases.
  auto want = numpy_eval(exprs, "loss",
                         "import onnx.backend.test.case.node.softmaxcrossentropy as sce\n"
                         "import onnx.backend.test.case.node.negativeloglikelihoodloss as nll");
  ASSERT_EQ(want.size(), exprs.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto& c = cases[i];
    const Tensor& wl = want[3 * i];
    const Tensor& wlp = want[1 + 3 * i];
    const Tensor& wnll = want[2 + 3 * i];
    for (DType dt : {DType::F32, DType::F64}) {
      Tensor x = make(dt, c.scores, make(DType::F32, c.scores, sin_tensor(c.scores, 2).as_doubles()).as_doubles());
      std::vector<Tensor> in = {x, labels_for(c, i % 2 ? DType::I32 : DType::I64)};
      if (c.weights) in.push_back(weights_for(c, dt));
      auto out = run_op("SoftmaxCrossEntropyLoss", in, loss_attrs(c), 2);
      std::string what = describe(c) + " " + dtype_name(dt);
      expect_close(as_f64(out[0]), wl, 2e-6, "loss " + what);
      expect_close(as_f64(out[1]), wlp, 2e-6, "log_prob " + what);
      // Only the loss output requested.
      expect_close(as_f64(run_op("SoftmaxCrossEntropyLoss", in, loss_attrs(c), 1)[0]), wl, 2e-6, "loss-only " + what);
      in[0] = make(dt, c.scores, make(DType::F32, c.scores, sin_tensor(c.scores, 2).as_doubles()).as_doubles());
      expect_close(as_f64(run_op("NegativeLogLikelihoodLoss", in, loss_attrs(c))[0]), wnll, 2e-6, "nll " + what);
    }
  }
}

TEST(Loss, LabelsOutOfRangeAreClearErrors) {
  Tensor x = sin_tensor({2, 3});
  expect_error([&] { run_op("SoftmaxCrossEntropyLoss", {x, make(DType::I64, {2}, {0, 3})}); }, {"label 3", "3 classes"});
  expect_error([&] { run_op("NegativeLogLikelihoodLoss", {x, make(DType::I64, {2}, {-1, 0})}); }, {"label -1"});
  expect_error([&] { run_op("SoftmaxCrossEntropyLoss", {x, make(DType::I64, {3}, {0, 1, 2})}); }, {"[3]", "[2,3]"});
  expect_error([&] { run_op("SoftmaxCrossEntropyLoss", {x, make(DType::I64, {2}, {0, 1})}, {{"reduction", Attribute::Str("avg")}}); },
               {"avg"});
  // An ignored label may lie outside [0, C).
  Tensor l = run_op("SoftmaxCrossEntropyLoss", {x, make(DType::I64, {2}, {-1, 2})}, {{"ignore_index", Attribute::Int(-1)}})[0];
  EXPECT_TRUE(std::isfinite(l.as_doubles()[0]));
}

// Central differences of sum(dloss * SoftmaxCrossEntropyLoss(scores)) against the Grad op, in double.
TEST(Loss, SoftmaxCrossEntropyGradMatchesFiniteDifferences) {
  for (const auto& c : loss_cases()) {
    const DType dt = DType::F64;
    Tensor x = sin_tensor(c.scores, 2);
    Tensor lab = labels_for(c);
    std::vector<Tensor> in = {x, lab};
    if (c.weights) in.push_back(weights_for(c, dt));
    auto attrs = loss_attrs(c);
    auto fwd = run_op("SoftmaxCrossEntropyLoss", in, attrs, 2);
    Tensor dloss = c.reduction == "none" ? sin_tensor(lab.shape(), 0.7) : make(dt, {}, {1.3});
    std::vector<Tensor> gin = {dloss, fwd[1], lab};
    if (c.weights) gin.push_back(in[2]);
    Tensor grad = run_op("SoftmaxCrossEntropyLossGrad", gin, attrs, 1, 17, kGraphrunDomain)[0];
    ASSERT_EQ(grad.shape(), x.shape());
    auto objective = [&](const Tensor& scores) {
      std::vector<Tensor> i2 = in;
      i2[0] = scores;
      auto l = run_op("SoftmaxCrossEntropyLoss", i2, attrs)[0].as_doubles();
      auto g = dloss.as_doubles();
      double s = 0;
      for (size_t k = 0; k < l.size(); ++k) s += l[k] * g[k];
      return s;
    };
    const double eps = 1e-6;
    std::vector<double> num(x.numel());
    for (int64_t k = 0; k < x.numel(); ++k) {
      Tensor p = x.clone(), m = x.clone();
      static_cast<double*>(p.raw())[k] += eps;
      static_cast<double*>(m.raw())[k] -= eps;
      num[k] = (objective(p) - objective(m)) / (2 * eps);
    }
    expect_close(grad, make(dt, x.shape(), num), 1e-8, "grad " + describe(c));
    if (c.has_ignore) {
      EXPECT_EQ(grad.as_doubles()[0], 0.0) << "ignored target has no gradient";
    }
  }
  // f32 agrees with f64.
  LossCase c{{4, 5}, "mean", true, true, 1};
  Tensor x = sin_tensor(c.scores);
  auto f64 = run_op("SoftmaxCrossEntropyLoss", {x, labels_for(c), weights_for(c, DType::F64)}, loss_attrs(c), 2);
  Tensor g64 = run_op("SoftmaxCrossEntropyLossGrad", {make(DType::F64, {}, {1}), f64[1], labels_for(c), weights_for(c, DType::F64)},
                      loss_attrs(c), 1, 17, kGraphrunDomain)[0];
  Tensor x32 = make(DType::F32, c.scores, x.as_doubles());
  auto f32 = run_op("SoftmaxCrossEntropyLoss", {x32, labels_for(c), weights_for(c, DType::F32)}, loss_attrs(c), 2);
  Tensor g32 = run_op("SoftmaxCrossEntropyLossGrad", {make(DType::F32, {}, {1}), f32[1], labels_for(c), weights_for(c, DType::F32)},
                      loss_attrs(c), 1, 17, kGraphrunDomain)[0];
  expect_close(as_f64(g32), g64, 1e-6);
  expect_error([&] {
    run_op("SoftmaxCrossEntropyLossGrad", {make(DType::F32, {4}, {1, 1, 1, 1}), f32[1], labels_for(c)}, {}, 1, 17, kGraphrunDomain);
  }, {"scalar"});
}

}  // namespace
}  // namespace graphrun

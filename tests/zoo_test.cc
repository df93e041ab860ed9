// Models nobody here wrote, as users export them: small torchvision ViT, ConvNeXt and ShuffleNet V2
// (random weights, tests/zoo_parity.py), forward (eval export) and gradients (training export through
// attach_loss + backward) against PyTorch in float64, at opsets 15 and 17.
#include <gtest/gtest.h>

#include <fstream>

#include "autodiff/autodiff.h"
#include "graph/onnx_io.h"
#include "graph/tensor_io.h"
#include "runtime/executor.h"
#include "tests/test_util.h"

namespace graphrun::testing {
namespace {

double scale_of(const Tensor& t) {
  double s = 0;
  for (double v : t.as_doubles()) s = std::max(s, std::fabs(v));
  return s;
}

void check_zoo_model(const std::string& name, int opset, int size = 32) {
  const std::string dir = temp_dir("zoo_" + name + "_" + std::to_string(opset));
  auto py = run_command(python() + " " + source_dir() + "/tests/zoo_parity.py " + name + " " + dir + " --opset " +
                        std::to_string(opset) + " --size " + std::to_string(size) + " 2>&1");
  if (py.exit_code != 0 && py.output.find("No module named 'torchvision'") != std::string::npos)
    GTEST_SKIP() << python() << " lacks torchvision (python3-torchvision)";
  ASSERT_EQ(py.exit_code, 0) << py.output;
  Tensor image = read_npy(dir + "/image.npy"), labels = read_npy(dir + "/labels.npy");

  // Forward: the eval-mode export against model.eval().
  {
    runtime::Executor ex(load_onnx(dir + "/eval.onnx"));
    Tensor logits = ex.run({{"image", image}}).at("logits");
    Tensor want = read_npy(dir + "/logits.npy");
    EXPECT_LE(max_abs_diff(logits, want), 1e-4 * std::max(1.0, scale_of(want))) << name << " opset " << opset << " logits";
  }
  // Gradients: the training-mode export with graphrun's loss against torch autograd.
  Graph bg = autodiff::backward(autodiff::attach_loss(load_onnx(dir + "/train.onnx")));
  runtime::Executor ex(bg);
  auto out = ex.run({{"image", image}, {"labels", labels}});
  const double loss = read_npy(dir + "/loss.npy").as_doubles()[0];
  EXPECT_NEAR(out.at("loss").as_doubles()[0], loss, 1e-4 * std::max(1.0, std::fabs(loss))) << name;
  std::map<std::string, Tensor> grads;
  std::ifstream names(dir + "/params.txt");
  for (std::string p; std::getline(names, p);)
    if (!p.empty()) grads[p] = read_npy(dir + "/" + p + ".npy");
  ASSERT_FALSE(grads.empty());
  std::map<std::string, double> f32_error;  // torch float32's own error per gradient
  std::ifstream errors(dir + "/float32_errors.txt");
  for (std::string p; errors >> p;) errors >> f32_error[p];
  double model_scale = 0;
  for (const auto& [p, g] : grads) model_scale = std::max(model_scale, scale_of(g));
  for (const auto& [p, g] : grads) {
    // Each gradient relative to its own scale, floored at 1e-3 of the model's largest (a bias before
    // a training-mode BatchNorm has an exact-zero gradient: float noise on both sides).
    const double scale = std::max(scale_of(g), 1e-3 * model_scale);
    ASSERT_TRUE(out.count(p + "_grad")) << name << ": no gradient output for " << p;
    const Tensor& got = out.at(p + "_grad");
    ASSERT_EQ(shape_str(got.shape()), shape_str(g.shape())) << p;
    // Within max(1e-4, 10x torch float32's own error): graphrun computes in float32 too.
    const double tol = std::max(1e-4, 10 * f32_error[p]);
    EXPECT_LE(max_abs_diff(got, g) / scale, tol) << name << " opset " << opset << ": gradient of " << p;
  }
  EXPECT_EQ(grads.size(), autodiff::trainable_params(bg, {}).size()) << name;
}

TEST(Zoo, VisionTransformerOpset17) { check_zoo_model("vit", 17); }
TEST(Zoo, VisionTransformerOpset15) { check_zoo_model("vit", 15); }  // LayerNorm decomposed by torch
TEST(Zoo, ConvNeXtOpset17) { check_zoo_model("convnext", 17); }
// 64x64: at 32x32 stage 4 is 1x1, and training-mode BatchNorm over 2 values is so ill-conditioned that
// torch's own float32 and float64 outputs differ by 0.7.
TEST(Zoo, ShuffleNetV2Opset17) { check_zoo_model("shufflenet", 17, 64); }

}  // namespace
}  // namespace graphrun::testing

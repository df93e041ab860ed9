// Gradient parity with PyTorch autograd for every model of models/ (loss and each parameter gradient),
// the exported gradient model against the in-memory graph, and what the backward graph must not contain.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "autodiff/autodiff.h"
#include "graph/onnx_io.h"
#include "graph/tensor_io.h"
#include "runtime/executor.h"
#include "tests/test_util.h"

namespace graphrun::testing {
namespace {

namespace fs = std::filesystem;

std::string model_path(const std::string& name) {
  for (const std::string& p : {source_dir() + "/models/" + name + ".onnx", binary_dir() + "/models/" + name + ".onnx"})
    if (fs::exists(p)) return p;
  return "";
}

struct Reference {
  Tensor image, labels, loss;
  std::map<std::string, Tensor> grads;
};

// PyTorch's loss and gradients for a random batch (tests/autodiff_parity.py).
Reference torch_reference(const std::string& model, const std::string& dir, int batch) {
  auto r = run_command(python() + " " + source_dir() + "/tests/autodiff_parity.py " + model + " " + dir +
                       " --batch " + std::to_string(batch));
  Reference ref;
  if (r.exit_code != 0) {
    ADD_FAILURE() << "autodiff_parity.py failed:\n" << r.output;
    return ref;
  }
  ref.image = read_npy(dir + "/image.npy");
  ref.labels = read_npy(dir + "/labels.npy");
  ref.loss = read_npy(dir + "/loss.npy");
  std::ifstream names(dir + "/params.txt");
  for (std::string p; std::getline(names, p);)
    if (!p.empty()) ref.grads[p] = read_npy(dir + "/" + p + ".npy");
  return ref;
}

double scale_of(const Tensor& t) {
  double s = 0;
  for (double v : t.as_doubles()) s = std::max(s, std::fabs(v));
  return s > 0 ? s : 1;
}

void check_parity(const std::string& name, int batch) {
  const std::string model = model_path(name);
  if (model.empty()) GTEST_SKIP() << "models/" << name << ".onnx not found (the build generates it when "
                                  << python() << " has torch)";
  const std::string dir = temp_dir("autodiff_models_" + name);
  Reference ref = torch_reference(model, dir, batch);
  ASSERT_FALSE(ref.grads.empty());

  Graph bg = autodiff::backward(autodiff::attach_loss(load_onnx(model)));
  runtime::Executor ex(bg);
  auto out = ex.run({{"image", ref.image}, {"labels", ref.labels}});
  EXPECT_NEAR(out.at("loss").as_doubles()[0], ref.loss.as_doubles()[0], 1e-4 * std::max(1.0, scale_of(ref.loss)));
  double model_scale = 0;
  for (const auto& [p, g] : ref.grads) model_scale = std::max(model_scale, scale_of(g));
  int compared = 0;
  for (const auto& [p, g] : ref.grads) {
    // A gradient that is zero in exact arithmetic (a convolution's bias followed by BatchNorm, which
    // removes the mean) is float noise on both sides: compare it at the scale of the model's gradients.
    const double scale = scale_of(g) < 1e-6 * model_scale ? model_scale : scale_of(g);
    ASSERT_TRUE(out.count(p + "_grad")) << "no gradient output for " << p;
    const Tensor& got = out.at(p + "_grad");
    ASSERT_EQ(shape_str(got.shape()), shape_str(g.shape())) << p;
    double err = max_abs_diff(got, g) / scale;
    EXPECT_LE(err, 1e-4) << name << ": gradient of " << p << " (scale " << scale << ")";
    ++compared;
  }
  // Every trainable parameter of the graph is one PyTorch has.
  EXPECT_EQ(compared, static_cast<int>(autodiff::trainable_params(bg, {}).size()));

  // The exported gradient model: checker-valid, and graphrun run gives the in-memory numbers.
  const std::string grad_model = dir + "/" + name + ".grad.onnx";
  save_onnx(bg, grad_model, true);
  auto chk = run_command(python() + " -c \"import onnx; onnx.checker.check_model(onnx.load('" + grad_model +
                         "'), full_check=True)\"");
  EXPECT_EQ(chk.exit_code, 0) << chk.output;
  auto run = run_command(graphrun_cli() + " run " + grad_model + " --input image=" + dir + "/image.npy --input labels=" +
                         dir + "/labels.npy --output-dir " + dir + "/run");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  for (const auto& o : bg.outputs) {
    Tensor t = read_npy(dir + "/run/" + o + ".npy");
    EXPECT_LE(max_abs_diff(t, out.at(o)), 1e-6 * scale_of(out.at(o))) << "exported model, output " << o;
  }
}

TEST(AutodiffModels, LeNetMatchesPyTorch) { check_parity("lenet", 8); }
TEST(AutodiffModels, SimpleCnnMatchesPyTorch) { check_parity("simplecnn", 8); }
TEST(AutodiffModels, ResNet18MatchesPyTorch) { check_parity("resnet18", 4); }

// The graph of LeNet computes no gradient for its image and none for a frozen parameter.
TEST(AutodiffModels, LeNetBackwardSkipsImageAndFrozenParameter) {
  const std::string model = model_path("lenet");
  if (model.empty()) GTEST_SKIP() << "models/lenet.onnx not found";
  Graph fwd = load_onnx(model);
  autodiff::BackwardOptions o;
  o.freeze = {"conv2.weight"};
  Graph bg = autodiff::backward(autodiff::attach_loss(fwd), o);
  infer_shapes(bg);
  EXPECT_FALSE(bg.is_output("conv2.weight_grad"));
  EXPECT_TRUE(bg.is_output("conv2.bias_grad"));
  std::set<std::string> forward_values(fwd.inputs.begin(), fwd.inputs.end());
  for (const Node& n : fwd.nodes)
    for (const auto& v : n.outputs) forward_values.insert(v);
  const std::string image_type = bg.info("image")->str();
  const std::string w2_type = bg.info("conv2.weight") ? bg.info("conv2.weight")->str() : "f32[50,20,5,5]";
  int conv_grads = 0;
  for (const Node& n : bg.nodes) {
    if (n.op_type == "ConvGrad") {
      ++conv_grads;
      if (n.inputs[1] == "image") {
        EXPECT_EQ(n.outputs[0], "") << "dX of the first convolution is the image gradient";
      }
      if (n.inputs[2] == "conv2.weight") {
        EXPECT_EQ(n.outputs[1], "") << "conv2.weight is frozen";
      }
    }
    for (const auto& v : n.outputs) {
      if (v.empty() || forward_values.count(v) || !bg.info(v)) continue;
      EXPECT_NE(bg.info(v)->str(), image_type) << n.describe() << " computes a value shaped like the image";
      EXPECT_NE(bg.info(v)->str(), w2_type) << n.describe() << " computes a value shaped like conv2.weight";
    }
  }
  EXPECT_EQ(conv_grads, 2);
}

TEST(AutodiffModels, OpWithoutRuleFailsWithOpAndNodeNames) {
  const std::string dir = temp_dir("autodiff_models_norule");
  const std::string path = dir + "/norule.onnx";
  {
    std::ofstream script(dir + "/make_model.py");
    // ONNX Runtime's Inverse (a com.microsoft op) has no gradient rule (nor kernel) here; the model still imports,
    // so the builder must refuse it.
    script << "import numpy as np, onnx\n"
              "from onnx import helper as h, numpy_helper, TensorProto as T\n"
              "w = numpy_helper.from_array(np.ones((2, 2), np.float32), 'w')\n"
              "sh = numpy_helper.from_array(np.array([0, 4], np.int64), 'sh')\n"
              "g = h.make_graph([h.make_node('Mul', ['x', 'w'], ['m'], name='scale'),\n"
              "                  h.make_node('Inverse', ['m'], ['d'], name='inverse_node', domain='com.microsoft'),\n"
              "                  h.make_node('Reshape', ['d', 'sh'], ['logits'], name='flat')], 'norule',\n"
              "                 [h.make_tensor_value_info('x', T.FLOAT, ['N', 2, 2])],\n"
              "                 [h.make_tensor_value_info('logits', T.FLOAT, ['N', 4])], [w, sh])\n"
              "onnx.save(h.make_model(g, opset_imports=[h.make_opsetid('', 17), h.make_opsetid('com.microsoft', 1)]), '"
           << path << "')\n";
  }
  auto r = run_command(python() + " " + dir + "/make_model.py");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  try {
    autodiff::backward(autodiff::attach_loss(load_onnx(path)));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "no gradient rule for op 'com.microsoft::Inverse' (node 'inverse_node')");
  }
  auto cli = run_command(graphrun_cli() + " grad " + path + " -o " + dir + "/out.onnx");
  EXPECT_EQ(cli.exit_code, 2) << cli.output;
  EXPECT_NE(cli.output.find("no gradient rule for op 'com.microsoft::Inverse' (node 'inverse_node')"),
            std::string::npos)
      << cli.output;
  auto bad = run_command(graphrun_cli() + " grad " + path + " --freeze nope -o " + dir + "/out.onnx");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("no parameter named 'nope' (parameters: w)"), std::string::npos) << bad.output;
}

TEST(AutodiffCli, GradWritesACheckerValidModelWithoutFrozenGradients) {
  const std::string model = model_path("lenet");
  if (model.empty()) GTEST_SKIP() << "models/lenet.onnx not found";
  const std::string dir = temp_dir("autodiff_cli_grad");
  auto r = run_command(graphrun_cli() + " grad " + model + " --freeze conv1.weight,conv1.bias --freeze fc2.bias -o " +
                       dir + "/g.onnx");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto chk = run_command(python() + " -c \"import onnx; m = onnx.load('" + dir +
                         "/g.onnx'); onnx.checker.check_model(m, full_check=True); "
                         "print(' '.join(o.name for o in m.graph.output)); print(' '.join(i.name for i in m.graph.input))\"");
  ASSERT_EQ(chk.exit_code, 0) << chk.output;
  EXPECT_NE(chk.output.find("loss conv2.bias_grad conv2.weight_grad fc1.bias_grad fc1.weight_grad fc2.weight_grad\n"),
            std::string::npos) << chk.output;
  EXPECT_NE(chk.output.find("image labels"), std::string::npos) << chk.output;
  EXPECT_EQ(chk.output.find("conv1.weight_grad"), std::string::npos) << chk.output;

  auto mse = run_command(graphrun_cli() + " grad " + model + " --loss mse -o " + dir + "/mse.onnx");
  EXPECT_EQ(mse.exit_code, 0) << mse.output;
  for (const char* bad : {" --loss hinge", " --freeze nope", " --loss-output nope", ""}) {
    std::string cmd = graphrun_cli() + " grad " + (std::string(bad).empty() ? dir + "/missing.onnx" : model) + bad +
                      " -o " + dir + "/bad.onnx";
    auto b = run_command(cmd);
    EXPECT_EQ(b.exit_code, 2) << cmd << "\n" << b.output;
    EXPECT_NE(b.output.find("graphrun grad"), std::string::npos) << b.output;
  }
  // Training with every parameter frozen: one line saying so (it named an internal pass's outputs).
  auto none = run_command(graphrun_cli() + " train " + model + " --freeze conv1,conv2,fc1,fc2 --max-steps 1 --epochs 1");
  EXPECT_EQ(none.exit_code, 2) << none.output;
  EXPECT_EQ(none.output, "graphrun train: error: nothing to train: --freeze leaves no parameter the loss reaches in 'lenet' "
                         "(--eval-only evaluates a model as it is)\n");
}

TEST(AutodiffCli, ShowBackwardPrintsShapesAndDot) {
  const std::string model = model_path("lenet");
  if (model.empty()) GTEST_SKIP() << "models/lenet.onnx not found";
  auto r = run_command(graphrun_cli() + " show " + model + " --backward --freeze conv2.weight");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("%conv1.weight_grad: f32[20,1,3,3]"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("ai.graphrun.ConvGrad("), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("%loss: f32[]"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("conv2.weight_grad"), std::string::npos) << r.output;
  auto dot = run_command(graphrun_cli() + " show " + model + " --backward --format dot");
  ASSERT_EQ(dot.exit_code, 0) << dot.output;
  EXPECT_EQ(dot.output.rfind("digraph", 0), 0u) << dot.output.substr(0, 200);
  EXPECT_NE(dot.output.find("ConvGrad"), std::string::npos);
  auto bad = run_command(graphrun_cli() + " show " + model + " --freeze conv1.weight");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("--freeze needs --backward"), std::string::npos) << bad.output;
  auto badloss = run_command(graphrun_cli() + " show " + model + " --backward --loss nope");
  EXPECT_EQ(badloss.exit_code, 2) << badloss.output;
}

}  // namespace
}  // namespace graphrun::testing

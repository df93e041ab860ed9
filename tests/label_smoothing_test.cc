// graphrun train --label-smoothing EPS against torch.nn.CrossEntropyLoss(label_smoothing=EPS) with
// torch.optim.SGD: a few full-batch steps of an MLP (scores [N, C]) and of a per-position model (scores
// [N, T, V], labels [N, T], classes last) on two CPU replicas (each loss scaled to the global batch),
// in float64 (--float64) and float32; the trained weights equal torch's, and are far from torch's
// without smoothing. Also `graphrun check --label-smoothing`, and show/grad naming the nodes.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <iostream>

#include "graph/onnx_io.h"
#include "graph/tensor_io.h"
#include "tests/data_test_util.h"
#include "tests/test_util.h"

namespace graphrun {
namespace {

constexpr int kSteps = 4;
constexpr double kLr = 0.5;

bool have_torch() { return testing::run_command(testing::python() + " -c 'import torch' 2>&1").exit_code == 0; }

// Writes, in `dir`, model.onnx (torch's export of `kind`), data.npz (its inputs and labels, one full
// batch of N examples) and torch's weights after kSteps SGD steps on the whole batch with
// CrossEntropyLoss(label_smoothing=eps), for eps 0 and 0.1, in float64 and float32:
// torch_<dtype>_<eps>/<parameter>.npy. Returns N.
int64_t write_model_data_and_torch_weights(const std::string& dir, const std::string& kind) {
  testing::run_python(dir, "KIND, STEPS, LR = '" + kind + "', " + std::to_string(kSteps) + ", " + std::to_string(kLr) +
                               R"(
import copy, torch
torch.manual_seed(0)
r = np.random.RandomState(0)
if KIND == 'mlp':  # scores [N, C], labels [N]
    N, F, H, C = 24, 6, 16, 5
    x = r.randn(N, F).astype(np.float32)
    y = r.randint(0, C, N).astype(np.int64)
    model = torch.nn.Sequential(torch.nn.Linear(F, H), torch.nn.Tanh(), torch.nn.Linear(H, C))
    feeds, example, name = {'x': x}, torch.from_numpy(x), 'x'
    run = lambda m, dt: m(torch.from_numpy(x).to(dt))
    flat = lambda out: (out, torch.from_numpy(y))
else:  # per position: scores [N, T, V], labels [N, T]
    N, T, V, D = 12, 7, 11, 8
    tok = r.randint(0, V, (N, T)).astype(np.int64)
    y = r.randint(0, V, (N, T)).astype(np.int64)
    class LM(torch.nn.Module):
        def __init__(s):
            super().__init__()
            s.emb = torch.nn.Embedding(V, D)
            s.proj = torch.nn.Linear(D, V)
        def forward(s, tokens):
            return s.proj(torch.tanh(s.emb(tokens)))
    model = LM()
    feeds, example, name = {'tokens': tok}, torch.from_numpy(tok), 'tokens'
    run = lambda m, dt: m(torch.from_numpy(tok))
    flat = lambda out: (out.reshape(-1, V), torch.from_numpy(y).reshape(-1))
np.savez('data.npz', labels=y, **feeds)
torch.onnx.export(model, example, 'model.onnx', input_names=[name], output_names=['logits'],
                  dynamic_axes={name: {0: 'N'}, 'logits': {0: 'N'}}, opset_version=13,
                  training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
for dt in ('float64', 'float32'):
    for eps in (0.0, 0.1):
        m = copy.deepcopy(model).to(getattr(torch, dt))
        opt = torch.optim.SGD(m.parameters(), lr=LR)
        crit = torch.nn.CrossEntropyLoss(label_smoothing=eps)
        for s in range(STEPS):
            opt.zero_grad()
            crit(*flat(run(m, getattr(torch, dt)))).backward()
            opt.step()
        out = 'torch_%s_%g' % (dt, eps)
        os.makedirs(out, exist_ok=True)
        for n, p in m.named_parameters():
            np.save(os.path.join(out, n + '.npy'), p.detach().numpy())
open('n.txt', 'w').write(str(N))
)");
  std::ifstream f(dir + "/n.txt");
  int64_t n = 0;
  f >> n;
  return n;
}

// The largest |graphrun - torch| over the parameters of the saved model, relative to max(1, |torch|);
// every parameter must be among torch's.
double worst_difference(const std::string& saved, const std::string& torch_dir) {
  const Graph g = load_onnx(saved);
  double worst = 0;
  int compared = 0;
  for (const auto& entry : std::filesystem::directory_iterator(torch_dir)) {
    const std::string name = entry.path().stem().string();
    auto it = g.initializers.find(name);
    if (it == g.initializers.end()) {
      ADD_FAILURE() << "the saved model has no parameter '" << name << "'";
      continue;
    }
    const Tensor want = read_npy(entry.path().string());
    EXPECT_EQ(it->second.shape(), want.shape()) << name;
    const auto a = it->second.as_doubles(), b = want.as_doubles();
    if (a.size() != b.size()) continue;
    double scale = 1;
    for (double v : b) scale = std::max(scale, std::abs(v));
    for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]) / scale);
    ++compared;
  }
  EXPECT_GE(compared, 2) << torch_dir;
  return worst;
}

// Trains `kind` with graphrun (kSteps full-batch SGD steps, two CPU replicas, --label-smoothing 0.1) in
// float64 and float32; expects torch's weights within `tol64` / `tol32`, and torch's weights without
// smoothing at least 100 times further away.
void expect_torch_weights(const std::string& kind, double tol64, double tol32) {
  if (!have_torch()) GTEST_SKIP() << testing::python() << " lacks torch (python3-torch)";
  const std::string d = testing::temp_dir("label_smoothing_" + kind);
  const int64_t n = write_model_data_and_torch_weights(d, kind);
  ASSERT_GT(n, 0);
  for (const bool f64 : {true, false}) {
    const std::string dt = f64 ? "float64" : "float32", saved = d + "/" + dt + ".onnx";
    auto r = testing::run_command(testing::graphrun_cli() + " train " + d + "/model.onnx --data " + d +
                                  "/data.npz --test-data " + d + "/data.npz --devices cpu:2 --threads 1 --batch-size " +
                                  std::to_string(n) + " --epochs " + std::to_string(kSteps) + " --lr " +
                                  std::to_string(kLr) + " --label-smoothing 0.1 --save " + saved +
                                  (f64 ? " --float64" : ""));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const double smooth = worst_difference(saved, d + "/torch_" + dt + "_0.1");
    const double plain = worst_difference(saved, d + "/torch_" + dt + "_0");
    std::cout << kind << " " << dt << ": graphrun --label-smoothing 0.1 vs torch label_smoothing=0.1: " << smooth
              << " (relative to max(1, |w|)); vs torch without smoothing: " << plain << "\n";
    EXPECT_LE(smooth, f64 ? tol64 : tol32) << dt << "\n" << r.output;
    EXPECT_GE(plain, 100 * (f64 ? tol64 : tol32)) << dt << ": smoothing should move the weights";
  }
}

TEST(LabelSmoothingLoss, MlpTrainsAsTorchCrossEntropyWithLabelSmoothing) { expect_torch_weights("mlp", 1e-13, 2e-6); }

TEST(LabelSmoothingLoss, PerPositionScoresTrainAsTorchWithLabelSmoothing) { expect_torch_weights("lm", 1e-13, 2e-6); }

// graphrun check --label-smoothing differentiates train's smoothed cross-entropy (its attach_loss
// nodes) and passes the numeric gradient check, on LeNet's [N, 10] and on [N, C, H, W] scores.
TEST(LabelSmoothingLoss, CheckPassesTheGradientCheckOfTheSmoothedLoss) {
  const std::string lenet = testing::source_dir() + "/models/lenet.onnx";
  auto r = testing::run_command(testing::graphrun_cli() + " check " + lenet + " --label-smoothing 0.1");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("cross-entropy, label smoothing 0.1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("verdict: trainable"), std::string::npos) << r.output;
  // Scores with positions, classes on axis 1 (segmentation): a 1x1 Conv.
  const std::string d = testing::temp_dir("label_smoothing_check");
  testing::run_onnx_python(d, R"(
r = np.random.RandomState(0)
g = helper.make_graph([helper.make_node('Conv', ['x', 'w', 'b'], ['scores'])], 'seg',
                      [helper.make_tensor_value_info('x', TensorProto.FLOAT, ['N', 3, 4, 5])],
                      [helper.make_tensor_value_info('scores', TensorProto.FLOAT, ['N', 6, 4, 5])],
                      [numpy_helper.from_array(r.randn(6, 3, 1, 1).astype(np.float32), 'w'),
                       numpy_helper.from_array(r.randn(6).astype(np.float32), 'b')])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid('', 13)]), 'seg.onnx')
)");
  r = testing::run_command(testing::graphrun_cli() + " check " + d + "/seg.onnx --label-smoothing 0.3");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("verdict: trainable"), std::string::npos) << r.output;
}

// The training graph says what it does: show --backward prints the smoothing nodes by name, --passes
// the option, and grad writes a model onnx.checker accepts.
TEST(LabelSmoothingLoss, ShowAndGradNameTheSmoothingNodes) {
  const std::string lenet = testing::source_dir() + "/models/lenet.onnx";
  auto r = testing::run_command(testing::graphrun_cli() + " show " + lenet + " --backward --label-smoothing 0.1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* name : {"loss_nll", "loss_smoothing_mean", "loss_label_smoothing", "loss_smoothing_count"})
    EXPECT_NE(r.output.find(name), std::string::npos) << name << "\n" << r.output;
  r = testing::run_command(testing::graphrun_cli() + " show " + lenet + " --backward");
  EXPECT_EQ(r.output.find("smoothing"), std::string::npos) << "no smoothing without the flag";
  r = testing::run_command(testing::graphrun_cli() + " show " + lenet + " --passes --label-smoothing 0.25");
  EXPECT_NE(r.output.find("label_smoothing=0.25"), std::string::npos) << r.output;
  const std::string out = testing::temp_dir("label_smoothing_grad") + "/lenet.grad.onnx";
  r = testing::run_command(testing::graphrun_cli() + " grad " + lenet + " --label-smoothing 0.1 -o " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = testing::run_command(testing::python() + " -c \"import onnx; onnx.checker.check_model(onnx.load('" + out +
                           "'), full_check=True)\"");
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

}  // namespace
}  // namespace graphrun

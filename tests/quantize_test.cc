// Quantized models: a quantization-aware-training model exported from PyTorch (its FakeQuantize modules become
// QuantizeLinear/DequantizeLinear pairs, some with torch's Clip to a narrower range between them) trains in
// graphrun as PyTorch trains it. Pass fake_quantize makes each pair an ai.graphrun::FakeQuantize whose gradient
// is PyTorch's straight-through estimator; by the pairs' ONNX meaning no gradient would reach the weights behind
// them. The kernels themselves are checked by ONNX's node tests (QuantizeLinear, DequantizeLinear,
// DynamicQuantizeLinear, MatMulInteger, QLinearMatMul) and against the CPU on a GPU (tests/gpu_kernels_test.cc).
#include <gtest/gtest.h>

#include <fstream>

#include "graph/onnx_io.h"
#include "graph/tensor_io.h"
#include "tests/data_test_util.h"
#include "tests/test_util.h"

namespace graphrun {
namespace {

using testing::graphrun_cli;
using testing::python;
using testing::run_command;

// A Conv-ReLU-Linear network prepared for QAT with per-tensor uint8 activations (reduce_range: 0 to 127, the
// Clip) and per-channel int8 weights, observers calibrated then frozen, exported in training mode; with
// PyTorch's loss and gradients on one batch, and a small dataset whose label is the brightest quadrant.
const char* kQatExport = R"(
import torch
import torch.ao.quantization as tq
torch.manual_seed(0)
class Net(torch.nn.Module):
    def __init__(s):
        super().__init__()
        s.quant, s.dequant = tq.QuantStub(), tq.DeQuantStub()
        s.conv, s.relu, s.fc = torch.nn.Conv2d(1, 4, 3), torch.nn.ReLU(), torch.nn.Linear(4 * 6 * 6, 4)
    def forward(s, x):
        return s.dequant(s.fc(s.relu(s.conv(s.quant(x))).flatten(1)))
m = Net().train()
m.qconfig = tq.QConfig(activation=tq.default_fake_quant, weight=tq.default_per_channel_weight_fake_quant)
tq.prepare_qat(m, inplace=True)
r = np.random.RandomState(0)
x = r.rand(400, 1, 8, 8).astype(np.float32)
y = r.randint(0, 4, 400)
for i in range(400):  # the label's quadrant is brighter
    x[i, 0, (y[i] // 2) * 4:(y[i] // 2) * 4 + 4, (y[i] % 2) * 4:(y[i] % 2) * 4 + 4] += 0.5
for k in range(4):
    m(torch.from_numpy(x[k * 100:(k + 1) * 100]))  # calibrates the observers
m.apply(tq.disable_observer)
torch.onnx.export(m, torch.from_numpy(x[:8]), 'qat.onnx', opset_version=13, input_names=['image'],
                  output_names=['logits'], training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                  dynamic_axes={'image': {0: 'N'}, 'logits': {0: 'N'}})
batch, labels = torch.from_numpy(x[:8]), torch.from_numpy(y[:8]).long()
loss = torch.nn.functional.cross_entropy(m(batch), labels)
loss.backward()
np.save('image.npy', x[:8])
np.save('labels.npy', y[:8].astype(np.int64))
np.save('loss.npy', np.array(loss.item(), np.float32))
for n, p in m.named_parameters():
    np.save('torch_' + n + '_grad.npy', p.grad.numpy())
np.savez('train.npz', image=x[:320], labels=y[:320].astype(np.int64))
np.savez('test.npz', image=x[320:], labels=y[320:].astype(np.int64))
)";

bool has_torch() { return run_command(python() + " -c 'import torch' 2>&1").exit_code == 0; }

TEST(Quantize, QatModelFromPyTorchGetsPyTorchsGradients) {
  if (!has_torch()) GTEST_SKIP() << python() << " lacks torch";
  const std::string d = testing::temp_dir("quantize_qat_grad");
  testing::run_python(d, kQatExport);
  auto g = run_command(graphrun_cli() + " grad " + d + "/qat.onnx -o " + d + "/grad.onnx");
  ASSERT_EQ(g.exit_code, 0) << g.output;
  const Graph bg = load_onnx(d + "/grad.onnx");
  int fake = 0, q = 0;
  for (const Node& n : bg.nodes) {
    fake += n.op_type == "FakeQuantize";
    q += n.op_type == "QuantizeLinear" || n.op_type == "DequantizeLinear";
  }
  EXPECT_EQ(fake, 5);  // the input, the two weights, the two activations
  EXPECT_EQ(q, 0);
  auto r = run_command(graphrun_cli() + " run " + d + "/grad.onnx --input image=" + d + "/image.npy --input labels=" + d +
                       "/labels.npy --output-dir " + d + "/out");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NEAR(read_npy(d + "/out/loss.npy").as_doubles()[0], read_npy(d + "/loss.npy").as_doubles()[0], 1e-6);
  for (const char* p : {"conv.weight", "conv.bias", "fc.weight", "fc.bias"}) {
    const Tensor got = read_npy(d + "/out/" + std::string(p) + "_grad.npy");
    const Tensor want = read_npy(d + "/torch_" + std::string(p) + "_grad.npy");
    EXPECT_LE(testing::max_rel_diff(got, want), 1e-6) << p;
  }
  // `check` says how it checks such a model: the pairs as identities (no difference quotient can confirm a
  // straight-through gradient), the rest numerically.
  auto c = run_command(graphrun_cli() + " check " + d + "/qat.onnx");
  EXPECT_EQ(c.exit_code, 0) << c.output;
  EXPECT_NE(c.output.find("note: 5 QuantizeLinear/DequantizeLinear pairs train straight through"), std::string::npos)
      << c.output;
  // `run` keeps the model's standard pairs.
  for (const Node& n : load_onnx(d + "/qat.onnx").nodes) EXPECT_NE(n.op_type, "FakeQuantize");
}

TEST(Quantize, QatModelFromPyTorchTrains) {
  if (!has_torch()) GTEST_SKIP() << python() << " lacks torch";
  const std::string d = testing::temp_dir("quantize_qat_train");
  testing::run_python(d, kQatExport);
  auto r = run_command(graphrun_cli() + " train " + d + "/qat.onnx --data " + d + "/train.npz --test-data " + d +
                       "/test.npz --devices cpu:2 --epochs 4 --batch-size 32 --lr 0.5 --save " + d + "/trained.onnx");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto at = r.output.find("test acc: ");
  ASSERT_NE(at, std::string::npos) << r.output;
  EXPECT_GT(std::stod(r.output.substr(at + 10)), 0.6) << r.output;  // chance: 0.25
  // The saved model is the exported one with trained weights: its Q/DQ pairs stand.
  int q = 0;
  for (const Node& n : load_onnx(d + "/trained.onnx").nodes) q += n.op_type == "QuantizeLinear";
  EXPECT_EQ(q, 5);
}

}  // namespace
}  // namespace graphrun

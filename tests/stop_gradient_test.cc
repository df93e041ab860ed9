// torch's `.detach()` in a model's forward, exported as ai.graphrun::StopGradient (a custom symbolic for aten::detach,
// README: "Exporting a PyTorch model to train"): X's value, no gradient through it. torch's own export drops the
// detach (an identity), so the file alone cannot say where the gradient stops.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <string>

#include "graph/onnx_io.h"
#include "graph/tensor_io.h"
#include "tests/data_test_util.h"
#include "tests/test_util.h"

namespace graphrun {
namespace {

using testing::run_command;

// A VQ-VAE's straight-through estimator (z + (q - z).detach(), the codebook and commitment losses each detaching one
// side; the model computes its loss: --loss output) and a gate on a detached copy of the logits. Two SGD steps of
// `graphrun train` give torch's weights, `check` passes; the saved model holds Identities in their place (any runtime
// reads it) and computes torch's output. Exported without the symbolic, the gate's gradient flows through both factors
// and the weights come out elsewhere: the StopGradient is what makes the difference.
TEST(StopGradient, DetachedValuesTrainAsTorchDetachesThem) {
  const std::string dir = testing::temp_dir("stop_gradient_detach");
  testing::run_onnx_python(dir, R"(
import torch
import torch.nn.functional as F
torch.manual_seed(0)
class VQ(torch.nn.Module):
    def __init__(s):
        super().__init__(); s.enc = torch.nn.Linear(12, 4); s.code = torch.nn.Parameter(torch.randn(6, 4)); s.dec = torch.nn.Linear(4, 5)
    def forward(s, x, y):
        z = s.enc(x)
        q = s.code[((z.unsqueeze(1) - s.code.unsqueeze(0)) ** 2).sum(-1).argmin(1)]
        st = z + (q - z).detach()
        return F.cross_entropy(s.dec(st), y) + ((q - z.detach()) ** 2).mean() + 0.25 * ((q.detach() - z) ** 2).mean()
class Gate(torch.nn.Module):
    def __init__(s):
        super().__init__(); s.a = torch.nn.Linear(12, 8); s.b = torch.nn.Linear(8, 5)
    def forward(s, x):
        h = s.b(torch.tanh(s.a(x)))
        return h * h.detach().sigmoid()
X = torch.randn(32, 12); Y = torch.randint(0, 5, (32,))
np.savez('vq.npz', x=X.numpy(), y=Y.numpy())
np.savez('gate.npz', x=X.numpy(), labels=Y.numpy())
np.save('x4.npy', X[:4].numpy())
def export(m, args, names, path):
    torch.onnx.export(m, args, path, input_names=names, output_names=['out'],
                      dynamic_axes={n: {0: 'N'} for n in names}, training=torch.onnx.TrainingMode.TRAINING,
                      do_constant_folding=False, opset_version=13, custom_opsets={'ai.graphrun': 1})
for name, m, args, names in [('vq', VQ(), (X[:2], Y[:2]), ['x', 'y']), ('gate', Gate(), (X[:2],), ['x'])]:
    export(m, args, names, name + '_plain.onnx')
    torch.onnx.register_custom_op_symbolic('aten::detach', lambda g, x: g.op('ai.graphrun::StopGradient', x), 9)
    export(m, args, names, name + '.onnx')
    torch.onnx.unregister_custom_op_symbolic('aten::detach', 9)
    stops = sum(n.op_type == 'StopGradient' for n in onnx.load(name + '.onnx').graph.node)
    assert stops == (3 if name == 'vq' else 1), stops
    assert not any(n.op_type == 'StopGradient' for n in onnx.load(name + '_plain.onnx').graph.node)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    for step in range(2):
        out = m(X, Y) if name == 'vq' else F.cross_entropy(m(X), Y)
        opt.zero_grad(); out.backward(); opt.step()
    for k, v in m.state_dict().items():
        np.save(name + '_torch_' + k + '.npy', v.numpy())
    with open(name + '.names', 'w') as f:
        f.write('\n'.join(m.state_dict().keys()) + '\n')
    if name == 'gate':
        np.save('gate_y4.npy', m(X[:4]).detach().numpy())
)");
  const std::string cli = testing::graphrun_cli();
  auto train = [&](const std::string& model, const std::string& data, const std::string& extra) {
    auto r =
        run_command(cli + " train " + dir + "/" + model + ".onnx --data " + dir + "/" + data + ".npz --test-data " +
                    dir + "/" + data + ".npz --devices cpu:1 --epochs 2 --batch-size 32 --lr 0.1 " + extra +
                    " --save " + dir + "/trained_" + model + ".onnx 2>&1");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return load_onnx(dir + "/trained_" + model + ".onnx");
  };
  for (const std::string name : {"vq", "gate"}) {
    SCOPED_TRACE(name);
    const Graph trained = train(name, name, name == "vq" ? "--loss output" : "");
    std::ifstream names(dir + "/" + name + ".names");
    int compared = 0;
    for (std::string k; std::getline(names, k); ++compared) {
      ASSERT_TRUE(trained.initializers.count(k)) << k;
      EXPECT_LT(testing::max_abs_diff(trained.initializers.at(k), read_npy(dir + "/" + name + "_torch_" + k + ".npy")),
                2e-6)
          << k;
    }
    EXPECT_EQ(compared, name == "vq" ? 5 : 4);
    EXPECT_EQ(trained.opsets.count("ai.graphrun"), 0u);
    EXPECT_TRUE(std::none_of(trained.nodes.begin(), trained.nodes.end(),
                             [](const Node& n) { return n.op_type == "StopGradient"; }));
  }
  // `check` holds the detached values fixed in its differences, as the backward graph does.
  for (const char* name : {"vq", "gate"}) {
    auto r = run_command(cli + " check " + dir + "/" + name + ".onnx 2>&1");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("\nverdict: trainable"), std::string::npos) << r.output;
  }
  auto r = run_command(cli + " run " + dir + "/trained_gate.onnx --input x=" + dir + "/x4.npy --output-dir " + dir +
                       "/out 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_LT(testing::max_abs_diff(read_npy(dir + "/out/out.npy"), read_npy(dir + "/gate_y4.npy")), 1e-5);
  // The file as torch exports it by default: the gradient passes the detached factor too.
  const Graph plain = train("gate_plain", "gate", "");
  EXPECT_GT(testing::max_abs_diff(plain.initializers.at("b.weight"), read_npy(dir + "/gate_torch_b.weight.npy")), 1e-4);
}

}  // namespace
}  // namespace graphrun

// One BatchNormalization module called twice (a siamese network's shared tower): torch exports two nodes reading
// the same running-statistics initializers, and PyTorch's second call updates what the first one left. The
// training form chains them (graph/passes/to_training.cc): the pass structure, and training against torch for a
// model exported in training mode and one exported in eval mode, with and without --sync-bn.
#include <gtest/gtest.h>

#include <string>

#include "graph/onnx_io.h"
#include "graph/passes/train_mode.h"
#include "graph/tensor_io.h"
#include "tests/data_test_util.h"
#include "tests/test_util.h"

namespace graphrun {
namespace {

using testing::run_command;

Node bn_node(const std::string& name, const std::string& x, const std::string& y) {
  return Node{name, "BatchNormalization", "", {x, "scale", "bias", "mean", "var"}, {y}, {}};
}

// Two nodes on one statistic: the second reads the first's running mean and corrected running variance, only the
// second's are persisted, and the inference form reads the initializers again.
TEST(SharedBatchNorm, TheTrainingFormChainsNodesThatShareRunningStatistics) {
  Graph g;
  g.name = "shared";
  g.opsets[""] = 15;
  g.inputs = {"a", "b"};
  g.outputs = {"y"};
  const Tensor x = testing::random_tensor({2, 3, 4, 4}, 1);
  g.values["a"] = g.values["b"] = value_info_of(x);
  g.initializers = {{"scale", testing::random_tensor({3}, 2)},
                    {"bias", testing::random_tensor({3}, 3)},
                    {"mean", testing::random_tensor({3}, 4)},
                    {"var", testing::random_tensor({3}, 5, 0.5f, 2.f)}};
  g.nodes = {bn_node("bn", "a", "ya"), bn_node("bn_1", "b", "yb"), Node{"add", "Add", "", {"ya", "yb"}, {"y"}, {}}};

  const Graph t = passes::to_training(g);
  ASSERT_EQ(t.nodes.size(), 3u);
  const Node &first = t.nodes[0], &second = t.nodes[1];
  EXPECT_EQ(first.inputs[3], "mean");
  EXPECT_EQ(first.inputs[4], "var");
  ASSERT_EQ(first.outputs.size(), 3u);
  EXPECT_EQ(second.inputs[3], first.outputs[1]);
  EXPECT_EQ(second.inputs[4], first.outputs[2]);
  const auto roots = passes::running_stat_initializers(t);
  EXPECT_EQ(roots.at(second.outputs[1]), "mean");
  EXPECT_EQ(roots.at(second.outputs[2]), "var");
  // Again: the same graph (load_onnx_for_training and the pipeline both apply it).
  const Graph again = passes::to_training(t);
  EXPECT_EQ(again.nodes[1].inputs, second.inputs);

  const Graph u = passes::unbiased_running_var(t);
  const Node* bn1 = nullptr;
  std::string fix0, fix1;
  for (const Node& n : u.nodes) {
    if (n.name == "bn_1") bn1 = &n;
    if (n.name == "bn/unbiased_running_var") fix0 = n.outputs[0];
    if (n.name == "bn_1/unbiased_running_var") fix1 = n.outputs[0];
  }
  ASSERT_TRUE(bn1 && !fix0.empty() && !fix1.empty());
  EXPECT_EQ(bn1->inputs[4], fix0);  // from PyTorch's variance, not ONNX's biased one
  const auto ups = passes::batchnorm_state_updates(u);
  ASSERT_EQ(ups.size(), 2u);
  EXPECT_EQ(ups[0], std::make_pair(bn1->outputs[1], std::string("mean")));
  EXPECT_EQ(ups[1], std::make_pair(fix1, std::string("var")));

  const Graph inference = passes::to_inference(u);
  for (const Node& n : inference.nodes) {
    if (n.op_type != "BatchNormalization") continue;
    EXPECT_EQ(n.inputs[3], "mean") << n.name;
    EXPECT_EQ(n.inputs[4], "var") << n.name;
  }
}

// A siamese network as users write it, exported by torch in training mode (opset 15) and in eval mode (opset 13:
// converted, then put in training form): two SGD steps of `graphrun train` give torch's weights and running
// statistics, on one replica and with --sync-bn on two (the global batch is torch's batch); the saved model
// reads its initializers and `run` gives torch's eval-mode answer with them.
TEST(SharedBatchNorm, ASiameseNetworkTrainsItsSharedStatisticsAsTorch) {
  const std::string dir = testing::temp_dir("shared_batchnorm_siamese");
  testing::run_onnx_python(dir, R"(
import torch
torch.manual_seed(0)
class Siamese(torch.nn.Module):
    def __init__(s):
        super().__init__()
        s.conv = torch.nn.Conv2d(1, 4, 3, padding=1); s.bn = torch.nn.BatchNorm2d(4); s.fc = torch.nn.Linear(4, 3)
    def tower(s, t): return s.bn(torch.relu(s.conv(t))).mean(dim=(2, 3))
    def forward(s, a, b): return s.fc(s.tower(a) - s.tower(b))
m = Siamese()
with torch.no_grad():
    m.bn.running_mean.fill_(0.2); m.bn.running_var.fill_(1.5); m.bn.weight.uniform_(0.5, 1.5); m.bn.bias.uniform_(-0.2, 0.2)
a = torch.randn(2, 1, 8, 8); b = torch.randn(2, 1, 8, 8)
kw = dict(input_names=['a', 'b'], output_names=['y'], dynamic_axes={'a': {0: 'N'}, 'b': {0: 'N'}, 'y': {0: 'N'}},
          do_constant_folding=False)
m.train()
torch.onnx.export(m, (a, b), 'train_mode.onnx', opset_version=15, training=torch.onnx.TrainingMode.TRAINING, **kw)
m.eval()
torch.onnx.export(m, (a, b), 'eval_mode.onnx', opset_version=13, **kw)
for f in ('train_mode.onnx', 'eval_mode.onnx'):
    assert sum(n.op_type == 'BatchNormalization' for n in onnx.load(f).graph.node) == 2, f
rng = np.random.default_rng(3)
A = rng.standard_normal((32, 1, 8, 8)).astype(np.float32)
B = (rng.standard_normal((32, 1, 8, 8)) * 2 + 0.5).astype(np.float32)  # other statistics than A's
np.savez('train.npz', a=A, b=B, labels=rng.integers(0, 3, 32).astype(np.int64))
np.save('a4.npy', A[:4]); np.save('b4.npy', B[:4])
m.train()
opt = torch.optim.SGD(m.parameters(), lr=0.1)
for step in range(2):
    loss = torch.nn.functional.cross_entropy(m(torch.tensor(A), torch.tensor(B)), torch.tensor(np.load('train.npz')['labels']))
    opt.zero_grad(); loss.backward(); opt.step()
m.eval()
np.save('y_trained.npy', m(torch.tensor(A[:4]), torch.tensor(B[:4])).detach().numpy())
for k, t in m.state_dict().items():
    if t.dtype == torch.float32: np.save('torch_' + k + '.npy', t.numpy())
)");
  const std::string cli = testing::graphrun_cli();
  for (const char* model : {"train_mode", "eval_mode"})
    for (const std::string devices : {"cpu:1", "cpu:2 --sync-bn"}) {
      SCOPED_TRACE(std::string(model) + " " + devices);
      auto r = run_command(cli + " train " + dir + "/" + model + ".onnx --data " + dir + "/train.npz --test-data " +
                           dir + "/train.npz --devices " + devices + " --epochs 2 --batch-size 32 --lr 0.1 --save " +
                           dir + "/trained.onnx 2>&1");
      ASSERT_EQ(r.exit_code, 0) << r.output;
      const Graph trained = load_onnx(dir + "/trained.onnx");
      for (const char* k : {"conv.weight", "conv.bias", "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var",
                            "fc.weight", "fc.bias"}) {
        ASSERT_TRUE(trained.initializers.count(k)) << k;
        EXPECT_LT(testing::max_abs_diff(trained.initializers.at(k), read_npy(dir + "/torch_" + k + ".npy")), 2e-6) << k;
      }
      for (const Node& n : trained.nodes) {
        if (n.op_type != "BatchNormalization") continue;
        EXPECT_EQ(n.inputs[3], "bn.running_mean") << n.name;
      }
      r = run_command(cli + " run " + dir + "/trained.onnx --input a=" + dir + "/a4.npy --input b=" + dir +
                      "/b4.npy --output-dir " + dir + "/out 2>&1");
      ASSERT_EQ(r.exit_code, 0) << r.output;
      EXPECT_LT(testing::max_abs_diff(read_npy(dir + "/out/y.npy"), read_npy(dir + "/y_trained.npy")), 1e-5);
    }
}

}  // namespace
}  // namespace graphrun

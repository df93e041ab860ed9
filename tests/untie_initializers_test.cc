// Initializers torch's eval-mode export merged by value (graph/passes/untie_initializers.h): a fresh model's
// BatchNorm running_var = Identity(weight) and running_mean = Identity(bias), a fresh LayerNorm's weight and bias
// Identities of the first one's; and a BatchNorm reading one initializer as its weight and its running variance
// (a merge without Identity). Training separates them again, as the model they were exported from has them.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <string>

#include "graph/onnx_io.h"
#include "graph/passes/untie_initializers.h"
#include "graph/tensor_io.h"
#include "tests/data_test_util.h"
#include "tests/test_util.h"

namespace graphrun {
namespace {

using testing::run_command;

TEST(UntieInitializers, IdentitiesOfFloatInitializersBecomeTheirOwn) {
  Graph g;
  g.name = "merged";
  g.opsets[""] = 17;
  g.inputs = {"x"};
  g.outputs = {"y", "kept"};
  g.values["x"] = value_info_of(testing::random_tensor({2, 3}, 1));
  g.initializers = {{"w", testing::random_tensor({3}, 2)},
                    {"shape", Tensor::from_vector<int64_t>({1}, {3})},
                    {"alone", testing::random_tensor({3}, 3)}};
  g.nodes = {
      Node{"id1", "Identity", "", {"w"}, {"w1"}, {}},         Node{"id2", "Identity", "", {"w1"}, {"w2"}, {}},
      Node{"id3", "Identity", "", {"w"}, {"kept"}, {}},       Node{"id4", "Identity", "", {"shape"}, {"shape1"}, {}},
      Node{"id5", "Identity", "", {"alone"}, {"alone1"}, {}}, Node{"m0", "Mul", "", {"x", "alone1"}, {"z"}, {}},
      Node{"m1", "Mul", "", {"z", "w1"}, {"a"}, {}},          Node{"m2", "Mul", "", {"a", "w"}, {"b"}, {}},
      Node{"m3", "Mul", "", {"b", "w2"}, {"c"}, {}},          Node{"r", "Reshape", "", {"c", "shape1"}, {"y"}, {}}};
  const auto untied = passes::untie_initializers(g);
  ASSERT_EQ(untied.size(), 2u);
  EXPECT_EQ(untied[0], std::make_pair(std::string("w1"), std::string("w")));
  EXPECT_EQ(untied[1], std::make_pair(std::string("w2"), std::string("w1")));  // an Identity of an Identity
  ASSERT_TRUE(g.initializers.count("w1") && g.initializers.count("w2"));
  EXPECT_EQ(testing::max_abs_diff(g.initializers.at("w2"), g.initializers.at("w")), 0);
  EXPECT_NE(g.initializers.at("w1").raw(), g.initializers.at("w").raw());  // a buffer of its own
  std::vector<std::string> left;
  for (const Node& n : g.nodes) left.push_back(n.name);
  // A graph output's Identity, an integer initializer's and that of an initializer nothing else reads stay.
  EXPECT_EQ(left, (std::vector<std::string>{"id3", "id4", "id5", "m0", "m1", "m2", "m3", "r"}));
}

// One initializer read as BatchNormalization's scale and as its running variance (a merge without Identity): the
// statistic gets a copy, which two nodes reading it share; a statistic read in one role only stays.
TEST(UntieInitializers, ARunningStatisticReadInAnotherRoleGetsItsOwnCopy) {
  Graph g;
  g.name = "merged";
  g.opsets[""] = 15;
  g.inputs = {"a", "b"};
  g.outputs = {"ya", "yb"};
  g.values["a"] = g.values["b"] = value_info_of(testing::random_tensor({2, 3}, 1));
  const Tensor ones = Tensor::from_vector<float>({3}, {1, 1, 1});
  g.initializers = {{"ones", ones}, {"bias", testing::random_tensor({3}, 2)}, {"mean", testing::random_tensor({3}, 3)}};
  g.nodes = {Node{"bn", "BatchNormalization", "", {"a", "ones", "bias", "mean", "ones"}, {"ya"}, {}},
             Node{"bn_1", "BatchNormalization", "", {"b", "ones", "bias", "mean", "ones"}, {"yb"}, {}}};
  const auto untied = passes::untie_initializers(g);
  ASSERT_EQ(untied.size(), 1u);
  EXPECT_EQ(untied[0], std::make_pair(std::string("bn.running_var"), std::string("ones")));
  for (const Node& n : g.nodes) {
    EXPECT_EQ(n.inputs[1], "ones") << n.name;
    EXPECT_EQ(n.inputs[3], "mean") << n.name;
    EXPECT_EQ(n.inputs[4], "bn.running_var") << n.name;
  }
  EXPECT_EQ(testing::max_abs_diff(g.initializers.at("bn.running_var"), ones), 0);
}

// torch.onnx.export's default (eval mode) of fresh models, as a user exports one to train it: a BatchNorm after a
// Relu (not folded into the convolution) and two LayerNorms. Two SGD steps of `graphrun train` give torch's
// parameters and running statistics; read as written, the BatchNorm's statistics overwrote its scale and bias and
// the LayerNorms shared one weight. `check` counts every parameter apart, and `run` on the saved model gives torch's
// eval-mode output with the trained weights.
TEST(UntieInitializers, FreshModelsExportedInEvalModeTrainAsTorch) {
  const std::string dir = testing::temp_dir("untie_initializers_fresh");
  testing::run_onnx_python(dir, R"(
import torch
torch.manual_seed(0)
class Norms(torch.nn.Module):
    def __init__(s):
        super().__init__()
        s.a = torch.nn.Linear(6, 8); s.ln1 = torch.nn.LayerNorm(8); s.b = torch.nn.Linear(8, 8); s.ln2 = torch.nn.LayerNorm(8)
        s.c = torch.nn.Linear(8, 3)
    def forward(s, x): return s.c(torch.relu(s.ln2(s.b(torch.relu(s.ln1(s.a(x)))))))
models = {'bn': (torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3), torch.nn.ReLU(), torch.nn.BatchNorm2d(4), torch.nn.Flatten(),
                                     torch.nn.Linear(4 * 6 * 6, 3)), (32, 1, 8, 8)),
          'ln': (Norms(), (32, 6))}
rng = np.random.default_rng(0)
for name, (m, shape) in models.items():
    m.eval()
    torch.onnx.export(m, torch.randn(2, *shape[1:]), name + '.onnx', input_names=['x'], output_names=['y'],
                      dynamic_axes={'x': {0: 'N'}, 'y': {0: 'N'}}, opset_version=17)
    assert any(n.op_type == 'Identity' for n in onnx.load(name + '.onnx').graph.node), name  # merged by value
    X = rng.standard_normal(shape).astype(np.float32); L = rng.integers(0, 3, 32).astype(np.int64)
    np.savez(name + '.npz', x=X, labels=L)
    np.save(name + '_x4.npy', X[:4])
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    m.train()
    for step in range(2):
        loss = torch.nn.functional.cross_entropy(m(torch.tensor(X)), torch.tensor(L))
        opt.zero_grad(); loss.backward(); opt.step()
    m.eval()
    np.save(name + '_y4.npy', m(torch.tensor(X[:4])).detach().numpy())
    with open(name + '.names', 'w') as f:
        for k, v in m.state_dict().items():
            if v.dtype == torch.float32:
                np.save(name + '_torch_' + k + '.npy', v.numpy()); f.write(k + '\n')
# As an exporter that merges equal initializers by reading one from several nodes writes it: no Identity, the
# BatchNorm reading its weight as its running variance and its bias as its running mean. The statistics then take
# the names graphrun gives their copies.
merged = onnx.load('bn.onnx')
alias = {n.output[0]: n.input[0] for n in merged.graph.node if n.op_type == 'Identity'}
keep = [n for n in merged.graph.node if n.op_type != 'Identity']
del merged.graph.node[:]
for n in keep:
    n.input[:] = [alias.get(i, i) for i in n.input]
    merged.graph.node.append(n)
assert sum(n.op_type == 'BatchNormalization' for n in merged.graph.node) == 1
bn_name = [n.name for n in merged.graph.node if n.op_type == 'BatchNormalization'][0]
onnx.save(merged, 'bn_merged.onnx')
for src in ('bn_x4.npy', 'bn_y4.npy', 'bn.npz'):
    os.link(src, src.replace('bn', 'bn_merged', 1))
with open('bn_merged.names', 'w') as f:
    for k in open('bn.names').read().split():
        to = {'2.running_mean': bn_name + '.running_mean', '2.running_var': bn_name + '.running_var'}.get(k, k)
        os.link('bn_torch_' + k + '.npy', 'bn_merged_torch_' + to.replace('/', '_') + '.npy'); f.write(to + '\n')
)");
  const std::string cli = testing::graphrun_cli();
  for (const std::string name : {"bn", "ln", "bn_merged"}) {
    SCOPED_TRACE(name);
    auto r = run_command(cli + " check " + dir + "/" + name + ".onnx 2>&1");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find(name == "ln" ? "float64, 10 parameters" : "float64, 6 parameters"), std::string::npos)
        << r.output;
    r = run_command(cli + " train " + dir + "/" + name + ".onnx --data " + dir + "/" + name + ".npz --test-data " +
                    dir + "/" + name + ".npz --devices cpu:1 --epochs 2 --batch-size 32 --lr 0.1 --save " + dir +
                    "/trained_" + name + ".onnx 2>&1");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const Graph trained = load_onnx(dir + "/trained_" + name + ".onnx");
    std::ifstream names(dir + "/" + name + ".names");
    int compared = 0;
    for (std::string k; std::getline(names, k); ++compared) {
      ASSERT_TRUE(trained.initializers.count(k)) << k;
      std::string file = k;
      std::replace(file.begin(), file.end(), '/', '_');
      EXPECT_LT(
          testing::max_abs_diff(trained.initializers.at(k), read_npy(dir + "/" + name + "_torch_" + file + ".npy")),
          2e-6)
          << k;
    }
    EXPECT_EQ(compared, name == "ln" ? 10 : 8);
    r = run_command(cli + " run " + dir + "/trained_" + name + ".onnx --input x=" + dir + "/" + name +
                    "_x4.npy --output-dir " + dir + "/out_" + name + " 2>&1");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_LT(testing::max_abs_diff(read_npy(dir + "/out_" + name + "/y.npy"), read_npy(dir + "/" + name + "_y4.npy")),
              1e-5);
  }
}

}  // namespace
}  // namespace graphrun

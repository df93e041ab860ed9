// The model's own list of initializers that are no parameters (autodiff::metadata_frozen, the metadata_props key
// "graphrun.frozen"): torch exports its buffers and its requires_grad=False parameters as initializers like the
// weights, and an exporting script can name them so that graphrun trains what torch trains.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "autodiff/autodiff.h"
#include "graph/onnx_io.h"
#include "graph/tensor_io.h"
#include "tests/data_test_util.h"
#include "tests/test_util.h"

namespace graphrun {
namespace {

using testing::run_command;

TEST(FrozenMetadata, NamesInitializersAndModulesAndSkipsWhatTheModelLacks) {
  Graph g;
  g.name = "m";
  g.opsets[""] = 17;
  for (const char* n : {"pe", "enc.w", "enc.b", "encx.w", "head.w", "mask"})
    g.initializers[n] = testing::random_tensor({2}, 1);
  g.meta.props = {{"author", "pe"}, {"graphrun.frozen", "pe, enc\n missing,,mask "}};
  EXPECT_EQ(autodiff::metadata_frozen(g), (std::vector<std::string>{"enc.b", "enc.w", "mask", "pe"}));
  EXPECT_EQ(autodiff::trainable_params(g, {}), (std::vector<std::string>{"encx.w", "head.w"}));
  // --freeze adds to it, and may name a frozen one again.
  EXPECT_EQ(autodiff::trainable_params(g, {"head", "pe"}), (std::vector<std::string>{"encx.w"}));
  g.meta.props = {{"graphrun.frozen", ""}};
  EXPECT_EQ(autodiff::trainable_params(g, {}).size(), 6u);
}

// The language model of PyTorch's nn.Transformer tutorial, as a classifier: a pretrained embedding frozen
// (requires_grad=False), a sinusoidal positional encoding registered as a buffer, a TransformerEncoderLayer.
// Exported in training mode with the buffers and frozen parameters in the metadata, two SGD steps of
// `graphrun train` give torch's weights, the buffer and the frozen embedding unchanged; `grad` has no gradient
// for them. Without the metadata, graphrun trains the encoding and the embedding (torch cannot tell them apart in
// the file): the second half measures that the metadata is what makes the difference.
TEST(FrozenMetadata, BuffersAndFrozenParametersOfATransformerStayAsTorchLeavesThem) {
  const std::string dir = testing::temp_dir("frozen_metadata_tf");
  testing::run_onnx_python(dir, R"(
import math
import torch
torch.manual_seed(0)
class PositionalEncoding(torch.nn.Module):
    def __init__(s, d, n=16):
        super().__init__()
        pos = torch.arange(n).unsqueeze(1); div = torch.exp(torch.arange(0, d, 2) * (-math.log(10000.0) / d))
        pe = torch.zeros(n, d); pe[:, 0::2] = torch.sin(pos * div); pe[:, 1::2] = torch.cos(pos * div)
        s.register_buffer('pe', pe)
    def forward(s, x): return x + s.pe[: x.shape[1]]
class Model(torch.nn.Module):
    def __init__(s, d=8):
        super().__init__()
        s.emb = torch.nn.Embedding(20, d); s.pos = PositionalEncoding(d)
        s.enc = torch.nn.TransformerEncoderLayer(d, 2, 16, dropout=0.0, batch_first=True); s.head = torch.nn.Linear(d, 3)
        s.d = d
    def forward(s, x): return s.head(s.enc(s.pos(s.emb(x) * math.sqrt(s.d))).mean(1))
m = Model()
m.emb.weight.requires_grad_(False)
X = torch.randint(0, 20, (32, 7)); L = torch.randint(0, 3, (32,))
np.savez('data.npz', x=X.numpy(), labels=L.numpy())
torch.onnx.export(m, (X[:2],), 'plain.onnx', input_names=['x'], output_names=['y'], dynamic_axes={'x': {0: 'N'}},
                  training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False, opset_version=17)
model = onnx.load('plain.onnx')
frozen = [n for n, _ in m.named_buffers()] + [n for n, p in m.named_parameters() if not p.requires_grad]
assert frozen == ['pos.pe', 'emb.weight'], frozen
onnx.helper.set_model_props(model, {'graphrun.frozen': ','.join(frozen)})
onnx.save(model, 'tagged.onnx')
inits = {i.name for i in model.graph.initializer}
assert 'pos.pe' in inits and 'emb.weight' in inits, inits
opt = torch.optim.SGD([p for p in m.parameters() if p.requires_grad], lr=0.1)
for step in range(2):
    loss = torch.nn.functional.cross_entropy(m(X), L)
    opt.zero_grad(); loss.backward(); opt.step()
with open('names', 'w') as f:
    for k, v in m.state_dict().items():
        if k in inits:
            np.save('torch_' + k + '.npy', v.numpy()); f.write(k + '\n')
)");
  const std::string cli = testing::graphrun_cli();
  auto train = [&](const std::string& name) {
    auto r = run_command(cli + " train " + dir + "/" + name + ".onnx --data " + dir + "/data.npz --test-data " + dir +
                         "/data.npz --devices cpu:1 --epochs 2 --batch-size 32 --lr 0.1 --save " + dir + "/trained_" +
                         name + ".onnx 2>&1");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return r.output;
  };
  const std::string out = train("tagged");
  EXPECT_NE(out.find("note: the model's metadata (graphrun.frozen) names 2 initializers no parameter (emb.weight, "
                     "pos.pe): not trained"),
            std::string::npos)
      << out;
  const Graph tagged = load_onnx(dir + "/trained_tagged.onnx");
  EXPECT_EQ(autodiff::metadata_frozen(tagged), (std::vector<std::string>{"emb.weight", "pos.pe"}));  // kept on save
  std::ifstream names(dir + "/names");
  int compared = 0;
  for (std::string k; std::getline(names, k); ++compared) {
    ASSERT_TRUE(tagged.initializers.count(k)) << k;
    EXPECT_LT(testing::max_abs_diff(tagged.initializers.at(k), read_npy(dir + "/torch_" + k + ".npy")), 2e-6) << k;
  }
  EXPECT_GE(compared, 10);
  auto r = run_command(cli + " grad " + dir + "/tagged.onnx -o " + dir + "/tagged.grad.onnx 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Graph grad = load_onnx(dir + "/tagged.grad.onnx");
  EXPECT_FALSE(grad.is_output("pos.pe_grad"));
  EXPECT_FALSE(grad.is_output("emb.weight_grad"));
  EXPECT_TRUE(grad.is_output("head.weight_grad"));

  train("plain");
  const Graph plain = load_onnx(dir + "/trained_plain.onnx");
  for (const char* k : {"pos.pe", "emb.weight"})
    EXPECT_GT(testing::max_abs_diff(plain.initializers.at(k), read_npy(dir + "/torch_" + std::string(k) + ".npy")),
              1e-4)
        << k;
}

}  // namespace
}  // namespace graphrun

// graphrun train --loss output: a model that computes its own loss (forward(x, y) -> loss, an autoencoder's
// reconstruction error) trains without labels, every input fed from the data's array of its name. Checked bitwise
// against --loss mse on the same network (a scalar loss output and per-example losses alike, uneven shards on two
// replicas), against PyTorch's own training of the modules it exported (full-batch SGD, the loss at every step and
// the test loss), and case by case for what it refuses.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "graph/onnx_io.h"
#include "tests/data_test_util.h"
#include "tests/test_util.h"

namespace graphrun {
namespace {

using testing::run_python;

std::string train(const std::string& model, const std::string& args) {
  auto r = testing::run_command(testing::graphrun_cli() + " train " + model + " " + args);
  EXPECT_EQ(r.exit_code, 0) << args << "\n" << r.output;
  return r.output;
}

std::vector<nlohmann::json> metrics(const std::string& path) {
  std::vector<nlohmann::json> r;
  std::ifstream f(path);
  for (std::string line; std::getline(f, line);)
    if (!line.empty()) r.push_back(nlohmann::json::parse(line));
  return r;
}

void expect_same_weights(const std::string& a, const std::string& b) {
  const auto wa = load_onnx(a).initializers, wb = load_onnx(b).initializers;
  ASSERT_EQ(wa.size(), wb.size());
  for (const auto& [name, t] : wa) {
    ASSERT_TRUE(wb.count(name)) << name;
    EXPECT_TRUE(testing::bytes_equal(t, wb.at(name))) << name << ": " << a << " vs " << b;
  }
}

// A regressor x[N,4] -> out[N,1] three ways, with the same weights: plain (graphrun's --loss mse attaches the
// loss), with its own mean squared error as a scalar output `loss` (x and y both inputs), and with its per-example
// squared errors [N,1] as its output (graphrun averages them).
const char* kRegressors = R"(
import onnx
from onnx import helper as h, TensorProto as T, numpy_helper as nh
r = np.random.RandomState(0)
x = r.randn(700, 4).astype(np.float32)
y = (x @ np.array([[1.], [-2.], [0.5], [3.]], np.float32) + 0.1 * r.randn(700, 1)).astype(np.float32)
np.savez('train.npz', x=x[:600], y=y[:600]); np.savez('test.npz', x=x[600:], y=y[600:])
W1 = (0.5 * r.randn(16, 4)).astype(np.float32); W2 = (0.3 * r.randn(1, 16)).astype(np.float32)
def inits(): return [nh.from_array(W1, 'w1'), nh.from_array(np.zeros(16, np.float32), 'b1'),
                     nh.from_array(W2, 'w2'), nh.from_array(np.zeros(1, np.float32), 'b2')]
net = [h.make_node('Gemm', ['x', 'w1', 'b1'], ['a'], transB=1), h.make_node('Relu', ['a'], ['r']),
       h.make_node('Gemm', ['r', 'w2', 'b2'], ['out'], transB=1)]
X = h.make_tensor_value_info('x', T.FLOAT, ['N', 4]); Y = h.make_tensor_value_info('y', T.FLOAT, ['N', 1])
def save(name, nodes, ins, outs):
    g = h.make_graph(net + nodes, name, ins, outs, inits())
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid('', 13)]), name + '.onnx')
save('plain', [], [X], [h.make_tensor_value_info('out', T.FLOAT, ['N', 1])])
sq = [h.make_node('Sub', ['out', 'y'], ['d']), h.make_node('Mul', ['d', 'd'], ['sq'])]
save('own', sq + [h.make_node('ReduceMean', ['sq'], ['loss'], keepdims=0)], [X, Y], [h.make_tensor_value_info('loss', T.FLOAT, [])])
save('per_example', sq, [X, Y], [h.make_tensor_value_info('sq', T.FLOAT, ['N', 1])])
)";

// The loss the model computes is the loss --loss mse attaches: the same nodes, so the same bits, on two replicas
// whose shards differ in size (batch 51: 26 and 25; the last batch of 39: 20 and 19), each seeded with its share.
TEST(OwnLoss, TrainsBitwiseAsTheSameLossAttachedByGraphrun) {
  const std::string d = testing::temp_dir("own_loss_bitwise");
  run_python(d, kRegressors);
  const std::string common = "--data " + d + "/train.npz --test-data " + d +
                             "/test.npz --devices cpu:2 --threads 1 "
                             "--epochs 3 --batch-size 51 --lr 0.05 --momentum 0.5 --seed 1 ";
  const std::string a =
      train(d + "/plain.onnx", common + "--loss mse --labels y --save " + d + "/a.onnx --metrics " + d + "/a.jsonl");
  const std::string b =
      train(d + "/own.onnx", common + "--loss output --save " + d + "/b.onnx --metrics " + d + "/b.jsonl");
  const std::string c =
      train(d + "/per_example.onnx", common + "--loss output --save " + d + "/c.onnx --metrics " + d + "/c.jsonl");
  expect_same_weights(d + "/a.onnx", d + "/b.onnx");
  expect_same_weights(d + "/a.onnx", d + "/c.onnx");
  const auto ma = metrics(d + "/a.jsonl"), mb = metrics(d + "/b.jsonl"), mc = metrics(d + "/c.jsonl");
  ASSERT_EQ(ma.size(), 3u);
  ASSERT_EQ(mb.size(), 3u);
  ASSERT_EQ(mc.size(), 3u);
  for (size_t e = 0; e < 3; ++e) {
    EXPECT_EQ(ma[e]["loss"], mb[e]["loss"]) << e;
    EXPECT_EQ(ma[e]["loss"], mc[e]["loss"]) << e;
    // The test figure: the mean over the test examples of the model's loss, which here is the squared error.
    const double mse = ma[e]["test_mse"].get<double>();
    EXPECT_NEAR(mb[e]["test_loss"].get<double>(), mse, 2e-6 + 1e-5 * mse) << e;
    EXPECT_NEAR(mc[e]["test_loss"].get<double>(), mse, 2e-6 + 1e-5 * mse) << e;
    EXPECT_FALSE(mb[e].contains("test_acc")) << mb[e].dump();
  }
  EXPECT_LT(ma[2]["test_mse"].get<double>(), 0.5 * ma[0]["loss"].get<double>()) << a;  // it learns
  EXPECT_NE(b.find("test loss "), std::string::npos) << b;                             // the epoch lines
  EXPECT_NE(b.find("\ntest loss: "), std::string::npos) << b;                          // the closing line
  EXPECT_EQ(b.find("acc"), std::string::npos) << b;
  // The backward graph of the model's own loss: no labels input.
  auto g = testing::run_command(testing::graphrun_cli() + " grad " + d + "/own.onnx --loss output -o " + d + "/g.onnx");
  ASSERT_EQ(g.exit_code, 0) << g.output;
  const Graph grad = load_onnx(d + "/g.onnx");
  EXPECT_EQ(grad.inputs, (std::vector<std::string>{"x", "y"}));
  EXPECT_TRUE(grad.is_output("w1_grad") && grad.is_output("loss__2"));
}

// The prologue of the torch comparisons below: 384 Fashion-MNIST training images, the first 256 the training set
// (train.npz, the whole of it one batch) and the rest the test set (test.npz); x and y in numpy; torch seeded.
const char* kFashionBatches = R"(
import gzip, json, onnx, torch, torch.nn as nn, torch.nn.functional as F
D = '/usr/share/datasets/fashion-mnist'
def load(p, off): return np.frombuffer(gzip.open(os.path.join(D, p)).read(), np.uint8, offset=off)
x = (load('train-images-idx3-ubyte.gz', 16).reshape(-1, 1, 28, 28)[:384] / 255.0).astype(np.float32)
y = load('train-labels-idx1-ubyte.gz', 8)[:384].astype(np.int64)
np.savez('train.npz', image=x[:256], labels=y[:256]); np.savez('test.npz', image=x[256:], labels=y[256:])
torch.manual_seed(0)
)";

// Modules written as users write them, each returning its loss, exported by torch and trained by it with full-batch
// SGD: an autoencoder of Fashion-MNIST images (forward(image) -> its reconstruction's mean squared error) and a
// classifier that takes its labels (forward(image, labels) -> F.cross_entropy, SoftmaxCrossEntropyLoss in the export).
// With the whole training set as the batch, graphrun's epoch k is torch's step k: its loss, then the test loss after
// it.
TEST(OwnLoss, TorchModulesThatReturnTheirLossTrainAsInPyTorch) {
  if (!testing::have_fashion_mnist())
    GTEST_SKIP() << "Fashion-MNIST is not installed (Debian package dataset-fashion-mnist)";
  const std::string d = testing::temp_dir("own_loss_torch");
  run_python(d, std::string(kFashionBatches) + R"(
class AE(nn.Module):
    def __init__(s):
        super().__init__()
        s.enc = nn.Sequential(nn.Flatten(), nn.Linear(784, 32), nn.ReLU(), nn.Linear(32, 8))
        s.dec = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 784))
    def forward(s, image): return ((s.dec(s.enc(image)).view_as(image) - image) ** 2).mean()  # (torch 1.13 cannot export F.mse_loss)
class Clf(nn.Module):
    def __init__(s):
        super().__init__()
        s.net = nn.Sequential(nn.Conv2d(1, 4, 5, stride=2), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 12 * 12, 10))
    def forward(s, image, labels): return F.cross_entropy(s.net(image), labels)
want = {}
for name, m, lr in (('ae', AE(), 1.0), ('clf', Clf(), 0.5)):
    ins = (torch.from_numpy(x[:2]),) if name == 'ae' else (torch.from_numpy(x[:2]), torch.from_numpy(y[:2]))
    names = ['image'] if name == 'ae' else ['image', 'labels']
    torch.onnx.export(m, ins, name + '.onnx', input_names=names, output_names=['loss'],
                      dynamic_axes={n: {0: 'N'} for n in names}, opset_version=17)
    def loss(a, b): return m(torch.from_numpy(a)) if name == 'ae' else m(torch.from_numpy(a), torch.from_numpy(b))
    opt = torch.optim.SGD(m.parameters(), lr=lr)
    with torch.no_grad(): first_test = loss(x[256:], y[256:]).item()
    steps, tests = [], []
    for k in range(4):
        opt.zero_grad(); l = loss(x[:256], y[:256]); l.backward(); opt.step(); steps.append(l.item())
        with torch.no_grad(): tests.append(loss(x[256:], y[256:]).item())
    want[name] = {'lr': lr, 'first_test': first_test, 'steps': steps, 'tests': tests}
json.dump(want, open('want.json', 'w'))
)");
  std::ifstream wf(d + "/want.json");
  const nlohmann::json want = nlohmann::json::parse(wf);
  for (const char* name : {"ae", "clf"}) {
    SCOPED_TRACE(name);
    const nlohmann::json& w = want[name];
    std::ostringstream lr;
    lr << w["lr"].get<double>();
    const std::string model = d + "/" + name + ".onnx", m = d + "/" + name + ".jsonl",
                      e = d + "/" + name + "_eval.jsonl";
    train(model, "--data " + d + "/train.npz --test-data " + d + "/test.npz --eval-only --loss output --metrics " + e);
    const auto ev = metrics(e);
    ASSERT_EQ(ev.size(), 1u);
    const double first = w["first_test"].get<double>();
    EXPECT_NEAR(ev[0]["test_loss"].get<double>(), first, 1e-5 * first);
    const std::string out = train(model, "--data " + d + "/train.npz --test-data " + d +
                                             "/test.npz --loss output "
                                             "--devices cpu:2 --threads 1 --batch-size 256 --epochs 4 --lr " +
                                             lr.str() + " --metrics " + m);
    const auto got = metrics(m);
    ASSERT_EQ(got.size(), 4u) << out;
    for (size_t k = 0; k < 4; ++k) {
      const double step = w["steps"][k].get<double>(), test = w["tests"][k].get<double>();
      EXPECT_NEAR(got[k]["loss"].get<double>(), step, 2e-4 * step) << k;
      EXPECT_NEAR(got[k]["test_loss"].get<double>(), test, 2e-4 * test) << k;
    }
    // (The comparison means something: it learns, by far more than the tolerance.)
    EXPECT_LT(w["tests"][3].get<double>(), 0.98 * first);
  }
}

// Double backprop (Drucker and LeCun's input-gradient penalty): a classifier whose loss is its cross-entropy plus
// lambda times the squared norm of that cross-entropy's gradient w.r.t. the image, the gradient taken by ONNX's
// Gradient node (appended to torch's export, which cannot export autograd.grad). Training differentiates the
// backward of the convolution, the Relu, the MaxPool and the loss a second time; full-batch SGD for 4 steps matches
// PyTorch's `torch.autograd.grad(..., create_graph=True)` at every step and in the test loss.
TEST(OwnLoss, DoubleBackpropTrainsAsInPyTorch) {
  if (!testing::have_fashion_mnist())
    GTEST_SKIP() << "Fashion-MNIST is not installed (Debian package dataset-fashion-mnist)";
  const std::string d = testing::temp_dir("own_loss_double_backprop");
  run_python(d, std::string(kFashionBatches) + R"(
from onnx import helper
LAM = 2000.0
class Clf(nn.Module):
    def __init__(s):
        super().__init__()
        s.net = nn.Sequential(nn.Conv2d(1, 4, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(4 * 12 * 12, 10))
    def forward(s, image, labels): return F.cross_entropy(s.net(image), labels)
m = Clf()
torch.onnx.export(m, (torch.from_numpy(x[:2]), torch.from_numpy(y[:2])), 'clf.onnx', input_names=['image', 'labels'],
                  output_names=['ce'], dynamic_axes={'image': {0: 'N'}, 'labels': {0: 'N'}}, opset_version=17)
g = onnx.load('clf.onnx')
g.graph.node.extend([
    helper.make_node('Gradient', ['image', 'labels'], ['gx'], domain='ai.onnx.preview.training', xs=['image'],
                     zs=['labels'], y='ce', name='dce_dimage'),
    helper.make_node('Mul', ['gx', 'gx'], ['gx2']), helper.make_node('ReduceSum', ['gx2'], ['pen'], keepdims=0),
    helper.make_node('Constant', [], ['lam'], value=helper.make_tensor('lam', onnx.TensorProto.FLOAT, [], [LAM])),
    helper.make_node('Mul', ['pen', 'lam'], ['wpen']), helper.make_node('Add', ['ce', 'wpen'], ['loss'])])
del g.graph.output[:]
g.graph.output.append(helper.make_tensor_value_info('loss', onnx.TensorProto.FLOAT, []))
g.opset_import.append(helper.make_opsetid('ai.onnx.preview.training', 1))
onnx.save(g, 'dbp.onnx')
def loss(a, b):
    a = torch.from_numpy(a).requires_grad_(True)
    ce = m(a, torch.from_numpy(b))
    gx, = torch.autograd.grad(ce, a, create_graph=True)
    return ce + LAM * (gx ** 2).sum()
opt = torch.optim.SGD(m.parameters(), lr=0.5)
first_test = loss(x[256:], y[256:]).item()
steps, tests = [], []
for k in range(4):
    opt.zero_grad(); l = loss(x[:256], y[:256]); l.backward(); opt.step(); steps.append(l.item())
    tests.append(loss(x[256:], y[256:]).item())
json.dump({'first_test': first_test, 'steps': steps, 'tests': tests}, open('want.json', 'w'))
)");
  std::ifstream wf(d + "/want.json");
  const nlohmann::json w = nlohmann::json::parse(wf);
  const std::string model = d + "/dbp.onnx", data = " --data " + d + "/train.npz --test-data " + d + "/test.npz";
  // The penalty of a batch's mean loss depends on the batch (its gradient shrinks as 1/B): one batch of everything,
  // one replica (two would each take their shard's penalty, as DDP's ranks do).
  train(model, data + " --eval-only --loss output --devices cpu:1 --batch-size 256 --metrics " + d + "/eval.jsonl");
  const auto ev = metrics(d + "/eval.jsonl");
  ASSERT_EQ(ev.size(), 1u);
  const double first = w["first_test"].get<double>();
  EXPECT_NEAR(ev[0]["test_loss"].get<double>(), first, 1e-4 * first);  // float32 through two backward passes
  const std::string out = train(model, data +
                                           " --loss output --devices cpu:1 --threads 2 --batch-size 256 --epochs 4 "
                                           "--lr 0.5 --metrics " +
                                           d + "/m.jsonl");
  const auto got = metrics(d + "/m.jsonl");
  ASSERT_EQ(got.size(), 4u) << out;
  for (size_t k = 0; k < 4; ++k) {
    const double step = w["steps"][k].get<double>(), test = w["tests"][k].get<double>();
    EXPECT_NEAR(got[k]["loss"].get<double>(), step, 2e-4 * step) << k;
    EXPECT_NEAR(got[k]["test_loss"].get<double>(), test, 2e-4 * test) << k;
  }
  EXPECT_LT(w["tests"][3].get<double>(), 0.98 * first);  // it learns, by far more than the tolerance
}

TEST(OwnLoss, WhatItCannotTrainIsOneLineAndExit2) {
  const std::string d = testing::temp_dir("own_loss_refused");
  run_python(d, kRegressors);
  run_python(d, R"(
import onnx
from onnx import helper as h, TensorProto as T
m = onnx.load('plain.onnx')
m.graph.node.append(h.make_node('ArgMax', ['out'], ['best'], axis=1))
del m.graph.output[:]
m.graph.output.append(h.make_tensor_value_info('best', T.INT64, ['N', 1]))
m.graph.output.append(h.make_tensor_value_info('out', T.FLOAT, ['N', 1]))
onnx.save(m, 'int_output.onnx')
)");
  const std::string data = " --data " + d + "/train.npz --test-data " + d + "/test.npz --max-steps 1 --epochs 1";
  struct Case {
    std::string model, args, says;
  } cases[] = {
      {"own", " --loss output --labels y", "--loss output reads no targets"},
      {"own", " --loss output --label-smoothing 0.1",
       "--label-smoothing is for --loss cross-entropy, not --loss output"},
      {"own", " --loss hinge", "output (the model's own loss, no labels)"},
      {"int_output", " --loss output", "'best' is i64, not a float tensor"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.model + c.args);
    auto r = testing::run_command(testing::graphrun_cli() + " train " + d + "/" + c.model + ".onnx" + data + c.args);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find(c.says), std::string::npos) << r.output;
  }
  // A model input the data has no array for: the arrays feed the inputs by name.
  run_python(d, "np.savez('x_only.npz', x=np.zeros((10, 4), np.float32))\n");
  auto r = testing::run_command(testing::graphrun_cli() + " train " + d + "/own.onnx --loss output --data " + d +
                                "/x_only.npz --max-steps 1 --epochs 1");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("has no array 'y' for model input 'y'"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace graphrun

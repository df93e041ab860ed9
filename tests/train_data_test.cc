// graphrun train on the user's own data: Fashion-MNIST re-exported (by the test) as .npz, as a .npy
// folder and as a PNG class-folder tree trains LeNet bitwise as the MNIST folder does; a regression
// with --loss mse, an int64-token model, models of two inputs (one a torch transformer with its padding
// mask), resume with .npz and with --augment; bad data, case by case.
// GCC 12's sanitizer builds see a false "may be used uninitialized" inside <regex>'s std::function.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include <nlohmann/json.hpp>

#include "graph/onnx_io.h"
#include "runtime/trainer.h"
#include "tests/data_test_util.h"
#include "tests/test_util.h"
#include "tests/trainer_test_util.h"

namespace graphrun {
namespace {

namespace fs = std::filesystem;
using testing::run_python;

// Fashion-MNIST's first `ntr` training and `nte` test examples as an MNIST folder (idx/), .npz files
// (train.npz stored, test.npz deflated), .npy folders (npy/, npyt/), PNG class trees (png/train,
// png/test: classes "0".."9") and .npz files in the PNG trees' order (class, then file).
const char* kExport = R"(
import gzip, struct, zlib
D = '/usr/share/datasets/fashion-mnist'
def load(p, off): return np.frombuffer(gzip.open(os.path.join(D, p)).read(), np.uint8, offset=off)
NTR, NTE = int(sys.argv[1]), int(sys.argv[2])
xi = load('train-images-idx3-ubyte.gz', 16).reshape(-1, 28, 28)[:NTR]; yi = load('train-labels-idx1-ubyte.gz', 8)[:NTR]
xt = load('t10k-images-idx3-ubyte.gz', 16).reshape(-1, 28, 28)[:NTE]; yt = load('t10k-labels-idx1-ubyte.gz', 8)[:NTE]
os.makedirs('idx', exist_ok=True)
def idx(path, a, magic):
    with gzip.open(path, 'wb') as f: f.write(struct.pack('>I', magic) + b''.join(struct.pack('>I', d) for d in a.shape) + a.tobytes())
idx('idx/train-images-idx3-ubyte.gz', xi, 0x803); idx('idx/train-labels-idx1-ubyte.gz', yi, 0x801)
idx('idx/t10k-images-idx3-ubyte.gz', xt, 0x803); idx('idx/t10k-labels-idx1-ubyte.gz', yt, 0x801)
np.savez('train.npz', image=xi, labels=yi); np.savez_compressed('test.npz', image=xt, labels=yt)
for d, x, y in (('npy', xi, yi), ('npyt', xt, yt)):
    os.makedirs(d, exist_ok=True); np.save(d + '/pixels.npy', x); np.save(d + '/labels.npy', y.astype(np.int64))
def chunk(t, d): c = t + d; return struct.pack('>I', len(d)) + c + struct.pack('>I', zlib.crc32(c) & 0xffffffff)
def png(path, a):
    raw = b''.join(b'\0' + a[r].tobytes() for r in range(a.shape[0]))
    open(path, 'wb').write(b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', a.shape[1], a.shape[0], 8, 0, 0, 0, 0))
                           + chunk(b'IDAT', zlib.compress(raw)) + chunk(b'IEND', b''))
for split, x, y in (('train', xi, yi), ('test', xt, yt)):
    for c in range(10): os.makedirs('png/%s/%d' % (split, c), exist_ok=True)
    for i in range(len(x)): png('png/%s/%d/%05d.png' % (split, y[i], i), x[i])
    o = np.argsort(y, kind='stable'); np.savez('png_%s.npz' % split, image=x[o], labels=y[o])
)";

// One folder per test: ctest runs the tests of this file in parallel processes, and temp_dir empties
// the folder it returns.
std::string export_dir(int ntr, int nte) {
  const std::string dir = testing::temp_dir(std::string("train_data_fm_") +
                                            ::testing::UnitTest::GetInstance()->current_test_info()->name());
  {
    std::ofstream(dir + "/export.py") << "import numpy as np, os, sys\nos.chdir(sys.argv[3])\n" << kExport;
    auto r = testing::run_command(testing::python() + " " + dir + "/export.py " + std::to_string(ntr) + " " +
                                  std::to_string(nte) + " " + dir);
    EXPECT_EQ(r.exit_code, 0) << r.output;
  }
  return dir;
}

// Runs graphrun train on `model` with `args`; expects success; returns its output.
std::string train(const std::string& model, const std::string& args) {
  auto r = testing::run_command(testing::graphrun_cli() + " train " + model + " " + args);
  EXPECT_EQ(r.exit_code, 0) << args << "\n" << r.output;
  return r.output;
}

// The saved model's initializers, by name.
std::map<std::string, Tensor> weights(const std::string& path) { return load_onnx(path).initializers; }

void expect_same_weights(const std::string& a, const std::string& b) {
  const auto wa = weights(a), wb = weights(b);
  ASSERT_EQ(wa.size(), wb.size());
  for (const auto& [name, t] : wa) EXPECT_TRUE(testing::bytes_equal(t, wb.at(name))) << name << ": " << a << " vs " << b;
}

// The figure after `key` in the closing line ("test acc: 0.71, ..." / "test mse: 0.012, ...").
double closing(const std::string& out, const std::string& key) {
  std::smatch m;
  EXPECT_TRUE(std::regex_search(out, m, std::regex(key + ": ([0-9.e+-]+)"))) << out;
  return m.empty() ? -1 : std::stod(m[1]);
}

// A grey PNG writer for the scripts below: png(uint8 [H, W]) -> bytes.
const char* kPng = R"(
import struct, zlib
def chunk(t, d): c = t + d; return struct.pack('>I', len(d)) + c + struct.pack('>I', zlib.crc32(c) & 0xffffffff)
def png(a):
    raw = b''.join(b'\0' + a[r].tobytes() for r in range(a.shape[0]))
    return (b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', a.shape[1], a.shape[0], 8, 0, 0, 0, 0))
            + chunk(b'IDAT', zlib.compress(raw)) + chunk(b'IEND', b''))
)";

const std::string kQuick = " --devices cpu:2 --threads 1 --epochs 1 --max-steps 8 --batch-size 64 --seed 3 --lr 0.1";

TEST(TrainData, NpzAndNpyFolderTrainBitwiseAsTheMnistFolder) {
  if (!testing::have_fashion_mnist()) GTEST_SKIP() << "Fashion-MNIST is not installed";
  const std::string d = export_dir(2000, 500), m = testing::source_dir() + "/models/lenet.onnx";
  train(m, "--data " + d + "/idx --save " + d + "/idx.onnx" + kQuick);
  const std::string npz = train(m, "--data " + d + "/train.npz --test-data " + d + "/test.npz --save " + d + "/npz.onnx" + kQuick);
  EXPECT_NE(npz.find("test: '" + d + "/test.npz'"), std::string::npos) << npz;
  train(m, "--data " + d + "/npy --test-data " + d + "/npyt --save " + d + "/npy.onnx" + kQuick);
  expect_same_weights(d + "/idx.onnx", d + "/npz.onnx");
  expect_same_weights(d + "/idx.onnx", d + "/npy.onnx");
}

// The PNG tree is decoded on loader threads; the same examples in the same order from an .npz (read
// on the replica's thread) give bitwise the same weights and the same test accuracy.
TEST(TrainData, PngTreeTrainsBitwiseAsTheSameArrays) {
  if (!testing::have_fashion_mnist()) GTEST_SKIP() << "Fashion-MNIST is not installed";
  const std::string d = export_dir(2000, 500), m = testing::source_dir() + "/models/lenet.onnx";
  const std::string a = train(m, "--data " + d + "/png/train --test-data " + d + "/png/test --loader-threads 2 --save " +
                                     d + "/png.onnx" + kQuick);
  const std::string b = train(m, "--data " + d + "/png_train.npz --test-data " + d + "/png_test.npz --save " + d +
                                     "/pngnpz.onnx" + kQuick);
  expect_same_weights(d + "/png.onnx", d + "/pngnpz.onnx");
  EXPECT_EQ(closing(a, "test acc"), closing(b, "test acc"));
}

// Float targets in d/houses.npz (features, price): y = x . w + noise over n examples (seed `seed`), and
// d/regressor.onnx, a linear model of them.
void write_regression(const std::string& d, int seed, int n) {
  run_python(d, R"(
import onnx
from onnx import helper as h, TensorProto as T, numpy_helper as nh
r = np.random.RandomState()" + std::to_string(seed) + R"()
x = r.randn()" + std::to_string(n) + R"(, 8).astype(np.float32); w = r.randn(8).astype(np.float32)
np.savez('houses.npz', features=x, price=(x @ w + 0.1 * r.randn(len(x))).astype(np.float32))
g = h.make_graph([h.make_node('Gemm', ['x', 'w', 'b'], ['y'])], 'regressor',
                 [h.make_tensor_value_info('x', T.FLOAT, ['N', 8])], [h.make_tensor_value_info('y', T.FLOAT, ['N', 1])],
                 [nh.from_array(np.zeros((8, 1), np.float32), 'w'), nh.from_array(np.zeros(1, np.float32), 'b')])
onnx.save(h.make_model(g, opset_imports=[h.make_opsetid('', 13)]), 'regressor.onnx')
)");
}

// A linear model trained with --loss mse reaches about the noise.
TEST(TrainData, RegressionWithMseLoss) {
  const std::string d = testing::temp_dir("train_data_mse");
  write_regression(d, 0, 2000);
  const std::string out = train(d + "/regressor.onnx", "--data " + d + "/houses.npz --labels price --loss mse "
                                "--val-split 0.2 --devices cpu:2 --threads 1 --epochs 4 --batch-size 32 --lr 0.05 "
                                "--metrics " + d + "/m.jsonl");
  const double mse = closing(out, "test mse");
  EXPECT_GT(mse, 0.0);
  EXPECT_LT(mse, 0.02) << out;  // the noise's variance is 0.01; y's about 8
  EXPECT_NE(out.find("(seed 0)"), std::string::npos) << out;
  std::ifstream f(d + "/m.jsonl");
  std::string line;
  std::getline(f, line);
  EXPECT_NE(line.find("\"test_mse\""), std::string::npos) << line;
}

// --float64 --loss mse: the targets are fed as f64 (the output's type), every optimizer keeps f64
// state, and the trained weights (f64 in the saved model) land within float32's rounding of the
// float32 run's; the test mse agrees.
TEST(TrainData, Float64RegressionWithMseLossAndMomentum) {
  const std::string d = testing::temp_dir("train_data_mse64");
  write_regression(d, 1, 1000);
  const std::string common = "--data " + d + "/houses.npz --labels price --loss mse --val-split 0.2 --devices cpu:2 "
                             "--threads 1 --epochs 2 --batch-size 32 --lr 0.05 ";
  for (const char* opt : {"--momentum 0.5", "--optimizer adamw --weight-decay 0.01"}) {
    SCOPED_TRACE(opt);
    const std::string a = train(d + "/regressor.onnx", common + opt + " --save " + d + "/f32.onnx");
    const std::string b = train(d + "/regressor.onnx", common + opt + " --float64 --save " + d + "/f64.onnx");
    const double mse32 = closing(a, "test mse"), mse64 = closing(b, "test mse");
    EXPECT_LT(mse64, 0.2) << b;  // y's variance is about 8
    EXPECT_NEAR(mse64, mse32, 1e-3 * mse32) << a << b;
    const Graph g32 = load_onnx(d + "/f32.onnx"), g64 = load_onnx(d + "/f64.onnx");
    for (const char* name : {"w", "b"}) {
      ASSERT_EQ(g64.initializers.at(name).dtype(), DType::F64) << name;
      const auto x = g32.initializers.at(name).as_doubles(), y = g64.initializers.at(name).as_doubles();
      ASSERT_EQ(x.size(), y.size());
      double worst = 0, scale = 0;
      for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::abs(x[i] - y[i])), scale = std::max(scale, std::abs(y[i]));
      if (std::string(name) == "w") { EXPECT_GT(scale, 0.1) << "w did not train"; }  // (b stays near 0: no offset)
      EXPECT_LT(worst, 1e-4 * std::max(1.0, scale)) << name;
    }
  }
}

// int64 token ids [N, T]: the class is whether most tokens are below 8; a bag-of-embeddings model
// (Gather, ReduceMean, Gemm) learns it.
TEST(TrainData, TokenIdsModelTrains) {
  const std::string d = testing::temp_dir("train_data_tokens");
  run_python(d, R"(
import onnx
from onnx import helper as h, TensorProto as T, numpy_helper as nh
r = np.random.RandomState(0)
tok = r.randint(0, 16, size=(3000, 11)).astype(np.int64)
np.savez('tokens.npz', tokens=tok, labels=((tok < 8).sum(1) > 5).astype(np.int64))
g = h.make_graph([h.make_node('Gather', ['emb', 'tokens'], ['e']), h.make_node('ReduceMean', ['e'], ['m'], axes=[1], keepdims=0),
                  h.make_node('Gemm', ['m', 'w', 'b'], ['logits'], transB=1)], 'bag',
                 [h.make_tensor_value_info('tokens', T.INT64, ['N', 11])], [h.make_tensor_value_info('logits', T.FLOAT, ['N', 2])],
                 [nh.from_array((0.1 * r.randn(16, 8)).astype(np.float32), 'emb'),
                  nh.from_array((0.1 * r.randn(2, 8)).astype(np.float32), 'w'), nh.from_array(np.zeros(2, np.float32), 'b')])
onnx.save(h.make_model(g, opset_imports=[h.make_opsetid('', 13)]), 'bag.onnx')
)");
  const std::string out = train(d + "/bag.onnx", "--data " + d + "/tokens.npz --devices cpu:2 --threads 1 --epochs 6 "
                                                    "--batch-size 32 --lr 0.5 --momentum 0.9");
  EXPECT_GT(closing(out, "test acc"), 0.9) << out;
  // Token ids are not images: the epoch lines count samples, the start line examples.
  EXPECT_NE(out.find(" samples/s"), std::string::npos) << out;
  EXPECT_NE(out.find(" test examples, batch 32"), std::string::npos) << out;
  EXPECT_EQ(out.find("img/s"), std::string::npos) << out;
}

// Two inputs, matched to the arrays by name: token ids [N, T] and float features [N, F]. The class has
// one bit from each (whether most tokens are below 8; the sign of the first feature), so the model
// must read both to learn it. Read on the replica's thread or assembled ahead on loader threads, the
// shards are the same: bitwise the same weights.
TEST(TrainData, TwoInputModelTrainsOnBothArrays) {
  const std::string d = testing::temp_dir("train_data_two_inputs");
  run_python(d, R"(
import onnx
from onnx import helper as h, TensorProto as T, numpy_helper as nh
r = np.random.RandomState(0)
tok = r.randint(0, 16, size=(3000, 11)).astype(np.int64)
f = r.randn(3000, 3).astype(np.float32)
y = ((tok < 8).sum(1) > 5).astype(np.int64) + 2 * (f[:, 0] > 0)
np.savez('train.npz', feats=f[:2500], tokens=tok[:2500], labels=y[:2500])
np.savez('test.npz', tokens=tok[2500:], feats=f[2500:], labels=y[2500:])
g = h.make_graph([h.make_node('Gather', ['emb', 'tokens'], ['e']), h.make_node('ReduceMean', ['e'], ['m'], axes=[1], keepdims=0),
                  h.make_node('Concat', ['m', 'feats'], ['c'], axis=1), h.make_node('Gemm', ['c', 'w', 'b'], ['logits'], transB=1)],
                 'two', [h.make_tensor_value_info('tokens', T.INT64, ['N', 11]), h.make_tensor_value_info('feats', T.FLOAT, ['N', 3])],
                 [h.make_tensor_value_info('logits', T.FLOAT, ['N', 4])],
                 [nh.from_array((0.1 * r.randn(16, 8)).astype(np.float32), 'emb'),
                  nh.from_array((0.1 * r.randn(4, 11)).astype(np.float32), 'w'), nh.from_array(np.zeros(4, np.float32), 'b')])
onnx.save(h.make_model(g, opset_imports=[h.make_opsetid('', 13)]), 'two.onnx')
)");
  const std::string args = "--data " + d + "/train.npz --test-data " + d + "/test.npz --devices cpu:2 --threads 1 "
                           "--epochs 6 --batch-size 32 --lr 0.5 --momentum 0.9 --save ";
  const std::string out = train(d + "/two.onnx", args + d + "/a.onnx");
  EXPECT_GT(closing(out, "test acc"), 0.9) << out;  // one input alone gives at most 0.5
  train(d + "/two.onnx", args + d + "/b.onnx --loader-threads 2");
  expect_same_weights(d + "/a.onnx", d + "/b.onnx");
}

// The way users write a text classifier: torch's nn.TransformerEncoder over token embeddings, the
// padding mask as a second input (1 for a token, 0 for padding), mean pooling over the tokens. The
// class is whether token 3 occurs among the real tokens; padding (id 3 never pads) must be masked out.
TEST(TrainData, TransformerTextClassifierWithPaddingMaskTrains) {
  if (testing::run_command(testing::python() + " -c 'import torch' 2>&1").exit_code != 0)
    GTEST_SKIP() << testing::python() << " lacks torch (python3-torch)";
  const std::string d = testing::temp_dir("train_data_text");
  run_python(d, R"(
import torch
torch.manual_seed(0)
V, T, D = 16, 12, 16
class TextClassifier(torch.nn.Module):
    def __init__(s):
        super().__init__()
        s.emb = torch.nn.Embedding(V, D)
        s.pos = torch.nn.Parameter(0.1 * torch.randn(1, T, D))
        s.enc = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(D, 2, 32, dropout=0.0, batch_first=True), 2)
        s.head = torch.nn.Linear(D, 2)
    def forward(s, tokens, mask):
        h = s.enc(s.emb(tokens) + s.pos, src_key_padding_mask=mask < 0.5)
        m = mask.unsqueeze(-1)
        return s.head((h * m).sum(1) / m.sum(1))
r = np.random.RandomState(0)
N = 1200
lens = r.randint(3, T + 1, size=N)
tok = r.randint(1, V, size=(N, T)).astype(np.int64)
mask = (np.arange(T)[None, :] < lens[:, None]).astype(np.float32)
tok[mask == 0] = 3
y = ((tok == 3) & (mask == 1)).any(1).astype(np.int64)
np.savez('train.npz', tokens=tok[:1000], mask=mask[:1000], labels=y[:1000])
np.savez('test.npz', tokens=tok[1000:], mask=mask[1000:], labels=y[1000:])
torch.onnx.export(TextClassifier(), (torch.from_numpy(tok[:2]), torch.from_numpy(mask[:2])), 'text.onnx',
                  input_names=['tokens', 'mask'], output_names=['logits'],
                  dynamic_axes={'tokens': {0: 'N'}, 'mask': {0: 'N'}, 'logits': {0: 'N'}}, opset_version=17,
                  training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
)");
  auto check = testing::run_command(testing::graphrun_cli() + " check " + d + "/text.onnx");
  EXPECT_EQ(check.exit_code, 0) << check.output;
  const std::string out = train(d + "/text.onnx", "--data " + d + "/train.npz --test-data " + d +
                                                      "/test.npz --devices cpu:2 --threads 1 --epochs 2 --batch-size 32 "
                                                      "--lr 0.1 --momentum 0.9 --metrics " + d + "/m.jsonl");
  EXPECT_GT(closing(out, "test acc"), 0.95) << out;
}

// torch.onnx.export's default fixes the batch at the example's (8 here): make_batch_symbolic infers the
// model again from a symbolic batch, so shards of 4, the last batch and the evaluation's batches all run,
// and the labels the loss adds follow the output's symbolic batch.
TEST(TrainData, ModelExportedWithAFixedBatchTrainsAtAnyBatchSize) {
  const std::string d = testing::temp_dir("train_data_fixed_batch");
  run_python(d, R"(
import onnx
from onnx import helper as h, TensorProto as T, numpy_helper as nh
r = np.random.RandomState(0)
x = r.randn(600, 12).astype(np.float32)
np.savez('data.npz', x=x, labels=(x[:, 0] + x[:, 1] > 0).astype(np.int64))
g = h.make_graph([h.make_node('Gemm', ['x', 'w', 'b'], ['logits'], transB=1)], 'fixed',
                 [h.make_tensor_value_info('x', T.FLOAT, [8, 12])], [h.make_tensor_value_info('logits', T.FLOAT, [8, 2])],
                 [nh.from_array((0.1 * r.randn(2, 12)).astype(np.float32), 'w'), nh.from_array(np.zeros(2, np.float32), 'b')])
onnx.save(h.make_model(g, opset_imports=[h.make_opsetid('', 13)]), 'fixed.onnx')
)");
  const std::string out = train(d + "/fixed.onnx", "--data " + d + "/data.npz --devices cpu:2 --threads 1 --epochs 3 "
                                                      "--batch-size 8 --lr 0.5 --save " + d + "/trained.onnx");
  EXPECT_GT(closing(out, "test acc"), 0.9) << out;
  // The trained model takes any batch, as the training did.
  auto shown = testing::run_command(testing::graphrun_cli() + " show " + d + "/trained.onnx");
  EXPECT_NE(shown.output.find("%x: f32[N,12]"), std::string::npos) << shown.output;
}

// torch's x.view(x.size(0), -1) exported without dynamic_axes is a Reshape to the constant [8, -1]: the
// batch stays fixed past the symbolic input. The error names that node and the way out, where it said
// "input 'labels' must have shape [8], got [32]" in the first step.
TEST(TrainData, ABatchBakedIntoAReshapeIsOneLineNamingTheNode) {
  const std::string d = testing::temp_dir("train_data_baked_batch");
  run_python(d, R"(
import onnx
from onnx import helper as h, TensorProto as T, numpy_helper as nh
r = np.random.RandomState(0)
x = r.randn(64, 2, 6).astype(np.float32)
np.savez('data.npz', x=x, labels=(x[:, 0, 0] > 0).astype(np.int64))
g = h.make_graph([h.make_node('Reshape', ['x', 'shape'], ['flat'], name='/Reshape'),
                  h.make_node('Gemm', ['flat', 'w', 'b'], ['logits'], transB=1)], 'baked',
                 [h.make_tensor_value_info('x', T.FLOAT, [8, 2, 6])], [h.make_tensor_value_info('logits', T.FLOAT, [8, 2])],
                 [nh.from_array(np.array([8, -1], np.int64), 'shape'), nh.from_array((0.1 * r.randn(2, 12)).astype(np.float32), 'w'),
                  nh.from_array(np.zeros(2, np.float32), 'b')])
onnx.save(h.make_model(g, opset_imports=[h.make_opsetid('', 13)]), 'baked.onnx')
)");
  auto r = testing::run_command(testing::graphrun_cli() + " train " + d + "/baked.onnx --data " + d +
                                "/data.npz --devices cpu:2 --epochs 1 --batch-size 32");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("node '/Reshape' (Reshape) gives its output the fixed batch 8 of the export"),
            std::string::npos) << r.output;
  EXPECT_NE(r.output.find("dynamic_axes={'x': {0: 'N'}}"), std::string::npos) << r.output;
}

// A model below opset 13 trains as its opset-13 form: pass convert_opset brings it to opset 15 with onnx's
// version converter first. Before, to_training raised the opset import alone, and an opset-9 Clip's bounds
// (attributes) were read as opset 13's absent inputs: ReLU6 exported at opset 9 or 10 trained as the
// identity, silently. The opset-9 form here also has BatchNormalization's five training outputs (torch's
// export) and Unsqueeze/Squeeze with attribute axes.
TEST(TrainData, OldOpsetModelTrainsAsItsOpset13Form) {
  const std::string d = testing::temp_dir("train_data_old_opset");
  run_python(d, R"(
import onnx
from onnx import helper as h, TensorProto as T, numpy_helper as nh
r = np.random.RandomState(0)
x = r.randn(64, 6).astype(np.float32)
np.savez('data.npz', x=x, labels=(x[:, 0] > x[:, 1]).astype(np.int64) + (x[:, 2] > 0))
inits = [nh.from_array((0.8 * r.randn(8, 6)).astype(np.float32), 'w1'), nh.from_array(np.zeros(8, np.float32), 'b1'),
         nh.from_array(np.ones(8, np.float32), 's'), nh.from_array(np.zeros(8, np.float32), 'beta'),
         nh.from_array(np.zeros(8, np.float32), 'mean'), nh.from_array(np.ones(8, np.float32), 'var'),
         nh.from_array((0.5 * r.randn(3, 8)).astype(np.float32), 'w2'), nh.from_array(np.zeros(3, np.float32), 'b2')]
def model(opset):
    if opset < 13:
        bn = h.make_node('BatchNormalization', ['g', 's', 'beta', 'mean', 'var'], ['n', 'rm', 'rv', 'sm', 'sv'], momentum=0.9)
        clip = [h.make_node('Clip', ['n'], ['c'], min=-0.2, max=0.3)]
        un = [h.make_node('Unsqueeze', ['c'], ['u'], axes=[2]), h.make_node('Squeeze', ['u'], ['q'], axes=[2])]
        more = []
    else:
        bn = h.make_node('BatchNormalization', ['g', 's', 'beta', 'mean', 'var'], ['n'], momentum=0.9)
        clip = [h.make_node('Clip', ['n', 'lo', 'hi'], ['c'])]
        un = [h.make_node('Unsqueeze', ['c', 'ax'], ['u']), h.make_node('Squeeze', ['u', 'ax'], ['q'])]
        more = [nh.from_array(np.array(-0.2, np.float32), 'lo'), nh.from_array(np.array(0.3, np.float32), 'hi'),
                nh.from_array(np.array([2], np.int64), 'ax')]
    nodes = [h.make_node('Gemm', ['x', 'w1', 'b1'], ['g'], transB=1), bn] + clip + un + \
            [h.make_node('Gemm', ['q', 'w2', 'b2'], ['logits'], transB=1)]
    g = h.make_graph(nodes, 'old', [h.make_tensor_value_info('x', T.FLOAT, ['N', 6])],
                     [h.make_tensor_value_info('logits', T.FLOAT, ['N', 3])], inits + more)
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid('', opset)]), 'op%d.onnx' % opset)
model(9); model(13)
)");
  const std::string args = " --data " + d + "/data.npz --val-split 0.25 --devices cpu:1 --epochs 4 --batch-size 48 --lr 0.5";
  auto r9 = testing::run_command(testing::graphrun_cli() + " train " + d + "/op9.onnx" + args + " --save " + d + "/t9.onnx");
  ASSERT_EQ(r9.exit_code, 0) << r9.output;
  EXPECT_NE(r9.output.find("model 'old': opset 9 converted to opset 15 for training"), std::string::npos) << r9.output;
  train(d + "/op13.onnx", args + " --save " + d + "/t13.onnx");
  const auto w9 = weights(d + "/t9.onnx"), w13 = weights(d + "/t13.onnx");
  for (const char* p : {"w1", "b1", "s", "beta", "mean", "var", "w2", "b2"}) {
    const auto a = w9.at(p).as_doubles(), b = w13.at(p).as_doubles();
    ASSERT_EQ(a.size(), b.size()) << p;
    double scale = 0, diff = 0;
    for (size_t i = 0; i < a.size(); ++i) scale = std::max(scale, std::abs(b[i])), diff = std::max(diff, std::abs(a[i] - b[i]));
    EXPECT_LE(diff, 1e-6 * std::max(scale, 1.0)) << p;
  }
  // The trained model keeps the opset it came in.
  EXPECT_EQ(load_onnx(d + "/t9.onnx").opset(""), 9);
}

// nn.TransformerDecoderLayer's cross-attention (query from the target, key and value from the memory)
// slices its packed in_proj_weight with bounds computed from Shape: the Slices of a weight keep its rank
// (fill_slice_ranks reads initializers' types), so the MatMuls behind them have gradients.
TEST(TrainData, CrossAttentionDecoderTrains) {
  if (testing::run_command(testing::python() + " -c 'import torch' 2>&1").exit_code != 0)
    GTEST_SKIP() << testing::python() << " lacks torch (python3-torch)";
  const std::string d = testing::temp_dir("train_data_cross_attention");
  run_python(d, R"(
import torch
torch.manual_seed(0)
V, T, S, D = 12, 6, 5, 16
class Decoder(torch.nn.Module):
    def __init__(s):
        super().__init__()
        s.emb = torch.nn.Embedding(V, D)
        s.dec = torch.nn.TransformerDecoderLayer(D, 2, 32, dropout=0.0, batch_first=True)
        s.head = torch.nn.Linear(D, 2)
    def forward(s, tokens, memory):
        return s.head(s.dec(s.emb(tokens), memory).mean(1))
r = np.random.RandomState(0)
N = 800
tok = r.randint(0, V, size=(N, T)).astype(np.int64)
mem = r.randn(N, S, D).astype(np.float32)
y = (mem[:, :, 0].mean(1) > 0).astype(np.int64)
np.savez('train.npz', tokens=tok[:640], memory=mem[:640], labels=y[:640])
np.savez('test.npz', tokens=tok[640:], memory=mem[640:], labels=y[640:])
torch.onnx.export(Decoder(), (torch.from_numpy(tok[:2]), torch.from_numpy(mem[:2])), 'dec.onnx',
                  input_names=['tokens', 'memory'], output_names=['logits'],
                  dynamic_axes={'tokens': {0: 'N'}, 'memory': {0: 'N'}, 'logits': {0: 'N'}}, opset_version=17,
                  training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
)");
  auto check = testing::run_command(testing::graphrun_cli() + " check " + d + "/dec.onnx");
  EXPECT_EQ(check.exit_code, 0) << check.output;
  const std::string out = train(d + "/dec.onnx", "--data " + d + "/train.npz --test-data " + d +
                                                     "/test.npz --devices cpu:2 --threads 1 --epochs 3 --batch-size 32 "
                                                     "--optimizer adam --lr 0.003");
  EXPECT_GT(closing(out, "test acc"), 0.85) << out;
}

// A recurrent sequence classifier as users write one: nn.Embedding, nn.LSTM (batch_first), the last step, a
// Linear head. The class is whether token 3 occurs, so the state must carry it to the last step; the loss of
// the last epoch is below the first's.
TEST(TrainData, LstmSequenceClassifierTrains) {
  if (testing::run_command(testing::python() + " -c 'import torch' 2>&1").exit_code != 0)
    GTEST_SKIP() << testing::python() << " lacks torch (python3-torch)";
  const std::string d = testing::temp_dir("train_data_lstm");
  run_python(d, R"(
import torch
torch.manual_seed(0)
V, T = 12, 10
class SeqClassifier(torch.nn.Module):
    def __init__(s):
        super().__init__()
        s.emb = torch.nn.Embedding(V, 8)
        s.rnn = torch.nn.LSTM(8, 16, batch_first=True)
        s.head = torch.nn.Linear(16, 2)
    def forward(s, tokens):
        y, _ = s.rnn(s.emb(tokens))
        return s.head(y[:, -1])
r = np.random.RandomState(0)
tok = r.randint(0, V, size=(1200, T)).astype(np.int64)
tok[r.rand(1200) < 0.5] %= 3  # about half hold no 3 at all
y = (tok == 3).any(1).astype(np.int64)
np.savez('train.npz', tokens=tok[:1000], labels=y[:1000])
np.savez('test.npz', tokens=tok[1000:], labels=y[1000:])
torch.onnx.export(SeqClassifier(), torch.from_numpy(tok[:2]), 'seq.onnx', input_names=['tokens'],
                  output_names=['logits'], dynamic_axes={'tokens': {0: 'N'}, 'logits': {0: 'N'}}, opset_version=14,
                  training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
)");
  auto check = testing::run_command(testing::graphrun_cli() + " check " + d + "/seq.onnx");
  EXPECT_EQ(check.exit_code, 0) << check.output;
  const std::string out = train(d + "/seq.onnx", "--data " + d + "/train.npz --test-data " + d +
                                                     "/test.npz --devices cpu:2 --threads 1 --epochs 4 --batch-size 32 "
                                                     "--lr 0.1 --momentum 0.9 --metrics " + d + "/m.jsonl");
  std::ifstream metrics(d + "/m.jsonl");
  std::vector<double> losses;
  for (std::string line; std::getline(metrics, line);)
    losses.push_back(nlohmann::json::parse(line).at("loss").get<double>());
  ASSERT_EQ(losses.size(), 4u) << out;
  EXPECT_LT(losses.back(), 0.7 * losses.front()) << out;
  EXPECT_GT(closing(out, "test acc"), 0.8) << out;
}

// PyTorch's text-classification tutorial model on padded token ids [N, T]: nn.EmbeddingBag exports a Loop over
// the bags, which graphrun computes without the loop on load; on two replicas each runs its own shard's bags.
TEST(TrainData, EmbeddingBagTextClassifierTrains) {
  if (testing::run_command(testing::python() + " -c 'import torch' 2>&1").exit_code != 0)
    GTEST_SKIP() << testing::python() << " lacks torch (python3-torch)";
  const std::string d = testing::temp_dir("train_data_bag");
  run_python(d, R"(
import torch
torch.manual_seed(0)
V, T = 100, 10
class BagClassifier(torch.nn.Module):
    def __init__(s):
        super().__init__()
        s.bag = torch.nn.EmbeddingBag(V, 16, mode='mean')
        s.head = torch.nn.Linear(16, 4)
    def forward(s, tokens):
        return s.head(s.bag(tokens))
r = np.random.RandomState(0)
y = r.randint(0, 4, size=1200)
# a class draws most of its tokens from its own quarter of the vocabulary
tok = np.where(r.rand(1200, T) < 0.6, y[:, None] * 25 + r.randint(0, 25, size=(1200, T)), r.randint(0, V, size=(1200, T)))
np.savez('train.npz', tokens=tok[:1000].astype(np.int64), labels=y[:1000].astype(np.int64))
np.savez('test.npz', tokens=tok[1000:].astype(np.int64), labels=y[1000:].astype(np.int64))
torch.onnx.export(BagClassifier(), torch.from_numpy(tok[:2]), 'bag.onnx', input_names=['tokens'],
                  output_names=['logits'], dynamic_axes={'tokens': {0: 'N'}, 'logits': {0: 'N'}}, opset_version=17,
                  training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
)");
  auto check = testing::run_command(testing::graphrun_cli() + " check " + d + "/bag.onnx");
  EXPECT_EQ(check.exit_code, 0) << check.output;
  EXPECT_NE(check.output.find("nn.EmbeddingBag Loop (mean) computed without a loop"), std::string::npos) << check.output;
  const std::string out = train(d + "/bag.onnx", "--data " + d + "/train.npz --test-data " + d +
                                                     "/test.npz --devices cpu:2 --threads 1 --epochs 3 --batch-size 32 "
                                                     "--lr 0.5 --metrics " + d + "/m.jsonl");
  std::ifstream metrics(d + "/m.jsonl");
  std::vector<double> losses;
  for (std::string line; std::getline(metrics, line);)
    losses.push_back(nlohmann::json::parse(line).at("loss").get<double>());
  ASSERT_EQ(losses.size(), 3u) << out;
  EXPECT_LT(losses.back(), 0.7 * losses.front()) << out;
  EXPECT_GT(closing(out, "test acc"), 0.75) << out;
}

// Runs graphrun train expecting bad input: exit 2, one line, naming each of `what`.
void expect_bad(const std::string& model, const std::string& args, const std::vector<std::string>& what) {
  auto r = testing::run_command(testing::graphrun_cli() + " train " + model + " --devices cpu:1 " + args);
  EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.output;
  std::string out = r.output;
  while (!out.empty() && out.back() == '\n') out.pop_back();
  EXPECT_EQ(out.find('\n'), std::string::npos) << "more than one line for: " << args << "\n" << r.output;
  for (const auto& w : what) EXPECT_NE(out.find(w), std::string::npos) << "no '" << w << "' in: " << r.output;
}

// A class id per position, the loss and the accuracies over every one: a tagger's [N, T] tags for
// scores [N, T, classes] (the classes last, as a language model's logits) and a segmentation's
// [N, H, W] pixels for scores [N, classes, H, W] (ONNX's layout). Each tag is a function of its token
// or pixel, so both reach about 1; labels that fit neither layout are one line, exit 2.
TEST(TrainData, PerPositionClassIdsTrainTaggersAndSegmentations) {
  const std::string d = testing::temp_dir("train_data_per_position");
  run_python(d, R"(
import onnx
from onnx import helper as h, TensorProto as T, numpy_helper as nh
r = np.random.RandomState(0)
tok = r.randint(0, 16, size=(2000, 10)).astype(np.int64)
np.savez('tags.npz', tokens=tok, labels=tok % 4)
np.savez('short.npz', tokens=tok, labels=tok[:, :7] % 4)
g = h.make_graph([h.make_node('Gather', ['emb', 'tokens'], ['e']), h.make_node('MatMul', ['e', 'w'], ['m']),
                  h.make_node('Add', ['m', 'b'], ['logits'])], 'tagger',
                 [h.make_tensor_value_info('tokens', T.INT64, ['N', 10])], [h.make_tensor_value_info('logits', T.FLOAT, ['N', 10, 4])],
                 [nh.from_array((0.1 * r.randn(16, 8)).astype(np.float32), 'emb'),
                  nh.from_array((0.1 * r.randn(8, 4)).astype(np.float32), 'w'), nh.from_array(np.zeros(4, np.float32), 'b')])
onnx.save(h.make_model(g, opset_imports=[h.make_opsetid('', 13)]), 'tagger.onnx')
x = r.rand(2000, 1, 8, 8).astype(np.float32)
np.savez('seg.npz', image=x, labels=(x[:, 0] > 0.5).astype(np.int64))
g = h.make_graph([h.make_node('Conv', ['image', 'w', 'b'], ['logits'], kernel_shape=[3, 3], pads=[1, 1, 1, 1])], 'seg',
                 [h.make_tensor_value_info('image', T.FLOAT, ['N', 1, 8, 8])], [h.make_tensor_value_info('logits', T.FLOAT, ['N', 2, 8, 8])],
                 [nh.from_array((0.1 * r.randn(2, 1, 3, 3)).astype(np.float32), 'w'), nh.from_array(np.zeros(2, np.float32), 'b')])
onnx.save(h.make_model(g, opset_imports=[h.make_opsetid('', 13)]), 'seg.onnx')
)");
  const std::string args = " --devices cpu:2 --threads 1 --epochs 3 --batch-size 32 --lr 0.5 --momentum 0.9";
  for (const char* m : {"tagger", "seg"}) {
    const std::string out = train(d + "/" + m + ".onnx", "--data " + d + "/" + (m == std::string("seg") ? "seg" : "tags") + ".npz" + args);
    const double acc = closing(out, "test acc");
    EXPECT_GT(acc, 0.95) << m << "\n" << out;
    EXPECT_LE(acc, 1.0) << m << "\n" << out;  // a fraction of the labels, not of the examples
  }
  expect_bad(d + "/tagger.onnx", "--data " + d + "/short.npz", {"short.npz", "'logits'", "[7]"});
}

// A GPT-style causal language model as users write it: token and position embeddings, pre-norm
// transformer blocks under a causal mask (a registered buffer of -inf, which is not trained), the
// output projection tied to the input embedding, per-token cross-entropy on logits [N, T, V]. Each
// sequence counts up from a random start by a random step (1-3) mod V: every next token but the
// first follows from the two before it (at most 7/8 + 1/24 = 0.917 of them are predictable).
TEST(TrainData, GptStyleCausalLanguageModelTrains) {
  if (testing::run_command(testing::python() + " -c 'import torch' 2>&1").exit_code != 0)
    GTEST_SKIP() << testing::python() << " lacks torch (python3-torch)";
  const std::string d = testing::temp_dir("train_data_gpt");
  run_python(d, R"(
import torch
torch.manual_seed(0)
V, T, D = 16, 8, 32
class TinyGPT(torch.nn.Module):
    def __init__(s):
        super().__init__()
        s.emb = torch.nn.Embedding(V, D)
        s.pos = torch.nn.Parameter(0.1 * torch.randn(1, T, D))
        s.blocks = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(D, 2, 64, dropout=0.0, batch_first=True,
                                                                                norm_first=True), 2)
        s.ln = torch.nn.LayerNorm(D)
        s.register_buffer('causal', torch.triu(torch.full((T, T), float('-inf')), 1))
    def forward(s, tokens):
        return s.ln(s.blocks(s.emb(tokens) + s.pos, mask=s.causal)) @ s.emb.weight.t()
r = np.random.RandomState(0)
N = 3000
seq = (r.randint(0, V, size=(N, 1)) + r.randint(1, 4, size=(N, 1)) * np.arange(T + 1)[None, :]) % V
np.savez('train.npz', tokens=seq[:2500, :T], labels=seq[:2500, 1:])
np.savez('test.npz', tokens=seq[2500:, :T], labels=seq[2500:, 1:])
torch.onnx.export(TinyGPT(), torch.from_numpy(seq[:2, :T]), 'gpt.onnx', input_names=['tokens'], output_names=['logits'],
                  dynamic_axes={'tokens': {0: 'N'}, 'logits': {0: 'N'}}, opset_version=17,
                  training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
)");
  auto check = testing::run_command(testing::graphrun_cli() + " check " + d + "/gpt.onnx");
  EXPECT_EQ(check.exit_code, 0) << check.output;
  const std::string out = train(d + "/gpt.onnx", "--data " + d + "/train.npz --test-data " + d +
                                                     "/test.npz --devices cpu:2 --threads 1 --epochs 3 --batch-size 32 "
                                                     "--optimizer adam --lr 3e-3");
  const double acc = closing(out, "test acc");
  EXPECT_GT(acc, 0.85) << out;
  EXPECT_LE(acc, 0.92) << out;  // the first token of each sequence cannot be known
}

// Issue 13's 3-channel proof: torchvision's ResNet-18 (the ImageNet architecture, 11M parameters,
// random weights), exported for 3x32x32 images, trains from an .npz of Fashion-MNIST padded to 32x32
// with its grey channel repeated three times (u8[N,3,32,32]) to well above chance. The export is as a
// user writes it (training mode, batch dimension dynamic); BatchNorm trains in it.
TEST(TrainData, TorchvisionResNet18On3x32x32ImagesTrains) {
  if (testing::run_command(testing::python() + " -c 'import torchvision' 2>&1").exit_code != 0)
    GTEST_SKIP() << testing::python() << " lacks torchvision (python3-torchvision)";
  if (!fs::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "Fashion-MNIST is not installed";
  const std::string d = testing::temp_dir("train_data_resnet18_rgb32");
  run_python(d, R"(
import gzip, torch, torchvision
D = '/usr/share/datasets/fashion-mnist/'
def load(p, off): return np.frombuffer(gzip.open(D + p).read(), np.uint8, offset=off)
def rgb32(x): return np.repeat(np.pad(x.reshape(-1, 1, 28, 28), ((0, 0), (0, 0), (2, 2), (2, 2))), 3, axis=1)
np.savez('train.npz', image=rgb32(load('train-images-idx3-ubyte.gz', 16)[:3000 * 784]),
         labels=load('train-labels-idx1-ubyte.gz', 8)[:3000])
np.savez('test.npz', image=rgb32(load('t10k-images-idx3-ubyte.gz', 16)[:500 * 784]),
         labels=load('t10k-labels-idx1-ubyte.gz', 8)[:500])
torch.manual_seed(0)
m = torchvision.models.resnet18(num_classes=10)
torch.onnx.export(m, torch.zeros(2, 3, 32, 32), 'resnet18_rgb32.onnx', input_names=['image'], output_names=['logits'],
                  dynamic_axes={'image': {0: 'N'}, 'logits': {0: 'N'}}, opset_version=13,
                  training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
)");
  const std::string out = train(d + "/resnet18_rgb32.onnx",
                                "--data " + d + "/train.npz --test-data " + d + "/test.npz --devices cpu:2 --threads 1 "
                                "--epochs 1 --batch-size 64 --optimizer adam --lr 1e-3 --seed 0");
  EXPECT_NE(out.find("3000 training, 500 test images"), std::string::npos) << out;  // the epoch lines' img/s
  EXPECT_GT(closing(out, "test acc"), 0.6) << out;  // chance is 0.1
}

// More than 10 classes: the class is the largest of 20 features (a linear model learns it); the
// closing line and --metrics add top-5 accuracy, which is above top-1 and near 1.
TEST(TrainData, TopFiveAccuracyAboveTenClasses) {
  const std::string d = testing::temp_dir("train_data_top5");
  run_python(d, R"(
import onnx
from onnx import helper as h, TensorProto as T, numpy_helper as nh
r = np.random.RandomState(0)
x = r.randn(4000, 20).astype(np.float32)
np.savez('wide.npz', x=x, labels=x.argmax(1).astype(np.int64))
g = h.make_graph([h.make_node('Gemm', ['x', 'w', 'b'], ['logits'], transB=1)], 'wide',
                 [h.make_tensor_value_info('x', T.FLOAT, ['N', 20])], [h.make_tensor_value_info('logits', T.FLOAT, ['N', 20])],
                 [nh.from_array(np.zeros((20, 20), np.float32), 'w'), nh.from_array(np.zeros(20, np.float32), 'b')])
onnx.save(h.make_model(g, opset_imports=[h.make_opsetid('', 13)]), 'wide.onnx')
)");
  const std::string out = train(d + "/wide.onnx", "--data " + d + "/wide.npz --devices cpu:2 --threads 1 --epochs 3 "
                                                     "--batch-size 32 --lr 0.5 --metrics " + d + "/m.jsonl");
  const double acc = closing(out, "test acc"), top5 = closing(out, "top-5");
  EXPECT_GT(acc, 0.5) << out;
  EXPECT_GT(top5, acc) << out;
  EXPECT_GT(top5, 0.95) << out;
  std::ifstream f(d + "/m.jsonl");
  std::string line;
  std::getline(f, line);
  EXPECT_NE(line.find("\"test_top5\""), std::string::npos) << line;
}

runtime::TrainOptions data_run(const std::string& data, const std::string& test) {
  runtime::TrainOptions o;
  o.pipeline.devices = {Device{Device::Kind::CPU, 0}, Device{Device::Kind::CPU, 1}};
  o.data_dir = data;
  o.test_data = test;
  o.batch_size = 32;
  o.epochs = 2;
  o.threads = 1;
  o.max_steps = 5;
  o.lr = 0.05;
  o.progress = 0;
  o.checkpoint_every = 3;
  o.keep_checkpoints = 10;
  return o;
}

// Killed after step 6 (epoch 2, step 1) and resumed: bitwise the uninterrupted run's states.
void expect_resume_bitwise(runtime::TrainOptions o, const std::string& name) {
  const Graph model = load_onnx(testing::source_dir() + "/models/lenet.onnx");
  o.checkpoint_dir = testing::temp_dir(name);
  const auto full = testing::states_after_fit(model, o);
  const auto names = testing::checkpoint_files(o.checkpoint_dir);
  ASSERT_EQ(names.size(), 5u);
  for (size_t i = 3; i < names.size(); ++i) fs::remove(o.checkpoint_dir + "/" + names[i]);
  EXPECT_EQ(testing::expect_resume_ends_with(model, o, full), 10);
}

TEST(TrainData, ResumeIsBitwiseWithNpz) {
  if (!testing::have_fashion_mnist()) GTEST_SKIP() << "Fashion-MNIST is not installed";
  const std::string d = export_dir(2000, 500);
  expect_resume_bitwise(data_run(d + "/train.npz", d + "/test.npz"), "train_data_resume_npz");
}

// --augment on two loader threads per replica: the draws follow from (seed, epoch, example), so the
// resumed run crops and flips exactly as the uninterrupted one; and augmenting changes the weights.
TEST(TrainData, ResumeIsBitwiseWithAugment) {
  if (!testing::have_fashion_mnist()) GTEST_SKIP() << "Fashion-MNIST is not installed";
  const std::string d = export_dir(2000, 500);
  runtime::TrainOptions o = data_run(d + "/png/train", d + "/png/test");
  o.augment = true;
  o.loader_threads = 2;
  expect_resume_bitwise(o, "train_data_resume_augment");
  const Graph model = load_onnx(testing::source_dir() + "/models/lenet.onnx");
  runtime::TrainOptions plain = o;
  plain.augment = false;
  plain.checkpoint_dir.clear();
  plain.checkpoint_every = 0;
  o.checkpoint_dir.clear();
  o.checkpoint_every = 0;
  runtime::Trainer a(model, o), b(model, plain);
  a.fit();
  b.fit();
  const Graph ga = a.trained_model(), gb = b.trained_model();
  bool differ = false;
  for (const auto& [name, t] : ga.initializers) differ |= !testing::bytes_equal(t, gb.initializers.at(name));
  EXPECT_TRUE(differ);
}

// ---- bad data: one line naming the file (and the example), exit 2 ----

TEST(TrainData, BadDataIsOneLineAndExitTwo) {
  const std::string d = testing::temp_dir("train_data_bad"), m = testing::source_dir() + "/models/lenet.onnx";
  run_python(d, std::string(kPng) + R"(
import zipfile
r = np.random.RandomState(0)
x = r.randint(0, 255, size=(20, 28, 28)).astype(np.uint8); y = (np.arange(20) % 10).astype(np.int64)
np.savez('lengths.npz', image=x, labels=y[:19])
np.savez('shape.npz', image=x[:, :5, :5], labels=y)
np.savez('float_labels.npz', image=x, labels=y.astype(np.float32))
np.savez('missing.npz', pixels=x, more=x, labels=y)
y12 = y.copy(); y12[7] = 12; np.savez('range.npz', image=x, labels=y12)
t = np.zeros((20, 10), np.float32); t[4, 3] = np.nan; np.savez('nan.npz', image=x, labels=t)
with zipfile.ZipFile('notnpz.npz', 'w') as z: z.writestr('readme.txt', 'hello')
os.makedirs('empty/a'); os.makedirs('empty/b')
open('empty/a/x.png', 'wb').write(png(x[0]))
)");
  expect_bad(m, "--data " + d + "/lengths.npz", {"lengths.npz", "20", "19"});
  expect_bad(m, "--data " + d + "/shape.npz", {"shape.npz", "'image'"});
  expect_bad(m, "--data " + d + "/float_labels.npz", {"float_labels.npz", "integers"});
  expect_bad(m, "--data " + d + "/missing.npz", {"missing.npz", "no array 'image'"});
  expect_bad(m, "--data " + d + "/range.npz", {"range.npz", "12", "7"});
  expect_bad(m, "--data " + d + "/nan.npz --loss mse", {"nan.npz", "4"});
  expect_bad(m, "--data " + d + "/notnpz.npz", {"notnpz.npz"});
  expect_bad(m, "--data " + d + "/empty", {"empty/b"});
}

// A PNG cut short is found when it is decoded: the run stops with one line naming the file.
TEST(TrainData, TruncatedImageNamesTheFile) {
  const std::string d = testing::temp_dir("train_data_png_bad"), m = testing::source_dir() + "/models/lenet.onnx";
  run_python(d, std::string(kPng) + R"(
r = np.random.RandomState(0)
for c in range(2):
    os.makedirs('tree/%d' % c)
    for i in range(16): open('tree/%d/%02d.png' % (c, i), 'wb').write(png(r.randint(0, 255, (28, 28)).astype(np.uint8)))
b = open('tree/1/05.png', 'rb').read(); open('tree/1/05.png', 'wb').write(b[:len(b) // 2])
)");
  expect_bad(m, "--data " + d + "/tree --batch-size 8 --epochs 1", {"tree/1/05.png"});
}

// A corrupt first test image (found when the model first runs on the test set, before training) is
// an error naming that image, not one blaming the model and the training data.
TEST(TrainData, ACorruptFirstTestImageNamesTheImage) {
  const std::string d = testing::temp_dir("train_data_png_bad_test"), m = testing::source_dir() + "/models/lenet.onnx";
  run_python(d, std::string(kPng) + R"(
r = np.random.RandomState(0)
for s in ('train', 'test'):
    for c in range(2):
        os.makedirs('%s/%d' % (s, c))
        for i in range(4): open('%s/%d/%02d.png' % (s, c, i), 'wb').write(png(r.randint(0, 255, (28, 28)).astype(np.uint8)))
b = bytearray(open('test/0/00.png', 'rb').read()); b[45] ^= 0xff  # inside IDAT: its CRC no longer matches
open('test/0/00.png', 'wb').write(bytes(b))
)");
  auto r = testing::run_command(testing::graphrun_cli() + " train " + m + " --data " + d + "/train --test-data " + d +
                                "/test --batch-size 4 --epochs 1");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(r.output.rfind("graphrun train: error: image '" + d + "/test/0/00.png'", 0), 0u) << r.output;
  EXPECT_EQ(r.output.find("cannot run"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace graphrun

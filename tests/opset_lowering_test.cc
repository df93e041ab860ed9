// Models of opsets 18 to 23 (what newer PyTorch exporters write): read as opset 17, the newer forms of the
// nodes rewritten (graph/opset_lowering.cc), their outputs checked against numpy; what opset 17
// cannot express is refused in one line naming the node.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "graph/onnx_io.h"
#include "graph/tensor_io.h"
#include "runtime/executor.h"
#include "tests/data_test_util.h"
#include "tests/test_util.h"

namespace graphrun {
namespace {

using testing::run_command;
using testing::run_python;
using testing::temp_dir;

// Writes models with onnx.helper (onnx 1.12 writes any opset number; it cannot check above 17) and numpy's
// answers: OUT.npy for each output OUT.
const char* kModels = R"(
import math, onnx
from onnx import helper, TensorProto, numpy_helper
def save(name, nodes, inputs, outputs, opset, inits=(), ir=8):
    g = helper.make_graph(nodes, name, inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid('', opset)])
    m.ir_version = ir
    onnx.save(m, name + '.onnx')
F = TensorProto.FLOAT
vi = helper.make_tensor_value_info
x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
y = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
np.save('x.npy', x); np.save('y.npy', y)

# Opset 19: the Reduce ops' axes as an input (an initializer, a Constant node, none with and without
# noop_with_empty_axes), Split's num_outputs, Cast's saturate, AveragePool's dilations, Resize's new attributes
# at their defaults.
nodes = [helper.make_node('ReduceMean', ['x', 'axes1'], ['mean'], keepdims=0),
         helper.make_node('Constant', [], ['last'], value=numpy_helper.from_array(np.array([-1], np.int64))),
         helper.make_node('ReduceMax', ['x', 'last'], ['max']),
         helper.make_node('ReduceMin', ['x'], ['same'], noop_with_empty_axes=1),
         helper.make_node('ReduceL2', ['x'], ['l2'], keepdims=0),
         helper.make_node('Split', ['x'], ['half1', 'half2'], axis=2, num_outputs=2),
         helper.make_node('Cast', ['x'], ['f64'], to=TensorProto.DOUBLE, saturate=1),
         helper.make_node('AveragePool', ['y'], ['pool'], kernel_shape=[2, 2], dilations=[1, 1]),
         helper.make_node('Resize', ['y', '', 'scales'], ['up'], mode='nearest', antialias=0,
                          keep_aspect_ratio_policy='stretch')]
outs = {'mean': x.mean(1), 'max': x.max(-1, keepdims=True), 'same': x,
        'l2': np.sqrt((x.astype(np.float64) ** 2).sum()).astype(np.float32),
        'half1': x[:, :, :2], 'half2': x[:, :, 2:], 'f64': x.astype(np.float64),
        'pool': (y[:, :, :-1, :-1] + y[:, :, 1:, :-1] + y[:, :, :-1, 1:] + y[:, :, 1:, 1:]) / 4,
        'up': y.repeat(2, 2).repeat(2, 3)}
for k, v in outs.items(): np.save(k + '.npy', v)
save('forms19', nodes, [vi('x', F, [2, 3, 4]), vi('y', F, [1, 1, 4, 4])],
     [vi(k, TensorProto.DOUBLE if k == 'f64' else F, np.shape(v)) for k, v in outs.items()], 19,
     [numpy_helper.from_array(np.array([1], np.int64), 'axes1'),
      numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), 'scales')])

# Opset 20, IR 10: Gelu (exact and tanh) and Mish, decomposed.
erf = np.vectorize(math.erf)
xd = x.astype(np.float64)
acts = {'gelu': 0.5 * xd * (1 + erf(xd / math.sqrt(2))),
        'gelu_tanh': 0.5 * xd * (1 + np.tanh(math.sqrt(2 / math.pi) * (xd + 0.044715 * xd ** 3))),
        'mish': xd * np.tanh(np.log1p(np.exp(xd)))}
for k, v in acts.items(): np.save(k + '.npy', v.astype(np.float32))
save('acts20', [helper.make_node('Gelu', ['x'], ['gelu']),
                helper.make_node('Gelu', ['x'], ['gelu_tanh'], approximate='tanh'),
                helper.make_node('Mish', ['x'], ['mish'])],
     [vi('x', F, [2, 3, 4])], [vi(k, F, [2, 3, 4]) for k in acts], 20, ir=10)

# Opset 20: DFT's axis as an input (and its default, -2); Pad's pads for some axes only (18), X's rank stated.
sig = np.random.default_rng(5).standard_normal((2, 8, 1)).astype(np.float32)
np.save('sig.npy', sig)
spec = np.fft.fft(sig[..., 0].astype(np.float64), axis=1)
outs20 = {'spectrum': np.stack([spec.real, spec.imag], -1), 'spectrum_default': np.stack([spec.real, spec.imag], -1),
          'padded': np.pad(x, ((0, 0), (2, 0), (1, 3))), 'wrapped': np.pad(x, ((0, 0), (1, 3), (2, 4)), mode='wrap')}
for k, v in outs20.items(): np.save(k + '.npy', v.astype(np.float32))
save('forms20', [helper.make_node('DFT', ['sig', '', 'one'], ['spectrum']),
                 helper.make_node('DFT', ['sig'], ['spectrum_default']),
                 helper.make_node('Pad', ['x', 'pads_some', '', 'axes_some'], ['padded']),
                 helper.make_node('Pad', ['x', 'pads_wrap'], ['wrapped'], mode='wrap')],
     [vi('sig', F, [2, 8, 1]), vi('x', F, [2, 3, 4])], [vi(k, F, list(v.shape)) for k, v in outs20.items()], 20,
     [numpy_helper.from_array(np.array(1, np.int64), 'one'), numpy_helper.from_array(np.array([2, 1, 0, 3], np.int64), 'pads_some'),
      numpy_helper.from_array(np.array([-2, 2], np.int64), 'axes_some'),
      numpy_helper.from_array(np.array([0, 1, 2, 0, 3, 4], np.int64), 'pads_wrap')])
# torch's circular padding before a convolution, at opset 19 (Pad in mode wrap), to train.
save('circular19', [helper.make_node('Pad', ['image', 'ring'], ['p'], mode='wrap'),
                    helper.make_node('Conv', ['p', 'cw'], ['c']), helper.make_node('Tanh', ['c'], ['t']),
                    helper.make_node('Flatten', ['t'], ['f']), helper.make_node('Gemm', ['f', 'fw', 'fb'], ['logits'], transB=1)],
     [vi('image', F, ['N', 1, 4, 4])], [vi('logits', F, ['N', 3])], 19,
     [numpy_helper.from_array(np.array([0, 0, 1, 2, 0, 0, 1, 2], np.int64), 'ring'),
      numpy_helper.from_array(np.random.default_rng(6).standard_normal((2, 1, 3, 3)).astype(np.float32), 'cw'),
      numpy_helper.from_array(np.random.default_rng(7).standard_normal((3, 48)).astype(np.float32) * 0.1, 'fw'),
      numpy_helper.from_array(np.zeros(3, np.float32), 'fb')])

# Opset 23, IR 11: RMSNormalization over the last axis (the default) and from axis 1 (the rank stated).
xd = x.astype(np.float64)
g23 = np.array([0.5, 1.5, -1, 2], np.float32); g23b = np.arange(12, dtype=np.float32).reshape(3, 4) / 10
outs23 = {'rms_last': xd / np.sqrt((xd ** 2).mean(-1, keepdims=True) + 1e-5) * g23,
          'rms_from1': xd / np.sqrt((xd ** 2).mean((1, 2), keepdims=True) + 1e-3) * g23b}
for k, v in outs23.items(): np.save(k + '.npy', v.astype(np.float32))
save('rms23', [helper.make_node('RMSNormalization', ['x', 'g23'], ['rms_last']),
               helper.make_node('RMSNormalization', ['x', 'g23b'], ['rms_from1'], axis=1, epsilon=1e-3)],
     [vi('x', F, [2, 3, 4])], [vi(k, F, [2, 3, 4]) for k in outs23], 23,
     [numpy_helper.from_array(g23, 'g23'), numpy_helper.from_array(g23b, 'g23b')], ir=11)

# A classifier of opset 20 to train: Gemm, Gelu, ReduceMean over an axes input, Gemm.
rng = np.random.default_rng(1)
save('mlp20', [helper.make_node('Gemm', ['image', 'w1', 'b1'], ['h'], transB=1),
               helper.make_node('Gelu', ['h'], ['a']),
               helper.make_node('Reshape', ['a', 'shape3'], ['a3']),
               helper.make_node('ReduceMean', ['a3', 'axes2'], ['m'], keepdims=0),
               helper.make_node('Gemm', ['m', 'w2', 'b2'], ['logits'], transB=1)],
     [vi('image', F, ['N', 6])], [vi('logits', F, ['N', 3])], 20,
     [numpy_helper.from_array(rng.standard_normal((8, 6)).astype(np.float32), 'w1'),
      numpy_helper.from_array(np.zeros(8, np.float32), 'b1'),
      numpy_helper.from_array(np.array([0, 4, 2], np.int64), 'shape3'),
      numpy_helper.from_array(np.array([2], np.int64), 'axes2'),
      numpy_helper.from_array(rng.standard_normal((3, 4)).astype(np.float32), 'w2'),
      numpy_helper.from_array(np.zeros(3, np.float32), 'b2')], ir=9)

# What opset 17 cannot say.
X = [vi('x', F, [2, 3, 4])]
save('runtime_axes', [helper.make_node('ReduceMean', ['x', 'ax'], ['r'], name='mean_of_input')],
     X + [vi('ax', TensorProto.INT64, [1])], [vi('r', F, None)], 18)
save('antialias', [helper.make_node('Resize', ['y', '', 'scales'], ['r'], name='smooth', mode='nearest', antialias=1)],
     [vi('y', F, [1, 1, 4, 4])], [vi('r', F, None)], 18,
     [numpy_helper.from_array(np.array([1, 1, 0.5, 0.5], np.float32), 'scales')])
save('pad_axes', [helper.make_node('Pad', ['x', 'pads', '', 'axes'], ['r'], name='pad_last')], [vi('x', F, None)], [vi('r', F, None)],
     18, [numpy_helper.from_array(np.array([1, 1], np.int64), 'pads'),
          numpy_helper.from_array(np.array([2], np.int64), 'axes')])
save('split_count', [helper.make_node('Split', ['x'], ['a', 'b'], name='halves', axis=2, num_outputs=3)], X,
     [vi('a', F, None), vi('b', F, None)], 18)
save('col2im', [helper.make_node('Col2Im', ['x', 'size', 'block'], ['r'], name='fold')],
     X + [vi('size', TensorProto.INT64, [2])], [vi('r', F, None)], 18,
     [numpy_helper.from_array(np.array([1, 1], np.int64), 'block')])
save('huge_fold', [helper.make_node('Col2Im', ['x', 'size', 'block'], ['r'], name='big_fold')], X, [vi('r', F, None)], 18,
     [numpy_helper.from_array(np.array([200, 200], np.int64), 'size'),
      numpy_helper.from_array(np.array([100, 100], np.int64), 'block')])
save('far_fold', [helper.make_node('Col2Im', ['x', 'size', 'block'], ['r'], name='far')], X, [vi('r', F, None)], 18,
     [numpy_helper.from_array(np.array([2, 2], np.int64), 'size'),
      numpy_helper.from_array(np.array([1, 2], np.int64), 'block')])
m = onnx.load('far_fold.onnx'); m.graph.node[0].attribute.extend([helper.make_attribute('dilations', [1, 1 << 62])])
onnx.save(m, 'far_fold.onnx')
save('wide_wrap', [helper.make_node('Pad', ['x', 'pads'], ['r'], name='ring', mode='wrap')], X, [vi('r', F, None)], 19,
     [numpy_helper.from_array(np.array([0, 0, 5, 0, 0, 0], np.int64), 'pads')])
save('bitwise', [helper.make_node('Cast', ['x'], ['i'], to=TensorProto.INT32),
                 helper.make_node('BitwiseAnd', ['i', 'i'], ['r'], name='mask')], X, [vi('r', TensorProto.INT32, None)], 18)
# Two nodes of one name (ONNX lets names repeat): what each is rewritten into is named after its output.
save('same_names', [helper.make_node('Gelu', ['x'], ['g1'], name='act'), helper.make_node('Gelu', ['g1'], ['g2'], name='act'),
                    helper.make_node('Mish', ['g2'], ['same_out'], name='act')], X, [vi('same_out', F, [2, 3, 4])], 20, ir=10)
xd = x.astype(np.float64); gl = lambda v: 0.5 * v * (1 + erf(v / math.sqrt(2)))
np.save('same_out.npy', (lambda v: v * np.tanh(np.log1p(np.exp(v))))(gl(gl(xd))).astype(np.float32))
save('gelu_kind', [helper.make_node('Gelu', ['x'], ['r'], name='act', approximate='erf')], X, [vi('r', F, None)], 20)
save('ir14', [helper.make_node('Relu', ['x'], ['r'])], X, [vi('r', F, None)], 20, ir=14)
save('attn_unranked', [helper.make_node('Attention', ['x', 'x', 'x'], ['r'], name='sdpa', q_num_heads=2)], [vi('x', F, None)],
     [vi('r', F, None)], 23, ir=11)
save('attn_no_heads', [helper.make_node('Attention', ['x', 'x', 'x'], ['r'], name='sdpa3')], X, [vi('r', F, None)], 23, ir=11)
save('attn_qk_mode', [helper.make_node('Attention', ['y', 'y', 'y'], ['r', '', '', 'qk'], name='sdpa_qk',
                                       qk_matmul_output_mode=5)],
     [vi('y', F, [1, 1, 4, 4])], [vi('r', F, None), vi('qk', F, None)], 23, ir=11)
save('rotary23', [helper.make_node('RotaryEmbedding', ['x', 'x', 'x'], ['r'], name='rope')], X, [vi('r', F, None)], 23,
     ir=11)
)";

// What the tests' own scripts share: onnx's helpers, and save_graph for a model of any opset and IR version.
const char* kOnnxHelpers = R"(
import onnx
from onnx import helper, TensorProto, numpy_helper
vi = helper.make_tensor_value_info
def save_graph(g, name, opset, ir=None):
    m = helper.make_model(g, opset_imports=[helper.make_opsetid('', opset)])
    if ir: m.ir_version = ir
    onnx.save(m, name + '.onnx')
)";

class OpsetLowering : public ::testing::Test {
 protected:
  // A folder per test: ctest runs the tests of this file as processes side by side.
  void SetUp() override {
    dir_ = temp_dir(std::string("opset_lowering_") + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    run_python(dir_, kModels);
  }
  std::string dir_;

  // Runs `script` in the test's folder after kOnnxHelpers.
  void run_script(const std::string& script) { run_python(dir_, std::string(kOnnxHelpers) + script); }

  void expect_outputs(const std::string& model, const std::map<std::string, Tensor>& feeds, double tol) {
    runtime::Executor ex(load_onnx(dir_ + "/" + model + ".onnx"));
    const auto out = ex.run(feeds);
    ASSERT_FALSE(out.empty()) << model;
    for (const auto& [name, got] : out) {
      const Tensor want = read_npy(dir_ + "/" + name + ".npy");
      EXPECT_EQ(shape_str(got.shape()), shape_str(want.shape())) << model << " " << name;
      EXPECT_EQ(got.dtype(), want.dtype()) << model << " " << name;
      if (got.shape() == want.shape() && got.dtype() == want.dtype()) {
        EXPECT_LE(testing::max_abs_diff(got, want), tol) << model << " " << name;
      }
    }
  }

  // `graphrun check` of MODEL.onnx passes (its float64 gradient check included); returns its output.
  std::string expect_trainable(const std::string& model) {
    auto r = run_command(testing::graphrun_cli() + " check " + dir_ + "/" + model + ".onnx 2>&1");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("\nverdict: trainable"), std::string::npos) << r.output;
    return r.output;
  }

  // Runs each model NAME.onnx of the folder whose name starts with one of `prefixes` on NAME_IN.npy as input `in`,
  // its output `out` against NAME_OUT.npy; returns how many.
  int expect_each(const std::vector<std::string>& prefixes, const std::string& in, const std::string& out, double tol) {
    int checked = 0;
    for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
      const std::string file = entry.path().filename().string();
      if (file.size() < 6 || file.substr(file.size() - 5) != ".onnx" ||
          std::none_of(prefixes.begin(), prefixes.end(), [&](const std::string& p) { return file.rfind(p, 0) == 0; }))
        continue;
      const std::string name = file.substr(0, file.size() - 5);
      SCOPED_TRACE(name);
      runtime::Executor ex(load_onnx(dir_ + "/" + file));
      const auto got = ex.run({{in, read_npy(dir_ + "/" + name + "_" + in + ".npy")}});
      const Tensor want = read_npy(dir_ + "/" + name + "_" + out + ".npy");
      EXPECT_EQ(shape_str(got.at(out).shape()), shape_str(want.shape()));
      if (got.at(out).shape() == want.shape()) {
        EXPECT_LT(testing::max_abs_diff(got.at(out), want), tol);
      }
      ++checked;
    }
    return checked;
  }

  // Runs each model NAME.onnx of `models` on INPUT.npy for each of its inputs (not its weights), each output OUT
  // against OUT.npy; returns how many outputs.
  int expect_each_model(const std::vector<std::string>& models, double tol) {
    int checked = 0;
    for (const auto& name : models) {
      SCOPED_TRACE(name);
      const Graph g = load_onnx(dir_ + "/" + name + ".onnx");
      std::map<std::string, Tensor> feeds;
      for (const auto& in : g.inputs)
        if (!g.is_initializer(in)) feeds[in] = read_npy(dir_ + "/" + in + ".npy");
      runtime::Executor ex(g);
      for (const auto& [out, got] : ex.run(feeds)) {
        const Tensor want = read_npy(dir_ + "/" + out + ".npy");
        EXPECT_EQ(shape_str(got.shape()), shape_str(want.shape())) << out;
        if (got.shape() == want.shape()) {
          EXPECT_LT(testing::max_abs_diff(got, want), tol) << out;
        }
        ++checked;
      }
    }
    return checked;
  }

  void expect_refused(const std::string& model, const std::string& what) {
    const std::string path = dir_ + "/" + model + ".onnx";
    try {
      load_onnx(path);
      ADD_FAILURE() << path << ": loaded, expected an error about " << what;
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(path), std::string::npos) << msg;
      EXPECT_NE(msg.find(what), std::string::npos) << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    }
  }
};

TEST_F(OpsetLowering, Opset19FormsMatchNumpy) {
  const Graph g = load_onnx(dir_ + "/forms19.onnx");
  EXPECT_EQ(g.opset(""), 17);
  expect_outputs("forms19", {{"x", read_npy(dir_ + "/x.npy")}, {"y", read_npy(dir_ + "/y.npy")}}, 1e-6);
}

TEST_F(OpsetLowering, Opset20FormsMatchNumpy) {
  expect_outputs("forms20", {{"sig", read_npy(dir_ + "/sig.npy")}, {"x", read_npy(dir_ + "/x.npy")}}, 1e-5);
  expect_trainable("circular19");
}

TEST_F(OpsetLowering, RmsNormalizationOfOpset23MatchesNumpy) {
  expect_outputs("rms23", {{"x", read_npy(dir_ + "/x.npy")}}, 2e-6);
}

TEST_F(OpsetLowering, GeluAndMishOfOpset20MatchNumpy) {
  expect_outputs("acts20", {{"x", read_npy(dir_ + "/x.npy")}}, 2e-6);
  expect_outputs("same_names", {{"x", read_npy(dir_ + "/x.npy")}}, 2e-6);
}

// An opset-20 model trains: `graphrun check` finds a gradient rule for every node (after lowering) and its float64
// gradient check passes; `graphrun train` runs it on data of its own.
TEST_F(OpsetLowering, Opset20ClassifierChecksAndTrains) {
  const std::string model = dir_ + "/mlp20.onnx";
  const std::string checked = expect_trainable("mlp20");
  EXPECT_NE(checked.find("opset 20 read as opset 17"), std::string::npos) << checked;
  run_python(dir_, R"(
rng = np.random.default_rng(2)
image = rng.standard_normal((256, 6)).astype(np.float32)
np.savez('mlp.npz', image=image, labels=(image[:, 0] > 0).astype(np.int64) + (image[:, 1] > 1))
)");
  auto r = run_command(testing::graphrun_cli() + " train " + model + " --data " + dir_ +
                       "/mlp.npz --epochs 2 --batch-size 32 --lr 0.1 --devices cpu:2 2>&1");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("epoch 2/2"), std::string::npos) << r.output;
}

// GroupNormalization (opset 18: scale and bias per group; 21: per channel) and Col2Im (18) have no opset-17 op;
// they are written as torch writes F.group_norm at opset 17 (InstanceNormalization of X as [N, G, rest]) and
// F.fold (a ConvTranspose by one-hot blocks). Their outputs against torch's F.group_norm and F.fold and against a
// naive col2im in numpy (ONNX's node-test cases: blocks of 1 x 5, dilations, strides that leave a remainder,
// asymmetric pads, three spatial dimensions); a classifier of both at opset 21 checks (float64 gradients).
TEST_F(OpsetLowering, GroupNormalizationAndCol2ImMatchTorch) {
  run_python(dir_, R"(
import itertools, onnx, torch
from onnx import helper, TensorProto, numpy_helper
vi = helper.make_tensor_value_info
F32 = TensorProto.FLOAT
rng = np.random.default_rng(3)
def model(name, node, x, opset, inits, out):
    np.save(name + '_x.npy', x); np.save(name + '_y.npy', out.astype(np.float32))
    g = helper.make_graph([node], name, [vi('x', F32, list(x.shape))], [vi('y', F32, list(out.shape))],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid('', opset)])
    onnx.save(m, name + '.onnx')
# GroupNormalization: per channel (21) against torch, per group (18) against numpy.
for shape, groups in [((2, 6, 3, 4), 3), ((3, 4, 5), 2), ((2, 6, 2, 2, 3), 6)]:
    x = rng.standard_normal(shape).astype(np.float32) * 2 + 1
    C = shape[1]
    w, b = rng.standard_normal(C).astype(np.float32), rng.standard_normal(C).astype(np.float32)
    t = torch.nn.functional.group_norm(torch.tensor(x, dtype=torch.float64), groups, torch.tensor(w, dtype=torch.float64),
                                       torch.tensor(b, dtype=torch.float64), eps=1e-3).numpy()
    tag = '_'.join(map(str, shape))
    model('gn21_' + tag, helper.make_node('GroupNormalization', ['x', 's', 'b'], ['y'], epsilon=1e-3, num_groups=groups),
          x, 21, {'s': w, 'b': b}, t)
    wg, bg = w[:groups], b[:groups]
    xg = x.astype(np.float64).reshape(shape[0], groups, -1)
    ng = (xg - xg.mean(-1, keepdims=True)) / np.sqrt(xg.var(-1, keepdims=True) + 1e-5)
    model('gn18_' + tag, helper.make_node('GroupNormalization', ['x', 's', 'b'], ['y'], num_groups=groups),
          x, 18, {'s': wg, 'b': bg}, (ng * wg[:, None] + bg[:, None]).reshape(shape))
# Col2Im against a naive sum of the blocks.
def col2im(x, image, block, dil, pads, strides):
    N, CK, L = x.shape; S = len(image); K = int(np.prod(block)); C = CK // K
    counts = [(image[i] + pads[i] + pads[S + i] - dil[i] * (block[i] - 1) - 1) // strides[i] + 1 for i in range(S)]
    assert int(np.prod(counts)) == L
    padded = np.zeros((N, C) + tuple(image[i] + pads[i] + pads[S + i] for i in range(S)))
    xr = x.astype(np.float64).reshape(N, C, K, L)
    for l, pos in enumerate(itertools.product(*[range(c) for c in counts])):
        for k, off in enumerate(itertools.product(*[range(bb) for bb in block])):
            idx = tuple(pos[i] * strides[i] + off[i] * dil[i] for i in range(S))
            padded[(slice(None), slice(None)) + idx] += xr[:, :, k, l]
    return padded[(slice(None), slice(None)) + tuple(slice(pads[i], pads[i] + image[i]) for i in range(S))]
cases = {'basic': ((1, 5, 5), [5, 5], [1, 5], {}),
         'dilations': ((1, 4, 5), [6, 6], [2, 2], {'dilations': [1, 5]}),
         'strides': ((2, 18, 4), [5, 5], [3, 3], {'strides': [2, 2]}),
         'remainder': ((2, 6, 4), [6, 7], [3, 2], {'strides': [2, 3]}),
         'pads': ((1, 8, 12), [4, 5], [2, 2], {'pads': [1, 0, 0, 2], 'strides': [1, 2]}),
         'nd': ((2, 8, 36), [3, 4, 5], [1, 2, 2], {'strides': [1, 1, 2], 'pads': [0, 0, 1, 0, 1, 0]})}
for name, (shape, image, block, attrs) in cases.items():
    S = len(image)
    x = rng.standard_normal(shape).astype(np.float32)
    out = col2im(x, image, block, attrs.get('dilations', [1] * S), attrs.get('pads', [0] * 2 * S), attrs.get('strides', [1] * S))
    model('col2im_' + name, helper.make_node('Col2Im', ['x', 'image', 'block'], ['y'], **attrs), x, 18,
          {'image': np.array(image, np.int64), 'block': np.array(block, np.int64)}, out)
    if S == 2 and attrs.get('pads', [0] * 4)[:2] == attrs.get('pads', [0] * 4)[2:]:  # torch's F.fold pads symmetrically
        t = torch.nn.functional.fold(torch.tensor(x, dtype=torch.float64), image, block, dilation=attrs.get('dilations', 1),
                                     padding=attrs.get('pads', [0, 0])[:2], stride=attrs.get('strides', 1)).numpy()
        assert np.abs(t - out).max() < 1e-12, name
# A classifier at opset 21: Conv, GroupNormalization, Relu, Col2Im of a Conv's columns, ReduceMean, Gemm.
body = [helper.make_node('Conv', ['image', 'w1'], ['c'], pads=[1, 1, 1, 1]),
        helper.make_node('GroupNormalization', ['c', 'gs', 'gb'], ['n'], num_groups=2),
        helper.make_node('Relu', ['n'], ['r']), helper.make_node('Reshape', ['r', 'cols'], ['rc']),
        helper.make_node('Col2Im', ['rc', 'img', 'blk'], ['f'], strides=[2, 2]),
        helper.make_node('ReduceMean', ['f', 'axes'], ['m'], keepdims=0),
        helper.make_node('Gemm', ['m', 'w2', 'b2'], ['logits'], transB=1)]
inits = {'w1': rng.standard_normal((8, 1, 3, 3)).astype(np.float32) * 0.5, 'gs': (1 + 0.1 * rng.standard_normal(8)).astype(np.float32),
         'gb': (0.1 * rng.standard_normal(8)).astype(np.float32), 'cols': np.array([0, 8, 36], np.int64),
         'img': np.array([13, 13], np.int64), 'blk': np.array([2, 2], np.int64), 'axes': np.array([2, 3], np.int64),
         'w2': rng.standard_normal((3, 2)).astype(np.float32), 'b2': np.zeros(3, np.float32)}
g = helper.make_graph(body, 'fold21', [vi('image', F32, ['N', 1, 6, 6])], [vi('logits', F32, ['N', 3])],
                      [numpy_helper.from_array(v, k) for k, v in inits.items()])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid('', 21)]), 'fold21.onnx')
)");
  EXPECT_EQ(expect_each({"gn", "col2im_"}, "x", "y", 2e-5), 12);
  expect_trainable("fold21");
}

// AffineGrid (opset 20: torch's F.affine_grid, which torch 1.13 could not export) is written in opset-17 ops (Range,
// Div, Expand, Concat, MatMul by theta^T, Reshape): 2-D and 3-D, both align_corners, lengths of 1, against torch in
// float64; a spatial transformer (Gemm -> theta, AffineGrid of the input's Shape, GridSample of opset 20) matches
// torch's forward and passes `check`.
TEST_F(OpsetLowering, AffineGridOfOpset20MatchesTorch) {
  run_python(dir_, R"(
import onnx, torch
from onnx import helper, TensorProto, numpy_helper
vi = helper.make_tensor_value_info
F32 = TensorProto.FLOAT
rng = np.random.default_rng(4)
def save(name, nodes, inputs, outputs, inits=(), value_info=()):
    g = helper.make_graph(nodes, name, inputs, outputs, list(inits), value_info=list(value_info))
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid('', 20)]), name + '.onnx')
for size in ([2, 3, 5, 4], [2, 1, 1, 6], [3, 2, 3, 4, 5], [1, 1, 2, 1, 3]):
    r = len(size) - 2
    theta = rng.standard_normal((size[0], r, r + 1)).astype(np.float32)
    for corners in (0, 1):
        name = 'ag%dd_%s_c%d' % (r, '_'.join(map(str, size)), corners)
        t = torch.nn.functional.affine_grid(torch.tensor(theta, dtype=torch.float64), size, align_corners=bool(corners))
        np.save(name + '_theta.npy', theta); np.save(name + '_grid.npy', t.numpy().astype(np.float32))
        save(name, [helper.make_node('AffineGrid', ['theta', 'size'], ['grid'], align_corners=corners)],
             [vi('theta', F32, list(theta.shape))], [vi('grid', F32, list(t.shape))],
             [numpy_helper.from_array(np.array(size, np.int64), 'size')])
# A spatial transformer: theta from the image by a Gemm, the grid of the image's own size, sampled bilinearly.
w = (0.1 * rng.standard_normal((6, 64))).astype(np.float32)
b = np.array([1, 0.1, 0, -0.1, 0.9, 0.05], np.float32)
nodes = [helper.make_node('Flatten', ['x'], ['flat']), helper.make_node('Gemm', ['flat', 'w', 'b'], ['t6'], transB=1),
         helper.make_node('Reshape', ['t6', 'theta_shape'], ['theta']), helper.make_node('Shape', ['x'], ['size']),
         helper.make_node('AffineGrid', ['theta', 'size'], ['grid'], name='stn_grid'),
         helper.make_node('GridSample', ['x', 'grid'], ['stn_out'], mode='linear')]
save('stn20', nodes, [vi('x', F32, ['N', 1, 8, 8])], [vi('stn_out', F32, ['N', 1, 8, 8])],
     [numpy_helper.from_array(w, 'w'), numpy_helper.from_array(b, 'b'),
      numpy_helper.from_array(np.array([-1, 2, 3], np.int64), 'theta_shape')], [vi('theta', F32, ['N', 2, 3])])
x = rng.standard_normal((3, 1, 8, 8)).astype(np.float32)
xt = torch.tensor(x, dtype=torch.float64)
theta = (xt.reshape(3, -1) @ torch.tensor(w, dtype=torch.float64).T + torch.tensor(b, dtype=torch.float64)).reshape(-1, 2, 3)
y = torch.nn.functional.grid_sample(xt, torch.nn.functional.affine_grid(theta, list(x.shape), align_corners=False),
                                    align_corners=False)
np.save('stn_x.npy', x); np.save('stn_out.npy', y.numpy().astype(np.float32))
# Without theta's shape and with the size computed, 2-D or 3-D is not known when loading.
save('ag_unknown', [helper.make_node('Shape', ['x'], ['size']), helper.make_node('AffineGrid', ['theta', 'size'], ['grid'], name='grid_of')],
     [vi('x', F32, None), vi('theta', F32, None)], [vi('grid', F32, None)])
)");
  EXPECT_EQ(expect_each({"ag2d", "ag3d"}, "theta", "grid", 2e-6), 8);
  expect_outputs("stn20", {{"x", read_npy(dir_ + "/stn_x.npy")}}, 2e-6);
  expect_trainable("stn20");
  expect_refused("ag_unknown", "node 'grid_of' (AffineGrid): whether it is 2-D or 3-D must be known when loading");
}

// GridSample of opset 20 samples volumes (X [N, C, D, H, W], grid [N, Do, Ho, Wo, 3]), as torch's 5-D
// F.grid_sample: trilinear and nearest, every padding, both corner conventions, the grid partly outside [-1, 1]
// (every padding acts), against torch in float64. A registration network (VoxelMorph's shape: a 3-D convolution
// gives a displacement field, added to the identity grid, that warps the moving volume) passes `check`: the
// gradients of both X and the grid. Bicubic sampling of a volume (torch has none) is one line.
TEST_F(OpsetLowering, GridSampleOfOpset20SamplesVolumesAsTorch) {
  run_script(R"(
import torch
F32 = TensorProto.FLOAT
rng = np.random.default_rng(12)
vol = rng.standard_normal((2, 3, 4, 5, 6)).astype(np.float32)
vgrid = rng.uniform(-1.3, 1.3, (2, 3, 2, 4, 3)).astype(np.float32)
np.save('vol.npy', vol); np.save('vgrid.npy', vgrid)
torch_mode = {'linear': 'bilinear', 'nearest': 'nearest'}
for mode in ('linear', 'nearest'):
    for pad in ('zeros', 'border', 'reflection'):
        for corners in (0, 1):
            out = 'v_%s_%s_%d' % (mode, pad, corners)
            y = torch.nn.functional.grid_sample(torch.tensor(vol, dtype=torch.float64), torch.tensor(vgrid, dtype=torch.float64),
                                                mode=torch_mode[mode], padding_mode=pad, align_corners=bool(corners))
            np.save(out + '.npy', y.numpy().astype(np.float32))
            g = helper.make_graph([helper.make_node('GridSample', ['vol', 'vgrid'], [out], mode=mode, padding_mode=pad,
                                                    align_corners=corners)], out,
                                  [vi('vol', F32, ['N', 3, 4, 5, 6]), vi('vgrid', F32, ['N', 3, 2, 4, 3])],
                                  [vi(out, F32, ['N', 3, 3, 2, 4])])
            save_graph(g, out, 20)
# Registration: flow = Conv3d(moving), grid = identity + flow (channels last), warped = GridSample(moving, grid).
D, H, W = 4, 5, 6
ident = torch.nn.functional.affine_grid(torch.eye(3, 4, dtype=torch.float64)[None], [1, 1, D, H, W], align_corners=False)
wconv = (0.05 * rng.standard_normal((3, 1, 3, 3, 3))).astype(np.float32)
nodes = [helper.make_node('Conv', ['moving', 'wconv'], ['flow'], pads=[1] * 6),
         helper.make_node('Transpose', ['flow'], ['flow_last'], perm=[0, 2, 3, 4, 1]),
         helper.make_node('Add', ['ident', 'flow_last'], ['grid']),
         helper.make_node('GridSample', ['moving', 'grid'], ['warped'], mode='linear', padding_mode='border')]
g = helper.make_graph(nodes, 'register', [vi('moving', F32, ['N', 1, D, H, W])], [vi('warped', F32, ['N', 1, D, H, W])],
                      [numpy_helper.from_array(wconv, 'wconv'), numpy_helper.from_array(ident.numpy().astype(np.float32), 'ident')])
save_graph(g, 'register', 20)
g = helper.make_graph([helper.make_node('GridSample', ['vol', 'vgrid'], ['vc'], name='cubic3d', mode='cubic')], 'cubic3d',
                      [vi('vol', F32, [2, 3, 4, 5, 6]), vi('vgrid', F32, [2, 3, 2, 4, 3])], [vi('vc', F32, [2, 3, 3, 2, 4])])
save_graph(g, 'cubic3d', 20)
)");
  std::vector<std::string> models;
  for (const char* mode : {"linear", "nearest"})
    for (const char* pad : {"zeros", "border", "reflection"})
      for (int corners : {0, 1}) models.push_back(std::string("v_") + mode + "_" + pad + "_" + std::to_string(corners));
  EXPECT_EQ(expect_each_model(models, 2e-6), 12);
  const std::string out = expect_trainable("register");
  EXPECT_NE(out.find("gradient check: float64, 2 parameters"), std::string::npos) << out;
  auto r = run_command(testing::graphrun_cli() + " run " + dir_ + "/cubic3d.onnx --input vol=" + dir_ +
                       "/vol.npy,vgrid=" + dir_ + "/vgrid.npy 2>&1");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("node 'cubic3d' (GridSample): bicubic sampling is supported for images (X of rank 4) only"),
            std::string::npos)
      << r.output;
}

// The float64 numpy reference of Attention (ONNX's definition, opsets 23 to 25) the Attention tests share, and
// case(name, feeds, attrs, outs), which writes a model of one Attention node, its inputs and the reference's outputs.
const char* kAttentionReference = R"(
F32, B8, I64 = TensorProto.FLOAT, TensorProto.BOOL, TensorProto.INT64
def softmax(x):  # a row of -inf only (no key to see) is 0, as ONNX's reference has it
    m = np.max(x, -1, keepdims=True)
    e = np.exp(x - np.where(np.isfinite(m), m, 0))
    total = e.sum(-1, keepdims=True)
    return e / np.where(total == 0, 1, total)
def reference(Q, K, V, mask=None, past=None, scale=None, causal=False, hq=0, hkv=0, softcap=0.0, nonpad=None, left=-1,
              right=-1):
    Q, K, V = (t.astype(np.float64) for t in (Q, K, V))
    three = Q.ndim == 3
    if three:
        Q, K, V = (t.reshape(t.shape[0], t.shape[1], h, -1).transpose(0, 2, 1, 3) for t, h in ((Q, hq), (K, hkv), (V, hkv)))
    P = 0
    if past is not None:
        P = past[0].shape[2]
        K, V = np.concatenate([past[0], K], 2), np.concatenate([past[1], V], 2)
    present = (K, V)
    reps = Q.shape[1] // K.shape[1]
    K, V = np.repeat(K, reps, 1), np.repeat(V, reps, 1)
    qk = Q @ K.transpose(0, 1, 3, 2) * (1 / np.sqrt(Q.shape[-1]) if scale is None else scale)
    s = capped = softcap * np.tanh(qk / softcap) if softcap > 0 else qk
    T = K.shape[2]
    if mask is not None:
        bias = np.where(mask, 0.0, -np.inf) if mask.dtype == bool else mask.astype(np.float64)
        pad = T - bias.shape[-1]
        if pad > 0: bias = np.pad(bias, [(0, 0)] * (bias.ndim - 1) + [(0, pad)], constant_values=-np.inf)
        s = s + bias
    # Query i's position: i + P after a past of P keys, i + nonpad[b] - S per sample b of a padded cache.
    S = Q.shape[2]
    at = np.arange(S)[:, None] + P if nonpad is None else np.arange(S)[None, None, :, None] + (nonpad - S)[:, None, None, None]
    keys = np.arange(T)
    seen = np.ones_like(at + keys, bool)
    if causal: seen &= keys <= at
    if left >= 0: seen &= keys >= at - left
    if right >= 0: seen &= keys <= at + right
    if nonpad is not None: seen &= keys < nonpad[:, None, None, None]
    s = np.where(seen, s, -np.inf)
    p = softmax(s)
    y = p @ V
    if three: y = y.transpose(0, 2, 1, 3).reshape(y.shape[0], y.shape[2], -1)
    return y, present[0], present[1], capped, s, p
def case(name, feeds, attrs, outs, shapes=None, past=False, opset=23):
    ins = ['q', 'k', 'v', 'mask' if 'mask' in feeds else '', 'past_k' if past else '', 'past_v' if past else '',
           'nonpad' if 'nonpad' in feeds else '']
    while ins[-1] == '': ins.pop()
    node_outs = [name + '_' + o if o else '' for o in outs]
    node = helper.make_node('Attention', [name + '_' + i if i else '' for i in ins], node_outs, **attrs)
    inputs = []
    for k, v in feeds.items():
        np.save(name + '_' + k + '.npy', v)
        inputs.append(vi(name + '_' + k, B8 if v.dtype == bool else I64 if v.dtype == np.int64 else F32,
                         (shapes or {}).get(k, list(v.shape))))
    hq, hkv = attrs.get('q_num_heads', 0), attrs.get('kv_num_heads', 0)
    got = reference(feeds['q'], feeds['k'], feeds['v'], feeds.get('mask'),
                    (feeds['past_k'], feeds['past_v']) if past else None, attrs.get('scale'),
                    attrs.get('is_causal', 0) == 1, hq, hkv, attrs.get('softcap', 0.0), feeds.get('nonpad'),
                    attrs.get('left_window_size', -1), attrs.get('right_window_size', -1))
    which = {'y': 0, 'present_k': 1, 'present_v': 2, 'qk': [3, 3, 4, 5][attrs.get('qk_matmul_output_mode', 0)]}
    outputs = []
    for o in outs:
        if not o: continue
        np.save(name + '_' + o + '.npy', got[which[o]].astype(np.float32))
        outputs.append(vi(name + '_' + o, F32, list(got[which[o]].shape)))
    g = helper.make_graph([node], name, inputs, outputs)
    save_graph(g, name, opset, {23: 11, 24: 12, 25: 13}[opset])
    return got
)";

// Attention (opset 23: torch's F.scaled_dot_product_attention) is written in opset-17 ops. Against a float64 numpy
// reference of ONNX's definition, itself checked against torch's SDPA where torch 1.13 has the case (no mask or a
// float mask, causal or not): 4-D heads with the default scale and the scaled QK^T as fourth output; causal
// cross-attention (fewer queries than keys); a float mask with a scale; a bool mask with is_causal; 3-D inputs
// with grouped-query heads, a past (present outputs), causal past-aligned, softcap; 4-D with every dimension
// symbolic (grouped heads counted at run time, a mask over fewer keys than there are padded, the softmax as fourth
// output). A small transformer block of opset 23 passes `check` (float64 gradients through the lowered nodes).
TEST_F(OpsetLowering, AttentionOfOpset23MatchesTheReference) {
  run_script(std::string(kAttentionReference) + R"(
import torch
rng = np.random.default_rng(8)
r = lambda *s: rng.standard_normal(s).astype(np.float32)
def torch_sdpa(q, k, v, mask=None, causal=False):
    t = lambda a: torch.tensor(a, dtype=torch.float64)
    return torch.nn.functional._scaled_dot_product_attention(t(q), t(k), t(v), None if mask is None else t(mask), 0.0,
                                                             False, causal)[0].numpy()
q, k, v = r(2, 3, 4, 8), r(2, 3, 6, 8), r(2, 3, 6, 5)
y = case('attn_plain', {'q': q, 'k': k, 'v': v}, {}, ['y', '', '', 'qk'])[0]
assert np.abs(y - torch_sdpa(q, k, v)).max() < 1e-12
y = case('attn_causal', {'q': q, 'k': k, 'v': v}, {'is_causal': 1}, ['y'])[0]
assert np.abs(y - torch_sdpa(q, k, v, causal=True)).max() < 1e-12
fm = r(2, 1, 4, 6)
y = case('attn_float_mask', {'q': q, 'k': k, 'v': v, 'mask': fm}, {'scale': 0.3}, ['y'])[0]
assert np.abs(y - torch_sdpa(q.astype(np.float64) * 0.3 * np.sqrt(8), k, v, fm)).max() < 1e-12
bm = rng.random((4, 6)) < 0.7; bm[:, 0] = True
case('attn_bool_causal', {'q': q, 'k': k, 'v': v, 'mask': bm}, {'is_causal': 1}, ['y'])
case('attn_gqa3d', {'q': r(2, 4, 24), 'k': r(2, 5, 12), 'v': r(2, 5, 12), 'past_k': r(2, 2, 3, 6), 'past_v': r(2, 2, 3, 6)},
     {'q_num_heads': 4, 'kv_num_heads': 2, 'is_causal': 1, 'softcap': 2.0}, ['y', 'present_k', 'present_v'], past=True)
short = rng.random((2, 1, 4, 5)) < 0.8; short[..., 0] = True
# The fourth output after softcap and mask (mode 2); a query whose keys are all masked gives 0s (mode 3 too).
case('attn_modes', {'q': q, 'k': k, 'v': v, 'mask': fm}, {'softcap': 1.5, 'qk_matmul_output_mode': 2}, ['y', '', '', 'qk'])
none = bm.copy(); none[1] = False
y, _, _, _, _, p = case('attn_no_key', {'q': q, 'k': k, 'v': v, 'mask': none}, {'qk_matmul_output_mode': 3}, ['y', '', '', 'qk'])
assert (y[:, :, 1] == 0).all() and (p[:, :, 1] == 0).all() and np.isfinite(y).all()
case('attn_symbolic', {'q': r(2, 4, 4, 8), 'k': r(2, 2, 7, 8), 'v': r(2, 2, 7, 3), 'mask': short},
     {'qk_matmul_output_mode': 3}, ['y', '', '', 'qk'],
     shapes={'q': ['B', 'H', 'S', 'D'], 'k': ['B', 'G', 'T', 'D'], 'v': ['B', 'G', 'T', 'E'], 'mask': ['B', 1, 'S', 'M']})
# A transformer block: projections, Attention of 3-D heads with a causal mask and grouped heads, residual, head.
D, H, G = 8, 4, 2
w = lambda *s: (0.3 * rng.standard_normal(s)).astype(np.float32)
inits = {'wq': w(D, D), 'wk': w(D, D // 2), 'wv': w(D, D // 2), 'wo': w(D, D), 'wh': w(D, 3), 'axes1': np.array([1], np.int64)}
body = [helper.make_node('MatMul', ['x', 'wq'], ['q']), helper.make_node('MatMul', ['x', 'wk'], ['k']),
        helper.make_node('MatMul', ['x', 'wv'], ['v']),
        helper.make_node('Attention', ['q', 'k', 'v'], ['a'], q_num_heads=H, kv_num_heads=G, is_causal=1),
        helper.make_node('MatMul', ['a', 'wo'], ['o']), helper.make_node('Add', ['x', 'o'], ['res']),
        helper.make_node('ReduceMean', ['res', 'axes1'], ['pooled'], keepdims=0),
        helper.make_node('MatMul', ['pooled', 'wh'], ['logits'])]
g = helper.make_graph(body, 'block23', [vi('x', F32, ['N', 5, D])], [vi('logits', F32, ['N', 3])],
                      [numpy_helper.from_array(v, k) for k, v in inits.items()])
save_graph(g, 'block23', 23, 11)
# The same with a mask that leaves query 2 no key: its gradient stays finite (the guard's Softmax reads 0s).
keys = np.ones((5, 5), bool); keys[2] = False; keys[:, 4] = False
body[3] = helper.make_node('Attention', ['q', 'k', 'v', 'keys'], ['a'], q_num_heads=H, kv_num_heads=G)
g = helper.make_graph(body, 'block23_mask', [vi('x', F32, ['N', 5, D])], [vi('logits', F32, ['N', 3])],
                      [numpy_helper.from_array(v, k) for k, v in inits.items()] + [numpy_helper.from_array(keys, 'keys')])
save_graph(g, 'block23_mask', 23, 11)
)");
  EXPECT_EQ(expect_each_model({"attn_plain", "attn_causal", "attn_float_mask", "attn_bool_causal", "attn_gqa3d",
                               "attn_modes", "attn_no_key", "attn_symbolic"},
                              2e-6),
            14);
  expect_trainable("block23");
  expect_trainable("block23_mask");
}

// Attention of opsets 24 and 25 (a KV cache written outside the node, as TensorScatter writes it; sliding windows):
// nonpad_kv_seqlen hides sample b's keys from that count on and places its queries at the count's end (a negative
// offset where the queries outnumber the keys seen: those rows see no key, 0s); left_window_size and
// right_window_size bound the keys each query sees around its position, with a causal bias, a mask, a past, grouped
// heads and symbolic shapes; against the float64 reference. A decoder step of opset 24 (TensorScatter writes the
// new keys and values into caches, Attention reads them with nonpad_kv_seqlen) and a sliding-window block of opset
// 25 pass `check`.
TEST_F(OpsetLowering, AttentionOfOpsets24And25ReadsPaddedCachesAndWindows) {
  run_script(std::string(kAttentionReference) + R"(
rng = np.random.default_rng(10)
r = lambda *s: rng.standard_normal(s).astype(np.float32)
lens = lambda *v: np.array(v, np.int64)
case('a24_decode', {'q': r(2, 4, 1, 8), 'k': r(2, 2, 7, 8), 'v': r(2, 2, 7, 5), 'nonpad': lens(5, 7)}, {'is_causal': 1},
     ['y'], opset=24)
y = case('a24_negative', {'q': r(2, 2, 4, 8), 'k': r(2, 2, 6, 8), 'v': r(2, 2, 6, 5), 'nonpad': lens(2, 6)},
         {'is_causal': 1, 'qk_matmul_output_mode': 3}, ['y', '', '', 'qk'], opset=24)[0]
assert (y[0, :, :2] == 0).all() and (y[0, :, 2:] != 0).all()  # offset -2: the first two queries see no key
bm = rng.random((3, 5)) < 0.7; bm[:, 0] = True
case('a24_mask', {'q': r(2, 2, 3, 8), 'k': r(2, 2, 6, 8), 'v': r(2, 2, 6, 5), 'mask': bm, 'nonpad': lens(4, 0)}, {},
     ['y'], opset=24)
case('a25_window', {'q': r(2, 5, 16), 'k': r(2, 6, 8), 'v': r(2, 6, 8)},
     {'q_num_heads': 2, 'kv_num_heads': 1, 'left_window_size': 2, 'right_window_size': 1}, ['y'], opset=25)
case('a25_past', {'q': r(1, 2, 3, 4), 'k': r(1, 2, 3, 4), 'v': r(1, 2, 3, 4), 'past_k': r(1, 2, 4, 4),
                  'past_v': r(1, 2, 4, 4)},
     {'is_causal': 1, 'left_window_size': 1, 'qk_matmul_output_mode': 2}, ['y', 'present_k', 'present_v', 'qk'],
     past=True, opset=25)
case('a25_symbolic', {'q': r(2, 2, 3, 8), 'k': r(2, 2, 7, 8), 'v': r(2, 2, 7, 3), 'mask': r(2, 1, 3, 6),
                      'nonpad': lens(6, 4)},
     {'is_causal': 1, 'left_window_size': 2, 'right_window_size': 0}, ['y'], opset=25,
     shapes={'q': ['B', 'H', 'S', 'D'], 'k': ['B', 'H', 'T', 'D'], 'v': ['B', 'H', 'T', 'E'], 'mask': ['B', 1, 'S', 'M'],
             'nonpad': ['B']})
# A decoder step: the new keys and values written into caches of 6 positions at each sample's length (3 and 1),
# then read up to the new lengths (5 and 3).
D, w = 8, lambda *s: (0.3 * rng.standard_normal(s)).astype(np.float32)
inits = {'wq': w(D, D), 'wk': w(D, D), 'wv': w(D, D), 'wh': w(2 * D, 3), 'cache_k': w(2, 2, 6, 4), 'cache_v': w(2, 2, 6, 4),
         'write_at': lens(3, 1), 'seen': lens(5, 3), 'split4': lens(0, 0, 2, 4), 'flat': lens(0, -1)}
heads = lambda x, o: [helper.make_node('Reshape', [x, 'split4'], [o + '_split']),
                      helper.make_node('Transpose', [o + '_split'], [o], perm=[0, 2, 1, 3])]
body = [helper.make_node('MatMul', ['x', 'wq'], ['q3']), helper.make_node('MatMul', ['x', 'wk'], ['k3']),
        helper.make_node('MatMul', ['x', 'wv'], ['v3'])] + heads('q3', 'q') + heads('k3', 'k') + heads('v3', 'v') + [
        helper.make_node('TensorScatter', ['cache_k', 'k', 'write_at'], ['new_k']),
        helper.make_node('TensorScatter', ['cache_v', 'v', 'write_at'], ['new_v']),
        helper.make_node('Attention', ['q', 'new_k', 'new_v', '', '', '', 'seen'], ['a'], is_causal=1),
        helper.make_node('Transpose', ['a'], ['a_seq'], perm=[0, 2, 1, 3]), helper.make_node('Reshape', ['a_seq', 'flat'], ['a2']),
        helper.make_node('MatMul', ['a2', 'wh'], ['logits'])]
g = helper.make_graph(body, 'decode24', [vi('x', F32, [2, 2, D])], [vi('logits', F32, [2, 3])],
                      [numpy_helper.from_array(v, k) for k, v in inits.items()])
save_graph(g, 'decode24', 24, 12)
# A sliding-window block of opset 25 (each token sees itself and the two before it).
body = [helper.make_node('MatMul', ['x', 'wq'], ['q']), helper.make_node('MatMul', ['x', 'wk'], ['k']),
        helper.make_node('MatMul', ['x', 'wv'], ['v']),
        helper.make_node('Attention', ['q', 'k', 'v'], ['a'], q_num_heads=2, kv_num_heads=2, is_causal=1, left_window_size=2),
        helper.make_node('Add', ['x', 'a'], ['res']), helper.make_node('Reshape', ['res', 'flat'], ['res2']),
        helper.make_node('MatMul', ['res2', 'wo'], ['logits'])]
g = helper.make_graph(body, 'window25', [vi('x', F32, ['N', 5, D])], [vi('logits', F32, ['N', 3])],
                      [numpy_helper.from_array(v, k) for k, v in
                       [('wq', inits['wq']), ('wk', inits['wk']), ('wv', inits['wv']), ('wo', w(5 * D, 3)), ('flat', lens(0, -1))]])
save_graph(g, 'window25', 25, 13)
x = r(1, 2, 2, 4)
for name, node in [('both_caches', helper.make_node('Attention', ['x', 'x', 'x', '', 'x', 'x', 'n'], ['y'], name='sdpa24')),
                   ('bad_window', helper.make_node('Attention', ['x', 'x', 'x'], ['y'], name='sdpa25', left_window_size=-2))]:
    g = helper.make_graph([node], name, [vi('x', F32, [1, 2, 2, 4]), vi('n', I64, [1])], [vi('y', F32, [1, 2, 2, 4])])
    save_graph(g, name, 25, 13)
)");
  EXPECT_EQ(
      expect_each_model({"a24_decode", "a24_negative", "a24_mask", "a25_window", "a25_past", "a25_symbolic"}, 2e-6),
      10);
  expect_trainable("decode24");
  expect_trainable("window25");
  expect_refused("both_caches",
                 "node 'sdpa24' (Attention): nonpad_kv_seqlen cannot be combined with past_key and past_value");
  expect_refused("bad_window",
                 "node 'sdpa25' (Attention): left_window_size and right_window_size must be -1 or at least 0");
}

// Swish (24), SwiGLU (28) and TensorScatter (24, a KV cache update) are written in opset-17 ops (Sigmoid and Mul;
// ScatterElements at indices write_indices[b] + s, modulo the cache's length in mode circular), against numpy: the
// activations with and without alpha; caches written from each sample's index, from 0 (no write_indices), wrapped
// around, along axis 1 of 3-D and -2 of 4-D caches. A batch axis, or a rank not stated, is refused in one line; so
// are the newer ops graphrun has no form of (BitCast).
TEST_F(OpsetLowering, SwishSwiGluAndTensorScatterMatchNumpy) {
  run_script(R"(
F32, I64 = TensorProto.FLOAT, TensorProto.INT64
rng = np.random.default_rng(11)
r = lambda *s: rng.standard_normal(s).astype(np.float32)
sig = lambda v: 1 / (1 + np.exp(-v))
a, b = r(2, 3, 4), r(2, 3, 4)
np.save('ga.npy', a); np.save('gb.npy', b)
A, B = a.astype(np.float64), b.astype(np.float64)
for name, v in [('swish1', A * sig(A)), ('swish07', A * sig(0.7 * A)), ('glu', A * sig(1.3 * A) * B), ('glu1', A * sig(A) * B)]:
    np.save(name + '.npy', v.astype(np.float32))
g = helper.make_graph([helper.make_node('Swish', ['ga'], ['swish1']), helper.make_node('Swish', ['ga'], ['swish07'], alpha=0.7),
                       helper.make_node('SwiGLU', ['ga', 'gb'], ['glu'], alpha=1.3), helper.make_node('SwiGLU', ['ga', 'gb'], ['glu1'])],
                      'gates28', [vi('ga', F32, [2, 3, 4]), vi('gb', F32, [2, 3, 4])],
                      [vi(o, F32, [2, 3, 4]) for o in ('swish1', 'swish07', 'glu', 'glu1')])
save_graph(g, 'gates28', 28, 13)
def scatter(past, update, write, axis, circular):
    out = past.copy()
    M, S = past.shape[axis], update.shape[axis]
    for b in range(past.shape[0]):
        for s in range(S):
            at = write[b] + s
            if circular: at %= M
            dst, src = [slice(None)] * past.ndim, [slice(None)] * past.ndim
            dst[0] = src[0] = b
            dst[axis], src[axis] = at, s
            out[tuple(dst)] = update[tuple(src)]
    return out
cases = [('ts_linear', (2, 6, 3), (2, 2, 3), [1, 4], 1, 'linear'), ('ts_zero', (2, 6, 3), (2, 3, 3), None, 1, 'linear'),
         ('ts_circular', (2, 2, 5, 3), (2, 2, 3, 3), [3, 4], -2, 'circular')]
for name, ps, us, write, axis, mode in cases:
    past, update = r(*ps), r(*us)
    ins = [name + '_past', name + '_update'] + ([name + '_write'] if write else [])
    np.save(name + '_past.npy', past); np.save(name + '_update.npy', update)
    inputs = [vi(name + '_past', F32, list(ps)), vi(name + '_update', F32, list(us))]
    if write:
        np.save(name + '_write.npy', np.array(write, np.int64)); inputs.append(vi(name + '_write', I64, [2]))
    np.save(name + '_out.npy', scatter(past, update, write or [0, 0], axis % len(ps), mode == 'circular'))
    g = helper.make_graph([helper.make_node('TensorScatter', ins, [name + '_out'], axis=axis, mode=mode)], name, inputs,
                          [vi(name + '_out', F32, list(ps))])
    save_graph(g, name, 24, 12)
X = [vi('x', F32, [2, 3, 4])]
for name, node, ins, opset in [
        ('ts_batch', helper.make_node('TensorScatter', ['x', 'x'], ['y'], name='cache0', axis=0), X, 24),
        ('ts_rank', helper.make_node('TensorScatter', ['u', 'u'], ['y'], name='cache_r'), [vi('u', F32, None)], 24),
        ('bitcast', helper.make_node('BitCast', ['x'], ['y'], name='bits', to=TensorProto.INT32), X, 26)]:
    g = helper.make_graph([node], name, ins, [vi('y', F32, [2, 3, 4])])
    save_graph(g, name, opset, 13)
)");
  EXPECT_EQ(expect_each_model({"gates28", "ts_linear", "ts_zero", "ts_circular"}, 2e-6), 7);
  expect_refused("ts_batch", "node 'cache0' (TensorScatter): axis cannot be the batch axis (0)");
  expect_refused("ts_rank", "node 'cache_r' (TensorScatter): the rank of past_cache must be known when loading");
  expect_refused("bitcast", "node 'bits' (BitCast): op BitCast is newer than opset 17 and has no form there");
}

// CumProd (26) is written as a running product by doubling (Pad, Slice, Mul: ceil(log2 L) steps), and
// CausalConvWithState (27: Mamba's and Gated DeltaNet's causal depthwise convolution with its carried state) as
// Concat or Pad, a depthwise Conv and SiLU: against torch.cumprod (every exclusive and reverse combination, a 0
// among the values, int32 values, a length not a power of 2) and F.conv1d of the state and the input. A gated block
// of both (the convolution's output through a sigmoid, its running product along the sequence) passes `check`: its
// CumProd reads a value whose shape the file does not state, which the nodes before it give (inferred when
// rewriting it needs it; refused before). An axis of unstated length, or a weight of unstated shape, is refused in
// one line.
TEST_F(OpsetLowering, CumProdAndCausalConvMatchTorch) {
  run_script(R"(
import torch
F32, I32, I64 = TensorProto.FLOAT, TensorProto.INT32, TensorProto.INT64
rng = np.random.default_rng(13)
x = rng.uniform(0.5, 1.5, (3, 7, 2)).astype(np.float32); x[1, 3, 0] = 0; x[2, 5, 1] = -1.25
xi = rng.integers(-3, 4, (2, 6)).astype(np.int32)
np.save('cx.npy', x); np.save('ci.npy', xi)
def cumprod(v, axis, exclusive, reverse):
    t = torch.tensor(v.astype(np.float64) if v.dtype == np.float32 else v.astype(np.int64))
    if reverse: t = t.flip(axis)
    y = torch.cumprod(t, axis)
    if exclusive:
        y = torch.cat([torch.ones_like(y.narrow(axis, 0, 1)), y.narrow(axis, 0, y.shape[axis] - 1)], axis)
    if reverse: y = y.flip(axis)
    return y.numpy().astype(v.dtype)
nodes, outs, inits = [], [], [numpy_helper.from_array(np.array(1, np.int64), 'ax1'),
                             numpy_helper.from_array(np.array(-1, np.int32), 'ax_last')]
for ex in (0, 1):
    for rev in (0, 1):
        for src, ax, axis, shape in (('cx', 'ax1', 1, [3, 7, 2]), ('ci', 'ax_last', -1, [2, 6])):
            o = 'cp_%s_%d%d' % (src, ex, rev)
            nodes.append(helper.make_node('CumProd', [src, ax], [o], exclusive=ex, reverse=rev))
            np.save(o + '.npy', cumprod(np.load(src + '.npy'), axis, ex, rev))
            outs.append(vi(o, F32 if src == 'cx' else I32, shape))
g = helper.make_graph(nodes, 'cumprod26', [vi('cx', F32, [3, 7, 2]), vi('ci', I32, [2, 6])], outs, inits)
save_graph(g, 'cumprod26', 26, 13)
# CausalConvWithState: with and without a past state and a bias, SiLU or none, k 4 and 1.
B, C, L = 2, 3, 5
inp = rng.standard_normal((B, C, L)).astype(np.float32); np.save('cc_in.npy', inp)
for name, k, bias, past, act in (('cc_plain', 4, False, False, 'none'), ('cc_state', 4, True, True, 'silu'),
                                 ('cc_k1', 1, True, False, 'none')):
    w = rng.standard_normal((C, 1, k)).astype(np.float32)
    b = rng.standard_normal(C).astype(np.float32)
    st = rng.standard_normal((B, C, k - 1)).astype(np.float32)
    full = np.concatenate([st if past else np.zeros((B, C, k - 1), np.float32), inp], 2)
    y = torch.nn.functional.conv1d(torch.tensor(full, dtype=torch.float64), torch.tensor(w, dtype=torch.float64),
                                   torch.tensor(b, dtype=torch.float64) if bias else None, groups=C)
    if act == 'silu': y = torch.nn.functional.silu(y)
    np.save(name + '_y.npy', y.numpy().astype(np.float32)); np.save(name + '_present.npy', full[:, :, L:])
    ins = ['cc_in', name + '_w', name + '_b' if bias else '', name + '_past' if past else '']
    while not ins[-1]: ins.pop()
    inputs = [vi('cc_in', F32, [B, C, L])]
    if past:
        np.save(name + '_past.npy', st); inputs.append(vi(name + '_past', F32, [B, C, k - 1]))
    weights = [numpy_helper.from_array(w, name + '_w')] + ([numpy_helper.from_array(b, name + '_b')] if bias else [])
    g = helper.make_graph([helper.make_node('CausalConvWithState', ins, [name + '_y', name + '_present'], activation=act)],
                          name, inputs, [vi(name + '_y', F32, [B, C, L]), vi(name + '_present', F32, [B, C, k - 1])], weights)
    save_graph(g, name, 27, 13)
# A gated block: a causal convolution, a sigmoid gate, its running product along the sequence, a head.
w = (0.5 * rng.standard_normal((C, 1, 3))).astype(np.float32)
body = [helper.make_node('CausalConvWithState', ['x', 'w', 'b'], ['h'], activation='silu'),
        helper.make_node('Sigmoid', ['h'], ['gate']), helper.make_node('CumProd', ['gate', 'ax2'], ['decay']),
        helper.make_node('Mul', ['decay', 'x'], ['mixed']), helper.make_node('Flatten', ['mixed'], ['flat']),
        helper.make_node('MatMul', ['flat', 'wh'], ['logits'])]
g = helper.make_graph(body, 'gated27', [vi('x', F32, ['N', C, L])], [vi('logits', F32, ['N', 2])],
                      [numpy_helper.from_array(w, 'w'), numpy_helper.from_array(rng.standard_normal(C).astype(np.float32), 'b'),
                       numpy_helper.from_array(np.array(2, np.int64), 'ax2'),
                       numpy_helper.from_array((0.3 * rng.standard_normal((C * L, 2))).astype(np.float32), 'wh')])
save_graph(g, 'gated27', 27, 13)
for name, node, ins in [
        ('cp_unsized', helper.make_node('CumProd', ['u', 'ax1'], ['y'], name='running'), [vi('u', F32, [2, 'T'])]),
        ('cc_unsized', helper.make_node('CausalConvWithState', ['u', 'wt'], ['y'], name='conv_state'),
         [vi('u', F32, [2, 3, 4]), vi('wt', F32, ['C', 1, 'K'])])]:
    g = helper.make_graph([node], name, ins, [vi('y', F32, [2, 'T'])], [numpy_helper.from_array(np.array(1, np.int64), 'ax1')])
    save_graph(g, name, 27, 13)
)");
  EXPECT_EQ(expect_each_model({"cumprod26"}, 1e-6), 8);
  EXPECT_EQ(expect_each_model({"cc_plain", "cc_state", "cc_k1"}, 2e-6), 6);
  expect_trainable("gated27");
  expect_refused("cp_unsized", "node 'running' (CumProd): the length of x along the axis must be known when loading");
  expect_refused("cc_unsized",
                 "node 'conv_state' (CausalConvWithState): the weight's shape [channels, 1, k] must be known");
}

// DFT's inverse of a one-sided spectrum (irfft: torch.fft.irfft, an iSTFT vocoder's last step), which graphrun's
// DFT kernel does not compute, is the full inverse DFT of the spectrum made whole by its symmetry: against
// numpy's irfft for the default length 2 (m - 1), an odd dft_length that cuts the bins, a longer one that pads
// them, another axis, real bins, at opsets 17 and 20 (axis an input). A spectral filter (rfft, a learnt complex
// gain per bin, irfft) passes `check`.
TEST_F(OpsetLowering, InverseOfAOneSidedSpectrumMatchesNumpy) {
  run_script(R"(
F32, I64 = TensorProto.FLOAT, TensorProto.INT64
rng = np.random.default_rng(14)
spec = rng.standard_normal((2, 5, 3, 2)).astype(np.float32)
real_bins = rng.standard_normal((2, 3, 6, 1)).astype(np.float32)
np.save('spec.npy', spec); np.save('real_bins.npy', real_bins)
c = spec[..., 0].astype(np.float64) + 1j * spec[..., 1]
cases = [('ir_default', 'spec', None, 1, np.fft.irfft(c, axis=1)), ('ir_odd', 'spec', 7, 1, np.fft.irfft(c, 7, axis=1)),
         ('ir_long', 'spec', 12, 1, np.fft.irfft(c, 12, axis=1)), ('ir_axis2', 'spec', 5, 2, np.fft.irfft(c, 5, axis=2)),
         ('ir_real', 'real_bins', 9, 2, np.fft.irfft(real_bins[..., 0].astype(np.float64), 9, axis=2))]
for opset in (17, 20):
    for name, src, n, axis, want in cases:
        out = '%s_%d' % (name, opset)
        np.save(out + '.npy', want[..., None].astype(np.float32))
        inits = [numpy_helper.from_array(np.array(n, np.int64), 'n')] if n else []
        ins = [src, 'n' if n else '']
        attrs = dict(inverse=1, onesided=1)
        if opset == 20:
            inits.append(numpy_helper.from_array(np.array(axis, np.int64), 'ax')); ins.append('ax')
        else:
            attrs['axis'] = axis
        while not ins[-1]: ins.pop()
        g = helper.make_graph([helper.make_node('DFT', ins, [out], **attrs)], out,
                              [vi(src, F32, list(np.load(src + '.npy').shape))], [vi(out, F32, list(want.shape) + [1])], inits)
        save_graph(g, out, opset)
# A spectral filter: rfft along time, a learnt complex gain per bin, irfft back.
gain = rng.standard_normal((1, 5, 1, 2)).astype(np.float32)
body = [helper.make_node('DFT', ['x'], ['f'], axis=1, onesided=1),
        helper.make_node('Mul', ['f', 'gain_re'], ['fr']), helper.make_node('Mul', ['f', 'gain_rot'], ['fi']),
        helper.make_node('Slice', ['fi', 'one', 'two', 'last'], ['fi_im']), helper.make_node('Slice', ['fi', 'zero', 'one', 'last'], ['fi_re']),
        helper.make_node('Neg', ['fi_im'], ['neg_im']), helper.make_node('Concat', ['neg_im', 'fi_re'], ['rot'], axis=-1),
        helper.make_node('Add', ['fr', 'rot'], ['filtered']),
        helper.make_node('DFT', ['filtered', 'len8'], ['y'], axis=1, inverse=1, onesided=1)]
g = helper.make_graph(body, 'filter17', [vi('x', F32, ['N', 8, 3, 1])], [vi('y', F32, ['N', 8, 3, 1])],
                      [numpy_helper.from_array(gain[..., :1].repeat(2, -1), 'gain_re'),
                       numpy_helper.from_array(gain[..., 1:].repeat(2, -1), 'gain_rot'),
                       numpy_helper.from_array(np.array([0], np.int64), 'zero'), numpy_helper.from_array(np.array([1], np.int64), 'one'),
                       numpy_helper.from_array(np.array([2], np.int64), 'two'), numpy_helper.from_array(np.array([-1], np.int64), 'last'),
                       numpy_helper.from_array(np.array(8, np.int64), 'len8')])
save_graph(g, 'filter17', 17)
)");
  std::vector<std::string> models;
  for (const char* name : {"ir_default", "ir_odd", "ir_long", "ir_axis2", "ir_real"})
    for (const char* opset : {"17", "20"}) models.push_back(std::string(name) + "_" + opset);
  EXPECT_EQ(expect_each_model(models, 2e-6), 10);
  expect_trainable("filter17");
}

// Resize's antialias (18: torch's F.interpolate(antialias=True), torchvision's Resize), keep_aspect_ratio_policy
// (18) and half_pixel_symmetric (19), which opset 17's Resize cannot say, become MatMuls by each resized axis's
// weights (graph/resize_weights.h) for inputs of sizes stated when loading: against torch's antialiased bilinear and
// bicubic downsampling (ONNX's with exclude_outside, bicubic's A -0.5), and against a float64 numpy reference of ONNX's
// definition written here for the rest (the aspect-ratio policies in nearest and linear, the symmetric half-pixel
// mapping, cubic antialias with exclude_outside, axes, upsampling where antialias changes nothing). A CNN downsampling
// with antialias passes `check`; tf_crop_and_resize with antialias, and sizes not known when loading, are refused.
TEST_F(OpsetLowering, ResizeAntialiasAspectRatioAndSymmetricMatchTheReference) {
  run_script(R"(
import math, torch
F32, I64 = TensorProto.FLOAT, TensorProto.INT64
rng = np.random.default_rng(15)
x = rng.standard_normal((2, 3, 10, 9)).astype(np.float32)
np.save('rx.npy', x)
def cubic(v, A):
    v = abs(v)
    return ((A + 2) * v - (A + 3)) * v * v + 1 if v <= 1 else ((A * v - 5 * A) * v + 8 * A) * v - 4 * A if v < 2 else 0.0
def axis_matrix(n_in, n_out, scale, mode, ct, nearest='round_prefer_floor', A=-0.75, exclude=False, aa=False):
    # Output i as a weighted sum of inputs: ONNX's source coordinate, its filter taps (the n nearest, lower first
    # on ties), exclude_outside, taps beyond the edge reading the edge.
    W = np.zeros((n_out, n_in))
    for i in range(n_out):
        if ct == 'half_pixel': c = (i + 0.5) / scale - 0.5
        elif ct == 'asymmetric': c = i / scale
        elif ct == 'align_corners': c = 0.0 if scale * n_in == 1 else i * (n_in - 1) / (scale * n_in - 1)
        elif ct == 'half_pixel_symmetric': c = n_in / 2 * (1 - n_out / (scale * n_in)) + (i + 0.5) / scale - 0.5
        f = math.floor(c)
        t = 1.0 if c == f else c - f
        s = min(scale, 1.0)
        if mode == 'nearest':
            k = [0, 1] if t == 1 else {'round_prefer_floor': [t <= 0.5, t > 0.5], 'round_prefer_ceil': [t < 0.5, t >= 0.5],
                                        'floor': [1, 0], 'ceil': [0, 1]}[nearest]
        elif mode == 'linear' and not aa: k = [1 - t, t]
        elif mode == 'linear':
            lo = math.floor(-1 / s) + 1
            k = [max(0.0, 1 - abs((j - t) * s)) for j in range(lo, lo + 2 - 2 * lo)]
        elif not aa: k = [cubic(t + 1, A), cubic(t, A), cubic(1 - t, A), cubic(2 - t, A)]
        else:
            lo = math.floor(-2 / s) + 1
            k = [cubic(s * (j - t), A) for j in range(lo, 2 - lo)]
        k = np.array(k, np.float64)
        if aa: k /= k.sum()
        n = len(k)
        frac = c - f
        start = f - n // 2 + (0 if frac == 0 else 1) if n % 2 == 0 else f - (n - 1) // 2 + (0 if frac <= 0.5 else 1)
        idx = np.arange(start, start + n)
        if exclude:
            k = np.where((idx < 0) | (idx >= n_in), 0.0, k)
            if k.sum() != 0: k = k / k.sum()
        for j, w in zip(np.clip(idx, 0, n_in - 1), k): W[i, j] += w
    return W
def resize(v, sizes_hw, scales_hw, **kw):
    v = v.astype(np.float64)
    for axis, (o, sc) in zip((2, 3), zip(sizes_hw, scales_hw)):
        if abs(sc - 1) <= 1e-9 and o == v.shape[axis]: continue
        v = np.moveaxis(np.moveaxis(v, axis, -1) @ axis_matrix(v.shape[axis], o, sc, **kw).T, -1, axis)
    return v
def model(name, attrs, scales=None, sizes=None, axes=None, opset=19, want=None):
    ins = ['rx', '', name + '_scales' if scales is not None else '', name + '_sizes' if sizes is not None else '']
    while not ins[-1]: ins.pop()
    inits = []
    if scales is not None: inits.append(numpy_helper.from_array(np.array(scales, np.float32), name + '_scales'))
    if sizes is not None: inits.append(numpy_helper.from_array(np.array(sizes, np.int64), name + '_sizes'))
    if axes is not None: attrs = dict(attrs, axes=axes)
    np.save(name + '.npy', want.astype(np.float32))
    g = helper.make_graph([helper.make_node('Resize', ins, [name], **attrs)], name, [vi('rx', F32, list(x.shape))],
                          [vi(name, F32, list(want.shape))], inits)
    save_graph(g, name, opset)
T = lambda a: torch.tensor(a, dtype=torch.float64)
# Against torch: antialiased bilinear and bicubic downsampling, by sizes and by scales. torch's is ONNX's with
# exclude_outside (the filter cut at the edges and renormalised) and, bicubic, A = -0.5.
want = torch.nn.functional.interpolate(T(x), size=(4, 5), mode='bilinear', antialias=True, align_corners=False).numpy()
assert np.abs(want - resize(x, (4, 5), (0.4, 5 / 9), mode='linear', ct='half_pixel', aa=True, exclude=True)).max() < 1e-12
model('aa_bilinear', dict(mode='linear', antialias=1, exclude_outside=1), sizes=[2, 3, 4, 5], want=want)
want = torch.nn.functional.interpolate(T(x), size=(3, 6), mode='bicubic', antialias=True, align_corners=False).numpy()
assert np.abs(want - resize(x, (3, 6), (0.3, 6 / 9), mode='cubic', ct='half_pixel', A=-0.5, aa=True, exclude=True)).max() < 1e-12
model('aa_bicubic', dict(mode='cubic', antialias=1, cubic_coeff_a=-0.5, exclude_outside=1), sizes=[2, 3, 3, 6], want=want)
want = torch.nn.functional.interpolate(T(x), scale_factor=(0.5, 0.5), mode='bilinear', antialias=True,
                                       align_corners=False, recompute_scale_factor=False).numpy()
model('aa_scales', dict(mode='linear', antialias=1, exclude_outside=1), scales=[1, 1, 0.5, 0.5], want=want)
# Without exclude_outside, taps beyond the edge read the edge (ONNX's definition).
model('aa_edge', dict(mode='linear', antialias=1), sizes=[2, 3, 4, 5],
      want=resize(x, (4, 5), (0.4, 5 / 9), mode='linear', ct='half_pixel', aa=True))
# Against the reference above: the aspect-ratio policies, the symmetric mapping, exclude_outside, axes, upsampling.
model('keep_not_larger', dict(mode='linear', keep_aspect_ratio_policy='not_larger'), sizes=[7, 7], axes=[2, 3],
      want=resize(x, (7, 6), (0.7, 0.7), mode='linear', ct='half_pixel'), opset=18)
model('keep_not_smaller', dict(mode='nearest', keep_aspect_ratio_policy='not_smaller', nearest_mode='floor'), sizes=[7, 7],
      axes=[2, 3], want=resize(x, (8, 7), (7 / 9, 7 / 9), mode='nearest', ct='half_pixel', nearest='floor'), opset=18)
model('symmetric', dict(mode='linear', coordinate_transformation_mode='half_pixel_symmetric'), scales=[1, 1, 0.66, 1.44],
      want=resize(x, (6, 12), (np.float32(0.66), np.float32(1.44)), mode='linear', ct='half_pixel_symmetric'))
model('aa_cubic_excl', dict(mode='cubic', antialias=1, exclude_outside=1), sizes=[4], axes=[-1],
      want=resize(x, (10, 4), (1, 4 / 9), mode='cubic', ct='half_pixel', exclude=True, aa=True))
model('aa_up', dict(mode='linear', antialias=1, coordinate_transformation_mode='align_corners'), sizes=[2, 3, 13, 9],
      want=resize(x, (13, 9), (1.3, 1), mode='linear', ct='align_corners', aa=True))
# A CNN that downsamples with antialias (torchvision's Resize in the model), to train.
w = (0.3 * rng.standard_normal((4, 3, 3, 3))).astype(np.float32)
body = [helper.make_node('Resize', ['img', '', '', 'half_size'], ['small'], mode='linear', antialias=1),
        helper.make_node('Conv', ['small', 'w'], ['c'], pads=[1, 1, 1, 1]), helper.make_node('Relu', ['c'], ['h']),
        helper.make_node('GlobalAveragePool', ['h'], ['p']), helper.make_node('Flatten', ['p'], ['logits'])]
g = helper.make_graph(body, 'aa_cnn', [vi('img', F32, ['N', 3, 12, 10])], [vi('logits', F32, ['N', 4])],
                      [numpy_helper.from_array(w, 'w'), numpy_helper.from_array(np.array([5, 4], np.int64), 'half_size_hw'),
                       numpy_helper.from_array(np.array([2, 3, 5, 4], np.int64), 'half_size')])
# (the batch is symbolic: sizes of every axis name it, so the resize takes axes H and W)
g.node[0].CopyFrom(helper.make_node('Resize', ['img', '', '', 'half_size_hw'], ['small'], mode='linear', antialias=1, axes=[2, 3]))
save_graph(g, 'aa_cnn', 18)
for name, attrs, shape in [('aa_crop', dict(mode='linear', antialias=1, coordinate_transformation_mode='tf_crop_and_resize'), [2, 3, 10, 9]),
                           ('aa_unsized', dict(mode='linear', antialias=1, axes=[2, 3]), [2, 3, 'H', 'W'])]:
    g = helper.make_graph([helper.make_node('Resize', ['u', 'roi', '', 'sz'], ['y'], name='shrink', **attrs)], name,
                          [vi('u', F32, shape)], [vi('y', F32, [2, 3, 4, 5])],
                          [numpy_helper.from_array(np.array([0, 0, 1, 1], np.float32), 'roi'),
                           numpy_helper.from_array(np.array([4, 5] if 'axes' in attrs else [2, 3, 4, 5], np.int64), 'sz')])
    save_graph(g, name, 18)
)");
  EXPECT_EQ(expect_each_model({"aa_bilinear", "aa_bicubic", "aa_scales", "aa_edge", "keep_not_larger",
                               "keep_not_smaller", "symmetric", "aa_cubic_excl", "aa_up"},
                              2e-6),
            9);
  expect_trainable("aa_cnn");
  expect_refused("aa_crop",
                 "node 'shrink' (Resize): antialias, keep_aspect_ratio_policy or half_pixel_symmetric with "
                 "tf_crop_and_resize is not supported");
  expect_refused("aa_unsized",
                 "node 'shrink' (Resize): antialias, keep_aspect_ratio_policy or half_pixel_symmetric "
                 "needs X's sizes known when loading");
}

// ONNX Runtime's fused ops of its optimised transformer models (com.microsoft Gelu, FastGelu, BiasGelu, QuickGelu,
// BiasAdd, SkipLayerNormalization, SkipSimplifiedLayerNormalization; SimplifiedLayerNormalization, which it
// registers in the default domain) are written in standard ops on load: against torch in float64 at opsets 13
// (Cast-typed constants, LayerNormalization in reductions), 17 and 20 (its LayerNormalization node), the optional
// outputs (inverse standard deviation, the skip sum) included. An optimised BERT-style block of opset 13 passes
// `check`.
TEST_F(OpsetLowering, OnnxRuntimeFusedOpsMatchTorch) {
  run_script(R"(
import torch
F32 = TensorProto.FLOAT
rng = np.random.default_rng(16)
x, s = (rng.standard_normal((2, 3, 8)).astype(np.float32) for _ in range(2))
g, b, bias = (rng.standard_normal(8).astype(np.float32) for _ in range(3))
np.save('ox.npy', x); np.save('os.npy', s)
X, S, G, B, BI = (torch.tensor(v, dtype=torch.float64) for v in (x, s, g, b, bias))
F = torch.nn.functional
want = {'gelu': F.gelu(X), 'fast': F.gelu(X + BI, approximate='tanh'), 'biasgelu': F.gelu(X + BI),
        'quick': X * torch.sigmoid(1.5 * X), 'biasadd': X + BI + S, 'sln': F.layer_norm(X + S + BI, (8,), G, B, 1e-5),
        'istd': 1 / torch.sqrt((X + S + BI).var(-1, unbiased=False, keepdim=True) + 1e-5), 'ssum': X + S + BI,
        'ssln': (X + S) / torch.sqrt(((X + S) ** 2).mean(-1, keepdim=True) + 1e-12) * G,
        'rms': X / torch.sqrt((X ** 2).mean(-1, keepdim=True) + 1e-6) * G}
ms = dict(domain='com.microsoft')
nodes = [helper.make_node('Gelu', ['ox'], ['gelu'], **ms), helper.make_node('FastGelu', ['ox', 'bias'], ['fast'], **ms),
         helper.make_node('BiasGelu', ['ox', 'bias'], ['biasgelu'], **ms),
         helper.make_node('QuickGelu', ['ox'], ['quick'], alpha=1.5, **ms),
         helper.make_node('BiasAdd', ['ox', 'bias', 'os'], ['biasadd'], **ms),
         helper.make_node('SkipLayerNormalization', ['ox', 'os', 'g', 'b', 'bias'], ['sln', '', 'istd', 'ssum'], epsilon=1e-5, **ms),
         helper.make_node('SkipSimplifiedLayerNormalization', ['ox', 'os', 'g'], ['ssln'], **ms),
         helper.make_node('SimplifiedLayerNormalization', ['ox', 'g'], ['rms'], epsilon=1e-6)]
for opset in (13, 17, 20):
    outs = [vi(k + '_%d' % opset, F32, list(v.shape)) for k, v in want.items()]
    body = [helper.make_node(n.op_type, list(n.input), [o + '_%d' % opset if o else '' for o in n.output], domain=n.domain)
            for n in nodes]
    for new, old in zip(body, nodes): new.attribute.extend(old.attribute)
    for k, v in want.items(): np.save(k + '_%d.npy' % opset, v.numpy().astype(np.float32))
    gr = helper.make_graph(body, 'ort%d' % opset, [vi('ox', F32, [2, 3, 8]), vi('os', F32, [2, 3, 8])], outs,
                           [numpy_helper.from_array(v, k) for k, v in (('g', g), ('b', b), ('bias', bias))])
    m = helper.make_model(gr, opset_imports=[helper.make_opsetid('', opset), helper.make_opsetid('com.microsoft', 1)])
    onnx.save(m, 'ort%d.onnx' % opset)
# An optimised BERT-style block: attention left out, the residual joins and the feed-forward as ONNX Runtime fuses them.
D = 8
w = lambda *sh: (0.3 * rng.standard_normal(sh)).astype(np.float32)
body = [helper.make_node('MatMul', ['h', 'w1'], ['up']), helper.make_node('FastGelu', ['up', 'b1'], ['act'], **ms),
        helper.make_node('MatMul', ['act', 'w2'], ['down']),
        helper.make_node('SkipLayerNormalization', ['down', 'h', 'g', 'b', 'bias'], ['n1'], **ms),
        helper.make_node('BiasGelu', ['n1', 'bias'], ['n2'], **ms),
        helper.make_node('SkipSimplifiedLayerNormalization', ['n2', 'n1', 'g'], ['n3'], **ms),
        helper.make_node('ReduceMean', ['n3'], ['pooled'], axes=[1], keepdims=0), helper.make_node('MatMul', ['pooled', 'wh'], ['logits'])]
gr = helper.make_graph(body, 'bert13', [vi('h', F32, ['N', 3, D])], [vi('logits', F32, ['N', 2])],
                       [numpy_helper.from_array(v, k) for k, v in (('w1', w(D, 16)), ('b1', w(16)), ('w2', w(16, D)), ('g', g),
                                                                   ('b', b), ('bias', bias), ('wh', w(D, 2)))])
onnx.save(helper.make_model(gr, opset_imports=[helper.make_opsetid('', 13), helper.make_opsetid('com.microsoft', 1)]), 'bert13.onnx')
)");
  for (const char* opset : {"13", "17", "20"}) {
    SCOPED_TRACE(opset);
    runtime::Executor ex(load_onnx(dir_ + "/ort" + opset + ".onnx"));
    const auto got = ex.run({{"ox", read_npy(dir_ + "/ox.npy")}, {"os", read_npy(dir_ + "/os.npy")}});
    ASSERT_EQ(got.size(), 10u);
    for (const auto& [name, t] : got)
      EXPECT_LT(testing::max_abs_diff(t, read_npy(dir_ + "/" + name + ".npy")), 1e-6) << name;
  }
  expect_trainable("bert13");
}

// ONNX Runtime's BERT and GPT-2 fusions, com.microsoft Attention (merged QKV weights, a mask of any of its 2-D,
// 3-D, key-count or end-and-start forms hiding keys by mask_filter_value, unidirectional, a past and the present,
// attention_bias, qkv_hidden_sizes) and EmbedLayerNormalization (word, position and segment embeddings, their
// LayerNormalization, the mask index and the sum), are written in standard ops: against torch in float64 of ONNX
// Runtime's definitions at opsets 13 and 17. An optimised BERT encoder layer (embeddings, attention told the
// padding by the mask index, skip normalisations, FastGelu) passes `check`.
TEST_F(OpsetLowering, OnnxRuntimeAttentionAndEmbeddingMatchTorch) {
  run_script(R"(
import torch
F32, I32 = TensorProto.FLOAT, TensorProto.INT32
rng = np.random.default_rng(17)
B, S, Hin, N = 2, 4, 8, 2
T = lambda a: torch.tensor(a, dtype=torch.float64)
r = lambda *sh: rng.standard_normal(sh).astype(np.float32)
x, w, bias = r(B, S, Hin), r(Hin, 24), r(24)
np.save('ax.npy', x)
def attention(x, w, bias, sizes=(8, 8, 8), hidden=None, past=None, causal=False, attn_bias=None, filt=-10000.0):
    qkv = T(x) @ T(w) + T(bias)
    q, k, v = torch.split(qkv, list(sizes), -1)
    heads = lambda t: t.reshape(B, t.shape[1], N, -1).transpose(1, 2)
    q, k, v = heads(q), heads(k), heads(v)
    if past is not None: k, v = torch.cat([T(past[0]), k], 2), torch.cat([T(past[1]), v], 2)
    present = torch.stack([k, v]) if k.shape == v.shape else None
    s = q @ k.transpose(-1, -2) / np.sqrt(q.shape[-1])
    if attn_bias is not None: s = s + T(attn_bias)
    Tk, P = k.shape[2], k.shape[2] - q.shape[2]
    if hidden is not None: s = s + torch.where(torch.tensor(hidden), filt, 0.0)
    if causal: s = s + torch.where(torch.arange(Tk)[None, :] > torch.arange(q.shape[2])[:, None] + P, filt, 0.0)
    y = (torch.softmax(s, -1) @ v).transpose(1, 2).reshape(B, q.shape[2], -1)
    return y.numpy(), None if present is None else present.numpy()
cases = {}
raw = np.ones((B, S), np.int32); raw[1, 2:] = 0
cases['ma_raw'] = (dict(), raw, (raw == 0)[:, None, None, :], {})
raw3 = (rng.random((B, S, S)) < 0.7).astype(np.int32)
cases['ma_raw3'] = (dict(), raw3, (raw3 == 0)[:, None, :, :], {})
lens = np.array([3, 4], np.int32)
cases['ma_counts'] = (dict(unidirectional=1), lens, (np.arange(S)[None, :] >= lens[:, None])[:, None, None, :], dict(causal=True))
ends_starts = np.array([4, 3, 1, 0], np.int32)
cases['ma_left'] = (dict(mask_filter_value=-1000.0), ends_starts,
                    ((np.arange(S)[None, :] >= ends_starts[:2, None]) | (np.arange(S)[None, :] < ends_starts[2:, None]))[:, None, None, :],
                    dict(filt=-1000.0))
for opset in (13, 17):
    for name, (attrs, mask, hidden, kw) in cases.items():
        out = '%s_%d' % (name, opset)
        y, _ = attention(x, w, bias, hidden=hidden, **kw)
        np.save(out + '.npy', y.astype(np.float32))
        mvi = vi('m_' + name, I32, list(mask.shape))
        g = helper.make_graph([helper.make_node('Attention', ['ax', 'w', 'bias', 'm_' + name], [out], num_heads=N,
                                                domain='com.microsoft', **attrs)], out, [vi('ax', F32, [B, S, Hin])],
                              [vi(out, F32, [B, S, 8])], [numpy_helper.from_array(a, k) for k, a in
                                                         (('w', w), ('bias', bias), ('m_' + name, mask))])
        onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid('', opset), helper.make_opsetid('com.microsoft', 1)]),
                  out + '.onnx')
# A past (GPT-2's), unidirectional, the present; attention_bias; qkv_hidden_sizes with a narrower V.
past = r(2, B, N, 3, 4); ab = r(1, N, S, S + 3)
y, present = attention(x, w, bias, past=past, causal=True, attn_bias=ab)
np.save('ma_past.npy', y.astype(np.float32)); np.save('ma_present.npy', present.astype(np.float32))
g = helper.make_graph([helper.make_node('Attention', ['ax', 'w', 'bias', '', 'past', 'ab'], ['ma_past', 'ma_present'], num_heads=N,
                                        unidirectional=1, domain='com.microsoft')], 'ma_past', [vi('ax', F32, [B, S, Hin])],
                      [vi('ma_past', F32, [B, S, 8]), vi('ma_present', F32, [2, B, N, S + 3, 4])],
                      [numpy_helper.from_array(a, k) for k, a in (('w', w), ('bias', bias), ('past', past), ('ab', ab))])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid('', 17), helper.make_opsetid('com.microsoft', 1)]), 'ma_past.onnx')
w2, b2 = r(Hin, 20), r(20)
y, _ = attention(x, w2, b2, sizes=(8, 8, 4))
np.save('ma_sizes.npy', y.astype(np.float32))
g = helper.make_graph([helper.make_node('Attention', ['ax', 'w2', 'b2'], ['ma_sizes'], num_heads=N, qkv_hidden_sizes=[8, 8, 4],
                                        domain='com.microsoft')], 'ma_sizes', [vi('ax', F32, [B, S, Hin])], [vi('ma_sizes', F32, [B, S, 4])],
                      [numpy_helper.from_array(w2, 'w2'), numpy_helper.from_array(b2, 'b2')])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid('', 13), helper.make_opsetid('com.microsoft', 1)]), 'ma_sizes.onnx')
# EmbedLayerNormalization: word, position and segment embeddings, LayerNormalization, mask index, sum.
ids = rng.integers(0, 10, (B, S)).astype(np.int32); seg = rng.integers(0, 2, (B, S)).astype(np.int32)
emask = np.ones((B, S), np.int32); emask[0, 3:] = 0
np.save('eids.npy', ids); np.save('eseg.npy', seg); np.save('emask.npy', emask)
wt, pt, st, gm, bt = r(10, 8), r(6, 8), r(2, 8), r(8), r(8)
esum = T(wt)[torch.tensor(ids, dtype=torch.long)] + T(pt)[:S][None] + T(st)[torch.tensor(seg, dtype=torch.long)]
np.save('e_out.npy', torch.nn.functional.layer_norm(esum, (8,), T(gm), T(bt), 1e-12).numpy().astype(np.float32))
np.save('e_index.npy', emask.sum(1).astype(np.int32)); np.save('e_sum.npy', esum.numpy().astype(np.float32))
for opset in (13, 17):
    g = helper.make_graph([helper.make_node('EmbedLayerNormalization', ['eids', 'eseg', 'wt', 'pt', 'st', 'gm', 'bt', 'emask'],
                                            ['e_out', 'e_index', 'e_sum'], domain='com.microsoft')], 'embed',
                          [vi('eids', I32, [B, S]), vi('eseg', I32, [B, S]), vi('emask', I32, [B, S])],
                          [vi('e_out', F32, [B, S, 8]), vi('e_index', I32, [B]), vi('e_sum', F32, [B, S, 8])],
                          [numpy_helper.from_array(a, k) for k, a in (('wt', wt), ('pt', pt), ('st', st), ('gm', gm), ('bt', bt))])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid('', opset), helper.make_opsetid('com.microsoft', 1)]),
              'embed%d.onnx' % opset)
# An optimised BERT encoder layer to train.
ms = dict(domain='com.microsoft')
body = [helper.make_node('EmbedLayerNormalization', ['ids', 'segs', 'wt', 'pt', 'st', 'gm', 'bt', 'mask'], ['emb', 'mask_index'], **ms),
        helper.make_node('Attention', ['emb', 'w', 'bias', 'mask_index'], ['att'], num_heads=N, **ms),
        helper.make_node('SkipLayerNormalization', ['att', 'emb', 'gm', 'bt'], ['h1'], **ms),
        helper.make_node('MatMul', ['h1', 'up'], ['u']), helper.make_node('FastGelu', ['u', 'ub'], ['a'], **ms),
        helper.make_node('MatMul', ['a', 'down'], ['d']), helper.make_node('SkipLayerNormalization', ['d', 'h1', 'gm', 'bt'], ['h2'], **ms),
        helper.make_node('ReduceMean', ['h2'], ['pooled'], axes=[1], keepdims=0), helper.make_node('MatMul', ['pooled', 'cls'], ['logits'])]
g = helper.make_graph(body, 'bert_layer', [vi('ids', I32, ['N', S]), vi('segs', I32, ['N', S]), vi('mask', I32, ['N', S])],
                      [vi('logits', F32, ['N', 2])],
                      [numpy_helper.from_array(a, k) for k, a in (('wt', wt), ('pt', pt), ('st', st), ('gm', gm), ('bt', bt), ('w', 0.3 * w),
                                                                  ('bias', bias), ('up', 0.3 * r(8, 16)), ('ub', r(16)),
                                                                  ('down', 0.3 * r(16, 8)), ('cls', r(8, 2)))])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid('', 17), helper.make_opsetid('com.microsoft', 1)]), 'bert_layer.onnx')
)");
  EXPECT_EQ(expect_each_model({"ma_raw_13", "ma_raw3_13", "ma_counts_13", "ma_left_13", "ma_raw_17", "ma_raw3_17",
                               "ma_counts_17", "ma_left_17", "ma_past", "ma_sizes", "embed13", "embed17"},
                              1e-5),  // (outputs of about 5: float32's rounding)
            17);
  expect_trainable("bert_layer");
}

// RotaryEmbedding (opset 23) is written in opset-17 ops (Gather, Slice, Split, Mul, Concat): against a float64 numpy
// reference of ONNX's definition: 4-D X with position_ids, the halves rotated; 3-D X of num_heads heads, interleaved
// pairs, part of each head rotated; caches given per batch and position (no position_ids). Rotary queries and keys
// feeding an Attention node pass `check`.
TEST_F(OpsetLowering, RotaryEmbeddingOfOpset23MatchesTheReference) {
  run_script(R"(
F32, I64 = TensorProto.FLOAT, TensorProto.INT64
rng = np.random.default_rng(9)
def reference(x, cos, sin, pos=None, interleaved=0, dim=0, heads=0):
    x = x.astype(np.float64)
    shape = x.shape
    x = x.reshape(shape[0], shape[1], heads, -1) if x.ndim == 3 else x.transpose(0, 2, 1, 3)  # [B, S, H, D]
    dim = dim or x.shape[3]
    if pos is not None: cos, sin = cos[pos], sin[pos]
    cos, sin = cos[:, :, None, :].astype(np.float64), sin[:, :, None, :].astype(np.float64)
    rot = x[..., :dim]
    x1, x2 = (rot[..., 0::2], rot[..., 1::2]) if interleaved else (rot[..., :dim // 2], rot[..., dim // 2:])
    re, im = cos * x1 - sin * x2, sin * x1 + cos * x2
    rot = np.stack([re, im], -1).reshape(rot.shape) if interleaved else np.concatenate([re, im], -1)
    y = np.concatenate([rot, x[..., dim:]], -1)
    return y.reshape(shape) if len(shape) == 3 else y.transpose(0, 2, 1, 3)
def case(name, feeds, attrs):
    ins = ['x', 'cos', 'sin'] + (['pos'] if 'pos' in feeds else [])
    node = helper.make_node('RotaryEmbedding', [name + '_' + i for i in ins], [name + '_y'], **attrs)
    y = reference(feeds['x'], feeds['cos'], feeds['sin'], feeds.get('pos'), attrs.get('interleaved', 0),
                  attrs.get('rotary_embedding_dim', 0), attrs.get('num_heads', 0))
    inputs = []
    for k, v in feeds.items():
        np.save(name + '_' + k + '.npy', v)
        inputs.append(vi(name + '_' + k, I64 if v.dtype == np.int64 else F32, list(v.shape)))
    np.save(name + '_y.npy', y.astype(np.float32))
    g = helper.make_graph([node], name, inputs, [vi(name + '_y', F32, list(y.shape))])
    save_graph(g, name, 23, 11)
r = lambda *s: rng.standard_normal(s).astype(np.float32)
angles = lambda n, half: np.arange(n)[:, None] * (10000.0 ** (-np.arange(half) / half))[None, :]
a8 = angles(10, 4)
case('rope_halves', {'x': r(2, 3, 5, 8), 'cos': np.cos(a8).astype(np.float32), 'sin': np.sin(a8).astype(np.float32),
                     'pos': rng.integers(0, 10, (2, 5))}, {})
a6 = angles(12, 3)
case('rope_interleaved', {'x': r(2, 4, 3 * 10), 'cos': np.cos(a6).astype(np.float32), 'sin': np.sin(a6).astype(np.float32),
                          'pos': np.tile(np.arange(4), (2, 1)) + 5},
     {'interleaved': 1, 'rotary_embedding_dim': 6, 'num_heads': 3})
case('rope_per_batch', {'x': r(2, 2, 3, 6), 'cos': r(2, 3, 2), 'sin': r(2, 3, 2)}, {'rotary_embedding_dim': 4})
# Rotary queries and keys into causal attention, a classifier on top.
D, H = 8, 2
w = lambda *s: (0.3 * rng.standard_normal(s)).astype(np.float32)
a = angles(5, D // H // 2)
inits = {'wq': w(D, D), 'wk': w(D, D), 'wv': w(D, D), 'wh': w(D, 3), 'axes1': np.array([1], np.int64),
         'cos': np.cos(a).astype(np.float32), 'sin': np.sin(a).astype(np.float32), 'pos': np.arange(5)[None, :]}
body = [helper.make_node('MatMul', ['x', 'wq'], ['q']), helper.make_node('MatMul', ['x', 'wk'], ['k']),
        helper.make_node('MatMul', ['x', 'wv'], ['v']),
        helper.make_node('RotaryEmbedding', ['q', 'cos', 'sin', 'pos'], ['qr'], num_heads=H),
        helper.make_node('RotaryEmbedding', ['k', 'cos', 'sin', 'pos'], ['kr'], num_heads=H, interleaved=1),
        helper.make_node('Attention', ['qr', 'kr', 'v'], ['att'], q_num_heads=H, kv_num_heads=H, is_causal=1),
        helper.make_node('ReduceMean', ['att', 'axes1'], ['pooled'], keepdims=0),
        helper.make_node('MatMul', ['pooled', 'wh'], ['logits'])]
g = helper.make_graph(body, 'rope23', [vi('x', F32, ['N', 5, D])], [vi('logits', F32, ['N', 3])],
                      [numpy_helper.from_array(v, k) for k, v in inits.items()])
save_graph(g, 'rope23', 23, 11)
)");
  EXPECT_EQ(expect_each_model({"rope_halves", "rope_interleaved", "rope_per_batch"}, 2e-6), 3);
  expect_trainable("rope23");
}

// ScatterElements with reduction max or min (opset 18: torch's scatter_reduce amax/amin) is written in opset-17
// ops (TopK, GatherElements, ScatterElements, Max/Min): against torch.scatter_reduce(include_self=True) in float64,
// along axes 0, 1 and -1, with several updates meeting in one element; a message-passing layer that aggregates
// its neighbours by max passes `check` (float64 gradients). ScatterND's max/min stays refused.
TEST_F(OpsetLowering, ScatterMaxAndMinOfOpset18MatchTorch) {
  run_script(R"(
import torch
F32, I64 = TensorProto.FLOAT, TensorProto.INT64
rng = np.random.default_rng(10)
def case(name, shape, ushape, axis, reduction):
    data = rng.standard_normal(shape).astype(np.float32)
    upd = rng.standard_normal(ushape).astype(np.float32)
    idx = rng.integers(0, shape[axis], ushape)  # several updates meet in one element
    t = torch.scatter_reduce(torch.tensor(data, dtype=torch.float64), axis, torch.tensor(idx),
                             torch.tensor(upd, dtype=torch.float64), 'amax' if reduction == 'max' else 'amin')
    for k, v in (('data', data), ('idx', idx), ('upd', upd), ('y', t.numpy().astype(np.float32))):
        np.save(name + '_' + k + '.npy', v)
    node = helper.make_node('ScatterElements', [name + '_data', name + '_idx', name + '_upd'], [name + '_y'], axis=axis,
                            reduction=reduction)
    g = helper.make_graph([node], name, [vi(name + '_data', F32, list(shape)), vi(name + '_idx', I64, list(ushape)),
                                         vi(name + '_upd', F32, list(ushape))], [vi(name + '_y', F32, list(shape))])
    save_graph(g, name, 18)
case('smax0', (4, 3), (9, 3), 0, 'max')
case('smin1', (2, 5, 3), (2, 7, 3), 1, 'min')
case('smax_last', (3, 2, 4), (2, 2, 6), -1, 'max')
# Message passing: h = x W; each edge's message h[src]; each node the max of itself and its messages; a head.
N, Fd = 6, 4
src = np.array([0, 1, 2, 3, 4, 5, 0, 2, 1]); dst = np.array([1, 2, 3, 4, 5, 0, 3, 1, 1])
inits = {'w': (0.5 * rng.standard_normal((Fd, Fd))).astype(np.float32), 'src': src,
         'dst': np.repeat(dst[:, None], Fd, 1), 'wo': (0.5 * rng.standard_normal((Fd, 2))).astype(np.float32)}
body = [helper.make_node('MatMul', ['x', 'w'], ['h']), helper.make_node('Gather', ['h', 'src'], ['msg']),
        helper.make_node('ScatterElements', ['h', 'dst', 'msg'], ['agg'], reduction='max'),
        helper.make_node('MatMul', ['agg', 'wo'], ['logits'])]
g = helper.make_graph(body, 'gnn18', [vi('x', F32, [N, Fd])], [vi('logits', F32, [N, 2])],
                      [numpy_helper.from_array(v, k) for k, v in inits.items()])
save_graph(g, 'gnn18', 18)
g = helper.make_graph([helper.make_node('ScatterND', ['x', 'i', 'x'], ['r'], name='nd_max', reduction='max')], 'nd',
                      [vi('x', F32, [2])], [vi('r', F32, [2])], [numpy_helper.from_array(np.array([[0], [1]]), 'i')])
save_graph(g, 'nd_max', 18)
)");
  EXPECT_EQ(expect_each_model({"smax0", "smin1", "smax_last"}, 1e-7), 3);
  expect_trainable("gnn18");
  expect_refused("nd_max", "node 'nd_max' (ScatterND): reduction 'max' is not supported (ScatterElements' is)");
}

// Under `graphrun run`, a node whose opset-17 form needs a constant that a small input gives (ONNX's node tests feed
// ReduceMean-18 its axes) is rewritten with the values given, saying so; loading it for anything else refuses it.
TEST_F(OpsetLowering, RunWritesANewerNodeWithTheValuesItIsGiven) {
  run_script(R"(
g = helper.make_graph([helper.make_node('ReduceMean', ['x', 'axes'], ['y'], name='mean', keepdims=0)], 'g',
                      [vi('x', TensorProto.FLOAT, [2, 3, 4]), vi('axes', TensorProto.INT64, [1])],
                      [vi('y', TensorProto.FLOAT, ['a', 'b'])])
save_graph(g, 'mean18', 18)
np.save('axes.npy', np.array([1], np.int64)); np.save('mean.npy', np.load('x.npy').mean(1))
)");
  const std::string model = dir_ + "/mean18.onnx";
  auto r = run_command(testing::graphrun_cli() + " run " + model + " --input x=" + dir_ +
                       "/x.npy --input axes=" + dir_ + "/axes.npy --output-dir " + dir_ + "/out 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("nodes of a newer opset written in opset 17 by the values of 'axes' for this run"),
            std::string::npos)
      << r.output;
  EXPECT_LE(testing::max_abs_diff(read_npy(dir_ + "/out/y.npy"), read_npy(dir_ + "/mean.npy")), 1e-6);
  expect_refused("mean18", "node 'mean' (ReduceMean): its axes are computed at run time");
}

// Split-18 into parts that do not divide the axis (the last smaller: from the stated size, or computed at run time
// where the shape is symbolic) and ReduceMax/ReduceMin of bool (opset 20), against numpy.
TEST_F(OpsetLowering, UnevenSplitAndBoolReductionsMatchNumpy) {
  run_script(R"(
F, B = TensorProto.FLOAT, TensorProto.BOOL
v = np.arange(2 * 7, dtype=np.float32).reshape(2, 7)
m = np.random.default_rng(11).random((3, 4)) < 0.5; m[0] = False; m[1] = True
for k, a in (('v', v), ('m', m)): np.save('uneven_' + k + '.npy', a)
outs = {'s0': v[:, :3], 's1': v[:, 3:6], 's2': v[:, 6:], 'd0': v[:, :3], 'd1': v[:, 3:6], 'd2': v[:, 6:],
        'any': m.any(1), 'all': m.all(1)}
for k, a in outs.items(): np.save('uneven_' + k + '.npy', a)
nodes = [helper.make_node('Split', ['uneven_v'], ['uneven_s0', 'uneven_s1', 'uneven_s2'], axis=1, num_outputs=3),
         helper.make_node('Identity', ['uneven_v'], ['vv']),
         helper.make_node('Split', ['vv'], ['uneven_d0', 'uneven_d1', 'uneven_d2'], axis=-1, num_outputs=3),
         helper.make_node('ReduceMax', ['uneven_m', 'ax1'], ['uneven_any'], keepdims=0),
         helper.make_node('ReduceMin', ['uneven_m', 'ax1'], ['uneven_all'], keepdims=0)]
g = helper.make_graph(nodes, 'uneven', [vi('uneven_v', F, [2, 7]), vi('uneven_m', B, [3, 4])],
                      [vi('uneven_' + k, B if k in ('any', 'all') else F, list(a.shape)) for k, a in outs.items()],
                      [numpy_helper.from_array(np.array([1], np.int64), 'ax1')],
                      value_info=[vi('vv', F, ['a', 'b'])])
save_graph(g, 'uneven', 20, 9)
)");
  EXPECT_EQ(expect_each_model({"uneven"}, 1e-9), 8);
}

// Resize-18's axes (scales or sizes for some axes only, in their order) become scales and sizes of every axis, the
// others' scale 1 and size their own (ScatterElements into the defaults, so sizes computed at run time serve too):
// nearest up-sampling by 2 against numpy's repeat, by sizes for axes [3, 2] and by a scale for the last axis alone.
TEST_F(OpsetLowering, ResizeAxesOfOpset18MatchNumpy) {
  run_script(R"(
F = TensorProto.FLOAT
x = np.arange(6, dtype=np.float32).reshape(1, 1, 2, 3)
np.save('rx.npy', x); np.save('up_both.npy', x.repeat(2, 2).repeat(2, 3)); np.save('up_last.npy', x.repeat(2, 3))
nodes = [helper.make_node('Resize', ['rx', '', '', 'hw'], ['up_both'], mode='nearest', axes=[3, 2]),
         helper.make_node('Resize', ['rx', '', 'two'], ['up_last'], mode='nearest', axes=[-1])]
g = helper.make_graph(nodes, 'axes18', [vi('rx', F, [1, 1, 2, 3])], [vi('up_both', F, [1, 1, 4, 6]), vi('up_last', F, [1, 1, 2, 6])],
                      [numpy_helper.from_array(np.array([6, 4], np.int64), 'hw'), numpy_helper.from_array(np.array([2], np.float32), 'two')])
save_graph(g, 'axes18', 18)
)");
  EXPECT_EQ(expect_each_model({"axes18"}, 1e-9), 2);
}

// LpNormalization, LpPool and GlobalLpPool, which graphrun has no kernels for, are written in ops it has (at any
// opset): against numpy (a zero vector normalised to 0, as ONNX's reference; p 1, 2 and 3; pads and strides); a
// model of all three passes `check`.
TEST_F(OpsetLowering, LpOpsAreWrittenInOpsGraphrunHas) {
  run_script(R"(
F = TensorProto.FLOAT
rng = np.random.default_rng(12)
v = rng.standard_normal((3, 4)).astype(np.float32); v[1] = 0
im = rng.standard_normal((2, 3, 5, 6)).astype(np.float32)
np.save('lp_v.npy', v); np.save('lp_im.npy', im)
vd, imd = v.astype(np.float64), im.astype(np.float64)
with np.errstate(invalid='ignore'):
    l2 = np.nan_to_num(vd / np.sqrt((vd ** 2).sum(1, keepdims=True)))
    l1 = np.nan_to_num(vd / np.abs(vd).sum(0, keepdims=True))
pad = np.pad(np.abs(imd) ** 3, ((0, 0), (0, 0), (1, 1), (0, 1)))
pool = np.zeros((2, 3, 3, 3))
for i in range(3):
    for j in range(3):
        pool[:, :, i, j] = pad[:, :, 2 * i:2 * i + 2, 2 * j:2 * j + 3].sum((2, 3))
outs = {'lp_l2': l2, 'lp_l1': l1, 'lp_g2': np.sqrt((imd ** 2).sum((2, 3), keepdims=True)),
        'lp_g3': ((np.abs(imd) ** 3).sum((2, 3), keepdims=True)) ** (1 / 3), 'lp_pool': pool ** (1 / 3)}
for k, a in outs.items(): np.save(k + '.npy', a.astype(np.float32))
nodes = [helper.make_node('LpNormalization', ['lp_v'], ['lp_l2'], axis=1),
         helper.make_node('LpNormalization', ['lp_v'], ['lp_l1'], axis=0, p=1),
         helper.make_node('GlobalLpPool', ['lp_im'], ['lp_g2']), helper.make_node('GlobalLpPool', ['lp_im'], ['lp_g3'], p=3),
         helper.make_node('LpPool', ['lp_im'], ['lp_pool'], p=3, kernel_shape=[2, 3], strides=[2, 2], pads=[1, 0, 1, 1])]
g = helper.make_graph(nodes, 'lp', [vi('lp_v', F, [3, 4]), vi('lp_im', F, [2, 3, 5, 6])],
                      [vi(k, F, list(a.shape)) for k, a in outs.items()])
save_graph(g, 'lp', 13)
# A model of all three, to train: LpPool, GlobalLpPool, Flatten, LpNormalization, Gemm.
w = (0.5 * rng.standard_normal((3, 3))).astype(np.float32)
nodes = [helper.make_node('LpPool', ['x'], ['p'], kernel_shape=[2, 2], p=2),
         helper.make_node('GlobalLpPool', ['p'], ['gp'], p=3), helper.make_node('Flatten', ['gp'], ['f']),
         helper.make_node('LpNormalization', ['f'], ['n'], axis=1), helper.make_node('MatMul', ['n', 'w'], ['logits'])]
g = helper.make_graph(nodes, 'lp_train', [vi('x', F, ['N', 3, 5, 5])], [vi('logits', F, ['N', 3])],
                      [numpy_helper.from_array(w, 'w')])
save_graph(g, 'lp_train', 13)
)");
  EXPECT_EQ(expect_each_model({"lp"}, 2e-5), 5);
  expect_trainable("lp_train");
}

TEST_F(OpsetLowering, WhatOpset17CannotSayIsRefusedNamingTheNode) {
  expect_refused("runtime_axes", "node 'mean_of_input' (ReduceMean): its axes are computed at run time");
  expect_refused("antialias", "node 'smooth' (Resize): antialias applies to linear and cubic modes, not nearest");
  expect_refused("pad_axes",
                 "node 'pad_last' (Pad): pads for some axes only (the axes input) need constant axes and the input's "
                 "rank stated");
  expect_refused("split_count", "node 'halves' (Split): num_outputs 3 with 2 outputs");
  expect_refused("col2im", "node 'fold' (Col2Im): image_shape and block_shape must be constants");
  expect_refused("huge_fold", "node 'big_fold' (Col2Im): blocks of more than 4096 values are not supported");
  expect_refused("far_fold",
                 "node 'far' (Col2Im): image_shape, block_shape, dilations, strides and pads must be at most 2^30");
  expect_refused("wide_wrap", "node 'ring' (Pad): mode 'wrap' needs pads no larger than the axis");
  expect_refused("bitwise", "node 'mask' (BitwiseAnd): op BitwiseAnd is newer than opset 17");
  expect_refused("gelu_kind", "node 'act' (Gelu): approximate 'erf' is not 'none' or 'tanh'");
  expect_refused("ir14", "IR version 14 is newer than graphrun reads (up to 13)");
  // Shapes unstated: one head count makes it 3-D, which needs both.
  expect_refused("attn_unranked", "node 'sdpa' (Attention): 3-D Q, K and V need q_num_heads and kv_num_heads");
  expect_refused("attn_no_heads", "node 'sdpa3' (Attention): 3-D Q, K and V need q_num_heads and kv_num_heads");
  expect_refused("attn_qk_mode", "node 'sdpa_qk' (Attention): qk_matmul_output_mode 5 is not 0, 1, 2 or 3");
  expect_refused("rotary23", "node 'rope' (RotaryEmbedding): a 3-D X needs num_heads, at least 1");
}

}  // namespace
}  // namespace graphrun

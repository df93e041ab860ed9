// ai.onnx.preview.training's Gradient op (autodiff/gradient_op.cc): expanded on load into graphrun's gradient
// nodes, so `graphrun run` computes it. Checked against closed forms in float64, written by numpy: at the values
// themselves (forward nodes reused), at other values (the subgraph copied), with zs, with a y that is not a scalar
// (its sum), second order (a Gradient of a Gradient's output), and one-line errors for what the spec forbids; and
// training through it (a physics-informed network, gradient penalties; through an eval-mode BatchNormalization as
// PyTorch's train mode computes it).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>
#include <string>

#include "graph/onnx_io.h"
#include "graph/tensor_io.h"
#include "runtime/executor.h"
#include "tests/data_test_util.h"
#include "tests/test_util.h"

namespace graphrun {
namespace {

using testing::run_command;
using testing::run_onnx_python;
using testing::temp_dir;

// Builds the models and the expected values (numpy, float64) in `dir`.
void make_models(const std::string& dir) {
  run_onnx_python(dir, R"(
D = TensorProto.DOUBLE
vi = lambda name, shape, t=D: helper.make_tensor_value_info(name, t, shape)
training = helper.make_opsetid('ai.onnx.preview.training', 1)
grad = lambda inputs, outputs, name, **kw: helper.make_node('Gradient', inputs, outputs, name=name,
                                                             domain='ai.onnx.preview.training', **kw)
rng = np.random.default_rng(7)
x = rng.standard_normal((3, 4)); W = rng.standard_normal((4, 2)) * 0.5; W2 = rng.standard_normal((2, 5)); H1 = rng.standard_normal((3, 2))
np.save('x.npy', x); np.save('H1.npy', H1)

# y = sum(tanh(x W)^2); Z = tanh(x W) (not a scalar: its sum); u = sum(sigmoid(H W2)), H = Z.
nodes = [
    helper.make_node('MatMul', ['x', 'W'], ['P']), helper.make_node('Tanh', ['P'], ['Z']),
    helper.make_node('Mul', ['Z', 'Z'], ['Z2']), helper.make_node('ReduceSum', ['Z2'], ['y'], keepdims=0),
    helper.make_node('MatMul', ['Z', 'W2'], ['Q']), helper.make_node('Sigmoid', ['Q'], ['S']),
    helper.make_node('ReduceSum', ['S'], ['u'], keepdims=0),
    grad(['x', 'W'], ['dy_dx', 'dy_dW'], 'at_values', xs=['x', 'W'], y='y'),
    grad(['W', 'x'], ['dZ_dW'], 'of_a_tensor', xs=['W'], zs=['x'], y='Z'),
    grad(['Z', 'W2'], ['du_dH'], 'cut_at_Z', xs=['Z'], zs=['W2'], y='u'),
    grad(['H1', 'W2'], ['du_dH_at_H1', 'du_dW2_at_H1'], 'at_H1', xs=['Z', 'W2'], y='u'),
    # Z independent of W here (the spec's minimal set is the caller's to keep): u reaches W only through Z, so zeros.
    grad(['Z', 'W'], ['du_dZ', 'du_dW'], 'cut_above_W', xs=['Z', 'W'], y='u'),
    # A node reading what a Gradient at other values computes (the expansion keeps it after the gradient nodes).
    helper.make_node('Neg', ['du_dW2_at_H1'], ['neg_du_dW2_at_H1']),
]
g = helper.make_graph(nodes, 'gradients', [vi('x', [3, 4]), vi('H1', [3, 2])],
                      [vi('y', []), vi('u', []), vi('dy_dx', [3, 4]), vi('dy_dW', [4, 2]), vi('dZ_dW', [4, 2]),
                       vi('du_dH', [3, 2]), vi('du_dH_at_H1', [3, 2]), vi('du_dW2_at_H1', [2, 5]),
                       vi('du_dZ', [3, 2]), vi('du_dW', [4, 2]), vi('neg_du_dW2_at_H1', [2, 5])],
                      [numpy_helper.from_array(W, 'W'), numpy_helper.from_array(W2, 'W2')])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid('', 12), training]), 'first.onnx')
Z = np.tanh(x @ W)
dP = 2 * Z * (1 - Z * Z)
np.save('dy_dx.npy', dP @ W.T); np.save('dy_dW.npy', x.T @ dP)
np.save('dZ_dW.npy', x.T @ (1 - Z * Z))
sig = lambda v: 1 / (1 + np.exp(-v))
def du(H):
    s = sig(H @ W2); dQ = s * (1 - s)
    return dQ @ W2.T, H.T @ dQ
np.save('du_dH.npy', du(Z)[0]); np.save('du_dZ.npy', du(Z)[0]); np.save('du_dW.npy', np.zeros((4, 2))); np.save('du_dH_at_H1.npy', du(H1)[0]); np.save('du_dW2_at_H1.npy', du(H1)[1])
np.save('neg_du_dW2_at_H1.npy', -du(H1)[1])

# Second order: y = sum(w^3), dw = 3 w^2, then the gradient of sum(dw): 6 w.
w = rng.standard_normal(5)
np.save('w.npy', w); np.save('dw.npy', 3 * w * w); np.save('ddw.npy', 6 * w)
nodes = [helper.make_node('Mul', ['w', 'w'], ['w2']), helper.make_node('Mul', ['w2', 'w'], ['w3']),
         helper.make_node('ReduceSum', ['w3'], ['c'], keepdims=0),
         # The second first in the file: it is expanded after the one its y needs.
         grad(['w'], ['ddw'], 'second', xs=['w'], y='dw'), grad(['w'], ['dw'], 'first', xs=['w'], y='c')]
g = helper.make_graph(nodes, 'second', [vi('w', [5])], [vi('dw', [5]), vi('ddw', [5])])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid('', 12), training]), 'second.onnx')

# What the spec forbids, each refused in one line naming the node.
def bad(name, node, inputs):
    g = helper.make_graph([helper.make_node('Mul', ['a', 'a'], ['b']), helper.make_node('Cast', ['a'], ['n'], to=TensorProto.INT64), node],
                          'bad', inputs, [vi('g', [2])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid('', 12), training]), name + '.onnx')
bad('count', grad(['a', 'a'], ['g'], 'two_inputs', xs=['a'], y='b'), [vi('a', [2])])
bad('integer', grad(['n'], ['g'], 'of_ints', xs=['n'], y='b'), [vi('a', [2])])
bad('unknown', grad(['a'], ['g'], 'no_such_y', xs=['a'], y='nowhere'), [vi('a', [2])])
np.save('a.npy', np.ones(2))
)");
}

Tensor npy(const std::string& dir, const std::string& name) { return read_npy(dir + "/" + name + ".npy"); }

TEST(GradientOp, MatchesClosedFormsAtTheValuesAndAtOthers) {
  const std::string dir = temp_dir("gradient_op");
  make_models(dir);
  const Graph g = load_onnx(dir + "/first.onnx");
  for (const Node& n : g.nodes) EXPECT_NE(n.op_type, "Gradient") << n.describe();
  auto out = runtime::Executor(g).run({{"x", npy(dir, "x")}, {"H1", npy(dir, "H1")}});
  for (const char* name :
       {"dy_dx", "dy_dW", "dZ_dW", "du_dH", "du_dH_at_H1", "du_dW2_at_H1", "du_dZ", "du_dW", "neg_du_dW2_at_H1"}) {
    SCOPED_TRACE(name);
    EXPECT_LT(testing::max_abs_diff(out.at(name), npy(dir, name)), 1e-12);
  }
  // The gradient at the values themselves reuses the forward nodes: one Tanh, one Sigmoid computed for the values;
  // the gradient at H1 copies the Sigmoid's subgraph (a second MatMul and Sigmoid), not the Tanh's.
  int tanh = 0, sigmoid = 0;
  for (const Node& n : g.nodes) {
    tanh += n.op_type == "Tanh";
    sigmoid += n.op_type == "Sigmoid";
  }
  EXPECT_EQ(tanh, 1);
  EXPECT_EQ(sigmoid, 2);
}

TEST(GradientOp, SecondOrderDifferentiatesTheFirstGradientsNodes) {
  const std::string dir = temp_dir("gradient_op_second");
  make_models(dir);
  const Graph g = load_onnx(dir + "/second.onnx");
  auto out = runtime::Executor(g).run({{"w", npy(dir, "w")}});
  EXPECT_LT(testing::max_abs_diff(out.at("dw"), npy(dir, "dw")), 1e-12);
  EXPECT_LT(testing::max_abs_diff(out.at("ddw"), npy(dir, "ddw")), 1e-12);
  // graphrun run prints them.
  auto r = run_command(testing::graphrun_cli() + " run " + dir + "/second.onnx --input w=" + dir + "/w.npy 2>&1");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("ddw: f64[5]"), std::string::npos) << r.output;
}

TEST(GradientOp, WhatTheSpecForbidsIsOneLineNamingTheNode) {
  const std::string dir = temp_dir("gradient_op_bad");
  make_models(dir);
  const std::pair<const char*, const char*> cases[] = {
      {"count",
       "node 'two_inputs' (ai.onnx.preview.training.Gradient): has 2 inputs; xs and zs name 1 value, one input each"},
      {"integer",
       "node 'of_ints' (ai.onnx.preview.training.Gradient): xs names 'n' of type i64; only float tensors have "
       "gradients"},
      {"unknown", "node 'no_such_y' (ai.onnx.preview.training.Gradient): y names 'nowhere', which the graph lacks"},
  };
  for (const auto& [name, want] : cases) {
    SCOPED_TRACE(name);
    auto r =
        run_command(testing::graphrun_cli() + " run " + dir + "/" + name + ".onnx --input a=" + dir + "/a.npy 2>&1");
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find(want), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(name + std::string(".onnx: ")), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find('\n'), r.output.size() - 1) << r.output;
  }
  // Each Gradient of the one before's output (the fuzz corpus's chain of 24): nodes would grow as 3^k; refused in one
  // line before the expansion that would pass the limit is built.
  auto r = run_command(testing::graphrun_cli() + " show " + testing::source_dir() +
                       "/tests/fuzz/corpus/onnx/bad_gradient_chain.onnx 2>&1");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("(ai.onnx.preview.training.Gradient): expanding the Gradient nodes up to it adds about"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("past graphrun's limit of 32768"), std::string::npos) << r.output;
}

// A physics-informed network (tests/pinn_model.py): u = MLP(x) with the ODE's residuals u' - cos x and u'' + u in the
// model, through two Gradient nodes (u'' a Gradient of the first one's output), whose only solution is sin x. `check`
// verifies the backward graph through them (d/dW of du/dx: the rules' own nodes differentiated) numerically, and
// `train` (MSE of the residuals against 0, Adam, two replicas) fits sin x, which the untrained net is far from.
TEST(GradientOp, APhysicsInformedNetTrainsThroughSecondDerivatives) {
  const std::string dir = temp_dir("gradient_op_pinn");
  auto made = run_command(testing::python() + " " + testing::source_dir() + "/tests/pinn_model.py " + dir + " 2>&1");
  ASSERT_EQ(made.exit_code, 0) << made.output;
  const std::string cli = testing::graphrun_cli();
  auto r = run_command(cli + " check " + dir + "/pinn.onnx 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("verdict: trainable"), std::string::npos) << r.output;
  const Tensor sin = read_npy(dir + "/sin.npy");
  auto u_of = [&](const std::string& model) {
    auto run = run_command(cli + " run " + model + " --input x=" + dir + "/xt.npy --output-dir " + dir + "/out 2>&1");
    EXPECT_EQ(run.exit_code, 0) << run.output;
    return read_npy(dir + "/out/u.npy");
  };
  EXPECT_GT(testing::max_abs_diff(u_of(dir + "/pinn.onnx"), sin), 0.3);
  r = run_command(cli + " train " + dir + "/pinn.onnx --data " + dir + "/train.npz --test-data " + dir +
                  "/test.npz --loss mse --loss-output residual --optimizer adam --lr 0.01 --epochs 20 --batch-size 64 "
                  "--devices cpu:2 --save " +
                  dir + "/trained.onnx 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_LT(testing::max_abs_diff(u_of(dir + "/trained.onnx"), sin), 0.05) << r.output;
}

// A gradient penalty through a convolution (WGAN-GP's, R1's: the squared norm of a critic's gradient w.r.t. its input,
// added to its output): training differentiates ConvGrad, whose own rule `check` verifies numerically, and through
// pooling the pooling gradients (MaxPoolGrad from the MaxPool's Indices, AveragePoolGrad), through BatchNormalization
// in training mode, InstanceNormalization and LayerNormalization their gradients, through ConvTranspose
// ConvTransposeGrad, at a symbolic batch. Through a gradient op without a rule (DetGrad) `check` names it.
TEST(GradientOp, AGradientPenaltyThroughAConvolutionChecks) {
  const std::string dir = temp_dir("gradient_op_penalty");
  run_onnx_python(dir, R"(
F = TensorProto.FLOAT
def critic(middle):
    body = [helper.make_node('Conv', ['x', 'w'], ['c'], pads=[1, 1, 1, 1]), helper.make_node('Tanh', ['c'], ['r'])]
    out = 'r'
    if middle == 'pool':
        body += [helper.make_node('MaxPool', ['r'], ['p'], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
                 helper.make_node('Relu', ['p'], ['q']),
                 helper.make_node('AveragePool', ['q'], ['a'], kernel_shape=[2, 2], strides=[1, 1])]
        out = 'a'
    if middle == 'norm':
        body += [helper.make_node('InstanceNormalization', ['r', 'scale', 'bias'], ['n'])]
        out = 'n'
    if middle == 'tconv':
        body += [helper.make_node('ConvTranspose', ['r', 'wt'], ['n'], strides=[2, 2], output_padding=[1, 1])]
        out = 'n'
    if middle == 'det':  # the determinants of the 6x6 images, [N, 3] -> [N, 3, 1, 1]
        body += [helper.make_node('Det', ['r'], ['dt']), helper.make_node('Unsqueeze', ['dt'], ['n'], axes=[2, 3])]
        out = 'n'
    if middle == 'bn':  # BatchNormalization in training mode (batch statistics in the penalty's gradient too)
        body += [helper.make_node('BatchNormalization', ['r', 'scale', 'bias', 'rmean', 'rvar'], ['n'], training_mode=1),
                 helper.make_node('Relu', ['n'], ['nr'])]
        out = 'nr'
    if middle == 'ln':  # LayerNormalization over the channels and the image, as a transformer block's
        body += [helper.make_node('LayerNormalization', ['r', 'lscale', 'lbias'], ['n'], axis=1)]
        out = 'n'
    opset = {'ln': 17, 'bn': 15}.get(middle, 12)
    axes = {'axes': [1, 2, 3]} if opset < 13 else {}
    sum_in = ['g2'] if opset < 13 else ['g2', 'axes']
    body += [helper.make_node('ReduceMean', [out], ['s'], axes=[1, 2, 3], keepdims=0),
             helper.make_node('Gradient', ['x'], ['gx'], domain='ai.onnx.preview.training', xs=['x'], y='s', name='penalty'),
             helper.make_node('Mul', ['gx', 'gx'], ['g2']), helper.make_node('ReduceSum', sum_in, ['pen'], keepdims=0, **axes),
             helper.make_node('Add', ['pen', 's'], ['out'])]
    inits = [numpy_helper.from_array(np.random.default_rng(1).standard_normal((3, 2, 3, 3)).astype(np.float32), 'w'),
             numpy_helper.from_array(np.full(3, 1.5, np.float32), 'scale'), numpy_helper.from_array(np.zeros(3, np.float32), 'bias'),
             numpy_helper.from_array(np.zeros(3, np.float32), 'rmean'), numpy_helper.from_array(np.ones(3, np.float32), 'rvar'),
             numpy_helper.from_array(np.random.default_rng(2).uniform(0.5, 1.5, (3, 6, 6)).astype(np.float32), 'lscale'),
             numpy_helper.from_array(np.zeros((3, 6, 6), np.float32), 'lbias'),
             numpy_helper.from_array(np.array([1, 2, 3], np.int64), 'axes'),
             numpy_helper.from_array(np.random.default_rng(3).standard_normal((3, 2, 3, 3)).astype(np.float32), 'wt')]
    g = helper.make_graph(body, 'critic', [helper.make_tensor_value_info('x', F, ['N', 2, 6, 6])],
                          [helper.make_tensor_value_info('out', F, ['N'])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid('', opset), helper.make_opsetid('ai.onnx.preview.training', 1)])
onnx.save(critic(None), 'critic.onnx')
onnx.save(critic('pool'), 'critic_pool.onnx')
onnx.save(critic('norm'), 'critic_norm.onnx')
onnx.save(critic('bn'), 'critic_bn.onnx')
onnx.save(critic('tconv'), 'critic_tconv.onnx')
onnx.save(critic('det'), 'critic_det.onnx')
onnx.save(critic('ln'), 'critic_ln.onnx')
)");
  for (const char* m : {"critic.onnx", "critic_pool.onnx", "critic_bn.onnx", "critic_ln.onnx", "critic_norm.onnx",
                        "critic_tconv.onnx"}) {
    SCOPED_TRACE(m);
    auto r = run_command(testing::graphrun_cli() + " check " + dir + "/" + m + " 2>&1");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("verdict: trainable"), std::string::npos) << r.output;
  }
  // Both normalisations run in training form in the penalty: its gradient holds the gradient op (so the training
  // graph differentiates it by its rule, standard ops), and the output's own term 's' another.
  for (const auto& [m, op] : {std::pair<const char*, const char*>{"critic_bn.onnx", "BatchNormalizationGrad"},
                              {"critic_ln.onnx", "LayerNormalizationGrad"}}) {
    const auto r = run_command(testing::graphrun_cli() + " grad " + dir + "/" + m + " --loss output -o " + dir +
                               "/grad_" + m + " 2>&1");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    int count = 0;
    for (const Node& n : load_onnx(dir + "/grad_" + m).nodes) count += n.op_type == op;
    EXPECT_EQ(count, 2) << m;
  }
  auto r = run_command(testing::graphrun_cli() + " check " + dir + "/critic_det.onnx 2>&1");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("no gradient rule for op 'ai.graphrun::DetGrad'"), std::string::npos) << r.output;
}

// A gradient penalty through a BatchNormalization exported in eval mode (torch.onnx.export's default: one output,
// no training_mode) trains as PyTorch's model.train() computes it: the Gradient node differentiates the batch
// statistics the forward trains on. Two full-batch SGD steps match torch's to float32 rounding, for the eval-mode
// file at opset 12 (converted to opset 15 before the Gradient is expanded; its Dropout of ratio 0 in training form
// too) and for the same critic exported in training mode; under `graphrun run` the eval-mode file keeps ONNX's
// meaning (running statistics, in the penalty's gradient too).
TEST(GradientOp, APenaltyThroughAnEvalModeBatchNormTrainsOnBatchStatistics) {
  const std::string dir = temp_dir("gradient_op_eval_bn");
  run_onnx_python(dir, R"(
import torch
F = TensorProto.FLOAT
def critic(opset):
    bn = {'training_mode': 1} if opset >= 15 else {}
    body = [helper.make_node('Conv', ['x', 'w'], ['c'], pads=[1, 1, 1, 1]), helper.make_node('Tanh', ['c'], ['r']),
            helper.make_node('BatchNormalization', ['r', 'scale', 'bias', 'rmean', 'rvar'], ['n'], **bn),
            helper.make_node('Dropout', ['n', 'ratio'], ['nd']), helper.make_node('Relu', ['nd'], ['nr']),
            helper.make_node('ReduceMean', ['nr'], ['s'], axes=[1, 2, 3], keepdims=0),
            helper.make_node('Gradient', ['x'], ['gx'], domain='ai.onnx.preview.training', xs=['x'], y='s', name='penalty'),
            helper.make_node('Mul', ['gx', 'gx'], ['g2']),
            helper.make_node('ReduceSum', ['g2', 'axes'][:1 if opset < 13 else 2], ['pen'], keepdims=0,
                             **({'axes': [1, 2, 3]} if opset < 13 else {})),
            helper.make_node('Add', ['pen', 's'], ['out'])]
    inits = [numpy_helper.from_array(np.random.default_rng(1).standard_normal((3, 2, 3, 3)).astype(np.float32), 'w'),
             numpy_helper.from_array(np.array([1.5, 0.7, 1.2], np.float32), 'scale'),
             numpy_helper.from_array(np.array([0.1, -0.2, 0.3], np.float32), 'bias'),
             numpy_helper.from_array(np.full(3, 0.3, np.float32), 'rmean'),
             numpy_helper.from_array(np.full(3, 2.0, np.float32), 'rvar'),
             numpy_helper.from_array(np.array(0.0, np.float32), 'ratio')]
    if opset >= 13: inits.append(numpy_helper.from_array(np.array([1, 2, 3], np.int64), 'axes'))
    g = helper.make_graph(body, 'critic', [helper.make_tensor_value_info('x', F, ['N', 2, 6, 6])],
                          [helper.make_tensor_value_info('out', F, ['N'])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid('', opset), helper.make_opsetid('ai.onnx.preview.training', 1)])
onnx.save(critic(12), 'eval_mode.onnx')
onnx.save(critic(15), 'train_mode.onnx')
x = np.random.default_rng(5).standard_normal((16, 2, 6, 6)).astype(np.float32)
np.savez('train.npz', x=x)
np.save('x4.npy', x[:4])
W = {t.name: numpy_helper.to_array(t) for t in critic(12).graph.initializer}
conv = torch.nn.Conv2d(2, 3, 3, padding=1, bias=False); bn = torch.nn.BatchNorm2d(3)
with torch.no_grad():
    conv.weight.copy_(torch.tensor(W['w'])); bn.weight.copy_(torch.tensor(W['scale'])); bn.bias.copy_(torch.tensor(W['bias']))
    bn.running_mean.copy_(torch.tensor(W['rmean'])); bn.running_var.copy_(torch.tensor(W['rvar']))
def out(xb):
    xb = torch.tensor(xb, requires_grad=True)
    s = torch.relu(bn(torch.tanh(conv(xb)))).mean(dim=(1, 2, 3))
    gx, = torch.autograd.grad(s.sum(), xb, create_graph=True)
    return (gx * gx).sum(dim=(1, 2, 3)) + s
bn.eval()
np.save('out_eval.npy', out(x[:4]).detach().numpy())
bn.train()
opt = torch.optim.SGD(list(conv.parameters()) + list(bn.parameters()), lr=0.1)
for step in range(2):
    loss = out(x).mean()
    opt.zero_grad(); loss.backward(); opt.step()
bn.eval()
np.save('out_trained.npy', out(x[:4]).detach().numpy())
for k, t in {'w': conv.weight, 'scale': bn.weight, 'bias': bn.bias, 'rmean': bn.running_mean, 'rvar': bn.running_var}.items():
    np.save('torch_' + k + '.npy', t.detach().numpy())
)");
  const std::string cli = testing::graphrun_cli();
  auto r = run_command(cli + " run " + dir + "/eval_mode.onnx --input x=" + dir + "/x4.npy --output-dir " + dir +
                       "/out 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_LT(testing::max_abs_diff(read_npy(dir + "/out/out.npy"), npy(dir, "out_eval")), 1e-5);
  // `check` differentiates what train does: both files, the penalty's Gradient node too, in the training form, to the
  // same directional derivatives.
  std::string checked[2];
  for (int i = 0; i < 2; ++i) {
    r = run_command(cli + " check " + dir + (i ? "/train_mode.onnx" : "/eval_mode.onnx") + " 2>&1");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    std::istringstream lines(r.output);
    for (std::string line; std::getline(lines, line);)
      if (line.rfind("  direction ", 0) == 0) checked[i] += line + "\n";
  }
  EXPECT_FALSE(checked[0].empty());
  EXPECT_EQ(checked[0], checked[1]);
  std::map<std::string, Tensor> expected;
  for (const char* k : {"w", "scale", "bias", "rmean", "rvar"}) expected[k] = npy(dir, std::string("torch_") + k);
  for (const char* m : {"eval_mode", "train_mode"}) {
    SCOPED_TRACE(m);
    r = run_command(cli + " train " + dir + "/" + m + ".onnx --data " + dir + "/train.npz --test-data " + dir +
                    "/train.npz --loss output --devices cpu:1 --epochs 2 --batch-size 16 --lr 0.1 --save " + dir +
                    "/trained_" + m + ".onnx 2>&1");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const Graph trained = load_onnx(dir + "/trained_" + m + ".onnx");
    for (const auto& [k, t] : expected) {
      ASSERT_TRUE(trained.initializers.count(k)) << k;
      EXPECT_LT(testing::max_abs_diff(trained.initializers.at(k), t), 1e-6) << k;
    }
    // Saved as written: its Gradient node, none of graphrun's gradient ops (any ONNX runtime reads the file), and
    // `run` computes it as torch's eval mode does with the trained weights.
    const Graph as_saved = load_onnx(dir + "/trained_" + m + ".onnx");
    ASSERT_TRUE(as_saved.as_written);  // (the file's graph, before its Gradient node was expanded)
    EXPECT_EQ(as_saved.as_written->opsets.count("ai.graphrun"), 0u);
    EXPECT_EQ(std::count_if(as_saved.as_written->nodes.begin(), as_saved.as_written->nodes.end(),
                            [](const Node& n) { return n.op_type == "Gradient"; }),
              1);
    r = run_command(cli + " run " + dir + "/trained_" + m + ".onnx --input x=" + dir + "/x4.npy --output-dir " + dir +
                    "/out_" + m + " 2>&1");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_LT(testing::max_abs_diff(read_npy(dir + "/out_" + m + "/out.npy"), npy(dir, "out_trained")), 1e-5);
  }
}

// WGAN-GP's penalty: a Gradient node evaluated at other values (interpolated inputs) than the critic's own, its
// output read by other nodes (which the expansion must keep ordered after it), through a BatchNormalization in
// training: the copy of the critic the Gradient evaluates updates the running statistics after the critic's own
// pass, as torch's second call of the critic does. Two SGD steps match torch's weights and running statistics to
// float32 rounding, with and without --sync-bn, and with the statistics read through Identity nodes (the
// Gradient is expanded in the training form all the same); `run` equals torch's eval mode.
TEST(GradientOp, AWganGpPenaltyAtInterpolatedInputsTrainsAsTorch) {
  const std::string dir = temp_dir("gradient_op_wgan_gp");
  run_onnx_python(dir, R"(
import torch
F = TensorProto.FLOAT
body = [helper.make_node('Conv', ['x', 'w'], ['c'], pads=[1, 1, 1, 1]), helper.make_node('Tanh', ['c'], ['r']),
        helper.make_node('BatchNormalization', ['r', 'scale', 'bias', 'rmean', 'rvar'], ['n']),
        helper.make_node('Relu', ['n'], ['nr']), helper.make_node('ReduceMean', ['nr'], ['s'], axes=[1, 2, 3], keepdims=0),
        helper.make_node('Gradient', ['xh'], ['gx'], domain='ai.onnx.preview.training', xs=['x'], y='s', name='penalty'),
        helper.make_node('Mul', ['gx', 'gx'], ['g2']), helper.make_node('ReduceSum', ['g2'], ['pen'], keepdims=0, axes=[1, 2, 3]),
        helper.make_node('Add', ['pen', 's'], ['out'])]
rng = np.random.default_rng(5)
W = {'w': rng.standard_normal((3, 2, 3, 3)).astype(np.float32), 'scale': np.array([1.5, 0.7, 1.2], np.float32),
     'bias': np.array([0.1, -0.2, 0.3], np.float32), 'rmean': np.full(3, 0.3, np.float32), 'rvar': np.full(3, 2.0, np.float32)}
x_in = lambda name: helper.make_tensor_value_info(name, F, ['N', 2, 6, 6])
def save(body, name):
    g = helper.make_graph(body, 'wgan_gp_critic', [x_in('x'), x_in('xh')], [helper.make_tensor_value_info('out', F, ['N'])],
                          [numpy_helper.from_array(v, k) for k, v in W.items()])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid('', 12), helper.make_opsetid('ai.onnx.preview.training', 1)]),
              name)
save(body, 'critic.onnx')
# The statistics read through Identity nodes (as exporters write shared buffers): the same training form.
body[2] = helper.make_node('BatchNormalization', ['r', 'scale', 'bias', 'rmean_i', 'rvar_i'], ['n'])
save([helper.make_node('Identity', ['rmean'], ['rmean_i']), helper.make_node('Identity', ['rvar'], ['rvar_i'])] + body,
     'critic_identity.onnx')
x = rng.standard_normal((16, 2, 6, 6)).astype(np.float32)
xh = (0.5 * rng.standard_normal((16, 2, 6, 6)) + 1).astype(np.float32)  # other statistics than x's
np.savez('train.npz', x=x, xh=xh)
np.save('x4.npy', x[:4]); np.save('xh4.npy', xh[:4])
conv = torch.nn.Conv2d(2, 3, 3, padding=1, bias=False); bn = torch.nn.BatchNorm2d(3)
with torch.no_grad():
    conv.weight.copy_(torch.tensor(W['w'])); bn.weight.copy_(torch.tensor(W['scale'])); bn.bias.copy_(torch.tensor(W['bias']))
    bn.running_mean.copy_(torch.tensor(W['rmean'])); bn.running_var.copy_(torch.tensor(W['rvar']))
critic = lambda t: torch.relu(bn(torch.tanh(conv(t)))).mean(dim=(1, 2, 3))
def out(a, b, create_graph):
    s = critic(torch.tensor(a))
    bt = torch.tensor(b, requires_grad=True)
    gx, = torch.autograd.grad(critic(bt).sum(), bt, create_graph=create_graph)
    return (gx * gx).sum(dim=(1, 2, 3)) + s
bn.eval()
np.save('out_eval.npy', out(x[:4], xh[:4], False).detach().numpy())
bn.train()
opt = torch.optim.SGD(list(conv.parameters()) + list(bn.parameters()), lr=0.1)
for step in range(2):
    loss = out(x, xh, True).mean()
    opt.zero_grad(); loss.backward(); opt.step()
for k, t in {'w': conv.weight, 'scale': bn.weight, 'bias': bn.bias, 'rmean': bn.running_mean, 'rvar': bn.running_var}.items():
    np.save('torch_' + k + '.npy', t.detach().numpy())
)");
  const std::string cli = testing::graphrun_cli();
  auto r = run_command(cli + " run " + dir + "/critic.onnx --input x=" + dir + "/x4.npy --input xh=" + dir +
                       "/xh4.npy --output-dir " + dir + "/out 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_LT(testing::max_abs_diff(read_npy(dir + "/out/out.npy"), npy(dir, "out_eval")), 1e-5);
  for (const std::string model : {"critic", "critic_identity"})
    for (const std::string sync : {"", " --sync-bn"}) {
      SCOPED_TRACE(model + sync);
      r = run_command(cli + " train " + dir + "/" + model + ".onnx --data " + dir + "/train.npz --test-data " + dir +
                      "/train.npz --loss output --devices cpu:1 --epochs 2 --batch-size 16 --lr 0.1" + sync +
                      " --save " + dir + "/trained.onnx 2>&1");
      ASSERT_EQ(r.exit_code, 0) << r.output;
      const Graph trained = load_onnx(dir + "/trained.onnx");
      for (const char* k : {"w", "scale", "bias", "rmean", "rvar"}) {
        ASSERT_TRUE(trained.initializers.count(k)) << k;
        EXPECT_LT(testing::max_abs_diff(trained.initializers.at(k), npy(dir, std::string("torch_") + k)), 1e-6) << k;
      }
    }
}

// A gradient penalty on a recurrent critic (WGAN-GP on sequences): the Gradient's backward pass goes through the
// critic's LSTM or GRU, and training differentiates that again, which the fused LSTMGrad and GRUGrad cannot; the
// expansion unrolls the recurrent nodes it differentiates (graph/passes/unroll_rnn.h). A bidirectional LSTM read
// through a Transpose (as torch exports nn.LSTM(batch_first=True)) and a GRU in layout 1, each with a linear head:
// two SGD steps match torch's nn.LSTM and nn.GRU with create_graph=True, and `check` passes.
TEST(GradientOp, APenaltyThroughARecurrentCriticTrainsAsTorch) {
  const std::string dir = temp_dir("gradient_op_recurrent_critic");
  run_onnx_python(dir, R"(
import torch
torch.set_default_dtype(torch.float64)
F = TensorProto.FLOAT
N, T, I, H = 16, 5, 3, 4
rng = np.random.default_rng(11)
def onnx_blocks(torch_w, perm):  # torch's gate order -> ONNX's (the block perm[k] of ONNX is torch's block k)
    out = np.empty_like(torch_w)
    for k, j in enumerate(perm): out[j * H:(j + 1) * H] = torch_w[k * H:(k + 1) * H]
    return out
def model(cell, name):
    lstm = cell == 'lstm'
    D, G = (2, 4) if lstm else (1, 3)
    perm = [0, 2, 3, 1] if lstm else [1, 0, 2]  # torch i f g o -> ONNX i o f c; torch r z n -> ONNX z r h
    m = (torch.nn.LSTM(I, H, bidirectional=True) if lstm else torch.nn.GRU(I, H, batch_first=True))
    head = torch.nn.Linear(D * H, 1, bias=False)
    sfx = ['', '_reverse'][:D]
    W = np.stack([onnx_blocks(getattr(m, 'weight_ih_l0' + s).detach().numpy(), perm) for s in sfx]).astype(np.float32)
    R = np.stack([onnx_blocks(getattr(m, 'weight_hh_l0' + s).detach().numpy(), perm) for s in sfx]).astype(np.float32)
    B = np.stack([np.concatenate([onnx_blocks(getattr(m, b + '_l0' + s).detach().numpy(), perm) for b in ('bias_ih', 'bias_hh')])
                  for s in sfx]).astype(np.float32)
    with torch.no_grad():  # torch computes from the float32 weights the file holds
        for s, k in enumerate(sfx):
            getattr(m, 'weight_ih_l0' + k).copy_(torch.tensor(W[s][np.concatenate([np.arange(j * H, (j + 1) * H) for j in perm])]))
            getattr(m, 'weight_hh_l0' + k).copy_(torch.tensor(R[s][np.concatenate([np.arange(j * H, (j + 1) * H) for j in perm])]))
            getattr(m, 'bias_ih_l0' + k).copy_(torch.tensor(B[s][:G * H][np.concatenate([np.arange(j * H, (j + 1) * H) for j in perm])]))
            getattr(m, 'bias_hh_l0' + k).copy_(torch.tensor(B[s][G * H:][np.concatenate([np.arange(j * H, (j + 1) * H) for j in perm])]))
        head.weight.copy_(torch.tensor(head.weight.detach().numpy().astype(np.float32)))
    inits = [numpy_helper.from_array(W, 'W'), numpy_helper.from_array(R, 'R'), numpy_helper.from_array(B, 'B'),
             numpy_helper.from_array(head.weight.detach().numpy().T.astype(np.float32), 'head'),
             numpy_helper.from_array(np.array([-1, D * H], np.int64), 'rows'),
             numpy_helper.from_array(np.array([-1], np.int64), 'flat'),
             numpy_helper.from_array(np.array([1, 2], np.int64), 'axes')]
    def critic(x, p):
        if lstm:
            return [helper.make_node('Transpose', [x], [p + 'xt'], perm=[1, 0, 2]),
                    helper.make_node('LSTM', [p + 'xt', 'W', 'R', 'B'], ['', p + 'hn'], hidden_size=H, direction='bidirectional'),
                    helper.make_node('Transpose', [p + 'hn'], [p + 'hb'], perm=[1, 0, 2]),
                    helper.make_node('Reshape', [p + 'hb', 'rows'], [p + 'h']),
                    helper.make_node('MatMul', [p + 'h', 'head'], [p + 'o']), helper.make_node('Reshape', [p + 'o', 'flat'], [p + 's'])]
        return [helper.make_node('GRU', [x, 'W', 'R', 'B'], ['', p + 'hn'], hidden_size=H, layout=1, linear_before_reset=1),
                helper.make_node('Reshape', [p + 'hn', 'rows'], [p + 'h']),
                helper.make_node('MatMul', [p + 'h', 'head'], [p + 'o']), helper.make_node('Reshape', [p + 'o', 'flat'], [p + 's'])]
    body = critic('x', '') + [
        helper.make_node('Gradient', ['xh'], ['gx'], domain='ai.onnx.preview.training', xs=['x'], y='s', name='penalty'),
        helper.make_node('Mul', ['gx', 'gx'], ['g2']), helper.make_node('ReduceSum', ['g2', 'axes'], ['pen'], keepdims=0),
        helper.make_node('Add', ['pen', 's'], ['out'])]
    x_in = lambda n: helper.make_tensor_value_info(n, F, ['N', T, I])
    g = helper.make_graph(body, name, [x_in('x'), x_in('xh')], [helper.make_tensor_value_info('out', F, ['N'])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid('', 14), helper.make_opsetid('ai.onnx.preview.training', 1)]),
              name + '.onnx')
    def crit(xb):
        if lstm:
            _, (hn, _) = m(xb.transpose(0, 1))
            return head(hn.transpose(0, 1).reshape(-1, D * H)).reshape(-1)
        _, hn = m(xb)
        return head(hn.reshape(-1, H)).reshape(-1)
    x = rng.standard_normal((N, T, I)).astype(np.float32)
    xh = (0.5 * rng.standard_normal((N, T, I)) + 0.3).astype(np.float32)
    np.savez(name + '.npz', x=x, xh=xh)
    if not lstm:  # the reference of gru_second.onnx (below), at the initial weights
        x2 = rng.standard_normal((2, T, I)).astype(np.float32)
        np.save('x2.npy', x2)
        bt = torch.tensor(x2.astype(np.float64), requires_grad=True)
        gx, = torch.autograd.grad(crit(bt).sum(), bt, create_graph=True)
        hx, = torch.autograd.grad((gx * gx).sum(), bt)
        np.save('hx.npy', hx.numpy())
    opt = torch.optim.SGD(list(m.parameters()) + list(head.parameters()), lr=0.1)
    for step in range(2):
        bt = torch.tensor(xh.astype(np.float64), requires_grad=True)
        gx, = torch.autograd.grad(crit(bt).sum(), bt, create_graph=True)
        loss = ((gx * gx).sum(dim=(1, 2)) + crit(torch.tensor(x.astype(np.float64)))).mean()
        opt.zero_grad(); loss.backward(); opt.step()
    trained = {'W': np.stack([onnx_blocks(getattr(m, 'weight_ih_l0' + s).detach().numpy(), perm) for s in sfx]),
               'R': np.stack([onnx_blocks(getattr(m, 'weight_hh_l0' + s).detach().numpy(), perm) for s in sfx]),
               'B': np.stack([np.concatenate([onnx_blocks(getattr(m, b + '_l0' + s).detach().numpy(), perm) for b in ('bias_ih', 'bias_hh')])
                              for s in sfx]),
               'head': head.weight.detach().numpy().T}
    for k, v in trained.items(): np.save(name + '_torch_' + k + '.npy', v)
    print(name, 'initial to trained:', max(float(np.abs(v - numpy_helper.to_array(t)).max())
                                          for t in inits for k, v in trained.items() if t.name == k))
    return inits, critic
model('lstm', 'lstm_critic')
inits, critic = model('gru', 'gru_critic')
# Under `run`, a Gradient of a Gradient's output through the GRU: d/dx of sum((ds/dx)^2).
body = critic('x', '') + [
    helper.make_node('Gradient', ['x'], ['gx'], domain='ai.onnx.preview.training', xs=['x'], y='s', name='first'),
    helper.make_node('Mul', ['gx', 'gx'], ['g2']), helper.make_node('ReduceSum', ['g2'], ['q'], keepdims=0),
    helper.make_node('Gradient', ['x'], ['hx'], domain='ai.onnx.preview.training', xs=['x'], y='q', name='second')]
g = helper.make_graph(body, 'second', [helper.make_tensor_value_info('x', F, [2, T, I])],
                      [helper.make_tensor_value_info('hx', F, [2, T, I])], inits)
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid('', 14), helper.make_opsetid('ai.onnx.preview.training', 1)]),
          'gru_second.onnx')
)");
  const std::string cli = testing::graphrun_cli();
  auto r = run_command(cli + " run " + dir + "/gru_second.onnx --input x=" + dir + "/x2.npy --output-dir " + dir +
                       "/second 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Tensor hx = npy(dir, "hx");
  double scale = 0;
  for (int64_t i = 0; i < hx.numel(); ++i) scale = std::max(scale, std::fabs(hx.data<double>()[i]));
  ASSERT_GT(scale, 0);
  EXPECT_LT(testing::max_abs_diff(read_npy(dir + "/second/hx.npy"), hx), 1e-5 * scale);
  for (const std::string model : {"lstm_critic", "gru_critic"}) {
    SCOPED_TRACE(model);
    r = run_command(cli + " check " + dir + "/" + model + ".onnx 2>&1");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    r = run_command(cli + " train " + dir + "/" + model + ".onnx --data " + dir + "/" + model + ".npz --test-data " +
                    dir + "/" + model +
                    ".npz --loss output --devices cpu:1 --epochs 2 --batch-size 16 --lr 0.1 --save " + dir + "/" +
                    model + "_trained.onnx 2>&1");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const Graph trained = load_onnx(dir + "/" + model + "_trained.onnx");
    for (const char* k : {"W", "R", "B", "head"}) {
      ASSERT_TRUE(trained.initializers.count(k)) << k;
      EXPECT_LT(testing::max_abs_diff(trained.initializers.at(k), npy(dir, model + "_torch_" + k)), 2e-6) << k;
    }
  }
}

}  // namespace
}  // namespace graphrun

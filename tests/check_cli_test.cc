// graphrun check: each exit status (0 trainable, 1 check failed, 2 cannot load), the complete lists of
// nodes without a kernel or a gradient rule, and a deliberately broken gradient rule caught by the
// numeric gradient check.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>

#include "tests/test_util.h"

namespace graphrun::testing {
namespace {

// Writes an ONNX model built by onnx.helper: `nodes` is Python for the list of nodes; x is f32 [N, 4]
// and y the output, w a [4, 4] and s, b [4] float initializers.
std::string make_model(const std::string& dir, const std::string& name, const std::string& nodes,
                       const std::string& output_shape = "['N', 4]", int opset = 17) {
  const std::string path = dir + "/" + name + ".onnx";
  std::ofstream script(dir + "/" + name + ".py");
  script << "import numpy as np, onnx\n"
            "from onnx import helper as h, numpy_helper as nh, TensorProto as T\n"
            "r = np.random.default_rng(3)\n"
            "inits = [nh.from_array(r.standard_normal((4, 4)).astype(np.float32), 'w'),\n"
            "         nh.from_array(r.standard_normal(4).astype(np.float32), 's'),\n"
            "         nh.from_array(r.standard_normal(4).astype(np.float32), 'b')]\n"
            "g = h.make_graph(" << nodes << ", '" << name << "',\n"
            "                 [h.make_tensor_value_info('x', T.FLOAT, ['N', 4])],\n"
            "                 [h.make_tensor_value_info('y', T.FLOAT, " << output_shape << ")], inits)\n"
            "onnx.save(h.make_model(g, opset_imports=[h.make_opsetid('', " << opset
         << "), h.make_opsetid('com.microsoft', 1)]), '" << path << "')\n";
  script.close();
  auto r = run_command(python() + " " + dir + "/" + name + ".py");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return path;
}

const char* kTrainable =
    "[h.make_node('MatMul', ['x', 'w'], ['m'], name='mm'),"
    " h.make_node('LayerNormalization', ['m', 's', 'b'], ['n'], name='ln'),"
    " h.make_node('Relu', ['n'], ['r'], name='relu'),"
    " h.make_node('Mul', ['r', 'm'], ['y'], name='mul')]";

TEST(CheckCli, TrainableModelPassesWithExit0) {
  const std::string dir = temp_dir("check_cli_ok");
  const std::string model = make_model(dir, "ok", kTrainable);
  auto r = run_command(graphrun_cli() + " check " + model);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("ops without a kernel: none"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("ops without a gradient rule on the path to the outputs: none"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("values without a rank: none"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("gradient check: float64, 3 parameters"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("direction 3:"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\nverdict: trainable"), std::string::npos) << r.output;
}

// torch exports nn.ReflectionPad2d / ReplicationPad2d with pads computed from Constants (Concat, Cast, ...):
// pass fold_pads makes them one Constant before the backward pass, in train, grad and check alike, so the
// edge and reflect rules, which need the pads, apply. Pads taken from the input's shape stay refused.
TEST(CheckCli, ReflectAndEdgePadsComputedFromConstantsAreTrainable) {
  const std::string dir = temp_dir("check_cli_pads");
  for (const char* mode : {"reflect", "edge"}) {
    SCOPED_TRACE(mode);
    const std::string model = make_model(
        dir, std::string("pad_") + mode,
        std::string("[h.make_node('Mul', ['x', 's'], ['m']),"
                    " h.make_node('Constant', [], ['lo'], value=nh.from_array(np.array([0, 1], np.int32))),"
                    " h.make_node('Constant', [], ['hi'], value=nh.from_array(np.array([0, 2], np.int32))),"
                    " h.make_node('Concat', ['lo', 'hi'], ['p32'], axis=0), h.make_node('Cast', ['p32'], ['pads'], to=7),"
                    " h.make_node('Pad', ['m', 'pads'], ['padded'], mode='") + mode + "', name='pad'),"
                    " h.make_node('Mul', ['padded', 'padded'], ['y'])]",
        "['N', 7]");
    auto r = run_command(graphrun_cli() + " check " + model);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("\nverdict: trainable"), std::string::npos) << r.output;
    auto g = run_command(graphrun_cli() + " grad " + model + " -o " + dir + "/" + mode + ".grad.onnx --loss mse");
    EXPECT_EQ(g.exit_code, 0) << g.output;
  }
  const std::string shaped = make_model(
      dir, "pad_shaped",
      "[h.make_node('Mul', ['x', 's'], ['m']), h.make_node('Shape', ['x'], ['sh']),"
      " h.make_node('Constant', [], ['i'], value=nh.from_array(np.array([1], np.int64))),"
      " h.make_node('Gather', ['sh', 'i'], ['four']),"
      " h.make_node('Constant', [], ['z'], value=nh.from_array(np.array([0], np.int64))),"
      " h.make_node('Sub', ['four', 'four'], ['zero']), h.make_node('Div', ['four', 'four'], ['one']),"
      " h.make_node('Concat', ['z', 'one', 'z', 'one'], ['pads'], axis=0),"
      " h.make_node('Pad', ['m', 'pads'], ['y'], mode='reflect', name='pad')]",
      "['N', 6]");
  auto r = run_command(graphrun_cli() + " check " + shaped);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("node 'pad' (Pad)"), std::string::npos) << r.output;
}

// Two 2x2 poolings of an image of symbolic size: the random batch's 2x2 cannot run them, which is "not
// checked" (the check could not run), not "not trainable"; --dims gives H and W sizes it can.
TEST(CheckCli, DimsGiveSymbolsSizesTheModelCanRun) {
  const std::string dir = temp_dir("check_cli_dims");
  auto made = run_command("cd '" + dir + "' && " + python() + " -c \"" +
                          "import numpy as np, onnx; from onnx import helper as h, numpy_helper as nh, TensorProto as T; "
                          "g = h.make_graph([h.make_node('Mul', ['x', 's'], ['m']), "
                          "h.make_node('MaxPool', ['m'], ['p'], kernel_shape=[2, 2], strides=[2, 2]), "
                          "h.make_node('MaxPool', ['p'], ['y'], kernel_shape=[2, 2], strides=[2, 2])], 'pools', "
                          "[h.make_tensor_value_info('x', T.FLOAT, ['N', 1, 'H', 'W'])], "
                          "[h.make_tensor_value_info('y', T.FLOAT, ['N', 1, 'a', 'b'])], [nh.from_array(np.array([1.5], np.float32), 's')]); "
                          "onnx.save(h.make_model(g, opset_imports=[h.make_opsetid('', 17)]), 'pools.onnx')\"");
  ASSERT_EQ(made.exit_code, 0) << made.output;
  auto r = run_command(graphrun_cli() + " check " + dir + "/pools.onnx");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("\nverdict: not checked: the gradient check cannot run"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--dims NAME=SIZE"), std::string::npos) << r.output;
  r = run_command(graphrun_cli() + " check " + dir + "/pools.onnx --dims H=8,W=12");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("\nverdict: trainable"), std::string::npos) << r.output;
  r = run_command(graphrun_cli() + " check " + dir + "/pools.onnx --dims H=0 2>&1");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  // A name no input has was ignored (a typo checked the default size 2).
  r = run_command(graphrun_cli() + " check " + dir + "/pools.onnx --dims H=8,w=12 2>&1");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--dims w=12: no input of the model has a dimension named 'w' (it names H, N, W)"), std::string::npos)
      << r.output;
  // A random batch larger than the machine is refused before it is drawn (10^18 values).
  r = run_command(graphrun_cli() + " check " + dir + "/pools.onnx --dims N=999999,H=999999,W=999999 2>&1");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("verdict: not checked: the gradient check cannot run: the gradient check's random batch needs "),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("give its dimensions smaller sizes with --dims"), std::string::npos) << r.output;
}

// Before opset 12 a Dropout says nothing of training and runs as the identity (graphrun run, and check's
// gradient check): its gradient is the identity too. It used to scale by 1 / (1 - ratio), which check
// caught as a failed gradient check. A training BatchNormalization's unread outputs are no "values
// without a rank".
TEST(CheckCli, OldOpsetDropoutAndTrainingBatchNormCheckTrainable) {
  const std::string dir = temp_dir("check_cli_old_opset");
  auto made = run_command("cd '" + dir + "' && " + python() + " -c \"" +
                          "import numpy as np, onnx; from onnx import helper as h, numpy_helper as nh, TensorProto as T; "
                          "r = np.random.default_rng(1); f = lambda *s: r.standard_normal(s).astype(np.float32); "
                          "g = h.make_graph([h.make_node('MatMul', ['x', 'w'], ['m']), "
                          "h.make_node('BatchNormalization', ['m', 's', 'b', 'mu', 'v'], ['n', 'rm', 'rv', 'sm', 'sv']), "
                          "h.make_node('Dropout', ['n'], ['y'], ratio=0.3)], 'old', "
                          "[h.make_tensor_value_info('x', T.FLOAT, ['N', 4])], [h.make_tensor_value_info('y', T.FLOAT, ['N', 4])], "
                          "[nh.from_array(f(4, 4), 'w'), nh.from_array(f(4), 's'), nh.from_array(f(4), 'b'), "
                          "nh.from_array(np.zeros(4, np.float32), 'mu'), nh.from_array(np.ones(4, np.float32), 'v')]); "
                          "onnx.save(h.make_model(g, opset_imports=[h.make_opsetid('', 10)]), 'old.onnx')\"");
  ASSERT_EQ(made.exit_code, 0) << made.output;
  auto r = run_command(graphrun_cli() + " check " + dir + "/old.onnx --dims N=6 2>&1");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("values without a rank: none"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\nverdict: trainable"), std::string::npos) << r.output;
}

// Running statistics an exporter reads through Identity nodes are state, not parameters, as when the
// BatchNormalization reads them directly: three parameters (w, s, b), and the check passes.
TEST(CheckCli, RunningStatisticsReadThroughIdentitiesAreNoParameters) {
  const std::string dir = temp_dir("check_cli_identity_stats");
  auto made = run_command(
      "cd '" + dir + "' && " + python() + " -c \"" +
      "import numpy as np, onnx; from onnx import helper as h, numpy_helper as nh, TensorProto as T; "
      "r = np.random.default_rng(1); f = lambda *s: r.standard_normal(s).astype(np.float32); "
      "g = h.make_graph([h.make_node('MatMul', ['x', 'w'], ['m']), "
      "h.make_node('Identity', ['mu'], ['mu_i']), h.make_node('Identity', ['v'], ['v_i']), "
      "h.make_node('BatchNormalization', ['m', 's', 'b', 'mu_i', 'v_i'], ['y'])], 'identities', "
      "[h.make_tensor_value_info('x', T.FLOAT, ['N', 4])], [h.make_tensor_value_info('y', T.FLOAT, ['N', 4])], "
      "[nh.from_array(f(4, 4), 'w'), nh.from_array(f(4), 's'), nh.from_array(f(4), 'b'), "
      "nh.from_array(f(4), 'mu'), nh.from_array(np.ones(4, np.float32) * 1.5, 'v')]); "
      "onnx.save(h.make_model(g, opset_imports=[h.make_opsetid('', 15)]), 'identities.onnx')\"");
  ASSERT_EQ(made.exit_code, 0) << made.output;
  auto r = run_command(graphrun_cli() + " check " + dir + "/identities.onnx 2>&1");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("gradient check: float64, 3 parameters"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\nverdict: trainable"), std::string::npos) << r.output;
}

// A broken rule (the test-only switch doubles Relu's gradient) makes the numeric check fail; so does
// one for the rule of the new LayerNormalization.
TEST(CheckCli, BrokenGradientRuleFailsTheNumericCheck) {
  const std::string dir = temp_dir("check_cli_broken");
  const std::string model = make_model(dir, "broken", kTrainable);
  for (const char* op : {"Relu", "LayerNormalization"}) {
    auto r = run_command(std::string("GRAPHRUN_TEST_BREAK_GRADIENT=") + op + " " + graphrun_cli() + " check " + model +
                         " --directions 2");
    EXPECT_EQ(r.exit_code, 1) << op << "\n" << r.output;
    EXPECT_NE(r.output.find("FAILED"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("verdict: not trainable: the backward graph disagrees with central differences"),
              std::string::npos) << r.output;
  }
}

// A kink within the first step (here the model's only parameter, k = 4e-7, feeds a Relu: the step of 1e-6 crosses
// 0) makes that central difference wrong where the backward is right; the smaller steps tried then agree.
TEST(CheckCli, AKinkWithinTheStepIsToldFromAWrongGradient) {
  const std::string dir = temp_dir("check_cli_kink");
  const std::string path = dir + "/kink.onnx";
  auto py = run_command(python() + " -c \"import numpy as np, onnx\n"
                        "from onnx import helper as h, numpy_helper as nh, TensorProto as T\n"
                        "g = h.make_graph([h.make_node('Relu', ['k'], ['r']), h.make_node('Mul', ['x', 'r'], ['y'])], 'kink',\n"
                        "  [h.make_tensor_value_info('x', T.FLOAT, ['N', 4])], [h.make_tensor_value_info('y', T.FLOAT, ['N', 4])],\n"
                        "  [nh.from_array(np.array([4e-7], np.float32), 'k')])\n"
                        "onnx.save(h.make_model(g, opset_imports=[h.make_opsetid('', 17)]), '" + path + "')\"");
  ASSERT_EQ(py.exit_code, 0) << py.output;
  auto r = run_command(graphrun_cli() + " check " + path + " --directions 1 2>&1");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("a kink (ReLU, max, clip) within that step: at step 2.5e-07"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("FAILED"), std::string::npos) << r.output;
  // The same model with the Relu's gradient broken fails at every step.
  auto broken = run_command("GRAPHRUN_TEST_BREAK_GRADIENT=Relu " + graphrun_cli() + " check " + path + " --directions 1 2>&1");
  EXPECT_EQ(broken.exit_code, 1) << broken.output;
  EXPECT_NE(broken.output.find("FAILED"), std::string::npos) << broken.output;
}

TEST(CheckCli, ListsEveryNodeWithoutAGradientRuleOrKernel) {
  const std::string dir = temp_dir("check_cli_missing");
  // Every op with a kernel now has a rule: Mod, the last example here of a kernel without one, passes
  // the numeric check (twice, on both operands). ONNX Runtime's Inverse (com.microsoft) has neither kernel nor rule
  // here (twice).
  const std::string norule = make_model(
      dir, "norule",
      "[h.make_node('MatMul', ['x', 'w'], ['m'], name='mm'),"
      " h.make_node('Mod', ['m', 'x'], ['p1'], name='mod_a', fmod=1),"
      " h.make_node('Mod', ['x', 'm'], ['p2'], name='mod_b', fmod=1),"
      " h.make_node('Add', ['p1', 'p2'], ['msum'], name='add'),"
      " h.make_node('ReduceMean', ['msum'], ['y'], name='mean', axes=[1], keepdims=1)]",
      "['N', 1]");
  auto r = run_command(graphrun_cli() + " check " + norule);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("ops without a gradient rule on the path to the outputs: none\n"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("verdict: trainable"), std::string::npos) << r.output;

  const std::string nokernel = make_model(
      dir, "nokernel",
      "[h.make_node('Reshape', ['w', 'sh'], ['w3'], name='reshape'),"
      " h.make_node('Inverse', ['w3'], ['d1'], name='inverse_a', domain='com.microsoft'),"
      " h.make_node('Inverse', ['w3'], ['d2'], name='inverse_b', domain='com.microsoft'),"
      " h.make_node('Add', ['d1', 'd2'], ['d'], name='add'),"
      " h.make_node('ReduceSum', ['d'], ['ds'], name='sum', keepdims=0),"
      " h.make_node('Mul', ['x', 'ds'], ['y'], name='mul'),"
      " h.make_node('Constant', [], ['sh'], name='shape', value=nh.from_array(np.array([1, 4, 4], np.int64)))]");
  r = run_command(graphrun_cli() + " check " + nokernel);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("ops without a kernel: 2\n  op 'com.microsoft::Inverse' (node 'inverse_a')\n"
                          "  op 'com.microsoft::Inverse' (node 'inverse_b')\n"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("no gradient rule for op 'com.microsoft::Inverse' (node 'inverse_a')\n"
                          "  no gradient rule for op 'com.microsoft::Inverse' (node 'inverse_b')"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("verdict: not trainable: ops have no kernel; gradient rules are missing"), std::string::npos)
      << r.output;
}

TEST(CheckCli, UnloadableModelAndBadFlagsExit2) {
  const std::string dir = temp_dir("check_cli_bad");
  {
    std::ofstream junk(dir + "/junk.onnx");
    junk << "not a model";
  }
  for (const std::string& args : {dir + "/missing.onnx", dir + "/junk.onnx", std::string(""),
                                  make_model(dir, "ok", kTrainable) + " --directions 0",
                                  make_model(dir, "ok", kTrainable) + " --directions 4294967297",  // not 1 as an int
                                  make_model(dir, "ok", kTrainable) + " --seed -1",
                                  make_model(dir, "ok", kTrainable) + " --nope"}) {
    auto r = run_command(graphrun_cli() + " check " + args);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.output;
    EXPECT_NE(r.output.find("graphrun check: error: "), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find('\n'), r.output.size() - 1) << "one line:\n" << r.output;
  }
  auto help = run_command(graphrun_cli() + " check --help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.output.find("exit status: 0 trainable, 1 the check failed"), std::string::npos) << help.output;
}

// torch's scatter_add below opset 16 (and index_put with accumulate=True at any opset) exports a
// ScatterElements (ScatterND) without reduction whose indices, computed from Constants, send several
// updates to one element. graphrun applies them in index order, so only the last writer's gradient is
// dY's: the check passes (it failed when every update got dY) and a note says what PyTorch computes
// instead, naming the node and counting the overwritten updates (row 0: 3 twice; row 1: 1 and -3 three
// times: 1 + 2). With reduction add there is nothing to say.
TEST(CheckCli, CollidingScatterUpdatesAreDifferentiatedAndNoted) {
  const std::string dir = temp_dir("check_cli_scatter");
  const std::string nodes =
      "[h.make_node('MatMul', ['x', 'w'], ['m'], name='mm'),"
      " h.make_node('Constant', [], ['st'], value=nh.from_array(np.array([0], np.int64))),"
      " h.make_node('Constant', [], ['en'], value=nh.from_array(np.array([3], np.int64))),"
      " h.make_node('Constant', [], ['ax'], value=nh.from_array(np.array([1], np.int64))),"
      " h.make_node('Slice', ['m', 'st', 'en', 'ax'], ['u'], name='slice'),"
      " h.make_node('Constant', [], ['i0'], value=nh.from_array(np.array([[0, 3, 3], [1, 1, -3]], np.int64))),"
      " h.make_node('Constant', [], ['zero'], value=nh.from_array(np.array(0, np.int64))),"
      " h.make_node('Add', ['i0', 'zero'], ['idx'], name='idx'),"
      " h.make_node('Constant', [], ['d'], value=nh.from_array(np.ones((2, 4), np.float32))),"
      " h.make_node('ScatterElements', ['d', 'idx', 'u'], ['y'], name='scatter', axis=1REDUCTION)]";
  const std::string none = make_model(dir, "none", std::regex_replace(nodes, std::regex("REDUCTION"), ""), "[2, 4]");
  auto r = run_command(graphrun_cli() + " check " + none);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("note: node 'scatter' (ScatterElements): 3 updates land where a later update "
                          "overwrites them"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("PyTorch adds them instead"), std::string::npos) << r.output;
  const std::string add =
      make_model(dir, "add", std::regex_replace(nodes, std::regex("REDUCTION"), ", reduction='add'"), "[2, 4]");
  r = run_command(graphrun_cli() + " check " + add);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("note:"), std::string::npos) << r.output;
}

// Opset 9's Pad in each mode, as torch writes F.pad at opset 9 (no `value` for constant zeros): the
// training conversion to opset 15 works for all three. onnx's Pad adapter read a missing `value`
// unchecked; graphrun writes the default 0 for constant Pads only, since the adapter leaves `value` an
// attribute of a reflect or edge Pad, which opset 15 does not allow.
TEST(CheckCli, OpsetNinePadsOfEveryModeTrain) {
  const std::string dir = temp_dir("check_cli_pad9");
  const std::string model = make_model(dir, "pads9",
      "[h.make_node('MatMul', ['x', 'w'], ['m'], name='mm'),"
      " h.make_node('Pad', ['m'], ['p0'], name='zeros', pads=[0, 1, 0, 1]),"
      " h.make_node('Pad', ['m'], ['p1'], name='reflect', mode='reflect', pads=[0, 1, 0, 1]),"
      " h.make_node('Pad', ['m'], ['p2'], name='edge', mode='edge', pads=[0, 2, 0, 0]),"
      " h.make_node('Add', ['p0', 'p1'], ['a'], name='add'),"
      " h.make_node('Mul', ['a', 'p2'], ['y'], name='mul')]",
      "['N', 6]", 9);
  auto r = run_command(graphrun_cli() + " check " + model);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("opset 9 converted to opset 15 for training"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\nverdict: trainable"), std::string::npos) << r.output;
}

// Python for the nodes of a BatchNormalization 'bn' over 1x1 maps: y = Reshape(bn(Reshape(x w, [N, 4, 1, 1])), [N, 4])
// * x w. training: in training mode on Constant statistics; else in inference form on initializer statistics, as
// an eval-mode export has it.
std::string bn_over_1x1_nodes(bool training) {
  const std::string stats = training
                                ? " h.make_node('Constant', [], ['mu'], value=nh.from_array(np.zeros(4, np.float32))),"
                                  " h.make_node('Constant', [], ['var'], value=nh.from_array(np.ones(4, np.float32))),"
                                : "";
  const std::string bn = training ? " h.make_node('BatchNormalization', ['m4', 's', 'b', 'mu', 'var'], ['n4', 'rm', "
                                    "'rv'], name='bn', training_mode=1),"
                                  : " h.make_node('BatchNormalization', ['m4', 's', 'b', 'mu', 'var'], ['n4'], "
                                    "name='bn'),";
  return std::string(training ? ""
                              : "(inits.extend([nh.from_array(np.zeros(4, np.float32), 'mu'), "
                                "nh.from_array(np.ones(4, np.float32), 'var')]) or ") +
         "[h.make_node('MatMul', ['x', 'w'], ['m'], name='mm'),"
         " h.make_node('Constant', [], ['to4d'], value=nh.from_array(np.array([0, 4, 1, 1], np.int64))),"
         " h.make_node('Constant', [], ['to2d'], value=nh.from_array(np.array([0, 4], np.int64)))," +
         stats + " h.make_node('Reshape', ['m', 'to4d'], ['m4'], name='r4')," + bn +
         " h.make_node('Reshape', ['n4', 'to2d'], ['n'], name='r2'),"
         " h.make_node('Mul', ['n', 'm'], ['y'], name='mul')]" +
         (training ? "" : ")");
}

// A training-mode BatchNormalization over 1x1 maps (a 32x32 image at a CNN's last stage) normalises only
// N values per channel; at the default batch of 2 the loss is too steep for central differences
// (torchvision's MobileNet V2 and RegNet exported for 32x32 failed the check). The check sizes the batch to
// give it 8 values and says so; --dims N=... overrides; the export's fixed batch becomes N, as in train.
TEST(CheckCli, BatchNormOverFewValuesGetsALargerRandomBatch) {
  const std::string dir = temp_dir("check_cli_bn1x1");
  const std::string nodes = bn_over_1x1_nodes(true);
  const std::string model = make_model(dir, "bn1x1", nodes);
  auto r = run_command(graphrun_cli() + " check " + model);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("random batch: N=8, since BatchNormalization 'bn' normalises 1 value per example and "
                          "channel"),
            std::string::npos)
      << r.output;
  r = run_command(graphrun_cli() + " check " + model + " --dims N=3");
  EXPECT_EQ(r.output.find("random batch:"), std::string::npos) << r.output;
  // A fixed export batch of 2: sized all the same.
  const std::string fixed = make_model(dir, "bn1x1_fixed", nodes, "[2, 4]");
  std::string py = dir + "/fix.py";
  std::ofstream(py) << "import onnx\nm = onnx.load('" << fixed << "')\n"
                    << "m.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 2\nonnx.save(m, '" << fixed << "')\n";
  ASSERT_EQ(run_command(python() + " " + py).exit_code, 0);
  r = run_command(graphrun_cli() + " check " + fixed);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("random batch: N=8"), std::string::npos) << r.output;
}

// A model exported in eval mode (torch's default) has its BatchNormalization in inference form, but train normalises
// by the batch's statistics: the check differentiates that training form, as train does (here seen by the batch it
// sizes for the training-mode node; the inference form has no such need). The running statistics are no parameters.
TEST(CheckCli, AModelExportedInEvalModeIsCheckedInItsTrainingForm) {
  const std::string dir = temp_dir("check_cli_eval_export");
  const std::string model = make_model(dir, "bn_eval", bn_over_1x1_nodes(false));
  auto r = run_command(graphrun_cli() + " check " + model);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("random batch: N=8, since BatchNormalization 'bn' normalises 1 value per example and "
                          "channel"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("gradient check: float64, 3 parameters"), std::string::npos) << r.output;
}

// An export with a fixed batch that a Constant repeats, where shape inference cannot see it (here behind
// torch.unique's inverse indices, whose length depends on the values): the random batch of size 2 fails at
// run time, and the check runs again at the export's own batch, saying so. With --dims the size stays the
// user's (and fails, naming the node).
TEST(CheckCli, AFixedBatchKeptInAConstantIsCheckedAtThatBatch) {
  if (run_command(python() + " -c 'import torch' 2>&1").exit_code != 0) GTEST_SKIP() << python() << " lacks torch";
  const std::string dir = temp_dir("check_cli_fixed_batch");
  std::ofstream(dir + "/export.py") << R"(import torch
torch.manual_seed(0)
class Lookup(torch.nn.Module):
    def __init__(s):
        super().__init__()
        s.table = torch.nn.Parameter(torch.randn(10, 4))
        s.fc = torch.nn.Linear(4, 3)
    def forward(s, x):
        u, inv = torch.unique(x, return_inverse=True)
        return s.fc(s.table[inv.flatten()].reshape(x.shape[0], -1, 4).mean(1))
torch.onnx.export(Lookup(), torch.randint(0, 10, (4, 5)), ')" << dir << R"(/lookup.onnx', opset_version=13,
                  input_names=['x'], output_names=['y'], training=torch.onnx.TrainingMode.TRAINING,
                  do_constant_folding=False)
)";
  auto e = run_command(python() + " " + dir + "/export.py");
  ASSERT_EQ(e.exit_code, 0) << e.output;
  auto r = run_command(graphrun_cli() + " check " + dir + "/lookup.onnx");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("random batch: the export's own batch, since at another size node '/Reshape' (Reshape)"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("verdict: trainable"), std::string::npos) << r.output;
  r = run_command(graphrun_cli() + " check " + dir + "/lookup.onnx --dims N=5");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("verdict: not checked: the gradient check cannot run: node '/Reshape'"), std::string::npos)
      << r.output;
}

// Weights that sit on a corner of the loss, which no smaller step leaves: a zeroed layer before a ReLU
// (PyTorch's spatial transformer tutorial zeroes its localisation net's last layer, and its identity grid
// then samples exactly at pixel centres, bilinear interpolation's corners). The backward takes ReLU's
// derivative at 0 as 0, the central difference sees half the slope: the check fails there, runs again at
// weights moved by 1e-4 of each tensor's scale, and passes. A wrong gradient fails at both points
// (CheckCli.BrokenGradientRuleFailsTheNumericCheck).
TEST(CheckCli, WeightsOnACornerAreCheckedAgainJustOffIt) {
  const std::string dir = temp_dir("check_cli_corner");
  const std::string path = dir + "/corner.onnx";
  std::ofstream(dir + "/corner.py")
      << "import numpy as np, onnx\n"
         "from onnx import helper as h, numpy_helper as nh, TensorProto as T\n"
         "r = np.random.default_rng(5)\n"
         "inits = [nh.from_array(np.zeros((4, 4), np.float32), 'z'),\n"
         "         nh.from_array(r.standard_normal((4, 4)).astype(np.float32), 'w')]\n"
         "g = h.make_graph([h.make_node('MatMul', ['x', 'z'], ['m'], name='zeroed'),\n"
         "                  h.make_node('Relu', ['m'], ['r'], name='relu'),\n"
         "                  h.make_node('MatMul', ['r', 'w'], ['y'], name='head')], 'corner',\n"
         "                 [h.make_tensor_value_info('x', T.FLOAT, ['N', 4])],\n"
         "                 [h.make_tensor_value_info('y', T.FLOAT, ['N', 4])], inits)\n"
         "onnx.save(h.make_model(g, opset_imports=[h.make_opsetid('', 17)]), '" << path << "')\n";
  ASSERT_EQ(run_command(python() + " " + dir + "/corner.py").exit_code, 0);
  auto r = run_command(graphrun_cli() + " check " + path);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("FAILED\nat weights moved by 1e-4 of each tensor's scale"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\nverdict: trainable"), std::string::npos) << r.output;
}

// MeanVarianceNormalization has no kernel of its own: the spec defines it as a function of ReduceMean, Pow,
// Sub, Sqrt, Div (its schema's body), which the loader inlines, so it runs and differentiates as those.
TEST(CheckCli, AnOpTheSpecDefinesAsAFunctionIsInlinedAndTrainable) {
  const std::string dir = temp_dir("check_cli_mvn");
  const std::string model = make_model(dir, "mvn",
      "[h.make_node('MatMul', ['x', 'w'], ['m'], name='mm'),"
      " h.make_node('MeanVarianceNormalization', ['m'], ['n'], name='mvn', axes=[0, 1]),"
      " h.make_node('Mul', ['n', 's'], ['y'], name='scale')]");
  auto r = run_command(graphrun_cli() + " check " + model);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("ops without a kernel: none"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\nverdict: trainable"), std::string::npos) << r.output;
}

// A loss that does not move with the weights beyond rounding (MeanVarianceNormalization per column of m and of m
// times |s| per column, which differ only through its 1e-9 epsilon, subtracted) has a directional derivative of
// about 1e-11 and central differences of rounding noise: the check says both lie below what the differences resolve and
// passes (it failed such a model with "relative error 1e-4"). A broken rule inside the normalisation gives a backward
// far above that floor: still caught.
TEST(CheckCli, ALossFlatBeyondRoundingPassesAndABrokenRuleInItStillFails) {
  const std::string dir = temp_dir("check_cli_flat");
  const std::string model =
      make_model(dir, "flat",
                 "[h.make_node('MatMul', ['x', 'w'], ['m'], name='mm'),"
                 " h.make_node('Abs', ['s'], ['a'], name='abs'),"
                 " h.make_node('Mul', ['m', 'a'], ['m2'], name='scale'),"
                 " h.make_node('MeanVarianceNormalization', ['m'], ['n1'], name='mvn1', axes=[0]),"
                 " h.make_node('MeanVarianceNormalization', ['m2'], ['n2'], name='mvn2', axes=[0]),"
                 " h.make_node('Sub', ['n1', 'n2'], ['y'], name='sub')]");
  auto r = run_command(graphrun_cli() + " check " + model);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("both below what central differences resolve here"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("the loss does not change with the weights beyond rounding"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\nverdict: trainable"), std::string::npos) << r.output;
  auto broken = run_command("GRAPHRUN_TEST_BREAK_GRADIENT=Sqrt " + graphrun_cli() + " check " + model + " 2>&1");
  EXPECT_EQ(broken.exit_code, 1) << broken.output;
  EXPECT_EQ(broken.output.find("both below"), std::string::npos) << broken.output;
  EXPECT_NE(broken.output.find("verdict: not trainable"), std::string::npos) << broken.output;
}

}  // namespace
}  // namespace graphrun::testing

// graphrun check: each exit status (0 trainable, 1 check failed, 2 cannot load), the complete lists of
// nodes without a kernel or a gradient rule, and a deliberately broken gradient rule caught by the
// numeric gradient check.
#include <gtest/gtest.h>

#include <fstream>

#include "tests/test_util.h"

namespace graphrun::testing {
namespace {

// Writes an ONNX model built by onnx.helper: `nodes` is Python for the list of nodes; x is f32 [N, 4]
// and y the output, w a [4, 4] and s, b [4] float initializers.
std::string make_model(const std::string& dir, const std::string& name, const std::string& nodes,
                       const std::string& output_shape = "['N', 4]") {
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
            "onnx.save(h.make_model(g, opset_imports=[h.make_opsetid('', 17)]), '" << path << "')\n";
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

TEST(CheckCli, ListsEveryNodeWithoutAGradientRuleOrKernel) {
  const std::string dir = temp_dir("check_cli_missing");
  // Mod has a kernel but no rule (twice); Det has neither (twice).
  const std::string norule = make_model(
      dir, "norule",
      "[h.make_node('MatMul', ['x', 'w'], ['m'], name='mm'),"
      " h.make_node('Mod', ['m', 'x'], ['p1'], name='mod_a', fmod=1),"
      " h.make_node('Mod', ['x', 'm'], ['p2'], name='mod_b', fmod=1),"
      " h.make_node('Add', ['p1', 'p2'], ['msum'], name='add'),"
      " h.make_node('ReduceMean', ['msum'], ['y'], name='mean', axes=[1], keepdims=1)]",
      "['N', 1]");
  auto r = run_command(graphrun_cli() + " check " + norule);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("ops without a gradient rule on the path to the outputs: 2\n"
                          "  no gradient rule for op 'Mod' (node 'mod_a')\n"
                          "  no gradient rule for op 'Mod' (node 'mod_b')\n"),
            std::string::npos) << r.output;
  EXPECT_NE(r.output.find("verdict: not trainable: gradient rules are missing"), std::string::npos) << r.output;

  const std::string nokernel = make_model(
      dir, "nokernel",
      "[h.make_node('Reshape', ['w', 'sh'], ['w3'], name='reshape'),"
      " h.make_node('Det', ['w3'], ['d1'], name='det_a'),"
      " h.make_node('Det', ['w3'], ['d2'], name='det_b'),"
      " h.make_node('Add', ['d1', 'd2'], ['d'], name='add'),"
      " h.make_node('Mul', ['x', 'd'], ['y'], name='mul'),"
      " h.make_node('Constant', [], ['sh'], name='shape', value=nh.from_array(np.array([1, 4, 4], np.int64)))]");
  r = run_command(graphrun_cli() + " check " + nokernel);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("ops without a kernel: 2\n  op 'Det' (node 'det_a')\n  op 'Det' (node 'det_b')\n"),
            std::string::npos) << r.output;
  EXPECT_NE(r.output.find("no gradient rule for op 'Det' (node 'det_a')\n  no gradient rule for op 'Det' (node 'det_b')"),
            std::string::npos) << r.output;
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

}  // namespace
}  // namespace graphrun::testing

// --freeze: frozen parameters get no gradient, no AllReduce and no update; unknown names are errors.
#include <gtest/gtest.h>

#include "graph/onnx_io.h"
#include "runtime/trainer.h"
#include "tests/test_util.h"
#include "tests/trainer_test_util.h"

namespace graphrun {
namespace {

using runtime::TrainOptions;
using runtime::Trainer;
using testing::lenet_path;
using testing::quick;

TEST(TrainerFreeze, FrozenParametersAreUnchangedAndNotReduced) {
  REQUIRE_LENET_AND_DATA();
  Graph model = load_onnx(lenet_path());
  TrainOptions o = quick(2, 32, 5, 200);
  o.lr = 0.05;
  o.pipeline.freeze = {"conv1.weight", "conv1.bias"};
  ASSERT_TRUE(model.initializers.count("conv1.weight"));
  Trainer t(model, o);
  for (const Node& n : t.graphs().replicas[0].graph.nodes)
    for (const auto& in : n.inputs) EXPECT_NE(in, "conv1.weight_grad") << n.name;
  t.train_epoch(0);
  for (int d = 0; d < 2; ++d) {
    EXPECT_EQ(testing::max_abs_diff(t.replica(d).state("conv1.weight"), model.initializers.at("conv1.weight")), 0);
    EXPECT_EQ(testing::max_abs_diff(t.replica(d).state("conv1.bias"), model.initializers.at("conv1.bias")), 0);
  }
  EXPECT_GT(testing::max_abs_diff(t.replica(0).state("conv2.weight"), model.initializers.at("conv2.weight")), 0);
}

// --freeze conv1 freezes the module's parameters, conv1.weight and conv1.bias, from the command line.
TEST(TrainerFreeze, CliFreezesAModuleByItsPrefix) {
  REQUIRE_LENET_AND_DATA();
  const std::string d = testing::temp_dir("trainer_freeze_module");
  const std::string run = testing::graphrun_cli() + " train " + lenet_path() +
                          " --devices cpu:2 --threads 1 --batch-size 32 --max-steps 3 --epochs 1 --lr 0.05 --save " + d +
                          "/m.onnx";
  auto r = testing::run_command(run + " --freeze conv1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Graph a = load_onnx(lenet_path()), b = load_onnx(d + "/m.onnx");
  for (const char* p : {"conv1.weight", "conv1.bias"})
    EXPECT_EQ(testing::max_abs_diff(b.initializers.at(p), a.initializers.at(p)), 0) << p;
  EXPECT_GT(testing::max_abs_diff(b.initializers.at("conv2.weight"), a.initializers.at("conv2.weight")), 0);
  r = testing::run_command(run + " --freeze conv");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("no parameter named 'conv' (parameters: "), std::string::npos) << r.output;
}

// A parameter the loss does not reach (the other head of a two-output model under --loss-output) is
// left alone, as torch leaves a parameter whose .grad is None: before, it got no gradient but still its
// weight decay (Adam's L2 turned that into steps of about lr, moving it by its own size in 6 steps).
TEST(TrainerFreeze, ParametersTheLossDoesNotReachAreNotDecayed) {
  const std::string d = testing::temp_dir("trainer_unreached");
  auto made = testing::run_command(
      "cd '" + d + "' && " + testing::python() + " -c \"" +
      "import numpy as np, onnx; from onnx import helper as h, numpy_helper as nh, TensorProto as T; "
      "r = np.random.default_rng(0); f = lambda *s: r.standard_normal(s).astype(np.float32); "
      "g = h.make_graph([h.make_node('Gemm', ['x', 'wm', 'bm'], ['main'], transB=1), "
      "h.make_node('Gemm', ['x', 'wa', 'ba'], ['aux'], transB=1)], 'heads', "
      "[h.make_tensor_value_info('x', T.FLOAT, ['N', 4])], "
      "[h.make_tensor_value_info('aux', T.FLOAT, ['N', 2]), h.make_tensor_value_info('main', T.FLOAT, ['N', 3])], "
      "[nh.from_array(f(3, 4), 'wm'), nh.from_array(f(3), 'bm'), nh.from_array(f(2, 4), 'wa'), nh.from_array(f(2), 'ba')]); "
      "onnx.save(h.make_model(g, opset_imports=[h.make_opsetid('', 13)]), 'heads.onnx'); "
      "x = f(40, 4); np.savez('data.npz', x=x, labels=(x[:, 0] > 0).astype(np.int64) + (x[:, 1] > 0))\"");
  ASSERT_EQ(made.exit_code, 0) << made.output;
  for (const char* opt : {" --optimizer adam --weight-decay 0.05", " --momentum 0.9 --weight-decay 0.05",
                          " --optimizer adamw --weight-decay 0.05"}) {
    auto r = testing::run_command(testing::graphrun_cli() + " train " + d + "/heads.onnx --data " + d +
                                  "/data.npz --val-split 0.25 --loss-output main --devices cpu:2 --threads 1 --epochs 3 "
                                  "--batch-size 10 --lr 0.1 --save " + d + "/t.onnx" + opt + " 2>&1");
    ASSERT_EQ(r.exit_code, 0) << opt << "\n" << r.output;
    EXPECT_NE(r.output.find("the loss does not reach 2 parameters (ba, wa): not trained"), std::string::npos) << r.output;
    const Graph a = load_onnx(d + "/heads.onnx"), b = load_onnx(d + "/t.onnx");
    for (const char* p : {"wa", "ba"}) EXPECT_EQ(testing::max_abs_diff(b.initializers.at(p), a.initializers.at(p)), 0) << opt << p;
    EXPECT_GT(testing::max_abs_diff(b.initializers.at("wm"), a.initializers.at("wm")), 0) << opt;
  }
}

TEST(TrainerFreeze, UnknownNamesAreRefusedListingNothingTrained) {
  REQUIRE_LENET_AND_DATA();
  TrainOptions o = quick(1, 32, 1);
  o.pipeline.freeze = {"conv9.weight"};
  try {
    Trainer t(load_onnx(lenet_path()), o);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no parameter named 'conv9.weight'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace graphrun

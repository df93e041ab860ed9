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

// Forward parity with PyTorch for every model in models/: graphrun's output on random batches must match
// the torch module the model was exported from (tests/python/forward_reference.py) within 1e-4 of the output scale.
#include <gtest/gtest.h>

#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "graph/onnx_io.h"
#include "graph/tensor_io.h"
#include "runtime/executor.h"
#include "tests/test_util.h"

namespace graphrun {
namespace {

namespace fs = std::filesystem;
using testing::python;
using testing::run_command;

struct ModelCase {
  std::string name;
  bool generated;  // exported by the build into build/models/ rather than committed
  std::vector<int> batches;
};

// gtest prints parameters in test names (and ctest lists them): the model's name says enough.
void PrintTo(const ModelCase& m, std::ostream* os) { *os << m.name; }

std::string model_path(const ModelCase& m) {
  return m.generated ? testing::binary_dir() + "/models/" + m.name + ".onnx"
                     : testing::source_dir() + "/models/" + m.name + ".onnx";
}

class ModelParity : public ::testing::TestWithParam<ModelCase> {};

TEST_P(ModelParity, MatchesPyTorchForward) {
  const ModelCase& m = GetParam();
  const std::string onnx_file = model_path(m);
  if (!fs::exists(onnx_file)) {
    if (m.generated)
      GTEST_SKIP() << onnx_file << " was not generated (the build exports it when " << python()
                   << " has torch and onnx; `make generated_models`)";
    FAIL() << onnx_file << " is missing";
  }
  std::string dir = testing::temp_dir("models_test_" + m.name);
  std::string batches;
  for (int b : m.batches) batches += (batches.empty() ? "" : ",") + std::to_string(b);
  auto ref = run_command(python() + " " + testing::source_dir() + "/tests/python/forward_reference.py " + m.name + " " +
                         onnx_file + " " + dir + " --batches " + batches);
  ASSERT_EQ(ref.exit_code, 0) << ref.output;

  Graph g = load_onnx(onnx_file);
  ASSERT_EQ(g.inputs, std::vector<std::string>{"image"});
  ASSERT_EQ(g.outputs, std::vector<std::string>{"logits"});
  runtime::ExecOptions opts;
  opts.threads = 2;
  runtime::Executor ex(g, opts);
  for (int b : m.batches) {
    SCOPED_TRACE(m.name + " batch " + std::to_string(b));
    Tensor x = read_npy(dir + "/x_" + std::to_string(b) + ".npy");
    Tensor want = read_npy(dir + "/logits_" + std::to_string(b) + ".npy");
    ASSERT_EQ(want.shape(), (Shape{b, 10}));
    Tensor got = ex.run({{"image", x}}).at("logits");
    ASSERT_EQ(got.dtype(), DType::F32);
    ASSERT_EQ(got.shape(), want.shape());
    // The output scale is max|want| itself (LeNet's logits are ~1e-5 at its randn*0.01 initialisation,
    // so a floor of 1 as in testing::max_rel_diff would make the comparison vacuous).
    double scale = testing::max_abs_diff(want, Tensor(DType::F32, want.shape()));
    ASSERT_GT(scale, 0.0) << "reference output is all zeros";
    double err = testing::max_abs_diff(got, want) / scale;
    std::cout << m.name << " batch " << b << ": max abs error " << err * scale << " (" << err
              << " of the output scale " << scale << ")\n";
    EXPECT_LE(err, 1e-4) << "max abs error relative to the output scale " << scale << "; got " << got.str()
                         << ", want " << want.str();
  }
}

INSTANTIATE_TEST_SUITE_P(Models, ModelParity,
                         ::testing::Values(ModelCase{"lenet", false, {16, 3}}, ModelCase{"simplecnn", false, {16, 3}},
                                           ModelCase{"resnet18", true, {4, 3}}),
                         [](const ::testing::TestParamInfo<ModelCase>& i) { return i.param.name; });

}  // namespace
}  // namespace graphrun

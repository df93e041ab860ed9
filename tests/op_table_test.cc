// The op table (graph/op_table.h): every family file registered, no fact claimed twice, the facts
// consistent with one another and with the ONNX schemas, and docs/ops.md generated from it.
#include <gtest/gtest.h>
#include <onnx/defs/schema.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>

#include "graph/graphrun_schemas.h"
#include "graph/op_docs.h"
#include "graph/op_table.h"
#include "runtime/device.h"
#include "runtime/kernel.h"
#include "tests/test_util.h"

namespace graphrun {
namespace {

namespace fs = std::filesystem;

// The stems of the files in `dir` (under the source root) ending in `ext`, except `skip`.
std::set<std::string> family_files(const std::string& dir, const std::string& ext, const std::set<std::string>& skip = {}) {
  std::set<std::string> r;
  for (const auto& e : fs::directory_iterator(testing::source_dir() + "/" + dir))
    if (e.path().extension() == ext && !skip.count(e.path().stem().string())) r.insert(e.path().stem().string());
  return r;
}

// The families that registered `fact` for some op.
std::set<std::string> families_with(const std::string& fact) {
  std::set<std::string> r;
  for (const auto& [key, f] : op_table().ops())
    if (!f.family_of(fact).empty()) r.insert(f.family_of(fact));
  return r;
}

// Every family file's registrar ran: a file the linker dropped (a library not linked whole) or one
// that forgot GR_REGISTER_OPS shows up here, named.
TEST(OpTable, EveryFamilyFileRegistersItsOps) {
  // gemm.cc, conv_direct.cc and half_compute.cc are no families: the GEMM and the direct convolution that conv
  // and linalg call, and the float16/bfloat16 widening that wraps float kernels.
  EXPECT_EQ(families_with("CPU kernel"),
            family_files("runtime/kernels/cpu", ".cc", {"gemm", "conv_direct", "half_compute"}));
  EXPECT_EQ(families_with("gradient"), family_files("autodiff/rules", ".cc", {"rules"}));
  if (runtime::cuda_backend())
    EXPECT_EQ(families_with("CUDA kernel"), family_files("runtime/kernels/cuda", ".cu", {"common"}));
  else
    EXPECT_TRUE(families_with("CUDA kernel").empty()) << "CUDA kernels registered in a build without CUDA";
}

// Two families claiming one fact of one op is an error naming the op, the fact and both families.
void add_a(runtime::KernelContext&) {}
void add_b(runtime::KernelContext&) {}
TEST(OpTable, AFactRegisteredTwiceIsOneClearError) {
  auto first = [](OpRegistrar& ops) { ops.op("Add").cpu(add_a).host_inputs({1}); };
  auto second = [](OpRegistrar& ops) { ops.op("ai.onnx", "Add").cpu(add_b); };
  auto other_device = [](OpRegistrar& ops) { ops.op("Add").cuda(add_b); };
  try {
    build_op_table({{"first", first}, {"second", second}});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "the op table has conflicting registrations:\n"
              "  op Add: its CPU kernel is registered twice (family first and family second)");
  }
  OpTable t = build_op_table({{"b_cuda", other_device}, {"a_cpu", first}});
  const OpFacts* add = t.find("Add");
  ASSERT_NE(add, nullptr);
  EXPECT_EQ(add->kernel(Device::Kind::CPU), &add_a);
  EXPECT_EQ(add->kernel(Device::Kind::CUDA), &add_b);
  EXPECT_EQ(add->host_inputs, std::vector<int>{1});
  EXPECT_EQ(add->family_of("CUDA kernel"), "b_cuda");
  EXPECT_EQ(t.find("Sub"), nullptr);
}

// The kernel tables the executor and the trainer use are views of the table's columns; host inputs
// come from the one declaration whichever table is asked.
TEST(OpTable, KernelTablesAreViewsOfTheTable) {
  const runtime::KernelTable& cpu = runtime::cpu_kernels();
  std::vector<std::string> want;
  for (const auto& [key, f] : op_table().ops())
    if (f.kernel(Device::Kind::CPU)) want.push_back(key);
  EXPECT_EQ(cpu.ops(), want);
  EXPECT_EQ(cpu.host_inputs("Reshape"), std::vector<int>{1});
  EXPECT_EQ(cpu.host_inputs("Slice"), (std::vector<int>{1, 2, 3, 4}));
  EXPECT_TRUE(cpu.host_inputs("Add").empty());
  runtime::KernelTable custom;
  custom.add("Reshape", op_table().find("Reshape")->kernel(Device::Kind::CPU));
  EXPECT_EQ(custom.host_inputs("Reshape"), std::vector<int>{1});
  if (runtime::DeviceBackend* cuda = runtime::cuda_backend()) {
    std::vector<std::string> cuda_ops;
    for (const auto& [key, f] : op_table().ops())
      if (f.kernel(Device::Kind::CUDA)) cuda_ops.push_back(key);
    EXPECT_EQ(cuda->kernels().ops(), cuda_ops);
  }
}

// Host inputs are integer inputs of the op (a shape, axes, pads, starts, repeats, a count): each
// declared position exists in the op's schema and admits int64. A typo (Reshape's data, an input past
// the end) fails here rather than as a device kernel reading device memory on the host.
TEST(OpTable, HostInputsAreIntegerInputsOfTheSchema) {
  register_graphrun_schemas();
  int checked = 0;
  for (const auto& [key, f] : op_table().ops()) {
    if (f.host_inputs.empty()) continue;
    const onnx::OpSchema* s = onnx::OpSchemaRegistry::Schema(f.op, f.domain.empty() ? "" : f.domain);
    ASSERT_NE(s, nullptr) << key << ": no ONNX schema";
    for (int i : f.host_inputs) {
      // Inputs that opset 18 added, newer than the ONNX library graphrun builds with (1.12, opset 17).
      static const std::set<std::pair<std::string, int>> opset18 = {
          {"Pad", 3},         {"ReduceL1", 1},     {"ReduceL2", 1},  {"ReduceLogSum", 1}, {"ReduceLogSumExp", 1},
          {"ReduceMax", 1},   {"ReduceMean", 1},   {"ReduceMin", 1}, {"ReduceProd", 1},   {"ReduceSumSquare", 1}};
      if (s->inputs().size() <= static_cast<size_t>(i) && s->SinceVersion() < 18 && opset18.count({key, i})) continue;
      ASSERT_LT(static_cast<size_t>(i), s->inputs().size()) << key << ": host input " << i << " is past its inputs";
      const auto& types = s->inputs()[i].GetTypes();
      bool int64 = false;
      for (const auto* t : types) int64 |= *t == "tensor(int64)";
      EXPECT_TRUE(int64) << key << ": host input " << i << " ('" << s->inputs()[i].GetName() << "') takes no int64";
      ++checked;
    }
  }
  EXPECT_GE(checked, 20);
}

TEST(OpTable, HostShapeOpsRunWithTheirCpuKernel) {
  for (const auto& [key, f] : op_table().ops()) {
    EXPECT_TRUE(!f.host_shapes || f.kernel(Device::Kind::CPU)) << key << " is a host shape op without a CPU kernel";
    EXPECT_TRUE(!f.metadata_only || f.host_shapes) << key;
  }
  EXPECT_TRUE(op_table().find("Shape")->metadata_only);
  EXPECT_TRUE(op_table().find("Concat")->host_shapes);
  EXPECT_FALSE(op_table().find("Conv")->host_shapes);
}

// graphrun's own ops: a schema (what onnx::checker sees) and a CPU kernel for each, and ONNX knows them.
TEST(OpTable, GraphrunOpsHaveASchemaAndACpuKernel) {
  register_graphrun_schemas();
  int n = 0;
  for (const auto& [key, f] : op_table().ops()) {
    if (f.domain != kGraphrunDomain) {
      EXPECT_FALSE(f.schema) << key << ": schemas are for ai.graphrun ops (ONNX has the others')";
      continue;
    }
    ++n;
    EXPECT_TRUE(f.schema) << key << " has no schema";
    EXPECT_NE(f.kernel(Device::Kind::CPU), nullptr) << key << " has no CPU kernel";
    EXPECT_NE(onnx::OpSchemaRegistry::Schema(f.op, 1, kGraphrunDomain), nullptr) << key;
  }
  EXPECT_GE(n, 8);
}

// A gradient rule is checked numerically by running the op on the CPU (tests/autodiff_rules_test.cc).
TEST(OpTable, EveryRuleHasACpuKernel) {
  for (const auto& [key, f] : op_table().ops())
    EXPECT_TRUE(f.gradient != GradientKind::Rule || f.kernel(Device::Kind::CPU)) << key << " has a rule but no CPU kernel";
}

// docs/ops.md holds the table between its "generated" markers, never edited by hand: a new op, a
// kernel on another device, a rule (or an op left without one) changes it.
// GRAPHRUN_UPDATE_DOCS=1 rewrites the file.
TEST(OpTable, DocsOpsMdIsGeneratedFromTheTable) {
  // The file's CUDA column comes from a build with the CUDA backend (.ci/run's); one without it (the
  // sanitizer jobs') registers no CUDA kernel, not even Add's, and cannot regenerate that column.
  if (!op_table().find("Add")->kernel(Device::Kind::CUDA))
    GTEST_SKIP() << "built without CUDA: docs/ops.md's CUDA column needs a build with -DGRAPHRUN_CUDA=ON";
  const std::string path = testing::source_dir() + "/docs/ops.md";
  std::ifstream in(path);
  ASSERT_TRUE(in) << "cannot read " << path;
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string doc = ss.str();
  const std::string begin = "<!-- generated from the op table: do not edit; see tests/op_table_test.cc -->\n";
  const std::string end = "<!-- end of generated part -->";
  const size_t b = doc.find(begin), e = doc.find(end);
  ASSERT_TRUE(b != std::string::npos && e != std::string::npos && b < e) << path << " lacks the generated markers";
  const std::string want = op_table_markdown(op_table());
  const std::string have = doc.substr(b + begin.size(), e - b - begin.size());
  if (have != want && std::getenv("GRAPHRUN_UPDATE_DOCS")) {
    std::ofstream(path) << doc.substr(0, b + begin.size()) << want << doc.substr(e);
    std::cout << "rewrote " << path << "\n";
    return;
  }
  EXPECT_EQ(have, want) << path << " is out of date: run GRAPHRUN_UPDATE_DOCS=1 build/tests/op_table_test "
                        << "--gtest_filter=OpTable.DocsOpsMdIsGeneratedFromTheTable and commit the result";
}

}  // namespace
}  // namespace graphrun

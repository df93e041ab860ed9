// Executor: planning, memory reuse, state updates, input validation, unsupported ops.
#include <gtest/gtest.h>

#include "runtime/executor.h"
#include "tests/test_util.h"

namespace graphrun {
namespace {

TEST(Executor, ReportsEveryUnsupportedOpWithNodeNames) {
  Graph g;
  g.opsets[""] = 17;
  g.inputs = {"x"};
  g.outputs = {"z"};
  g.nodes.push_back(Node{"a", "FancyOp", "", {"x"}, {"y"}, {}});
  g.nodes.push_back(Node{"b", "OtherOp", "", {"y"}, {"z"}, {}});
  try {
    runtime::Executor ex(g);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("FancyOp"), std::string::npos) << m;
    EXPECT_NE(m.find("'a'"), std::string::npos) << m;
    EXPECT_NE(m.find("OtherOp"), std::string::npos) << m;
    EXPECT_NE(m.find("'b'"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace graphrun

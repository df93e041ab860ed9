// The executor's static memory plan on LeNet: liveness-based reuse packs the intermediates into an arena
// well below their total size, and steady-state runs reuse that arena (same buffers, same results).
#include <gtest/gtest.h>

#include <cstring>
#include <iostream>

#include "graph/onnx_io.h"
#include "runtime/executor.h"
#include "tests/test_util.h"

namespace graphrun {
namespace {

Graph lenet() { return load_onnx(testing::source_dir() + "/models/lenet.onnx"); }

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

TEST(MemoryPlan, LeNetArenaIsWellBelowTheSumOfIntermediates) {
  runtime::Executor ex(lenet());
  Tensor x = testing::random_tensor({64, 1, 28, 28}, 7, 0.f, 1.f);
  ex.run({{"image", x}});
  runtime::PlanStats s = ex.plan_stats();
  std::cout << "LeNet batch 64: arena " << s.arena_bytes << " bytes for " << s.intermediate_bytes << " bytes of "
            << s.values << " intermediates\n";
  // LeNet at batch 64: conv1's output alone is 64*20*26*26*4 = 3.5 MB and every stage's output is
  // dead two nodes later, so the sum of all intermediates is several times the live peak.
  EXPECT_GT(s.values, 10);
  EXPECT_GE(s.intermediate_bytes, size_t{64} * 20 * 26 * 26 * 4 * 2);  // at least conv1 + relu1
  EXPECT_GT(s.arena_bytes, size_t{0});
  EXPECT_LT(s.arena_bytes, s.intermediate_bytes / 2)
      << "arena " << s.arena_bytes << " bytes for " << s.intermediate_bytes << " bytes of intermediates";
  // The live peak includes conv1's output and its relu (or the in-place equivalent): the plan cannot be smaller.
  EXPECT_GE(s.arena_bytes, size_t{64} * 20 * 26 * 26 * 4);
}

TEST(MemoryPlan, SteadyStateRunsReuseTheArena) {
  runtime::Executor ex(lenet());
  Tensor x = testing::random_tensor({32, 1, 28, 28}, 11, 0.f, 1.f);
  Tensor first = ex.run({{"image", x}}).at("logits").clone();  // planning run
  runtime::PlanStats planned = ex.plan_stats();

  Tensor second = ex.run({{"image", x}}).at("logits");
  const void* arena_buffer = second.raw();
  EXPECT_TRUE(same_bytes(second, first)) << second.str() << " vs " << first.str();
  Tensor second_copy = second.clone();

  Tensor third = ex.run({{"image", x}}).at("logits");
  EXPECT_EQ(third.raw(), arena_buffer) << "a steady-state run allocated a new output buffer";
  EXPECT_TRUE(same_bytes(third, second_copy));
  EXPECT_EQ(ex.plan_stats().arena_bytes, planned.arena_bytes);

  // Another batch size gets a plan of its own; returning to the first reuses the first plan's arena.
  Tensor y = testing::random_tensor({5, 1, 28, 28}, 12, 0.f, 1.f);
  Tensor other = ex.run({{"image", y}}).at("logits");
  EXPECT_EQ(other.shape(), (Shape{5, 10}));
  ex.run({{"image", y}});
  EXPECT_LT(ex.plan_stats().arena_bytes, planned.arena_bytes);
  Tensor back = ex.run({{"image", x}}).at("logits");
  EXPECT_EQ(back.raw(), arena_buffer);
  EXPECT_TRUE(same_bytes(back, first));
}

// Views: a reshaped value shares its input's buffer, and that buffer lives as long as the view does.
// Here `a` is last read by the Reshape (step 1), but its view `v` is read at step 4: were `a`'s buffer
// free after step 1, Neg's output would take it and overwrite `v`.
Graph view_graph() {
  Graph g;
  g.name = "views";
  g.opsets[""] = 17;
  g.inputs = {"x"};
  g.initializers["sq"] = Tensor::from_vector<int64_t>({2}, {8, 8});
  g.initializers["axes"] = Tensor::from_vector<int64_t>({1}, {0});
  g.nodes = {Node{"relu", "Relu", "", {"x"}, {"a"}, {}},
             Node{"view", "Reshape", "", {"a", "sq"}, {"v"}, {}},
             Node{"neg", "Neg", "", {"x"}, {"c"}, {}},
             Node{"view2", "Reshape", "", {"c", "sq"}, {"c2"}, {}},
             Node{"unsq", "Unsqueeze", "", {"v", "axes"}, {"v3"}, {}},   // a view of a view
             Node{"add", "Add", "", {"v3", "c2"}, {"out"}, {}}};
  g.outputs = {"out"};
  return g;
}

TEST(MemoryPlan, ReshapesAreViewsThatKeepTheirBaseAlive) {
  const std::map<std::string, Tensor> feeds{{"x", testing::random_tensor({64}, 13)}};
  runtime::ExecOptions copies;
  copies.views = false;
  runtime::Executor with(view_graph()), without(view_graph(), copies);
  Tensor want = without.run(feeds).at("out").clone();
  for (int run = 0; run < 3; ++run) {  // the planning run copies; planned runs are views
    Tensor got = with.run(feeds).at("out");
    EXPECT_TRUE(same_bytes(got, want)) << "run " << run << ": " << got.str() << " vs " << want.str();
  }
  without.run(feeds);
  EXPECT_EQ(with.plan_stats().views, 3);
  EXPECT_EQ(without.plan_stats().views, 0);
}

}  // namespace
}  // namespace graphrun

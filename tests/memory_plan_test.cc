// The executor's static memory plan on LeNet: liveness-based reuse packs the intermediates into an arena
// well below their total size, and steady-state runs reuse that arena (same buffers, same results).
#include <gtest/gtest.h>

#include <cstring>
#include <iostream>

#include "graph/onnx_io.h"
#include "runtime/executor.h"
#include "runtime/planning_pool.h"
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

// The planning run's buffers come from one pool: freed space is reused best-fit and coalesced, so the
// run touches about its live peak; the arena then takes the start of the same range.
TEST(PlanningPool, ReusesFreedSpaceBestFitAndCoalesces) {
  auto pool = runtime::PlanningPool::create(size_t(64) << 20);
  ASSERT_TRUE(pool);
  // Buffers take 64-byte granules (and, in ASan builds, a red zone after them).
  auto take = [](size_t n) { return (n + 63) / 64 * 64 + runtime::PlanningPool::kRedZoneBytes; };
  auto a = pool->allocate(1000), b = pool->allocate(4096), c = pool->allocate(100);
  char* base = static_cast<char*>(a.get());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(base) % (size_t(2) << 20), 0u) << "the range starts on a 2 MiB page";
  const size_t at_b = take(1000), at_c = at_b + take(4096), end = at_c + take(100);
  EXPECT_EQ(static_cast<char*>(b.get()), base + at_b);
  EXPECT_EQ(static_cast<char*>(c.get()), base + at_c);
  EXPECT_EQ(pool->high_water(), end);
  EXPECT_EQ(pool->live(), end);
  a.reset();
  auto d = pool->allocate(512);  // fits where a was
  EXPECT_EQ(static_cast<char*>(d.get()), base);
  b.reset();
  d.reset();  // [0, at_c) free again, in one piece
  auto e = pool->allocate(at_c - 64 - runtime::PlanningPool::kRedZoneBytes);  // leaves 64 bytes of it free
  EXPECT_EQ(static_cast<char*>(e.get()), base);
  EXPECT_EQ(pool->high_water(), end);
  c.reset();  // c's space joins e's 64-byte tail, a free block that reaches the end
  const size_t tail = at_c - 64;
  auto f = pool->allocate(end - tail - runtime::PlanningPool::kRedZoneBytes);  // exactly that block
  EXPECT_EQ(static_cast<char*>(f.get()), base + tail);
  EXPECT_EQ(pool->high_water(), end);
  f.reset();
  auto g = pool->allocate(10000);  // no free block fits: it grows from the one that reaches the end
  EXPECT_EQ(static_cast<char*>(g.get()), base + tail);
  EXPECT_EQ(pool->high_water(), tail + take(10000));
  EXPECT_FALSE(pool->allocate(size_t(65) << 20)) << "more than the range";
  EXPECT_EQ(pool->live(), tail + take(10000));
}

TEST(PlanningPool, TheArenaKeepsThePagesThePlanningRunTouched) {
  auto pool = runtime::PlanningPool::create(size_t(64) << 20);
  ASSERT_TRUE(pool);
  auto held = pool->allocate(size_t(8) << 20);
  EXPECT_FALSE(pool->take_as_arena(size_t(4) << 20)) << "a buffer still in use would alias the arena";
  EXPECT_FALSE(pool->allocate(64)) << "a pool hands out nothing once the arena was decided";

  pool = runtime::PlanningPool::create(size_t(64) << 20);
  auto buf = pool->allocate(size_t(8) << 20);
  char* at = static_cast<char*>(buf.get());
  for (size_t i = 0; i < (size_t(8) << 20); i += 4096) at[i] = static_cast<char>(i >> 12 | 1);
  buf.reset();
  EXPECT_FALSE(runtime::PlanningPool::create(size_t(64) << 20)->take_as_arena(size_t(65) << 20));
  std::shared_ptr<void> arena = pool->take_as_arena(size_t(6) << 20);
  ASSERT_TRUE(arena);
  EXPECT_EQ(arena.get(), static_cast<void*>(at));
  bool kept = true;  // the same pages, not a fresh zeroed mapping
  for (size_t i = 0; i < (size_t(6) << 20); i += 4096) kept &= at[i] == static_cast<char>(i >> 12 | 1);
  EXPECT_TRUE(kept);
  pool.reset();  // the arena keeps the range
  at[(size_t(6) << 20) - 1] = 1;
}

TEST(MemoryPlan, PlanningRunTouchesAboutThePeakAndTheArenaTakesItsPages) {
  runtime::Executor ex(lenet());
  Tensor x = testing::random_tensor({64, 1, 28, 28}, 7, 0.f, 1.f);
  Tensor first = ex.run({{"image", x}}).at("logits").clone();
  runtime::PlanStats s = ex.plan_stats();
  EXPECT_TRUE(s.arena_in_pool);
  EXPECT_GE(s.planning_peak_bytes, size_t{64} * 20 * 26 * 26 * 4);  // conv1's output at least
  std::cout << "LeNet batch 64: the planning run touched " << s.planning_peak_bytes << " bytes (arena "
            << s.arena_bytes << ", all intermediates " << s.intermediate_bytes << ")\n";
  EXPECT_LT(s.planning_peak_bytes, s.intermediate_bytes * 3 / 4);
  for (int run = 0; run < 2; ++run)  // planned runs on the pool's pages give the planning run's bits
    EXPECT_TRUE(same_bytes(ex.run({{"image", x}}).at("logits"), first));

  // Fetched values and state-update sources keep buffers of their own (they outlive the run), so they
  // do not keep the arena from taking the pool.
  Graph g;
  g.name = "state";
  g.opsets[""] = 17;
  g.inputs = {"x"};
  g.initializers["w"] = testing::random_tensor({1 << 20}, 3);
  g.nodes = {Node{"relu", "Relu", "", {"x"}, {"a"}, {}}, Node{"add", "Add", "", {"a", "w"}, {"w_new"}, {}},
             Node{"neg", "Neg", "", {"w_new"}, {"y"}, {}}};
  g.outputs = {"y"};
  runtime::ExecOptions o;
  o.state_updates = {{"w_new", "w"}};
  runtime::Executor st(g, o);
  Tensor in = testing::random_tensor({1 << 20}, 4);
  const float w0 = st.state("w").data<float>()[7], x7 = std::max(0.f, in.data<float>()[7]);
  for (int run = 1; run <= 3; ++run) {
    Tensor y = st.run({{"x", in}}).at("y");
    EXPECT_FLOAT_EQ(st.state("w").data<float>()[7], w0 + run * x7);
    EXPECT_FLOAT_EQ(y.data<float>()[7], -(w0 + run * x7));
  }
  EXPECT_TRUE(st.plan_stats().arena_in_pool);
}

}  // namespace
}  // namespace graphrun

// The executor's static memory plan on LeNet: liveness-based reuse packs the intermediates into an arena
// well below their total size, and steady-state runs reuse that arena (same buffers, same results).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <iostream>
#include <regex>

#include "graph/onnx_io.h"
#include "runtime/executor.h"
#include "runtime/pipeline.h"
#include "runtime/planning_pool.h"
#include "runtime/profile.h"
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

// The inputs of a training replica's graph at `batch` examples: the declared shapes with every symbolic
// dimension the batch, uniform [0, 1) floats, zero integers (class 0, step 0).
std::map<std::string, Tensor> training_inputs(const Graph& g, int64_t batch) {
  std::map<std::string, Tensor> in;
  for (const std::string& name : g.inputs) {
    const ValueInfo& vi = g.values.at(name);
    Shape s;
    for (const Dim& d : vi.shape) s.push_back(d.known() ? d.size : batch);
    in[name] = vi.dtype == DType::F32 ? testing::random_tensor(s, 5, 0.f, 1.f) : Tensor(vi.dtype, s);
  }
  return in;
}

// Before a first run, a CPU executor counts what that run will hold from the graph's shapes with the
// inputs' symbols sized: a lower bound of the run's own peak (so a memory limit below it refuses no run
// that would fit), close to it on the models graphrun ships, and a limit below it stops the run before
// any kernel runs (a batch too large for the machine used to find out at the limit, minutes into its
// first step). Products of symbols, as a reshape's inferred dimensions are, are sized too.
TEST(MemoryPlan, ShapesBoundTheFirstRunBeforeItRuns) {
  const std::vector<std::string> models = {testing::source_dir() + "/models/lenet.onnx",
                                           testing::source_dir() + "/models/simplecnn.onnx",
                                           testing::binary_dir() + "/models/resnet18.onnx"};
  int between = 0;  // models whose scratch leaves room for a limit between the count and the peak
  for (const std::string& path : models) {
    if (!std::filesystem::exists(path)) {
      std::cout << "skipping " << path << ": not generated\n";
      continue;
    }
    runtime::PipelineOptions po;
    po.executor_passes = true;
    const runtime::TrainingGraphs tg = runtime::build_training_graphs(load_onnx(path), po);
    const runtime::DeviceGraph& dg = tg.replicas[0];
    runtime::ExecOptions o;
    o.state_updates = dg.state_updates;
    runtime::Executor ex(dg.graph, o);
    const auto in = training_inputs(dg.graph, 64);
    ex.run(in);
    const runtime::PlanStats s = ex.plan_stats();
    std::cout << path << " at 64 examples: " << s.static_peak_bytes << " bytes counted before the first run, "
              << s.planning_live_peak_bytes << " held at most in it\n";
    EXPECT_LE(s.static_peak_bytes, s.planning_live_peak_bytes) << path;
    EXPECT_GE(s.static_peak_bytes, s.planning_live_peak_bytes / 100 * 85) << path;  // scratch is the rest

    // The message of a first run under `limit` (it must stop).
    const auto stopped_under = [&](size_t limit, runtime::ProfileTrack* track) {
      o.profile = track;
      o.memory_limit = limit;
      o.memory_hint = "lower --batch-size";
      runtime::Executor limited(dg.graph, o);
      try {
        limited.run(in);
      } catch (const Error& e) {
        return std::string(e.what());
      }
      ADD_FAILURE() << path << ": ran under a limit of " << limit;
      return std::string();
    };
    // A limit under the count: one line naming the count, and no kernel ran.
    runtime::Profiler prof;
    runtime::ProfileTrack& track = prof.track("replica");
    std::string m = stopped_under(s.static_peak_bytes - 1, &track);
    EXPECT_NE(m.find("the first run needs more than"), std::string::npos) << m;
    EXPECT_NE(m.find("by the shapes of its values, counted before it runs; by that count at most "), std::string::npos) << m;
    EXPECT_NE(m.find("could fit); lower --batch-size"), std::string::npos) << m;
    // The most that could fit, by the count: M along the batch's symbol fits the limit and M + 1 does not.
    std::smatch most;
    ASSERT_TRUE(std::regex_search(m, most, std::regex("at most ([0-9]+) of its 64 along '([^']+)' could fit"))) << m;
    const int64_t M = std::stoll(most[1]);
    EXPECT_LE(ex.static_peak_bytes_at({{most[2], M}}), s.static_peak_bytes - 1) << m;
    EXPECT_GT(ex.static_peak_bytes_at({{most[2], M + 1}}), s.static_peak_bytes - 1) << m;
    EXPECT_TRUE(track.events().empty()) << path << ": " << track.events().size() << " events";

    // A limit between the count and the run's peak (scratch makes the difference): the run stops at the
    // node whose buffer would cross it.
    if (s.planning_live_peak_bytes - s.static_peak_bytes < 4096) continue;
    ++between;
    m = stopped_under((s.static_peak_bytes + s.planning_live_peak_bytes) / 2, nullptr);
    EXPECT_NE(m.find("the first run needs more than"), std::string::npos) << m;
    EXPECT_NE(m.find(" held, "), std::string::npos) << m;
    EXPECT_EQ(m.find("counted before it runs"), std::string::npos) << m;
  }
  EXPECT_GE(between, 1);  // SimpleCNN's and ResNet-18's convolutions take scratch

  // x [N, 8] -> Reshape -> [4*N, 2] -> Relu: the symbol's product is sized, 4 * 1000 * 2 floats each.
  Graph g;
  g.name = "products";
  g.opsets[""] = 17;
  g.inputs = {"x"};
  g.values["x"] = ValueInfo{DType::F32, true, {Dim("N"), 8}};
  g.initializers["to"] = Tensor::from_vector<int64_t>({2}, {-1, 2});
  g.values["r"] = ValueInfo{DType::F32, true, {Dim("4*N"), 2}};
  g.values["y"] = ValueInfo{DType::F32, true, {Dim("4*N"), 2}};
  g.nodes = {Node{"reshape", "Reshape", "", {"x", "to"}, {"r"}, {}}, Node{"relu", "Relu", "", {"r"}, {"y2"}, {}},
             Node{"neg", "Neg", "", {"y2"}, {"y"}, {}}};
  g.values["y2"] = g.values["y"];
  g.outputs = {"y"};
  runtime::Executor ex(g);
  ex.run({{"x", testing::random_tensor({1000, 8}, 3)}});
  // The reshape is a view and y is fetched (a buffer of its own): Relu's output is what the pool holds.
  EXPECT_EQ(ex.plan_stats().static_peak_bytes, size_t{4} * 1000 * 2 * 4);
  EXPECT_LE(ex.plan_stats().static_peak_bytes, ex.plan_stats().planning_live_peak_bytes);
}

}  // namespace
}  // namespace graphrun

// Executor: planning, memory reuse, state updates, input validation, errors naming nodes.
// Uses a private kernel table so it tests the executor alone, not the CPU kernels.
#include <gtest/gtest.h>

#include <cstring>
#include <thread>

#include "runtime/device.h"
#include "runtime/executor.h"
#include "tests/test_util.h"

namespace graphrun {
namespace {

using runtime::Executor;
using runtime::ExecOptions;
using runtime::KernelContext;
using runtime::KernelTable;

// out = in + 1 (f32), using a scratch buffer so scratch planning is exercised too.
void add_one(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  float* tmp = static_cast<float*>(ctx.scratch(x.nbytes()));
  for (int64_t i = 0; i < x.numel(); ++i) tmp[i] = x.data<float>()[i] + 1.f;
  Tensor& y = ctx.output(0, x.shape(), DType::F32);
  std::memcpy(y.data<float>(), tmp, x.nbytes());
}

// out = a + b (same shape)
void add(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  GR_CHECK(a.shape() == b.shape(), "shapes differ");
  Tensor& y = ctx.output(0, a.shape(), DType::F32);
  for (int64_t i = 0; i < a.numel(); ++i) y.data<float>()[i] = a.data<float>()[i] + b.data<float>()[i];
}

void fails(KernelContext&) { GR_FAIL("bad attribute"); }

const KernelTable& test_table() {
  static KernelTable t = [] {
    KernelTable k;
    k.add("AddOne", add_one);
    k.add("Add", add);
    k.add("Fails", fails);
    return k;
  }();
  return t;
}

Node node(const std::string& name, const std::string& op, std::vector<std::string> in, std::vector<std::string> out) {
  return testing::make_node(name, op, std::move(in), std::move(out));
}

// x -> a1 -> a2 -> ... -> a{n}: a chain where each intermediate dies right after use.
Graph chain(int n) {
  Graph g;
  g.opsets[""] = 17;
  g.inputs = {"x"};
  ValueInfo vi;
  vi.dtype = DType::F32;
  vi.has_shape = true;
  vi.shape = {Dim(std::string("N")), Dim(64)};
  g.values["x"] = vi;
  std::string prev = "x";
  for (int i = 1; i <= n; ++i) {
    std::string v = "a" + std::to_string(i);
    g.nodes.push_back(node("n" + std::to_string(i), "AddOne", {prev}, {v}));
    prev = v;
  }
  g.outputs = {prev};
  return g;
}

ExecOptions opts() {
  ExecOptions o;
  o.kernels = &test_table();
  return o;
}

TEST(Executor, ReportsEveryUnsupportedOpWithNodeNames) {
  Graph g;
  g.opsets[""] = 17;
  g.inputs = {"x"};
  g.outputs = {"z"};
  g.nodes.push_back(node("a", "FancyOp", {"x"}, {"y"}));
  g.nodes.push_back(node("b", "OtherOp", {"y"}, {"z"}));
  try {
    Executor ex(g);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("FancyOp"), std::string::npos) << m;
    EXPECT_NE(m.find("'a'"), std::string::npos) << m;
    EXPECT_NE(m.find("OtherOp"), std::string::npos) << m;
    EXPECT_NE(m.find("'b'"), std::string::npos) << m;
  }
}

TEST(Executor, ChainComputesAndReusesMemory) {
  Executor ex(chain(10), opts());
  Tensor x = testing::random_tensor({8, 64}, 1);
  auto out = ex.run({{"x", x}});
  const Tensor& y = out.at("a10");
  for (int64_t i = 0; i < x.numel(); ++i) EXPECT_FLOAT_EQ(y.data<float>()[i], x.data<float>()[i] + 10.f);
  auto st = ex.plan_stats();
  // 10 values and 10 scratch buffers of 2 KiB; at most two values and one scratch are alive at once.
  EXPECT_EQ(st.values, 10);
  EXPECT_EQ(st.intermediate_bytes, 20u * 8 * 64 * 4);
  EXPECT_LE(st.arena_bytes, 3u * 8 * 64 * 4);
}

TEST(Executor, SteadyStateReusesThePlannedBuffers) {
  Executor ex(chain(4), opts());
  Tensor x = testing::random_tensor({8, 64}, 2);
  ex.run({{"x", x}});  // planning run
  auto second = ex.run({{"x", x}});
  const void* p = second.at("a4").raw();
  auto third = ex.run({{"x", x}});
  EXPECT_EQ(third.at("a4").raw(), p);
  EXPECT_EQ(testing::max_abs_diff(second.at("a4"), third.at("a4")), 0.0);
}

TEST(Executor, NewInputShapeGetsItsOwnPlan) {
  Executor ex(chain(3), opts());
  auto a = ex.run({{"x", testing::random_tensor({8, 64}, 3)}});
  EXPECT_EQ(a.at("a3").shape(), (Shape{8, 64}));
  Tensor x2 = testing::random_tensor({3, 64}, 4);
  auto b = ex.run({{"x", x2}});
  ASSERT_EQ(b.at("a3").shape(), (Shape{3, 64}));
  b = ex.run({{"x", x2}});
  EXPECT_FLOAT_EQ(b.at("a3").data<float>()[5], x2.data<float>()[5] + 3.f);
}

// y = x + w, then w += 1 (the state update w_new -> w): a counter held as state.
Graph counter_graph() {
  Graph g;
  g.opsets[""] = 17;
  g.inputs = {"x"};
  g.initializers["w"] = Tensor::from_vector<float>({2}, {1.f, 2.f});
  g.nodes.push_back(node("inc", "AddOne", {"w"}, {"w_new"}));
  g.nodes.push_back(node("use", "Add", {"x", "w"}, {"y"}));
  g.outputs = {"y"};
  return g;
}

TEST(Executor, StateUpdatesPersistAcrossRuns) {
  const Graph g = counter_graph();
  ExecOptions o = opts();
  o.state_updates = {{"w_new", "w"}};
  Executor ex(g, o);
  Tensor x = Tensor::from_vector<float>({2}, {0.f, 0.f});
  for (int step = 0; step < 3; ++step) {
    auto out = ex.run({{"x", x}});
    // y reads w before this step's update.
    EXPECT_FLOAT_EQ(out.at("y").data<float>()[0], 1.f + step);
  }
  EXPECT_FLOAT_EQ(ex.state("w").data<float>()[0], 4.f);
  EXPECT_FLOAT_EQ(ex.state("w").data<float>()[1], 5.f);
}

// The state is the executor's own: a graph it is given (an rvalue) lends it the initializers only it
// holds, without a copy; one whose tensors anything else shares (the caller's graph, a copy of it) is
// copied, so training never changes a graph behind its holder's back.
TEST(Executor, AGivenGraphLendsOnlyTheInitializersNothingElseHolds) {
  ExecOptions o = opts();
  o.state_updates = {{"w_new", "w"}};
  const Tensor x = Tensor::from_vector<float>({2}, {0.f, 0.f});

  Graph lent = counter_graph();
  const void* lent_w = lent.initializers.at("w").raw();
  Executor sole(std::move(lent), o);
  EXPECT_EQ(sole.state("w").raw(), lent_w);  // no copy

  const Graph kept = counter_graph();
  for (int how = 0; how < 2; ++how) {
    Graph copy = kept;  // shares kept's tensors
    std::unique_ptr<Executor> ex =
        how == 0 ? std::make_unique<Executor>(kept, o) : std::make_unique<Executor>(std::move(copy), o);
    EXPECT_NE(ex->state("w").raw(), kept.initializers.at("w").raw()) << how;
    for (int step = 0; step < 3; ++step) ex->run({{"x", x}});
    EXPECT_FLOAT_EQ(ex->state("w").data<float>()[0], 4.f) << how;
    EXPECT_EQ(kept.initializers.at("w").to_vector<float>(), (std::vector<float>{1.f, 2.f})) << how;
  }
}

// A CPU AllReduce writes each sum into its gradient's buffer where nothing reads the gradient after it (a
// bucket of one, or a tensor of 2^20 values, sums in place, without the bucket copy); a gradient read later
// keeps its own buffer. Two
// replicas on the CPU's communicators, each run three times (the planning run, then planned runs).
TEST(Executor, AllReduceSumsIntoTheGradientsBufferWhereNothingReadsItLater) {
  Graph g;
  g.opsets[""] = 17;
  g.opsets[kGraphrunDomain] = 1;
  g.inputs = {"x"};
  g.nodes.push_back(node("g1", "Mul", {"x", "x"}, {"g1"}));
  g.nodes.push_back(node("g2", "Add", {"x", "x"}, {"g2"}));
  g.nodes.push_back(node("g3", "Mul", {"x", "x"}, {"g3"}));
  Node ar = node("ar", "AllReduce", {"g1", "g2"}, {"s1", "s2"});
  ar.domain = kGraphrunDomain;
  g.nodes.push_back(ar);
  g.inputs.push_back("xb");
  g.nodes.push_back(node("gb", "Mul", {"xb", "xb"}, {"gb"}));  // 2^20 values: summed where it lies, beside s3
  Node ar2 = node("ar2", "AllReduce", {"g3", "gb"}, {"s3", "sb"});
  ar2.domain = kGraphrunDomain;
  g.nodes.push_back(ar2);
  g.nodes.push_back(node("late", "Add", {"g2", "s2"}, {"z"}));  // g2 is read after its sum
  g.nodes.push_back(node("a1", "Add", {"s1", "z"}, {"a1"}));
  g.nodes.push_back(node("a2", "Add", {"a1", "s3"}, {"y"}));
  g.outputs = {"y", "sb"};
  for (bool async : {false, true}) {
    auto comms = runtime::cpu_backend()->make_communicators({Device{}, Device{Device::Kind::CPU, 1}});
    std::vector<std::vector<float>> got(2), big(2);
    std::vector<int> views(2);
    std::vector<std::thread> replicas;
    for (int r = 0; r < 2; ++r)
      replicas.emplace_back([&, r] {
        ExecOptions o;
        o.comm = comms[r].get();
        o.async_kernels = async;
        Executor ex(g, o);
        const Tensor x = Tensor::from_vector<float>({4}, std::vector<float>(4, r + 1.f));
        const Tensor xb = Tensor::from_vector<float>({1 << 20}, std::vector<float>(1 << 20, r + 1.f));
        for (int step = 0; step < 3; ++step) {
          auto out = ex.run({{"x", x}, {"xb", xb}});
          got[r] = out.at("y").to_vector<float>();
          big[r] = out.at("sb").to_vector<float>();
        }
        views[r] = ex.plan_stats().views;
      });
    for (auto& t : replicas) t.join();
    for (int r = 0; r < 2; ++r) {
      // s1 = s3 = 1 + 4, s2 = 2 + 4, z = 2 (r + 1) + s2.
      EXPECT_EQ(got[r], std::vector<float>(4, 5.f + 2.f * (r + 1) + 6.f + 5.f)) << r << " async " << async;
      EXPECT_EQ(big[r], std::vector<float>(1 << 20, 5.f)) << r << " async " << async;
      EXPECT_EQ(views[r], 3) << "s1, s3 and sb take their gradients' buffers, s2 one of its own; async " << async;
    }
  }
}

// An initializer no state update writes is read only: a host executor borrows the graph's tensor rather
// than copying it (an evaluation of a large model holds its weights once), and set_state copies it first,
// so the graph never changes.
TEST(Executor, ReadOnlyInitializersAreBorrowedAndSetStateCopiesThemFirst) {
  Graph kept = counter_graph();
  kept.nodes.erase(kept.nodes.begin());  // no update of w: "use" reads it only
  Executor ex(kept, opts());
  EXPECT_EQ(ex.state("w").raw(), kept.initializers.at("w").raw());
  const Tensor x = Tensor::from_vector<float>({2}, {0.5f, 0.5f});
  EXPECT_EQ(ex.run({{"x", x}}).at("y").to_vector<float>(), (std::vector<float>{1.5f, 2.5f}));
  ex.set_state("w", Tensor::from_vector<float>({2}, {5.f, 6.f}));
  EXPECT_NE(ex.state("w").raw(), kept.initializers.at("w").raw());
  EXPECT_EQ(kept.initializers.at("w").to_vector<float>(), (std::vector<float>{1.f, 2.f}));
  EXPECT_EQ(ex.run({{"x", x}}).at("y").to_vector<float>(), (std::vector<float>{5.5f, 6.5f}));
}

// A state update whose producer is the state's last reader and may overwrite it (the optimizer updates, plain
// SGD's Sub) writes the state's own buffer: one buffer per parameter and optimizer buffer, nothing swapped. A
// state read after its update keeps two buffers: that reader sees this step's value, not the next step's.
TEST(Executor, StateUpdatesAreWrittenInPlaceWhereTheUpdateIsTheStatesLastReader) {
  Graph g;
  g.opsets[""] = 17;
  g.opsets[kTrainingDomain] = 1;
  g.inputs = {"x"};
  g.initializers["w"] = Tensor::from_vector<float>({3}, {1.f, 2.f, 3.f});
  g.initializers["v"] = Tensor::from_vector<float>({3}, {0.f, 0.f, 0.f});
  g.initializers["b"] = Tensor::from_vector<float>({3}, {10.f, 20.f, 30.f});
  g.initializers["c"] = Tensor::from_vector<float>({3}, {5.f, 6.f, 7.f});
  g.initializers["lr"] = Tensor::from_vector<float>({}, {0.5f});
  g.initializers["t"] = Tensor::from_vector<int64_t>({}, {1});
  g.nodes.push_back(node("fwd", "Mul", {"x", "w"}, {"y"}));
  Node mom = node("mom", "Momentum", {"lr", "t", "w", "x", "v"}, {"w_new", "v_new"});
  mom.domain = kTrainingDomain;
  mom.attrs["alpha"] = Attribute::Float(0.9f);
  mom.attrs["beta"] = Attribute::Float(1.f);
  mom.attrs["norm_coefficient"] = Attribute::Float(0.f);
  mom.attrs["mode"] = Attribute::Str("standard");
  g.nodes.push_back(mom);
  g.nodes.push_back(node("sgd", "Sub", {"b", "x"}, {"b_new"}));
  g.nodes.push_back(node("csub", "Sub", {"c", "x"}, {"c_new"}));
  g.nodes.push_back(node("late", "Add", {"c", "x"}, {"z"}));
  g.outputs = {"y", "z"};
  ExecOptions o;
  o.state_updates = {{"w_new", "w"}, {"v_new", "v"}, {"b_new", "b"}, {"c_new", "c"}};
  Executor ex(g, o);
  const void* before[3] = {ex.state("w").raw(), ex.state("v").raw(), ex.state("b").raw()};
  const void* c_before = ex.state("c").raw();
  const Tensor x = Tensor::from_vector<float>({3}, {1.f, 2.f, 4.f});
  std::vector<float> w = {1.f, 2.f, 3.f}, v(3, 0.f), b = {10.f, 20.f, 30.f}, c = {5.f, 6.f, 7.f};
  bool c_moved = false;
  for (int step = 0; step < 3; ++step) {
    auto out = ex.run({{"x", x}});
    for (int i = 0; i < 3; ++i) {
      const float xi = x.data<float>()[i];
      EXPECT_FLOAT_EQ(out.at("y").data<float>()[i], xi * w[i]) << step;  // this step's weights
      EXPECT_FLOAT_EQ(out.at("z").data<float>()[i], c[i] + xi) << step;  // c before its update
      v[i] = 0.9f * v[i] + xi;
      w[i] -= 0.5f * v[i];
      b[i] -= xi;
      c[i] -= xi;
    }
    EXPECT_EQ(ex.state("w").to_vector<float>(), w) << step;
    EXPECT_EQ(ex.state("v").to_vector<float>(), v) << step;
    EXPECT_EQ(ex.state("b").to_vector<float>(), b) << step;
    EXPECT_EQ(ex.state("c").to_vector<float>(), c) << step;
    EXPECT_EQ(ex.state("w").raw(), before[0]) << step;
    EXPECT_EQ(ex.state("v").raw(), before[1]) << step;
    EXPECT_EQ(ex.state("b").raw(), before[2]) << step;
    c_moved |= ex.state("c").raw() != c_before;
  }
  EXPECT_TRUE(c_moved) << "c is read after its update: its new value needs a buffer of its own";
}

TEST(Executor, RejectsMissingWrongAndUnknownInputs) {
  Executor ex(chain(2), opts());
  auto msg = [&](const std::map<std::string, Tensor>& in) {
    try {
      ex.run(in);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(msg({}).find("missing input 'x'"), std::string::npos);
  EXPECT_NE(msg({{"x", testing::random_tensor({8, 63}, 1)}}).find("shape [N,64]"), std::string::npos);
  EXPECT_NE(msg({{"x", testing::random_int_tensor({8, 64}, 1, 0, 3)}}).find("must be f32"), std::string::npos);
  EXPECT_NE(msg({{"x", testing::random_tensor({8, 64}, 1)}, {"z", Tensor()}}).find("'z' is not an input"),
            std::string::npos);
}

TEST(Executor, KernelErrorsNameTheNode) {
  Graph g = chain(1);
  g.nodes.push_back(node("broken", "Fails", {"a1"}, {"b"}));
  g.outputs = {"b"};
  Executor ex(g, opts());
  try {
    ex.run({{"x", testing::random_tensor({2, 64}, 1)}});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "node 'broken' (Fails): bad attribute");
  }
}

TEST(Executor, FetchesIntermediateValues) {
  ExecOptions o = opts();
  o.fetch = {"a1", "a3"};
  Executor ex(chain(3), o);
  Tensor x = testing::random_tensor({2, 64}, 5);
  for (int i = 0; i < 2; ++i) {
    auto out = ex.run({{"x", x}});
    EXPECT_FLOAT_EQ(out.at("a1").data<float>()[7], x.data<float>()[7] + 1.f);
    EXPECT_FLOAT_EQ(out.at("a3").data<float>()[7], x.data<float>()[7] + 3.f);
  }
}

}  // namespace
}  // namespace graphrun

// Asynchronous kernels in the executor (KernelContext::defer): completions run before the first
// reader, the planner keeps an async node's buffers until then, errors name the node. Uses a private
// kernel table whose async kernel copies its input on a thread of its own after a delay, so a buffer
// reused too early shows as a wrong value.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>

#include "runtime/executor.h"
#include "tests/test_util.h"

namespace graphrun {
namespace {

using runtime::Executor;
using runtime::ExecOptions;
using runtime::KernelContext;
using runtime::KernelTable;

std::mutex log_mu;
std::vector<std::string> events;
void log_event(const std::string& e) {
  std::lock_guard<std::mutex> l(log_mu);
  events.push_back(e);
}

// Buffers seen by the kernels in the latest run: (begin, end) of the async node's input and of
// the value produced right after it.
std::pair<const char*, const char*> async_input, double_output;
std::pair<const char*, const char*> range(const Tensor& t) {
  const char* p = static_cast<const char*>(t.raw());
  return {p, p + t.nbytes()};
}
bool overlap(std::pair<const char*, const char*> a, std::pair<const char*, const char*> b) {
  return a.first < b.second && b.first < a.second;
}

void add_one(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.output(0, x.shape(), DType::F32);
  for (int64_t i = 0; i < x.numel(); ++i) y.data<float>()[i] = x.data<float>()[i] + 1.f;
  log_event(ctx.node().name);
}

void twice(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.output(0, x.shape(), DType::F32);
  for (int64_t i = 0; i < x.numel(); ++i) y.data<float>()[i] = 2.f * x.data<float>()[i];
  double_output = range(y);
  log_event(ctx.node().name);
}

void add(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  Tensor& y = ctx.output(0, a.shape(), DType::F32);
  for (int64_t i = 0; i < a.numel(); ++i) y.data<float>()[i] = a.data<float>()[i] + b.data<float>()[i];
  log_event(ctx.node().name);
}

// y = x, copied 30 ms later by a thread of its own (through a scratch buffer, so that scratch
// lifetimes are exercised too); synchronously when the executor does not allow async kernels.
void slow_copy(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.output(0, x.shape(), DType::F32);
  async_input = range(x);
  const size_t bytes = x.nbytes();
  char* tmp = static_cast<char*>(ctx.scratch(bytes));
  const char* src = static_cast<const char*>(x.raw());
  char* dst = static_cast<char*>(y.raw());
  auto work = [src, dst, tmp, bytes] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    std::memcpy(tmp, src, bytes);
    std::memcpy(dst, tmp, bytes);
  };
  log_event("start " + ctx.node().name);
  if (!ctx.async_allowed()) {
    work();
    log_event("complete " + ctx.node().name);
    return;
  }
  auto th = std::make_shared<std::thread>(work);
  std::string name = ctx.node().name;
  ctx.defer([th, name] {
    th->join();
    log_event("complete " + name);
  });
}

// Defers a completion that fails, as a communication thread reporting an error would.
void async_fails(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  ctx.output(0, x.shape(), DType::F32);
  ctx.defer([] {
    log_event("complete failing");
    GR_FAIL("the background copy failed");
  });
}

void fails(KernelContext&) { GR_FAIL("bad attribute"); }

const KernelTable& table() {
  static KernelTable t = [] {
    KernelTable k;
    k.add("AddOne", add_one);
    k.add("Twice", twice);
    k.add("Add", add);
    k.add("SlowCopy", slow_copy);
    k.add("AsyncFails", async_fails);
    k.add("Fails", fails);
    return k;
  }();
  return t;
}

Node node(const std::string& name, const std::string& op, std::vector<std::string> in, std::vector<std::string> out) {
  return testing::make_node(name, op, std::move(in), std::move(out));
}

// t1 = x + 1; y = slow copy of t1; t2 = 2x; t3 = t2 + 1; out = y + t3 = 3x + 2.
// t1's last reader is the copy, so without the async rule t2 may take t1's memory while the
// copy has not yet read it.
Graph reuse_graph() {
  Graph g;
  g.opsets[""] = 17;
  g.inputs = {"x"};
  g.nodes.push_back(node("t1", "AddOne", {"x"}, {"t1"}));
  g.nodes.push_back(node("copy", "SlowCopy", {"t1"}, {"y"}));
  g.nodes.push_back(node("t2", "Twice", {"x"}, {"t2"}));
  g.nodes.push_back(node("t3", "AddOne", {"t2"}, {"t3"}));
  g.nodes.push_back(node("out", "Add", {"y", "t3"}, {"out"}));
  g.outputs = {"out"};
  return g;
}

ExecOptions opts(bool async) {
  ExecOptions o;
  o.kernels = &table();
  o.async_kernels = async;
  return o;
}

TEST(AsyncExec, InputOfAnAsyncNodeIsNotReusedBeforeItsCompletion) {
  Tensor x = testing::random_tensor({16, 256}, 1);
  for (bool async : {false, true}) {
    Executor ex(reuse_graph(), opts(async));
    for (int run = 0; run < 3; ++run) {  // the planning run, then planned runs in the arena
      Tensor out = ex.run({{"x", x}}).at("out");
      for (int64_t i = 0; i < x.numel(); ++i)
        ASSERT_EQ(out.data<float>()[i], 3.f * x.data<float>()[i] + 2.f) << "async " << async << ", run " << run;
    }
    EXPECT_EQ(ex.plan_stats().async_nodes, async ? 1 : 0);
    // The scenario is real: synchronously, t2 takes t1's memory; asynchronously it must not.
    EXPECT_EQ(overlap(async_input, double_output), !async) << "async " << async;
  }
}

TEST(AsyncExec, CompletionRunsRightBeforeTheFirstReader) {
  Executor ex(reuse_graph(), opts(true));
  Tensor x = testing::random_tensor({4, 8}, 2);
  for (int run = 0; run < 2; ++run) {
    events.clear();
    ex.run({{"x", x}});
    // t2 and t3 run while the copy is in flight; `out` reads y, so the completion comes just before it.
    EXPECT_EQ(events, (std::vector<std::string>{"t1", "start copy", "t2", "t3", "complete copy", "out"}));
  }
}

TEST(AsyncExec, UnreadOutputsCompleteAtTheEndAndAreFetched) {
  Graph g = reuse_graph();
  ExecOptions o = opts(true);
  o.fetch = {"y", "t3"};
  g.nodes.pop_back();  // nothing reads y: its completion runs at the end of run()
  g.outputs = {"y", "t3"};
  Executor ex(g, o);
  Tensor x = testing::random_tensor({8, 32}, 3);
  for (int run = 0; run < 3; ++run) {
    events.clear();
    auto r = ex.run({{"x", x}});
    EXPECT_EQ(events.back(), "complete copy");
    for (int64_t i = 0; i < x.numel(); ++i) ASSERT_EQ(r.at("y").data<float>()[i], x.data<float>()[i] + 1.f);
  }
}

TEST(AsyncExec, ANodeReadRightAfterItStaysSynchronous) {
  Graph g = reuse_graph();
  std::swap(g.nodes[1], g.nodes[2]);  // t1, t2, copy, t3, out
  std::swap(g.nodes[3], g.nodes[4]);  // ..., copy, out, t3: out reads y right after the copy
  g.nodes[3].inputs = {"y", "t2"};
  Executor ex(g, opts(true));
  Tensor x = testing::random_tensor({4, 8}, 6);
  for (int run = 0; run < 2; ++run) {
    events.clear();
    Tensor out = ex.run({{"x", x}}).at("out");
    EXPECT_EQ(events, (std::vector<std::string>{"t1", "t2", "start copy", "complete copy", "out", "t3"}));
    EXPECT_EQ(out.data<float>()[3], 3.f * x.data<float>()[3] + 1.f);
  }
  EXPECT_EQ(ex.plan_stats().async_nodes, 0);
}

TEST(AsyncExec, CompletionErrorsNameTheNode) {
  Graph g;
  g.opsets[""] = 17;
  g.inputs = {"x"};
  g.nodes.push_back(node("bucket", "AsyncFails", {"x"}, {"y"}));
  g.nodes.push_back(node("after", "AddOne", {"x"}, {"z"}));
  g.nodes.push_back(node("reader", "Add", {"y", "z"}, {"out"}));
  g.outputs = {"out"};
  Executor ex(g, opts(true));
  events.clear();
  try {
    ex.run({{"x", testing::random_tensor({2, 4}, 4)}});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "node 'bucket' (AsyncFails): the background copy failed");
  }
  EXPECT_EQ(events, (std::vector<std::string>{"after", "complete failing"}));  // the reader never ran
}

TEST(AsyncExec, AKernelFailingWhileWorkIsInFlightWaitsForItFirst) {
  Graph g = reuse_graph();
  g.nodes.insert(g.nodes.begin() + 2, node("broken", "Fails", {"x"}, {"b"}));
  Executor ex(g, opts(true));
  events.clear();
  try {
    ex.run({{"x", testing::random_tensor({2, 4}, 5)}});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "node 'broken' (Fails): bad attribute");
  }
  // The copy thread still wrote the executor's memory when the error came: run() waited for it.
  EXPECT_EQ(events.back(), "complete copy");
}

}  // namespace
}  // namespace graphrun

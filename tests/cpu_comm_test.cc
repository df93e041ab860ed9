// The in-process CPU communicator: allreduce, broadcast and barrier with 1-4 threads, determinism, abort;
// allreduce_sum_async (bitwise the blocking result) and its errors reaching the AllReduce node.
#include <gtest/gtest.h>

#include <cstring>
#include <thread>

#include "runtime/comm/cpu_comm.h"
#include "runtime/comm/replica_aborted.h"
#include "runtime/executor.h"
#include "tests/test_util.h"

namespace graphrun {
namespace {

using runtime::CpuCommGroup;
using runtime::Executor;
using runtime::ExecOptions;

// Runs f(rank) on `n` threads and joins them.
template <class F>
void on_ranks(int n, F f) {
  std::vector<std::thread> ts;
  for (int r = 0; r < n; ++r) ts.emplace_back([&, r] { f(r); });
  for (auto& t : ts) t.join();
}

TEST(CpuComm, AllreduceSumsOverRanks) {
  for (int n = 1; n <= 4; ++n)
    for (int64_t count : {1, 5, 16, 17, 1000, 100003}) {
      auto group = CpuCommGroup::create(n);
      std::vector<std::vector<float>> data(n);
      for (int r = 0; r < n; ++r) {
        data[r].resize(count);
        for (int64_t i = 0; i < count; ++i) data[r][i] = float(r + 1) * 0.5f + float(i % 7);
      }
      on_ranks(n, [&](int r) {
        for (int rep = 0; rep < 3; ++rep) group->rank(r)->allreduce_sum(data[r].data(), count);
      });
      for (int r = 0; r < n; ++r)
        for (int64_t i = 0; i < count; ++i) {
          // Three allreduces multiply each sum by n twice more.
          double want = (0.25 * n * (n + 1) + n * double(i % 7)) * n * n;
          ASSERT_NEAR(data[r][i], want, 1e-4 * want) << "n=" << n << " count=" << count << " rank " << r << " i " << i;
        }
    }
}

TEST(CpuComm, AllreduceIsBitwiseIdenticalOnEveryRankAndEveryRun) {
  const int n = 3;
  const int64_t count = 4099;
  std::vector<float> first;
  for (int run = 0; run < 5; ++run) {
    auto group = CpuCommGroup::create(n);
    std::vector<Tensor> data;
    for (int r = 0; r < n; ++r) data.push_back(testing::random_tensor({count}, 10 + r, -1e3f, 1e3f));
    on_ranks(n, [&](int r) { group->rank(r)->allreduce_sum(data[r].data<float>(), count); });
    for (int r = 1; r < n; ++r) EXPECT_EQ(0, std::memcmp(data[0].raw(), data[r].raw(), data[0].nbytes()));
    std::vector<float> got = data[0].to_vector<float>();
    if (run == 0) first = got;
    EXPECT_EQ(first, got);
  }
}

TEST(CpuComm, BroadcastCopiesTheRootsData) {
  for (int n = 1; n <= 4; ++n) {
    auto group = CpuCommGroup::create(n);
    std::vector<std::vector<float>> data(n, std::vector<float>(33));
    for (int r = 0; r < n; ++r)
      for (int i = 0; i < 33; ++i) data[r][i] = float(r * 100 + i);
    const int root = n - 1;
    on_ranks(n, [&](int r) { group->rank(r)->broadcast(data[r].data(), 33, root); group->rank(r)->barrier(); });
    for (int r = 0; r < n; ++r) EXPECT_EQ(data[r], data[root]);
  }
}

TEST(CpuComm, AbortReleasesWaitingRanks) {
  auto group = CpuCommGroup::create(3);
  std::atomic<int> failed{0};
  on_ranks(3, [&](int r) {
    if (r == 2) { group->abort(); return; }
    std::vector<float> v(10, 1.f);
    try {
      group->rank(r)->allreduce_sum(v.data(), 10);
    } catch (const runtime::ReplicaAborted& e) {  // typed: the trainer tells echoes from causes by it
      ++failed;
      EXPECT_NE(std::string(e.what()).find("another replica failed"), std::string::npos);
    }
  });
  EXPECT_EQ(failed.load(), 2);
}

TEST(CpuComm, MismatchedCountsAreAnError) {
  auto group = CpuCommGroup::create(2);
  std::atomic<int> failed{0};
  on_ranks(2, [&](int r) {
    std::vector<float> v(10 + r, 1.f);
    try {
      group->rank(r)->allreduce_sum(v.data(), 10 + r);
    } catch (const Error&) {
      ++failed;
      group->abort();
    }
  });
  EXPECT_EQ(failed.load(), 2);
}

TEST(CpuComm, AsyncAllreducesEqualTheBlockingOnesBitwise) {
  const int n = 3;
  const std::vector<int64_t> counts = {4099, 1, 700, 33};
  std::vector<std::vector<Tensor>> blocking(n), async(n);
  for (int r = 0; r < n; ++r)
    for (size_t k = 0; k < counts.size(); ++k) {
      blocking[r].push_back(testing::random_tensor({counts[k]}, 100 * r + k, -1e3f, 1e3f));
      async[r].push_back(blocking[r].back().clone());
    }
  auto g1 = runtime::CpuCommGroup::create(n);
  on_ranks(n, [&](int r) {
    for (auto& t : blocking[r]) g1->rank(r)->allreduce_sum(t.data<float>(), t.numel());
  });
  auto g2 = runtime::CpuCommGroup::create(n);
  on_ranks(n, [&](int r) {
    // All four in flight at once, then a blocking broadcast (which must come after them), then the waits.
    std::vector<std::function<void()>> waits;
    for (auto& t : async[r]) waits.push_back(g2->rank(r)->allreduce_sum_async(t.data<float>(), t.numel()));
    float token = float(r);
    g2->rank(r)->broadcast(&token, 1, 0);
    EXPECT_EQ(token, 0.f);
    for (auto& w : waits) w();
  });
  for (int r = 0; r < n; ++r)
    for (size_t k = 0; k < counts.size(); ++k)
      EXPECT_EQ(0, std::memcmp(blocking[r][k].raw(), async[r][k].raw(), blocking[r][k].nbytes())) << r << " " << k;
}

TEST(CpuComm, BackgroundErrorsSurfaceInTheWaitAndNameTheAllReduceNode) {
  // Two ranks whose AllReduce nodes disagree on the bucket size: the communication threads fail,
  // and each executor reports it as an error of its AllReduce node.
  auto group = runtime::CpuCommGroup::create(2);
  std::vector<std::string> errors(2);
  on_ranks(2, [&](int r) {
    std::map<std::string, Tensor> feeds;
    Graph g = testing::single_node_graph("AllReduce", {testing::random_tensor({10 + r}, 7)},
                                         {{"reduction", Attribute::Str("sum")}}, 1, 17, kGraphrunDomain, feeds);
    g.nodes[0].name = "allreduce_0";
    // A node to overlap with (without one the AllReduce runs synchronously).
    g.nodes.push_back(Node{"after", "Relu", "", {"in0"}, {"r"}, {}});
    g.outputs.push_back("r");
    ExecOptions o;
    o.comm = group->rank(r);
    o.async_kernels = true;
    Executor ex(g, o);
    try {
      ex.run(feeds);
    } catch (const Error& e) {
      errors[r] = e.what();
    }
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(errors[r].rfind("node 'allreduce_0' (ai.graphrun.AllReduce): allreduce: rank", 0), 0u) << errors[r];
    EXPECT_NE(errors[r].find(r == 0 ? "reduces 10 values but rank 1 reduces 11" : "reduces 11 values but rank 0 reduces 10"),
              std::string::npos) << errors[r];
  }
}

TEST(CpuComm, AnAbortedGroupsAllReduceNodeThrowsAnEchoNamingTheNode) {
  // The trainer tells a replica's own error from one its peers' abort caused by type; the executor's
  // naming of the node must keep that type, on the blocking and the asynchronous path alike.
  for (bool async : {false, true}) {
    auto group = runtime::CpuCommGroup::create(2);
    group->abort();
    std::map<std::string, Tensor> feeds;
    Graph g = testing::single_node_graph("AllReduce", {testing::random_tensor({10}, 7)},
                                         {{"reduction", Attribute::Str("sum")}}, 1, 17, kGraphrunDomain, feeds);
    g.nodes[0].name = "allreduce_0";
    g.nodes.push_back(Node{"after", "Relu", "", {"in0"}, {"r"}, {}});
    g.outputs.push_back("r");
    ExecOptions o;
    o.comm = group->rank(0);
    o.async_kernels = async;
    Executor ex(g, o);
    try {
      ex.run(feeds);
      ADD_FAILURE() << "an AllReduce of an aborted group returned";
    } catch (const runtime::ReplicaAborted& e) {
      EXPECT_EQ(std::string(e.what()).rfind("node 'allreduce_0' (ai.graphrun.AllReduce): another replica failed", 0), 0u)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace graphrun

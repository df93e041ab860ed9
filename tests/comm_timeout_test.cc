// Hangs become errors: a replica that stops arriving at the collectives (hung or dead, not failed)
// makes every other replica fail once the communicator's timeout has passed, with an error naming
// the missing one — in the CPU group (blocking and asynchronous allreduce, broadcast, barrier), in
// the round group that the device-local and NCCL communicators share, and in the trainer.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "graph/onnx_io.h"
#include "runtime/comm/cpu_comm.h"
#include "runtime/comm/replica_aborted.h"
#include "runtime/comm/round_group.h"
#include "runtime/comm/watchdog.h"
#include "runtime/trainer.h"
#include "tests/sim_backend.h"
#include "tests/test_util.h"
#include "tests/trainer_test_util.h"

namespace graphrun {
namespace {

using runtime::Communicator;
using runtime::CpuCommGroup;

constexpr double kShort = 0.2;  // seconds: short enough for a test, long enough for live ranks to meet

// Runs f(rank) on `n` threads, joins them, and returns what each threw ("" for none); `echo`, when
// given, says which ranks threw a ReplicaAborted (an echo of another rank's failure).
template <class F>
std::vector<std::string> errors_on_ranks(int n, F f, std::vector<bool>* echo = nullptr) {
  std::vector<std::string> errors(n);
  std::vector<char> echoed(n, 0);
  std::vector<std::thread> ts;
  for (int r = 0; r < n; ++r)
    ts.emplace_back([&, r] {
      try {
        f(r);
      } catch (const runtime::ReplicaAborted& e) {
        errors[r] = e.what();
        echoed[r] = 1;
      } catch (const Error& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : ts) t.join();
  if (echo) echo->assign(echoed.begin(), echoed.end());
  return errors;
}

// Of the ranks that waited, the first to give up reports the cause; those it released are echoes.
void expect_one_cause(const std::vector<bool>& echo, std::initializer_list<int> waited) {
  int causes = 0;
  for (int r : waited) causes += !echo[r];
  EXPECT_EQ(causes, 1);
}

void expect_contains(const std::string& s, const std::string& part) {
  EXPECT_NE(s.find(part), std::string::npos) << "'" << part << "' not in: " << s;
}

TEST(CommTimeout, CpuAllreduceFailsOnEveryRankNamingTheOneThatStopped) {
  const int n = 3, stopped = 1, before = 2;  // replica 1 takes part in two allreduces, then never again
  auto group = CpuCommGroup::create(n);
  group->rank(2)->set_timeout(kShort);  // a setting of the group, from any rank
  std::vector<std::vector<float>> data(n, std::vector<float>(37, 1.f));
  std::vector<int> done(n, 0);
  std::vector<bool> echo;
  auto errors = errors_on_ranks(n, [&](int r) {
    for (int k = 0; k < (r == stopped ? before : 5); ++k) {
      group->rank(r)->allreduce_sum(data[r].data(), 37);
      ++done[r];
    }
  }, &echo);
  EXPECT_EQ(errors[stopped], "");
  expect_one_cause(echo, {0, 2});
  for (int r : {0, 2}) {
    EXPECT_EQ(done[r], before) << "rank " << r;
    EXPECT_EQ(errors[r], "allreduce: replica 1 of 3 did not arrive within 0.2 s: it hung or stopped "
                         "(raise --comm-timeout if it is only slow)");
    EXPECT_EQ(data[r][0], 9.f);  // the two allreduces that every rank joined summed correctly
  }
  EXPECT_TRUE(group->aborted());
  // The replica that stopped, coming back, finds the group closed with the same reason.
  std::vector<float> late(37, 1.f);
  try {
    group->rank(stopped)->allreduce_sum(late.data(), 37);
    ADD_FAILURE() << "a collective of an aborted group returned";
  } catch (const runtime::ReplicaAborted& e) {
    expect_contains(e.what(), "replica 1 of 3 did not arrive");
  }
}

TEST(CommTimeout, AsyncAllreduceFailsInItsWait) {
  const int n = 2;
  auto group = CpuCommGroup::create(n);
  group->set_timeout(kShort);
  std::vector<std::vector<float>> data(n, std::vector<float>(100, 1.f));
  auto errors = errors_on_ranks(n, [&](int r) {
    if (r == 0) return;  // never arrives
    std::function<void()> wait = group->rank(r)->allreduce_sum_async(data[r].data(), 100);
    wait();
  });
  EXPECT_EQ(errors[0], "");
  expect_contains(errors[1], "allreduce: replica 0 of 2 did not arrive within 0.2 s");
}

TEST(CommTimeout, BroadcastAndBarrierNameTheMissingReplicas) {
  {
    auto group = CpuCommGroup::create(4);
    group->set_timeout(kShort);
    auto errors = errors_on_ranks(4, [&](int r) {
      if (r == 1 || r == 3) return;
      float x = float(r);
      group->rank(r)->broadcast(&x, 1, 0);
    });
    for (int r : {0, 2}) EXPECT_EQ(errors[r].rfind("broadcast: replicas 1, 3 of 4 did not arrive within 0.2 s: they", 0), 0u) << errors[r];
  }
  {
    auto group = CpuCommGroup::create(2);
    group->set_timeout(kShort);
    auto errors = errors_on_ranks(2, [&](int r) {
      if (r == 1) group->rank(r)->barrier();
    });
    expect_contains(errors[1], "barrier: replica 0 of 2 did not arrive");
  }
}

TEST(CommTimeout, RanksThatMeetInTimeAreNotDisturbed) {
  // Every rank arrives, one of them well after the others but within the timeout.
  auto group = CpuCommGroup::create(2);
  group->set_timeout(30);
  std::vector<std::vector<float>> data(2, std::vector<float>(5, 2.f));
  auto errors = errors_on_ranks(2, [&](int r) {
    if (r == 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    group->rank(r)->allreduce_sum(data[r].data(), 5);
  });
  EXPECT_EQ(errors, (std::vector<std::string>{"", ""}));
  EXPECT_EQ(data[1][4], 4.f);
}

TEST(CommTimeout, RoundGroupTimesOutWithoutRunningTheRound) {
  // The round group under the device-local (same GPU) and NCCL host-barrier communicators.
  runtime::RoundGroup g(3);
  g.set_timeout(kShort);
  std::atomic<int> rounds{0};
  std::vector<bool> echo;
  auto errors = errors_on_ranks(3, [&](int r) {
    g.round(r, "allreduce", [&] { ++rounds; });  // every rank: one round together
    if (r != 0) g.round(r, "allreduce", [&] { ++rounds; });  // rank 0 never comes to the second
  }, &echo);
  EXPECT_EQ(rounds.load(), 1);
  EXPECT_EQ(errors[0], "");
  for (int r : {1, 2}) expect_contains(errors[r], "allreduce: replica 0 of 3 did not arrive within 0.2 s");
  expect_one_cause(echo, {1, 2});
  EXPECT_TRUE(g.aborted());
  EXPECT_THROW(g.round(0, "allreduce", [] {}), runtime::ReplicaAborted);  // late: an echo too
}

TEST(CommTimeout, DeviceCommunicatorsOfTheSimulatedDeviceTimeOut) {
  testing::ScopedSimDevice sim;
  sim.backend().stall_replica(2, 1);  // replica 2 hangs at its second collective
  const Device dev{Device::Kind::CUDA, 0};
  auto comms = runtime::backend_for(Device::Kind::CUDA)->make_communicators({dev, dev, dev});
  comms[0]->set_timeout(kShort);
  std::vector<bool> echo;
  auto errors = errors_on_ranks(3, [&](int r) {
    comms[r]->barrier();
    comms[r]->barrier();
  }, &echo);
  for (int r : {0, 1}) expect_contains(errors[r], "barrier: replica 2 of 3 did not arrive within 0.2 s");
  expect_one_cause(echo, {0, 1});
  expect_contains(errors[2], "another replica failed");  // released once the others gave up
  EXPECT_TRUE(echo[2]);
}

// The trainer reports the first error that is not an echo, whichever order they come in.
TEST(CommTimeout, FirstFailureKeepsTheCauseOverEchoes) {
  auto error = [](const char* m) { return std::make_exception_ptr(Error(m)); };
  auto echo = [](const char* m) { return std::make_exception_ptr(runtime::ReplicaAborted(m)); };
  auto what = [](const runtime::FirstFailure& f) -> std::string {
    try {
      if (f.get()) std::rethrow_exception(f.get());
    } catch (const std::exception& e) {
      return e.what();
    }
    return "";
  };
  runtime::FirstFailure f;
  EXPECT_EQ(what(f), "");
  f.offer(nullptr);
  EXPECT_EQ(what(f), "");
  f.offer(echo("echo 1"));
  f.offer(echo("echo 2"));
  EXPECT_EQ(what(f), "echo 1");  // only echoes so far: the first stands in
  f.offer(error("cause 1"));
  EXPECT_EQ(what(f), "cause 1");  // the cause arriving after an echo wins
  f.offer(echo("echo 3"));
  f.offer(error("cause 2"));
  EXPECT_EQ(what(f), "cause 1");  // and is never displaced
  f.clear();
  f.offer(error("cause 3"));
  f.offer(echo("echo 4"));
  EXPECT_EQ(what(f), "cause 3");
}

TEST(CommTimeout, TrainingStopsNamingTheReplicaThatHung) {
  REQUIRE_LENET_AND_DATA();
  testing::ScopedSimDevice sim;
  sim.backend().stall_replica(1, 2);  // replica 1 hangs in the third step's AllReduce
  runtime::TrainOptions o = testing::quick(2, 32, 6, 100);
  o.pipeline.devices = {Device{Device::Kind::CUDA, 0}, Device{Device::Kind::CUDA, 0}};
  o.comm_timeout = 0.5;
  runtime::Trainer t(load_onnx(testing::lenet_path()), o);
  try {
    t.train_epoch(0);
    ADD_FAILURE() << "training went on with a replica that hung";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.rfind("training failed in epoch 1: ", 0), 0u) << m;
    expect_contains(m, "replica 1 of 2 did not arrive within 0.5 s");
  }
}

// ---- The host's polling wait for device collectives (the NCCL watchdog), on a fake clock ----

// A clock that moves only when the wait sleeps; records the sleeps.
struct FakeClock {
  std::chrono::steady_clock::time_point t{};
  std::vector<std::chrono::microseconds> sleeps;
  runtime::WatchClock clock() {
    return {[this] { return t; }, [this](std::chrono::microseconds d) {
              sleeps.push_back(d);
              t += d;
            }};
  }
  double seconds() const { return std::chrono::duration<double>(t.time_since_epoch()).count(); }
};

using runtime::Progress;

TEST(CommTimeout, WatchReturnsOnceTheWorkIsDone) {
  FakeClock fake;
  int polls = 0, aborts = 0;
  runtime::watch_until_done([&](std::string*) { return ++polls < 500 ? Progress::Pending : Progress::Done; },
                            {"allreduce", 1, 2, 5.0}, [&] { ++aborts; }, fake.clock());
  EXPECT_EQ(polls, 500);
  EXPECT_EQ(aborts, 0);
  EXPECT_LT(fake.seconds(), 5.0);
  // Quick polls first, then sleeps that never exceed the bound on how late the host notices.
  ASSERT_FALSE(fake.sleeps.empty());
  EXPECT_LT(fake.sleeps.size(), 500u);
  for (auto d : fake.sleeps) EXPECT_LE(d, runtime::kMaxPollSleep);
}

TEST(CommTimeout, WatchAbortsAndNamesTheReplicaWhenTheTimeoutPasses) {
  FakeClock fake;
  int polls = 0, aborts = 0;
  try {
    runtime::watch_until_done([&](std::string*) { ++polls; return Progress::Pending; }, {"allreduce", 3, 4, 2.0},
                              [&] { ++aborts; }, fake.clock());
    ADD_FAILURE() << "a wait that never ends returned";
  } catch (const runtime::ReplicaAborted& e) {
    ADD_FAILURE() << "a replica's own timeout is the cause, not an echo: " << e.what();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "allreduce on replica 3 of 4: not done within 2 s: another replica hung or "
                                     "stopped (raise --comm-timeout if it is only slow)");
  }
  EXPECT_EQ(aborts, 1);
  EXPECT_GE(fake.seconds(), 2.0);
  EXPECT_LT(fake.seconds(), 2.0 + 2 * std::chrono::duration<double>(runtime::kMaxPollSleep).count());
  // Sleeping between polls: about one poll per kMaxPollSleep, not a busy loop.
  EXPECT_LT(polls, 2.0 / std::chrono::duration<double>(runtime::kMaxPollSleep).count() + 100);
}

TEST(CommTimeout, WatchAbortsAtOnceOnAnAsynchronousError) {
  FakeClock fake;
  int polls = 0, aborts = 0;
  try {
    runtime::watch_until_done(
        [&](std::string* why) {
          if (++polls < 10) return Progress::Pending;
          *why = "NCCL reported an asynchronous error: remote process exited or there was a network error";
          return Progress::Failed;
        },
        {"a step's device work", 0, 2, 60.0}, [&] { ++aborts; }, fake.clock());
    ADD_FAILURE() << "a failed wait returned";
  } catch (const runtime::ReplicaAborted& e) {
    ADD_FAILURE() << e.what();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "a step's device work on replica 0 of 2: NCCL reported an asynchronous error: "
                                     "remote process exited or there was a network error");
  }
  EXPECT_EQ(polls, 10);
  EXPECT_EQ(aborts, 1);
  EXPECT_LT(fake.seconds(), 1.0);  // not after the timeout
}

TEST(CommTimeout, WatchWokenByAnotherReplicasAbortIsAnEcho) {
  FakeClock fake;
  int polls = 0, aborts = 0;
  EXPECT_THROW(runtime::watch_until_done([&](std::string*) { return ++polls < 3 ? Progress::Pending : Progress::Aborted; },
                                         {"broadcast", 1, 2, 60.0}, [&] { ++aborts; }, fake.clock()),
               runtime::ReplicaAborted);
  EXPECT_EQ(aborts, 0);  // the replica that aborted the communicator reports the cause
}

TEST(CommTimeout, WatchSeesWorkThatFinishesAtTheDeadline) {
  // The last poll comes after the deadline has passed: work done by then is done, not a timeout.
  FakeClock fake;
  int aborts = 0;
  runtime::watch_until_done([&](std::string*) { return fake.seconds() >= 1.0 ? Progress::Done : Progress::Pending; },
                            {"allreduce", 0, 2, 1.0}, [&] { ++aborts; }, fake.clock());
  EXPECT_EQ(aborts, 0);
}

// A communicator's end (NcclCommunicator's destructor): ncclCommDestroy waits for the work in flight,
// so it comes only after that work is seen done; an aborted communicator is left alone (ncclCommAbort
// freed it), and one whose work fails or never finishes is aborted, within the timeout, not destroyed.
TEST(CommTimeout, TeardownDestroysOnlyACommunicatorWhoseWorkFinished) {
  using runtime::Teardown;
  {  // aborted by the watchdog or a failed replica: nothing to do, and no look at it either
    FakeClock fake;
    int polls = 0;
    EXPECT_EQ(runtime::teardown_action(true, [&](std::string*) { ++polls; return Progress::Done; }, 5.0, fake.clock()),
              Teardown::Nothing);
    EXPECT_EQ(polls, 0);
  }
  {  // idle, or drained a little later: destroyed
    FakeClock fake;
    int polls = 0;
    EXPECT_EQ(runtime::teardown_action(false, [&](std::string*) { return ++polls < 100 ? Progress::Pending : Progress::Done; },
                                       5.0, fake.clock()),
              Teardown::Destroy);
    EXPECT_EQ(polls, 100);
    EXPECT_LT(fake.seconds(), 5.0);
  }
  {  // a peer hung: its collective never finishes; aborted once the timeout has passed
    FakeClock fake;
    EXPECT_EQ(runtime::teardown_action(false, [&](std::string*) { return Progress::Pending; }, 2.0, fake.clock()),
              Teardown::Abort);
    EXPECT_GE(fake.seconds(), 2.0);
    EXPECT_LT(fake.seconds(), 2.0 + 2 * std::chrono::duration<double>(runtime::kMaxPollSleep).count());
  }
  {  // NCCL's asynchronous error: aborted at once
    FakeClock fake;
    EXPECT_EQ(runtime::teardown_action(false,
                                       [&](std::string* why) {
                                         *why = "NCCL reported an asynchronous error";
                                         return Progress::Failed;
                                       },
                                       60.0, fake.clock()),
              Teardown::Abort);
    EXPECT_LT(fake.seconds(), 1.0);
  }
  {  // aborted by another thread while the end was being watched: gone, nothing to do
    FakeClock fake;
    int polls = 0;
    EXPECT_EQ(runtime::teardown_action(false, [&](std::string*) { return ++polls < 3 ? Progress::Pending : Progress::Aborted; },
                                       60.0, fake.clock()),
              Teardown::Nothing);
  }
}

}  // namespace
}  // namespace graphrun

// --profile (runtime/profile.h): the Chrome trace of a small training run, the table's counts against
// the graphs' nodes, FLOPs from shapes, and that profiling leaves every trained bit as it was.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "graph/onnx_io.h"
#include "graph/tensor_io.h"
#include "runtime/profile.h"
#include "tests/trainer_test_util.h"

namespace graphrun {
namespace {

using runtime::Profiler;

// Two CPU replicas, 3 steps of 32, so every track has kernels, AllReduce, data and optimizer events.
runtime::TrainOptions small_run() { return testing::quick(2, 32, 3, 64); }
runtime::TrainOptions profiled(Profiler& prof) {
  runtime::TrainOptions o = small_run();
  o.profiler = &prof;
  return o;
}

std::map<std::string, int64_t> node_counts(const Graph& g) {
  std::map<std::string, int64_t> c;
  for (const Node& n : g.nodes) ++c[n.op_type];
  return c;
}

TEST(Profile, TraceIsChromeJsonWithOneTrackPerReplicaAndTheExpectedEvents) {
  REQUIRE_LENET_AND_DATA();
  Profiler prof;
  runtime::Trainer t(load_onnx(testing::lenet_path()), profiled(prof));
  t.fit();
  const std::string path = testing::temp_dir("profile_trace") + "/trace.json";
  prof.write_trace(path);

  std::ifstream f(path);
  const nlohmann::json doc = nlohmann::json::parse(f);  // throws on invalid JSON
  ASSERT_TRUE(doc.contains("traceEvents"));
  std::map<int, std::string> track_name;
  std::map<std::string, std::set<std::string>> names_on;  // track name -> event names
  for (const auto& e : doc["traceEvents"])
    if (e["ph"] == "M" && e["name"] == "thread_name") track_name[e["tid"].get<int>()] = e["args"]["name"];
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] != "X") continue;
    ASSERT_TRUE(track_name.count(e["tid"].get<int>())) << e.dump();
    EXPECT_GE(e["ts"].get<double>(), 0);
    EXPECT_GE(e["dur"].get<double>(), 0);
    names_on[track_name[e["tid"].get<int>()]].insert(e["name"].get<std::string>());
  }
  const std::set<std::string> tracks{"replica 0 (cpu:0)", "replica 1 (cpu:1)", "main (evaluation)"};
  std::set<std::string> got;
  for (const auto& [_, n] : track_name) got.insert(n);
  EXPECT_EQ(got, tracks);
  for (const char* r : {"replica 0 (cpu:0)", "replica 1 (cpu:1)"})
    // LeNet's convolutions run as FusedConv (pass fuse_relu_epilogue takes their Relus).
    for (const char* name : {"FusedConv", "ConvGrad", "Gemm", "AllReduce", "step", "data", "optimizer", "wait for peers",
                             "wait for replicas", "sum"})
      EXPECT_TRUE(names_on[r].count(name)) << r << " has no '" << name << "' event";
  EXPECT_EQ(names_on["main (evaluation)"], std::set<std::string>{"evaluate"});
}

TEST(Profile, TableCountsAreTheNodeCountsTimesStepsAndConvFlopsAreKnown) {
  REQUIRE_LENET_AND_DATA();
  Profiler prof;
  runtime::Trainer t(load_onnx(testing::lenet_path()), profiled(prof));
  const runtime::EpochStats st = t.train_epoch(0);
  ASSERT_EQ(st.steps, 3);
  std::map<std::string, int64_t> want;
  for (int d = 0; d < t.replicas(); ++d)
    for (const auto& [op, c] : node_counts(t.replica(d).graph())) want[op] += c * st.steps;
  const auto totals = prof.op_totals();
  std::map<std::string, int64_t> counts;
  for (const auto& [op, tot] : totals) counts[op] = tot.count;
  EXPECT_EQ(counts, want);

  // models/lenet.onnx's first convolution: 20 filters of 1x3x3 giving 26x26 per image; the second: 50
  // of 20x5x5 giving 9x9. Forward FLOPs: 2 * taps * outputs, over the 32 images of each step.
  // Their gradients: conv1 only dW (the images take no gradient), conv2 dX and dW, each a forward's FLOPs.
  const double conv1 = 2.0 * 20 * 26 * 26 * 9, conv2 = 2.0 * 50 * 9 * 9 * 20 * 25;
  // Both run as FusedConv (their Relus fused), which counts the convolution's FLOPs.
  EXPECT_DOUBLE_EQ(totals.at("FusedConv").flops, (conv1 + conv2) * 32 * st.steps);
  EXPECT_DOUBLE_EQ(totals.at("ConvGrad").flops, (conv1 + 2 * conv2) * 32 * st.steps);
  EXPECT_GT(totals.at("Gemm").flops, 0);
  EXPECT_EQ(totals.at("ReluGrad").flops, 0);

  std::ostringstream table;
  prof.print_table(table, "step");
  EXPECT_NE(table.str().find("ConvGrad"), std::string::npos) << table.str();
  EXPECT_NE(table.str().find("all kernels"), std::string::npos) << table.str();
  EXPECT_GT(prof.phase_ns("step"), 0);
}

// Where an AllReduce's time goes: on every replica's track, each AllReduce kernel holds exactly one
// "wait for replicas" and one "sum" (the in-process communicator's; under MPI also "wait for ranks",
// "transfer" and "copy": tests/mpi), inside it, and the table prints them under the kernels.
TEST(Profile, EveryAllReduceHoldsItsWaitAndSum) {
  REQUIRE_LENET_AND_DATA();
  Profiler prof;
  runtime::Trainer t(load_onnx(testing::lenet_path()), profiled(prof));
  t.fit();
  for (int d = 0; d < 2; ++d) {
    const runtime::ProfileTrack* track = nullptr;
    prof.for_each_track([&](const runtime::ProfileTrack& tr) {
      if (tr.name().rfind("replica " + std::to_string(d), 0) == 0) track = &tr;
    });
    ASSERT_TRUE(track);
    std::vector<const runtime::ProfileEvent*> allreduce;
    for (const auto& e : track->events())
      if (e.cat == "kernel" && e.name == "AllReduce") allreduce.push_back(&e);
    ASSERT_FALSE(allreduce.empty());
    std::map<std::string, int> inside;
    for (const auto& e : track->events()) {
      if (e.cat != "comm") continue;
      int holders = 0;
      for (const auto* k : allreduce)
        holders += e.begin_ns >= k->begin_ns && e.begin_ns + e.dur_ns <= k->begin_ns + k->dur_ns;
      EXPECT_EQ(holders, 1) << e.name << " at " << e.begin_ns << " on replica " << d;
      ++inside[std::string(e.name)];
    }
    const int n = static_cast<int>(allreduce.size());
    EXPECT_EQ(inside, (std::map<std::string, int>{{"sum", n}, {"wait for replicas", n}})) << "replica " << d;
  }
  std::ostringstream table;
  prof.print_table(table, "step");
  for (const char* row : {"AllReduce, where its time went", "wait for replicas", "sum", "rest (pack, unpack)"})
    EXPECT_NE(table.str().find(row), std::string::npos) << row << " missing from\n" << table.str();
}

// --profile-steps 2:4 over two epochs of 3 steps: the replicas record global steps 2, 3 (epoch 1) and 4
// (epoch 2) only, every node of each, and nothing of the others; evaluation is recorded at both epochs'
// ends; the trained bits are those of an unprofiled run.
TEST(Profile, AStepWindowRecordsThoseStepsOnly) {
  REQUIRE_LENET_AND_DATA();
  const Graph model = load_onnx(testing::lenet_path());
  runtime::TrainOptions o = small_run();
  o.epochs = 2;
  Profiler prof;
  prof.set_step_window(2, 4);
  o.profiler = &prof;
  runtime::Trainer t(model, o);
  t.fit();
  std::map<std::string, int64_t> want;
  for (int d = 0; d < t.replicas(); ++d)
    for (const auto& [op, c] : node_counts(t.replica(d).graph())) want[op] += c * 3;
  std::map<std::string, int64_t> counts;
  for (const auto& [op, tot] : prof.op_totals()) counts[op] = tot.count;
  EXPECT_EQ(counts, want);
  std::map<std::string, std::map<std::string, int>> named;  // track -> event name -> count
  int64_t first_step = -1, last_end = 0;
  prof.for_each_track([&](const runtime::ProfileTrack& tr) {
    for (const auto& e : tr.events()) {
      ++named[tr.name()][std::string(e.name)];
      if (e.name == "step" && tr.name().rfind("replica 0", 0) == 0) {
        if (first_step < 0) first_step = e.begin_ns;
        last_end = e.begin_ns + e.dur_ns;
      }
    }
  });
  for (const char* r : {"replica 0 (cpu:0)", "replica 1 (cpu:1)"}) {
    EXPECT_EQ(named[r]["step"], 3) << r;
    EXPECT_EQ(named[r]["data"], 3) << r;
    EXPECT_EQ(named[r]["optimizer"], 3) << r;
  }
  EXPECT_EQ(named["main (evaluation)"]["evaluate"], 2);
  // The first epoch's evaluation falls inside the window's span on the timeline (between steps 3 and 4).
  int evaluations_inside = 0;
  prof.for_each_track([&](const runtime::ProfileTrack& tr) {
    for (const auto& e : tr.events())
      if (e.name == "evaluate") evaluations_inside += e.begin_ns > first_step && e.begin_ns < last_end;
  });
  EXPECT_EQ(evaluations_inside, 1);
  std::ostringstream out;
  prof.finish(testing::temp_dir("profile_window") + "/trace.json", "step", out);
  EXPECT_NE(out.str().find("profile: steps 2 to 4 (--profile-steps)\n"), std::string::npos) << out.str();
  o.profiler = nullptr;
  const auto off = testing::states_after_fit(model, o);
  const auto on = testing::replica_states(t);
  ASSERT_EQ(on.size(), off.size());
  for (const auto& [name, v] : off) {
    ASSERT_TRUE(on.count(name)) << name;
    EXPECT_EQ(std::memcmp(v.raw(), on.at(name).raw(), v.nbytes()), 0) << name;
  }
}

TEST(Profile, ProfilingChangesNoTrainedBit) {
  REQUIRE_LENET_AND_DATA();
  const Graph model = load_onnx(testing::lenet_path());
  const auto off = testing::states_after_fit(model, small_run());
  Profiler prof;
  const auto on = testing::states_after_fit(model, profiled(prof));
  ASSERT_EQ(on.size(), off.size());
  for (const auto& [name, v] : off) {
    ASSERT_TRUE(on.count(name)) << name;
    EXPECT_EQ(v.nbytes(), on.at(name).nbytes()) << name;
    EXPECT_EQ(std::memcmp(v.raw(), on.at(name).raw(), v.nbytes()), 0) << name << " differs with profiling on";
  }
}

TEST(Profile, FlopsFromShapes) {
  Tensor x(DType::F32, {2, 4, 9, 9}), w(DType::F32, {8, 2, 3, 3}), y(DType::F32, {2, 8, 7, 7});
  Node conv{"c", "Conv", "", {"x", "w"}, {"y"}, {}};
  EXPECT_DOUBLE_EQ(runtime::kernel_flops(conv, {&x, &w}, &y), 2.0 * 2 * 8 * 49 * (2 * 9));
  Node grad{"g", "ConvGrad", "ai.graphrun", {"dy", "x", "w"}, {"dx", "dw", ""}, {}};
  EXPECT_DOUBLE_EQ(runtime::kernel_flops(grad, {&y, &x, &w}, nullptr), 2 * 2.0 * 2 * 8 * 49 * (2 * 9));
  grad.outputs = {"", "dw", ""};
  EXPECT_DOUBLE_EQ(runtime::kernel_flops(grad, {&y, &x, &w}, nullptr), 2.0 * 2 * 8 * 49 * (2 * 9));
  Tensor a(DType::F32, {5, 3}), b(DType::F32, {3, 7}), c(DType::F32, {5, 7});
  Node mm{"m", "MatMul", "", {"a", "b"}, {"c"}, {}};
  EXPECT_DOUBLE_EQ(runtime::kernel_flops(mm, {&a, &b}, &c), 2.0 * 5 * 7 * 3);
  Node gemm{"g", "Gemm", "", {"at", "b"}, {"c"}, {}};
  gemm.attrs["transA"] = Attribute::Int(1);
  Tensor at(DType::F32, {3, 5});
  EXPECT_DOUBLE_EQ(runtime::kernel_flops(gemm, {&at, &b}, &c), 2.0 * 5 * 7 * 3);
  Node relu{"r", "Relu", "", {"x"}, {"y"}, {}};
  EXPECT_EQ(runtime::kernel_flops(relu, {&x}, &x), 0);
}

// train --eval-only --profile: the evaluation is the run, so its kernels are recorded (on one track
// per replica) and the table's share is of the evaluation's time; it recorded none ("all kernels 0.0").
TEST(Profile, EvalOnlyRecordsTheEvaluationsKernels) {
  REQUIRE_LENET_AND_DATA();
  const std::string dir = testing::temp_dir("profile_eval_only");
  const auto r = testing::run_command(testing::graphrun_cli() + " train " + testing::lenet_path() +
                                      " --eval-only --devices cpu:2 --threads 1 --profile " + dir + "/e.json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("evaluate%"), std::string::npos) << r.output;
  const size_t all = r.output.find("all kernels");
  ASSERT_NE(all, std::string::npos) << r.output;
  double ms = 0, share = 0;
  ASSERT_EQ(std::sscanf(r.output.c_str() + all, "all kernels %lf %lf", &ms, &share), 2) << r.output;
  EXPECT_GT(ms, 0) << r.output;
  EXPECT_GT(share, 0) << r.output;  // of the evaluation spans (it was of the steps: 0)
  EXPECT_LE(share, 100.5) << r.output;  // the kernels run inside the spans
  std::ifstream f(dir + "/e.json");
  const std::string trace((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_NE(trace.find("evaluation 1 (cpu:1)"), std::string::npos);
  // Two convolutions a batch: 10000 test images are 5000 a replica, in batches of 128 (40), or of
  // --batch-size 5000 over the 2 replicas (2 of 2500), which --eval-only ignored.
  auto conv_count = [](const std::string& out) {
    const size_t at = out.find("\nFusedConv ");
    long long n = -1;
    if (at != std::string::npos) std::sscanf(out.c_str() + at, "\nFusedConv %lld", &n);
    return n;
  };
  EXPECT_EQ(conv_count(r.output), 2 * 2 * 40) << r.output;
  const auto big = testing::run_command(testing::graphrun_cli() + " train " + testing::lenet_path() +
                                        " --eval-only --devices cpu:2 --threads 1 --batch-size 5000 --profile " + dir +
                                        "/b.json");
  ASSERT_EQ(big.exit_code, 0) << big.output;
  EXPECT_EQ(conv_count(big.output), 2 * 2 * 2) << big.output;
  EXPECT_EQ(big.output.substr(0, big.output.find('\n')), r.output.substr(0, r.output.find('\n')));  // the same figures
}

// train --profile-steps: a window that is not FIRST:LAST, or without --profile, is one line (exit 2);
// one the run never reaches says so above the (empty) table.
TEST(Profile, TrainProfileStepsFlag) {
  REQUIRE_LENET_AND_DATA();
  const std::string dir = testing::temp_dir("profile_steps_cli");
  const std::string train = testing::graphrun_cli() + " train " + testing::lenet_path() + " --epochs 1 --max-steps 3";
  for (const std::string w : {"0:3", "5:2", "3", "x:", ":4"}) {
    const auto r = testing::run_command(train + " --profile " + dir + "/t.json --profile-steps " + w);
    EXPECT_EQ(r.exit_code, 2) << w << ": " << r.output;
    EXPECT_NE(r.output.find("--profile-steps: '" + w + "' is not FIRST:LAST"), std::string::npos) << r.output;
  }
  auto r = testing::run_command(train + " --profile-steps 2:3");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--profile-steps needs --profile FILE"), std::string::npos) << r.output;
  r = testing::run_command(train + " --profile " + dir + "/t.json --profile-steps 10:");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("profile: steps 10 to the end (--profile-steps); the run trained none of them\n"),
            std::string::npos)
      << r.output;
}

// graphrun run --profile: the trace holds one kernel event per node, the table prints.
TEST(Profile, RunCommandWritesTraceAndTable) {
  if (!std::filesystem::exists(testing::lenet_path())) GTEST_SKIP() << "models/lenet.onnx is missing";
  const std::string dir = testing::temp_dir("profile_run");
  write_npy(dir + "/x.npy", Tensor(DType::F32, {2, 1, 28, 28}));
  const auto r = testing::run_command(testing::graphrun_cli() + " run " + testing::lenet_path() + " --input " + dir +
                                      "/x.npy --profile " + dir + "/trace.json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("all kernels"), std::string::npos) << r.output;
  std::ifstream f(dir + "/trace.json");
  const nlohmann::json doc = nlohmann::json::parse(f);
  int64_t kernels = 0, runs = 0;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] != "X") continue;
    kernels += e["cat"] == "kernel";
    runs += e["name"] == "run";
  }
  EXPECT_EQ(kernels, static_cast<int64_t>(load_onnx(testing::lenet_path()).nodes.size()));
  EXPECT_EQ(runs, 1);

  const auto bad = testing::run_command(testing::graphrun_cli() + " run " + testing::lenet_path() + " --input " + dir +
                                        "/x.npy --profile " + dir + "/no/such/dir/trace.json");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("--profile"), std::string::npos) << bad.output;
}

}  // namespace
}  // namespace graphrun

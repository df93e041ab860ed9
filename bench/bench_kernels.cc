// Measures GFLOP/s of the CPU conv kernels (and LeNet's fully connected layers) at the d2l LeNet's
// shapes, through the executor as training runs them. Usage: bench_kernels [batch...] [-t threads]... [-r reps] [-k kernel-prefix]...
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "runtime/executor.h"

using namespace graphrun;

namespace {

Tensor random_tensor(const Shape& s, uint64_t seed) {
  Tensor t(DType::F32, s);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(-1, 1);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = d(rng);
  return t;
}

struct Case {
  std::string name;
  std::string op, domain;
  std::vector<Shape> inputs;
  std::vector<bool> outputs;
  std::map<std::string, Attribute> attrs;
  double flops;
  bool relu = false;  // inputs through a ReLU (half zeros: the ties a pool after a ReLU sees)
};

double cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct Timing {
  double wall, cpu;  // seconds of the fastest run; process CPU seconds of the cheapest run
};

// Fastest of `reps` runs of one node (after a planning run and a warm-up run). On a shared machine
// the minimum is the figure least disturbed by other processes, and process CPU time (all threads)
// measures the work per core even while a thread is descheduled (spin-waiting threads count too).
Timing time_node(const Case& c, int threads, int reps) {
  Graph g;
  g.opsets[""] = 17;
  g.opsets[kGraphrunDomain] = 1;
  Node n{"node", c.op, c.domain, {}, {}, c.attrs};
  std::map<std::string, Tensor> feeds;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    if (c.inputs[i].empty()) {  // an optional input left out
      n.inputs.push_back("");
      continue;
    }
    n.inputs.push_back("in" + std::to_string(i));
    g.inputs.push_back(n.inputs.back());
    feeds[n.inputs.back()] = random_tensor(c.inputs[i], i + 1);
    if (c.relu) {
      Tensor& t = feeds[n.inputs.back()];
      for (int64_t j = 0; j < t.numel(); ++j) t.data<float>()[j] = std::max(t.data<float>()[j], 0.0f);
    }
  }
  for (size_t i = 0; i < c.outputs.size(); ++i) {
    n.outputs.push_back(c.outputs[i] ? "out" + std::to_string(i) : "");
    if (c.outputs[i]) g.outputs.push_back(n.outputs.back());
  }
  g.nodes.push_back(n);
  runtime::ExecOptions opts;
  opts.threads = threads;
  runtime::Executor ex(g, opts);
  ex.run(feeds);
  ex.run(feeds);
  Timing best{1e30, 1e30};
  for (int r = 0; r < reps; ++r) {
    const double c0 = cpu_seconds();
    auto t0 = std::chrono::steady_clock::now();
    ex.run(feeds);
    best.wall = std::min(best.wall, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    best.cpu = std::min(best.cpu, cpu_seconds() - c0);
  }
  return best;
}

std::vector<Case> lenet_cases(int64_t N) {
  const double c1 = 2.0 * N * 20 * 26 * 26 * 9, c2 = 2.0 * N * 50 * 9 * 9 * 500;
  std::vector<Case> cs;
  cs.push_back({"conv1 fwd 1->20 3x3 28x28", "Conv", "", {{N, 1, 28, 28}, {20, 1, 3, 3}, {20}}, {true}, {}, c1});
  cs.push_back({"conv1 grad dW,dB", "ConvGrad", kGraphrunDomain, {{N, 20, 26, 26}, {N, 1, 28, 28}, {20, 1, 3, 3}},
                {false, true, true}, {}, c1});
  cs.push_back({"conv2 fwd 20->50 5x5 13x13", "Conv", "", {{N, 20, 13, 13}, {50, 20, 5, 5}, {50}}, {true}, {}, c2});
  cs.push_back({"conv2 grad dX,dW,dB", "ConvGrad", kGraphrunDomain, {{N, 50, 9, 9}, {N, 20, 13, 13}, {50, 20, 5, 5}},
                {true, true, true}, {}, 2 * c2});
  cs.push_back({"conv2 grad dX", "ConvGrad", kGraphrunDomain, {{N, 50, 9, 9}, {N, 20, 13, 13}, {50, 20, 5, 5}},
                {true, false, false}, {}, c2});
  cs.push_back({"conv2 grad dW,dB", "ConvGrad", kGraphrunDomain, {{N, 50, 9, 9}, {N, 20, 13, 13}, {50, 20, 5, 5}},
                {false, true, true}, {}, c2});
  cs.push_back({"fc1 Gemm 800->128", "Gemm", "", {{N, 800}, {128, 800}, {128}}, {true},
                {{"transB", Attribute::Int(1)}}, 2.0 * N * 800 * 128});
  cs.push_back({"avgpool 2x2 on 20x26x26", "AveragePool", "", {{N, 20, 26, 26}}, {true},
                {{"kernel_shape", Attribute::Ints({2, 2})}, {"strides", Attribute::Ints({2, 2})}}, 4.0 * N * 20 * 13 * 13});
  // Its gradient, then the ReLU's (LeNet's backward before pass fuse_pool_relu_grad), and the two as one node.
  const std::map<std::string, Attribute> p2{{"kernel_shape", Attribute::Ints({2, 2})}, {"strides", Attribute::Ints({2, 2})}};
  cs.push_back({"avgpool grad 2x2 on 20x26x26", "AveragePoolGrad", kGraphrunDomain, {{N, 20, 13, 13}, {N, 20, 26, 26}},
                {true}, p2, 4.0 * N * 20 * 13 * 13, true});
  cs.push_back({"relu grad on 20x26x26", "ReluGrad", kGraphrunDomain, {{N, 20, 26, 26}, {N, 20, 26, 26}}, {true}, {},
                1.0 * N * 20 * 26 * 26, true});
  auto p2r = p2;
  p2r["relu"] = Attribute::Int(1);
  cs.push_back({"avgpool grad 2x2 + relu grad", "AveragePoolGrad", kGraphrunDomain, {{N, 20, 13, 13}, {N, 20, 26, 26}},
                {true}, p2r, 4.0 * N * 20 * 13 * 13, true});
  // SimpleCNN's pooling after its ReLU, with the Indices training keeps for the gradient, and without.
  cs.push_back({"maxpool 2x2 on 10x24x24", "MaxPool", "", {{N, 10, 24, 24}}, {true, true},
                {{"kernel_shape", Attribute::Ints({2, 2})}, {"strides", Attribute::Ints({2, 2})}}, 4.0 * N * 10 * 12 * 12,
                true});
  cs.push_back({"maxpool 2x2 no indices", "MaxPool", "", {{N, 10, 24, 24}}, {true},
                {{"kernel_shape", Attribute::Ints({2, 2})}, {"strides", Attribute::Ints({2, 2})}}, 4.0 * N * 10 * 12 * 12,
                true});
  // Its gradient as pass recompute_maxpool_argmax leaves it: no Indices, the argmax found again in X.
  cs.push_back({"maxpool grad 2x2 no indices", "MaxPoolGrad", kGraphrunDomain, {{N, 10, 12, 12}, {}, {N, 10, 24, 24}},
                {true}, p2, 4.0 * N * 10 * 12 * 12, true});
  cs.push_back({"maxpool grad no indices + relu", "MaxPoolGrad", kGraphrunDomain, {{N, 10, 12, 12}, {}, {N, 10, 24, 24}},
                {true}, p2r, 4.0 * N * 10 * 12 * 12, true});
  // A ResNet stem's 3x3 stride-2 pad-1 max pooling after its ReLU (with the Indices training keeps):
  // d2l's 7x7-stem ResNet at 28x28 inputs (64x14x14), and torchvision's at 224x224 (64x112x112, a
  // sixteenth of the batch). FLOPs counted as 9 comparisons an output.
  const std::map<std::string, Attribute> p3{{"kernel_shape", Attribute::Ints({3, 3})}, {"strides", Attribute::Ints({2, 2})},
                    {"pads", Attribute::Ints({1, 1, 1, 1})}};
  cs.push_back({"maxpool 3x3/2 on 64x14x14", "MaxPool", "", {{N, 64, 14, 14}}, {true, true}, p3, 9.0 * N * 64 * 7 * 7,
                true});
  cs.push_back({"maxpool 3x3/2 on 64x112x112", "MaxPool", "", {{N / 16, 64, 112, 112}}, {true, true}, p3,
                9.0 * (N / 16) * 64 * 56 * 56, true});
  // ResNet-18 (Fashion-MNIST variant) 3x3 convolutions: many pixels x few channels, and few pixels x
  // long rows (where per-GEMM weight packing must be amortised over several images).
  const std::map<std::string, Attribute> pad1{{"pads", Attribute::Ints({1, 1, 1, 1})}};
  for (auto [C, HW] : {std::pair<int64_t, int64_t>{64, 28}, {512, 4}}) {
    const std::string tag = "r18 " + std::to_string(C) + "ch " + std::to_string(HW) + "x" + std::to_string(HW);
    const double f = 2.0 * N * C * HW * HW * C * 9;
    cs.push_back({tag + " fwd", "Conv", "", {{N, C, HW, HW}, {C, C, 3, 3}}, {true}, pad1, f});
    cs.push_back({tag + " grad", "ConvGrad", kGraphrunDomain, {{N, C, HW, HW}, {N, C, HW, HW}, {C, C, 3, 3}},
                  {true, true, true}, pad1, 2 * f});
    cs.push_back({tag + " grad dX", "ConvGrad", kGraphrunDomain, {{N, C, HW, HW}, {N, C, HW, HW}, {C, C, 3, 3}},
                  {true, false, false}, pad1, f});
    cs.push_back({tag + " grad dW,dB", "ConvGrad", kGraphrunDomain, {{N, C, HW, HW}, {N, C, HW, HW}, {C, C, 3, 3}},
                  {false, true, true}, pad1, f});
  }
  return cs;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> batches;
  std::vector<int> threads;
  std::vector<std::string> only;  // -k NAME: only kernels whose name starts with NAME
  int reps = 20;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "-t") && i + 1 < argc) threads.push_back(std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "-r") && i + 1 < argc) reps = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "-k") && i + 1 < argc) only.push_back(argv[++i]);
    else batches.push_back(std::atoll(argv[i]));
  }
  if (batches.empty()) batches = {128, 256};
  if (threads.empty()) threads = {1, 2};
  std::printf("%-28s %6s %7s %9s %9s %9s %13s\n", "kernel", "batch", "threads", "wall ms", "GFLOP/s", "cpu ms",
              "GFLOP/s/core");
  for (int64_t N : batches)
    for (int t : threads)
      for (const Case& c : lenet_cases(N)) {
        bool wanted = only.empty();
        for (const auto& k : only) wanted = wanted || c.name.rfind(k, 0) == 0;
        if (!wanted) continue;
        const Timing s = time_node(c, t, reps);
        std::printf("%-28s %6lld %7d %9.3f %9.1f %9.3f %13.1f\n", c.name.c_str(), static_cast<long long>(N), t,
                    s.wall * 1e3, c.flops / s.wall * 1e-9, s.cpu * 1e3, c.flops / s.cpu * 1e-9);
      }
  return 0;
}

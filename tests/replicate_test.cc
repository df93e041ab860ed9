// replicate (the passes bucket_allreduce, add_optimizer and state_updates, then one copy per device)
// and the optimizer kernels: AllReduce and optimizer nodes in place, state updates, torch.optim.SGD
// semantics of Momentum, and the data-parallel equivalence on a hand-built model. Each pass alone:
// tests/passes_test.cc.
#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include "runtime/comm/cpu_comm.h"
#include "runtime/data/idx.h"
#include "runtime/executor.h"
#include "runtime/replicate.h"
#include "tests/test_util.h"

namespace graphrun {
namespace {

using runtime::DeviceGraph;
using runtime::ReplicateOptions;

// Naive 2-D MatMul and same-shape-or-scalar elementwise kernels, used only where the CPU table
// lacks the op, so this test does not depend on the math kernels being there.
void naive_matmul(runtime::KernelContext& ctx) {
  const Tensor &a = ctx.input(0), &b = ctx.input(1);
  const int64_t m = a.dim(0), k = a.dim(1), n = b.dim(1);
  float* c = ctx.output(0, {m, n}, DType::F32).data<float>();
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      float s = 0;
      for (int64_t l = 0; l < k; ++l) s += a.data<float>()[i * k + l] * b.data<float>()[l * n + j];
      c[i * n + j] = s;
    }
}
template <int op>
void naive_binary(runtime::KernelContext& ctx) {
  const Tensor &a = ctx.input(0), &b = ctx.input(1);
  const Tensor& big = a.numel() >= b.numel() ? a : b;
  float* c = ctx.output(0, big.shape(), DType::F32).data<float>();
  for (int64_t i = 0; i < big.numel(); ++i) {
    float x = a.data<float>()[a.numel() == 1 ? 0 : i], y = b.data<float>()[b.numel() == 1 ? 0 : i];
    c[i] = op == 0 ? x + y : op == 1 ? x - y : x * y;
  }
}
const runtime::KernelTable& kernels() {
  static runtime::KernelTable t = [] {
    runtime::KernelTable t = runtime::cpu_kernels();
    if (!t.has("MatMul")) t.add("MatMul", naive_matmul);
    if (!t.has("Add")) t.add("Add", naive_binary<0>);
    if (!t.has("Sub")) t.add("Sub", naive_binary<1>);
    if (!t.has("Mul")) t.add("Mul", naive_binary<2>);
    return t;
  }();
  return t;
}

ValueInfo f32(std::vector<Dim> dims) {
  ValueInfo v;
  v.dtype = DType::F32;
  v.has_shape = true;
  v.shape = std::move(dims);
  return v;
}

// Linear least squares with its backward written by hand: pred = x W + 1 b; loss gradient
// d = (pred - y) * coef, where the test feeds coef = 2 * shard/global / shard_size (the seed
// gradient of a mean loss scaled to the global batch); W_grad = xT d, b_grad = 1T d.
Graph linear_training_graph() {
  Graph g;
  g.name = "linear";
  g.opsets[""] = 17;
  g.inputs = {"x", "xT", "ones", "onesT", "y", "coef"};
  g.values["x"] = f32({Dim("N"), 3});
  g.values["xT"] = f32({3, Dim("N")});
  g.values["ones"] = f32({Dim("N"), 1});
  g.values["onesT"] = f32({1, Dim("N")});
  g.values["y"] = f32({Dim("N"), 2});
  g.values["coef"] = f32({});
  g.initializers["W"] = testing::random_tensor({3, 2}, 1);
  g.initializers["b"] = testing::random_tensor({1, 2}, 2);
  g.nodes = {
      Node{"mm", "MatMul", "", {"x", "W"}, {"xw"}, {}},
      Node{"bias", "MatMul", "", {"ones", "b"}, {"ob"}, {}},
      Node{"add", "Add", "", {"xw", "ob"}, {"pred"}, {}},
      Node{"sub", "Sub", "", {"pred", "y"}, {"diff"}, {}},
      Node{"seed", "Mul", "", {"diff", "coef"}, {"d"}, {}},
      Node{"gb", "MatMul", "", {"onesT", "d"}, {"b_grad"}, {}},
      Node{"gw", "MatMul", "", {"xT", "d"}, {"W_grad"}, {}},
  };
  g.outputs = {"pred", "W_grad", "b_grad"};
  return g;
}

TEST(Replicate, InsertsAllReduceAfterGradientsAndOptimizerNodes) {
  Graph g = linear_training_graph();
  ReplicateOptions o;
  o.devices = {Device{Device::Kind::CPU, 0}, Device{Device::Kind::CPU, 1}};
  o.bucket_bytes = 1;  // one bucket per gradient
  auto dgs = runtime::replicate(g, o);
  ASSERT_EQ(dgs.size(), 2u);
  const Graph& r = dgs[1].graph;
  EXPECT_EQ(dgs[1].device.str(), "cpu:1");
  std::vector<int> ar;
  for (int i = 0; i < (int)r.nodes.size(); ++i)
    if (r.nodes[i].op_type == "AllReduce") ar.push_back(i);
  ASSERT_EQ(ar.size(), 2u);
  // b_grad is produced first in the backward order, so its bucket comes first, right after it.
  EXPECT_EQ(r.nodes[ar[0]].inputs, std::vector<std::string>{"b_grad"});
  EXPECT_EQ(r.nodes[ar[0] - 1].name, "gb");
  EXPECT_EQ(r.nodes[ar[1]].inputs, std::vector<std::string>{"W_grad"});
  EXPECT_EQ(r.nodes[ar[0]].domain, kGraphrunDomain);
  // The optimizer nodes follow the whole backward pass (gw is its last node): nothing reads a sum
  // right after its AllReduce, so an asynchronous AllReduce overlaps the backward work after it.
  int last_backward = -1, first_update = static_cast<int>(r.nodes.size());
  for (int i = 0; i < (int)r.nodes.size(); ++i) {
    if (r.nodes[i].name == "gw") last_backward = i;
    if (r.nodes[i].name.rfind("sgd_", 0) == 0) first_update = std::min(first_update, i);
  }
  EXPECT_EQ(last_backward, ar[1] - 1);
  EXPECT_EQ(first_update, ar[1] + 1);
  EXPECT_TRUE(r.is_input("lr"));
  EXPECT_FALSE(r.is_output("W_grad"));
  EXPECT_TRUE(r.is_output("pred"));
  ASSERT_EQ(dgs[1].state_updates.size(), 2u);
  for (const auto& [v, init] : dgs[1].state_updates) EXPECT_TRUE(r.is_output(v)) << v;

  o.bucket_bytes = 1 << 20;  // everything in one bucket
  o.optimizer.momentum = 0.9f;
  auto one = runtime::replicate(g, o);
  int n_ar = 0, n_mom = 0;
  for (const Node& n : one[0].graph.nodes) {
    n_ar += n.op_type == "AllReduce";
    n_mom += n.op_type == "Momentum";
  }
  EXPECT_EQ(n_ar, 1);
  EXPECT_EQ(n_mom, 1);
  EXPECT_TRUE(one[0].graph.is_input("step"));
  EXPECT_EQ(one[0].state_updates.size(), 4u);  // W, b and their momentum buffers
  EXPECT_EQ(one[0].graph.initializers.count("W.momentum"), 1u);
}

TEST(Replicate, MissingGradientIsAnError) {
  Graph g = linear_training_graph();
  ReplicateOptions o;
  o.params = {"W", "nope"};
  try {
    runtime::replicate(g, o);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("nope"), std::string::npos) << e.what();
  }
}

// torch.optim.SGD's update (dampening 0), written the way torch writes it.
void torch_sgd(std::vector<float>& p, std::vector<float>& buf, const std::vector<float>& g, float lr, float mom,
               float wd, bool nesterov, bool first) {
  for (size_t i = 0; i < p.size(); ++i) {
    float d = g[i] + wd * p[i];
    if (mom != 0) {
      buf[i] = first ? d : mom * buf[i] + d;
      d = nesterov ? d + mom * buf[i] : buf[i];
    }
    p[i] -= lr * d;
  }
}

TEST(Optim, MomentumMatchesTorchSgd) {
  for (bool nesterov : {false, true}) {
    const float lr = 0.05f, mom = 0.9f, wd = 0.01f;
    Tensor x = testing::random_tensor({37}, 3), v(DType::F32, {37});
    std::vector<float> p = x.to_vector<float>(), buf(37);
    for (int step = 0; step < 5; ++step) {
      Tensor g = testing::random_tensor({37}, 100 + step);
      auto out = testing::run_node("Momentum",
                                   {Tensor::scalar<float>(lr), Tensor::scalar<int64_t>(step), x, g, v},
                                   {{"alpha", Attribute::Float(mom)}, {"beta", Attribute::Float(1)},
                                    {"mode", Attribute::Str(nesterov ? "nesterov" : "standard")},
                                    {"norm_coefficient", Attribute::Float(wd)}},
                                   2, 17, kTrainingDomain);
      x = out[0];
      v = out[1];
      torch_sgd(p, buf, g.to_vector<float>(), lr, mom, wd, nesterov, step == 0);
      EXPECT_LT(testing::max_abs_diff(x, Tensor::from_vector<float>({37}, p)), 1e-6) << "step " << step;
    }
  }
}

TEST(Optim, AdamFollowsTheOnnxSpec) {
  Tensor x = testing::random_tensor({9}, 4), g = testing::random_tensor({9}, 5);
  Tensor v = testing::random_tensor({9}, 6, -0.1f, 0.1f), h = testing::random_tensor({9}, 7, 0.f, 0.1f);
  const float lr = 0.01f, a = 0.9f, b = 0.999f, eps = 1e-8f, wd = 0.1f;
  const int64_t T = 3;
  auto out = testing::run_node("Adam", {Tensor::scalar<float>(lr), Tensor::scalar<int64_t>(T), x, g, v, h},
                               {{"alpha", Attribute::Float(a)}, {"beta", Attribute::Float(b)},
                                {"epsilon", Attribute::Float(eps)}, {"norm_coefficient", Attribute::Float(wd)}},
                               3, 17, kTrainingDomain);
  for (int i = 0; i < 9; ++i) {
    double gr = wd * x.data<float>()[i] + g.data<float>()[i];
    double nv = a * v.data<float>()[i] + (1 - a) * gr, nh = b * h.data<float>()[i] + (1 - b) * gr * gr;
    double r = lr * std::sqrt(1 - std::pow(b, T)) / (1 - std::pow(a, T));
    EXPECT_NEAR(out[0].data<float>()[i], x.data<float>()[i] - r * nv / (std::sqrt(nh) + eps), 1e-6);
    EXPECT_NEAR(out[1].data<float>()[i], nv, 1e-6);
    EXPECT_NEAR(out[2].data<float>()[i], nh, 1e-6);
  }
}

// ai.graphrun.Adam: the spec's inputs and attributes, epsilon on sqrt(H / (1 - beta^T)) as torch.optim.Adam.
TEST(Optim, GraphrunAdamPutsEpsilonWhereTorchDoes) {
  Tensor x = testing::random_tensor({9}, 4), g = testing::random_tensor({9}, 5);
  Tensor v = testing::random_tensor({9}, 6, -0.1f, 0.1f), h = testing::random_tensor({9}, 7, 0.f, 0.1f);
  const float lr = 0.01f, a = 0.9f, b = 0.999f, eps = 0.05f, wd = 0.1f;
  for (int64_t T : {int64_t{0}, int64_t{3}}) {
    auto out = testing::run_node("Adam", {Tensor::scalar<float>(lr), Tensor::scalar<int64_t>(T), x, g, v, h},
                                 {{"alpha", Attribute::Float(a)}, {"beta", Attribute::Float(b)},
                                  {"epsilon", Attribute::Float(eps)}, {"norm_coefficient", Attribute::Float(wd)}},
                                 3, 1, kGraphrunDomain);
    for (int i = 0; i < 9; ++i) {
      double gr = wd * x.data<float>()[i] + g.data<float>()[i];
      double nv = a * v.data<float>()[i] + (1 - a) * gr, nh = b * h.data<float>()[i] + (1 - b) * gr * gr;
      double c1 = T > 0 ? 1 - std::pow(a, T) : 1, c2 = T > 0 ? 1 - std::pow(b, T) : 1;
      EXPECT_NEAR(out[0].data<float>()[i], x.data<float>()[i] - lr / c1 * nv / (std::sqrt(nh / c2) + eps), 1e-6) << T;
      EXPECT_NEAR(out[1].data<float>()[i], nv, 1e-6);
      EXPECT_NEAR(out[2].data<float>()[i], nh, 1e-6);
    }
  }
}

// Trains the linear model with D replicas on threads for `steps` steps; returns W and b.
std::vector<Tensor> train_linear(int D, runtime::OptimizerOptions opt, int steps) {
  Graph g = linear_training_graph();
  ReplicateOptions o;
  for (int d = 0; d < D; ++d) o.devices.push_back(Device{Device::Kind::CPU, d});
  o.optimizer = opt;
  auto dgs = runtime::replicate(g, o);
  auto group = runtime::CpuCommGroup::create(D);
  const int64_t B = 10;
  Tensor X = testing::random_tensor({B * steps, 3}, 42), Y = testing::random_tensor({B * steps, 2}, 43);
  std::vector<Tensor> result(2);
  std::vector<std::thread> threads;
  for (int d = 0; d < D; ++d)
    threads.emplace_back([&, d] {
      runtime::ExecOptions eo;
      eo.comm = group->rank(d);
      eo.state_updates = dgs[d].state_updates;
      eo.kernels = &kernels();
      eo.fetch = {"pred"};
      runtime::Executor ex(dgs[d].graph, eo);
      auto sh = runtime::data::shard(B, D);
      const int64_t n = sh.size[d];
      for (int s = 0; s < steps; ++s) {
        Tensor x(DType::F32, {n, 3}), xT(DType::F32, {3, n}), y(DType::F32, {n, 2});
        Tensor ones(DType::F32, {n, 1}), onesT(DType::F32, {1, n});
        for (int64_t i = 0; i < n; ++i) {
          int64_t row = s * B + sh.begin[d] + i;
          for (int k = 0; k < 3; ++k)
            x.data<float>()[i * 3 + k] = xT.data<float>()[k * n + i] = X.data<float>()[row * 3 + k];
          for (int k = 0; k < 2; ++k) y.data<float>()[i * 2 + k] = Y.data<float>()[row * 2 + k];
          ones.data<float>()[i] = onesT.data<float>()[i] = 1;
        }
        std::map<std::string, Tensor> in{{"x", x}, {"xT", xT}, {"ones", ones}, {"onesT", onesT}, {"y", y},
                                         {"coef", Tensor::scalar<float>(2.0f / B)},
                                         {"lr", Tensor::scalar<float>(0.1f)}};
        if (opt.momentum > 0) in["step"] = Tensor::scalar<int64_t>(s);
        ex.run(in);
      }
      if (d == D - 1) result = {ex.state("W").clone(), ex.state("b").clone()};
    });
  for (auto& t : threads) t.join();
  return result;
}

TEST(Replicate, ReplicasComputeWhatOneDeviceComputes) {
  runtime::OptimizerOptions plain, mom;
  plain.weight_decay = 0.01f;
  mom.momentum = 0.9f;
  mom.nesterov = true;
  for (const auto& opt : {plain, mom}) {
    auto one = train_linear(1, opt, 30);
    // The weights moved (so the comparison below means something).
    EXPECT_GT(testing::max_abs_diff(one[0], linear_training_graph().initializers.at("W")), 0.05);
    for (int D : {2, 3}) {
      auto many = train_linear(D, opt, 30);
      EXPECT_LE(testing::max_rel_diff(many[0], one[0]), 1e-5) << D << " replicas";
      EXPECT_LE(testing::max_rel_diff(many[1], one[1]), 1e-5) << D << " replicas";
    }
  }
}

}  // namespace
}  // namespace graphrun

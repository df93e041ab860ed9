// The data-parallel trainer on LeNet and ResNet-18: 1, 2 and 3 replicas agree, accuracy rises, the
// loss of a BatchNorm model falls on cpu:2, the saved model reproduces the printed accuracy, bad input.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "graph/onnx_io.h"
#include "runtime/trainer.h"
#include "runtime/device.h"
#include "tests/test_util.h"
#include "tests/trainer_test_util.h"

namespace graphrun {
namespace {

using runtime::TrainOptions;
using runtime::Trainer;
using testing::have_data;
using testing::lenet_path;
using testing::quick;
using testing::resnet_path;


std::map<std::string, Tensor> params_after(const Graph& model, const TrainOptions& o) {
  Trainer t(model, o);
  for (int e = 0; e < o.epochs; ++e) t.train_epoch(e);
  std::map<std::string, Tensor> r;
  for (const auto& p : t.graphs().params) r[p] = t.replica(o.pipeline.devices.size() - 1).state(p).clone();
  return r;
}

TEST(Trainer, OneTwoAndThreeReplicasHoldTheSameParameters) {
  REQUIRE_LENET_AND_DATA();
  Graph model = load_onnx(lenet_path());
  // 50 SGD steps of a global batch of 48 (so 3 replicas get 16 each), then with momentum + decay.
  // (Rounding differences, 1e-9 after 5 steps, can grow by orders of magnitude while the d2l
  // LeNet's tiny initial weights leave the saddle (at lr 0.2 or 0.05 a ReLU flip pushes some
  // biases to 1e-4 by step 50); lr 0.1 keeps this comparison about replication, not chaos.)
  for (int variant = 0; variant < 2; ++variant) {
    TrainOptions o = quick(1, 48, 50);
    o.lr = 0.1;
    if (variant == 1) {
      o.pipeline.optimizer.momentum = 0.9f;
      o.pipeline.optimizer.weight_decay = 1e-3f;
      o.pipeline.optimizer.nesterov = true;
      o.lr = 0.05;
    }
    auto one = params_after(model, o);
    double moved = 0;
    for (const auto& [name, t] : one) moved = std::max(moved, testing::max_abs_diff(t, model.initializers.at(name)));
    EXPECT_GT(moved, 1e-3) << "training did not change the weights";
    for (int D : {2, 3}) {
      TrainOptions od = o;
      od.pipeline.devices = quick(D, 48, 50).pipeline.devices;
      auto many = params_after(model, od);
      for (const auto& [name, t] : one)
        EXPECT_LE(testing::max_rel_diff(many.at(name), t), 1e-5) << name << ", " << D << " replicas, variant " << variant;
    }
  }
}

// AllReduce overlapping the backward pass (a communication thread per replica) sums in the same
// order as the blocking path: bitwise the same parameters on every replica, with one bucket
// (LeNet's 4 MB default) and with many in flight at once (16 KB buckets, momentum).
TEST(Trainer, OverlappedAllReduceGivesBitwiseTheBlockingParameters) {
  REQUIRE_LENET_AND_DATA();
  Graph model = load_onnx(lenet_path());
  for (int D : {2, 3})
    for (size_t bucket : {size_t(4) << 20, size_t(16) << 10}) {
      std::vector<std::map<std::string, Tensor>> runs;
      for (int overlap : {0, 1}) {
        TrainOptions o = quick(D, 48, 12);
        o.lr = 0.1;
        o.pipeline.bucket_bytes = bucket;
        if (bucket < (size_t(1) << 20)) o.pipeline.optimizer.momentum = 0.9f;
        o.overlap_allreduce = overlap;
        Trainer t(model, o);
        t.train_epoch(0);
        // One bucket is read by the optimizer right after its AllReduce: nothing to overlap, it stays
        // synchronous. 16 KB buckets overlap the backward work after them.
        const int async_nodes = t.replica(0).plan_stats().async_nodes;
        if (overlap && bucket < (size_t(1) << 20))
          EXPECT_GT(async_nodes, 2) << D << " replicas";
        else
          EXPECT_EQ(async_nodes, 0) << D << " replicas, bucket " << bucket << ", overlap " << overlap;
        std::map<std::string, Tensor> r;
        for (const auto& p : t.graphs().params)
          for (int d = 0; d < D; ++d) r[p + "@" + std::to_string(d)] = t.replica(d).state(p).clone();
        runs.push_back(std::move(r));
      }
      for (const auto& [name, t] : runs[0]) {
        const Tensor& u = runs[1].at(name);
        EXPECT_EQ(0, std::memcmp(t.raw(), u.raw(), t.nbytes())) << name << ", " << D << " replicas, bucket " << bucket;
      }
    }
}

// A few hundred steps on two replicas: well above chance; the saved model (reloaded from ONNX and
// run by a fresh executor) reproduces the test accuracy the trainer computed. An odd number of steps:
// a state update swaps the state's buffer with the plan's every step, so an evaluation holding on to
// a buffer it once shared would see the weights of the step before.
TEST(Trainer, ShortTrainingIsWellAboveChanceAndSavedModelReproducesIt) {
  REQUIRE_LENET_AND_DATA();
  TrainOptions o = quick(2, 64, 301);
  o.lr = 0.05;
  o.pipeline.optimizer.momentum = 0.9f;
  o.test_limit = 2000;
  Trainer t(load_onnx(lenet_path()), o);
  auto st = t.train_epoch(0);
  EXPECT_EQ(st.steps, 301);
  EXPECT_EQ(st.images, 301 * 64);
  EXPECT_GT(st.test_acc, 0.6) << "loss " << st.loss;
  EXPECT_GT(st.train_acc, 0.2);  // averaged over the epoch, slow start included

  std::string path = testing::temp_dir("trainer_save") + "/lenet.trained.onnx";
  t.save(path);
  Graph saved = load_onnx(path);
  runtime::Executor ex(saved);
  const auto& test = t.test_data();
  int64_t correct = 0;
  for (int64_t i = 0; i < test.size(); i += 1000) {  // the trainer's evaluation batch
    const int64_t n = std::min<int64_t>(1000, test.size() - i);
    Tensor x = Tensor::view(DType::F32, {n, 1, 28, 28}, const_cast<float*>(test.images.data<float>()) + i * 784);
    auto out = ex.run({{saved.inputs[0], x}}).at(saved.outputs[0]);
    for (int64_t k = 0; k < n; ++k) {
      const float* row = out.data<float>() + k * out.dim(1);
      correct += (std::max_element(row, row + out.dim(1)) - row) == test.labels.data<int64_t>()[i + k];
    }
  }
  EXPECT_EQ(double(correct) / test.size(), st.test_acc);
}

// Evaluation splits the test set over the devices (contiguous shares, evaluated at once): the same
// count of correct predictions however many devices share it, and the same loss to f32 summation.
TEST(Trainer, EvaluationSplitOverDevicesCountsTheSameAsOneDevice) {
  REQUIRE_LENET_AND_DATA();
  TrainOptions o = quick(1, 64, 300);
  o.lr = 0.05;
  o.pipeline.optimizer.momentum = 0.9f;
  Trainer t(load_onnx(lenet_path()), o);
  t.train_epoch(0);
  const std::string path = testing::temp_dir("trainer_eval_split") + "/lenet.onnx";
  t.save(path);
  const Graph trained = load_onnx(path);
  std::vector<runtime::EvalStats> got;
  for (int D : {1, 2, 3}) {
    TrainOptions e = quick(D, 64, 1, 301);  // 301 test examples: shares of 100, 100 and 101 on 3 devices
    e.eval_batch = 64;                      // 5 batches on 1 device, 2 per share on 3
    got.push_back(Trainer(trained, e).evaluate_stats());
  }
  EXPECT_GT(got[0].accuracy, 0.3);  // trained: not a constant prediction
  for (size_t k = 1; k < got.size(); ++k) {
    EXPECT_EQ(got[k].accuracy, got[0].accuracy) << k + 1 << " devices";
    EXPECT_NEAR(got[k].loss, got[0].loss, 1e-6 * got[0].loss) << k + 1 << " devices";
  }
}

TEST(Trainer, ResNet18LossFallsOnTwoReplicas) {
  if (!std::filesystem::exists(resnet_path()))
    GTEST_SKIP() << resnet_path() << " is missing (the build exports it when /usr/bin/python3 has torch)";
  if (!have_data()) GTEST_SKIP() << "Fashion-MNIST is not installed";
  // 30 steps of batch 32 over the same 320 images (3 passes): BatchNorm in training mode, running
  // statistics written back every step and broadcast from replica 0.
  TrainOptions o = quick(2, 32, 10);
  o.epochs = 3;
  o.lr = 0.05;  // d2l's ResNet-18 setting (plain SGD)
  o.test_limit = 64;
  o.eval_batch = 64;
  Trainer t(load_onnx(resnet_path()), o);
  std::vector<double> losses;
  for (int e = 0; e < 3; ++e) losses.push_back(t.train_epoch(e).loss);
  std::cout << "ResNet-18 on cpu:2, mean loss per pass: " << losses[0] << " -> " << losses[1] << " -> " << losses[2]
            << "\n";
  EXPECT_LT(losses[2], losses[0] * 0.8) << losses[0] << " -> " << losses[1] << " -> " << losses[2];
  // Running statistics moved away from their initial values and agree across replicas.
  int checked = 0;
  const Graph& model = t.graphs().forward;
  for (const Node& n : model.nodes) {
    if (n.op_type != "BatchNormalization" || n.inputs.size() < 5) continue;
    const std::string& mean = n.inputs[3];
    EXPECT_GT(testing::max_abs_diff(t.replica(0).state(mean), model.initializers.at(mean)), 0) << mean;
    EXPECT_EQ(testing::max_abs_diff(t.replica(0).state(mean), t.replica(1).state(mean)), 0) << mean;
    ++checked;
  }
  EXPECT_GT(checked, 10);
}

TEST(Trainer, ModelWithTooFewClassesIsRefusedBeforeTraining) {
  REQUIRE_LENET_AND_DATA();
  Graph model = load_onnx(lenet_path());
  ASSERT_TRUE(model.initializers.count("fc2.weight") && model.initializers.count("fc2.bias"));
  Shape ws = model.initializers.at("fc2.weight").shape();
  ws.back() = 5;
  model.initializers["fc2.weight"] = testing::random_tensor(ws, 1);
  model.initializers["fc2.bias"] = Tensor(DType::F32, {5});
  for (auto& [name, vi] : model.values)
    if (vi.has_shape && !vi.shape.empty() && vi.shape.back().size == 10) vi.shape.back() = Dim(5);
  try {
    Trainer t(model, quick(1, 32, 1));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("5 classes"), std::string::npos) << m;
    EXPECT_NE(m.find("10 classes"), std::string::npos) << m;
  }
}

TEST(Trainer, BadSettingsAreErrors) {
  REQUIRE_LENET_AND_DATA();
  Graph model = load_onnx(lenet_path());
  auto error_of = [&](TrainOptions o) -> std::string {
    try {
      Trainer t(model, o);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  TrainOptions o = quick(3, 2, 1);
  EXPECT_NE(error_of(o).find("smaller than the number of replicas"), std::string::npos);
  o = quick(1, 32, 1);
  o.data_dir = testing::temp_dir("trainer_nodata") + "/missing";
  EXPECT_NE(error_of(o).find("does not exist"), std::string::npos);
  o = quick(1, 32, 1);
  o.pipeline.devices = {Device{Device::Kind::CUDA, 0}};
  if (std::string why; !runtime::cuda_available(&why)) {
    EXPECT_NE(error_of(o).find("cannot train on cuda:0: " + why), std::string::npos);
  }
  o.pipeline.devices = {Device{Device::Kind::CPU, 0}, Device{Device::Kind::CUDA, 0}};
  EXPECT_NE(error_of(o).find("cuda:0"), std::string::npos);
  o = quick(1, 32, 1);
  o.lr = -1;
  EXPECT_NE(error_of(o).find("learning rate"), std::string::npos);
}

// A replica that fails releases the others (they stop with "another replica failed"); the trainer
// reports the first replica's own error. Here replica 1's shard of one example cannot be reshaped to
// the model's fixed batch of two.
TEST(Trainer, ReportsTheFailingReplicasErrorNotItsPeers) {
  if (!have_data()) GTEST_SKIP() << "Fashion-MNIST is not installed";
  Graph g;
  g.name = "fixed_batch";
  g.opsets[""] = 17;
  g.inputs = {"image"};
  ValueInfo vi;
  vi.dtype = DType::F32;
  vi.has_shape = true;
  vi.shape = {Dim("N"), Dim(1), Dim(28), Dim(28)};
  g.values["image"] = vi;
  g.initializers["shape"] = Tensor::from_vector<int64_t>({2}, {2, 784});
  g.initializers["W"] = testing::random_tensor({784, 10}, 3, -0.01f, 0.01f);
  g.initializers["b"] = Tensor(DType::F32, {10});
  g.nodes.push_back(testing::make_node("flatten_to_two", "Reshape", {"image", "shape"}, {"flat"}));
  g.nodes.push_back(testing::make_node("fc", "Gemm", {"flat", "W", "b"}, {"logits"}));
  g.outputs = {"logits"};
  TrainOptions o = quick(2, 3, 1, 2);  // shards of 2 and 1
  o.eval_batch = 2;
  Trainer t(g, o);
  try {
    t.train_epoch(0);
    FAIL() << "expected replica 1 to fail";
  } catch (const runtime::DivergedError& e) {
    FAIL() << e.what();
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("flatten_to_two"), std::string::npos) << m;
    EXPECT_EQ(m.find("another replica failed"), std::string::npos) << m;
  }
}

TEST(Trainer, ParsesDeviceLists) {
  using runtime::parse_devices;
  EXPECT_EQ(runtime::devices_str(parse_devices("cpu:2")), "[cpu:0, cpu:1]");
  EXPECT_EQ(runtime::devices_str(parse_devices("3")), "[cpu:0, cpu:1, cpu:2]");
  EXPECT_EQ(runtime::devices_str(parse_devices("cpu:0,cpu:1")), "[cpu:0, cpu:1]");
  EXPECT_EQ(runtime::devices_str(parse_devices("cuda:0,1")), "[cuda:0, cuda:1]");
  EXPECT_EQ(runtime::devices_str(parse_devices("cuda:0,cuda:1")), "[cuda:0, cuda:1]");
  // cpu:N counts replicas; cpu:0 alone names the one device cpu:0.
  EXPECT_EQ(runtime::devices_str(parse_devices("cpu:0")), "[cpu:0]");
  for (const char* bad : {"", "tpu:0", "cpu:", "cpu:x", "0,1", "cuda", "-1", "0", "cpu:1,,", "cpu:0,cpu:0", "cuda:0,1,0", "cpu:1,1"})
    EXPECT_THROW(parse_devices(bad), Error) << bad;
  try {
    parse_devices("cpu:0,cpu:0");
    ADD_FAILURE() << "a device listed twice was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("device cpu:0 appears twice in 'cpu:0,cpu:0' (for N CPU replicas write cpu:N)"),
              std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace graphrun

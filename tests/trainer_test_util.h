// What the trainer suites share: where LeNet and the data are, and small, quick training settings.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "runtime/data/idx.h"
#include "runtime/device.h"
#include "runtime/trainer.h"
#include "tests/test_util.h"

namespace graphrun::testing {

inline std::string lenet_path() { return source_dir() + "/models/lenet.onnx"; }
inline std::string resnet_path() { return binary_dir() + "/models/resnet18.onnx"; }
inline bool have_data() {
  return std::filesystem::exists(std::string(runtime::data::kDefaultDataDir) + "/train-images-idx3-ubyte.gz");
}

// `steps` steps of `batch` examples on `replicas` CPU replicas (one thread each), one epoch over
// exactly that many training examples, evaluated on the first `test_limit` test images.
inline runtime::TrainOptions quick(int replicas, int64_t batch, int64_t steps, int64_t test_limit = 500) {
  runtime::TrainOptions o;
  o.pipeline.devices.clear();
  for (int d = 0; d < replicas; ++d) o.pipeline.devices.push_back(Device{Device::Kind::CPU, d});
  o.batch_size = batch;
  o.epochs = 1;
  o.threads = 1;
  o.max_steps = steps;
  o.train_limit = batch * steps;
  o.test_limit = test_limit;
  o.progress = 0;
  return o;
}

// The names of the files in a checkpoint folder, sorted (checkpoint names sort by epoch and step).
inline std::vector<std::string> checkpoint_files(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// "Kills" a run after checkpoint `name`: removes the checkpoints of `dir` written after it.
inline void remove_checkpoints_after(const std::string& dir, const std::string& name) {
  for (const std::string& f : checkpoint_files(dir))
    if (f > name) std::filesystem::remove(dir + "/" + f);
}

// Every replica's state ("r<replica>/<name>"), copied to the host.
inline std::map<std::string, Tensor> replica_states(runtime::Trainer& t) {
  std::map<std::string, Tensor> r;
  for (int d = 0; d < t.replicas(); ++d)
    for (const auto& [name, v] : t.replica(d).states()) r["r" + std::to_string(d) + "/" + name] = runtime::to_host(v);
  return r;
}

// The states a whole fit() with `o` ends with.
inline std::map<std::string, Tensor> states_after_fit(const Graph& model, const runtime::TrainOptions& o) {
  runtime::Trainer t(model, o);
  t.fit();
  return replica_states(t);
}

// Resumes `o`'s run from the newest checkpoint in its folder; expects bitwise the states `want` of the
// uninterrupted run. Returns the global step it ended at.
inline int64_t expect_resume_ends_with(const Graph& model, runtime::TrainOptions o,
                                       const std::map<std::string, Tensor>& want) {
  o.resume = true;
  runtime::Trainer t(model, o);
  t.fit();
  const auto got = replica_states(t);
  EXPECT_EQ(got.size(), want.size());
  for (const auto& [name, v] : want) {
    auto it = got.find(name);
    if (it == got.end()) {
      ADD_FAILURE() << "resumed run has no " << name;
      continue;
    }
    EXPECT_EQ(max_abs_diff(it->second, v), 0) << name;
  }
  return t.global_step();
}

}  // namespace graphrun::testing

#define REQUIRE_LENET_AND_DATA()                                                                         \
  if (!std::filesystem::exists(::graphrun::testing::lenet_path()))                                       \
    GTEST_SKIP() << "models/lenet.onnx is missing";                                                      \
  if (!::graphrun::testing::have_data())                                                                 \
  GTEST_SKIP() << "Fashion-MNIST is not installed (Debian package dataset-fashion-mnist)"

// Pins the numbers training produces: a hash of LeNet's weights after 50 SGD steps on cpu:2. A change
// that alters any bit of them fails here and must say why in its commit before the hash is updated.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>

#include "graph/onnx_io.h"
#include "runtime/trainer.h"
#include "tests/trainer_test_util.h"

namespace graphrun {
namespace {

// FNV-1a (64 bits) over the raw bytes of every initializer, in name order.
uint64_t weights_hash(const Graph& g) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const auto& [name, t] : g.initializers) {
    const auto* p = static_cast<const unsigned char*>(t.raw());
    for (size_t i = 0; i < t.nbytes(); ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  }
  return h;
}

// `graphrun train models/lenet.onnx --devices cpu:2 --threads 1 --epochs 1 --max-steps 50 --seed 0`
// (d2l's batch 256 and lr 0.2, the whole Fashion-MNIST training set for the data order): the weights
// it saves hash to this value, as they did before the trainer had one step loop for every device.
TEST(TrainerPinned, LeNetWeightsAfter50SgdStepsOnTwoCpuReplicas) {
  REQUIRE_LENET_AND_DATA();
  runtime::TrainOptions o;
  o.pipeline.devices = runtime::parse_devices("cpu:2");
  o.threads = 1;
  o.seed = 0;
  o.epochs = 1;
  o.max_steps = 50;
  o.test_limit = 100;  // evaluation does not touch the weights
  o.progress = 0;
  runtime::Trainer t(load_onnx(testing::lenet_path()), o);
  const runtime::EpochStats st = t.train_epoch(0);
  ASSERT_EQ(st.steps, 50);
  char hex[19];
  std::snprintf(hex, sizeof hex, "0x%016llx", static_cast<unsigned long long>(weights_hash(t.trained_model())));
  EXPECT_EQ(std::string(hex), "0x523e32c565c2f955") << "the trained weights changed: justify it, then pin the new hash";
}

}  // namespace
}  // namespace graphrun

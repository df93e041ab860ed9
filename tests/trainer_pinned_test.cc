// Pins the numbers training produces: a hash of LeNet's weights after 50 SGD steps on cpu:2. A change
// that alters any bit of them fails here and must say why in its commit before the hash is updated.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>

#include "graph/onnx_io.h"
#include "runtime/kernels/cpu/gemm.h"
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
// it saves hash to this value. Pinned again when the CPU kernels moved to oneDNN's GEMM (or Eigen's in a
// GRAPHRUN_ONEDNN=OFF build) and the direct 1-input-channel convolution: their sums run in another
// order, so the bits moved (SimpleCNN's 30 Adam steps and the PyTorch parity tests stayed as before).
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
  const std::string expected = std::string(runtime::cpu::sgemm_library()) == "oneDNN" ? "0x84c5070a9a049bf2" : "0x07af9229a30659db";
  EXPECT_EQ(std::string(hex), expected) << "the trained weights changed (" << runtime::cpu::sgemm_library()
                                        << "'s GEMM): justify it, then pin the new hash";
}

}  // namespace
}  // namespace graphrun

// Pins the numbers training produces: a hash of LeNet's weights after 50 SGD steps on cpu:2, one per
// kind of machine, and (on every machine) that two identical runs give identical bits.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <string>

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

// `graphrun train models/lenet.onnx --devices cpu:2 --threads 1 --epochs 1 --max-steps N --seed 0`
// (d2l's batch 256 and lr 0.2, the whole Fashion-MNIST training set for the data order): the hash of
// the weights it saves.
std::string lenet_hash_after(int64_t steps, const char* devices = "cpu:2", int threads = 1) {
  runtime::TrainOptions o;
  o.pipeline.devices = runtime::parse_devices(devices);
  o.threads = threads;
  o.seed = 0;
  o.epochs = 1;
  o.max_steps = steps;
  o.test_limit = 100;  // evaluation does not touch the weights
  o.progress = 0;
  runtime::Trainer t(load_onnx(testing::lenet_path()), o);
  const runtime::EpochStats st = t.train_epoch(0);
  EXPECT_EQ(st.steps, steps);
  char hex[19];
  std::snprintf(hex, sizeof hex, "0x%016llx", static_cast<unsigned long long>(weights_hash(t.trained_model())));
  return hex;
}

// Why a table: the bits depend on the machine, not only on the code. oneDNN chooses its GEMM kernel
// when it runs, by the CPU's instruction set (AVX2 and AVX-512 kernels block and sum in different
// orders), and the build tunes for the build machine (GRAPHRUN_NATIVE, -march=native), so Eigen's
// GEMM, the im2col rows, the direct convolution and the compiler's FMA contractions follow the
// compiled instruction set. One hash fits one (GEMM library, GEMM ISA, compiled ISA). Correctness
// never rests on this test: the machine-independent checks are TwoRunsGiveIdenticalBits below,
// Trainer.OneTwoAndThreeReplicasHoldTheSameParameters (cpu:1 = cpu:2 = cpu:3 within 1e-5),
// TrainerResume.* (resume is bitwise the uninterrupted run) and the kernels' tests against
// references. This test catches an unintended change of any bit on a machine whose hash is recorded;
// on another it skips, printing the hash it computed and the key to record it under.
struct Pin {
  const char* library;       // cpu::sgemm_library()
  const char* gemm_isa;      // cpu::sgemm_isa()
  const char* compiled_isa;  // cpu::compiled_isa()
  const char* hash;
};
constexpr Pin kPins[] = {
    // Measured on an AMD EPYC (Zen 3, AVX2 + FMA): oneDNN, and a GRAPHRUN_ONEDNN=OFF build.
    {"oneDNN", "avx2", "avx2", "0x84c5070a9a049bf2"},
    {"Eigen", "avx2", "avx2", "0x07af9229a30659db"},
    // Measured on an Intel Xeon with AVX-512 (F, BW, DQ, VL, VNNI, BF16, FP16; no AMX): oneDNN.
    {"oneDNN", "avx512", "avx512", "0x6caca1b69021e67d"},
};

TEST(TrainerPinned, LeNetWeightsAfter50SgdStepsOnTwoCpuReplicas) {
  REQUIRE_LENET_AND_DATA();
  const std::string lib = runtime::cpu::sgemm_library(), gemm = runtime::cpu::sgemm_isa(),
                    built = runtime::cpu::compiled_isa();
  const std::string hash = lenet_hash_after(50);
  for (const Pin& p : kPins)
    if (lib == p.library && gemm == p.gemm_isa && built == p.compiled_isa) {
      EXPECT_EQ(hash, p.hash) << "the trained weights changed (" << lib << " GEMM on " << gemm << ", built for "
                              << built << "): justify it in the commit, then pin the new hash in kPins";
      return;
    }
  GTEST_SKIP() << "no pinned hash for {\"" << lib << "\", \"" << gemm << "\", \"" << built << "\"}: this machine's "
               << "run hashes to " << hash << "; to record it, add {\"" << lib << "\", \"" << gemm << "\", \"" << built
               << "\", \"" << hash << "\"} to kPins in tests/trainer_pinned_test.cc once the other tests pass here";
}

// On any machine: the same run twice gives the same bits (no kernel may depend on timing, thread
// scheduling or buffer addresses). 20 steps: enough for every kernel of forward, backward and SGD.
TEST(TrainerPinned, TwoRunsGiveIdenticalBits) {
  REQUIRE_LENET_AND_DATA();
  EXPECT_EQ(lenet_hash_after(20), lenet_hash_after(20));
}

// Likewise with the threads inside one replica's kernels (cpu:1 --threads 2): kernels that split a
// sum over threads must deal the work the same way every time (the convolution's weight gradient
// did not, and three identical runs gave three different models).
TEST(TrainerPinned, TwoRunsOnTwoIntraOpThreadsGiveIdenticalBits) {
  REQUIRE_LENET_AND_DATA();
  EXPECT_EQ(lenet_hash_after(10, "cpu:1", 2), lenet_hash_after(10, "cpu:1", 2));
}

}  // namespace
}  // namespace graphrun

// Checkpoints: round trip, atomic replacement, and refusal of truncated, corrupt and foreign files.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "runtime/checkpoint.h"
#include "tests/test_util.h"

namespace graphrun {
namespace {

using runtime::Checkpoint;

Checkpoint sample() {
  Checkpoint ck;
  ck.meta["epoch"] = "3";
  ck.meta["step"] = "1170";
  ck.tensors["w"] = testing::random_tensor({4, 5}, 7);
  ck.tensors["order"] = testing::random_int_tensor({10}, 8, 0, 100);
  return ck;
}

std::string expect_error(const std::string& path) {
  try {
    runtime::load_checkpoint(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(Checkpoint, RoundTrip) {
  std::string dir = testing::temp_dir("ckpt_roundtrip");
  std::string p = dir + "/" + runtime::checkpoint_name(3, 1170);
  runtime::save_checkpoint(p, sample());
  Checkpoint ck = runtime::load_checkpoint(p);
  EXPECT_EQ(ck.meta.at("step"), "1170");
  EXPECT_EQ(testing::max_abs_diff(ck.tensors.at("w"), sample().tensors.at("w")), 0.0);
  EXPECT_EQ(ck.tensors.at("order").to_vector<int64_t>(), sample().tensors.at("order").to_vector<int64_t>());
  EXPECT_FALSE(std::filesystem::exists(p + ".tmp"));
}

TEST(Checkpoint, LatestIsTheNewestByEpochAndStep) {
  std::string dir = testing::temp_dir("ckpt_latest");
  EXPECT_EQ(runtime::latest_checkpoint(dir), "");
  for (auto [e, s] : std::vector<std::pair<int, int>>{{1, 234}, {2, 1000}, {2, 99}, {10, 5}})
    runtime::save_checkpoint(dir + "/" + runtime::checkpoint_name(e, s), sample());
  // A half-written temporary file from a crash is never taken for a checkpoint.
  std::ofstream(dir + "/" + runtime::checkpoint_name(11, 0) + ".tmp") << "partial";
  EXPECT_EQ(std::filesystem::path(runtime::latest_checkpoint(dir)).filename(), runtime::checkpoint_name(10, 5));
}

TEST(Checkpoint, InterruptedWriteLeavesThePreviousOneLoadable) {
  std::string dir = testing::temp_dir("ckpt_crash");
  std::string p = dir + "/" + runtime::checkpoint_name(1, 1);
  runtime::save_checkpoint(p, sample());
  // Simulate a crash half-way through the next write of the same checkpoint: the temp file is partial.
  std::string full;
  {
    std::ifstream f(p, std::ios::binary);
    full.assign(std::istreambuf_iterator<char>(f), {});
  }
  std::ofstream(p + ".tmp", std::ios::binary) << full.substr(0, full.size() / 2);
  Checkpoint ck = runtime::load_checkpoint(runtime::latest_checkpoint(dir));
  EXPECT_EQ(ck.meta.at("epoch"), "3");
}

TEST(Checkpoint, RefusesTruncatedCorruptAndForeignFiles) {
  std::string dir = testing::temp_dir("ckpt_bad");
  std::string p = dir + "/good.grck";
  runtime::save_checkpoint(p, sample());
  std::string full;
  {
    std::ifstream f(p, std::ios::binary);
    full.assign(std::istreambuf_iterator<char>(f), {});
  }
  std::ofstream(dir + "/trunc.grck", std::ios::binary) << full.substr(0, full.size() - 9);
  std::string flipped = full;
  flipped[flipped.size() / 2] ^= 0x5a;
  std::ofstream(dir + "/flip.grck", std::ios::binary) << flipped;
  std::ofstream(dir + "/text.grck") << "hello, not a checkpoint at all";
  EXPECT_NE(expect_error(dir + "/trunc.grck").find("truncated or corrupt"), std::string::npos);
  EXPECT_NE(expect_error(dir + "/flip.grck").find("checksum"), std::string::npos);
  EXPECT_NE(expect_error(dir + "/text.grck").find("not a graphrun checkpoint"), std::string::npos);
  EXPECT_NE(expect_error(dir + "/missing.grck").find("cannot open"), std::string::npos);
}

TEST(Checkpoint, SignatureDistinguishesModels) {
  std::map<std::string, Tensor> a{{"w", Tensor(DType::F32, {4, 5})}}, b{{"w", Tensor(DType::F32, {5, 4})}};
  EXPECT_EQ(runtime::shapes_signature(a), runtime::shapes_signature(a));
  EXPECT_NE(runtime::shapes_signature(a), runtime::shapes_signature(b));
}

}  // namespace
}  // namespace graphrun

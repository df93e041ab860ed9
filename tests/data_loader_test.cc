// The prefetching loader: the same batches whatever the thread count and timing, resuming mid-epoch,
// errors surfacing at their batch, and the seeded crop-and-flip augmentation.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include "runtime/data/loader.h"
#include "tests/data_test_util.h"

namespace graphrun {
namespace {

using namespace runtime::data;
using testing::error_of;

// 50 examples of f32 [2,5,6] whose pixels encode (example, pixel), labels example % 7. Reads sleep a
// random while (drawn from the thread's own generator) so threads finish out of order; example
// `bad` fails to read, as a corrupt image would.
class JitterySource : public Source {
 public:
  explicit JitterySource(int64_t bad = -1) : bad_(bad) {
    specs_ = {{"image", DType::F32, {2, 5, 6}}, {kLabels, DType::I64, {}}};
  }
  std::string describe() const override { return "'jittery'"; }
  int64_t size() const override { return 50; }
  const std::vector<ArraySpec>& arrays() const override { return specs_; }
  bool decode_heavy() const override { return true; }
  void read(const int64_t* idx, int64_t n, const std::map<std::string, Tensor*>& out) const override {
    check_read_buffers(*this, n, out);
    thread_local std::mt19937 rng(std::hash<std::thread::id>()(std::this_thread::get_id()));
    for (int64_t i = 0; i < n; ++i) {
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % 300));
      if (idx[i] == bad_) GR_FAIL("image 'jittery/" << idx[i] << ".png': corrupt or truncated PNG image");
      if (auto it = out.find("image"); it != out.end())
        for (int k = 0; k < 60; ++k) it->second->data<float>()[i * 60 + k] = static_cast<float>(idx[i] * 100 + k);
      if (auto it = out.find(kLabels); it != out.end()) it->second->data<int64_t>()[i] = idx[i] % 7;
    }
  }

 private:
  int64_t bad_;
  std::vector<ArraySpec> specs_;
};

// Everything a run of `steps` batches delivers, as bytes.
std::vector<std::string> run(int threads, bool augment, int64_t epoch, int64_t step, int64_t steps) {
  LoaderOptions o;
  o.batch = 8;
  o.threads = threads;
  o.seed = 42;
  o.augment = augment;
  o.fill = {-1.f, -2.f};
  Loader loader(std::make_shared<JitterySource>(), o);
  loader.start(epoch, step);
  std::vector<std::string> got;
  for (int64_t s = 0; s < steps; ++s) {
    const Batch& b = loader.next();
    std::string rec = std::to_string(b.epoch) + "/" + std::to_string(b.step) + "/" + std::to_string(b.size) + ":";
    rec.append(reinterpret_cast<const char*>(b.indices.data()), b.size * sizeof(int64_t));
    const Tensor& img = b.arrays.at("image");
    rec.append(static_cast<const char*>(img.raw()), b.size * 60 * sizeof(float));
    rec.append(static_cast<const char*>(b.arrays.at(kLabels).raw()), b.size * sizeof(int64_t));
    got.push_back(rec);
  }
  return got;
}

TEST(Loader, BatchesDependOnlyOnSeedEpochAndIndicesNotOnThreads) {
  // 50 examples in batches of 8: 7 steps an epoch, the last of 2; three epochs run through.
  auto sync = run(0, true, 0, 0, 21), one = run(1, true, 0, 0, 21), three = run(3, true, 0, 0, 21);
  EXPECT_EQ(sync, one);
  EXPECT_EQ(sync, three);
  EXPECT_NE(run(3, false, 0, 0, 21), three);  // augmentation did something
  // The order is the trainer's epoch_order.
  LoaderOptions o;
  o.batch = 8;
  o.seed = 42;
  o.threads = 3;
  Loader loader(std::make_shared<JitterySource>(), o);
  loader.start(0);
  for (int64_t e = 0; e < 2; ++e) {
    std::vector<int64_t> order = epoch_order(50, 42, e);
    for (int64_t s = 0; s < 7; ++s) {
      const Batch& b = loader.next();
      ASSERT_EQ(b.epoch, e);
      ASSERT_EQ(b.step, s);
      ASSERT_EQ(b.size, s < 6 ? 8 : 2);
      for (int64_t i = 0; i < b.size; ++i) {
        ASSERT_EQ(b.indices[i], order[s * 8 + i]);
        ASSERT_EQ(b.arrays.at(kLabels).data<int64_t>()[i], order[s * 8 + i] % 7);
      }
    }
  }
}

TEST(Loader, ResumingMidEpochGivesTheBatchesOfTheRunThatWentOn) {
  auto whole = run(2, true, 0, 0, 14);
  auto resumed = run(3, true, 1, 3, 4);  // epoch 1, step 3: the 11th batch on
  ASSERT_EQ(resumed.size(), 4u);
  for (int k = 0; k < 4; ++k) EXPECT_EQ(resumed[k], whole[10 + k]) << k;
  EXPECT_NE(error_of([] { run(1, false, 0, 7, 1); }).find("no batch 7"), std::string::npos);
}

// A replica's loader (shard_rank of shard_count) holds exactly its data::shard of each global batch,
// augmented as the whole batch's loader augments those examples.
TEST(Loader, ShardsAreTheReplicasPartsOfTheGlobalBatch) {
  LoaderOptions o;
  o.batch = 8;
  o.seed = 42;
  o.augment = true;
  o.threads = 2;
  Loader whole(std::make_shared<JitterySource>(), o);
  std::vector<std::unique_ptr<Loader>> parts;
  for (int r = 0; r < 3; ++r) {
    LoaderOptions p = o;
    p.shard_rank = r;
    p.shard_count = 3;
    parts.push_back(std::make_unique<Loader>(std::make_shared<JitterySource>(), p));
    parts.back()->start(0);
  }
  whole.start(0);
  for (int s = 0; s < 9; ++s) {  // into the second epoch; the last batch of 2 leaves shard 2 empty
    const Batch& w = whole.next();
    const Shards sh = shard(w.size, 3);
    for (int r = 0; r < 3; ++r) {
      const Batch& b = parts[r]->next();
      ASSERT_EQ(b.size, sh.size[r]) << s;
      for (int64_t i = 0; i < b.size; ++i) EXPECT_EQ(b.indices[i], w.indices[sh.begin[r] + i]);
      EXPECT_EQ(0, std::memcmp(b.arrays.at("image").raw(), w.slice("image", sh.begin[r], b.size).raw(),
                               static_cast<size_t>(b.size) * 60 * sizeof(float)));
    }
  }
}

TEST(Loader, FewerStepsPerEpochDropTheLastBatches) {
  LoaderOptions o;
  o.batch = 8;
  o.threads = 2;
  o.steps_per_epoch = 6;  // 50 examples: the short 7th batch is dropped
  Loader loader(std::make_shared<JitterySource>(), o);
  loader.start(0);
  for (int s = 0; s < 6; ++s) EXPECT_EQ(loader.next().size, 8);
  const Batch& b = loader.next();
  EXPECT_EQ(b.epoch, 1);
  EXPECT_EQ(b.step, 0);
  EXPECT_EQ(b.indices[0], epoch_order(50, 0, 1)[0]);
}

TEST(Loader, AReadErrorSurfacesAtItsBatchWhateverTheThreads) {
  for (int threads : {0, 3}) {
    LoaderOptions o;
    o.batch = 10;
    o.threads = threads;
    o.shuffle = false;
    Loader loader(std::make_shared<JitterySource>(23), o);
    loader.start(0);
    loader.next();
    loader.next();
    std::string e = error_of([&] { loader.next(); });
    EXPECT_NE(e.find("jittery/23.png"), std::string::npos) << threads << ": " << e;
    EXPECT_EQ(loader.next().step, 3);  // the loader goes on after an error
  }
  EXPECT_NE(error_of([] { verify_all(std::make_shared<JitterySource>(49), 2, 8); }).find("jittery/49.png"),
            std::string::npos);
  verify_all(std::make_shared<JitterySource>(), 2, 8);
}

TEST(Loader, SlicesAreViewsOfAShard) {
  LoaderOptions o;
  o.batch = 8;
  o.shuffle = false;
  Loader loader(std::make_shared<JitterySource>(), o);
  loader.start(0);
  const Batch& b = loader.next();
  Tensor shard = b.slice("image", 3, 4);
  EXPECT_EQ(shard.shape(), (Shape{4, 2, 5, 6}));
  EXPECT_EQ(shard.data<float>()[0], 300.f);
  EXPECT_EQ(b.slice(kLabels, 6, 2).data<int64_t>()[1], 0);
  EXPECT_FALSE(error_of([&] { b.slice("image", 6, 3); }).empty());
}

TEST(Augment, CropsFromThePaddedImageAndFlips) {
  // 1 x 3 x 3 image 1..9, pad 1. Crop offset (dy, dx) = (0, 2) moves the content down one row
  // (dy - pad = -1) and left one column (dx - pad = +1), the uncovered pixels valued fill.
  std::vector<float> img{1, 2, 3, 4, 5, 6, 7, 8, 9}, scratch(9);
  augment_image(img.data(), 1, 3, 3, 1, {0.5f}, {0, 2, false}, scratch.data());
  EXPECT_EQ(img, (std::vector<float>{0.5f, 0.5f, 0.5f, 2, 3, 0.5f, 5, 6, 0.5f}));
  img = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  augment_image(img.data(), 1, 3, 3, 1, {}, {1, 1, true}, scratch.data());
  EXPECT_EQ(img, (std::vector<float>{3, 2, 1, 6, 5, 4, 9, 8, 7}));
  // The draws are a function of (seed, epoch, example): reproducible, and they cover the range.
  EXPECT_EQ(augment_draw(1, 2, 3, 4).dx, augment_draw(1, 2, 3, 4).dx);
  std::vector<int> seen_dx(9), seen_dy(9);
  int flips = 0;
  for (int64_t i = 0; i < 4000; ++i) {
    AugmentDraw d = augment_draw(5, 0, i, 4);
    ASSERT_TRUE(d.dx >= 0 && d.dx <= 8 && d.dy >= 0 && d.dy <= 8);
    ++seen_dx[d.dx];
    ++seen_dy[d.dy];
    flips += d.flip;
  }
  for (int k = 0; k < 9; ++k) EXPECT_GT(seen_dx[k], 300) << k;
  for (int k = 0; k < 9; ++k) EXPECT_GT(seen_dy[k], 300) << k;
  EXPECT_NEAR(flips, 2000, 200);
  int differ = 0;
  for (int64_t i = 0; i < 100; ++i) differ += augment_draw(5, 0, i, 4).dx != augment_draw(5, 1, i, 4).dx;
  EXPECT_GT(differ, 50);  // a new epoch draws anew
}

}  // namespace
}  // namespace graphrun

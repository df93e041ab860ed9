// IDX reader: raw and gzipped files, the checks on broken files, batch order and sharding.
#include <gtest/gtest.h>
#include <zlib.h>

#include <fstream>
#include <set>

#include "runtime/data/idx.h"
#include "tests/test_util.h"

namespace graphrun {
namespace {

using runtime::data::Dataset;

std::string be32(uint32_t v) {
  return std::string{char(v >> 24), char(v >> 16), char(v >> 8), char(v)};
}

std::string idx_bytes(std::vector<uint32_t> dims, int n_data) {
  std::string s = std::string{0, 0, 8, char(dims.size())};
  for (auto d : dims) s += be32(d);
  for (int i = 0; i < n_data; ++i) s += char(i % 251);
  return s;
}

void write_raw(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

void write_gz(const std::string& path, const std::string& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  gzwrite(f, bytes.data(), bytes.size());
  gzclose(f);
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Idx, ReadsRawAndGzippedFilesAlike) {
  std::string d = testing::temp_dir("idx_read");
  write_raw(d + "/train-images-idx3-ubyte", idx_bytes({3, 2, 2}, 12));
  write_gz(d + "/train-labels-idx1-ubyte.gz", idx_bytes({3}, 3));
  Dataset ds = runtime::data::load_split(d, "train");
  ASSERT_EQ(ds.images.shape(), (Shape{3, 1, 2, 2}));
  ASSERT_EQ(ds.labels.shape(), (Shape{3}));
  EXPECT_FLOAT_EQ(ds.images.data<float>()[5], 5 / 255.f);
  EXPECT_EQ(ds.labels.data<int64_t>()[2], 2);
  EXPECT_EQ(ds.num_classes(), 3);
}

TEST(Idx, BrokenFilesAreClearErrorsNamingTheFile) {
  std::string d = testing::temp_dir("idx_broken");
  write_raw(d + "/bad_magic", std::string("\x12\x34\x08\x01") + be32(2) + "ab");
  EXPECT_NE(error_of([&] { runtime::data::read_idx_u8(d + "/bad_magic"); }).find("bad magic"), std::string::npos);
  write_raw(d + "/short", idx_bytes({10, 28, 28}, 100));
  std::string e = error_of([&] { runtime::data::read_idx_u8(d + "/short"); });
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
  EXPECT_NE(e.find(d + "/short"), std::string::npos) << e;
  write_raw(d + "/long", idx_bytes({2}, 3));
  EXPECT_NE(error_of([&] { runtime::data::read_idx_u8(d + "/long"); }).find("needs 2"), std::string::npos);
  write_raw(d + "/tiny", "ab");
  EXPECT_NE(error_of([&] { runtime::data::read_idx_u8(d + "/tiny"); }).find("too short"), std::string::npos);
  write_raw(d + "/floats", std::string{0, 0, 0x0D, 1} + be32(1) + "abcd");
  EXPECT_NE(error_of([&] { runtime::data::read_idx_u8(d + "/floats"); }).find("unsigned bytes"), std::string::npos);
  // A gzip file cut in half.
  write_gz(d + "/whole.gz", idx_bytes({1000}, 1000));
  std::ifstream in(d + "/whole.gz", std::ios::binary);
  std::string gz((std::istreambuf_iterator<char>(in)), {});
  write_raw(d + "/cut.gz", gz.substr(0, gz.size() / 2));
  e = error_of([&] { runtime::data::read_idx_u8(d + "/cut.gz"); });
  EXPECT_NE(e.find("cut.gz"), std::string::npos) << e;
  EXPECT_FALSE(e.empty());
  e = error_of([&] { runtime::data::read_idx_u8(d + "/nothing_here"); });
  EXPECT_NE(e.find("does not exist"), std::string::npos) << e;
}

TEST(Idx, ImagesAndLabelsMustAgree) {
  std::string d = testing::temp_dir("idx_agree");
  write_raw(d + "/t10k-images-idx3-ubyte", idx_bytes({3, 2, 2}, 12));
  write_raw(d + "/t10k-labels-idx1-ubyte", idx_bytes({4}, 4));
  std::string e = error_of([&] { runtime::data::load_split(d, "t10k"); });
  EXPECT_NE(e.find("3 images"), std::string::npos) << e;
  EXPECT_NE(e.find("4 labels"), std::string::npos) << e;
  // Swapped files: a labels file where images belong.
  write_raw(d + "/t10k-images-idx3-ubyte", idx_bytes({4}, 4));
  e = error_of([&] { runtime::data::load_split(d, "t10k"); });
  EXPECT_NE(e.find("rank 1"), std::string::npos) << e;
  e = error_of([&] { runtime::data::load_split(d, "train"); });
  EXPECT_NE(e.find("train-images-idx3-ubyte"), std::string::npos) << e;
  e = error_of([&] { runtime::data::load_split(d + "/missing", "train"); });
  EXPECT_NE(e.find("does not exist"), std::string::npos) << e;
}

TEST(Idx, EpochOrderIsASeededPermutation) {
  auto a = runtime::data::epoch_order(1000, 7, 0), b = runtime::data::epoch_order(1000, 7, 0);
  auto c = runtime::data::epoch_order(1000, 7, 1), d = runtime::data::epoch_order(1000, 8, 0);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_NE(a, d);
  EXPECT_EQ(std::set<int64_t>(a.begin(), a.end()).size(), 1000u);
  EXPECT_EQ(*std::max_element(a.begin(), a.end()), 999);
}

TEST(Idx, ShardSizesDifferByAtMostOne) {
  for (int64_t batch : {1, 7, 96, 256})
    for (int r = 1; r <= 4; ++r) {
      if (batch < r) continue;
      auto s = runtime::data::shard(batch, r);
      int64_t total = 0;
      for (int i = 0; i < r; ++i) {
        EXPECT_EQ(s.begin[i], total);
        total += s.size[i];
        EXPECT_LE(s.size[0] - s.size[i], 1);
        EXPECT_GE(s.size[i], 1);
      }
      EXPECT_EQ(total, batch);
    }
}

TEST(Idx, ReadsTheInstalledFashionMnist) {
  std::string dir = runtime::data::kDefaultDataDir;
  if (!std::ifstream(dir + "/t10k-labels-idx1-ubyte.gz")) GTEST_SKIP() << "no Fashion-MNIST at " << dir;
  Dataset ds = runtime::data::load_split(dir, "t10k");
  EXPECT_EQ(ds.images.shape(), (Shape{10000, 1, 28, 28}));
  EXPECT_EQ(ds.num_classes(), 10);
}

}  // namespace
}  // namespace graphrun

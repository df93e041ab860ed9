// Data sources: .npy headers, .npy folders, .npz files, recognition by path, splits, fitting to a
// model, every bad-data case, Fashion-MNIST re-exported giving the IDX tensors, and the mmap bound.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <thread>

#include "graph/tensor_io.h"
#include "runtime/data/fit.h"
#include "runtime/data/image.h"
#include "runtime/data/npy.h"
#include "tests/data_test_util.h"

namespace graphrun {
namespace {

using namespace runtime::data;
using testing::error_of;
using testing::read_all;
using testing::run_python;

std::string npy_bytes(const std::string& dict, size_t payload) {
  std::string h = dict;
  while ((10 + h.size() + 1) % 64) h += ' ';
  h += '\n';
  std::string s = std::string("\x93NUMPY\x01\x00", 8);
  s += char(h.size() & 0xFF);
  s += char(h.size() >> 8);
  return s + h + std::string(payload, '\0');
}

NpyHeader parse(const std::string& b) {
  return parse_npy_header(reinterpret_cast<const unsigned char*>(b.data()), b.size(), b.size(), "'t.npy'");
}

TEST(NpyHeader, ParsesNumpysHeaders) {
  const std::string b = npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }", 24);
  NpyHeader h = parse(b);
  EXPECT_EQ(h.dtype, DType::F32);
  EXPECT_EQ(h.shape, (Shape{3, 2}));
  EXPECT_EQ(h.data_offset, b.size() - 24);
  EXPECT_EQ(h.data_bytes, 24u);
  EXPECT_EQ(parse(npy_bytes("{'descr': '|u1', 'fortran_order': False, 'shape': (5,), }", 5)).shape, (Shape{5}));
  EXPECT_EQ(parse(npy_bytes("{'descr': '<i8', 'fortran_order': False, 'shape': (), }", 8)).shape, (Shape{}));
}

TEST(NpyHeader, AHeaderThatLiesAboutItsPayloadIsAnError) {
  // 10^12 f32 declared, 16 bytes present: refused by the size check, nothing allocated.
  std::string e = error_of([] { parse(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (1000000, 1000000), }", 16)); });
  EXPECT_NE(e.find("'t.npy'"), std::string::npos) << e;
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
  e = error_of([] { parse(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", 12)); });
  EXPECT_NE(e.find("corrupt"), std::string::npos) << e;
  e = error_of([] { parse(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", 4)); });
  EXPECT_NE(e.find("absurd"), std::string::npos) << e;
}

TEST(NpyHeader, MalformedHeadersAreErrors) {
  for (const char* bad : {"{'descr': '<f4', 'shape': (2,), }",                                    // no fortran_order
                          "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}",     // extra key
                          "{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }",          // negative
                          "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), } junk",      // trailing text
                          "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}",
                          "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,)}"}) {
    std::string e = error_of([&] { parse(npy_bytes(bad, 8)); });
    EXPECT_NE(e.find("'t.npy'"), std::string::npos) << bad << ": " << e;
  }
  EXPECT_NE(error_of([] { parse(npy_bytes("{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", 8)); }).find("Fortran"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse(npy_bytes("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", 8)); }).find("big-endian"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse("\x93NUMPY"); }).find("too short"), std::string::npos);
  EXPECT_NE(error_of([] { parse(std::string("PK\x03\x04......", 10)); }).find("not a .npy"), std::string::npos);
}

// A folder with x f32[5,2,3] (value = 100*example + element) and labels i64[5].
std::string small_npy_folder(const std::string& name) {
  std::string d = testing::temp_dir(name);
  std::vector<float> x(30);
  for (int i = 0; i < 30; ++i) x[i] = 100.f * (i / 6) + i % 6;
  write_npy(d + "/x.npy", Tensor::from_vector<float>({5, 2, 3}, x));
  write_npy(d + "/labels.npy", Tensor::from_vector<int64_t>({5}, {3, 1, 4, 1, 5}));
  return d;
}

TEST(NpyFolder, GathersExamplesIntoTheCallersBuffers) {
  SourcePtr s = open_source(small_npy_folder("npyf_read"));
  EXPECT_EQ(source_kind(testing::binary_dir() + "/test_tmp/npyf_read"), "npy-folder");
  ASSERT_EQ(s->size(), 5);
  EXPECT_EQ(s->spec("x").shape, (Shape{2, 3}));
  EXPECT_EQ(s->spec("labels").shape, (Shape{}));
  Tensor x(DType::F32, {3, 2, 3}), y(DType::I64, {3});
  std::vector<int64_t> idx{4, 0, 1};
  s->read(idx.data(), 3, {{"x", &x}, {"labels", &y}});
  EXPECT_EQ(y.to_vector<int64_t>(), (std::vector<int64_t>{5, 3, 1}));
  EXPECT_EQ(x.data<float>()[0], 400.f);
  EXPECT_EQ(x.data<float>()[5], 405.f);
  EXPECT_EQ(x.data<float>()[6], 0.f);
  EXPECT_EQ(x.data<float>()[17], 105.f);
  // Too small a buffer, or the wrong dtype, is refused.
  Tensor small(DType::F32, {2, 2, 3});
  EXPECT_NE(error_of([&] { s->read(idx.data(), 3, {{"x", &small}}); }).find("does not fit"), std::string::npos);
  EXPECT_NE(error_of([&] { s->read(idx.data(), 3, {{"nope", &small}}); }).find("no array 'nope'"), std::string::npos);
  std::vector<int64_t> bad{5};
  EXPECT_NE(error_of([&] { s->read(bad.data(), 1, {{"labels", &y}}); }).find("out of range"), std::string::npos);
}

TEST(NpyFolder, BadFoldersNameTheFile) {
  std::string d = small_npy_folder("npyf_bad");
  write_npy(d + "/z.npy", Tensor::from_vector<float>({4}, {1, 2, 3, 4}));
  std::string e = error_of([&] { open_source(d); });
  EXPECT_NE(e.find("z.npy' has 4 examples"), std::string::npos) << e;
  EXPECT_NE(e.find("share their first dimension"), std::string::npos) << e;
  // A header that lies about the payload: declares 10^9 rows of 1000 floats, holds 8 bytes.
  std::filesystem::remove(d + "/z.npy");
  std::ofstream(d + "/z.npy", std::ios::binary)
      << npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000, 1000), }", 8);
  e = error_of([&] { open_source(d); });
  EXPECT_NE(e.find("z.npy"), std::string::npos) << e;
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
  std::filesystem::remove(d + "/z.npy");
  write_npy(d + "/z.npy", Tensor::scalar<float>(1.f));
  EXPECT_NE(error_of([&] { open_source(d); }).find("0-d array"), std::string::npos);
}

// GRAPHRUN_NPZ_MEMORY_MB for one scope: 0 reads every stored entry in place, seeking (the path of data larger than
// the in-memory budget); unset, the default (small entries read into memory at open).
class NpzMemory {
 public:
  explicit NpzMemory(const char* mb) {
    if (const char* old = std::getenv("GRAPHRUN_NPZ_MEMORY_MB")) old_ = old;
    if (mb)
      setenv("GRAPHRUN_NPZ_MEMORY_MB", mb, 1);
    else
      unsetenv("GRAPHRUN_NPZ_MEMORY_MB");
  }
  ~NpzMemory() {
    if (old_.empty())
      unsetenv("GRAPHRUN_NPZ_MEMORY_MB");
    else
      setenv("GRAPHRUN_NPZ_MEMORY_MB", old_.c_str(), 1);
  }

 private:
  std::string old_;
};

TEST(Npz, StoredAndDeflatedReadAlike) {
  for (const char* budget : {static_cast<const char*>(nullptr), "0"}) {
    SCOPED_TRACE(budget ? "stored entries read in place" : "stored entries in memory");
    NpzMemory memory(budget);
    std::string d = testing::temp_dir("npz_read");
    run_python(d, R"(
x = (np.arange(7*3*4, dtype=np.float32) * 0.5).reshape(7, 3, 4)
labels = np.array([0, 1, 2, 3, 4, 5, 6], dtype=np.int64)
tok = np.arange(7*5, dtype=np.int32).reshape(7, 5)
np.savez('plain.npz', x=x, labels=labels, tok=tok)
np.savez_compressed('packed.npz', x=x, labels=labels, tok=tok)
os.makedirs('folder')
np.save('folder/x.npy', x); np.save('folder/labels.npy', labels); np.save('folder/tok.npy', tok)
)");
    SourcePtr plain = open_source(d + "/plain.npz"), packed = open_source(d + "/packed.npz"),
              folder = open_source(d + "/folder");
    EXPECT_EQ(source_kind(d + "/plain.npz"), "npz");
    ASSERT_EQ(plain->size(), 7);
    EXPECT_EQ(plain->spec("tok").dtype, DType::I32);
    auto a = read_all(*plain), b = read_all(*packed), c = read_all(*folder);
    for (const char* k : {"x", "labels", "tok"}) {
      EXPECT_TRUE(testing::bytes_equal(a.at(k), b.at(k))) << k;
      EXPECT_TRUE(testing::bytes_equal(a.at(k), c.at(k))) << k;
    }
    EXPECT_EQ(a.at("x").data<float>()[12 * 3 + 1], 18.5f);
    // Shuffled reads from both kinds of entry.
    Tensor x1(DType::F32, {2, 3, 4}), x2(DType::F32, {2, 3, 4});
    std::vector<int64_t> idx{6, 2};
    plain->read(idx.data(), 2, {{"x", &x1}});
    packed->read(idx.data(), 2, {{"x", &x2}});
    EXPECT_TRUE(testing::bytes_equal(x1, x2));
    EXPECT_EQ(x1.data<float>()[0], 6 * 12 * 0.5f);
  }
}

// Concurrent reads of disjoint batches (as loader threads make them) give what one reader gets.
TEST(Npz, ConcurrentReadsOfDisjointBatchesAgreeWithOneReader) {
  std::string d = testing::temp_dir("npz_threads");
  run_python(d, R"(
x = np.random.RandomState(0).rand(400, 33).astype(np.float32)
np.savez('plain.npz', x=x, labels=np.arange(400))
np.savez_compressed('packed.npz', x=x, labels=np.arange(400))
os.makedirs('folder'); np.save('folder/x.npy', x); np.save('folder/labels.npy', np.arange(400))
)");
  for (const char* f : {"plain.npz", "plain.npz (in place)", "packed.npz", "folder"}) {
    const std::string name = f;
    NpzMemory memory(name.find("in place") != std::string::npos ? "0" : nullptr);
    SourcePtr s = open_source(d + "/" + name.substr(0, name.find(' ')));
    auto want = read_all(*s);
    Tensor got(DType::F32, {400, 33});
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
      threads.emplace_back([&, t] {
        Tensor part(DType::F32, {10, 33});
        std::vector<int64_t> idx(10);
        for (int64_t b = t; b < 40; b += 4) {
          for (int64_t i = 0; i < 10; ++i) idx[i] = 399 - (b * 10 + i);  // backwards: every read seeks
          s->read(idx.data(), 10, {{"x", &part}});
          for (int64_t i = 0; i < 10; ++i)
            std::memcpy(got.data<float>() + idx[i] * 33, part.data<float>() + i * 33, 33 * sizeof(float));
        }
      });
    for (auto& t : threads) t.join();
    EXPECT_TRUE(testing::bytes_equal(got, want.at("x"))) << f;
  }
}

TEST(Npz, BadZipsAreOneLineNamingTheFile) {
  std::string d = testing::temp_dir("npz_bad");
  run_python(d, R"(
import zipfile
with zipfile.ZipFile('notes.npz', 'w') as z:
    z.writestr('readme.txt', 'hello')
np.savez('mismatch.npz', x=np.zeros((4, 2), np.float32), labels=np.zeros(5, np.int64))
with zipfile.ZipFile('badentry.npz', 'w') as z:
    z.writestr('x.npy', b'not an array')
# A stored entry whose .npy header claims far more than the entry holds.
hdr = "{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000,), }"
hdr = hdr + ' ' * (63 - 10 - len(hdr)) + '\n'
with zipfile.ZipFile('liar.npz', 'w') as z:
    z.writestr('x.npy', b'\x93NUMPY\x01\x00' + bytes([len(hdr), 0]) + hdr.encode() + b'\0' * 16)
open('garbage.npz', 'wb').write(b'this is not a zip at all' * 10)
with zipfile.ZipFile('empty.npz', 'w') as z:
    pass
np.savez_compressed('whole.npz', x=np.arange(100000, dtype=np.float32), labels=np.zeros(100000, np.int64))
b = open('whole.npz', 'rb').read()
open('cut.npz', 'wb').write(b[:len(b) // 2])
# np.savez stores entries uncompressed: one flipped byte in an array's data, caught by the zip's CRC-32.
np.savez('flipped.npz', x=np.arange(100000, dtype=np.float32), labels=np.zeros(100000, np.int64))
b = bytearray(open('flipped.npz', 'rb').read())
b[b.find(b'NUMPY') + 128 + 40000] ^= 1
open('flipped.npz', 'wb').write(bytes(b))
)");
  struct Case {
    const char* file;
    const char* says;
  } cases[] = {{"notes.npz", "not an npz"},         {"mismatch.npz", "share their first dimension"},
               {"badentry.npz", "not a .npy file"}, {"liar.npz", "truncated .npy"},
               {"garbage.npz", "not a zip file"},   {"empty.npz", "holds no arrays"},
               {"cut.npz", "npz"},                  {"flipped.npz", "does not match the zip's checksum"}};
  for (const auto& c : cases) {
    std::string e = error_of([&] { open_source(d + "/" + c.file); });
    if (std::string(c.file) == "flipped.npz") {  // also where the stored entry is read in place
      NpzMemory memory("0");
      const std::string in_place = error_of([&] { open_source(d + "/" + c.file); });
      EXPECT_NE(in_place.find(c.says), std::string::npos) << in_place;
    }
    std::printf("%s\n", e.c_str());
    EXPECT_NE(e.find(c.file), std::string::npos) << c.file << ": " << e;
    EXPECT_NE(e.find(c.says), std::string::npos) << c.file << ": " << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
}

TEST(Npz, ADeflatedEntryClaimingMoreThanDeflateCanExpandIsRefused) {
  std::string d = testing::temp_dir("npz_bomb");
  // Patch both size fields of a deflated entry to claim 4 GB: refused before any allocation.
  run_python(d, R"(
import struct, zipfile
np.savez_compressed('ok.npz', x=np.zeros(1000, np.float32))
b = bytearray(open('ok.npz', 'rb').read())
lh = b.find(b'PK\x03\x04'); cd = b.find(b'PK\x01\x02')
struct.pack_into('<I', b, lh + 22, 0xFFFFFFF0)
struct.pack_into('<I', b, cd + 24, 0xFFFFFFF0)
open('bomb.npz', 'wb').write(bytes(b))
)");
  std::string e = error_of([&] { open_source(d + "/bomb.npz"); });
  EXPECT_NE(e.find("bomb.npz"), std::string::npos) << e;
  EXPECT_FALSE(e.empty());
}

TEST(SourceKind, RecognisesWhatAPathPointsAt) {
  std::string d = testing::temp_dir("kind");
  std::filesystem::create_directories(d + "/images/cat");
  std::filesystem::create_directories(d + "/empty");
  std::ofstream(d + "/one.npy") << "x";
  std::ofstream(d + "/notes.txt") << "x";
  EXPECT_EQ(source_kind(d + "/images"), "image-folder");
  EXPECT_NE(error_of([&] { source_kind(d + "/one.npy"); }).find("single .npy"), std::string::npos);
  EXPECT_NE(error_of([&] { source_kind(d + "/notes.txt"); }).find("notes.txt"), std::string::npos);
  EXPECT_NE(error_of([&] { source_kind(d + "/nothing"); }).find("does not exist"), std::string::npos);
  EXPECT_NE(error_of([&] { source_kind(d + "/empty"); }).find("no MNIST-format files"), std::string::npos);
}

// A stray .npy at the root of an image folder (mean.npy beside the class folders) made it an npy
// folder. Class folders holding images make an image folder, loose files beside them ignored; with a
// labels.npy beside them the folder reads two ways, and that is an error naming both.
TEST(SourceKind, ClassFoldersOfImagesBesideLooseNpyFilesAreAnImageFolder) {
  namespace fs = std::filesystem;
  std::string d = testing::temp_dir("kind_mixed");
  Image px{2, 2, 1, {1, 2, 3, 4}};
  for (const char* f : {"imgs/cat/deep", "imgs/dog", "arrays/plots", "arrays/.ipynb_checkpoints", "both/cat"})
    fs::create_directories(d + "/" + f);
  write_png(d + "/imgs/cat/deep/0.png", px);  // images deeper down count too
  write_png(d + "/imgs/dog/1.png", px);
  std::ofstream(d + "/arrays/plots/notes.txt") << "no images here";
  write_png(d + "/arrays/.ipynb_checkpoints/plot.png", px);  // hidden: not a class folder
  write_png(d + "/both/cat/0.png", px);
  run_python(d, R"(
np.save('imgs/mean.npy', np.zeros(3, np.float32))
for f in ['arrays', 'both']:
    np.save(f + '/image.npy', np.zeros((4, 2), np.float32))
    np.save(f + '/labels.npy', np.zeros(4, np.int64))
)");
  EXPECT_EQ(source_kind(d + "/imgs"), "image-folder");
  SourcePtr s = open_source(d + "/imgs", {1, 2, 2});
  EXPECT_EQ(s->classes(), (std::vector<std::string>{"cat", "dog"}));
  EXPECT_EQ(source_kind(d + "/arrays"), "npy-folder");
  std::string e = error_of([&] { source_kind(d + "/both"); });
  EXPECT_NE(e.find("data folder '" + d + "/both' reads two ways: as .npy arrays (image.npy, labels.npy) and as class "
                   "folders of images (cat/)"),
            std::string::npos)
      << e;
}

TEST(Split, HeldOutFractionIsSeededDisjointAndComplete) {
  std::string d = testing::temp_dir("split");
  write_npy(d + "/x.npy", Tensor(DType::F32, {1000, 2}));
  write_npy(d + "/labels.npy", Tensor(DType::I64, {1000}));
  SourcePtr src = open_source(d);
  Split a = split_holdout(src, 0.1, 7), b = split_holdout(src, 0.1, 7), c = split_holdout(src, 0.1, 8);
  auto idx = [](const SourcePtr& s) -> const std::vector<int64_t>& { return static_cast<const Subset&>(*s).indices(); };
  EXPECT_EQ(a.held_out->size(), 100);
  EXPECT_EQ(a.train->size(), 900);
  EXPECT_EQ(idx(a.held_out), idx(b.held_out));
  EXPECT_NE(idx(a.held_out), idx(c.held_out));
  std::set<int64_t> all(idx(a.held_out).begin(), idx(a.held_out).end());
  for (int64_t i : idx(a.train)) EXPECT_TRUE(all.insert(i).second);
  EXPECT_EQ(all.size(), 1000u);
  EXPECT_NE(error_of([&] { split_holdout(src, 1.5, 0); }).find("--val-split"), std::string::npos);

  DataSplits s = open_splits(d, "", -1, 3);
  EXPECT_EQ(s.test->size(), 100);
  EXPECT_NE(s.test_from.find("10% of"), std::string::npos) << s.test_from;
  s = open_splits(d, "", 0.25, 3);
  EXPECT_EQ(s.test->size(), 250);
  s = open_splits(d, d, -1, 3);
  EXPECT_EQ(s.test->size(), 1000);
  EXPECT_NE(error_of([&] { open_splits(d, d, 0.1, 3); }).find("--val-split and --test-data"), std::string::npos);
}

TEST(Fit, MatchesConvertsAndChecks) {
  std::string d = testing::temp_dir("fit");
  run_python(d, R"(
img = np.arange(4*28*28, dtype=np.uint8).reshape(4, 28, 28)
np.savez('u8.npz', pixels=img, labels=np.array([0, 9, 3, 1], np.uint8))
np.savez('f64.npz', x=np.linspace(0, 1, 12).reshape(4, 3), y=np.array([0.5, 1.5, -2, 3]))
np.savez('nan.npz', x=np.zeros((3, 3), np.float32), y=np.array([1, np.nan, 2], np.float32))
np.savez('floatcls.npz', x=np.zeros((3, 3), np.float32), labels=np.array([1., 2., 0.], np.float32))
np.savez('two.npz', a=np.zeros((3, 2), np.float32), b=np.ones((3, 5), np.int64), labels=np.zeros(3, np.int64))
)");
  // One model input takes the only non-target array whatever its name; u8 -> f32 / 255; [28,28] feeds [1,28,28].
  FitOptions cls;
  cls.num_classes = 10;
  SourcePtr s = fit_to_model(open_source(d + "/u8.npz"), {{"image", DType::F32, {1, 28, 28}}}, cls);
  auto all = read_all(*s);
  EXPECT_EQ(all.at("image").shape(), (Shape{4, 1, 28, 28}));
  EXPECT_FLOAT_EQ(all.at("image").data<float>()[28 * 28 + 5], static_cast<float>((28 * 28 + 5) % 256) / 255.f);
  EXPECT_EQ(all.at("labels").to_vector<int64_t>(), (std::vector<int64_t>{0, 9, 3, 1}));
  // Labels out of range for the model's classes.
  cls.num_classes = 5;
  std::string e = error_of([&] { fit_to_model(open_source(d + "/u8.npz"), {{"image", DType::F32, {1, 28, 28}}}, cls); });
  EXPECT_NE(e.find("u8.npz' array 'labels': example 1 has class 9, out of range for a model with 5 classes"),
            std::string::npos) << e;
  // Float targets: f64 narrowed, never scaled; NaN refused.
  FitOptions reg;
  reg.labels = "y";
  reg.label_dtype = DType::F32;
  s = fit_to_model(open_source(d + "/f64.npz"), {{"x", DType::F32, {-1}}}, reg);
  all = read_all(*s);
  EXPECT_EQ(all.at("labels").to_vector<float>(), (std::vector<float>{0.5f, 1.5f, -2.f, 3.f}));
  EXPECT_FLOAT_EQ(all.at("x").data<float>()[11], 1.f);
  e = error_of([&] { fit_to_model(open_source(d + "/nan.npz"), {{"x", DType::F32, {3}}}, reg); });
  EXPECT_NE(e.find("nan.npz' array 'y': example 1 has a non-finite target"), std::string::npos) << e;
  // Float class ids, missing arrays, wrong shapes and dtypes.
  e = error_of([&] { fit_to_model(open_source(d + "/floatcls.npz"), {{"x", DType::F32, {3}}}, FitOptions{}); });
  EXPECT_NE(e.find("class ids must be integers"), std::string::npos) << e;
  e = error_of([&] { fit_to_model(open_source(d + "/two.npz"), {{"a", DType::F32, {2}}, {"c", DType::I64, {5}}}, FitOptions{}); });
  EXPECT_NE(e.find("two.npz' has no array 'c' for model input 'c' (it has: a, b, labels)"), std::string::npos) << e;
  e = error_of([&] { fit_to_model(open_source(d + "/two.npz"), {{"a", DType::F32, {3}}, {"b", DType::I64, {5}}}, FitOptions{}); });
  EXPECT_NE(e.find("array 'a' holds f32[2] per example but model input 'a' takes f32[3]"), std::string::npos) << e;
  e = error_of([&] { fit_to_model(open_source(d + "/two.npz"), {{"a", DType::I64, {2}}, {"b", DType::I64, {5}}}, FitOptions{}); });
  EXPECT_NE(e.find("array 'a' is f32 but model input 'a' is i64"), std::string::npos) << e;
  FitOptions other;
  other.labels = "target";
  e = error_of([&] { fit_to_model(open_source(d + "/two.npz"), {{"a", DType::F32, {2}}, {"b", DType::I64, {5}}}, other); });
  EXPECT_NE(e.find("no array 'target' of targets"), std::string::npos) << e;
  // --labels naming a model input: "has no array 'a' for model input 'a' (it has: a, ...)" contradicted itself.
  other.labels = "a";
  e = error_of([&] { fit_to_model(open_source(d + "/two.npz"), {{"a", DType::F32, {2}}, {"b", DType::I64, {5}}}, other); });
  EXPECT_NE(e.find("--labels a names model input 'a', which "), std::string::npos) << e;
  EXPECT_NE(e.find("feeds: the targets are another array (it has: a, b, labels)"), std::string::npos) << e;
  EXPECT_EQ(num_classes(*open_source(d + "/u8.npz")), 10);
  EXPECT_EQ(num_classes(*fit_to_model(open_source(d + "/u8.npz"), {{"image", DType::F32, {1, 28, 28}}}, FitOptions{})), 10);
  // Two inputs by name, i64 token ids.
  s = fit_to_model(open_source(d + "/two.npz"), {{"b", DType::I64, {5}}, {"a", DType::F32, {2}}}, FitOptions{});
  all = read_all(*s);
  EXPECT_EQ(all.at("b").data<int64_t>()[14], 1);
}

TEST(Fit, NormalizesPerChannel) {
  std::string d = testing::temp_dir("fit_norm");
  run_python(d, R"(
np.savez('rgb.npz', x=np.full((2, 3, 2, 2), 255, np.uint8), labels=np.zeros(2, np.int64))
)");
  FitOptions o;
  o.normalize = parse_normalize("0.485,0.456,0.406/0.229,0.224,0.225");
  SourcePtr s = fit_to_model(open_source(d + "/rgb.npz"), {{"x", DType::F32, {3, 2, 2}}}, o);
  auto all = read_all(*s);
  const float* p = all.at("x").data<float>();
  EXPECT_NEAR(p[0], (1 - 0.485f) / 0.229f, 1e-5);
  EXPECT_NEAR(p[4], (1 - 0.456f) / 0.224f, 1e-5);
  EXPECT_NEAR(p[12 + 8], (1 - 0.406f) / 0.225f, 1e-5);
  EXPECT_NE(error_of([] { parse_normalize("0.5,0.5"); }).find("--normalize"), std::string::npos);
  EXPECT_NE(error_of([] { parse_normalize("0.5,x/1,1"); }).find("not a number"), std::string::npos);
  EXPECT_NE(error_of([] { parse_normalize("0.5,0.5/1"); }).find("2 means but 1 stds"), std::string::npos);
  o.normalize = parse_normalize("0.5,0.5/1,1");
  EXPECT_NE(error_of([&] { fit_to_model(open_source(d + "/rgb.npz"), {{"x", DType::F32, {3, 2, 2}}}, o); })
                .find("--normalize gives 2 mean(s)"),
            std::string::npos);
}

TEST(Idx, IsASourceGivingTodaysTensors) {
  if (!testing::have_fashion_mnist()) GTEST_SKIP() << "Fashion-MNIST is not installed (dataset-fashion-mnist)";
  DataSplits s = open_splits(kDefaultDataDir, "", -1, 1);
  EXPECT_EQ(s.train->size(), 60000);
  EXPECT_EQ(s.test->size(), 10000);
  EXPECT_NE(s.test_from.find("t10k"), std::string::npos);
  Dataset ds = load_split(kDefaultDataDir, "t10k");
  std::vector<int64_t> idx{9999, 0, 17};
  Tensor a(DType::F32, {3, 1, 28, 28}), b(DType::F32, {3, 1, 28, 28}), la(DType::I64, {3}), lb(DType::I64, {3});
  gather(ds, idx.data(), 3, a, la);
  s.test->read(idx.data(), 3, {{"image", &b}, {"labels", &lb}});
  EXPECT_TRUE(testing::bytes_equal(a, b));
  EXPECT_TRUE(testing::bytes_equal(la, lb));
}

// Fashion-MNIST's test split re-exported by numpy as .npz (stored and deflated) and as a .npy folder
// gives exactly the tensors of the IDX reader once fitted to LeNet's input.
TEST(FashionMnist, NpzAndNpyFolderGiveTheIdxTensors) {
  if (!testing::have_fashion_mnist()) GTEST_SKIP() << "Fashion-MNIST is not installed (dataset-fashion-mnist)";
  std::string d = testing::temp_dir("fashion_npz");
  run_python(d, std::string(R"(
import gzip
src = ")") + kDefaultDataDir + R"("
def idx(name):
    b = gzip.open(src + '/' + name, 'rb').read()
    nd = b[3]; dims = [int.from_bytes(b[4 + 4*i:8 + 4*i], 'big') for i in range(nd)]
    return np.frombuffer(b, np.uint8, offset=4 + 4*nd).reshape(dims)
x = idx('t10k-images-idx3-ubyte.gz'); y = idx('t10k-labels-idx1-ubyte.gz').astype(np.int64)
np.savez('plain.npz', image=x, labels=y)
np.savez_compressed('packed.npz', image=(x.astype(np.float32) / np.float32(255))[:, None], labels=y)
os.makedirs('folder'); np.save('folder/image.npy', x[:, None]); np.save('folder/labels.npy', y)
)");
  Dataset ds = load_split(kDefaultDataDir, "t10k");
  FitOptions o;
  o.num_classes = 10;
  for (const char* f : {"plain.npz", "packed.npz", "folder"}) {
    SourcePtr s = fit_to_model(open_source(d + "/" + f), {{"x", DType::F32, {1, 28, 28}}}, o);
    auto all = read_all(*s);
    EXPECT_TRUE(testing::bytes_equal(all.at("x"), ds.images)) << f;
    EXPECT_TRUE(testing::bytes_equal(all.at("labels"), ds.labels)) << f;
  }
}

long rss_kb() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  return -1;
}

// Reading every example of a .npy larger than kResidentLimit keeps resident memory near one batch:
// the file is mapped, not loaded, and each read's pages are dropped after it.
// GRAPHRUN_DATA_BIG_MB=4096 runs the same check on 4 GB.
TEST(NpyFolder, MemoryMappedReadsKeepResidentMemorySmall) {
  const char* env = std::getenv("GRAPHRUN_DATA_BIG_MB");
  const int64_t mb = env ? std::atoll(env) : 256;
  const int64_t row = 1024, rows = mb * (1 << 20) / (row * 4);
  std::string d = testing::temp_dir("npy_big");
  {
    std::ofstream f(d + "/x.npy", std::ios::binary);
    f << npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(rows) + ", 1024), }", 0);
    std::vector<float> buf(row * 256);
    for (int64_t r0 = 0; r0 < rows; r0 += 256) {
      const int64_t n = std::min<int64_t>(256, rows - r0);
      for (int64_t r = 0; r < n; ++r)
        for (int64_t j = 0; j < row; ++j) buf[r * row + j] = j == 0 ? static_cast<float>(r0 + r) : static_cast<float>(j);
      f.write(reinterpret_cast<const char*>(buf.data()), n * row * 4);
    }
    std::vector<int64_t> labels(rows, 1);
    write_npy(d + "/labels.npy", Tensor::from_vector<int64_t>({rows}, labels));
  }
  SourcePtr s = open_source(d);
  ASSERT_EQ(s->size(), rows);
  const long before = rss_kb();
  Tensor x(DType::F32, {256, row});
  std::vector<int64_t> idx(256);
  long peak = before;
  for (int64_t r0 = 0; r0 < rows; r0 += 256) {
    const int64_t n = std::min<int64_t>(256, rows - r0);
    for (int64_t i = 0; i < n; ++i) idx[i] = (r0 + i) * 7919 % rows;  // scattered, as a shuffled epoch reads
    s->read(idx.data(), n, {{"x", &x}});
    ASSERT_EQ(x.data<float>()[0], static_cast<float>(idx[0]));
    ASSERT_EQ(x.data<float>()[(n - 1) * row + 5], 5.f);
    peak = std::max(peak, rss_kb());
  }
  std::printf("mapped %lld MB: RSS %ld MB before reading, peak %ld MB\n", static_cast<long long>(mb), before / 1024,
              peak / 1024);
  EXPECT_LT(peak - before, 48 * 1024) << "resident memory grew by " << (peak - before) / 1024 << " MB";
}

}  // namespace
}  // namespace graphrun

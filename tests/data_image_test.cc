// Image folders: PNG/JPEG decoding of every colour type, PIL-compatible channel conversion and resize
// (checked against torch's antialiased bilinear), torchvision's ImageFolder order, the bad-image
// errors, and Fashion-MNIST as a PNG class-folder tree giving exactly the IDX tensors.
#include <gtest/gtest.h>
#include <jpeglib.h>
#include <malloc.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "graph/tensor_io.h"
#include "runtime/data/fit.h"
#include "runtime/data/image.h"
#include "runtime/data/loader.h"
#include "runtime/data/source.h"
#include "tests/data_test_util.h"

namespace graphrun {
namespace {

using namespace runtime::data;
using testing::error_of;
using testing::run_python;
namespace fs = std::filesystem;

std::string file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), {});
}

Image decode_file(const std::string& path) {
  std::string b = file_bytes(path);
  Image img;
  decode_image(reinterpret_cast<const unsigned char*>(b.data()), b.size(), "'" + path + "'", img);
  return img;
}

Image pattern(int64_t w, int64_t h, int64_t c, int seed) {
  Image img{w, h, c, std::vector<uint8_t>(static_cast<size_t>(w * h * c))};
  for (size_t i = 0; i < img.pixels.size(); ++i) img.pixels[i] = static_cast<uint8_t>((i * 37 + seed * 101) % 256);
  return img;
}

const char* kPngWriter = R"(
import zlib, struct
def png(path, w, h, ctype, depth, rows, plte=None, trns=None):
    def chunk(t, d): return struct.pack('>I', len(d)) + t + d + struct.pack('>I', zlib.crc32(t + d) & 0xffffffff)
    out = b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', w, h, depth, ctype, 0, 0, 0))
    if plte: out += chunk(b'PLTE', plte)
    if trns: out += chunk(b'tRNS', trns)
    out += chunk(b'IDAT', zlib.compress(b''.join(b'\0' + r for r in rows))) + chunk(b'IEND', b'')
    open(path, 'wb').write(out)
)";

TEST(ImageDecode, EveryPngColourTypeBecomesGreyOrRgb) {
  std::string d = testing::temp_dir("img_png");
  run_python(d, std::string(kPngWriter) + R"(
png('rgba.png', 2, 1, 6, 8, [bytes([10, 20, 30, 0, 40, 50, 60, 255])])
png('grey16.png', 2, 1, 0, 16, [struct.pack('>HH', 0x1234, 0xFFFF)])
png('palette.png', 3, 1, 3, 8, [bytes([1, 0, 1])], plte=bytes([255, 0, 0, 0, 0, 255]))
png('bits.png', 8, 1, 0, 1, [bytes([0b10100000])])
png('greyalpha.png', 1, 1, 4, 8, [bytes([77, 9])])
)");
  Image a = decode_file(d + "/rgba.png");
  EXPECT_EQ(a.channels, 3);  // alpha dropped, as PIL's convert("RGB")
  EXPECT_EQ(a.pixels, (std::vector<uint8_t>{10, 20, 30, 40, 50, 60}));
  Image g = decode_file(d + "/grey16.png");
  EXPECT_EQ(g.channels, 1);
  EXPECT_EQ(g.pixels, (std::vector<uint8_t>{18, 255}));
  Image p = decode_file(d + "/palette.png");
  EXPECT_EQ(p.pixels, (std::vector<uint8_t>{0, 0, 255, 255, 0, 0, 0, 0, 255}));
  Image b = decode_file(d + "/bits.png");
  EXPECT_EQ(b.pixels, (std::vector<uint8_t>{255, 0, 255, 0, 0, 0, 0, 0}));
  EXPECT_EQ(decode_file(d + "/greyalpha.png").pixels, (std::vector<uint8_t>{77}));
}

TEST(ImageDecode, JpegRoundTripsWithinCompressionError) {
  std::string d = testing::temp_dir("img_jpeg");
  Image smooth{16, 16, 3, {}};
  for (int y = 0; y < 16; ++y)
    for (int x = 0; x < 16; ++x)
      for (int c = 0; c < 3; ++c) smooth.pixels.push_back(static_cast<uint8_t>(20 + 6 * x + 3 * y + 20 * c));
  write_jpeg(d + "/s.jpg", smooth, 95);
  Image back = decode_file(d + "/s.jpg");
  ASSERT_EQ(back.channels, 3);
  ASSERT_EQ(back.pixels.size(), smooth.pixels.size());
  int worst = 0;
  for (size_t i = 0; i < back.pixels.size(); ++i) worst = std::max(worst, std::abs(back.pixels[i] - smooth.pixels[i]));
  EXPECT_LE(worst, 6);
  Image grey = pattern(8, 8, 1, 0);
  write_jpeg(d + "/g.jpg", grey, 90);
  EXPECT_EQ(decode_file(d + "/g.jpg").channels, 1);
}

// libjpeg warns about stray bytes between segments ("45 extraneous bytes before marker 0xd9", common in
// real photo sets) and unknown JFIF revisions; PIL decodes those files, and their pixels are the clean
// file's. Only the warnings that image data is missing or garbled are errors.
TEST(ImageDecode, JpegWarningsAboutBytesAroundThePixelsAreNotErrors) {
  std::string d = testing::temp_dir("img_jpeg_warn");
  write_jpeg(d + "/clean.jpg", pattern(16, 16, 3, 7), 90);
  const std::string clean = file_bytes(d + "/clean.jpg");
  const Image want = decode_file(d + "/clean.jpg");
  auto decodes_as_clean = [&](const std::string& name, const std::string& bytes) {
    std::ofstream(d + "/" + name, std::ios::binary) << bytes;
    std::string e = error_of([&] { EXPECT_EQ(decode_file(d + "/" + name).pixels, want.pixels) << name; });
    EXPECT_EQ(e, "") << name;
  };
  ASSERT_EQ(clean.substr(clean.size() - 2), "\xFF\xD9");
  decodes_as_clean("extra_eoi.jpg", clean.substr(0, clean.size() - 2) + std::string(45, '\0') + "\xFF\xD9");
  const size_t dqt = clean.find("\xFF\xDB");
  ASSERT_NE(dqt, std::string::npos);
  decodes_as_clean("extra_hdr.jpg", clean.substr(0, dqt) + "junk" + clean.substr(dqt));
  std::string jfif = clean;
  ASSERT_EQ(jfif.substr(6, 5), std::string("JFIF\0", 5));
  jfif[11] = 3;  // JFIF 3.01: "unknown JFIF revision number"
  decodes_as_clean("jfif3.jpg", jfif);
  // Data cut short inside the scan, with an EOI after it: libjpeg would fill the rest with grey.
  const size_t sos = clean.find("\xFF\xDA");
  const std::string cut = clean.substr(0, sos + (clean.size() - sos) / 2) + "\xFF\xD9";
  std::ofstream(d + "/cut.jpg", std::ios::binary) << cut;
  std::string e = error_of([&] { decode_file(d + "/cut.jpg"); });
  EXPECT_NE(e.find("premature end of data segment"), std::string::npos) << e;
}

// A 4-channel JPEG through libjpeg directly: CMYK stored inverted (Adobe's convention, as PIL writes
// it) and recoded as YCCK (Adobe transform 2), which PIL cannot write.
void write_ycck_jpeg(const std::string& path, int w, int h, const std::vector<uint8_t>& cmyk) {
  FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_TRUE(f);
  jpeg_compress_struct c;
  jpeg_error_mgr err;
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  jpeg_stdio_dest(&c, f);
  c.image_width = w;
  c.image_height = h;
  c.input_components = 4;
  c.in_color_space = JCS_CMYK;
  jpeg_set_defaults(&c);
  jpeg_set_colorspace(&c, JCS_YCCK);
  jpeg_set_quality(&c, 90, TRUE);
  jpeg_start_compress(&c, TRUE);
  while (c.next_scanline < c.image_height) {
    JSAMPROW row = const_cast<uint8_t*>(cmyk.data()) + static_cast<size_t>(c.next_scanline) * w * 4;
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  std::fclose(f);
}

// CMYK JPEGs (PIL's, with the Adobe marker it writes and with that marker stripped) and a YCCK one decode
// to PIL's convert("RGB") exactly, and feed a 1-channel model PIL's convert("L") of that.
TEST(ImageDecode, CmykAndYcckJpegsBecomeRgbAsInPil) {
  std::string d = testing::temp_dir("img_cmyk");
  const int w = 24, h = 16;
  std::vector<uint8_t> cmyk;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 4; ++c) cmyk.push_back(static_cast<uint8_t>((40 + 7 * x + 11 * y + 60 * c) % 256));
  write_ycck_jpeg(d + "/ycck.jpg", w, h, cmyk);
  run_python(d, R"(
from PIL import Image
y, x = np.mgrid[0:16, 0:24]
a = np.stack([(40 + 7 * x + 11 * y + 60 * c) % 256 for c in range(4)], -1).astype(np.uint8)
Image.fromarray(a, 'CMYK').save('cmyk.jpg', quality=90)
b = open('cmyk.jpg', 'rb').read()
i = b.index(b'\xff\xee')  # the Adobe APP14 segment PIL writes
assert Image.open('cmyk.jpg').mode == 'CMYK'
open('noadobe.jpg', 'wb').write(b[:i] + b[i + 2 + int.from_bytes(b[i + 2:i + 4], 'big'):])
for n in ['cmyk', 'noadobe', 'ycck']:
    im = Image.open(n + '.jpg')
    assert im.mode == 'CMYK', im.mode
    rgb = im.convert('RGB')
    np.save(n + '_rgb.npy', np.asarray(rgb))
    np.save(n + '_l.npy', np.asarray(rgb.convert('L')))
)");
  for (const char* n : {"cmyk", "noadobe", "ycck"}) {
    Image img = decode_file(d + "/" + n + ".jpg");
    ASSERT_EQ(img.channels, 3) << n;
    ASSERT_EQ(img.width, w);
    Tensor rgb = read_npy(d + "/" + n + "_rgb.npy");
    ASSERT_EQ(rgb.numel(), w * h * 3);
    EXPECT_EQ(std::memcmp(img.pixels.data(), rgb.raw(), img.pixels.size()), 0) << n;
    Tensor l = read_npy(d + "/" + n + "_l.npy");
    std::vector<float> grey(w * h);
    image_to_chw(img, 1, h, w, grey.data());
    for (int i = 0; i < w * h; ++i) ASSERT_EQ(grey[i], l.data<uint8_t>()[i] / 255.0f) << n << " pixel " << i;
  }
}

TEST(ImageConvert, ChannelsAsPilConvert) {
  Image rgb{1, 1, 3, {10, 200, 30}};
  float out[3];
  image_to_chw(rgb, 1, 1, 1, out);
  EXPECT_FLOAT_EQ(out[0], 124.f / 255.f);  // ITU-R 601 luma, PIL's integer rounding
  Image grey{1, 1, 1, {51}};
  image_to_chw(grey, 3, 1, 1, out);
  for (float v : out) EXPECT_FLOAT_EQ(v, 51.f / 255.f);
}

// Our resize against torch's bilinear with antialias=True (built to match PIL), up and down.
TEST(ImageConvert, ResizeMatchesTorchAntialiasedBilinear) {
  std::string d = testing::temp_dir("img_resize");
  const int64_t sizes[][4] = {{13, 17, 28, 28}, {64, 48, 20, 30}, {7, 40, 9, 5}};  // in H, W -> out H, W
  for (const auto& s : sizes) {
    Image img = pattern(s[1], s[0], 3, static_cast<int>(s[2]));
    Tensor chw(DType::F32, {3, s[0], s[1]});
    image_to_chw(img, 3, s[0], s[1], chw.data<float>());  // same size: a copy
    write_npy(d + "/in.npy", chw);
    Tensor ours(DType::F32, {3, s[2], s[3]});
    image_to_chw(img, 3, s[2], s[3], ours.data<float>());
    testing::CommandResult r = testing::run_command(
        testing::python() + " -c \"import numpy as np, torch; x = torch.from_numpy(np.load('" + d +
        "/in.npy'))[None]; y = torch.nn.functional.interpolate(x, size=(" + std::to_string(s[2]) + "," +
        std::to_string(s[3]) + "), mode='bilinear', align_corners=False, antialias=True); np.save('" + d +
        "/out.npy', y[0].numpy())\"");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    Tensor theirs = read_npy(d + "/out.npy");
    EXPECT_LT(testing::max_abs_diff(ours, theirs), 2e-5) << s[0] << "x" << s[1] << " -> " << s[2] << "x" << s[3];
  }
}

TEST(ImageFolder, ClassesAndFilesInTorchvisionOrder) {
  std::string d = testing::temp_dir("imgf_order");
  fs::create_directories(d + "/b_dog/sub");
  fs::create_directories(d + "/a_cat");
  write_png(d + "/a_cat/2.png", pattern(4, 4, 1, 1));
  write_png(d + "/a_cat/10.PNG", pattern(4, 4, 3, 2));
  std::ofstream(d + "/a_cat/notes.txt") << "not an image: skipped, as torchvision does";
  write_png(d + "/b_dog/x.png", pattern(4, 4, 1, 3));
  write_jpeg(d + "/b_dog/sub/y.jpg", pattern(4, 4, 3, 4), 90);
  std::ofstream(d + "/README") << "a file beside the class folders";
  SourcePtr s = open_source(d, {3, 4, 4});
  EXPECT_EQ(source_kind(d), "image-folder");
  EXPECT_EQ(s->classes(), (std::vector<std::string>{"a_cat", "b_dog"}));
  ASSERT_EQ(s->size(), 4);
  EXPECT_TRUE(s->decode_heavy());
  auto all = testing::read_all(*s);
  EXPECT_EQ(all.at("labels").to_vector<int64_t>(), (std::vector<int64_t>{0, 0, 1, 1}));
  Tensor want(DType::F32, {3, 4, 4});
  image_to_chw(pattern(4, 4, 3, 2), 3, 4, 4, want.data<float>());  // "10.PNG" sorts before "2.png"
  EXPECT_EQ(std::memcmp(all.at("image").raw(), want.raw(), want.nbytes()), 0);
  image_to_chw(pattern(4, 4, 1, 3), 3, 4, 4, want.data<float>());  // b_dog/x.png before b_dog/sub/y.jpg
  EXPECT_EQ(std::memcmp(static_cast<char*>(all.at("image").raw()) + 2 * want.nbytes(), want.raw(), want.nbytes()), 0);
  // Resized on read to whatever the model takes.
  SourcePtr small = open_source(d, {1, 2, 3});
  EXPECT_EQ(small->spec("image").shape, (Shape{1, 2, 3}));
  EXPECT_EQ(testing::read_all(*small).at("image").numel(), 4 * 6);
}

// torchvision walks class folders with os.walk(followlinks=True): folders linked inside a (linked)
// class folder are read too, a folder linked twice twice. The recursive iterator skipped them. A link
// to a folder above it is an error naming it (torchvision's walk would loop until the path is too long).
TEST(ImageFolder, LinkedFoldersAreFollowedAsTorchvisionDoesAndACycleIsAnError) {
  std::string d = testing::temp_dir("imgf_links");
  run_python(d, R"(
from PIL import Image
def img(path, v):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    Image.new('L', (2, 2), v).save(path)
img('src/cat/0.png', 10); img('src/dog/0.png', 20); img('src/dog/sub/n.png', 30)
img('other/x.png', 40); img('other/deeper/y.png', 50)
os.makedirs('data')
os.symlink('../src/cat', 'data/cat')
os.symlink('../src/dog', 'data/dog')
os.symlink('../../other', 'src/dog/zlink')    # a link inside a linked class folder
os.symlink('../../../other', 'src/dog/sub/again')  # the same folder once more
img('cyc/a/0.png', 60)
os.symlink('..', 'cyc/a/up')                  # a/up -> cyc, which holds a: a cycle
import torchvision
ds = torchvision.datasets.ImageFolder('data')
open('torchvision.txt', 'w').write(' '.join(str(np.asarray(Image.open(p))[0, 0]) + ':' + str(c) for p, c in ds.samples))
)");
  SourcePtr s = open_source(d + "/data", {1, 2, 2});
  auto all = testing::read_all(*s);
  std::string ours;
  for (int64_t i = 0; i < s->size(); ++i)
    ours += (i ? " " : "") + std::to_string(std::lround(all.at("image").data<float>()[i * 4] * 255)) + ":" +
            std::to_string(all.at("labels").data<int64_t>()[i]);
  EXPECT_EQ(ours, file_bytes(d + "/torchvision.txt"));
  EXPECT_EQ(ours, "10:0 20:1 30:1 40:1 50:1 40:1 50:1");
  std::string e = error_of([&] { open_source(d + "/cyc", {1, 2, 2}); });
  EXPECT_NE(e.find("folder link '" + d + "/cyc/a/up' leads back to '" + d + "/cyc/a'"), std::string::npos) << e;
}

// A folder copied from a Mac holds "._x.png" (AppleDouble metadata, never an image) beside each x.png:
// it was refused as "not a PNG or JPEG image (unknown signature)". Hidden files and folders are skipped,
// a hidden folder at the top is no class.
TEST(ImageFolder, HiddenFilesAndFoldersAreSkipped) {
  std::string d = testing::temp_dir("imgf_hidden");
  for (const char* f : {"a", "b", "a/.thumbs", ".ipynb_checkpoints"}) fs::create_directories(d + "/" + f);
  write_png(d + "/a/x.png", pattern(2, 2, 1, 1));
  write_png(d + "/b/y.png", pattern(2, 2, 1, 2));
  for (const char* f : {"a/._x.png", "b/._y.png", "a/.DS_Store"})
    std::ofstream(d + "/" + f, std::ios::binary) << std::string("\0\x05\x16\x07\0\x02\0\0Mac OS X        ", 24);
  write_png(d + "/a/.thumbs/x.png", pattern(2, 2, 1, 3));
  write_png(d + "/.ipynb_checkpoints/z.png", pattern(2, 2, 1, 4));
  SourcePtr s = open_source(d, {1, 2, 2});
  EXPECT_EQ(s->classes(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(s->size(), 2);
}

TEST(ImageFolder, BadImagesAreOneLineNamingTheImage) {
  std::string d = testing::temp_dir("imgf_bad");
  auto tree = [&](const std::string& name) {
    std::string r = d + "/" + name;
    fs::create_directories(r + "/a");
    fs::create_directories(r + "/b");
    write_png(r + "/a/ok.png", pattern(6, 6, 1, 0));
    write_png(r + "/b/ok.png", pattern(6, 6, 1, 1));
    return r;
  };
  auto expect_error = [](const std::function<void()>& f, const std::string& file, const std::string& says) {
    std::string e = error_of(f);
    std::printf("%s\n", e.c_str());
    EXPECT_NE(e.find(file), std::string::npos) << e;
    EXPECT_NE(e.find(says), std::string::npos) << e;
  };
  std::string r = tree("empty");
  fs::create_directories(r + "/c");
  expect_error([&] { open_source(r, {1, 6, 6}); }, r + "/c", "holds no PNG or JPEG images");

  r = tree("bmp");
  std::ofstream(r + "/a/old.bmp") << "BM";
  expect_error([&] { open_source(r, {1, 6, 6}); }, "old.bmp", "only PNG and JPEG");

  r = tree("cut_png");
  std::string png = file_bytes(r + "/a/ok.png");
  std::ofstream(r + "/a/cut.png", std::ios::binary) << png.substr(0, png.size() / 2);
  expect_error([&] { open_source(r, {1, 6, 6}); }, "cut.png", "truncated PNG");

  r = tree("fake");
  std::ofstream(r + "/b/fake.jpg") << "<html>not found</html>";
  expect_error([&] { open_source(r, {1, 6, 6}); }, "fake.jpg", "not a PNG or JPEG image");

  // A JPEG cut short: no end-of-image marker (it failed only when decoded, after an epoch).
  r = tree("cut_jpeg");
  write_jpeg(r + "/a/big.jpg", pattern(64, 64, 3, 5), 90);
  std::string jpg = file_bytes(r + "/a/big.jpg");
  std::ofstream(r + "/a/big.jpg", std::ios::binary | std::ios::trunc) << jpg.substr(0, jpg.size() * 2 / 3);
  expect_error([&] { open_source(r, {1, 6, 6}); }, r + "/a/big.jpg", "is a truncated JPEG (no end-of-image marker)");
  // Cut, then given an EOI marker: libjpeg would fill the missing part with grey. Only decoding finds it.
  std::ofstream(r + "/a/big.jpg", std::ios::binary | std::ios::trunc) << jpg.substr(0, jpg.size() * 2 / 3) << "\xFF\xD9";
  SourcePtr s = open_source(r, {1, 6, 6});
  Tensor img(DType::F32, {1, 1, 6, 6});
  int64_t i = 0;  // a/big.jpg sorts first
  expect_error([&] { s->read(&i, 1, {{"image", &img}}); }, r + "/a/big.jpg", "corrupt or truncated JPEG");

  // Damage that only decoding finds: a PNG whose pixel data is garbage.
  r = tree("garbled");
  std::string g = file_bytes(r + "/a/ok.png");
  const size_t idat = g.find("IDAT");
  for (size_t k = idat + 6; k < idat + 20; ++k) g[k] = static_cast<char>(g[k] ^ 0x5A);
  std::ofstream(r + "/a/ok.png", std::ios::binary | std::ios::trunc) << g;
  s = open_source(r, {1, 6, 6});
  i = 0;
  expect_error([&] { s->read(&i, 1, {{"image", &img}}); }, r + "/a/ok.png", "corrupt or truncated PNG");

  r = d + "/flat";
  fs::create_directories(r);
  write_png(r + "/lonely.png", pattern(2, 2, 1, 0));
  expect_error([&] { open_image_folder(r, 1, 2, 2); }, r, "no class subfolders");
  expect_error([&] { open_image_folder(tree("shape"), 2, 6, 6); }, "shape", "1 or 3 channels");
}

// Data after IEND is valid (libpng and PIL ignore it); the check at open looked for IEND only in the
// last 256 bytes and refused such a file as truncated. A file whose chunks end before a whole IEND is
// still refused at open.
TEST(ImageFolder, PngWithDataAfterIendLoadsAndOneWithoutIendIsRefused) {
  std::string d = testing::temp_dir("imgf_png_trailing");
  fs::create_directories(d + "/ok/a");
  fs::create_directories(d + "/ok/b");
  write_png(d + "/ok/a/clean.png", pattern(6, 5, 3, 2));
  const std::string png = file_bytes(d + "/ok/a/clean.png");
  std::ofstream(d + "/ok/b/x300.png", std::ios::binary) << png << std::string(300, 'x');
  std::ofstream(d + "/ok/b/x70000.png", std::ios::binary) << png << std::string(70000, '\0');  // past one read block
  SourcePtr s = open_source(d + "/ok", {3, 5, 6});
  ASSERT_EQ(s->size(), 3);
  auto all = testing::read_all(*s);
  const int64_t per = 3 * 5 * 6;
  for (int k = 1; k < 3; ++k)
    EXPECT_EQ(std::memcmp(all.at("image").data<float>(), all.at("image").data<float>() + k * per, per * sizeof(float)), 0);
  // The last byte of IEND's CRC missing; a file cut inside IDAT, with junk after it.
  const std::string cut = png.substr(0, png.size() - 1);
  for (const char* name : {"cut_iend", "cut_idat"}) {
    std::string r = d + "/" + name;
    fs::create_directories(r + "/a");
    write_png(r + "/a/ok.png", pattern(6, 5, 3, 2));
    std::ofstream(r + "/a/bad.png", std::ios::binary)
        << (std::string(name) == "cut_iend" ? cut : png.substr(0, png.find("IDAT") + 10) + std::string(300, 'x'));
    std::string e = error_of([&] { open_source(r, {3, 5, 6}); });
    EXPECT_NE(e.find("'" + r + "/a/bad.png' is a truncated PNG"), std::string::npos) << name << ": " << e;
  }
}

// A 68-byte PNG declaring 8000x8000 made every loader thread allocate and zero 192 MB before libpng
// found too little data, and images past the pixel limit failed at decode time as "corrupt or
// truncated (Invalid IHDR data)". Both are refused at open now, from the header, and by decode_image
// itself before it allocates; the most compressible legitimate files still load.
TEST(ImageFolder, SizeClaimsTheFileCannotHoldAreRefusedAtOpen) {
  std::string d = testing::temp_dir("imgf_claims");
  write_jpeg(d + "/src.jpg", pattern(16, 16, 3, 1), 90);
  write_jpeg(d + "/src_grey.jpg", pattern(16, 16, 1, 1), 90);
  run_python(d, std::string(kPngWriter) + R"(
def raw(path, w, h, ctype, depth):  # a header and an empty IDAT
    def chunk(t, d): return struct.pack('>I', len(d)) + t + d + struct.pack('>I', zlib.crc32(t + d) & 0xffffffff)
    open(path, 'wb').write(b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', w, h, depth, ctype, 0, 0, 0))
                           + chunk(b'IDAT', zlib.compress(b'')) + chunk(b'IEND', b''))
raw('big8k.png', 8000, 8000, 2, 8)
raw('big8k16.png', 8000, 8000, 0, 16)
raw('huge.png', 100000, 100000, 0, 8)
raw('wide.png', 70000, 1, 0, 8)
def sof(src, dst, w, h):  # the JPEG with its frame header's size changed
    b = bytearray(open(src, 'rb').read())
    i = b.index(b'\xff\xc0')
    b[i + 5:i + 9] = struct.pack('>HH', h, w)
    open(dst, 'wb').write(bytes(b))
sof('src.jpg', 'big8k.jpg', 8000, 8000)
sof('src_grey.jpg', 'big_grey.jpg', 2000, 2000)
sof('src.jpg', 'huge.jpg', 60000, 60000)
# The most a file can be compressed: 3000x3000 grey zeros at zlib level 9 (about 1030:1), and a
# constant 2048x2048 JPEG (two bits a block).
png('flat.png', 3000, 3000, 0, 8, [bytes(3000)] * 3000)
from PIL import Image
Image.new('L', (2048, 2048), 77).save('flat.jpg', quality=90)
)");
  const std::pair<const char*, const char*> bad[] = {
      {"big8k.png", "declares 8000x8000 pixels, more than its 65 bytes can hold (a PNG of that size needs at least 186046 bytes)"},
      {"big8k16.png", "declares 8000x8000 pixels, more than its 65 bytes can hold"},
      {"huge.png", "is 100000x100000 pixels; at most 67108864 (65536 a side) are decoded"},
      {"wide.png", "is 70000x1 pixels; at most 67108864 (65536 a side) are decoded"},
      {"big8k.jpg", "declares 8000x8000 pixels, more than its"},
      {"big_grey.jpg", "declares 2000x2000 pixels, more than its"},
      {"huge.jpg", "is 60000x60000 pixels; at most 67108864"},
  };
  for (const auto& [name, says] : bad) {
    const std::string r = d + "/" + name + ".dir";
    fs::create_directories(r + "/a");
    fs::copy_file(d + "/" + name, r + "/a/" + name);
    std::string e = error_of([&] { open_source(r, {3, 8, 8}); });
    EXPECT_NE(e.find("image '" + r + "/a/" + name + "' " + says), std::string::npos) << e;
    e = error_of([&] { decode_file(d + "/" + name); });  // and before decoding, by the decoder itself
    EXPECT_NE(e.find(says), std::string::npos) << e;
  }
  const std::string r = d + "/flat.dir";
  fs::create_directories(r + "/a");
  for (const char* name : {"flat.png", "flat.jpg"}) fs::copy_file(d + "/" + name, r + "/a/" + name);
  ASSERT_LT(fs::file_size(d + "/flat.png"), 3000 * 3000 / 1000);
  SourcePtr s = open_source(r, {1, 4, 4});
  auto all = testing::read_all(*s);
  EXPECT_EQ(all.at("image").data<float>()[0], 77 / 255.0f);  // flat.jpg sorts first
  EXPECT_EQ(all.at("image").data<float>()[16], 0.0f);
}

// The decode buffers are per thread and live from image to image; an outlier's (here 3000x3000 RGB:
// 27 MB of pixels, 108 MB of float planes) were kept for the rest of the run on every loader thread.
// They are released once an image needs less than half of them.
TEST(ImageFolder, AnOutliersDecodeBuffersAreReleasedByTheNextImage) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "measured with mallinfo2, which a sanitizer's own allocator does not feed";
#endif
  std::string d = testing::temp_dir("imgf_outlier");
  fs::create_directories(d + "/a");
  Image big{3000, 3000, 3, std::vector<uint8_t>(3000 * 3000 * 3, 90)};
  write_png(d + "/a/0big.png", big);
  write_png(d + "/a/1small.png", pattern(8, 8, 3, 0));
  SourcePtr s = open_source(d, {3, 8, 8});
  Tensor img(DType::F32, {1, 3, 8, 8});
  auto in_use = [] {
    struct mallinfo2 m = mallinfo2();
    return static_cast<double>(m.uordblks + m.hblkhd) / (1 << 20);  // MiB, mmapped blocks included
  };
  int64_t i = 1;
  s->read(&i, 1, {{"image", &img}});
  const double before = in_use();
  i = 0;
  s->read(&i, 1, {{"image", &img}});
  EXPECT_EQ(img.data<float>()[0], 90 / 255.0f);
  EXPECT_GT(in_use() - before, 100.0);  // held between images: a run of large ones reuses them
  i = 1;
  s->read(&i, 1, {{"image", &img}});
  EXPECT_LT(in_use() - before, 16.0);
  Tensor want(DType::F32, {3, 8, 8});
  image_to_chw(pattern(8, 8, 3, 0), 3, 8, 8, want.data<float>());
  EXPECT_EQ(std::memcmp(img.raw(), want.raw(), want.nbytes()), 0);
}

// A JPEG without its end-of-image marker is refused at open when PIL refuses it (data cut short: PIL's
// "image file is truncated"), and loads, with PIL's pixels, when PIL loads it: the data complete and
// only the marker missing, stray bytes after it (PIL needs only the scanlines). Each variant's verdict
// and pixels are PIL 9.4's.
TEST(ImageFolder, JpegsWithoutEndOfImageMarkerLoadExactlyWhenPilLoadsThem) {
  std::string d = testing::temp_dir("imgf_no_eoi");
  run_python(d, R"(
from PIL import Image
y, x = np.mgrid[0:64, 0:48]
a = np.clip(np.stack([127 + 100 * np.sin(x / 5 + k) * np.cos(y / 7 - k) for k in range(3)], -1), 0, 255).astype(np.uint8)
Image.fromarray(a).save('base.jpg', quality=90)
Image.fromarray(a).save('prog.jpg', quality=90, progressive=True)
Image.fromarray(a[..., 0]).save('grey.jpg', quality=90)
n = 0
for src in ['base', 'prog', 'grey']:
    b = open(src + '.jpg', 'rb').read()
    assert b[-2:] == b'\xff\xd9'
    for tail, cut in [(b'', 2), (b'', 1), (b'', 50), (b'\0' * 3, 2), (b'\0' * 16, 2), (b'\xff\xff', 2),
                      (b'junk' * 8, 2), (b'\0' * 100, len(b) // 2), (b'\0' * 40, 0)]:
        v = b[:len(b) - cut] + tail
        os.makedirs(f'v{n}/a')
        open(f'v{n}/a/x.jpg', 'wb').write(v)
        try:
            im = Image.open(f'v{n}/a/x.jpg').convert('RGB')
            np.save(f'v{n}.npy', np.asarray(im))
        except Exception as e:
            open(f'v{n}.refused', 'w').write(str(e))
        n += 1
open('count', 'w').write(str(n))
)");
  const int n = std::stoi(file_bytes(d + "/count"));
  int loaded = 0, refused = 0;
  for (int k = 0; k < n; ++k) {
    const std::string v = d + "/v" + std::to_string(k);
    const bool pil_refuses = fs::exists(v + ".refused");
    Tensor img(DType::F32, {1, 3, 64, 48});
    std::string e = error_of([&] {
      SourcePtr s = open_source(v, {3, 64, 48});
      int64_t i = 0;
      s->read(&i, 1, {{"image", &img}});
    });
    EXPECT_EQ(!e.empty(), pil_refuses) << "variant " << k << ": " << e;
    if (pil_refuses) {
      ++refused;
      EXPECT_NE(e.find("is a truncated JPEG (no end-of-image marker)"), std::string::npos) << k << ": " << e;  // at open
    } else if (e.empty()) {
      ++loaded;
      Tensor hwc = read_npy(v + ".npy");
      int bad = 0;
      for (int64_t p = 0; p < 64 * 48; ++p)
        for (int c = 0; c < 3; ++c) bad += img.data<float>()[c * 64 * 48 + p] != hwc.data<uint8_t>()[p * 3 + c] / 255.0f;
      EXPECT_EQ(bad, 0) << "variant " << k;
    }
  }
  EXPECT_GE(loaded, 4);  // each kind with EOI and trailing bytes; baseline data complete then stray bytes
  EXPECT_GE(refused, 12);
}

// A model trained on class folders keeps their names (metadata graphrun.classes); --eval-only on a test folder of
// other classes is one line naming them, where it would have scored the folders' own numbering.
TEST(ImageFolder, EvalOnlyChecksTheTrainedModelsClasses) {
  std::string d = testing::temp_dir("imgf_eval_classes");
  for (const char* c : {"train/cat", "train/dog", "odd/cat", "odd/emu"})
    for (int k = 0; k < 4; ++k) {
      fs::create_directories(d + "/" + c);
      write_png(d + "/" + c + "/" + std::to_string(k) + ".png", pattern(8, 8, 3, k));
    }
  run_python(d, R"(
import onnx
from onnx import helper, TensorProto, numpy_helper
g = helper.make_graph([helper.make_node('Flatten', ['input'], ['f']), helper.make_node('Gemm', ['f', 'w', 'b'], ['y'], transB=1)],
                      'tiny', [helper.make_tensor_value_info('input', TensorProto.FLOAT, ['N', 3, 8, 8])],
                      [helper.make_tensor_value_info('y', TensorProto.FLOAT, ['N', 2])],
                      [numpy_helper.from_array(np.zeros((2, 192), np.float32), 'w'), numpy_helper.from_array(np.zeros(2, np.float32), 'b')])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid('', 13)]), 'tiny.onnx')
)");
  const std::string cli = testing::graphrun_cli();
  auto r = testing::run_command(cli + " train " + d + "/tiny.onnx --data " + d + "/train --val-split 0.25 --epochs 1 " +
                                "--devices cpu:1 --save " + d + "/trained.onnx 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = testing::run_command(cli + " train " + d + "/trained.onnx --eval-only --test-data " + d +
                           "/train --devices cpu:1 2>&1");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  r = testing::run_command(cli + " train " + d + "/trained.onnx --eval-only --test-data " + d +
                           "/odd --devices cpu:1 2>&1");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("class folders of '" + d + "/odd' differ from those of model 'tiny': 'emu' only in '" + d +
                          "/odd'; 'dog' only in model 'tiny'"),
            std::string::npos)
      << r.output;
}

TEST(ImageFolder, TrainAndTestFoldersMustHaveTheSameClasses) {
  std::string d = testing::temp_dir("imgf_splits");
  for (const char* c : {"train/cat", "train/dog", "val/cat", "val/dog", "odd/cat", "odd/emu"}) {
    fs::create_directories(d + "/" + c);
    write_png(d + "/" + c + "/1.png", pattern(5, 5, 3, 0));
    write_png(d + "/" + c + "/2.png", pattern(5, 5, 3, 1));
  }
  auto fit = [](SourcePtr s) { return fit_to_model(s, {{"input", DType::F32, {3, 8, 8}}}, FitOptions{}); };
  DataSplits ok = open_splits(d + "/train", d + "/val", -1, 0, {3, 8, 8}, fit);
  EXPECT_EQ(ok.test->classes(), (std::vector<std::string>{"cat", "dog"}));
  EXPECT_EQ(ok.train->spec("input").shape, (Shape{3, 8, 8}));
  EXPECT_EQ(num_classes(*ok.train), 2);
  // The message names the classes that differ (it named only the two folders).
  std::string e = error_of([&] { open_splits(d + "/train", d + "/odd", -1, 0, {3, 8, 8}, fit); });
  EXPECT_NE(e.find("class folders of '" + d + "/odd' differ from those of '" + d + "/train': 'emu' only in '" + d +
                   "/odd'; 'dog' only in '" + d + "/train'"),
            std::string::npos)
      << e;
  // More class folders than the model scores: said of the folders (it was "example 2 has class 1, out
  // of range for a model with 1 classes").
  FitOptions one;
  one.num_classes = 1;
  e = error_of([&] { fit_to_model(open_source(d + "/train", {3, 8, 8}), {{"input", DType::F32, {3, 8, 8}}}, one); });
  EXPECT_NE(e.find("'" + d + "/train' has 2 class folders ('cat', 'dog') but the model's output scores 1 classes: "
                   "give the model 2 outputs"),
            std::string::npos)
      << e;
  // No test folder: 10% held out (at least one image).
  DataSplits held = open_splits(d + "/train", "", -1, 0, {3, 8, 8}, fit);
  EXPECT_EQ(held.test->size(), 1);
  EXPECT_EQ(held.train->size(), 3);
  EXPECT_TRUE(held.train->decode_heavy());
}

// The first 300 Fashion-MNIST test images written as class folders of PNGs read back exactly as the
// IDX reader gives them.
TEST(FashionMnist, PngClassFoldersGiveTheIdxTensors) {
  if (!testing::have_fashion_mnist()) GTEST_SKIP() << "Fashion-MNIST is not installed (dataset-fashion-mnist)";
  Dataset ds = load_split(kDefaultDataDir, "t10k");
  std::string d = testing::temp_dir("fashion_png");
  const int64_t n = 300;
  const float* px = ds.images.data<float>();
  for (int64_t i = 0; i < n; ++i) {
    Image img{28, 28, 1, std::vector<uint8_t>(784)};
    for (int k = 0; k < 784; ++k) img.pixels[k] = static_cast<uint8_t>(std::lround(px[i * 784 + k] * 255.f));
    char name[32];
    std::snprintf(name, sizeof name, "%05lld.png", static_cast<long long>(i));
    std::string cls = d + "/class" + std::to_string(ds.labels.data<int64_t>()[i]);
    fs::create_directories(cls);
    write_png(cls + "/" + name, img);
  }
  SourcePtr s = open_source(d, {1, 28, 28});
  ASSERT_EQ(s->size(), n);
  EXPECT_EQ(s->classes().size(), 10u);
  auto all = testing::read_all(*s);
  // Folder order is by class, then file name: map each back to its IDX index.
  int64_t k = 0;
  for (int c = 0; c < 10; ++c)
    for (int64_t i = 0; i < n; ++i) {
      if (ds.labels.data<int64_t>()[i] != c) continue;
      EXPECT_EQ(all.at("labels").data<int64_t>()[k], c);
      EXPECT_EQ(std::memcmp(all.at("image").data<float>() + k * 784, px + i * 784, 784 * sizeof(float)), 0) << i;
      ++k;
    }
  EXPECT_EQ(k, n);
  // Decoded and augmented on 1 or 3 loader threads: the same batches, byte for byte.
  auto batches = [&](int threads) {
    LoaderOptions o;
    o.batch = 64;
    o.threads = threads;
    o.seed = 9;
    o.augment = true;
    Loader loader(s, o);
    loader.start(0);
    std::string all_bytes;
    for (int64_t step = 0; step < 2 * loader.steps_per_epoch(); ++step) {
      const Batch& b = loader.next();
      all_bytes.append(static_cast<const char*>(b.arrays.at("image").raw()), b.size * 784 * sizeof(float));
      all_bytes.append(static_cast<const char*>(b.arrays.at(kLabels).raw()), b.size * sizeof(int64_t));
    }
    return all_bytes;
  };
  const std::string one = batches(1);
  EXPECT_EQ(one.size(), 2 * n * (784 * sizeof(float) + sizeof(int64_t)));
  EXPECT_TRUE(one == batches(3));
}

}  // namespace
}  // namespace graphrun

// Image decoding (PNG with libpng, JPEG with libjpeg-turbo) and the conversion of a decoded image to
// a model's C x H x W floats: channel count as PIL's convert, resize as PIL's bilinear, then / 255.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace graphrun::runtime::data {

// 8-bit pixels, rows top to bottom, channels interleaved (1 = grey, 3 = RGB; alpha is dropped).
struct Image {
  int64_t width = 0, height = 0, channels = 0;
  std::vector<uint8_t> pixels;
};

// "png", "jpeg" or "" by the file's first bytes.
std::string image_format(const unsigned char* bytes, size_t n);

// The largest images decoded: pixels in all, and a side (libpng's limit here; JPEG's own is 65500).
constexpr int64_t kMaxImagePixels = int64_t{1} << 26;
constexpr int64_t kMaxImageSide = int64_t{1} << 16;

// Up to n bytes of an image file at `offset` into dst; returns how many (fewer only at its end).
using ByteReader = std::function<size_t(uint64_t offset, size_t n, unsigned char* dst)>;

// What a PNG or JPEG declares before its pixels.
struct ImageHeader {
  std::string format;      // "png" or "jpeg"
  int64_t width = 0, height = 0;
  uint64_t scan_data = 0;  // JPEG: where the entropy-coded data of its first scan starts
};

// Reads the header of the image of `size` bytes behind `read` (PNG: IHDR; JPEG: the segments up to
// the first scan, walked as libjpeg walks them) and refuses, in one line naming `what`, an image that is
// corrupt before its pixels, larger than kMaxImagePixels / kMaxImageSide, or whose declared size its
// bytes cannot hold: deflate expands at most 1032:1, so a PNG's raw pixel bytes / 1032 must fit in the
// file; a Huffman-coded JPEG (SOF0-2) spends at least one bit on every 8x8 block of a component it
// codes. A few bytes claiming gigapixels are refused before anything is allocated for them.
ImageHeader check_image_header(const ByteReader& read, uint64_t size, const std::string& what);

// Decodes PNG or JPEG bytes into `out` (reusing its buffer), after check_image_header. A truncated or
// corrupt file is an error naming `what`. libjpeg's warnings that image data is missing or garbled (a premature end of a data
// segment, a bad Huffman code, a lost restart marker) count as errors, though PIL ignores them; the
// benign ones (stray bytes between segments, an unknown JFIF revision) do not.
void decode_image(const unsigned char* bytes, size_t n, const std::string& what, Image& out);

// Writes `img` as f32 [channels, height, width] / 255 to dst: grey becomes RGB by repetition, RGB
// becomes grey by ITU-R 601 luma (PIL's convert("L")); then a resize to height x width with PIL's
// bilinear filter (antialiased when shrinking; an image already that size is copied exactly).
void image_to_chw(const Image& img, int64_t channels, int64_t height, int64_t width, float* dst);

// Per-thread scratch buffers live from image to image (decoding allocates nothing in the steady state),
// but one that an outlier grew past 16 MiB is released as soon as an image needs less than half of it:
// a single huge photo does not hold its memory on every loader thread for the rest of the run, and a
// data set of large images does not reallocate for each. Call before sizing `v` for `need` elements.
template <class T>
void trim_scratch(std::vector<T>& v, size_t need) {
  if (v.capacity() * sizeof(T) > (size_t{16} << 20) && need * 2 < v.capacity()) std::vector<T>().swap(v);
}

// Writers, for tests and for exporting data sets as image folders.
void write_png(const std::string& path, const Image& img);
void write_jpeg(const std::string& path, const Image& img, int quality);

}  // namespace graphrun::runtime::data

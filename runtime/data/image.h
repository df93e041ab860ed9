// Image decoding (PNG with libpng, JPEG with libjpeg-turbo) and the conversion of a decoded image to
// a model's C x H x W floats: channel count as PIL's convert, resize as PIL's bilinear, then / 255.
#pragma once
#include <cstdint>
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

// Decodes PNG or JPEG bytes into `out` (reusing its buffer). A truncated or corrupt file is an error
// naming `what`. libjpeg's warnings that image data is missing or garbled (a premature end of a data
// segment, a bad Huffman code, a lost restart marker) count as errors, though PIL ignores them; the
// benign ones (stray bytes between segments, an unknown JFIF revision) do not.
void decode_image(const unsigned char* bytes, size_t n, const std::string& what, Image& out);

// Writes `img` as f32 [channels, height, width] / 255 to dst: grey becomes RGB by repetition, RGB
// becomes grey by ITU-R 601 luma (PIL's convert("L")); then a resize to height x width with PIL's
// bilinear filter (antialiased when shrinking; an image already that size is copied exactly).
void image_to_chw(const Image& img, int64_t channels, int64_t height, int64_t width, float* dst);

// Writers, for tests and for exporting data sets as image folders.
void write_png(const std::string& path, const Image& img);
void write_jpeg(const std::string& path, const Image& img, int quality);

}  // namespace graphrun::runtime::data

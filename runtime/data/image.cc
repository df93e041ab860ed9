// PNG/JPEG decoding through libpng and libjpeg(-turbo), whose errors arrive by longjmp and leave here
// as graphrun errors naming the file; PIL-compatible channel conversion and bilinear resizing.
#include "runtime/data/image.h"

#include <jpeglib.h>
#include <jerror.h>  // after jpeglib.h: the JWRN_ codes
#include <png.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <csetjmp>
#include <cstdio>
#include <cstring>

#include "graph/error.h"

namespace graphrun::runtime::data {

namespace {

// Larger images are refused rather than decoded (a few bytes of PNG can claim gigapixels).
constexpr int64_t kMaxPixels = kMaxImagePixels;

// ---- headers ----

// Bytes of a file read through a ByteReader in 4 KiB windows, one at a time.
class Cursor {
 public:
  explicit Cursor(const ByteReader& read) : read_(read) {}
  int at(uint64_t off) {  // the byte at `off`, -1 past the end
    if (off < from_ || off >= from_ + n_) {
      from_ = off;
      n_ = read_(off, sizeof buf_, buf_);
      if (n_ == 0) return -1;
    }
    return buf_[off - from_];
  }
  int64_t be16(uint64_t off) {
    const int a = at(off), b = at(off + 1);
    return a < 0 || b < 0 ? -1 : a << 8 | b;
  }
  int64_t be32(uint64_t off) {
    const int64_t a = be16(off), b = be16(off + 2);
    return a < 0 || b < 0 ? -1 : a << 16 | b;
  }

 private:
  const ByteReader& read_;
  unsigned char buf_[4096];
  uint64_t from_ = 0;
  size_t n_ = 0;
};

void check_dimensions(int64_t w, int64_t h, const char* kind, const std::string& what) {
  GR_CHECK(w > 0 && h > 0, what << " is a corrupt " << kind << " (it declares " << w << "x" << h << " pixels)");
  GR_CHECK(w <= kMaxImageSide && h <= kMaxImageSide && w * h <= kMaxPixels,
           what << " is " << w << "x" << h << " pixels; at most " << kMaxPixels << " (" << kMaxImageSide
                << " a side) are decoded");
}

void check_claim(int64_t w, int64_t h, uint64_t size, uint64_t need, const char* kind, const std::string& what) {
  GR_CHECK(size >= need, what << " declares " << w << "x" << h << " pixels, more than its " << size
                              << " bytes can hold (a " << kind << " of that size needs at least " << need
                              << " bytes): a corrupt or truncated file");
}

ImageHeader png_header(Cursor& c, uint64_t size, const std::string& what) {
  // IHDR comes first: length 13, type, width, height, bit depth, colour type, ...
  GR_CHECK(c.be32(8) == 13 && c.be32(12) == 0x49484452 && c.at(28) >= 0,
           what << " is a corrupt PNG (no IHDR chunk first)");
  ImageHeader h{"png", c.be32(16), c.be32(20), 0};
  check_dimensions(h.width, h.height, "PNG", what);
  int samples = 1;  // grey and palette
  switch (c.at(25)) {
    case 2: samples = 3; break;  // RGB
    case 4: samples = 2; break;  // grey + alpha
    case 6: samples = 4; break;  // RGBA
  }
  const int depth = std::max(1, c.at(24));
  // The pixel bytes alone (no filter bytes, whether interlaced or not) are a lower bound of the
  // inflated data, and deflate expands at most 1032:1 (258 bytes from a 2-bit code).
  const uint64_t raw = static_cast<uint64_t>(h.width) * h.height * samples * depth / 8;
  check_claim(h.width, h.height, size, raw / 1032, "PNG", what);
  return h;
}

ImageHeader jpeg_header(Cursor& c, uint64_t size, const std::string& what) {
  ImageHeader h{"jpeg", 0, 0, 0};
  int sof = -1;
  uint64_t off = 2;
  std::vector<std::array<int, 2>> sampling;  // per component: horizontal, vertical factor
  for (;;) {
    // The next marker as libjpeg finds it: bytes other than 0xFF skipped (stray data it warns about),
    // 0xFF fill bytes skipped, 0xFF 0x00 not a marker.
    int m = -1;
    for (;;) {
      int b;
      while ((b = c.at(off)) >= 0 && b != 0xFF) ++off;
      while ((b = c.at(++off)) == 0xFF) {
      }
      if (b < 0) break;
      ++off;
      if (b != 0) {
        m = b;
        break;
      }
    }
    GR_CHECK(m >= 0, what << " is a truncated JPEG (it ends before its first scan)");
    GR_CHECK(m != 0xD9, what << " is a corrupt JPEG (no image before its end-of-image marker)");
    if (m == 0x01 || m == 0xD8 || (m >= 0xD0 && m <= 0xD7)) continue;  // markers without a segment
    const int64_t len = c.be16(off);
    GR_CHECK(len >= 2 && off + len <= size,
             what << (len < 0 || off + len > size ? " is a truncated JPEG (it ends inside a segment, before its first scan)"
                                                  : " is a corrupt JPEG (a segment of length " + std::to_string(len) + ")"));
    const bool is_sof = m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC;
    if (is_sof && sof < 0) {
      sof = m;
      h.height = c.be16(off + 3);
      h.width = c.be16(off + 5);
      const int nf = c.at(off + 7);
      GR_CHECK(nf > 0 && len >= 8 + 3 * nf, what << " is a corrupt JPEG (a frame header of length " << len << ")");
      for (int i = 0; i < nf; ++i) {
        const int hv = c.at(off + 9 + 3 * i);
        sampling.push_back({std::max(1, hv >> 4), std::max(1, hv & 15)});
      }
      check_dimensions(h.width, h.height, "JPEG", what);
    }
    if (m == 0xDA) {
      GR_CHECK(sof >= 0, what << " is a corrupt JPEG (a scan before its frame header)");
      h.scan_data = off + len;
      break;
    }
    off += len;
  }
  // Huffman coding (baseline, extended, progressive) spends a code of at least one bit on every 8x8
  // block of a component it codes: at least the blocks of the component with the fewest.
  if (sof <= 0xC2) {
    int hmax = 1, vmax = 1;
    for (const auto& f : sampling) hmax = std::max(hmax, f[0]), vmax = std::max(vmax, f[1]);
    uint64_t blocks = ~uint64_t{0};
    for (const auto& f : sampling) {
      const uint64_t cw = (h.width * f[0] + hmax - 1) / hmax, ch = (h.height * f[1] + vmax - 1) / vmax;
      blocks = std::min<uint64_t>(blocks, ((cw + 7) / 8) * ((ch + 7) / 8));
    }
    check_claim(h.width, h.height, size, blocks / 8, "JPEG", what);
  }
  return h;
}

// ---- PNG ----

struct PngErr {
  std::jmp_buf jmp;
  char msg[256];
};

void png_on_error(png_structp png, png_const_charp m) {
  auto* e = static_cast<PngErr*>(png_get_error_ptr(png));
  std::snprintf(e->msg, sizeof e->msg, "%s", m);
  std::longjmp(e->jmp, 1);
}
void png_on_warning(png_structp, png_const_charp) {}  // benign (an odd colour profile): PIL ignores them too

struct MemReader {
  const unsigned char* p;
  size_t n, off;
};
void png_read_mem(png_structp png, png_bytep dst, png_size_t len) {
  auto* r = static_cast<MemReader*>(png_get_io_ptr(png));
  if (len > r->n - r->off) png_error(png, "file ends early (truncated)");
  std::memcpy(dst, r->p + r->off, len);
  r->off += len;
}

void decode_png(const unsigned char* bytes, size_t n, const std::string& what, Image& out) {
  PngErr err;
  err.msg[0] = 0;
  MemReader rd{bytes, n, 0};
  thread_local std::vector<png_bytep> rows;
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &err, png_on_error, png_on_warning);
  GR_CHECK(png, what << ": out of memory decoding PNG");
  png_infop info = png_create_info_struct(png);
  if (!info || setjmp(err.jmp)) {
    png_destroy_read_struct(&png, &info, nullptr);
    GR_FAIL(what << ": corrupt or truncated PNG image (" << err.msg << ")");
  }
  png_set_read_fn(png, &rd, png_read_mem);
  png_set_user_limits(png, 1 << 16, 1 << 16);
  png_read_info(png, info);
  const png_uint_32 w = png_get_image_width(png, info), h = png_get_image_height(png, info);
  if (int64_t{w} * h > kMaxPixels) png_error(png, "image too large");
  const int color = png_get_color_type(png, info), depth = png_get_bit_depth(png, info);
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (png_get_valid(png, info, PNG_INFO_tRNS)) png_set_tRNS_to_alpha(png);
  if (depth == 16) png_set_scale_16(png);
  png_set_strip_alpha(png);  // as PIL's convert("RGB") / convert("L"): alpha is dropped, not composited
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  const int channels = png_get_channels(png, info);
  if (channels != 1 && channels != 3) png_error(png, "unexpected channel count");
  out.width = w;
  out.height = h;
  out.channels = channels;
  trim_scratch(out.pixels, static_cast<size_t>(w) * h * channels);
  out.pixels.resize(static_cast<size_t>(w) * h * channels);
  rows.resize(h);
  for (png_uint_32 y = 0; y < h; ++y) rows[y] = out.pixels.data() + static_cast<size_t>(y) * w * channels;
  png_read_image(png, rows.data());
  png_read_end(png, nullptr);  // the chunks after the pixels, up to IEND: a cut file fails here
  png_destroy_read_struct(&png, &info, nullptr);
}

// ---- JPEG ----

struct JpegErr {
  jpeg_error_mgr mgr;
  std::jmp_buf jmp;
  char msg[JMSG_LENGTH_MAX];
  bool pixels_done = false;  // every scanline is out: what is left to read is markers up to EOI
};

[[noreturn]] void jpeg_on_error(j_common_ptr c) {
  auto* e = reinterpret_cast<JpegErr*>(c->err);
  (*c->err->format_message)(c, e->msg);
  std::longjmp(e->jmp, 1);
}
// libjpeg's warnings (level -1) are of two kinds. Those that mean image data is missing or garbled
// (libjpeg would fill the gap with grey, or decode garbage, and go on) are errors here: a silently
// wrong image is worse than a refused one. The others concern what lies around the pixels: stray
// bytes between two segments ("45 extraneous bytes before marker 0xd9", common in photo sets), an
// unknown JFIF revision or Adobe transform code, a bad ICC marker, odd SOS parameters of a sequential
// file. Those images decode exactly as their clean copies; PIL ignores the warnings, and so do we.
bool jpeg_warning_is_fatal(int code) {
  switch (code) {
    case JWRN_JPEG_EOF:           // "Premature end of JPEG file"
    case JWRN_HIT_MARKER:         // "premature end of data segment"
    case JWRN_MUST_RESYNC:        // a restart marker lost: the blocks up to it are garbage
    case JWRN_HUFF_BAD_CODE:
#if JPEG_LIB_VERSION >= 70 || defined(D_ARITH_CODING_SUPPORTED) || defined(C_ARITH_CODING_SUPPORTED)
    case JWRN_ARITH_BAD_CODE:
#endif
    case JWRN_BOGUS_PROGRESSION:  // progressive scans that do not add up to the coefficients
      return true;
    default:
      return false;
  }
}

void jpeg_on_message(j_common_ptr c, int level) {
  if (level >= 0 || !jpeg_warning_is_fatal(c->err->msg_code)) return;
  // The file ending before its EOI marker once every pixel is decoded (data complete, stray bytes
  // after it, no EOI): PIL loads such a file, as it needs only the scanlines. Before that, data is missing.
  if (c->err->msg_code == JWRN_JPEG_EOF && reinterpret_cast<JpegErr*>(c->err)->pixels_done) return;
  jpeg_on_error(c);
}

// PIL's reading of a CMYK JPEG and its convert("RGB"). PIL takes every CMYK JPEG as stored inverted,
// the Adobe convention (rawmode "CMYK;I", with or without an Adobe marker: "always use Adobe
// polarity"), so its C = 255 - c for the c libjpeg gives; then R = (255 - C)(255 - K) / 255 rounded,
// in its integer form nk - MULDIV255(C, nk) with nk = 255 - K (Pillow's Convert.c, cmyk2rgb).
void cmyk_to_rgb(const uint8_t* in, uint8_t* out, int64_t n) {
  auto muldiv255 = [](int a, int b) {
    const int t = a * b + 128;
    return ((t >> 8) + t) >> 8;
  };
  for (int64_t i = 0; i < n; ++i, in += 4, out += 3) {
    const int nk = in[3];  // 255 - K, K = 255 - in[3]
    for (int c = 0; c < 3; ++c) out[c] = static_cast<uint8_t>(nk - muldiv255(255 - in[c], nk));
  }
}

void decode_jpeg(const unsigned char* bytes, size_t n, const std::string& what, Image& out) {
  jpeg_decompress_struct cinfo;
  JpegErr err;
  err.msg[0] = 0;
  cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = jpeg_on_error;
  err.mgr.emit_message = jpeg_on_message;
  if (setjmp(err.jmp)) {
    jpeg_destroy_decompress(&cinfo);
    GR_FAIL(what << ": corrupt or truncated JPEG image (" << err.msg << ")");
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, const_cast<unsigned char*>(bytes), static_cast<unsigned long>(n));
  jpeg_read_header(&cinfo, TRUE);
  // CMYK and YCCK (Adobe's YCbCr + K) come out as CMYK and become RGB as in PIL.
  const bool cmyk = cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK;
  cinfo.out_color_space = cmyk ? JCS_CMYK : cinfo.jpeg_color_space == JCS_GRAYSCALE ? JCS_GRAYSCALE : JCS_RGB;
  if (int64_t{cinfo.image_width} * cinfo.image_height > kMaxPixels) {
    std::snprintf(err.msg, sizeof err.msg, "image too large");
    std::longjmp(err.jmp, 1);
  }
  jpeg_start_decompress(&cinfo);
  out.width = cinfo.output_width;
  out.height = cinfo.output_height;
  out.channels = cmyk ? 3 : cinfo.output_components;
  trim_scratch(out.pixels, static_cast<size_t>(out.width) * out.height * out.channels);
  out.pixels.resize(static_cast<size_t>(out.width) * out.height * out.channels);
  thread_local std::vector<uint8_t> cmyk_row;
  if (cmyk) cmyk_row.resize(static_cast<size_t>(out.width) * 4);
  while (cinfo.output_scanline < cinfo.output_height) {
    uint8_t* dst = out.pixels.data() + static_cast<size_t>(cinfo.output_scanline) * out.width * out.channels;
    JSAMPROW row = cmyk ? cmyk_row.data() : dst;
    if (jpeg_read_scanlines(&cinfo, &row, 1) != 1) {
      std::snprintf(err.msg, sizeof err.msg, "no scanline decoded");
      std::longjmp(err.jmp, 1);
    }
    if (cmyk) cmyk_to_rgb(cmyk_row.data(), dst, out.width);
  }
  err.pixels_done = true;
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
}

// ---- resizing ----

// PIL's bilinear resampling along one axis: output position i reads inputs first[i] .. first[i] +
// count[i] - 1 with weights w[i * ksize + k]; the filter widens with the shrink factor (antialiasing).
struct Axis {
  std::vector<int64_t> first, count;
  std::vector<float> w;
  int64_t ksize = 0;
};

void axis_coeffs(int64_t in, int64_t out, Axis& a) {
  const double scale = static_cast<double>(in) / static_cast<double>(out);
  const double filterscale = std::max(scale, 1.0), support = filterscale;
  a.ksize = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  a.first.assign(out, 0);
  a.count.assign(out, 0);
  a.w.assign(static_cast<size_t>(out * a.ksize), 0.f);
  for (int64_t i = 0; i < out; ++i) {
    const double center = (static_cast<double>(i) + 0.5) * scale;
    int64_t lo = std::max<int64_t>(static_cast<int64_t>(center - support + 0.5), 0);
    int64_t hi = std::min<int64_t>(static_cast<int64_t>(center + support + 0.5), in);
    const int64_t cnt = std::min<int64_t>(hi - lo, a.ksize);
    float* w = a.w.data() + i * a.ksize;
    double sum = 0;
    for (int64_t k = 0; k < cnt; ++k) {
      double x = (static_cast<double>(k + lo) - center + 0.5) / filterscale;
      w[k] = static_cast<float>(std::max(0.0, 1.0 - std::fabs(x)));
      sum += w[k];
    }
    for (int64_t k = 0; k < cnt; ++k) w[k] = sum > 0 ? static_cast<float>(w[k] / sum) : 0.f;
    a.first[i] = lo;
    a.count[i] = cnt;
  }
}

}  // namespace

std::string image_format(const unsigned char* b, size_t n) {
  static const unsigned char kPng[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (n >= 8 && std::memcmp(b, kPng, 8) == 0) return "png";
  if (n >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF) return "jpeg";
  return "";
}

ImageHeader check_image_header(const ByteReader& read, uint64_t size, const std::string& what) {
  unsigned char head[8] = {};
  const std::string fmt = image_format(head, read(0, sizeof head, head));
  GR_CHECK(!fmt.empty(), what << " is not a PNG or JPEG image (" << (size == 0 ? "empty file" : "unknown signature") << ")");
  Cursor c(read);
  return fmt == "png" ? png_header(c, size, what) : jpeg_header(c, size, what);
}

void decode_image(const unsigned char* bytes, size_t n, const std::string& what, Image& out) {
  // The header's checks first (the file may have changed since it was opened, and a caller may not
  // have opened it as a file at all): nothing is allocated for a size the bytes cannot hold.
  const ImageHeader h = check_image_header(
      [&](uint64_t off, size_t k, unsigned char* dst) {
        if (off >= n) return size_t{0};
        k = std::min<size_t>(k, n - off);
        std::memcpy(dst, bytes + off, k);
        return k;
      },
      n, what);
  if (h.format == "png") return decode_png(bytes, n, what, out);
  return decode_jpeg(bytes, n, what, out);
}

void image_to_chw(const Image& img, int64_t channels, int64_t height, int64_t width, float* dst) {
  const int64_t H = img.height, W = img.width, C = img.channels;
  const uint8_t* px = img.pixels.data();
  // Channel conversion first, as torchvision's loader converts before its transforms.
  thread_local std::vector<float> planes, tmp;
  trim_scratch(planes, static_cast<size_t>(channels * H * W));
  planes.resize(static_cast<size_t>(channels * H * W));
  for (int64_t y = 0; y < H; ++y)
    for (int64_t x = 0; x < W; ++x) {
      const uint8_t* p = px + (y * W + x) * C;
      for (int64_t c = 0; c < channels; ++c) {
        float v;
        if (C == channels) v = p[c];
        else if (C == 1) v = p[0];
        else v = static_cast<float>((p[0] * 19595 + p[1] * 38470 + p[2] * 7471 + 0x8000) >> 16);  // PIL's L
        planes[(c * H + y) * W + x] = v;
      }
    }
  // Divided (not multiplied by 1/255): bit for bit what the MNIST reader gives for the same byte.
  if (H == height && W == width) {
    for (int64_t i = 0; i < channels * H * W; ++i) dst[i] = planes[i] / 255.0f;
    return;
  }
  thread_local Axis ax, ay;
  axis_coeffs(W, width, ax);
  axis_coeffs(H, height, ay);
  trim_scratch(tmp, static_cast<size_t>(channels * H * width));
  tmp.resize(static_cast<size_t>(channels * H * width));
  for (int64_t c = 0; c < channels; ++c)
    for (int64_t y = 0; y < H; ++y) {
      const float* row = planes.data() + (c * H + y) * W;
      float* o = tmp.data() + (c * H + y) * width;
      for (int64_t i = 0; i < width; ++i) {
        const float* w = ax.w.data() + i * ax.ksize;
        float s = 0;
        for (int64_t k = 0; k < ax.count[i]; ++k) s += w[k] * row[ax.first[i] + k];
        o[i] = s;
      }
    }
  for (int64_t c = 0; c < channels; ++c)
    for (int64_t j = 0; j < height; ++j) {
      const float* w = ay.w.data() + j * ay.ksize;
      float* o = dst + (c * height + j) * width;
      for (int64_t i = 0; i < width; ++i) o[i] = 0;
      for (int64_t k = 0; k < ay.count[j]; ++k) {
        const float* row = tmp.data() + (c * H + ay.first[j] + k) * width;
        for (int64_t i = 0; i < width; ++i) o[i] += w[k] * row[i];
      }
      for (int64_t i = 0; i < width; ++i) o[i] /= 255.0f;
    }
}

void write_png(const std::string& path, const Image& img) {
  GR_CHECK(img.channels == 1 || img.channels == 3, "write_png: 1 or 3 channels");
  FILE* f = std::fopen(path.c_str(), "wb");
  GR_CHECK(f, "cannot write '" << path << "'");
  PngErr err;
  err.msg[0] = 0;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &err, png_on_error, png_on_warning);
  png_infop info = png ? png_create_info_struct(png) : nullptr;
  if (!png || !info || setjmp(err.jmp)) {
    png_destroy_write_struct(&png, &info);
    std::fclose(f);
    GR_FAIL("cannot write PNG '" << path << "' (" << err.msg << ")");
  }
  png_init_io(png, f);
  png_set_IHDR(png, info, static_cast<png_uint_32>(img.width), static_cast<png_uint_32>(img.height), 8,
               img.channels == 1 ? PNG_COLOR_TYPE_GRAY : PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  for (int64_t y = 0; y < img.height; ++y)
    png_write_row(png, img.pixels.data() + y * img.width * img.channels);
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  GR_CHECK(std::fclose(f) == 0, "cannot write '" << path << "'");
}

void write_jpeg(const std::string& path, const Image& img, int quality) {
  GR_CHECK(img.channels == 1 || img.channels == 3, "write_jpeg: 1 or 3 channels");
  FILE* f = std::fopen(path.c_str(), "wb");
  GR_CHECK(f, "cannot write '" << path << "'");
  jpeg_compress_struct cinfo;
  JpegErr err;
  err.msg[0] = 0;
  cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = jpeg_on_error;
  if (setjmp(err.jmp)) {
    jpeg_destroy_compress(&cinfo);
    std::fclose(f);
    GR_FAIL("cannot write JPEG '" << path << "' (" << err.msg << ")");
  }
  jpeg_create_compress(&cinfo);
  jpeg_stdio_dest(&cinfo, f);
  cinfo.image_width = static_cast<JDIMENSION>(img.width);
  cinfo.image_height = static_cast<JDIMENSION>(img.height);
  cinfo.input_components = static_cast<int>(img.channels);
  cinfo.in_color_space = img.channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, quality, TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = const_cast<uint8_t*>(img.pixels.data()) + static_cast<size_t>(cinfo.next_scanline) * img.width * img.channels;
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  GR_CHECK(std::fclose(f) == 0, "cannot write '" << path << "'");
}

}  // namespace graphrun::runtime::data

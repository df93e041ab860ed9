// IDX file reading (raw or gzip via zlib) with the checks that turn a broken download into one clear error.
#include "runtime/data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <climits>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace graphrun::runtime::data {

namespace {

uint32_t be32(const unsigned char* p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | uint32_t(p[3]);
}

std::string read_raw(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  GR_CHECK(fs::exists(path, ec), "data file '" << path << "' does not exist");
  GR_CHECK(fs::is_regular_file(path, ec), "data file '" << path << "' is not a regular file");
  std::ifstream f(path, std::ios::binary);
  GR_CHECK(f, "cannot open data file '" << path << "': " << std::strerror(errno));
  // Read in one piece into a string of the file's size (a stream buffer copied it twice more).
  const auto size = fs::file_size(path, ec);
  GR_CHECK(!ec, "cannot read data file '" << path << "': " << ec.message());
  std::string bytes(static_cast<size_t>(size), '\0');
  f.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  GR_CHECK(!f.bad() && static_cast<size_t>(f.gcount()) == bytes.size(),
           "cannot read data file '" << path << "' (it changed while being read)");
  return bytes;
}

// Bytes an IDX file needs once its header is known (0 while the header is incomplete): decompression
// stops as soon as it would produce more, and a size beyond the tensor limit stops it at the header.
size_t idx_size_from_header(const std::string& b, const std::string& path) {
  if (b.size() < 4) return 0;
  const size_t header = 4 + 4 * static_cast<size_t>(static_cast<unsigned char>(b[3]));
  if (b.size() < header) return 0;
  Shape dims;
  for (size_t i = 4; i < header; i += 4) dims.push_back(be32(reinterpret_cast<const unsigned char*>(b.data()) + i));
  // Loaded images become f32: that is the size that must fit.
  return header + static_cast<size_t>(checked_numel(DType::F32, dims, "data file '" + path + "'"));
}

bool is_gzip(const std::string& b) {
  return b.size() >= 2 && static_cast<unsigned char>(b[0]) == 0x1f && static_cast<unsigned char>(b[1]) == 0x8b;
}

// Decompresses gzip data (concatenated members allowed, as gzip writes them); bytes after the last
// member that are not another member, or more data than the IDX header declares, make the file corrupt.
std::string gunzip(const std::string& in, const std::string& path) {
  z_stream zs{};
  GR_CHECK(inflateInit2(&zs, 16 + MAX_WBITS) == Z_OK, "data file '" << path << "': cannot start zlib");
  std::string out;
  size_t pos = 0;
  char buf[1 << 16];
  int rc = Z_OK;
  try {
    for (;;) {
      const size_t left = in.size() - pos;
      zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data() + pos));
      zs.avail_in = static_cast<uInt>(std::min<size_t>(left, 1u << 30));
      const size_t offered = zs.avail_in;
      zs.next_out = reinterpret_cast<Bytef*>(buf);
      zs.avail_out = sizeof buf;
      rc = inflate(&zs, Z_NO_FLUSH);
      const size_t consumed = offered - zs.avail_in, produced = sizeof buf - zs.avail_out;
      pos += consumed;
      out.append(buf, produced);
      if (rc == Z_NEED_DICT || rc == Z_DATA_ERROR || rc == Z_MEM_ERROR || rc == Z_STREAM_ERROR)
        GR_FAIL("data file '" << path << "' is corrupt (" << (zs.msg ? zs.msg : "bad gzip data") << ")");
      const size_t want = idx_size_from_header(out, path);
      if (want && out.size() > want)
        GR_FAIL("data file '" << path << "' is corrupt (it decompresses to more data than its IDX header declares)");
      // Room for the whole file once the header is out (growing by doubling copied it several times). A
      // header that claims more than deflate's largest expansion (1032x) of the input gets no more.
      if (want && out.capacity() < want) out.reserve(std::min(want, in.size() * 1032 + out.size()));
      if (rc == Z_STREAM_END) {
        if (pos == in.size()) break;
        GR_CHECK(is_gzip(in.substr(pos, 2)),
                 "data file '" << path << "' is corrupt (" << in.size() - pos
                               << " bytes of trailing garbage after the gzip data)");
        inflateReset(&zs);
      } else if (consumed == 0 && produced == 0) {
        break;  // the input ends inside a gzip member
      }
    }
  } catch (...) {
    inflateEnd(&zs);
    throw;
  }
  inflateEnd(&zs);
  GR_CHECK(rc == Z_STREAM_END, "data file '" << path << "' is corrupt (truncated gzip stream)");
  return out;
}

std::string find_file(const std::string& dir, const std::string& stem) {
  namespace fs = std::filesystem;
  std::error_code ec;
  GR_CHECK(fs::is_directory(dir, ec), "data directory '" << dir
                                          << "' does not exist (install Debian's dataset-fashion-mnist, or pass "
                                             "--data DIR with MNIST-format files)");
  for (const char* ext : {".gz", ""}) {
    fs::path p = fs::path(dir) / (stem + ext);
    if (fs::exists(p, ec)) return p.string();
  }
  GR_FAIL("data directory '" << dir << "' has no '" << stem << ".gz' or '" << stem << "'");
}

}  // namespace

int64_t Dataset::num_classes() const {
  int64_t m = -1;
  const int64_t* p = labels.data<int64_t>();
  for (int64_t i = 0; i < size(); ++i) m = std::max(m, p[i]);
  return m + 1;
}

Tensor read_idx_u8(const std::string& path) { return parse_idx_u8(read_raw(path), path); }

Tensor parse_idx_u8(const std::string& file, const std::string& path) {
  const std::string bytes = is_gzip(file) ? gunzip(file, path) : file;
  GR_CHECK(bytes.size() >= 4, "data file '" << path << "' is too short for an IDX header (" << bytes.size()
                                            << " bytes)");
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  GR_CHECK(p[0] == 0 && p[1] == 0, "data file '" << path << "' is not an IDX file (bad magic number 0x" << std::hex
                                                 << be32(p) << ")");
  GR_CHECK(p[2] == 0x08, "data file '" << path << "' holds IDX type 0x" << std::hex << int(p[2])
                                       << "; only unsigned bytes (0x08) are supported");
  int rank = p[3];
  GR_CHECK(rank >= 1 && rank <= 4, "data file '" << path << "' has IDX rank " << rank << " (expected 1 to 4)");
  size_t header = 4 + 4 * static_cast<size_t>(rank);
  GR_CHECK(bytes.size() >= header, "data file '" << path << "' is truncated inside its IDX header");
  Shape dims;
  uint64_t count = 1;
  for (int i = 0; i < rank; ++i) {
    uint32_t d = be32(p + 4 + 4 * i);
    GR_CHECK(d < (1u << 31), "data file '" << path << "' has an absurd dimension " << d);
    dims.push_back(d);
    GR_CHECK(!__builtin_mul_overflow(count, d, &count) && count < (uint64_t(1) << 40),
             "data file '" << path << "' declares an absurd size " << shape_str(dims));
  }
  checked_numel(DType::F32, {static_cast<int64_t>(count)}, "data file '" + path + "'");  // as f32 after loading
  GR_CHECK(bytes.size() - header == count,
           "data file '" << path << "' has " << bytes.size() - header << " bytes of data but its header ("
                         << shape_str(dims) << ") needs " << count << (bytes.size() - header < count ? " (truncated)" : ""));
  Tensor t(DType::U8, dims);
  std::memcpy(t.raw(), p + header, count);
  return t;
}

Dataset load_idx_pair(const std::string& images_path, const std::string& labels_path) {
  Tensor img = read_idx_u8(images_path);
  Tensor lab = read_idx_u8(labels_path);
  GR_CHECK(img.rank() == 3, "images file '" << images_path << "' has rank " << img.rank()
                                            << " (an MNIST images file is N x rows x cols, magic 0x00000803)");
  GR_CHECK(lab.rank() == 1, "labels file '" << labels_path << "' has rank " << lab.rank()
                                            << " (an MNIST labels file is N labels, magic 0x00000801)");
  GR_CHECK(img.dim(0) == lab.dim(0), "images file '" << images_path << "' has " << img.dim(0)
                                                     << " images but labels file '" << labels_path << "' has "
                                                     << lab.dim(0) << " labels");
  GR_CHECK(img.dim(0) > 0, "images file '" << images_path << "' holds no images");
  Dataset ds;
  const int64_t n = img.dim(0), h = img.dim(1), w = img.dim(2);
  ds.images = Tensor(DType::F32, {n, 1, h, w});
  const uint8_t* src = img.data<uint8_t>();
  float* dst = ds.images.data<float>();
  for (int64_t i = 0; i < n * h * w; ++i) dst[i] = static_cast<float>(src[i]) / 255.0f;
  ds.labels = Tensor(DType::I64, {n});
  const uint8_t* ls = lab.data<uint8_t>();
  int64_t* ld = ds.labels.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) ld[i] = ls[i];
  return ds;
}

Dataset load_split(const std::string& dir, const std::string& prefix) {
  std::string images = find_file(dir, prefix + "-images-idx3-ubyte");
  std::string labels = find_file(dir, prefix + "-labels-idx1-ubyte");
  return load_idx_pair(images, labels);
}

void gather(const Dataset& ds, const int64_t* indices, int64_t n, Tensor& images, Tensor& labels) {
  const int64_t per = ds.images.numel() / ds.size();
  GR_CHECK(images.numel() == n * per && labels.numel() == n, "gather: buffers do not fit " << n << " examples");
  const float* src = ds.images.data<float>();
  float* dst = images.data<float>();
  const int64_t* ls = ds.labels.data<int64_t>();
  int64_t* ld = labels.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(dst + i * per, src + indices[i] * per, per * sizeof(float));
    ld[i] = ls[indices[i]];
  }
}

std::vector<int64_t> epoch_order(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> order(n);
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  std::mt19937_64 rng(seed + static_cast<uint64_t>(epoch) * 0x9E3779B97F4A7C15ull);
  for (int64_t i = n - 1; i > 0; --i) {
    // Multiply-shift keeps the draw independent of the library's distribution implementation.
    uint64_t j = static_cast<uint64_t>((static_cast<unsigned __int128>(rng()) * static_cast<uint64_t>(i + 1)) >> 64);
    std::swap(order[i], order[j]);
  }
  return order;
}

Shards shard(int64_t batch, int replicas) {
  Shards s;
  int64_t start = 0;
  for (int r = 0; r < replicas; ++r) {
    int64_t size = batch / replicas + (r < batch % replicas ? 1 : 0);
    s.begin.push_back(start);
    s.size.push_back(size);
    start += size;
  }
  return s;
}

}  // namespace graphrun::runtime::data

// Checkpoint file format (little-endian): "GRCK" u32 version, u64 payload length, payload, u32 CRC32 of payload.
// Payload: u32 count of meta entries {str key, str value}, u32 count of tensors {str name, i32 dtype,
// u32 rank, i64 dims..., u64 bytes, raw data}. Strings are u32 length + bytes.
#include "runtime/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <sstream>

namespace graphrun::runtime {

namespace {

constexpr char kMagic[4] = {'G', 'R', 'C', 'K'};
constexpr uint32_t kVersion = 1;

class Writer {
 public:
  template <class T> void pod(T v) { buf_.append(reinterpret_cast<const char*>(&v), sizeof v); }
  void str(const std::string& s) { pod<uint32_t>(static_cast<uint32_t>(s.size())); buf_ += s; }
  void bytes(const void* p, size_t n) { buf_.append(static_cast<const char*>(p), n); }
  std::string& data() { return buf_; }

 private:
  std::string buf_;
};

class Reader {
 public:
  Reader(const std::string& data, const std::string& path) : d_(data), path_(path) {}
  template <class T> T pod() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, d_.data() + pos_, sizeof v);
    pos_ += sizeof v;
    return v;
  }
  std::string str() {
    uint32_t n = pod<uint32_t>();
    need(n);
    std::string s = d_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  void bytes(void* p, size_t n) {
    need(n);
    std::memcpy(p, d_.data() + pos_, n);
    pos_ += n;
  }
  bool done() const { return pos_ == d_.size(); }
  size_t remaining() const { return d_.size() - pos_; }

 private:
  void need(size_t n) { GR_CHECK(pos_ + n <= d_.size(), path_ << ": checkpoint is truncated or corrupt"); }
  const std::string& d_;
  std::string path_;
  size_t pos_ = 0;
};

void write_all(int fd, const char* p, size_t n, const std::string& path) {
  while (n) {
    ssize_t k = ::write(fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    GR_CHECK(k > 0, path << ": cannot write checkpoint: " << std::strerror(errno));
    p += k;
    n -= static_cast<size_t>(k);
  }
}

bool is_checkpoint_name(const std::string& n, const char* suffix) {
  const size_t k = std::strlen(suffix);
  return n.rfind("ckpt-", 0) == 0 && n.size() > 5 + k && n.compare(n.size() - k, k, suffix) == 0;
}

// Checkpoint files in `dir`, newest first (names are zero-padded: lexical order is (epoch, step) order).
std::vector<std::string> checkpoints_newest_first(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<std::string> names;
  if (!fs::is_directory(dir, ec)) return names;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::string n = e.path().filename().string();
    if (is_checkpoint_name(n, ".grck")) names.push_back(n);
  }
  std::sort(names.rbegin(), names.rend());
  for (auto& n : names) n = (fs::path(dir) / n).string();
  return names;
}

// A process killed between creating its temporary file and the rename leaves ckpt-*.grck.tmp behind;
// only the one process that writes into `dir` calls this, after its own rename.
void remove_stale_temporaries(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir.empty() ? "." : dir, ec))
    if (is_checkpoint_name(e.path().filename().string(), ".grck.tmp")) fs::remove(e.path(), ec);
}

}  // namespace

void save_checkpoint(const std::string& path, const Checkpoint& ck) {
  Writer w;
  w.pod<uint32_t>(static_cast<uint32_t>(ck.meta.size()));
  for (const auto& [k, v] : ck.meta) { w.str(k); w.str(v); }
  w.pod<uint32_t>(static_cast<uint32_t>(ck.tensors.size()));
  for (const auto& [name, t] : ck.tensors) {
    GR_CHECK(t.device().is_cpu(), "checkpoint tensor '" << name << "' must be on the host");
    w.str(name);
    w.pod<int32_t>(static_cast<int32_t>(t.dtype()));
    w.pod<uint32_t>(static_cast<uint32_t>(t.rank()));
    for (int64_t d : t.shape()) w.pod<int64_t>(d);
    w.pod<uint64_t>(t.nbytes());
    w.bytes(t.raw(), t.nbytes());
  }
  const std::string& payload = w.data();
  uint32_t crc = static_cast<uint32_t>(crc32(0L, reinterpret_cast<const Bytef*>(payload.data()), payload.size()));

  std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  GR_CHECK(fd >= 0, tmp << ": cannot create checkpoint: " << std::strerror(errno));
  try {
    Writer head;
    head.bytes(kMagic, 4);
    head.pod<uint32_t>(kVersion);
    head.pod<uint64_t>(payload.size());
    write_all(fd, head.data().data(), head.data().size(), tmp);
    write_all(fd, payload.data(), payload.size(), tmp);
    write_all(fd, reinterpret_cast<const char*>(&crc), sizeof crc, tmp);
    GR_CHECK(::fsync(fd) == 0, tmp << ": fsync failed: " << std::strerror(errno));
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  ::close(fd);
  GR_CHECK(::rename(tmp.c_str(), path.c_str()) == 0, path << ": cannot rename checkpoint into place: "
                                                          << std::strerror(errno));
  // Make the rename itself durable.
  std::string dir = std::filesystem::path(path).parent_path().string();
  remove_stale_temporaries(dir);
  int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

Checkpoint load_checkpoint(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  GR_CHECK(f, path << ": cannot open checkpoint");
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_checkpoint(ss.str(), path);
}

Checkpoint parse_checkpoint(const std::string& all, const std::string& path) {
  GR_CHECK(all.size() >= 20 && std::memcmp(all.data(), kMagic, 4) == 0,
           path << ": not a graphrun checkpoint (bad magic)");
  uint32_t version;
  uint64_t len;
  std::memcpy(&version, all.data() + 4, 4);
  std::memcpy(&len, all.data() + 8, 8);
  GR_CHECK(version == kVersion, path << ": checkpoint version " << version << " is not supported (expected "
                                     << kVersion << ")");
  GR_CHECK(all.size() == 16 + len + 4, path << ": checkpoint is truncated or corrupt");
  std::string payload = all.substr(16, len);
  uint32_t crc;
  std::memcpy(&crc, all.data() + 16 + len, 4);
  GR_CHECK(crc == static_cast<uint32_t>(crc32(0L, reinterpret_cast<const Bytef*>(payload.data()), payload.size())),
           path << ": checkpoint is corrupt (checksum mismatch)");
  Reader r(payload, path);
  Checkpoint ck;
  uint32_t nmeta = r.pod<uint32_t>();
  for (uint32_t i = 0; i < nmeta; ++i) {
    std::string k = r.str();
    GR_CHECK(ck.meta.emplace(k, r.str()).second, path << ": checkpoint is corrupt (key '" << k << "' twice)");
  }
  uint32_t nt = r.pod<uint32_t>();
  for (uint32_t i = 0; i < nt; ++i) {
    std::string name = r.str();
    const int32_t code = r.pod<int32_t>();
    const auto dtype = static_cast<DType>(code);
    uint32_t rank = r.pod<uint32_t>();
    GR_CHECK(rank <= 16 && dtype_size(dtype) > 0 && dtype != DType::String,
             path << ": checkpoint is corrupt (tensor '" << name << "': rank " << rank << ", element type " << code
                  << ")");
    Shape shape(rank);
    for (auto& d : shape) {
      d = r.pod<int64_t>();
      GR_CHECK(d >= 0, path << ": checkpoint is corrupt (tensor '" << name << "' has shape with " << d << ")");
    }
    // The sizes must agree with each other and with the bytes the file holds before anything is allocated.
    const int64_t n = checked_numel(dtype, shape, path + ": checkpoint tensor '" + name + "'");
    const uint64_t bytes = r.pod<uint64_t>();
    GR_CHECK(bytes == static_cast<uint64_t>(n) * dtype_size(dtype) && bytes <= r.remaining(),
             path << ": checkpoint is corrupt (tensor '" << name << "' " << dtype_name(dtype) << shape_str(shape)
                  << " claims " << bytes << " bytes; " << r.remaining() << " remain)");
    Tensor t(dtype, shape);
    r.bytes(t.raw(), bytes);
    // Training never saves a diverged state, so a non-finite value is damage.
    bool finite = true;
    if (dtype == DType::F32)
      for (const float* p = t.data<float>(), *e = p + n; p < e; ++p) finite &= std::isfinite(*p);
    if (dtype == DType::F64)
      for (const double* p = t.data<double>(), *e = p + n; p < e; ++p) finite &= std::isfinite(*p);
    GR_CHECK(finite, path << ": checkpoint is corrupt (tensor '" << name << "' holds NaN or Inf)");
    GR_CHECK(ck.tensors.emplace(name, t).second, path << ": checkpoint is corrupt (tensor '" << name << "' twice)");
  }
  GR_CHECK(r.done(), path << ": checkpoint is corrupt (trailing bytes)");
  return ck;
}

std::string newest_good_checkpoint(const std::string& dir, std::ostream& warn) {
  const std::vector<std::string> all = checkpoints_newest_first(dir);
  std::vector<std::string> skipped;  // said only when a good one follows: else the error says it all
  for (const std::string& path : all) {
    try {
      load_checkpoint(path);
      for (const auto& why : skipped)
        warn << "warning: skipping checkpoint " << why << "; resuming from an older one" << std::endl;
      return path;
    } catch (const Error& e) {
      skipped.push_back(e.what());
    }
  }
  const std::string newest_error = skipped.empty() ? "" : skipped.front();
  GR_CHECK(all.empty(), dir << ": none of its " << all.size() << " checkpoints verifies (newest: " << newest_error
                            << "); remove them to start from the beginning");
  return "";
}

void check_resume_position(const std::string& path, int64_t epoch, int64_t step, int64_t global_step,
                           int64_t steps_per_epoch) {
  // Every finished epoch took at least one step and at most steps_per_epoch.
  const bool ok = epoch >= 0 && step >= 0 && steps_per_epoch > 0 && epoch <= (int64_t{1} << 30) &&
                  step <= steps_per_epoch && global_step >= epoch + step &&
                  global_step <= epoch * steps_per_epoch + step;
  GR_CHECK(ok, path << ": checkpoint is corrupt (epoch " << epoch << ", step " << step << ", global step "
                    << global_step << " cannot happen with " << steps_per_epoch << " steps per epoch)");
}

std::string checkpoint_name(int64_t epoch, int64_t step) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "ckpt-%06lld-%09lld.grck", static_cast<long long>(epoch), static_cast<long long>(step));
  return buf;
}

std::string latest_checkpoint(const std::string& dir) {
  const std::vector<std::string> all = checkpoints_newest_first(dir);
  return all.empty() ? "" : all.front();
}

std::string shapes_signature(const std::map<std::string, Tensor>& tensors) {
  std::string s;
  for (const auto& [name, t] : tensors) s += name + ":" + dtype_name(t.dtype()) + shape_str(t.shape()) + ";";
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08lx", crc32(0L, reinterpret_cast<const Bytef*>(s.data()), s.size()));
  return buf;
}

}  // namespace graphrun::runtime

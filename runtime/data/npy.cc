// Strict .npy header parsing (numpy format versions 1 to 3) and read-only file mappings.
#include "runtime/data/npy.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

namespace graphrun::runtime::data {

namespace {

// The header is a Python dict literal: {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
// followed by spaces and a newline. This cursor accepts exactly that grammar and nothing else.
class HeaderCursor {
 public:
  HeaderCursor(const std::string& text, const std::string& what) : s_(text), what_(what) {}

  void skip_space() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t')) ++i_;
  }
  bool accept(char c) {
    skip_space();
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  void expect(char c, const char* context) {
    if (!accept(c)) fail(std::string("expected '") + c + "' " + context);
  }
  std::string quoted() {
    skip_space();
    if (i_ >= s_.size() || (s_[i_] != '\'' && s_[i_] != '"')) fail("expected a quoted string");
    const char q = s_[i_++];
    size_t e = s_.find(q, i_);
    if (e == std::string::npos) fail("unterminated string");
    std::string v = s_.substr(i_, e - i_);
    i_ = e + 1;
    return v;
  }
  bool boolean() {
    skip_space();
    for (const char* w : {"True", "False"}) {
      size_t n = std::strlen(w);
      if (s_.compare(i_, n, w) == 0) {
        i_ += n;
        return w[0] == 'T';
      }
    }
    fail("fortran_order is neither True nor False");
  }
  Shape tuple() {
    expect('(', "to open the shape");
    Shape dims;
    for (;;) {
      if (accept(')')) break;
      skip_space();
      size_t b = i_;
      uint64_t v = 0;
      while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') {
        v = v * 10 + static_cast<uint64_t>(s_[i_] - '0');
        if (v > (uint64_t{1} << 48)) fail("a dimension of the shape is absurdly large");
        ++i_;
      }
      if (i_ == b) fail("the shape holds something other than non-negative integers");
      if (i_ < s_.size() && s_[i_] == 'L') ++i_;  // Python 2's long suffix
      dims.push_back(static_cast<int64_t>(v));
      if (accept(')')) break;
      expect(',', "between dimensions of the shape");
    }
    return dims;
  }
  bool at_end_padding() const {
    // numpy pads with spaces up to an aligned length and ends with '\n'.
    for (size_t k = i_; k < s_.size(); ++k)
      if (s_[k] != ' ' && s_[k] != '\n' && s_[k] != '\0') return false;
    return true;
  }
  [[noreturn]] void fail(const std::string& why) const {
    GR_FAIL(what_ << ": not a valid .npy file (header: " << why << ")");
  }

 private:
  const std::string& s_;
  const std::string& what_;
  size_t i_ = 0;
};

struct NpyCode {
  const char* code;
  DType dtype;
};
const NpyCode kCodes[] = {{"f4", DType::F32}, {"f8", DType::F64}, {"f2", DType::F16}, {"i8", DType::I64},
                          {"i4", DType::I32}, {"i2", DType::I16}, {"i1", DType::I8},  {"u1", DType::U8},
                          {"u2", DType::U16}, {"u4", DType::U32}, {"u8", DType::U64}, {"b1", DType::Bool}};

DType dtype_of_descr(const std::string& descr, const std::string& what) {
  GR_CHECK(descr.size() >= 2, what << ": .npy element type '" << descr << "' is not supported");
  const char order = descr[0];
  const std::string code = descr.substr(1);
  for (const auto& c : kCodes) {
    if (code != c.code) continue;
    if (order == '>' && dtype_size(c.dtype) > 1)
      GR_FAIL(what << ": big-endian .npy data ('" << descr << "') is not supported; save it little-endian");
    GR_CHECK(order == '<' || order == '|' || order == '=' || order == '>',
             what << ": .npy element type '" << descr << "' is not supported");
    return c.dtype;
  }
  GR_FAIL(what << ": .npy element type '" << descr
               << "' is not supported (float32/64/16, int8/16/32/64, uint8/16/32/64 or bool; no structured arrays)");
}

}  // namespace

NpyHeader parse_npy_header(const unsigned char* bytes, size_t size, uint64_t payload_size, const std::string& what) {
  static const unsigned char kMagic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
  GR_CHECK(size >= 10 && std::memcmp(bytes, kMagic, 6) == 0,
           what << ": not a .npy file (no numpy magic" << (size < 10 ? "; file too short" : "") << ")");
  const int major = bytes[6];
  size_t header_len, header_start;
  if (major == 1) {
    header_len = bytes[8] | (size_t{bytes[9]} << 8);
    header_start = 10;
  } else if (major == 2 || major == 3) {
    GR_CHECK(size >= 12, what << ": truncated .npy file (header cut short)");
    header_len = bytes[8] | (size_t{bytes[9]} << 8) | (size_t{bytes[10]} << 16) | (size_t{bytes[11]} << 24);
    header_start = 12;
  } else {
    GR_FAIL(what << ": .npy format version " << major << " is not supported (1, 2 or 3)");
  }
  GR_CHECK(header_len <= (size_t{1} << 20), what << ": not a valid .npy file (header of " << header_len << " bytes)");
  GR_CHECK(header_start + header_len <= size && header_start + header_len <= payload_size,
           what << ": truncated .npy file (header cut short)");
  const std::string text(reinterpret_cast<const char*>(bytes) + header_start, header_len);

  HeaderCursor c(text, what);
  NpyHeader h;
  std::set<std::string> seen;
  std::string descr;
  bool fortran = false, have_shape = false;
  c.expect('{', "to open the header dict");
  while (!c.accept('}')) {
    std::string key = c.quoted();
    c.expect(':', "after a key");
    if (!seen.insert(key).second) c.fail("key '" + key + "' appears twice");
    if (key == "descr") {
      descr = c.quoted();
    } else if (key == "fortran_order") {
      fortran = c.boolean();
    } else if (key == "shape") {
      h.shape = c.tuple();
      have_shape = true;
    } else {
      c.fail("unexpected key '" + key + "'");
    }
    if (c.accept('}')) break;
    c.expect(',', "between entries");
  }
  if (!c.at_end_padding()) c.fail("text after the dict");
  for (const char* k : {"descr", "fortran_order", "shape"})
    if (!seen.count(k)) c.fail(std::string("no '") + k + "'");
  (void)have_shape;
  h.dtype = dtype_of_descr(descr, what);
  GR_CHECK(!fortran, what << ": .npy array is in Fortran order; save it in C order (numpy.ascontiguousarray)");

  uint64_t numel = 1;
  for (int64_t d : h.shape) {
    GR_CHECK(d == 0 || numel <= (uint64_t{1} << 52) / static_cast<uint64_t>(d),
             what << ": .npy shape " << shape_str(h.shape) << " is absurdly large");
    numel *= static_cast<uint64_t>(d);
  }
  h.data_offset = header_start + header_len;
  const uint64_t need = numel * dtype_size(h.dtype);
  const uint64_t have = payload_size - h.data_offset;
  if (have != need)
    GR_FAIL(what << ": " << (have < need ? "truncated" : "corrupt") << " .npy file (its header declares "
                 << dtype_name(h.dtype) << shape_str(h.shape) << ", " << need << " bytes, but " << have
                 << " bytes follow the header)");
  h.data_bytes = static_cast<size_t>(need);
  return h;
}

MappedFile::MappedFile(const std::string& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  GR_CHECK(fd >= 0, "cannot open '" << path << "': " << std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    GR_FAIL("'" << path << "' is not a regular file");
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      GR_FAIL("cannot map '" << path << "': " << std::strerror(err));
    }
    data_ = static_cast<unsigned char*>(p);
  }
  ::close(fd);
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(data_, size_);
}

void MappedFile::release(const unsigned char* p, size_t n) const {
  // The mapping is shared and read-only: dropping our page-table entries loses nothing, and a
  // concurrent reader of the same page simply faults it back in. Whole pages only, and the kernel
  // may have mapped more around a fault than was read, so the range is widened to a 2 MiB grain.
  if (!data_ || n == 0) return;
  constexpr size_t kGrain = size_t{2} << 20;
  const size_t lo = static_cast<size_t>(p - data_) / kGrain * kGrain;
  const size_t hi = std::min(size_, (static_cast<size_t>(p - data_) + n + kGrain - 1) / kGrain * kGrain);
  ::madvise(data_ + lo, hi - lo, MADV_DONTNEED);
}

}  // namespace graphrun::runtime::data

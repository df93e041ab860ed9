// numpy .npz files as a Source, read with libzip: stored entries (np.savez) are read into memory at open while they
// take at most kStoredInMemory bytes in all, else checked against their CRC-32 once at open and read in place on
// demand, seeking; deflated ones (np.savez_compressed) are inflated once, to the size the zip justifies.
#include <zip.h>

#include <cstdlib>
#include <cstring>
#include <mutex>

#include "runtime/data/array_set.h"

namespace graphrun::runtime::data {

namespace {

std::string zip_message(int code) {
  zip_error_t e;
  zip_error_init_with_code(&e, code);
  std::string s = zip_error_strerror(&e);
  zip_error_fini(&e);
  return s;
}

// Deflate cannot expand data more than about 1032:1; a larger claim is a lie (or a zip bomb).
constexpr uint64_t kMaxInflateRatio = 1032;
// Stored entries up to this many bytes in all are read into memory when the archive opens: a shuffled batch then
// copies its rows from memory, where reading them in place costs a seek and a read per row (a batch of 2048
// one-float rows took 3.7 ms so, against a step of 2.7 ms). Larger data stays on disk. 256 MiB, or
// GRAPHRUN_NPZ_MEMORY_MB from the environment (0: every stored entry read in place).
uint64_t stored_in_memory() {
  const char* mb = std::getenv("GRAPHRUN_NPZ_MEMORY_MB");
  if (!mb) return uint64_t{256} << 20;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(mb, &end, 10);
  GR_CHECK(end != mb && *end == 0 && *mb != '-' && v < (1ull << 40),
           "GRAPHRUN_NPZ_MEMORY_MB must be a whole number of MiB, not '" << mb << "'");
  return static_cast<uint64_t>(v) << 20;
}

class NpzSource : public ArraySetSource {
 public:
  explicit NpzSource(const std::string& path) : ArraySetSource(path) {
    int err = 0;
    zip_ = zip_open(path.c_str(), ZIP_RDONLY | ZIP_CHECKCONS, &err);
    if (!zip_) {
      if (err == ZIP_ER_NOZIP)
        GR_FAIL("'" << path << "' is not a zip file, or one cut short (an .npz is numpy's zip of .npy files: numpy.savez)");
      GR_FAIL("'" << path << "' is not a readable .npz (" << zip_message(err) << ")");
    }
    try {
      load_entries();
      finish();
    } catch (...) {
      close();
      throw;
    }
  }
  ~NpzSource() override { close(); }

 protected:
  void read_rows(size_t array, int64_t first, int64_t count, unsigned char* dst) const override {
    const Stored& s = stored_[array];
    const size_t bytes = static_cast<size_t>(count) * arrays_[array].row_bytes;
    // One zip handle per archive: libzip's handles are not safe to share between threads.
    std::lock_guard<std::mutex> lock(mu_);
    GR_CHECK(zip_fseek(s.file, static_cast<zip_int64_t>(s.data_offset + first * arrays_[array].row_bytes), SEEK_SET) == 0,
             arrays_[array].origin << ": cannot seek (" << zip_error_strerror(zip_file_get_error(s.file)) << ")");
    size_t got = 0;
    while (got < bytes) {
      zip_int64_t k = zip_fread(s.file, dst + got, bytes - got);
      GR_CHECK(k > 0, arrays_[array].origin << ": read failed ("
                                            << (k < 0 ? zip_error_strerror(zip_file_get_error(s.file)) : "unexpected end")
                                            << ")");
      got += static_cast<size_t>(k);
    }
  }

 private:
  struct Stored {
    zip_file_t* file = nullptr;  // open entry, for stored arrays
    size_t data_offset = 0;
  };

  void load_entries() {
    const zip_int64_t n = zip_get_num_entries(zip_, 0);
    GR_CHECK(n > 0, describe() << " holds no arrays (an empty zip)");
    const uint64_t budget = stored_in_memory();
    for (zip_int64_t i = 0; i < n; ++i) {
      zip_stat_t st;
      zip_stat_init(&st);
      GR_CHECK(zip_stat_index(zip_, i, 0, &st) == 0 && (st.valid & ZIP_STAT_NAME) && (st.valid & ZIP_STAT_SIZE) &&
                   (st.valid & ZIP_STAT_COMP_SIZE) && (st.valid & ZIP_STAT_COMP_METHOD),
               describe() << ": cannot read zip entry " << i << " (" << zip_strerror(zip_) << ")");
      const std::string name = st.name;
      const std::string origin = describe() + " entry '" + name + "'";
      GR_CHECK(name.size() > 4 && name.compare(name.size() - 4, 4, ".npy") == 0,
               describe() << " is a zip but not an npz: its entry '" << name
                          << "' is not a .npy array (numpy.savez writes one NAME.npy per array)");
      GR_CHECK(!(st.valid & ZIP_STAT_ENCRYPTION_METHOD) || st.encryption_method == ZIP_EM_NONE,
               origin << " is encrypted; save the arrays without a password");
      const std::string array = name.substr(0, name.size() - 4);
      zip_file_t* f = zip_fopen_index(zip_, i, 0);
      GR_CHECK(f, origin << ": cannot open (" << zip_strerror(zip_) << ")");
      stored_.emplace_back();
      // Read whole into memory (libzip compares it with the CRC-32 at its end); the rows are read from there.
      auto whole = [&](bool stored) {
        inflated_.emplace_back(static_cast<size_t>(st.size));
        std::vector<unsigned char>& buf = inflated_.back();
        std::string problem = read_all(f, buf, stored);
        zip_fclose(f);
        GR_CHECK(problem.empty(), origin << ": " << problem);
        NpyHeader h = parse_npy_header(buf.data(), buf.size(), buf.size(), origin);
        add(array, origin, h, buf.data() + h.data_offset);
      };
      if (st.comp_method == ZIP_CM_STORE && in_memory_ + st.size <= budget) {
        in_memory_ += st.size;
        whole(/*stored=*/true);
      } else if (st.comp_method == ZIP_CM_STORE) {
        stored_.back().file = f;  // closed by close()
        std::vector<unsigned char> head = read_head(f, st.size, origin);
        NpyHeader h = parse_npy_header(head.data(), head.size(), st.size, origin);
        stored_.back().data_offset = h.data_offset;
        check_crc(f, st.size - head.size(), origin);
        add(array, origin, h, nullptr);
      } else {
        if (st.size > kMaxInflateRatio * st.comp_size + 4096) {
          zip_fclose(f);
          GR_FAIL(origin << " claims " << st.size << " bytes from " << st.comp_size
                         << " compressed: more than deflate can expand (a corrupt or hostile zip)");
        }
        whole(/*stored=*/false);
      }
    }
  }

  // The first bytes of a stored entry: enough for its .npy header (whose length is in them).
  static std::vector<unsigned char> read_head(zip_file_t* f, uint64_t size, const std::string& origin) {
    std::vector<unsigned char> head(static_cast<size_t>(std::min<uint64_t>(size, 12)));
    read_exact(f, head.data(), head.size(), origin);
    if (head.size() < 10) return head;
    size_t len = head[6] == 1 ? 10 + (head[8] | (size_t{head[9]} << 8))
                              : 12 + (head[8] | (size_t{head[9]} << 8) | (size_t{head[10]} << 16) |
                                      (size_t{head[11]} << 24));
    len = static_cast<size_t>(std::min<uint64_t>({len, size, uint64_t{1} << 21}));
    if (len > head.size()) {
      const size_t have = head.size();
      head.resize(len);
      read_exact(f, head.data() + have, len - have, origin);
    }
    return head;
  }

  static void read_exact(zip_file_t* f, unsigned char* dst, size_t n, const std::string& origin) {
    size_t got = 0;
    while (got < n) {
      zip_int64_t k = zip_fread(f, dst + got, n - got);
      GR_CHECK(k > 0, origin << ": read failed ("
                             << (k < 0 ? zip_error_strerror(zip_file_get_error(f)) : "entry shorter than it claims") << ")");
      got += static_cast<size_t>(k);
    }
  }

  // Reads the rest of a stored entry once, front to back, so that libzip compares it with the zip's
  // CRC-32 at its end (as it does for deflated entries, and as numpy's np.load does): a flipped byte
  // in the data is an error now, not wrong examples later. The rows are read in place again later,
  // seeking, where libzip checks nothing. Streams through a bounded buffer: nothing is kept.
  static void check_crc(zip_file_t* f, uint64_t rest, const std::string& origin) {
    std::vector<unsigned char> buf(static_cast<size_t>(std::min<uint64_t>(rest + 1, uint64_t{1} << 20)));
    for (;;) {
      zip_int64_t k = zip_fread(f, buf.data(), buf.size());
      GR_CHECK(k >= 0, origin << ": its data does not match the zip's checksum, or cannot be read (a corrupt file: "
                              << zip_error_strerror(zip_file_get_error(f)) << ")");
      if (k == 0) break;
      GR_CHECK(static_cast<uint64_t>(k) <= rest, origin << ": more data than the zip entry claims");
      rest -= static_cast<uint64_t>(k);
    }
    GR_CHECK(rest == 0, origin << ": the entry ends " << rest << " bytes before the size the zip claims");
  }

  // Reads (inflates) the whole entry into `buf` (sized from the zip's claim), libzip comparing it with the CRC-32 at
  // its end; "" or what went wrong.
  static std::string read_all(zip_file_t* f, std::vector<unsigned char>& buf, bool stored) {
    const std::string corrupt = stored
                                    ? "its data does not match the zip's checksum, or cannot be read (a corrupt file: "
                                    : "corrupt compressed data (";
    size_t got = 0;
    while (got < buf.size()) {
      zip_int64_t k = zip_fread(f, buf.data() + got, buf.size() - got);
      if (k < 0) return corrupt + zip_error_strerror(zip_file_get_error(f)) + ")";
      if (k == 0)
        return std::string(stored ? "the entry ends" : "compressed data ends") + " after " + std::to_string(got) +
               " of " + std::to_string(buf.size()) + " bytes";
      got += static_cast<size_t>(k);
    }
    unsigned char extra;
    zip_int64_t k = zip_fread(f, &extra, 1);
    if (k != 0) return k < 0 ? corrupt + "checksum)" : "more data than the zip entry claims";
    return "";
  }

  void close() {
    for (auto& s : stored_)
      if (s.file) zip_fclose(s.file);
    stored_.clear();
    if (zip_) zip_discard(zip_);
    zip_ = nullptr;
  }

  zip_t* zip_ = nullptr;
  std::vector<Stored> stored_;                        // parallel to arrays_
  std::vector<std::vector<unsigned char>> inflated_;  // rows_at points into these (moves keep buffers)
  uint64_t in_memory_ = 0;                            // bytes of stored entries read into inflated_
  mutable std::mutex mu_;
};

}  // namespace

SourcePtr open_npz(const std::string& path) { return std::make_shared<NpzSource>(path); }

}  // namespace graphrun::runtime::data

// Class-folder image data sets (torchvision's ImageFolder layout) as a Source: the file list and
// cheap per-file checks at open, decoding on read() (on loader threads).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "runtime/data/image.h"
#include "runtime/data/source.h"

namespace graphrun::runtime::data {

namespace {

namespace fs = std::filesystem;

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Names starting with '.' are skipped, files and folders: macOS's AppleDouble "._x.png" beside every
// copied x.png is never an image, nor are editors' and notebooks' hidden folders (.ipynb_checkpoints)
// classes. (torchvision reads them: it fails on "._x.png" and counts .ipynb_checkpoints as a class.)
bool hidden(const fs::path& p) {
  const std::string n = p.filename().string();
  return !n.empty() && n[0] == '.';
}

// Extensions torchvision's ImageFolder takes: the ones decoded here, and the others, which are refused
// (skipping them would silently train on a different data set than torchvision's).
bool decoded_ext(const std::string& e) { return e == ".png" || e == ".jpg" || e == ".jpeg"; }
bool other_image_ext(const std::string& e) {
  return e == ".ppm" || e == ".bmp" || e == ".pgm" || e == ".tif" || e == ".tiff" || e == ".webp";
}

// Reads the whole file into `buf` (reusing its capacity); errors name it.
void read_file(const std::string& path, std::vector<unsigned char>& buf) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  GR_CHECK(fd >= 0, "image '" << path << "' cannot be read: " << std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    GR_FAIL("image '" << path << "' cannot be read");
  }
  trim_scratch(buf, static_cast<size_t>(st.st_size));
  buf.resize(static_cast<size_t>(st.st_size));
  size_t got = 0;
  while (got < buf.size()) {
    ssize_t k = ::read(fd, buf.data() + got, buf.size() - got);
    if (k <= 0) {
      ::close(fd);
      GR_FAIL("image '" << path << "' cannot be read" << (k < 0 ? std::string(": ") + std::strerror(errno) : ""));
    }
    got += static_cast<size_t>(k);
  }
  ::close(fd);
}

// Random access to an open file's bytes through pread, one 64 KiB block cached: the checks at open read
// a few bytes here and there (a chunk's header, a marker) and seek over the rest.
class FileBytes {
 public:
  FileBytes(int fd, uint64_t size) : fd_(fd), size_(size) {}
  uint64_t size() const { return size_; }
  // Up to n bytes at `off` into dst: fewer at the end of the file, or on a read error (then ok() is false).
  size_t read(uint64_t off, size_t n, unsigned char* dst) {
    size_t got = 0;
    while (got < n && off + got < size_) {
      const uint64_t at = off + got, block = at / kBlock * kBlock;
      if (block != block_at_) {
        buf_.resize(kBlock);
        const ssize_t k = ::pread(fd_, buf_.data(), kBlock, static_cast<off_t>(block));
        if (k < 0) {
          ok_ = false;
          return got;
        }
        block_at_ = block;
        buf_n_ = static_cast<size_t>(k);
      }
      const size_t in = static_cast<size_t>(at - block);
      if (in >= buf_n_) break;  // the file shrank since fstat
      const size_t k = std::min(n - got, buf_n_ - in);
      std::memcpy(dst + got, buf_.data() + in, k);
      got += k;
    }
    return got;
  }
  bool ok() const { return ok_; }

 private:
  static constexpr size_t kBlock = 64 << 10;
  int fd_;
  uint64_t size_;
  std::vector<unsigned char> buf_;
  uint64_t block_at_ = ~uint64_t{0};
  size_t buf_n_ = 0;
  bool ok_ = true;
};

uint32_t be32(const unsigned char* p) {
  return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | p[3];
}

// Every complete PNG ends with an IEND chunk; data may follow it (libpng and PIL ignore it). The
// whole chunk is looked for in the last 256 bytes, where it lies unless data follows; failing that, the
// chunks are walked from the start (an 8-byte header each, their data skipped) until IEND is whole.
bool png_has_iend(FileBytes& f) {
  unsigned char tail[256];
  const uint64_t tail_at = f.size() > sizeof tail ? f.size() - sizeof tail : 0;
  const size_t nt = f.read(tail_at, sizeof tail, tail);
  for (size_t i = 4; i + 8 <= nt; ++i)  // length 0, type, CRC
    if (std::memcmp(tail + i - 4, "\0\0\0\0IEND", 8) == 0) return true;
  unsigned char h[8];
  for (uint64_t off = 8; f.read(off, 8, h) == 8;) {
    const uint32_t len = be32(h);
    if (len > 0x7FFFFFFFu) return false;  // not a chunk length: the file is garbled from here on
    if (std::memcmp(h + 4, "IEND", 4) == 0) return off + 12 + len <= f.size();
    off += 12 + uint64_t{len};
  }
  return false;
}

// Whether the bytes from `from` (a JPEG's first scan data) to the end hold an EOI marker, FF D9, which
// entropy-coded data cannot hold (there FF is followed by 00 or a restart marker). Searched backwards
// from the end, where it lies, after it only the data some cameras and tools append.
bool jpeg_has_eoi(FileBytes& f, uint64_t from) {
  unsigned char buf[4096];
  for (uint64_t end = f.size(); end > from + 1;) {
    const uint64_t start = std::max(from, end > sizeof buf ? end - sizeof buf : 0);
    const size_t n = f.read(start, static_cast<size_t>(end - start), buf);
    if (n != end - start) return false;
    for (size_t i = n - 1; i > 0; --i)
      if (buf[i - 1] == 0xFF && buf[i] == 0xD9) return true;
    end = start + 1;  // the next window overlaps this one by a byte: a marker across the two is seen
  }
  return false;
}

// The cheap checks of an image at open: its header (check_image_header: the signature, the declared
// size against the limits and against what the file's bytes can hold), and for PNG the IEND chunk that
// ends every complete file. Catches the common broken downloads without decoding anything.
void check_image_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  GR_CHECK(fd >= 0, "image '" << path << "' cannot be read: " << std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st;
  GR_CHECK(::fstat(fd, &st) == 0, "image '" << path << "' cannot be read: " << std::strerror(errno));
  FileBytes f(fd, static_cast<uint64_t>(st.st_size));
  const std::string what = "image '" + path + "'";
  const ImageHeader h = check_image_header(
      [&](uint64_t off, size_t n, unsigned char* dst) { return f.read(off, n, dst); }, f.size(), what);
  GR_CHECK(f.ok(), what << " cannot be read");
  if (h.format == "png") {
    const bool iend = png_has_iend(f);
    GR_CHECK(f.ok(), "image '" << path << "' cannot be read");
    GR_CHECK(iend, "image '" << path << "' is a truncated PNG (no complete IEND chunk)");
  }
  if (h.format == "jpeg" && !jpeg_has_eoi(f, h.scan_data)) {
    GR_CHECK(f.ok(), what << " cannot be read");
    // No EOI: a cut file, which PIL refuses, unless the pixels' data is complete and only the marker
    // is missing (PIL loads those, needing only the scanlines). Decoding tells them apart exactly;
    // it is the rare file that pays for it.
    std::vector<unsigned char> bytes;
    read_file(path, bytes);
    Image img;
    try {
      decode_image(bytes.data(), bytes.size(), what, img);
    } catch (const Error&) {
      GR_FAIL(what << " is a truncated JPEG (no end-of-image marker)");
    }
  }
}

class ImageFolderSource : public Source {
 public:
  ImageFolderSource(const std::string& dir, int64_t channels, int64_t height, int64_t width) : dir_(dir) {
    GR_CHECK((channels == 1 || channels == 3) && height > 0 && width > 0,
             "image folder '" << dir << "' needs the model's image shape (1 or 3 channels, H, W); the model's input is "
                              << channels << "x" << height << "x" << width);
    std::error_code ec;
    std::vector<fs::path> class_dirs;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      std::error_code is_dir;
      if (e.is_directory(is_dir) && !hidden(e.path())) class_dirs.push_back(e.path());
    }
    GR_CHECK(!ec, "cannot list image folder '" << dir << "': " << ec.message());
    GR_CHECK(!class_dirs.empty(), "image folder '" << dir << "' has no class subfolders (one folder per class)");
    std::sort(class_dirs.begin(), class_dirs.end(),
              [](const fs::path& a, const fs::path& b) { return a.filename().string() < b.filename().string(); });
    for (const auto& cd : class_dirs) {
      const int64_t label = static_cast<int64_t>(classes_.size());
      classes_.push_back(cd.filename().string());
      const size_t before = files_.size();
      add_class_files(cd, label);
      GR_CHECK(files_.size() > before, "class folder '" << cd.string() << "' holds no PNG or JPEG images");
    }
    specs_ = {{"image", DType::F32, {channels, height, width}}, {kLabels, DType::I64, {}}};
  }

  std::string describe() const override { return "'" + dir_ + "'"; }
  int64_t size() const override { return static_cast<int64_t>(files_.size()); }
  const std::vector<ArraySpec>& arrays() const override { return specs_; }
  bool decode_heavy() const override { return true; }
  std::vector<std::string> classes() const override { return classes_; }

  void read(const int64_t* indices, int64_t n, const std::map<std::string, Tensor*>& out) const override {
    check_read_buffers(*this, n, out);
    for (int64_t i = 0; i < n; ++i)
      GR_CHECK(indices[i] >= 0 && indices[i] < size(), describe() << ": example index " << indices[i] << " out of range");
    auto lab = out.find(kLabels);
    if (lab != out.end())
      for (int64_t i = 0; i < n; ++i) lab->second->data<int64_t>()[i] = labels_[indices[i]];
    auto img = out.find("image");
    if (img == out.end()) return;
    const Shape& s = specs_[0].shape;
    const int64_t per = specs_[0].numel();
    thread_local std::vector<unsigned char> bytes;
    thread_local Image decoded;
    for (int64_t i = 0; i < n; ++i) {
      const std::string& path = files_[indices[i]];
      read_file(path, bytes);
      decode_image(bytes.data(), bytes.size(), "image '" + path + "'", decoded);
      image_to_chw(decoded, s[0], s[1], s[2], img->second->data<float>() + i * per);
    }
  }

 private:
  // Every folder under `d`, `d` included, following links to folders as torchvision does. A link to a
  // folder that holds it (`ancestors`: each folder's device and inode, and its path) would make the walk
  // endless (torchvision's loops until the path is too long): an error naming the link.
  static void collect_dirs(const fs::path& d, std::vector<fs::path>& out,
                           std::vector<std::pair<std::pair<dev_t, ino_t>, fs::path>>& ancestors) {
    struct stat st;
    GR_CHECK(::stat(d.c_str(), &st) == 0, "cannot list folder '" << d.string() << "': " << std::strerror(errno));
    const std::pair<dev_t, ino_t> id{st.st_dev, st.st_ino};
    for (const auto& [a, path] : ancestors) {
      if (a != id) continue;
      fs::path link = d;  // the first link between the two
      fs::path p = path;
      std::error_code ec;
      for (const auto& part : d.lexically_relative(path)) {
        p /= part;
        if (fs::is_symlink(p, ec)) {
          link = p;
          break;
        }
      }
      GR_FAIL("folder link '" << link.string() << "' leads back to '" << path.string()
                              << "', which holds it: the image folder's walk would never end");
    }
    out.push_back(d);
    ancestors.push_back({id, d});
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(d, ec)) {
      std::error_code is_dir;
      if (e.is_directory(is_dir) && !hidden(e.path())) collect_dirs(e.path(), out, ancestors);
    }
    GR_CHECK(!ec, "cannot list folder '" << d.string() << "': " << ec.message());
    ancestors.pop_back();
  }

  // torchvision walks a class folder as os.walk(followlinks=True): folders (linked ones too) in sorted
  // order of their paths, and files sorted within each.
  void add_class_files(const fs::path& class_dir, int64_t label) {
    std::error_code ec;
    std::vector<fs::path> dirs;
    std::vector<std::pair<std::pair<dev_t, ino_t>, fs::path>> ancestors;
    collect_dirs(class_dir, dirs, ancestors);
    std::sort(dirs.begin(), dirs.end(), [](const fs::path& a, const fs::path& b) { return a.string() < b.string(); });
    for (const auto& d : dirs) {
      std::vector<std::string> names;
      for (const auto& e : fs::directory_iterator(d, ec)) {
        std::error_code is_dir;
        if (!e.is_directory(is_dir) && !hidden(e.path())) names.push_back(e.path().filename().string());
      }
      std::sort(names.begin(), names.end());
      for (const auto& name : names) {
        const std::string path = (d / name).string();
        const std::string ext = lower(fs::path(name).extension().string());
        if (other_image_ext(ext))
          GR_FAIL("image '" << path << "': only PNG and JPEG images are read; convert it (or remove it)");
        if (!decoded_ext(ext)) continue;
        check_image_file(path);
        files_.push_back(path);
        labels_.push_back(label);
      }
    }
  }

  std::string dir_;
  std::vector<std::string> classes_, files_;
  std::vector<int64_t> labels_;
  std::vector<ArraySpec> specs_;
};

}  // namespace

SourcePtr open_image_folder(const std::string& dir, int64_t channels, int64_t height, int64_t width) {
  return std::make_shared<ImageFolderSource>(dir, channels, height, width);
}

}  // namespace graphrun::runtime::data

// Whole-or-nothing file writes: a temporary file beside the target, fsync, rename.
#include "graph/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>

#include "graph/error.h"

namespace graphrun {

namespace {

std::string folder_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)), target_(path_) {
  GR_CHECK(!path_.empty(), "cannot write a file of no name");
  struct stat st;
  if (::lstat(path_.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
    // The link stays; the file it names is replaced (a dangling link is replaced by the file).
    if (char* real = ::realpath(path_.c_str(), nullptr)) {
      target_ = real;
      std::free(real);
    }
  }
  bool replaces = false;
  mode_t mode = 0;
  if (::stat(target_.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) fail(EISDIR);
    // The rename would replace a file the user may not write; writing it in place was refused too.
    if (::access(target_.c_str(), W_OK) != 0) fail(errno);
    replaces = S_ISREG(st.st_mode);
    mode = st.st_mode & 07777;
    if (!replaces) {
      // A device or a pipe (-o /dev/null, /dev/stdout) is written into: never replaced by a file.
      direct_ = true;
      fd_ = ::open(target_.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
      if (fd_ < 0) fail(errno);
      return;
    }
  }
  const std::string stem = target_ + "." + std::to_string(::getpid());
  for (int k = 0; fd_ < 0; ++k) {
    tmp_ = stem + (k ? "." + std::to_string(k) : "") + ".tmp";
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ >= 0) break;
    const int err = errno;
    if (err != EEXIST || k >= 100) {
      tmp_.clear();  // not ours to remove
      fail(err);
    }
  }
  if (replaces) (void)::fchmod(fd_, mode);  // best effort: the bytes matter more than the mode
}

AtomicFile::~AtomicFile() {
  if (!committed_) discard();
}

void AtomicFile::discard() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!tmp_.empty() && !committed_) ::unlink(tmp_.c_str());
  tmp_.clear();
}

void AtomicFile::fail(int err) {
  discard();
  GR_FAIL(path_ << ": cannot write: " << std::strerror(err));
}

void AtomicFile::write(const void* data, size_t n) {
  GR_CHECK(fd_ >= 0 && !synced_, path_ << ": cannot write: the file is already complete");
  const char* p = static_cast<const char*>(data);
  while (n) {
    const ssize_t k = ::write(fd_, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) fail(k < 0 ? errno : ENOSPC);
    p += k;
    n -= static_cast<size_t>(k);
    written_ += static_cast<size_t>(k);
  }
}

void AtomicFile::sync() {
  if (synced_) return;
  GR_CHECK(fd_ >= 0, path_ << ": cannot write: the file was discarded");
  if (!direct_ && ::fsync(fd_) != 0) fail(errno);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail(errno);
  synced_ = true;
}

void AtomicFile::commit() {
  sync();
  if (direct_) {
    committed_ = true;
    return;
  }
  if (::rename(tmp_.c_str(), target_.c_str()) != 0) fail(errno);
  committed_ = true;
  // The rename itself made durable.
  const int dir = ::open(folder_of(target_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    (void)::fsync(dir);
    ::close(dir);
  }
}

void write_file_atomically(const std::string& path, std::string_view bytes) {
  AtomicFile f(path);
  f.write(bytes);
  f.commit();
}

}  // namespace graphrun

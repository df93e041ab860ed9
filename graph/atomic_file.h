// Files written whole or not at all: the bytes go to a temporary file beside the target, are flushed to
// disk, and only then renamed over it. A write that fails (disk full, a file size limit, a killed process)
// leaves the old file as it was, never a truncated one; the temporary file is removed.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace graphrun {

class AtomicFile {
 public:
  // Creates the temporary file in `path`'s folder ("PATH.PID.tmp"; another number where that exists), so the
  // rename stays on one file system. A symbolic link is followed: the file it names is replaced. The new file
  // takes the permissions of the file it replaces, else the usual ones (0666 less the umask). Every error is
  // one line naming `path` and the reason: "out.onnx: cannot write: No space left on device". A target that
  // exists and is no regular file (/dev/null, /dev/stdout, a pipe) is written into directly.
  explicit AtomicFile(std::string path);
  ~AtomicFile();  // not committed: the temporary file goes, the target stays as it was
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t n);
  void write(std::string_view s) { write(s.data(), s.size()); }
  // Bytes written so far.
  size_t size() const { return written_; }
  // Flushes the bytes to disk (fsync) and closes the temporary file: what can still fail for want of space.
  // commit() does it too; calling it first lets several files be complete before any of them is renamed.
  void sync();
  // sync(), then the rename over the target, made durable (the folder synced).
  void commit();
  // The file the bytes are for (a symbolic link resolved).
  const std::string& target() const { return target_; }

 private:
  [[noreturn]] void fail(int err);
  void discard();
  std::string path_;    // as given: errors name it
  std::string target_;  // what is renamed over
  std::string tmp_;
  int fd_ = -1;
  size_t written_ = 0;
  bool synced_ = false, committed_ = false;
  bool direct_ = false;  // the target is no regular file (a device, a pipe): written into as it is
};

// The whole of `path` becomes `bytes`, through an AtomicFile.
void write_file_atomically(const std::string& path, std::string_view bytes);

}  // namespace graphrun

// numpy .npy headers parsed strictly (the payload size must be exactly what the header declares) and
// read-only memory-mapped files, for the .npy-folder and .npz sources.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "graph/tensor.h"

namespace graphrun::runtime::data {

// What a .npy header declares: element type, shape, and where the payload starts.
struct NpyHeader {
  DType dtype = DType::Undefined;
  Shape shape;
  size_t data_offset = 0;   // bytes from the start of the file to the first element
  size_t data_bytes = 0;    // numel * element size
};

// Parses the header at the start of `bytes` (which holds `size` bytes: the whole file, or an npz
// entry). `payload_size` is the number of bytes the container holds in total; the header must
// account for exactly that (a header that lies about its payload size is an error, so nothing is
// ever allocated beyond what the file justifies). `what` names the file in errors.
NpyHeader parse_npy_header(const unsigned char* bytes, size_t size, uint64_t payload_size, const std::string& what);

// Mapped data sets up to this size stay resident once read; larger ones drop the pages of each read
// right after it, so resident memory stays about one batch whatever the file's size.
constexpr size_t kResidentLimit = size_t{128} << 20;

// A whole file mapped read-only. Reads of a mapping larger than memory work (the kernel pages it in
// and out); `release` drops this process's resident copy of a range (the page cache keeps what
// memory allows), so RSS stays small while an epoch sweeps through a file larger than memory.
class MappedFile {
 public:
  MappedFile() = default;
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const unsigned char* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  void release(const unsigned char* p, size_t n) const;

 private:
  std::string path_;
  unsigned char* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace graphrun::runtime::data

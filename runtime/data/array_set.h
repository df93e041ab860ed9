// What .npz and .npy-folder sources share: named arrays that split into rows along their first
// dimension, checked to agree on it, gathered row by row into the caller's buffers.
#pragma once
#include <string>
#include <vector>

#include "runtime/data/npy.h"
#include "runtime/data/source.h"

namespace graphrun::runtime::data {

class ArraySetSource : public Source {
 public:
  std::string describe() const override { return "'" + path_ + "'"; }
  int64_t size() const override { return n_; }
  const std::vector<ArraySpec>& arrays() const override { return specs_; }
  void read(const int64_t* indices, int64_t n, const std::map<std::string, Tensor*>& out) const override;

 protected:
  struct Array {
    std::string origin;                 // the file (or zip entry) in messages
    int64_t rows = 0;
    size_t row_bytes = 0;
    const unsigned char* rows_at = nullptr;  // first row, when the rows lie in memory (mapped or inflated)
  };
  explicit ArraySetSource(std::string path) : path_(std::move(path)) {}
  // Registers an array whose header says `h`; `rows_at` as in Array. Call finish() after the last.
  void add(const std::string& name, const std::string& origin, const NpyHeader& h, const unsigned char* rows_at);
  // Checks the arrays agree on their first dimension.
  void finish();
  // Rows not in memory (stored npz entries) are read here; count consecutive rows from `first`.
  virtual void read_rows(size_t array, int64_t first, int64_t count, unsigned char* dst) const;
  // Called after rows [p, p + n) of array `array` were copied out of memory (lets mapped sources
  // bound their resident memory).
  virtual void copied(size_t array, const unsigned char* p, size_t n) const {}

  std::string path_;
  std::vector<ArraySpec> specs_;
  std::vector<Array> arrays_;
  int64_t n_ = 0;
};

}  // namespace graphrun::runtime::data

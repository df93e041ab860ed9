// Row gathering for named-array sources, and the check that arrays share their first dimension.
#include "runtime/data/array_set.h"

#include <cstring>

namespace graphrun::runtime::data {

void ArraySetSource::add(const std::string& name, const std::string& origin, const NpyHeader& h,
                         const unsigned char* rows_at) {
  GR_CHECK(!h.shape.empty(), origin << " holds a single value (a 0-d array); an array of examples has their "
                                       "count as its first dimension");
  for (const auto& s : specs_)
    GR_CHECK(s.name != name, describe() << " has two arrays named '" << name << "'");
  ArraySpec s{name, h.dtype, Shape(h.shape.begin() + 1, h.shape.end())};
  Array a;
  a.origin = origin;
  a.rows = h.shape[0];
  a.row_bytes = s.bytes();
  a.rows_at = rows_at;
  specs_.push_back(std::move(s));
  arrays_.push_back(std::move(a));
}

void ArraySetSource::finish() {
  GR_CHECK(!arrays_.empty(), describe() << " holds no arrays");
  n_ = arrays_[0].rows;
  for (size_t i = 1; i < arrays_.size(); ++i)
    GR_CHECK(arrays_[i].rows == n_, arrays_[i].origin << " has " << arrays_[i].rows << " examples (first dimension) but "
                                                      << arrays_[0].origin << " has " << n_
                                                      << ": the arrays of a data set share their first dimension");
  GR_CHECK(n_ > 0, describe() << " holds no examples (the arrays' first dimension is 0)");
}

void ArraySetSource::read_rows(size_t array, int64_t first, int64_t count, unsigned char* dst) const {
  GR_FAIL(arrays_[array].origin << ": rows are not in memory");
}

void ArraySetSource::read(const int64_t* indices, int64_t n, const std::map<std::string, Tensor*>& out) const {
  check_read_buffers(*this, n, out);
  for (int64_t i = 0; i < n; ++i)
    GR_CHECK(indices[i] >= 0 && indices[i] < n_, describe() << ": example index " << indices[i] << " out of range");
  for (const auto& [name, t] : out) {
    size_t k = 0;
    while (specs_[k].name != name) ++k;
    const Array& a = arrays_[k];
    auto* dst = static_cast<unsigned char*>(t->raw());
    // Runs of consecutive indices (evaluation reads in order) are one copy.
    for (int64_t i = 0; i < n;) {
      int64_t j = i + 1;
      while (j < n && indices[j] == indices[j - 1] + 1) ++j;
      const size_t bytes = static_cast<size_t>(j - i) * a.row_bytes;
      if (a.rows_at) {
        const unsigned char* src = a.rows_at + indices[i] * a.row_bytes;
        std::memcpy(dst + i * a.row_bytes, src, bytes);
        copied(k, src, bytes);
      } else {
        read_rows(k, indices[i], j - i, dst + i * a.row_bytes);
      }
      i = j;
    }
  }
}

}  // namespace graphrun::runtime::data

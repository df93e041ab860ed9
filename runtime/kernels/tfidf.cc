// ONNX TfIdfVectorizer (tfidf.h).
#include "runtime/kernels/tfidf.h"

#include <algorithm>

#include "graph/error.h"

namespace graphrun::runtime::tfidf {

Pool pool_of(const Node& node) {
  Pool p;
  GR_CHECK(node.attr("pool_strings") == nullptr,
           "TfIdfVectorizer: pool_strings (string tokens) is not supported; "
           "graphrun takes integer tokens, pool_int64s");
  p.min_gram = node.attr_i("min_gram_length", 1);
  p.max_gram = node.attr_i("max_gram_length", 1);
  p.max_skip = node.attr_i("max_skip_count", 0);
  GR_CHECK(p.min_gram >= 1 && p.min_gram <= p.max_gram && p.max_gram <= 64,
           "TfIdfVectorizer: needs 1 <= min_gram_length <= max_gram_length <= 64, got " << p.min_gram << " and "
                                                                                        << p.max_gram);
  GR_CHECK(p.max_skip >= 0 && p.max_skip <= (int64_t{1} << 20),
           "TfIdfVectorizer: max_skip_count must be in [0, 2^20], got " << p.max_skip);
  const std::string mode = node.attr_s("mode", "");
  GR_CHECK(mode == "TF" || mode == "IDF" || mode == "TFIDF",
           "TfIdfVectorizer: mode must be TF, IDF or TFIDF, got '" << mode << "'");
  p.mode = mode == "TF" ? Pool::TF : mode == "IDF" ? Pool::IDF : Pool::TFIDF;
  const std::vector<int64_t> pool = node.attr_ints("pool_int64s"), counts = node.attr_ints("ngram_counts");
  p.out_index = node.attr_ints("ngram_indexes");
  p.weights = node.attr_floats("weights");
  GR_CHECK(
      !counts.empty() && static_cast<int64_t>(counts.size()) <= p.max_gram,
      "TfIdfVectorizer: ngram_counts needs 1 to max_gram_length (" << p.max_gram << ") starts, got " << counts.size());
  p.grams.resize(static_cast<size_t>(p.max_gram));
  int64_t number = 0;
  const auto size = static_cast<int64_t>(pool.size());
  for (size_t n = 0; n < counts.size(); ++n) {
    const int64_t begin = counts[n], end = n + 1 < counts.size() ? counts[n + 1] : size,
                  len = static_cast<int64_t>(n) + 1;
    GR_CHECK(begin >= 0 && begin <= end && end <= size && (end - begin) % len == 0,
             "TfIdfVectorizer: ngram_counts " << begin << " to " << end << " does not hold whole " << len
                                              << "-grams of the pool of " << size);
    for (int64_t at = begin; at < end; at += len) {
      const std::vector<int64_t> gram(pool.begin() + at, pool.begin() + at + len);
      p.grams[n].emplace(gram, number);  // a repeated n-gram counts at its first number
      ++number;
    }
  }
  GR_CHECK(static_cast<int64_t>(p.out_index.size()) == number, "TfIdfVectorizer: ngram_indexes has "
                                                                   << p.out_index.size() << " entries for the "
                                                                   << number << " n-grams of the pool");
  GR_CHECK(p.weights.empty() || p.weights.size() == p.out_index.size(),
           "TfIdfVectorizer: weights has " << p.weights.size() << " entries for " << number << " n-grams");
  for (int64_t i : p.out_index) {
    GR_CHECK(i >= 0, "TfIdfVectorizer: ngram_indexes holds " << i << "; positions are >= 0");
    p.out_size = std::max(p.out_size, i + 1);
  }
  return p;
}

Rows rows_of(const Tensor& X, const Pool& p) {
  GR_CHECK(X.dtype() == DType::I32 || X.dtype() == DType::I64,
           "TfIdfVectorizer: X must hold int32 or int64 tokens, got " << dtype_name(X.dtype()));
  GR_CHECK(X.rank() == 1 || X.rank() == 2, "TfIdfVectorizer: X must be [C] or [N, C], got " << shape_str(X.shape()));
  Rows r;
  r.rows = X.rank() == 1 ? 1 : X.dim(0);
  r.cols = X.dim(X.rank() - 1);
  r.y_shape = X.rank() == 1 ? Shape{p.out_size} : Shape{r.rows, p.out_size};
  return r;
}

void vectorize(const Pool& p, const std::vector<int64_t>& x, int64_t rows, int64_t cols, float* y) {
  std::vector<int64_t> counts(p.out_index.size());
  std::vector<int64_t> gram;
  for (int64_t r = 0; r < rows; ++r) {
    std::fill(counts.begin(), counts.end(), 0);
    const int64_t* row = x.data() + r * cols;
    for (int64_t step = 1; step <= p.max_skip + 1; ++step) {
      const int64_t shortest = step == 1 ? p.min_gram : std::max<int64_t>(p.min_gram, 2);  // unigrams once
      if (shortest > p.max_gram) break;
      for (int64_t s = 0; s + step * (shortest - 1) < cols; ++s) {
        gram.clear();
        for (int64_t n = 1, at = s; n <= p.max_gram && at < cols; ++n, at += step) {
          gram.push_back(row[at]);
          if (n < shortest) continue;
          const auto& table = p.grams[static_cast<size_t>(n - 1)];
          if (auto it = table.find(gram); it != table.end()) ++counts[static_cast<size_t>(it->second)];
        }
      }
    }
    float* out = y + r * p.out_size;
    for (size_t i = 0; i < counts.size(); ++i) {
      if (counts[i] == 0) continue;
      const float w = p.weights.empty() ? 1.f : p.weights[i];
      out[p.out_index[i]] += p.mode == Pool::TF    ? static_cast<float>(counts[i])
                             : p.mode == Pool::IDF ? w
                                                   : static_cast<float>(counts[i]) * w;
    }
  }
}

}  // namespace graphrun::runtime::tfidf

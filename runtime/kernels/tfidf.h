// ONNX TfIdfVectorizer (opset 9) over integer tokens, shared by the CPU kernel and the CUDA one (which reads its
// input back: the n-gram lookup is a host table).
#pragma once
#include <cstdint>
#include <map>
#include <vector>

#include "graph/ir.h"

namespace graphrun::runtime::tfidf {

// The node's n-gram pool, checked: every n-gram of length 1..max_gram_length in pool_int64s (ngram_counts[n - 1] is
// where the n-grams of length n start), the output position of each (ngram_indexes) and its weight.
struct Pool {
  int64_t min_gram = 1, max_gram = 1, max_skip = 0;
  enum Mode { TF, IDF, TFIDF } mode = TF;
  std::vector<std::map<std::vector<int64_t>, int64_t>> grams;  // by length - 1: n-gram -> its number in the pool
  std::vector<int64_t> out_index;                              // by n-gram number: its position in a row of Y
  std::vector<float> weights;                                  // by n-gram number; empty: 1
  int64_t out_size = 0;                                        // max(ngram_indexes) + 1
};
Pool pool_of(const Node& node);

// X checked (int32 or int64 tokens, [C] or [N, C]): its rows and columns, and the shape of Y.
struct Rows {
  int64_t rows = 1, cols = 0;
  Shape y_shape;
};
Rows rows_of(const Tensor& X, const Pool& p);

// Y [rows, out_size] (zeroed by the caller) from the tokens x [rows, cols]: each row's n-grams of length
// min_gram..max_gram, their tokens `skip + 1` apart for every skip of 0..max_skip (unigrams once), counted where
// the pool has them; then TF keeps the counts, IDF puts the weight where the count is not 0, TFIDF multiplies them.
void vectorize(const Pool& p, const std::vector<int64_t>& x, int64_t rows, int64_t cols, float* y);

}  // namespace graphrun::runtime::tfidf

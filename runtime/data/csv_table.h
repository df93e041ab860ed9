// CSV and TSV tables parsed (runtime/data/csv.cc makes them a training Source; the fuzzer reads them here): a header
// of column names, one example per row, the target column apart from the features.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace graphrun::runtime::data {

struct CsvTable {
  std::vector<std::string> feature_names;
  std::string target_name;       // empty: no target column
  std::vector<double> features;  // rows x feature_names.size(), row-major
  bool class_ids = false;        // the targets are int64 class ids (ids) rather than numbers (targets)
  std::vector<int64_t> ids;
  std::vector<double> targets;
  std::vector<std::string> classes;  // class names, in id order, where the targets were names
  int64_t rows = 0;
};

// Parses `text` (a table file's bytes; `delim` ',' or '\t'). The column `labels` is the targets (an error when
// absent and `targets`): class ids where every value is an integer, numbers where every value is one, else class
// names numbered in sorted order, or by `classes` when given (a test table). Errors are one line, prefixed by
// `what`, naming the line and column.
CsvTable parse_csv(const std::string& text, char delim, const std::string& what, const std::string& labels,
                   bool targets, const std::vector<std::string>& classes);

}  // namespace graphrun::runtime::data

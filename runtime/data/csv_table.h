// CSV and TSV tables parsed (runtime/data/csv.cc makes them a training Source; the fuzzer reads them here): a header
// of column names, one example per row, the target column apart from the feature columns, which form groups (one
// per model input they feed).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace graphrun::runtime::data {

// Columns read together as one array of `columns.size()` values per row.
struct CsvGroup {
  std::string name;                  // the array's (a model input's, or "features")
  std::vector<std::string> columns;  // empty when asked for: every column but the targets, in the file's order
  bool integers = false;             // int64 values (an integer input: embedding ids) rather than float64
  bool int32 = false;                // integers within int32's range (an int32 input)
  bool named_by_input = false;       // the group is an input's column of the same name (no --columns given)
  std::vector<double> reals;         // rows x columns, row-major (integers false)
  std::vector<int64_t> ints;         // (integers true)
};

struct CsvTable {
  std::vector<CsvGroup> groups;
  std::string target_name;       // empty: no target column
  bool class_ids = false;        // the targets are int64 class ids (ids) rather than numbers (targets)
  std::vector<int64_t> ids;
  std::vector<double> targets;
  std::vector<std::string> classes;  // class names, in id order, where the targets were names
  int64_t rows = 0;
};

// Parses `text` (a table file's bytes; `delim` ',' or '\t'). The column `labels` is the targets (an error when
// absent and `targets`): class ids where every value is an integer, numbers where every value is one, else class
// names numbered in sorted order, or by `classes` when given (a test table). `groups` name the feature columns to
// read (none: one group "features" of every other column); columns no group names are not read. Errors are one
// line, prefixed by `what`, naming the line and column.
CsvTable parse_csv(const std::string& text, char delim, const std::string& what, const std::string& labels,
                   bool targets, const std::vector<std::string>& classes, std::vector<CsvGroup> groups = {});

}  // namespace graphrun::runtime::data

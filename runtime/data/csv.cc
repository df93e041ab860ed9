// CSV and TSV tables as a Source (source.h: open_csv): a header of column names, one example per row. The
// target column (--labels, default "labels") becomes the targets array under its name: int64 class ids where
// every value is an integer, float64 where every value is a number, else class names, numbered in sorted order
// (as an image folder's classes; a test table takes the training table's numbering). The feature columns feed the
// model's inputs: by --columns INPUT=COL,... (columns it names for no input are not read); else a model of one
// input takes every other column as one array "features", and a model of several inputs each input the column of
// its name. An array is f64[k] of its k columns, or int64 (int32) for an input of that type (embedding ids: each
// value must be an integer). The table is read whole into memory (a value takes 8 bytes there, at least 2 in the
// file). Quoted fields (RFC 4180: "a, b", "say ""hi"""), CRLF line ends, a UTF-8 byte-order mark and blank lines
// are read as pandas reads them; a missing or non-numeric feature, or a row with another number of fields than
// the header, is an error naming the file, line and column (csv_table.h): graphrun neither imputes nor encodes
// categories.
#include <cctype>
#include <fstream>
#include <sstream>

#include "graph/ir.h"
#include "runtime/data/csv_table.h"
#include "runtime/data/source.h"

namespace graphrun::runtime::data {
namespace {

bool integer_type(DType t) { return t == DType::I64 || t == DType::I32; }

class CsvSource : public Source {
 public:
  CsvSource(const std::string& path, const OpenOptions& opts) : origin_("'" + path + "'") {
    const std::string what = "data '" + printable(path) + "'";
    std::ifstream f(path, std::ios::binary);
    GR_CHECK(f, what << ": cannot read the file");
    std::stringstream ss;
    ss << f.rdbuf();
    std::string ext = path.size() >= 4 ? path.substr(path.size() - 4) : std::string();
    for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    // The groups of columns: as --columns says, else by the model's inputs; each read as its input's type takes.
    std::vector<CsvGroup> groups;
    auto add = [&](const std::string& name, std::vector<std::string> columns, DType type, bool by_name) {
      CsvGroup g;
      g.name = name, g.columns = std::move(columns), g.named_by_input = by_name;
      g.integers = integer_type(type), g.int32 = type == DType::I32;
      groups.push_back(std::move(g));
    };
    auto type_of = [&](const std::string& input) {
      const auto it = opts.inputs.find(input);
      return it == opts.inputs.end() ? DType::F64 : it->second;
    };
    for (const ColumnGroup& c : opts.columns) add(c.input, c.columns, type_of(c.input), false);
    if (groups.empty() && opts.inputs.size() > 1) {
      for (const auto& [input, type] : opts.inputs)
        if (input != opts.labels)  // --loss output: the targets' column feeds the input of their name
          add(input, {input}, type, true);
    }
    if (groups.empty() && opts.inputs.size() == 1 && integer_type(opts.inputs.begin()->second))
      add("features", {}, opts.inputs.begin()->second, false);
    t_ = parse_csv(ss.str(), ext == ".tsv" ? '\t' : ',', what, opts.labels, opts.targets, opts.classes, groups);
    for (const CsvGroup& g : t_.groups)
      specs_.push_back({g.name,
                        g.integers ? (g.int32 ? DType::I32 : DType::I64) : DType::F64,
                        {static_cast<int64_t>(g.columns.size())}});
    if (!t_.target_name.empty()) specs_.push_back({t_.target_name, t_.class_ids ? DType::I64 : DType::F64, {}});
  }

  std::string describe() const override { return origin_; }
  int64_t size() const override { return t_.rows; }
  const std::vector<ArraySpec>& arrays() const override { return specs_; }
  std::vector<std::string> classes() const override { return t_.classes; }

  void read(const int64_t* indices, int64_t n, const std::map<std::string, Tensor*>& out) const override {
    check_read_buffers(*this, n, out);
    for (const auto& [name, t] : out) {
      const CsvGroup* g = nullptr;
      for (const CsvGroup& x : t_.groups)
        if (x.name == name) g = &x;
      if (g) {
        const int64_t F = static_cast<int64_t>(g->columns.size());
        if (!g->integers) {
          double* dst = t->data<double>();
          for (int64_t i = 0; i < n; ++i) std::copy_n(g->reals.data() + indices[i] * F, F, dst + i * F);
        } else if (t->dtype() == DType::I32) {
          int32_t* dst = t->data<int32_t>();
          for (int64_t i = 0; i < n; ++i)  // (parse_csv checked that the values fit)
            for (int64_t f = 0; f < F; ++f)
              dst[i * F + f] = static_cast<int32_t>(g->ints[static_cast<size_t>(indices[i] * F + f)]);
        } else {
          int64_t* dst = t->data<int64_t>();
          for (int64_t i = 0; i < n; ++i) std::copy_n(g->ints.data() + indices[i] * F, F, dst + i * F);
        }
      } else if (t_.class_ids) {
        int64_t* dst = t->data<int64_t>();
        for (int64_t i = 0; i < n; ++i) dst[i] = t_.ids[static_cast<size_t>(indices[i])];
      } else {
        double* dst = t->data<double>();
        for (int64_t i = 0; i < n; ++i) dst[i] = t_.targets[static_cast<size_t>(indices[i])];
      }
    }
  }

 private:
  std::string origin_;
  CsvTable t_;
  std::vector<ArraySpec> specs_;
};

}  // namespace

SourcePtr open_csv(const std::string& path, const OpenOptions& opts) { return std::make_shared<CsvSource>(path, opts); }

}  // namespace graphrun::runtime::data

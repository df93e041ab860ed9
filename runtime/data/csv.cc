// CSV and TSV tables as a Source (source.h: open_csv): a header of column names, one example per row. The
// target column (--labels, default "labels") becomes the targets array under its name: int64 class ids where
// every value is an integer, float64 where every value is a number, else class names, numbered in sorted order
// (as an image folder's classes; a test table takes the training table's numbering). Every other column is a
// feature: one array "features" f64[F], in the columns' order. The table is read whole into memory (a value
// takes 8 bytes there, at least 2 in the file). Quoted fields (RFC 4180: "a, b", "say ""hi"""), CRLF line
// ends, a UTF-8 byte-order mark and blank lines are read as pandas reads them; a missing or non-numeric
// feature, or a row with another number of fields than the header, is an error naming the file, line and
// column (csv_table.h): graphrun neither imputes nor encodes categories.
#include <cctype>
#include <fstream>
#include <sstream>

#include "graph/ir.h"
#include "runtime/data/csv_table.h"
#include "runtime/data/source.h"

namespace graphrun::runtime::data {
namespace {

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
    t_ = parse_csv(ss.str(), ext == ".tsv" ? '\t' : ',', what, opts.labels, opts.targets, opts.classes);
    specs_.push_back({"features", DType::F64, {static_cast<int64_t>(t_.feature_names.size())}});
    if (!t_.target_name.empty()) specs_.push_back({t_.target_name, t_.class_ids ? DType::I64 : DType::F64, {}});
  }

  std::string describe() const override { return origin_; }
  int64_t size() const override { return t_.rows; }
  const std::vector<ArraySpec>& arrays() const override { return specs_; }
  std::vector<std::string> classes() const override { return t_.classes; }

  void read(const int64_t* indices, int64_t n, const std::map<std::string, Tensor*>& out) const override {
    check_read_buffers(*this, n, out);
    for (const auto& [name, t] : out) {
      if (name == "features") {
        const int64_t F = specs_[0].shape[0];
        double* dst = t->data<double>();
        for (int64_t i = 0; i < n; ++i) std::copy_n(t_.features.data() + indices[i] * F, F, dst + i * F);
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

// libFuzzer target: a CSV or TSV table through graphrun's parser (quotes, line ends, the header, numbers, the
// targets as ids, numbers or class names, columns in groups: --columns x=a,b and an integer input c). The first byte
// picks the delimiter (a tab: TSV, else CSV) and how input c is read; the rest is the table.
#include <string>

#include "runtime/data/csv_table.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  graphrun::fuzz::init();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const char delim = data[0] == '\t' ? '\t' : ',';
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  graphrun::fuzz::run("t.csv", [&] {
    for (bool targets : {true, false}) {
      const auto t = graphrun::runtime::data::parse_csv(text, delim, "t.csv", "labels", targets, {});
      if (t.class_ids && !t.classes.empty())  // a test table numbered by this one's classes
        graphrun::runtime::data::parse_csv(text, delim, "t.csv", "labels", targets, t.classes);
    }
  });
  graphrun::fuzz::run("t.csv", [&] {
    graphrun::runtime::data::CsvGroup x, c;
    x.name = "x", x.columns = {"a", "b"};
    c.name = "c", c.columns = {"c"}, c.integers = true, c.int32 = (data[0] & 1) != 0,
    c.named_by_input = (data[0] & 2) != 0;
    graphrun::runtime::data::parse_csv(text, delim, "t.csv", "labels", (data[0] & 4) != 0, {}, {x, c});
  });
  return 0;
}

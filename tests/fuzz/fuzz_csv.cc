// libFuzzer target: a CSV or TSV table through graphrun's parser (quotes, line ends, the header, numbers, the
// targets as ids, numbers or class names). The first byte picks the delimiter (a tab: TSV, else CSV); the rest is
// the table.
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
  return 0;
}

// libFuzzer target: an IDX (MNIST-format) file, raw or gzip, through graphrun's reader.
#include <string>

#include "runtime/data/idx.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  graphrun::fuzz::init();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  graphrun::fuzz::run("train-images-idx3-ubyte", [&] {
    graphrun::runtime::data::parse_idx_u8(std::string(reinterpret_cast<const char*>(data), size),
                                          "train-images-idx3-ubyte");
  });
  return 0;
}

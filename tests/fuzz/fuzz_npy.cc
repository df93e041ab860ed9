// libFuzzer target: a .npy file through graphrun's reader (header parsing, sizes against the payload).
#include <string>

#include "graph/tensor_io.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  graphrun::fuzz::init();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  graphrun::fuzz::run("x.npy", [&] {
    graphrun::Tensor t = graphrun::parse_npy(std::string(reinterpret_cast<const char*>(data), size), "x.npy");
    t.str();
  });
  return 0;
}

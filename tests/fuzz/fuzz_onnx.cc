// libFuzzer target: an ONNX model file through graphrun's reader (validation, ONNX's checker and shape
// inference, conversion), its printers and its ONNX writer. Any outcome but a graphrun::Error is a bug.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "graph/onnx_io.h"
#include "graph/printer.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  graphrun::fuzz::init();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  graphrun::fuzz::run("model.onnx", [&] {
    graphrun::Graph g = graphrun::load_onnx_bytes(std::string(reinterpret_cast<const char*>(data), size), "model.onnx");
    graphrun::print_text(g);
    graphrun::print_dot(g);
    graphrun::onnx_bytes(g);
  });
  return 0;
}

// libFuzzer target: an ONNX TensorProto .pb file through graphrun's reader (types, dims, data sizes), and the same
// bytes as the SequenceProto and OptionalProto files graphrun run reads for sequence and optional inputs.
#include <string>

#include "graph/tensor_io.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  graphrun::fuzz::init();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  graphrun::fuzz::run("x.pb", [&] {
    graphrun::Tensor t = graphrun::parse_tensor_pb(std::string(reinterpret_cast<const char*>(data), size), "x.pb", "x");
    t.str();
  });
  for (bool optional : {false, true})
    graphrun::fuzz::run(optional ? "x.pb (optional)" : "x.pb (sequence)", [&] {
      const graphrun::CompositeValue v =
          graphrun::parse_composite_pb(std::string(reinterpret_cast<const char*>(data), size), "x.pb", optional, "x");
      for (const auto& t : v.tensors) t.str();
    });
  return 0;
}

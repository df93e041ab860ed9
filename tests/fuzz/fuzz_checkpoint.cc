// libFuzzer target: a training checkpoint through graphrun's reader. Inputs starting with 'P' are a
// payload that gets a valid header and CRC, so the fuzzer reaches the parser behind the checksum
// (an attacker can recompute a CRC too).
#include <zlib.h>

#include <cstring>
#include <string>

#include "runtime/checkpoint.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  graphrun::fuzz::init();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string file(reinterpret_cast<const char*>(data), size);
  if (size && data[0] == 'P') {
    const std::string payload = file.substr(1);
    const uint32_t version = 1, crc = static_cast<uint32_t>(crc32(0L, reinterpret_cast<const Bytef*>(payload.data()),
                                                                  static_cast<uInt>(payload.size())));
    const uint64_t len = payload.size();
    file = "GRCK";
    file.append(reinterpret_cast<const char*>(&version), 4);
    file.append(reinterpret_cast<const char*>(&len), 8);
    file += payload;
    file.append(reinterpret_cast<const char*>(&crc), 4);
  }
  graphrun::fuzz::run("ckpt.grck", [&] { graphrun::runtime::parse_checkpoint(file, "ckpt.grck"); });
  return 0;
}

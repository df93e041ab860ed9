// Shared by graphrun's libFuzzer targets: a small tensor limit (so a hostile size is refused well below
// libFuzzer's malloc limit) and the rule that only a graphrun::Error may escape a reader.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <typeinfo>

#include "graph/error.h"
#include "graph/tensor.h"

namespace graphrun::fuzz {

inline void init() { set_max_tensor_bytes(size_t{256} << 20); }

// Runs one input: a graphrun::Error is the reader saying no; anything else is a finding.
template <class F>
void run(const char* what, F&& f) {
  try {
    f();
  } catch (const Error&) {
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: escaped as %s instead of graphrun::Error: %s\n", what, typeid(e).name(), e.what());
    std::abort();
  }
}

}  // namespace graphrun::fuzz

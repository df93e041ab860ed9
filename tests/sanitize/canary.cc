// Planted bugs the sanitizer jobs must catch (.ci/sanitize.sh): proof that those jobs run instrumented
// code, graphrun's libraries included. Built only with -DGRAPHRUN_SANITIZER_CANARY=ON; never a test.
//   sanitizer_canary oob    a heap read past a buffer, inside graph/tensor.cc (AddressSanitizer)
//   sanitizer_canary ub     a signed integer overflow (UndefinedBehaviorSanitizer)
//   sanitizer_canary race   two threads writing one counter unsynchronized (ThreadSanitizer)
#include <climits>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "graph/tensor.h"

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "";
  if (!std::strcmp(mode, "oob")) {
    std::vector<float> four(4, 1.f);
    // A view claiming 8 elements over 4: as_doubles() reads past the vector's heap block.
    graphrun::Tensor t = graphrun::Tensor::view(graphrun::DType::F32, {8}, four.data());
    std::printf("%f\n", t.as_doubles()[7]);
    return 0;
  }
  if (!std::strcmp(mode, "ub")) {
    volatile int x = INT_MAX;
    std::printf("%d\n", x + argc);
    return 0;
  }
  if (!std::strcmp(mode, "race")) {
    long counter = 0;
    auto bump = [&] {
      for (int i = 0; i < 100000; ++i) counter = counter + 1;
    };
    std::thread a(bump), b(bump);
    a.join();
    b.join();
    std::printf("%ld\n", counter);
    return 0;
  }
  std::fprintf(stderr, "usage: sanitizer_canary oob|ub|race\n");
  return 2;
}

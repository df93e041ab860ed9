// Stands in for the CUDA backend in builds without it (GRAPHRUN_CUDA=OFF): no backend, and a reason.
#include "runtime/device.h"

namespace graphrun::runtime {

DeviceBackend* cuda_backend() { return nullptr; }

bool builtin_cuda_available(std::string* why) {
  if (why) *why = "graphrun was built without CUDA (configure with -DGRAPHRUN_CUDA=ON where the CUDA toolkit, cuDNN and NCCL are installed)";
  return false;
}

bool cublas_loadable(std::string* why) { return builtin_cuda_available(why); }

}  // namespace graphrun::runtime

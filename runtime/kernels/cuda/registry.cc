// The CUDA dispatch table: the op table's CUDA kernels (registered by runtime/kernels/cuda/<family>.cu),
// for runtime/cuda/cuda_backend.cc.
#include "runtime/kernel.h"

namespace graphrun::runtime::cuda {

const KernelTable& cuda_kernels() {
  static const KernelTable table = KernelTable::of_device(Device::Kind::CUDA);
  return table;
}

}  // namespace graphrun::runtime::cuda

// CPU kernels: shape family (placeholder until implemented).
#include "runtime/kernel.h"

namespace graphrun::runtime::cpu {

void register_shape_kernels(KernelTable& t) {}

}  // namespace graphrun::runtime::cpu

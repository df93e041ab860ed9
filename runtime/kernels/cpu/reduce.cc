// CPU kernels: reduce family (placeholder until implemented).
#include "runtime/kernel.h"

namespace graphrun::runtime::cpu {

void register_reduce_kernels(KernelTable& t) {}

}  // namespace graphrun::runtime::cpu

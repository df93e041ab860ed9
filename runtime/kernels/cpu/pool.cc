// CPU kernels: pool family (placeholder until implemented).
#include "runtime/kernel.h"

namespace graphrun::runtime::cpu {

void register_pool_kernels(KernelTable& t) {}

}  // namespace graphrun::runtime::cpu

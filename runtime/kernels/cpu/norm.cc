// CPU kernels: norm family (placeholder until implemented).
#include "runtime/kernel.h"

namespace graphrun::runtime::cpu {

void register_norm_kernels(KernelTable& t) {}

}  // namespace graphrun::runtime::cpu

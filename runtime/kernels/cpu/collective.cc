// CPU kernels: collective family (placeholder until implemented).
#include "runtime/kernel.h"

namespace graphrun::runtime::cpu {

void register_collective_kernels(KernelTable& t) {}

}  // namespace graphrun::runtime::cpu

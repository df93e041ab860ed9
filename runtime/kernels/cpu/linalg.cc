// CPU kernels: linalg family (placeholder until implemented).
#include "runtime/kernel.h"

namespace graphrun::runtime::cpu {

void register_linalg_kernels(KernelTable& t) {}

}  // namespace graphrun::runtime::cpu

// CPU kernels: optim family (placeholder until implemented).
#include "runtime/kernel.h"

namespace graphrun::runtime::cpu {

void register_optim_kernels(KernelTable& t) {}

}  // namespace graphrun::runtime::cpu

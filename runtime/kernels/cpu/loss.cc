// CPU kernels: loss family (placeholder until implemented).
#include "runtime/kernel.h"

namespace graphrun::runtime::cpu {

void register_loss_kernels(KernelTable& t) {}

}  // namespace graphrun::runtime::cpu

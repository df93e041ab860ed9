// CPU kernels: elementwise family (placeholder until implemented).
#include "runtime/kernel.h"

namespace graphrun::runtime::cpu {

void register_elementwise_kernels(KernelTable& t) {}

}  // namespace graphrun::runtime::cpu

// CPU kernels: conv family (placeholder until implemented).
#include "runtime/kernel.h"

namespace graphrun::runtime::cpu {

void register_conv_kernels(KernelTable& t) {}

}  // namespace graphrun::runtime::cpu

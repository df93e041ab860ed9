// The CPU dispatch table: every op the CPU device runs, registered family by family.
// Each family file (runtime/kernels/cpu/<family>.cc) defines its register_* function.
#include "runtime/kernel.h"

namespace graphrun::runtime::cpu {
void register_elementwise_kernels(KernelTable& t);  // elementwise.cc: Add..Pow, unary math, Where, comparisons, Cast
void register_shape_kernels(KernelTable& t);        // shape.cc: Reshape, Transpose, Concat, Slice, Gather, Pad, ...
void register_reduce_kernels(KernelTable& t);       // reduce.cc: Reduce*, Softmax, LogSoftmax
void register_loss_kernels(KernelTable& t);         // loss.cc: SoftmaxCrossEntropyLoss and its gradient
void register_conv_kernels(KernelTable& t);         // conv.cc: Conv, ConvTranspose and their gradients
void register_pool_kernels(KernelTable& t);         // pool.cc: MaxPool, AveragePool, GlobalAveragePool, gradients
void register_norm_kernels(KernelTable& t);         // norm.cc: BatchNormalization, Dropout, gradients
void register_linalg_kernels(KernelTable& t);       // linalg.cc: Gemm, MatMul
void register_optim_kernels(KernelTable& t);        // optim.cc: optimizer update ops
void register_collective_kernels(KernelTable& t);   // collective.cc: AllReduce
}  // namespace graphrun::runtime::cpu

namespace graphrun::runtime {

const KernelTable& cpu_kernels() {
  static const KernelTable table = [] {
    KernelTable t;
    cpu::register_elementwise_kernels(t);
    cpu::register_shape_kernels(t);
    cpu::register_reduce_kernels(t);
    cpu::register_loss_kernels(t);
    cpu::register_conv_kernels(t);
    cpu::register_pool_kernels(t);
    cpu::register_norm_kernels(t);
    cpu::register_linalg_kernels(t);
    cpu::register_optim_kernels(t);
    cpu::register_collective_kernels(t);
    return t;
  }();
  return table;
}

}  // namespace graphrun::runtime

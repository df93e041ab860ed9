// The CUDA dispatch table: the same op names as the CPU table (runtime/kernels/cpu/registry.cc),
// registered family by family from runtime/kernels/cuda/<family>.cu.
#include "runtime/kernel.h"

namespace graphrun::runtime::cuda {
void register_elementwise_kernels(KernelTable& t);  // elementwise.cu
void register_shape_kernels(KernelTable& t);        // shape.cu
void register_reduce_kernels(KernelTable& t);       // reduce.cu: Reduce*, SumToShape, Softmax, LogSoftmax, Arg*
void register_loss_kernels(KernelTable& t);         // loss.cu
void register_conv_kernels(KernelTable& t);         // conv.cu (cuDNN)
void register_pool_kernels(KernelTable& t);         // pool.cu
void register_norm_kernels(KernelTable& t);         // norm.cu: BatchNormalization, Dropout, gradients
void register_linalg_kernels(KernelTable& t);       // linalg.cu (cuBLAS)
void register_optim_kernels(KernelTable& t);        // optim.cu
void register_collective_kernels(KernelTable& t);   // collective.cu

const KernelTable& cuda_kernels() {
  static const KernelTable table = [] {
    KernelTable t;
    register_elementwise_kernels(t);
    register_shape_kernels(t);
    register_reduce_kernels(t);
    register_loss_kernels(t);
    register_conv_kernels(t);
    register_pool_kernels(t);
    register_norm_kernels(t);
    register_linalg_kernels(t);
    register_optim_kernels(t);
    register_collective_kernels(t);
    return t;
  }();
  return table;
}

}  // namespace graphrun::runtime::cuda

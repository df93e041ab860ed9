// The epilogue the fused producers of pass fuse_relu_epilogue (FusedConv, FusedGemm, FusedMatMul) run
// on CUDA right after cuDNN's or cuBLAS's product: one pass over Y adding the bias and applying Relu.
#pragma once
#include "runtime/kernels/cuda/common.cuh"

namespace graphrun::runtime::cuda {

// The fused ops' activation attribute: only "Relu" exists (as on the CPU).
inline void check_fused_activation(const Node& n) {
  const std::string a = n.attr_s("activation", "");
  GR_CHECK(a == "Relu", n.describe() << ": activation '" << a << "' is not supported (Relu)");
}

// y[i] = Relu(y[i] + bias[(i / inner) % channels]) for i < n, on ctx's stream; bias may be null (Relu
// alone). Relu is the Relu kernel's v < 0 ? 0 : v (NaN and -0 pass through).
void bias_relu_in_place(KernelContext& ctx, float* y, int64_t n, const float* bias, int64_t inner, int64_t channels);

}  // namespace graphrun::runtime::cuda

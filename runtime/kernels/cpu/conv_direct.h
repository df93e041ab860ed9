// Direct float convolution for tiny reductions: one input channel per group (LeNet's and SimpleCNN's
// first layers, ResNet-18's stem, depthwise layers) with a few kernel taps, where im2col + GEMM runs
// at a third of the FMA peak (a reduction of 9 or 25 terms cannot feed a GEMM's register tiles).
#pragma once
#include <cstdint>

#include "runtime/kernels/cpu/window.h"

namespace graphrun::runtime::cpu {

// The geometry the direct kernels take: input [N, group, in...] (one channel per group), weight
// [M, 1, k...], output [N, M, out...], output channel m reading input channel m / (M / group).
struct DirectConv {
  int64_t N = 0, M = 0, group = 1;
  Window w;
};

// Whether the direct kernels serve this convolution: float, one input channel per group, at most two
// spatial axes, unit stride along the row, at most kDirectMaxTaps taps, and a CPU with AVX2 or AVX-512.
bool direct_conv_applies(const Window& w, int64_t channels_per_group);
constexpr int64_t kDirectMaxTaps = 25;

// Floats of scratch the kernels need (zero-padded copies of the input planes).
int64_t direct_conv_scratch(const DirectConv& dc, int threads);

// y = conv(x, wt) + bias (bias may be null), then Relu where `relu` (in registers, before the store).
void direct_conv_forward(const DirectConv& dc, const float* x, const float* wt, const float* bias, float* y,
                         float* scratch, int threads, bool relu = false);

// dw = the weight gradient of y = conv(x, wt) given dy (overwritten). Each weight is reduced on one
// thread in a fixed order, so the bits do not depend on the thread count.
void direct_conv_weight_grad(const DirectConv& dc, const float* x, const float* dy, float* dw, float* scratch,
                             int threads);

}  // namespace graphrun::runtime::cpu

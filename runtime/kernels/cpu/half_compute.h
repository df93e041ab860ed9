// float16/bfloat16 on the CPU: a kernel written for float runs on half-precision inputs by widening them
// to float, computing, and rounding each float output back to the half type (round to nearest even).
#pragma once
#include <map>
#include <vector>

#include "runtime/kernel.h"

namespace graphrun::runtime::cpu {

inline bool is_half(DType t) { return t == DType::F16 || t == DType::BF16; }

// What a float kernel sees when it runs for a half-precision node: the half inputs widened to float;
// its float outputs held here until narrow_outputs() writes them, rounded, into the node's outputs.
// Allocates (half precision is not a training-path type yet).
class WidenedContext final : public KernelContext {
 public:
  // keep_f32: the outputs (bit i: output i) that stay float32 when the kernel asks for float32 (LayerNormalization's
  // Mean and InvStdDev, whose type is the stash type, not X's).
  explicit WidenedContext(KernelContext& outer, unsigned keep_f32 = 0);
  Tensor& output(int i, const Shape& shape, DType dtype) override;
  void* scratch(size_t bytes) override { return outer_.scratch(bytes); }
  void defer(Completion done) override { done(); }  // never called: async_allowed() is false
  void narrow_outputs();

 private:
  KernelContext& outer_;
  DType half_ = DType::Undefined;  // the type float outputs return to; Undefined: they stay float
  unsigned keep_f32_;
  std::vector<Tensor> wide_in_;
  std::map<int, Tensor> wide_out_;
};

bool has_half_input(const KernelContext& ctx);

// Registers as `.cpu(via_f32<kernel>)`: `kernel` as is for other types, computed in float for f16/bf16.
// The output type follows the first floating-point input (Pow(f16, f32) is f16, Pow(f32, f16) is f32), except for
// the outputs in KeepF32 (bits), which stay float32 where the kernel writes float32.
template <KernelFn F, unsigned KeepF32 = 0> void via_f32(KernelContext& ctx) {
  if (!has_half_input(ctx)) {
    F(ctx);
    return;
  }
  WidenedContext wide(ctx, KeepF32);
  F(wide);
  wide.narrow_outputs();
}

}  // namespace graphrun::runtime::cpu

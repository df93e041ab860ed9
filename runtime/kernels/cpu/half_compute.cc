// float16/bfloat16 on the CPU: widening inputs to float and rounding float outputs back (half_compute.h).
#include "runtime/kernels/cpu/half_compute.h"

#include "graph/half.h"

namespace graphrun::runtime::cpu {

bool has_half_input(const KernelContext& ctx) {
  for (int i = 0; i < ctx.num_inputs(); ++i)
    if (ctx.has_input(i) && is_half(ctx.input(i).dtype())) return true;
  return false;
}

WidenedContext::WidenedContext(KernelContext& outer, unsigned keep_f32) : outer_(outer), keep_f32_(keep_f32) {
  node_ = &outer.node();
  opset_ = outer.opset();
  threads_ = outer.threads();
  device_ = outer.device();
  comm_ = outer.comm();
  rng_ = &outer.rng();
  async_allowed_ = false;
  wide_in_.reserve(outer.num_inputs());  // inputs_ points into it: no reallocation
  for (int i = 0; i < outer.num_inputs(); ++i) {
    if (!outer.has_input(i)) {
      inputs_.push_back(nullptr);
      continue;
    }
    const Tensor& x = outer.input(i);
    if (half_ == DType::Undefined && dtype_is_float(x.dtype())) half_ = is_half(x.dtype()) ? x.dtype() : DType::F32;
    if (!is_half(x.dtype())) {
      inputs_.push_back(&x);
      continue;
    }
    Tensor w(DType::F32, x.shape());
    const auto* src = static_cast<const uint16_t*>(x.raw());
    float* dst = static_cast<float*>(w.raw());
    const int64_t n = x.numel();
    if (x.dtype() == DType::F16) for (int64_t k = 0; k < n; ++k) dst[k] = half_to_float(src[k]);
    else for (int64_t k = 0; k < n; ++k) dst[k] = bf16_to_float(src[k]);
    wide_in_.push_back(w);
    inputs_.push_back(&wide_in_.back());
  }
  if (half_ == DType::F32) half_ = DType::Undefined;
}

Tensor& WidenedContext::output(int i, const Shape& shape, DType dtype) {
  if (dtype != DType::F32 || half_ == DType::Undefined || (keep_f32_ >> i & 1u)) return outer_.output(i, shape, dtype);
  auto it = wide_out_.find(i);
  if (it == wide_out_.end() || it->second.shape() != shape) it = wide_out_.insert_or_assign(i, Tensor(DType::F32, shape)).first;
  return it->second;
}

void WidenedContext::narrow_outputs() {
  for (auto& [i, w] : wide_out_) {
    Tensor& y = outer_.output(i, w.shape(), half_);
    const float* src = static_cast<const float*>(w.raw());
    auto* dst = static_cast<uint16_t*>(y.raw());
    const int64_t n = w.numel();
    if (half_ == DType::F16) for (int64_t k = 0; k < n; ++k) dst[k] = float_to_half(src[k]);
    else for (int64_t k = 0; k < n; ++k) dst[k] = float_to_bf16(src[k]);
  }
}

}  // namespace graphrun::runtime::cpu

// The random ops, RandomNormal, RandomUniform, their *Like forms and Bernoulli, drawn on the host for every
// device: the values come from the executor's generator (ctx.rng(), saved in checkpoints, so a resumed run
// draws what the uninterrupted one would) or, where the node has a `seed`, from a generator seeded with it
// at each run (as ONNX's reference draws), in element order, so CPU and GPU runs draw the same numbers. A VAE's
// reparameterisation (torch.randn_like) exports as RandomNormalLike.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "graph/half.h"
#include "runtime/kernel.h"

namespace graphrun::runtime::random_ops {

// The output's element type and shape: `dtype` (default float for RandomNormal and RandomUniform, the
// input's type for the others) and `shape` (the attribute, or the input's shape).
inline DType output_type(const KernelContext& ctx, const Shape& input_shape, DType input_type, Shape* shape) {
  const Node& n = ctx.node();
  const bool like = n.op_type != "RandomNormal" && n.op_type != "RandomUniform";
  if (like) {
    *shape = input_shape;
  } else {
    GR_CHECK(n.has_attr("shape"), n.describe() << ": attribute 'shape' is required");
    const std::vector<int64_t> s = n.attr_ints("shape");
    *shape = Shape(s.begin(), s.end());
    checked_numel(DType::F32, *shape, n.describe() + ": attribute 'shape'");
  }
  const DType dt = n.has_attr("dtype") ? static_cast<DType>(n.attr_i("dtype", 1)) : like ? input_type : DType::F32;
  const bool is_float = dt == DType::F32 || dt == DType::F64 || dt == DType::F16 || dt == DType::BF16;
  const bool bernoulli_type = dt == DType::Bool || dt == DType::I64 || dt == DType::I32 || dt == DType::U8 || dt == DType::I8;
  GR_CHECK(is_float || (n.op_type == "Bernoulli" && bernoulli_type),
           n.describe() << ": dtype " << static_cast<int>(dt) << " is not supported (float16, float, double, bfloat16"
                        << (n.op_type == "Bernoulli" ? "; bool, int8, uint8, int32, int64" : "") << ")");
  return dt;
}

// The node's output type and shape, from its input where it has one (the *Like forms, Bernoulli).
inline DType planned_output(const KernelContext& ctx, Shape* shape) {
  const bool has_input = ctx.num_inputs() > 0 && ctx.has_input(0);
  GR_CHECK(ctx.node().op_type == "RandomNormal" || ctx.node().op_type == "RandomUniform" || has_input,
           ctx.node().describe() << ": input is required");
  return has_input ? output_type(ctx, ctx.input(0).shape(), ctx.input(0).dtype(), shape)
                   : output_type(ctx, Shape{}, DType::F32, shape);
}

// Stores v as element i of a `dt` buffer.
inline void store(void* out, DType dt, int64_t i, double v) {
  switch (dt) {
    case DType::F32: static_cast<float*>(out)[i] = static_cast<float>(v); break;
    case DType::F64: static_cast<double*>(out)[i] = v; break;
    case DType::F16: static_cast<uint16_t*>(out)[i] = float_to_half(static_cast<float>(v)); break;
    case DType::BF16: static_cast<uint16_t*>(out)[i] = float_to_bf16(static_cast<float>(v)); break;
    case DType::Bool: static_cast<uint8_t*>(out)[i] = v != 0; break;
    case DType::I64: static_cast<int64_t*>(out)[i] = static_cast<int64_t>(v); break;
    case DType::I32: static_cast<int32_t*>(out)[i] = static_cast<int32_t>(v); break;
    case DType::U8: static_cast<uint8_t*>(out)[i] = static_cast<uint8_t>(v); break;
    case DType::I8: static_cast<int8_t*>(out)[i] = static_cast<int8_t>(v); break;
    default: GR_FAIL("random ops: element type " << dtype_name(dt) << " is not supported");
  }
}

// Fills `out` (n elements of `dt`, host memory); `p` holds Bernoulli's probabilities (n of them).
inline void fill(KernelContext& ctx, void* out, DType dt, int64_t n, const std::vector<double>& p = {}) {
  const Node& node = ctx.node();
  const double seed = node.attr_f("seed", 0.f);  // (a float in ONNX)
  std::mt19937_64 seeded(std::fabs(seed) < 9e18 ? static_cast<uint64_t>(static_cast<int64_t>(seed)) : 0);
  std::mt19937_64& rng = node.has_attr("seed") ? seeded : ctx.rng();
  const std::string& op = node.op_type;
  if (op == "Bernoulli") {
    std::uniform_real_distribution<double> u(0.0, 1.0);
    for (int64_t i = 0; i < n; ++i) {
      const double pi = p.at(static_cast<size_t>(i));
      GR_CHECK(pi >= 0 && pi <= 1, node.describe() << ": probability " << pi << " is not in [0, 1]");
      store(out, dt, i, u(rng) < pi ? 1.0 : 0.0);
    }
  } else if (op == "RandomNormal" || op == "RandomNormalLike") {
    std::normal_distribution<double> d(node.attr_f("mean", 0.f), node.attr_f("scale", 1.f));
    for (int64_t i = 0; i < n; ++i) store(out, dt, i, d(rng));
  } else {
    const double lo = node.attr_f("low", 0.f), hi = node.attr_f("high", 1.f);
    GR_CHECK(lo <= hi, node.describe() << ": low " << lo << " is above high " << hi);
    std::uniform_real_distribution<double> d(lo, hi);
    for (int64_t i = 0; i < n; ++i) store(out, dt, i, d(rng));
  }
}

}  // namespace graphrun::runtime::random_ops

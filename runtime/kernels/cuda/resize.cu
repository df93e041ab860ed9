// CUDA kernels: resize family (the CPU's resize.cc op set): Resize, Upsample and ai.graphrun ResizeGrad,
// f32. The host plans the taps of every axis (runtime/kernels/resize_taps.h, the CPU's plan); the device
// sums over the product of each element's axis taps. ResizeGrad inverts the tables on the host (which
// outputs read each input coordinate) and gathers: deterministic, no atomics.
#include <cstring>

#include "runtime/kernels/cuda/common.cuh"
#include "runtime/kernels/resize_taps.h"

namespace graphrun::runtime::cuda {
namespace {

// dst element (coordinates c) = sum over the product of its axes' taps of prod(weight) * src[taps], or
// `extra` when an axis marks the coordinate outside (count -1). Axis k's coordinate j has its taps at
// [spans[2 * (base[k] + j)], + spans[2 * (base[k] + j) + 1]) in tap_index / tap_weight.
struct TapGeometry {
  int rank = 0;
  int64_t dst_dims[kMaxRank];
  int64_t src_strides[kMaxRank];
  int64_t base[kMaxRank];
};

__global__ void tap_sum_kernel(const float* src, float* dst, TapGeometry g, const int64_t* spans, const int64_t* tap_index,
                               const float* tap_weight, float extra, int64_t n) {
  GR_GRID_STRIDE(i, n) {
    int64_t first[kMaxRank], count[kMaxRank], at[kMaxRank];
    bool outside = false, empty = false;
    int64_t r = i;
    for (int k = g.rank - 1; k >= 0; --k) {
      const int64_t c = r % g.dst_dims[k];
      r /= g.dst_dims[k];
      first[k] = spans[2 * (g.base[k] + c)];
      count[k] = spans[2 * (g.base[k] + c) + 1];
      at[k] = 0;
      outside = outside || count[k] < 0;
      empty = empty || count[k] == 0;
    }
    if (outside) {
      dst[i] = extra;
      continue;
    }
    float acc = 0.f;
    // Odometer over the taps of every axis, the last axis fastest.
    while (!empty) {
      float w = 1.f;
      int64_t off = 0;
      for (int k = 0; k < g.rank; ++k) {
        const int64_t t = first[k] + at[k];
        w *= tap_weight[t];
        off += tap_index[t] * g.src_strides[k];
      }
      acc += w * src[off];
      int k = g.rank - 1;
      for (; k >= 0; --k) {
        if (++at[k] < count[k]) break;
        at[k] = 0;
      }
      if (k < 0) break;
    }
    dst[i] = acc;
  }
}

// Per axis and destination coordinate: the (source index, weight) pairs it reads; `outside` coordinates
// take the extrapolation value.
struct AxisList {
  std::vector<std::vector<std::pair<int64_t, double>>> at;
  std::vector<bool> outside;
};

// Uploads the axes' lists into scratch and launches the gather from src (dims src_dims) to dst.
void launch_tap_sum(KernelContext& ctx, const std::vector<AxisList>& axes, const Shape& src_dims, const Tensor& src,
                    Tensor& dst, float extra) {
  const int rank = static_cast<int>(axes.size());
  GR_CHECK(rank >= 1 && rank <= kMaxRank, ctx.node().op_type << " on CUDA takes ranks 1 to " << kMaxRank << ", got "
                                                             << shape_str(dst.shape()));
  const int64_t n = dst.numel();
  if (n == 0) return;
  TapGeometry g;
  g.rank = rank;
  std::vector<int64_t> spans, index;
  std::vector<float> weight;
  int64_t stride = 1;
  for (int k = rank - 1; k >= 0; --k) {
    g.src_strides[k] = stride;
    stride *= src_dims[k];
  }
  for (int k = 0; k < rank; ++k) {
    g.dst_dims[k] = dst.dim(k);
    g.base[k] = static_cast<int64_t>(spans.size() / 2);
    for (size_t j = 0; j < axes[k].at.size(); ++j) {
      spans.push_back(static_cast<int64_t>(index.size()));
      spans.push_back(axes[k].outside[j] ? -1 : static_cast<int64_t>(axes[k].at[j].size()));
      for (const auto& [idx, w] : axes[k].at[j]) {
        index.push_back(idx);
        weight.push_back(static_cast<float>(w));
      }
    }
  }
  // One scratch block: spans and tap indices (int64), then the weights.
  std::vector<char> host((spans.size() + index.size()) * sizeof(int64_t) + weight.size() * sizeof(float));
  std::memcpy(host.data(), spans.data(), spans.size() * sizeof(int64_t));
  std::memcpy(host.data() + spans.size() * sizeof(int64_t), index.data(), index.size() * sizeof(int64_t));
  std::memcpy(host.data() + (spans.size() + index.size()) * sizeof(int64_t), weight.data(), weight.size() * sizeof(float));
  char* dev = static_cast<char*>(ctx.scratch(host.size()));
  cudaStream_t st = stream_of(ctx);
  // Pageable memory is staged before the call returns: `host` may go out of scope.
  GR_CUDA_CHECK(cudaMemcpyAsync(dev, host.data(), host.size(), cudaMemcpyHostToDevice, st));
  const auto* d_spans = reinterpret_cast<const int64_t*>(dev);
  const int64_t* d_index = d_spans + spans.size();
  const auto* d_weight = reinterpret_cast<const float*>(d_index + index.size());
  tap_sum_kernel<<<grid_for(n), kThreads, 0, st>>>(dptr<float>(src), dptr<float>(dst), g, d_spans, d_index, d_weight, extra, n);
  GR_LAUNCH_CHECK("resize_taps");
}

ResizeValueReader device_values(const KernelContext& ctx) {
  return [&ctx](int i) { return host_doubles(ctx, i); };
}

void resize_op(KernelContext& ctx) {
  const Tensor& X = ctx.input(0);
  GR_CHECK(X.dtype() == DType::F32, ctx.node().op_type << " on CUDA takes f32, got " << dtype_name(X.dtype()));
  Shape out;
  const std::vector<AxisTaps> taps = plan_resize(ctx, X.shape(), &out, false, device_values(ctx));
  Tensor& Y = ctx.output(0, out, DType::F32);
  if (X.numel() == 0) return;
  std::vector<AxisList> axes(taps.size());
  for (size_t k = 0; k < taps.size(); ++k) {
    axes[k].outside = taps[k].outside;
    for (const auto& list : taps[k].taps) {
      axes[k].at.emplace_back();
      for (const Tap& t : list) axes[k].at.back().push_back({t.index, t.weight});
    }
  }
  launch_tap_sum(ctx, axes, X.shape(), X, Y, ctx.node().attr_f("extrapolation_value", 0.f));
}

// ResizeGrad(dY, shape, roi, scales): dX[i] = sum over the outputs o whose taps read i of weight * dY[o].
void resize_grad_op(KernelContext& ctx) {
  const Tensor& dY = ctx.input(0);
  GR_CHECK(dY.dtype() == DType::F32, "ResizeGrad on CUDA takes f32, got " << dtype_name(dY.dtype()));
  const std::vector<int64_t> shape = host_int64s(ctx, 1);
  Shape in(shape.begin(), shape.end()), out = dY.shape();
  GR_CHECK(in.size() == out.size(), "ResizeGrad: shape " << shape_str(in) << " and dY " << shape_str(out) << " differ in rank");
  const std::vector<AxisTaps> taps = plan_resize(ctx, in, &out, true, device_values(ctx));
  Tensor& dX = ctx.output(0, in, DType::F32);
  if (dX.numel() == 0) return;
  if (dY.numel() == 0) {
    GR_CUDA_CHECK(cudaMemsetAsync(dX.raw(), 0, dX.nbytes(), stream_of(ctx)));
    return;
  }
  std::vector<AxisList> axes(taps.size());
  for (size_t k = 0; k < taps.size(); ++k) {
    axes[k].at.resize(in[k]);
    axes[k].outside.assign(in[k], false);
    for (size_t o = 0; o < taps[k].taps.size(); ++o) {
      if (taps[k].outside[o]) continue;  // extrapolated outputs read no input
      for (const Tap& t : taps[k].taps[o]) axes[k].at[t.index].push_back({static_cast<int64_t>(o), t.weight});
    }
  }
  launch_tap_sum(ctx, axes, out, dY, dX, 0.f);
}

}  // namespace

GR_REGISTER_OPS(resize) {
  ops.op("Resize").cuda(locked<resize_op>);
  ops.op("Upsample").cuda(locked<resize_op>);
  ops.op(kGraphrunDomain, "ResizeGrad").cuda(locked<resize_grad_op>);
}

}  // namespace graphrun::runtime::cuda

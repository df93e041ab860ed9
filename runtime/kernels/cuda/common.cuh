// Shared helpers of the CUDA kernel families: the stream and handles of a kernel's device, launch
// sizes, strided index maps for broadcasting, and reading small shape-like tensors on the host.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/cuda/cuda_context.h"
#include "runtime/kernel.h"

namespace graphrun::runtime::cuda {

constexpr int kThreads = 256;
constexpr int kMaxRank = 8;

// Typed pointers to tensor memory (the caller has dispatched on the dtype; Bool is read as uint8_t).
template <class T> T* dptr(Tensor& t) { return static_cast<T*>(t.raw()); }
template <class T> const T* dptr(const Tensor& t) { return static_cast<const T*>(t.raw()); }

inline DeviceContext& ctx_device(const KernelContext& ctx) { return device_context(ctx.device().index); }
inline cudaStream_t stream_of(const KernelContext& ctx) { return ctx_device(ctx).stream; }

// Grid size for a grid-stride loop over n elements.
inline unsigned grid_for(int64_t n) {
  int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(b, 65535LL * 32)));
}

#define GR_GRID_STRIDE(i, n) \
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n); i += (int64_t)blockDim.x * gridDim.x)

// Kernels of replicas that share a GPU run on different host threads: each kernel enqueues under
// its device's launch lock (cuDNN handles must not be used by two threads at once).
template <KernelFn F>
void locked(KernelContext& ctx) {
  DeviceContext& dc = ctx_device(ctx);
  std::lock_guard<std::mutex> lock(dc.launch_mutex);
  F(ctx);
}

// Reads a small integer tensor (shape, axes, pads, starts...) on the host. Shape-like values live on
// the device like every other value; reading one waits for the stream (one small copy through a
// pinned buffer), which is why the graph's shape computations should stay few.
std::vector<int64_t> host_int64s(const KernelContext& ctx, int input);
// Reads a whole tensor's bytes on the host the same way (the ops whose output shape depends on values:
// NonZero, Compress's condition).
std::vector<char> host_bytes(const KernelContext& ctx, int input);
// A device input read back whole: its bytes, and a host tensor viewing them (move it, never copy it: the
// view points into `bytes`).
struct HostInput {
  std::vector<char> bytes;
  Tensor t;
  HostInput() = default;
  HostInput(HostInput&&) = default;
  HostInput& operator=(HostInput&&) = default;
  HostInput(const HostInput&) = delete;
  HostInput& operator=(const HostInput&) = delete;
};
HostInput host_input(const KernelContext& ctx, int input);
// Reads a shape given as an input (the gradient ops' `shape`) on the host; a negative dimension is an
// Error led by `what`.
Shape host_shape(const KernelContext& ctx, int input, const char* what);
// Reads a small tensor's values as doubles on the host the same way (Resize's roi, scales, sizes).
std::vector<double> host_doubles(const KernelContext& ctx, int input);
// Reads a scalar float input (e.g. Dropout's ratio) on the host the same way.
double host_scalar(const KernelContext& ctx, int input);

// Index map of an output element to the offsets of up to three (broadcast) inputs, row-major.
struct IndexMap {
  int rank = 0;
  int64_t dims[kMaxRank];        // output dims
  int64_t strides[3][kMaxRank];  // per input, element strides (0 on broadcast dims)
};

// numpy broadcasting of shapes; throws naming the shapes when they do not broadcast.
Shape broadcast_shapes(const std::vector<Shape>& shapes);
// The map from `out` (the broadcast shape) to each of `ins` (at most 3, each broadcastable to out).
IndexMap make_index_map(const Shape& out, const std::vector<Shape>& ins);

__host__ __device__ inline void map_offsets(const IndexMap& m, int64_t i, int nin, int64_t* off) {
  off[0] = off[1] = off[2] = 0;
  for (int d = m.rank - 1; d >= 0; --d) {
    int64_t c = i % m.dims[d];
    i /= m.dims[d];
    for (int k = 0; k < nin; ++k) off[k] += c * m.strides[k][d];
  }
}

int64_t normalize_axis(int64_t axis, int64_t rank, const char* what);

// Calls f(T{}) with T the C++ type of dtype, for the dtypes the device kernels move around; for any
// other dtype, an Error led by `what` (the op's name) when given.
template <class F>
void dispatch_any(DType t, const char* what, F f) {
  switch (t) {
    case DType::F32: f(float{}); break;
    case DType::F64: f(double{}); break;
    case DType::I64: f(int64_t{}); break;
    case DType::I32: f(int32_t{}); break;
    case DType::U8: case DType::Bool: f(uint8_t{}); break;
    case DType::I8: f(int8_t{}); break;
    default: GR_FAIL((what ? what : "") << (what ? ": " : "") << "element type " << dtype_name(t) << " is not supported on CUDA");
  }
}
template <class F>
void dispatch_any(DType t, F f) {
  dispatch_any(t, nullptr, f);
}

// Calls f(T{}) for the arithmetic types the device kernels compute in (f32, f64, i64, i32); for any other
// dtype, an Error: "<what> on <dtype> is not supported on CUDA".
template <class F>
void dispatch_arith(DType t, const std::string& what, F f) {
  switch (t) {
    case DType::F32: f(float{}); break;
    case DType::F64: f(double{}); break;
    case DType::I64: f(int64_t{}); break;
    case DType::I32: f(int32_t{}); break;
    default: GR_FAIL(what << " on " << dtype_name(t) << " is not supported on CUDA");
  }
}

}  // namespace graphrun::runtime::cuda

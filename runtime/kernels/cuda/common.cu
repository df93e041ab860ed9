// Shared helpers of the CUDA kernel families (see common.cuh).
#include <cstring>

#include "runtime/kernels/cuda/common.cuh"

namespace graphrun::runtime::cuda {

namespace {
struct SmallBytes {
  unsigned char b[kSmallCopyBytes];
};
__global__ void small_copy_kernel(SmallBytes s, unsigned char* dst, int n) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) dst[i] = s.b[i];
}
}  // namespace

void copy_small_to_device(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  GR_CHECK(bytes <= kSmallCopyBytes, "copy_small_to_device: " << bytes << " bytes exceed " << kSmallCopyBytes);
  if (bytes == 0) return;
  SmallBytes s;
  std::memcpy(s.b, src, bytes);
  small_copy_kernel<<<1, 64, 0, stream>>>(s, static_cast<unsigned char*>(dst), static_cast<int>(bytes));
  GR_LAUNCH_CHECK("small_copy");
}

static std::vector<char> read_back(const KernelContext& ctx, const Tensor& t) {
  std::vector<char> bytes(t.nbytes());
  if (bytes.empty()) return bytes;
  DeviceContext& dc = ctx_device(ctx);
  if (t.nbytes() <= dc.pinned_bytes) {
    GR_CUDA_CHECK(cudaMemcpyAsync(dc.pinned, t.raw(), t.nbytes(), cudaMemcpyDeviceToHost, dc.stream));
    GR_CUDA_CHECK(cudaStreamSynchronize(dc.stream));
    std::memcpy(bytes.data(), dc.pinned, t.nbytes());
  } else {
    GR_CUDA_CHECK(cudaMemcpyAsync(bytes.data(), t.raw(), t.nbytes(), cudaMemcpyDeviceToHost, dc.stream));
    GR_CUDA_CHECK(cudaStreamSynchronize(dc.stream));
  }
  return bytes;
}

std::vector<char> host_bytes(const KernelContext& ctx, int input) {
  const Tensor& t = ctx.input(input);
  if (t.device().is_cpu()) {
    const char* p = static_cast<const char*>(t.raw());
    return std::vector<char>(p, p + t.nbytes());
  }
  return read_back(ctx, t);
}

HostInput host_input(const KernelContext& ctx, int input) {
  HostInput h;
  h.bytes = host_bytes(ctx, input);
  const Tensor& t = ctx.input(input);
  h.t = Tensor::view(t.dtype(), t.shape(), h.bytes.data());
  return h;
}

std::vector<int64_t> host_int64s(const KernelContext& ctx, int input) {
  const Tensor& t = ctx.input(input);
  if (t.device().is_cpu()) return t.as_int64s();
  std::vector<char> bytes = read_back(ctx, t);
  return Tensor::view(t.dtype(), t.shape(), bytes.data()).as_int64s();
}

Shape host_shape(const KernelContext& ctx, int input, const char* what) {
  const std::vector<int64_t> v = host_int64s(ctx, input);
  const Shape s(v.begin(), v.end());
  for (int64_t d : s) GR_CHECK(d >= 0, what << ": bad shape " << shape_str(s));
  return s;
}

std::vector<double> host_doubles(const KernelContext& ctx, int input) {
  const Tensor& t = ctx.input(input);
  if (t.device().is_cpu()) return t.as_doubles();
  std::vector<char> bytes = read_back(ctx, t);
  return Tensor::view(t.dtype(), t.shape(), bytes.data()).as_doubles();
}

double host_scalar(const KernelContext& ctx, int input) {
  const Tensor& t = ctx.input(input);
  GR_CHECK(t.numel() == 1, "input " << input << " must be a scalar, got " << shape_str(t.shape()));
  if (t.device().is_cpu()) return t.as_doubles()[0];
  std::vector<char> bytes = read_back(ctx, t);
  return Tensor::view(t.dtype(), t.shape(), bytes.data()).as_doubles()[0];
}

Shape broadcast_shapes(const std::vector<Shape>& shapes) {
  size_t rank = 0;
  for (const Shape& s : shapes) rank = std::max(rank, s.size());
  Shape out(rank, 1);
  for (const Shape& s : shapes) {
    for (size_t i = 0; i < s.size(); ++i) {
      int64_t& o = out[rank - s.size() + i];
      int64_t d = s[i];
      if (d == o || d == 1) continue;
      if (o == 1) { o = d; continue; }
      std::string all;
      for (const Shape& x : shapes) all += (all.empty() ? "" : " and ") + shape_str(x);
      GR_FAIL("shapes " << all << " do not broadcast");
    }
  }
  return out;
}

IndexMap make_index_map(const Shape& out, const std::vector<Shape>& ins) {
  GR_CHECK(out.size() <= static_cast<size_t>(kMaxRank), "rank " << out.size() << " exceeds " << kMaxRank << " on CUDA");
  GR_CHECK(ins.size() <= 3, "at most 3 broadcast inputs");
  IndexMap m;
  m.rank = static_cast<int>(out.size());
  for (int d = 0; d < m.rank; ++d) m.dims[d] = out[d];
  for (size_t k = 0; k < 3; ++k)
    for (int d = 0; d < kMaxRank; ++d) m.strides[k][d] = 0;
  for (size_t k = 0; k < ins.size(); ++k) {
    const Shape& s = ins[k];
    int64_t stride = 1;
    for (int i = static_cast<int>(s.size()) - 1; i >= 0; --i) {
      int d = m.rank - static_cast<int>(s.size()) + i;
      m.strides[k][d] = s[i] == 1 ? 0 : stride;
      stride *= s[i];
    }
  }
  return m;
}

int64_t normalize_axis(int64_t axis, int64_t rank, const char* what) {
  GR_CHECK(axis >= -rank && axis < std::max<int64_t>(rank, 1),
           what << " " << axis << " is out of range for rank " << rank);
  return axis < 0 ? axis + rank : axis;
}

}  // namespace graphrun::runtime::cuda

// CUDA kernels: spectral family. DFT and STFT: a thread per output bin, runtime/kernels/spectral.h's direct sum in
// double (as the CPU's), f32 and f64. MelWeightMatrix: its scalar inputs read back, the matrix computed on the host
// as the CPU does and copied up.
#include "runtime/kernels/cuda/common.cuh"
#include "runtime/kernels/spectral.h"

namespace graphrun::runtime::cuda {
namespace {

template <class T>
__global__ void transform_kernel(const T* x, const T* window, T* y, spectral::Lines g, int64_t total) {
  GR_GRID_STRIDE(idx, total) {
    auto tw = [&](int64_t m, double& c, double& s) { spectral::twiddle(m, g.n, c, s); };
    spectral::line_bin(x, window, y, g, idx / g.bins, idx % g.bins, tw);
  }
}

void launch(KernelContext& ctx, const Tensor& x, const Tensor* window, Tensor& y, const spectral::Lines& g,
            const char* what) {
  const int64_t total = g.lines * g.bins;
  if (total == 0) return;
  GR_CHECK(x.dtype() == DType::F32 || x.dtype() == DType::F64, what << " on CUDA takes f32 or f64, got " << dtype_name(x.dtype()));
  if (x.dtype() == DType::F32)
    transform_kernel<float><<<grid_for(total), kThreads, 0, stream_of(ctx)>>>(
        dptr<float>(x), window ? dptr<float>(*window) : nullptr, dptr<float>(y), g, total);
  else
    transform_kernel<double><<<grid_for(total), kThreads, 0, stream_of(ctx)>>>(
        dptr<double>(x), window ? dptr<double>(*window) : nullptr, dptr<double>(y), g, total);
  GR_LAUNCH_CHECK("spectral_transform");
}

int64_t host_scalar_int(const KernelContext& ctx, int i, const char* what) {
  const std::vector<int64_t> v = host_int64s(ctx, i);
  GR_CHECK(v.size() == 1, what << ": expects one value, got " << v.size());
  return v[0];
}

void dft_op(KernelContext& ctx) {
  const Tensor& X = ctx.input(0);
  const spectral::DftPlan p = spectral::dft_plan(ctx.node(), X.shape(),
                                                 ctx.has_input(1) ? host_scalar_int(ctx, 1, "DFT dft_length") : -1);
  Tensor& Y = ctx.output(0, p.y_shape, X.dtype());
  launch(ctx, X, nullptr, Y, spectral::lines_of(p), "DFT");
}

void stft_op(KernelContext& ctx) {
  const Tensor& X = ctx.input(0);
  const Tensor* W = ctx.has_input(2) ? &ctx.input(2) : nullptr;
  const Shape window_shape = W ? W->shape() : Shape{};
  const spectral::StftPlan p = spectral::stft_plan(
      ctx.node(), X.shape(), host_scalar_int(ctx, 1, "STFT frame_step"), W ? &window_shape : nullptr,
      ctx.has_input(3) ? host_scalar_int(ctx, 3, "STFT frame_length") : -1);
  GR_CHECK(!W || W->dtype() == X.dtype(), "STFT: the window and the signal differ in element type");
  Tensor& Y = ctx.output(0, p.y_shape, X.dtype());
  launch(ctx, X, W, Y, spectral::lines_of(p), "STFT");
}

void mel_weight_matrix_op(KernelContext& ctx) {
  auto integer = [&](int i, const char* what) {
    const std::vector<int64_t> v = host_int64s(ctx, i);
    GR_CHECK(v.size() == 1, "MelWeightMatrix: " << what << " must be a scalar");
    return v[0];
  };
  auto real = [&](int i, const char* what) {
    const std::vector<double> v = host_doubles(ctx, i);
    GR_CHECK(v.size() == 1 && dtype_is_float(ctx.input(i).dtype()), "MelWeightMatrix: " << what << " must be a float scalar");
    return v[0];
  };
  const int64_t mel_bins = integer(0, "num_mel_bins"), dft_length = integer(1, "dft_length");
  const Tensor host =
      spectral::mel_weight_tensor(mel_bins, dft_length, integer(2, "sample_rate"), real(3, "lower_edge_hertz"),
                                  real(4, "upper_edge_hertz"), ctx.node().attr_i("output_datatype", 1));
  Tensor& Y = ctx.output(0, host.shape(), host.dtype());
  if (Y.nbytes()) {
    GR_CUDA_CHECK(cudaMemcpyAsync(Y.raw(), host.raw(), host.nbytes(), cudaMemcpyHostToDevice, stream_of(ctx)));
    GR_CUDA_CHECK(cudaStreamSynchronize(stream_of(ctx)));  // `host` leaves with this call
  }
}

}  // namespace

GR_REGISTER_OPS(spectral) {
  ops.op("DFT").cuda(locked<dft_op>);
  ops.op("STFT").cuda(locked<stft_op>);
  ops.op("MelWeightMatrix").cuda(locked<mel_weight_matrix_op>);
}

}  // namespace graphrun::runtime::cuda

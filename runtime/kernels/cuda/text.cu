// CUDA kernels: text family (the CPU's text.cc). TfIdfVectorizer reads its tokens back and counts the n-grams on the
// host (runtime/kernels/tfidf.h, as the CPU): the pool is a host table, and a model's token ids are few.
#include "runtime/kernels/cuda/common.cuh"
#include "runtime/kernels/tfidf.h"

namespace graphrun::runtime::cuda {
namespace {

void tfidf_op(KernelContext& ctx) {
  const HostInput x = host_input(ctx, 0);
  const tfidf::Pool p = tfidf::pool_of(ctx.node());
  const tfidf::Rows r = tfidf::rows_of(x.t, p);
  Tensor& Y = ctx.output(0, r.y_shape, DType::F32);
  if (Y.numel() == 0) return;
  std::vector<float> y(static_cast<size_t>(Y.numel()), 0.f);
  tfidf::vectorize(p, x.t.as_int64s(), r.rows, r.cols, y.data());
  GR_CUDA_CHECK(cudaMemcpyAsync(Y.raw(), y.data(), Y.nbytes(), cudaMemcpyHostToDevice, stream_of(ctx)));
  GR_CUDA_CHECK(cudaStreamSynchronize(stream_of(ctx)));  // y is freed on return
}

}  // namespace

GR_REGISTER_OPS(text) { ops.op("TfIdfVectorizer").cuda(locked<tfidf_op>); }

}  // namespace graphrun::runtime::cuda

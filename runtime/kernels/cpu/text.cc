// CPU kernels: text family. TfIdfVectorizer over integer tokens (runtime/kernels/tfidf.h, shared with the CUDA
// kernel).
#include <cstring>

#include "runtime/kernels/cpu/math_common.h"
#include "runtime/kernels/tfidf.h"

namespace graphrun::runtime::cpu {

namespace {

void tfidf_kernel(KernelContext& ctx) {
  const Tensor& X = ctx.input(0);
  const tfidf::Pool p = tfidf::pool_of(ctx.node());
  const tfidf::Rows r = tfidf::rows_of(X, p);
  Tensor& Y = ctx.output(0, r.y_shape, DType::F32);
  if (Y.numel() == 0) return;
  std::memset(Y.raw(), 0, Y.nbytes());
  tfidf::vectorize(p, X.as_int64s(), r.rows, r.cols, Y.data<float>());
}

}  // namespace

GR_REGISTER_OPS(text) { ops.op("TfIdfVectorizer").cpu(tfidf_kernel); }

}  // namespace graphrun::runtime::cpu

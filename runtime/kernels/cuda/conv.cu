// CUDA kernels: conv family (the CPU's conv.cc op set): Conv, ConvTranspose and ai.graphrun ConvGrad and
// ConvTransposeGrad (2-D) through cuDNN. ConvTranspose is cuDNN's backward-data of the convolution whose input
// is its output; its gradient is that convolution forward (dX) and its backward-filter with the roles of X and
// Y exchanged (dW). Descriptors and algorithms are chosen once per shape (cudnnFind*, benchmarked on the
// first run) and cached per device; deterministic algorithms only when the backend is set so.
#include <sstream>

#include "runtime/kernels/cuda/common.cuh"
#include "runtime/kernels/cuda/fused.cuh"
#include "runtime/kernels/cpu/window.h"

namespace graphrun::runtime::cuda {
namespace {

struct ConvGeom {
  int64_t n, c, h, w;      // X
  int64_t m, kh, kw;       // W: [m, c/group, kh, kw]
  int64_t group;
  int64_t pad_h, pad_w;    // symmetric (cuDNN); asymmetric pads are refused
  int64_t stride_h, stride_w, dil_h, dil_w;
  int64_t oh, ow;
  std::string key() const {
    std::ostringstream os;
    os << n << ',' << c << ',' << h << ',' << w << ',' << m << ',' << kh << ',' << kw << ',' << group << ',' << pad_h << ','
       << pad_w << ',' << stride_h << ',' << stride_w << ',' << dil_h << ',' << dil_w;
    return os.str();
  }
};

ConvGeom conv_geom(const Node& node, const Tensor& X, const Tensor& W) {
  GR_CHECK(X.rank() == 4 && W.rank() == 4, "Conv on CUDA supports 2-D convolutions (X and W of rank 4), got X "
                                                << shape_str(X.shape()) << ", W " << shape_str(W.shape()));
  GR_CHECK(X.dtype() == DType::F32 && W.dtype() == DType::F32, "Conv on CUDA takes f32");
  ConvGeom g;
  g.n = X.dim(0); g.c = X.dim(1); g.h = X.dim(2); g.w = X.dim(3);
  g.m = W.dim(0); g.kh = W.dim(2); g.kw = W.dim(3);
  g.group = node.attr_i("group", 1);
  GR_CHECK(g.group >= 1 && g.c % g.group == 0 && g.m % g.group == 0 && W.dim(1) * g.group == g.c,
           "Conv: X has " << g.c << " channels, W " << shape_str(W.shape()) << ", group " << g.group);
  std::vector<int64_t> ks = node.attr_ints("kernel_shape", {g.kh, g.kw});
  GR_CHECK(ks.size() == 2 && ks[0] == g.kh && ks[1] == g.kw, "Conv: kernel_shape does not match W " << shape_str(W.shape()));
  std::vector<int64_t> st = node.attr_ints("strides", {1, 1}), dl = node.attr_ints("dilations", {1, 1});
  std::vector<int64_t> pads = node.attr_ints("pads", {0, 0, 0, 0});
  GR_CHECK(st.size() == 2 && dl.size() == 2 && pads.size() == 4, "Conv: strides, dilations or pads of the wrong length");
  // Checked here, not by cuDNN: a zero stride would divide by zero below (a crash, not an error).
  for (int64_t v : st) GR_CHECK(v >= 1, "Conv: strides must be >= 1, got " << shape_str(st));
  for (int64_t v : dl) GR_CHECK(v >= 1, "Conv: dilations must be >= 1, got " << shape_str(dl));
  for (int64_t v : pads) GR_CHECK(v >= 0, "Conv: pads must be >= 0, got " << shape_str(pads));
  GR_CHECK(g.kh >= 1 && g.kw >= 1, "Conv: W " << shape_str(W.shape()) << " has an empty kernel");
  g.stride_h = st[0]; g.stride_w = st[1]; g.dil_h = dl[0]; g.dil_w = dl[1];
  std::string ap = node.attr_s("auto_pad", "NOTSET");
  if (ap == "VALID") {
    pads = {0, 0, 0, 0};
  } else if (ap == "SAME_UPPER" || ap == "SAME_LOWER") {
    int64_t in[2] = {g.h, g.w}, k[2] = {g.kh, g.kw};
    for (int i = 0; i < 2; ++i) {
      int64_t out = (in[i] + st[i] - 1) / st[i];
      int64_t total = std::max<int64_t>(0, (out - 1) * st[i] + (k[i] - 1) * dl[i] + 1 - in[i]);
      int64_t small = total / 2, big = total - small;
      pads[i] = ap == "SAME_UPPER" ? small : big;
      pads[i + 2] = ap == "SAME_UPPER" ? big : small;
    }
  } else {
    GR_CHECK(ap == "NOTSET", "Conv: unknown auto_pad '" << ap << "'");
  }
  GR_CHECK(pads[0] == pads[2] && pads[1] == pads[3],
           "Conv on CUDA needs symmetric padding (cuDNN), got pads " << shape_str(pads));
  g.pad_h = pads[0]; g.pad_w = pads[1];
  g.oh = (g.h + 2 * g.pad_h - (g.kh - 1) * g.dil_h - 1) / g.stride_h + 1;
  g.ow = (g.w + 2 * g.pad_w - (g.kw - 1) * g.dil_w - 1) / g.stride_w + 1;
  GR_CHECK(g.oh > 0 && g.ow > 0, "Conv: output would be empty for X " << shape_str(X.shape()) << " and W " << shape_str(W.shape()));
  // cuDNN's descriptors take int dimensions and at most 2^31 - 1 elements per tensor.
  for (int64_t numel : {X.numel(), W.numel(), g.n * g.m * g.oh * g.ow})
    GR_CHECK(numel <= INT32_MAX, "Conv on CUDA: a tensor of " << numel << " elements exceeds cuDNN's 2^31 - 1 (X "
                                                               << shape_str(X.shape()) << "); use a smaller batch");
  return g;
}

struct ConvEntry {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr, b = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  cudnnConvolutionFwdAlgo_t fwd{};
  cudnnConvolutionBwdDataAlgo_t bwd_data{};
  cudnnConvolutionBwdFilterAlgo_t bwd_filter{};
  size_t fwd_ws = 0, data_ws = 0, filter_ws = 0;
  ~ConvEntry() {
    if (x) cudnnDestroyTensorDescriptor(x);
    if (y) cudnnDestroyTensorDescriptor(y);
    if (b) cudnnDestroyTensorDescriptor(b);
    if (w) cudnnDestroyFilterDescriptor(w);
    if (conv) cudnnDestroyConvolutionDescriptor(conv);
  }
};

void make_descriptors(ConvEntry& e, const ConvGeom& g) {
  auto i = [](int64_t v) { return static_cast<int>(v); };
  GR_CUDNN_CHECK(cudnnCreateTensorDescriptor(&e.x));
  GR_CUDNN_CHECK(cudnnCreateTensorDescriptor(&e.y));
  GR_CUDNN_CHECK(cudnnCreateTensorDescriptor(&e.b));
  GR_CUDNN_CHECK(cudnnCreateFilterDescriptor(&e.w));
  GR_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&e.conv));
  GR_CUDNN_CHECK(cudnnSetTensor4dDescriptor(e.x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, i(g.n), i(g.c), i(g.h), i(g.w)));
  GR_CUDNN_CHECK(cudnnSetFilter4dDescriptor(e.w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, i(g.m), i(g.c / g.group), i(g.kh), i(g.kw)));
  GR_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(e.conv, i(g.pad_h), i(g.pad_w), i(g.stride_h), i(g.stride_w), i(g.dil_h),
                                                 i(g.dil_w), CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  GR_CUDNN_CHECK(cudnnSetConvolutionGroupCount(e.conv, i(g.group)));
  // True fp32 arithmetic (no TF32): results stay comparable with the CPU kernels.
  GR_CUDNN_CHECK(cudnnSetConvolutionMathType(e.conv, CUDNN_FMA_MATH));
  int n, c, h, w;
  GR_CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(e.conv, e.x, e.w, &n, &c, &h, &w));
  GR_CHECK(n == g.n && c == g.m && h == g.oh && w == g.ow, "Conv: cuDNN's output shape differs from ONNX's");
  GR_CUDNN_CHECK(cudnnSetTensor4dDescriptor(e.y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, c, h, w));
  GR_CUDNN_CHECK(cudnnSetTensor4dDescriptor(e.b, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, c, 1, 1));
}

// Picks the fastest successful algorithm of a Find result, deterministic ones only when asked, and
// never a tensor-op (TF32) one: the descriptor asks for CUDNN_FMA_MATH (true fp32) and keeps it.
// Entries labelled FMA come first; ones labelled DEFAULT only when no FMA entry qualifies.
template <class Perf>
const Perf& pick(const Perf* perf, int n, const char* what) {
  bool det = deterministic();
  for (cudnnMathType_t math : {CUDNN_FMA_MATH, CUDNN_DEFAULT_MATH})
    for (int k = 0; k < n; ++k)
      if (perf[k].status == CUDNN_STATUS_SUCCESS && perf[k].mathType == math &&
          (!det || perf[k].determinism == CUDNN_DETERMINISTIC))
        return perf[k];
  GR_FAIL("cuDNN found no " << (det ? "deterministic " : "") << what << " algorithm for this convolution");
}

ConvEntry& conv_entry(KernelContext& ctx, const ConvGeom& g, bool backward) {
  DeviceContext& dc = ctx_device(ctx);
  std::string key = std::string(backward ? "conv_bwd:" : "conv_fwd:") + g.key() + (deterministic() ? ":det" : "");
  auto it = dc.cache.find(key);
  if (it != dc.cache.end()) return *static_cast<ConvEntry*>(it->second.get());
  auto e = std::make_shared<ConvEntry>();
  make_descriptors(*e, g);
  constexpr int kMax = 16;
  int found = 0;
  if (!backward) {
    cudnnConvolutionFwdAlgoPerf_t perf[kMax];
    GR_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithm(dc.cudnn, e->x, e->w, e->conv, e->y, kMax, &found, perf));
    const auto& p = pick(perf, found, "forward");
    e->fwd = p.algo;
    e->fwd_ws = p.memory;
  } else {
    cudnnConvolutionBwdDataAlgoPerf_t dperf[kMax];
    GR_CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithm(dc.cudnn, e->w, e->y, e->conv, e->x, kMax, &found, dperf));
    const auto& dp = pick(dperf, found, "backward-data");
    e->bwd_data = dp.algo;
    e->data_ws = dp.memory;
    cudnnConvolutionBwdFilterAlgoPerf_t fperf[kMax];
    GR_CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithm(dc.cudnn, e->x, e->y, e->conv, e->w, kMax, &found, fperf));
    const auto& fp = pick(fperf, found, "backward-filter");
    e->bwd_filter = fp.algo;
    e->filter_ws = fp.memory;
  }
  ConvEntry& ref = *e;
  dc.cache[key] = std::move(e);
  return ref;
}

// Conv, or FusedConv (relu): then the bias and the Relu in one pass over Y instead of cuDNN's AddTensor.
void conv_forward_op(KernelContext& ctx, bool relu) {
  if (relu) check_fused_activation(ctx.node());
  const Tensor& X = ctx.input(0);
  const Tensor& W = ctx.input(1);
  ConvGeom g = conv_geom(ctx.node(), X, W);
  Tensor& Y = ctx.output(0, {g.n, g.m, g.oh, g.ow}, DType::F32);
  if (g.n == 0) return;
  DeviceContext& dc = ctx_device(ctx);
  ConvEntry& e = conv_entry(ctx, g, false);
  void* ws = e.fwd_ws ? ctx.scratch(e.fwd_ws) : nullptr;
  const float one = 1.f, zero = 0.f;
  GR_CUDNN_CHECK(cudnnConvolutionForward(dc.cudnn, &one, e.x, X.raw(), e.w, W.raw(), e.conv, e.fwd, ws, e.fwd_ws, &zero,
                                         e.y, Y.raw()));
  const float* bias = nullptr;
  if (ctx.has_input(2)) {
    const Tensor& B = ctx.input(2);
    GR_CHECK(B.dtype() == DType::F32 && B.numel() == g.m, "Conv: bias must be f32[" << g.m << "], got " << shape_str(B.shape()));
    bias = dptr<float>(B);
    if (!relu) GR_CUDNN_CHECK(cudnnAddTensor(dc.cudnn, &one, e.b, B.raw(), &one, e.y, Y.raw()));
  }
  if (relu) bias_relu_in_place(ctx, dptr<float>(Y), Y.numel(), bias, g.oh * g.ow, g.m);
}

void conv_op(KernelContext& ctx) { conv_forward_op(ctx, false); }
void fused_conv_op(KernelContext& ctx) { conv_forward_op(ctx, true); }

// The gradients of a convolution (or ConvTranspose) over an empty batch: no descriptors (cuDNN refuses zero
// dimensions); dX is empty, dW and dB (`bias_channels` values) are zero.
void empty_batch_gradients(KernelContext& ctx, const Tensor& X, const Tensor& W, int64_t bias_channels) {
  if (ctx.has_output(0)) ctx.output(0, X.shape(), DType::F32);
  for (int i : {1, 2}) {
    if (!ctx.has_output(i)) continue;
    Tensor& t = ctx.output(i, i == 1 ? W.shape() : Shape{bias_channels}, DType::F32);
    if (t.nbytes()) GR_CUDA_CHECK(cudaMemsetAsync(t.raw(), 0, t.nbytes(), stream_of(ctx)));
  }
}

void conv_grad_op(KernelContext& ctx) {
  const Tensor& dY = ctx.input(0);
  const Tensor& X = ctx.input(1);
  const Tensor& W = ctx.input(2);
  ConvGeom g = conv_geom(ctx.node(), X, W);
  Shape yshape{g.n, g.m, g.oh, g.ow};
  GR_CHECK(dY.shape() == yshape, "ConvGrad: dY is " << shape_str(dY.shape()) << ", the convolution gives " << shape_str(yshape));
  GR_CHECK(dY.dtype() == DType::F32, "ConvGrad on CUDA takes f32");
  DeviceContext& dc = ctx_device(ctx);
  bool want_dx = ctx.has_output(0), want_dw = ctx.has_output(1), want_db = ctx.has_output(2);
  if (g.n == 0) return empty_batch_gradients(ctx, X, W, g.m);
  ConvEntry& e = conv_entry(ctx, g, true);
  size_t ws_bytes = std::max(want_dx ? e.data_ws : 0, want_dw ? e.filter_ws : 0);
  // One scratch request per kernel call (the planned scratch is one block).
  void* ws = ws_bytes ? ctx.scratch(ws_bytes) : nullptr;
  const float one = 1.f, zero = 0.f;
  if (want_dx) {
    Tensor& dX = ctx.output(0, X.shape(), DType::F32);
    GR_CUDNN_CHECK(cudnnConvolutionBackwardData(dc.cudnn, &one, e.w, W.raw(), e.y, dY.raw(), e.conv, e.bwd_data, ws,
                                                e.data_ws, &zero, e.x, dX.raw()));
  }
  if (want_dw) {
    Tensor& dW = ctx.output(1, W.shape(), DType::F32);
    GR_CUDNN_CHECK(cudnnConvolutionBackwardFilter(dc.cudnn, &one, e.x, X.raw(), e.y, dY.raw(), e.conv, e.bwd_filter, ws,
                                                  e.filter_ws, &zero, e.w, dW.raw()));
  }
  if (want_db) {
    Tensor& dB = ctx.output(2, {g.m}, DType::F32);
    GR_CUDNN_CHECK(cudnnConvolutionBackwardBias(dc.cudnn, &one, e.y, dY.raw(), &zero, e.b, dB.raw()));
  }
}

// ConvTranspose(X [N, Cin, H, W], W [Cin, Cout/group, kh, kw]) as the geometry of the Conv whose input is the
// ConvTranspose output [N, Cout, OH, OW] and whose output is X: g.c, g.h, g.w describe Y, g.m, g.oh, g.ow X.
// The output size and pads as the CPU's conv_transpose_shape computes them (output_padding, output_shape,
// auto_pad); cuDNN needs the pads symmetric, and output_padding below the stride.
ConvGeom conv_transpose_geom(const Node& node, const Tensor& X, const Tensor& W) {
  GR_CHECK(X.rank() == 4 && W.rank() == 4, "ConvTranspose on CUDA supports 2-D convolutions (X and W of rank 4), got X "
                                               << shape_str(X.shape()) << ", W " << shape_str(W.shape()));
  GR_CHECK(X.dtype() == DType::F32 && W.dtype() == DType::F32, "ConvTranspose on CUDA takes f32");
  ConvGeom g;
  g.group = node.attr_i("group", 1);
  GR_CHECK(g.group >= 1 && X.dim(1) == W.dim(0) && X.dim(1) % g.group == 0,
           "ConvTranspose: X has " << X.dim(1) << " channels, W " << shape_str(W.shape()) << ", group " << g.group);
  g.n = X.dim(0);
  g.m = X.dim(1);
  g.c = W.dim(1) * g.group;
  g.kh = W.dim(2);
  g.kw = W.dim(3);
  g.oh = X.dim(2);
  g.ow = X.dim(3);
  if (node.has_attr("kernel_shape"))
    GR_CHECK(node.attr_ints("kernel_shape") == std::vector<int64_t>({g.kh, g.kw}),
             "ConvTranspose: kernel_shape does not match W " << shape_str(W.shape()));
  const cpu::WindowAttrs a = cpu::read_window_attrs(node, 2);
  std::vector<int64_t> out_pad = node.attr_ints("output_padding", {0, 0}), out_shape = node.attr_ints("output_shape");
  if (out_shape.size() == 4) out_shape.erase(out_shape.begin(), out_shape.begin() + 2);
  GR_CHECK(out_pad.size() == 2 && (out_shape.empty() || out_shape.size() == 2),
           "ConvTranspose: output_padding or output_shape of the wrong length");
  int64_t size[2], pad[2];
  for (int i = 0; i < 2; ++i) {
    const int64_t in = X.dim(2 + i), k = W.dim(2 + i), s = a.strides[i], d = a.dilations[i], op = out_pad[i];
    GR_CHECK(op >= 0 && op < s, "ConvTranspose on CUDA needs output_padding below the stride, got " << op << " for stride " << s);
    const int64_t full = s * (in - 1) + op + (k - 1) * d + 1;
    int64_t pb = a.pads[i], pe = a.pads[i + 2];
    if (!out_shape.empty() || a.auto_pad == "SAME_UPPER" || a.auto_pad == "SAME_LOWER") {
      size[i] = out_shape.empty() ? in * s : out_shape[i];
      const int64_t total = full - size[i], half = total >= 0 ? total / 2 : -((1 - total) / 2);
      if (a.auto_pad == "SAME_UPPER") pb = half, pe = total - half;
      else pb = total - half, pe = half;
    } else {
      if (a.auto_pad == "VALID") pb = pe = 0;
      size[i] = full - pb - pe;
    }
    GR_CHECK(size[i] >= 1, "ConvTranspose: spatial axis " << i << ": the output size would be " << size[i]);
    GR_CHECK(pb == pe && pb >= 0, "ConvTranspose on CUDA needs symmetric padding (cuDNN), got " << pb << " and " << pe
                                                                                                 << " on axis " << i);
    // The convolution of the output must give X back (cuDNN's descriptors check the same).
    GR_CHECK((size[i] + 2 * pb - (k - 1) * d - 1) / s + 1 == in,
             "ConvTranspose on CUDA: this output size (output_shape) is not the convolution's inverse");
    pad[i] = pb;
  }
  g.h = size[0];
  g.w = size[1];
  g.pad_h = pad[0];
  g.pad_w = pad[1];
  g.stride_h = a.strides[0];
  g.stride_w = a.strides[1];
  g.dil_h = a.dilations[0];
  g.dil_w = a.dilations[1];
  for (int64_t numel : {X.numel(), W.numel(), g.n * g.c * g.h * g.w})
    GR_CHECK(numel <= INT32_MAX, "ConvTranspose on CUDA: a tensor of " << numel << " elements exceeds cuDNN's 2^31 - 1");
  return g;
}

// The bias (or its gradient) of ConvTranspose: one value per output channel of Y ([1, Cout, 1, 1]).
struct BiasDesc {
  cudnnTensorDescriptor_t d = nullptr;
  explicit BiasDesc(int64_t channels) {
    GR_CUDNN_CHECK(cudnnCreateTensorDescriptor(&d));
    GR_CUDNN_CHECK(cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, static_cast<int>(channels), 1, 1));
  }
  ~BiasDesc() { cudnnDestroyTensorDescriptor(d); }
};

void conv_transpose_op(KernelContext& ctx) {
  const Tensor &X = ctx.input(0), &W = ctx.input(1);
  const ConvGeom g = conv_transpose_geom(ctx.node(), X, W);
  Tensor& Y = ctx.output(0, {g.n, g.c, g.h, g.w}, DType::F32);
  if (g.n == 0) return;
  DeviceContext& dc = ctx_device(ctx);
  ConvEntry& e = conv_entry(ctx, g, true);
  void* ws = e.data_ws ? ctx.scratch(e.data_ws) : nullptr;
  const float one = 1.f, zero = 0.f;
  GR_CUDNN_CHECK(cudnnConvolutionBackwardData(dc.cudnn, &one, e.w, W.raw(), e.y, X.raw(), e.conv, e.bwd_data, ws,
                                              e.data_ws, &zero, e.x, Y.raw()));
  if (ctx.has_input(2)) {
    const Tensor& B = ctx.input(2);
    GR_CHECK(B.dtype() == DType::F32 && B.numel() == g.c,
             "ConvTranspose: bias must be f32[" << g.c << "], got " << shape_str(B.shape()));
    BiasDesc b(g.c);
    GR_CUDNN_CHECK(cudnnAddTensor(dc.cudnn, &one, b.d, B.raw(), &one, e.x, Y.raw()));
  }
}

// ConvTransposeGrad(dY, X, W) -> dX = Conv(dY, W), dW = the conv's backward-filter with dY as its input and
// X as its output's gradient, dB = dY summed per output channel.
void conv_transpose_grad_op(KernelContext& ctx) {
  const Tensor &dY = ctx.input(0), &X = ctx.input(1), &W = ctx.input(2);
  const ConvGeom g = conv_transpose_geom(ctx.node(), X, W);
  const Shape yshape{g.n, g.c, g.h, g.w};
  GR_CHECK(dY.shape() == yshape && dY.dtype() == DType::F32,
           "ConvTransposeGrad: dY is " << shape_str(dY.shape()) << ", the ConvTranspose gives f32" << shape_str(yshape));
  DeviceContext& dc = ctx_device(ctx);
  const bool want_dx = ctx.has_output(0), want_dw = ctx.has_output(1), want_db = ctx.has_output(2);
  if (g.n == 0) return empty_batch_gradients(ctx, X, W, g.c);
  const float one = 1.f, zero = 0.f;
  ConvEntry* f = want_dx ? &conv_entry(ctx, g, false) : nullptr;
  ConvEntry& b = conv_entry(ctx, g, true);
  // One scratch request per kernel call (the planned scratch is one block).
  const size_t ws_bytes = std::max(f ? f->fwd_ws : 0, want_dw ? b.filter_ws : 0);
  void* ws = ws_bytes ? ctx.scratch(ws_bytes) : nullptr;
  if (f) {
    Tensor& dX = ctx.output(0, X.shape(), DType::F32);
    GR_CUDNN_CHECK(cudnnConvolutionForward(dc.cudnn, &one, f->x, dY.raw(), f->w, W.raw(), f->conv, f->fwd, ws, f->fwd_ws,
                                           &zero, f->y, dX.raw()));
  }
  if (want_dw) {
    Tensor& dW = ctx.output(1, W.shape(), DType::F32);
    GR_CUDNN_CHECK(cudnnConvolutionBackwardFilter(dc.cudnn, &one, b.x, dY.raw(), b.y, X.raw(), b.conv, b.bwd_filter, ws,
                                                  b.filter_ws, &zero, b.w, dW.raw()));
  }
  if (want_db) {
    Tensor& dB = ctx.output(2, {g.c}, DType::F32);
    BiasDesc bd(g.c);
    GR_CUDNN_CHECK(cudnnConvolutionBackwardBias(dc.cudnn, &one, b.x, dY.raw(), &zero, bd.d, dB.raw()));
  }
}

}  // namespace

GR_REGISTER_OPS(conv) {
  ops.op("ConvTranspose").cuda(locked<conv_transpose_op>);
  ops.op(kGraphrunDomain, "ConvTransposeGrad").cuda(locked<conv_transpose_grad_op>);
  ops.op("Conv").cuda(locked<conv_op>);
  ops.op(kGraphrunDomain, "FusedConv").cuda(locked<fused_conv_op>);
  ops.op(kGraphrunDomain, "ConvGrad").cuda(locked<conv_grad_op>);
}

}  // namespace graphrun::runtime::cuda

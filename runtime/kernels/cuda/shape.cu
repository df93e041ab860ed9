// CUDA kernels: shape family (the CPU's shape.cc op set): Reshape, Flatten, Transpose, Shape, Constant,
// ConstantOfShape, Gather, Concat, Split, Tile, DepthToSpace, SpaceToDepth, Unsqueeze, Squeeze, Slice, GatherElements, ScatterElements (and opset 9's Scatter), ScatterND,
// ai.graphrun SliceGrad and GatherElementsGrad. Shape-like int64 inputs are read on the host (common.cuh).
#include <cstring>

#include "graph/slice_layout.h"
#include "runtime/kernels/cuda/common.cuh"
#include "runtime/kernels/depth_space.h"

namespace graphrun::runtime::cuda {
namespace {

void copy_device(KernelContext& ctx, const Tensor& X, Tensor& Y) {
  if (X.nbytes() && X.raw() != Y.raw())
    GR_CUDA_CHECK(cudaMemcpyAsync(Y.raw(), X.raw(), X.nbytes(), cudaMemcpyDeviceToDevice, stream_of(ctx)));
}

// Calls f(U{}) with an unsigned type as wide as one element: copies move bytes, not values.
template <class F>
void dispatch_width(DType t, F f) {
  switch (dtype_size(t)) {
    case 1: f(uint8_t{}); break;
    case 2: f(uint16_t{}); break;
    case 4: f(uint32_t{}); break;
    case 8: f(uint64_t{}); break;
    default: GR_FAIL("element type " << dtype_name(t) << " is not supported on CUDA");
  }
}

template <class U>
__global__ void strided_copy_kernel(const U* x, U* y, IndexMap m, int64_t base, int64_t n) {
  GR_GRID_STRIDE(i, n) {
    int64_t off[3];
    map_offsets(m, i, 1, off);
    y[i] = x[base + off[0]];
  }
}

// y[i] = x[base + sum_d c_d * in_strides[d]] for the coordinates c of i in `shape` (Y's shape unless given:
// Y seen as a view of another shape of its size, DepthToSpace's 6-D one).
void strided_copy(KernelContext& ctx, const Tensor& X, Tensor& Y, const std::vector<int64_t>& in_strides, int64_t base,
                  const Shape* shape = nullptr) {
  int64_t n = Y.numel();
  if (n == 0) return;
  const Shape& ys = shape ? *shape : Y.shape();
  GR_CHECK(ys.size() <= static_cast<size_t>(kMaxRank), "rank " << ys.size() << " exceeds " << kMaxRank << " on CUDA");
  IndexMap m;
  m.rank = static_cast<int>(ys.size());
  for (int k = 0; k < 3; ++k)
    for (int d = 0; d < kMaxRank; ++d) m.strides[k][d] = 0;
  for (int d = 0; d < m.rank; ++d) {
    m.dims[d] = ys[d];
    m.strides[0][d] = in_strides[d];
  }
  dispatch_width(X.dtype(), [&](auto tag) {
    using U = decltype(tag);
    strided_copy_kernel<U><<<grid_for(n), kThreads, 0, stream_of(ctx)>>>(dptr<U>(X), dptr<U>(Y), m, base, n);
  });
  GR_LAUNCH_CHECK("strided_copy");
}

std::vector<int64_t> row_major_strides(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (int i = static_cast<int>(s.size()) - 2; i >= 0; --i) st[i] = st[i + 1] * s[i + 1];
  return st;
}

void reshape_op(KernelContext& ctx) {
  const Tensor& X = ctx.input(0);
  std::vector<int64_t> want = host_int64s(ctx, 1);
  bool allowzero = ctx.node().attr_i("allowzero", 0) != 0;
  Shape out(want.size());
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < want.size(); ++i) {
    int64_t d = want[i];
    if (d == 0 && !allowzero) {
      GR_CHECK(static_cast<int>(i) < X.rank(), "Reshape: 0 at position " << i << " but the input has rank " << X.rank());
      d = X.dim(static_cast<int>(i));
    }
    if (d == -1) {
      GR_CHECK(infer < 0, "Reshape: more than one -1 in shape");
      infer = static_cast<int>(i);
      out[i] = 1;
      continue;
    }
    GR_CHECK(d >= 0, "Reshape: invalid dimension " << d);
    out[i] = d;
    known *= d;
  }
  if (infer >= 0) {
    GR_CHECK(known > 0 && X.numel() % known == 0,
             "Reshape: cannot reshape " << shape_str(X.shape()) << " with " << shape_str(want));
    out[infer] = X.numel() / known;
  }
  GR_CHECK(shape_numel(out) == X.numel(), "Reshape: cannot reshape " << shape_str(X.shape()) << " to " << shape_str(out));
  Tensor& Y = ctx.output(0, out, X.dtype());
  copy_device(ctx, X, Y);
}

void flatten_op(KernelContext& ctx) {
  const Tensor& X = ctx.input(0);
  int64_t axis = ctx.node().attr_i("axis", 1);
  if (axis < 0) axis += X.rank();
  GR_CHECK(axis >= 0 && axis <= X.rank(), "Flatten: axis out of range for rank " << X.rank());
  int64_t outer = 1;
  for (int i = 0; i < axis; ++i) outer *= X.dim(i);
  Tensor& Y = ctx.output(0, {outer, outer ? X.numel() / outer : 0}, X.dtype());
  copy_device(ctx, X, Y);
}

void transpose_op(KernelContext& ctx) {
  const Tensor& X = ctx.input(0);
  std::vector<int64_t> perm = ctx.node().attr_ints("perm");
  if (perm.empty())
    for (int i = X.rank() - 1; i >= 0; --i) perm.push_back(i);
  GR_CHECK(static_cast<int>(perm.size()) == X.rank(), "Transpose: perm has " << perm.size() << " entries for rank " << X.rank());
  std::vector<bool> used(X.rank(), false);
  Shape out;
  std::vector<int64_t> in_st = row_major_strides(X.shape()), st;
  for (int64_t p : perm) {
    GR_CHECK(p >= 0 && p < X.rank() && !used[p], "Transpose: perm is not a permutation");
    used[p] = true;
    out.push_back(X.dim(static_cast<int>(p)));
    st.push_back(in_st[p]);
  }
  Tensor& Y = ctx.output(0, out, X.dtype());
  strided_copy(ctx, X, Y, st, 0);
}

// Writes host values into device memory: small ones as a kernel parameter (no wait, no host buffer that
// must outlive the call); larger ones from pageable memory, which is staged before the call returns.
void write_host(KernelContext& ctx, const void* src, size_t bytes, Tensor& Y) {
  if (bytes <= kSmallCopyBytes)
    copy_small_to_device(Y.raw(), src, bytes, stream_of(ctx));
  else
    GR_CUDA_CHECK(cudaMemcpyAsync(Y.raw(), src, bytes, cudaMemcpyHostToDevice, stream_of(ctx)));
}

void shape_op(KernelContext& ctx) {
  const Tensor& X = ctx.input(0);
  int64_t r = X.rank();
  int64_t start = ctx.node().attr_i("start", 0), end = ctx.node().attr_i("end", r);
  if (start < 0) start += r;
  if (end < 0) end += r;
  start = std::min(std::max<int64_t>(start, 0), r);
  end = std::min(std::max<int64_t>(end, 0), r);
  std::vector<int64_t> dims;
  for (int64_t i = start; i < end; ++i) dims.push_back(X.dim(static_cast<int>(i)));
  Tensor& Y = ctx.output(0, {static_cast<int64_t>(dims.size())}, DType::I64);
  write_host(ctx, dims.data(), dims.size() * sizeof(int64_t), Y);
}

void constant_op(KernelContext& ctx) {
  const Node& n = ctx.node();
  Tensor value;
  if (const Attribute* a = n.attr("value")) {
    value = a->t;
  } else if (const Attribute* a = n.attr("value_float")) {
    value = Tensor::scalar<float>(a->f);
  } else if (const Attribute* a = n.attr("value_floats")) {
    value = Tensor::from_vector<float>({static_cast<int64_t>(a->floats.size())}, a->floats);
  } else if (const Attribute* a = n.attr("value_int")) {
    value = Tensor::scalar<int64_t>(a->i);
  } else if (const Attribute* a = n.attr("value_ints")) {
    value = Tensor::from_vector<int64_t>({static_cast<int64_t>(a->ints.size())}, a->ints);
  } else {
    GR_FAIL("Constant without a value attribute");
  }
  GR_CHECK(value.defined() && value.device().is_cpu(), "Constant: value must be a host tensor");
  Tensor& Y = ctx.output(0, value.shape(), value.dtype());
  write_host(ctx, value.raw(), value.nbytes(), Y);
}

template <class U, class I>
__global__ void gather_kernel(const U* x, const I* idx, U* y, int64_t n, int64_t nidx, int64_t axis_dim, int64_t inner) {
  GR_GRID_STRIDE(i, n) {
    int64_t in_i = i % inner;
    int64_t j = (i / inner) % nidx;
    int64_t outer = i / (inner * nidx);
    int64_t k = static_cast<int64_t>(idx[j]);
    if (k < 0) k += axis_dim;
    // Out-of-range indices read as zero (the device cannot raise; the CPU kernel reports them).
    y[i] = (k >= 0 && k < axis_dim) ? x[(outer * axis_dim + k) * inner + in_i] : U(0);
  }
}

void gather_op(KernelContext& ctx) {
  const Tensor& X = ctx.input(0);
  const Tensor& I = ctx.input(1);
  int64_t axis = normalize_axis(ctx.node().attr_i("axis", 0), X.rank(), "Gather axis");
  GR_CHECK(I.dtype() == DType::I64 || I.dtype() == DType::I32, "Gather indices must be i64 or i32");
  Shape out;
  for (int i = 0; i < axis; ++i) out.push_back(X.dim(i));
  for (int64_t d : I.shape()) out.push_back(d);
  for (int i = static_cast<int>(axis) + 1; i < X.rank(); ++i) out.push_back(X.dim(i));
  Tensor& Y = ctx.output(0, out, X.dtype());
  int64_t n = Y.numel();
  if (n == 0) return;
  int64_t inner = 1;
  for (int i = static_cast<int>(axis) + 1; i < X.rank(); ++i) inner *= X.dim(i);
  int64_t axis_dim = X.dim(static_cast<int>(axis));
  dispatch_width(X.dtype(), [&](auto tag) {
    using U = decltype(tag);
    if (I.dtype() == DType::I64)
      gather_kernel<U, int64_t><<<grid_for(n), kThreads, 0, stream_of(ctx)>>>(dptr<U>(X), dptr<int64_t>(I), dptr<U>(Y), n, I.numel(), axis_dim, inner);
    else
      gather_kernel<U, int32_t><<<grid_for(n), kThreads, 0, stream_of(ctx)>>>(dptr<U>(X), dptr<int32_t>(I), dptr<U>(Y), n, I.numel(), axis_dim, inner);
  });
  GR_LAUNCH_CHECK("gather");
}

void concat_op(KernelContext& ctx) {
  GR_CHECK(ctx.num_inputs() >= 1, "Concat needs inputs");
  const Tensor& A = ctx.input(0);
  int64_t axis = normalize_axis(ctx.node().attr_i("axis", 0), A.rank(), "Concat axis");
  Shape out = A.shape();
  out[axis] = 0;
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    const Tensor& X = ctx.input(i);
    GR_CHECK(X.dtype() == A.dtype() && X.rank() == A.rank(), "Concat inputs differ in type or rank");
    for (int d = 0; d < A.rank(); ++d)
      GR_CHECK(d == axis || X.dim(d) == A.dim(d), "Concat: input " << i << " has shape " << shape_str(X.shape())
                                                                   << ", input 0 " << shape_str(A.shape()));
    out[axis] += X.dim(static_cast<int>(axis));
  }
  Tensor& Y = ctx.output(0, out, A.dtype());
  if (Y.numel() == 0) return;
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= out[d];
  for (int d = static_cast<int>(axis) + 1; d < A.rank(); ++d) inner *= out[d];
  size_t es = dtype_size(A.dtype());
  size_t dpitch = static_cast<size_t>(out[axis] * inner) * es;
  int64_t offset = 0;
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    const Tensor& X = ctx.input(i);
    size_t width = static_cast<size_t>(X.dim(static_cast<int>(axis)) * inner) * es;
    if (width && outer)
      GR_CUDA_CHECK(cudaMemcpy2DAsync(static_cast<char*>(Y.raw()) + offset * inner * es, dpitch, X.raw(), width, width,
                                      static_cast<size_t>(outer), cudaMemcpyDeviceToDevice, stream_of(ctx)));
    offset += X.dim(static_cast<int>(axis));
  }
}

// ConstantOfShape where its output feeds device kernels (a gradient's zeros, torch's padding masks): the
// shape read on the host, the value's bytes written into every element.
template <class U>
__global__ void fill_kernel(U* y, U v, int64_t n) {
  GR_GRID_STRIDE(i, n) y[i] = v;
}
void constant_of_shape_op(KernelContext& ctx) {
  const Shape out = host_int64s(ctx, 0);
  for (int64_t d : out) GR_CHECK(d >= 0, "ConstantOfShape: negative dimension in " << shape_str(out));
  Tensor v = Tensor::scalar<float>(0.f);
  if (const Attribute* a = ctx.node().attr("value")) {
    GR_CHECK(a->kind == Attribute::Kind::Tensor && a->t.numel() == 1, "ConstantOfShape: 'value' must be a one-element tensor");
    v = a->t;
  }
  Tensor& Y = ctx.output(0, out, v.dtype());
  const int64_t n = Y.numel();
  if (n == 0) return;
  dispatch_width(v.dtype(), [&](auto tag) {
    using U = decltype(tag);
    U bits;
    std::memcpy(&bits, v.raw(), sizeof(U));
    fill_kernel<U><<<grid_for(n), kThreads, 0, stream_of(ctx)>>>(dptr<U>(Y), bits, n);
  });
  GR_LAUNCH_CHECK("constant_of_shape");
}

// Split: Concat backwards, one 2-D copy per output. The sizes as the CPU's split_kernel takes them: an
// attribute before opset 13, an optional input since, else equal parts.
void split_op(KernelContext& ctx) {
  const Tensor& X = ctx.input(0);
  const int axis = static_cast<int>(normalize_axis(ctx.node().attr_i("axis", 0), X.rank(), "Split axis"));
  const int n = ctx.num_outputs();
  std::vector<int64_t> split;
  if (ctx.opset() < 13) split = ctx.node().attr_ints("split");
  else if (ctx.has_input(1)) split = host_int64s(ctx, 1);
  const int64_t dim = X.dim(axis);
  if (split.empty()) {
    GR_CHECK(n > 0 && dim % n == 0, "Split: axis " << axis << " of shape " << shape_str(X.shape())
                                                   << " cannot be split into " << n << " equal parts");
    split.assign(static_cast<size_t>(n), dim / n);
  }
  GR_CHECK(static_cast<int>(split.size()) == n, "Split: " << split.size() << " split sizes for " << n << " outputs");
  int64_t total = 0;
  for (int64_t v : split) {
    GR_CHECK(v >= 0, "Split: negative size " << v);
    total += v;
  }
  GR_CHECK(total == dim, "Split: sizes " << shape_str(split) << " do not add up to " << dim << " (axis " << axis << " of "
                                         << shape_str(X.shape()) << ")");
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= X.dim(d);
  for (int d = axis + 1; d < X.rank(); ++d) inner *= X.dim(d);
  const size_t es = dtype_size(X.dtype()), spitch = static_cast<size_t>(dim * inner) * es;
  int64_t offset = 0;
  for (int i = 0; i < n; ++i) {
    Shape s = X.shape();
    s[axis] = split[i];
    Tensor& Y = ctx.output(i, s, X.dtype());
    const size_t width = static_cast<size_t>(split[i] * inner) * es;
    if (width && outer)
      GR_CUDA_CHECK(cudaMemcpy2DAsync(Y.raw(), width, static_cast<const char*>(X.raw()) + offset * inner * es, spitch,
                                      width, static_cast<size_t>(outer), cudaMemcpyDeviceToDevice, stream_of(ctx)));
    offset += split[i];
  }
}

// Tile: Y's coordinate c reads X at c mod X's shape.
struct TileGeom {
  int rank = 0;
  int64_t out[kMaxRank], in[kMaxRank], in_strides[kMaxRank];
};
template <class U>
__global__ void tile_kernel(const U* x, U* y, TileGeom g, int64_t n) {
  GR_GRID_STRIDE(i, n) {
    int64_t rest = i, off = 0;
    for (int d = g.rank - 1; d >= 0; --d) {
      const int64_t c = rest % g.out[d];
      rest /= g.out[d];
      off += (c % g.in[d]) * g.in_strides[d];
    }
    y[i] = x[off];
  }
}
void tile_op(KernelContext& ctx) {
  const Tensor& X = ctx.input(0);
  const std::vector<int64_t> rep = host_int64s(ctx, 1);
  GR_CHECK(static_cast<int>(rep.size()) == X.rank(), "Tile: " << rep.size() << " repeats for input shape "
                                                              << shape_str(X.shape()));
  GR_CHECK(X.rank() <= kMaxRank, "Tile: rank " << X.rank() << " exceeds " << kMaxRank << " on CUDA");
  TileGeom g;
  g.rank = X.rank();
  Shape out(static_cast<size_t>(X.rank()));
  const std::vector<int64_t> st = row_major_strides(X.shape());
  for (int d = 0; d < X.rank(); ++d) {
    GR_CHECK(rep[d] >= 0, "Tile: negative repeat " << rep[d]);
    out[d] = X.dim(d) * rep[d];
    g.out[d] = out[d];
    g.in[d] = X.dim(d);
    g.in_strides[d] = st[d];
  }
  Tensor& Y = ctx.output(0, out, X.dtype());
  const int64_t n = Y.numel();
  if (n == 0) return;
  dispatch_width(X.dtype(), [&](auto tag) {
    using U = decltype(tag);
    tile_kernel<U><<<grid_for(n), kThreads, 0, stream_of(ctx)>>>(dptr<U>(X), dptr<U>(Y), g, n);
  });
  GR_LAUNCH_CHECK("tile");
}

// DepthToSpace / SpaceToDepth: one strided copy with Y seen as the transposed 6-D view
// (runtime/kernels/depth_space.h, shared with the CPU).
void depth_space_op(KernelContext& ctx, bool to_space) {
  const Tensor& X = ctx.input(0);
  const DepthSpaceCopy c = depth_space_copy(ctx.node(), X.shape(), to_space);
  Tensor& Y = ctx.output(0, c.out, X.dtype());
  strided_copy(ctx, X, Y, c.strides, 0, &c.view);
}
void depth_to_space_op(KernelContext& ctx) { depth_space_op(ctx, true); }
void space_to_depth_op(KernelContext& ctx) { depth_space_op(ctx, false); }

// Axes of Unsqueeze/Squeeze: an attribute before opset 13, an optional input since.
std::vector<int64_t> axes_of(KernelContext& ctx, bool* given) {
  if (ctx.opset() >= 13) {
    *given = ctx.has_input(1);
    return *given ? host_int64s(ctx, 1) : std::vector<int64_t>{};
  }
  *given = ctx.node().has_attr("axes");
  return ctx.node().attr_ints("axes");
}

void unsqueeze_op(KernelContext& ctx) {
  const Tensor& X = ctx.input(0);
  bool given;
  std::vector<int64_t> axes = axes_of(ctx, &given);
  GR_CHECK(given, "Unsqueeze needs axes");
  int64_t r = X.rank() + static_cast<int64_t>(axes.size());
  std::vector<bool> ins(r, false);
  for (int64_t a : axes) {
    a = normalize_axis(a, r, "Unsqueeze axis");
    GR_CHECK(!ins[a], "Unsqueeze: axis " << a << " given twice");
    ins[a] = true;
  }
  Shape out;
  int k = 0;
  for (int64_t d = 0; d < r; ++d) out.push_back(ins[d] ? 1 : X.dim(k++));
  Tensor& Y = ctx.output(0, out, X.dtype());
  copy_device(ctx, X, Y);
}

void squeeze_op(KernelContext& ctx) {
  const Tensor& X = ctx.input(0);
  bool given;
  std::vector<int64_t> axes = axes_of(ctx, &given);
  std::vector<bool> drop(X.rank(), false);
  if (!given || axes.empty()) {
    for (int d = 0; d < X.rank(); ++d) drop[d] = X.dim(d) == 1;
  } else {
    for (int64_t a : axes) {
      a = normalize_axis(a, X.rank(), "Squeeze axis");
      GR_CHECK(X.dim(static_cast<int>(a)) == 1, "Squeeze: dimension " << a << " of " << shape_str(X.shape()) << " is not 1");
      drop[a] = true;
    }
  }
  Shape out;
  for (int d = 0; d < X.rank(); ++d)
    if (!drop[d]) out.push_back(X.dim(d));
  Tensor& Y = ctx.output(0, out, X.dtype());
  copy_device(ctx, X, Y);
}

// Slice's starts, ends, axes and steps (inputs from `first` on; attributes before opset 10), laid out by the
// index function the CPU kernels use.
SliceLayout slice_layout_of(KernelContext& ctx, const Shape& in, int first, const char* what) {
  std::vector<int64_t> starts, ends, axes, steps;
  if (ctx.opset() >= 10 || first != 1) {
    starts = host_int64s(ctx, first);
    ends = host_int64s(ctx, first + 1);
    if (ctx.has_input(first + 2)) axes = host_int64s(ctx, first + 2);
    if (ctx.has_input(first + 3)) steps = host_int64s(ctx, first + 3);
  } else {
    starts = ctx.node().attr_ints("starts");
    ends = ctx.node().attr_ints("ends");
    axes = ctx.node().attr_ints("axes");
  }
  return slice_layout(in, starts, ends, axes, steps, what);
}

void slice_op(KernelContext& ctx) {
  const Tensor& X = ctx.input(0);
  const SliceLayout L = slice_layout_of(ctx, X.shape(), 1, "Slice");
  Tensor& Y = ctx.output(0, L.out, X.dtype());
  strided_copy(ctx, X, Y, L.strides, L.base);
}

template <class U>
__global__ void strided_scatter_kernel(const U* y, U* x, IndexMap m, int64_t base, int64_t n) {
  GR_GRID_STRIDE(i, n) {
    int64_t off[3];
    map_offsets(m, i, 1, off);
    x[base + off[0]] = y[i];
  }
}

// SliceGrad(dY, shape, starts, ends[, axes[, steps]]): zeros of `shape`, then a thread per element of dY writes
// it where the Slice took it (distinct elements: no two threads write one place).
void slice_grad_op(KernelContext& ctx) {
  const Tensor& dY = ctx.input(0);
  const Shape xs = host_shape(ctx, 1, "SliceGrad");
  const SliceLayout L = slice_layout_of(ctx, xs, 2, "SliceGrad");
  GR_CHECK(dY.shape() == L.out, "SliceGrad: dY has shape " << shape_str(dY.shape()) << ", the slice of "
                                                           << shape_str(xs) << " has " << shape_str(L.out));
  GR_CHECK(dY.rank() <= kMaxRank, "SliceGrad: rank " << dY.rank() << " exceeds " << kMaxRank << " on CUDA");
  Tensor& dX = ctx.output(0, xs, dY.dtype());
  cudaStream_t st = stream_of(ctx);
  if (dX.nbytes()) GR_CUDA_CHECK(cudaMemsetAsync(dX.raw(), 0, dX.nbytes(), st));
  const int64_t n = dY.numel();
  if (n == 0) return;
  IndexMap m;
  m.rank = dY.rank();
  for (int k = 0; k < 3; ++k)
    for (int d = 0; d < kMaxRank; ++d) m.strides[k][d] = 0;
  for (int d = 0; d < m.rank; ++d) {
    m.dims[d] = L.out[d];
    m.strides[0][d] = L.strides[d];
  }
  dispatch_width(dY.dtype(), [&](auto tag) {
    using U = decltype(tag);
    strided_scatter_kernel<U><<<grid_for(n), kThreads, 0, st>>>(dptr<U>(dY), dptr<U>(dX), m, L.base, n);
  });
  GR_LAUNCH_CHECK("slice_grad");
}

// ---- Pad (constant, edge, reflect; negative pads crop) ----
struct PadGeom {
  int rank = 0;
  int mode = 0;  // 0 constant, 1 edge, 2 reflect
  int64_t out[kMaxRank], in[kMaxRank], before[kMaxRank], in_stride[kMaxRank];
};

template <class T>
__global__ void pad_kernel(const T* x, T* y, const T* value_p, T value, PadGeom g, int64_t n) {
  T fill = value_p ? *value_p : value;
  GR_GRID_STRIDE(i, n) {
    int64_t rest = i, off = 0;
    bool constant = false;
    for (int d = g.rank - 1; d >= 0; --d) {
      int64_t c = rest % g.out[d] - g.before[d];
      rest /= g.out[d];
      int64_t dim = g.in[d];
      if (c < 0 || c >= dim) {
        if (g.mode == 0) { constant = true; break; }
        if (g.mode == 1) {
          c = c < 0 ? 0 : dim - 1;
        } else if (dim == 1) {
          c = 0;
        } else {
          int64_t period = 2 * (dim - 1);
          c = ((c % period) + period) % period;
          if (c >= dim) c = period - c;
        }
      }
      off += c * g.in_stride[d];
    }
    y[i] = constant ? fill : x[off];
  }
}

void pad_op(KernelContext& ctx) {
  const Tensor& X = ctx.input(0);
  const int r = X.rank();
  GR_CHECK(r <= kMaxRank, "Pad: rank " << r << " exceeds " << kMaxRank << " on CUDA");
  std::string mode = ctx.node().attr_s("mode", "constant");
  GR_CHECK(mode == "constant" || mode == "reflect" || mode == "edge", "Pad: unknown mode '" << mode << "' (constant, reflect, edge)");
  std::vector<int64_t> pads;
  double value = 0;
  const Tensor* value_tensor = nullptr;
  if (ctx.opset() < 11) {
    pads = ctx.node().attr_ints(ctx.node().has_attr("pads") ? "pads" : "paddings");
    value = ctx.node().attr_f("value", 0.f);
  } else {
    pads = host_int64s(ctx, 1);
    if (ctx.has_input(2)) {
      value_tensor = &ctx.input(2);
      GR_CHECK(value_tensor->numel() == 1 && value_tensor->dtype() == X.dtype(),
               "Pad: constant_value must be a scalar of the input's type");
    }
  }
  std::vector<int64_t> full(2 * r, 0);
  if (ctx.opset() >= 18 && ctx.has_input(3)) {
    std::vector<int64_t> axes = host_int64s(ctx, 3);
    GR_CHECK(pads.size() == 2 * axes.size(), "Pad: " << pads.size() << " pads for " << axes.size() << " axes");
    for (size_t i = 0; i < axes.size(); ++i) {
      int64_t k = normalize_axis(axes[i], r, "Pad axis");
      full[k] = pads[i];
      full[k + r] = pads[i + axes.size()];
    }
  } else {
    GR_CHECK(static_cast<int>(pads.size()) == 2 * r, "Pad: " << pads.size() << " pads for input shape " << shape_str(X.shape()));
    full = pads;
  }
  PadGeom g;
  g.rank = r;
  g.mode = mode == "constant" ? 0 : mode == "edge" ? 1 : 2;
  std::vector<int64_t> st = row_major_strides(X.shape());
  Shape out(r);
  for (int k = 0; k < r; ++k) {
    out[k] = X.dim(k) + full[k] + full[k + r];
    GR_CHECK(out[k] >= 0, "Pad: pads " << shape_str(full) << " remove more than axis " << k << " of " << shape_str(X.shape()));
    if (g.mode != 0 && out[k] > 0) GR_CHECK(X.dim(k) > 0, "Pad: mode '" << mode << "' cannot pad the empty axis " << k);
    g.out[k] = out[k];
    g.in[k] = X.dim(k);
    g.before[k] = full[k];
    g.in_stride[k] = st[k];
  }
  Tensor& Y = ctx.output(0, out, X.dtype());
  int64_t n = Y.numel();
  if (n == 0) return;
  dispatch_any(X.dtype(), [&](auto tag) {
    using T = decltype(tag);
    pad_kernel<T><<<grid_for(n), kThreads, 0, stream_of(ctx)>>>(dptr<T>(X), dptr<T>(Y), value_tensor ? dptr<T>(*value_tensor) : nullptr,
                                                                static_cast<T>(value), g, n);
  });
  GR_LAUNCH_CHECK("pad");
}

// ---- GatherElements, ScatterElements, GatherElementsGrad: indices of data's rank, one axis indexed ----
// Every kernel walks its output and reads (never scatters), so duplicate indices need no atomics and
// the result is the CPU's: ScatterElements applies the updates hitting one element in index order.
struct ElementsShape {
  int rank = 0, axis = 0;
  int64_t ind_dims[kMaxRank];   // indices' (= updates', dY's) dims
  int64_t data_dims[kMaxRank];  // data's (= output's, dX's) dims
};

ElementsShape elements_shape(const Shape& data, const Tensor& ind, int64_t axis_attr, const char* what) {
  GR_CHECK(ind.dtype() == DType::I64 || ind.dtype() == DType::I32, what << ": indices must be i64 or i32");
  GR_CHECK(ind.rank() == static_cast<int>(data.size()) && ind.rank() >= 1 && ind.rank() <= kMaxRank,
           what << ": indices " << shape_str(ind.shape()) << " and data " << shape_str(data)
                << " must have the same rank (1 to " << kMaxRank << ")");
  ElementsShape e;
  e.rank = ind.rank();
  e.axis = static_cast<int>(normalize_axis(axis_attr, e.rank, what));
  for (int k = 0; k < e.rank; ++k) {
    e.ind_dims[k] = ind.dim(k);
    e.data_dims[k] = data[k];
    GR_CHECK(k == e.axis || ind.dim(k) <= data[k], what << ": indices " << shape_str(ind.shape()) << " exceed data "
                                                        << shape_str(data) << " on axis " << k);
  }
  return e;
}

// The flat index into the indices tensor of data element `i`'s coordinates with the axis coordinate
// replaced by j; -1 when the element lies outside the indices' extent.
__device__ int64_t elements_source(const ElementsShape& e, int64_t i, int64_t j, int64_t* axis_coord) {
  int64_t src = 0, stride = 1;
  for (int k = e.rank - 1; k >= 0; --k) {
    const int64_t c = i % e.data_dims[k];
    i /= e.data_dims[k];
    if (k == e.axis) *axis_coord = c;
    else if (c >= e.ind_dims[k]) return -1;
    src += (k == e.axis ? j : c) * stride;
    stride *= e.ind_dims[k];
  }
  return src;
}

template <class I>
__device__ int64_t element_index(const I* idx, int64_t t, int64_t dim) {
  int64_t k = static_cast<int64_t>(idx[t]);
  return k < 0 ? k + dim : k;
}

template <class U, class I>
__global__ void gather_elements_kernel(const U* x, const I* idx, U* y, ElementsShape e, int64_t n) {
  GR_GRID_STRIDE(i, n) {
    int64_t off = 0, stride = 1, r = i;
    bool ok = true;
    for (int k = e.rank - 1; k >= 0; --k) {
      int64_t c = r % e.ind_dims[k];
      r /= e.ind_dims[k];
      if (k == e.axis) {
        c = element_index(idx, i, e.data_dims[k]);
        ok = ok && c >= 0 && c < e.data_dims[k];
      }
      off += c * stride;
      stride *= e.data_dims[k];
    }
    // Out-of-range indices read as zero (the device cannot raise; the CPU kernel reports them).
    y[i] = ok ? x[off] : U(0);
  }
}

template <class F>
void dispatch_index(const Tensor& ind, F f) {
  if (ind.dtype() == DType::I64) f(int64_t{});
  else f(int32_t{});
}

void gather_elements_op(KernelContext& ctx) {
  const Tensor &X = ctx.input(0), &ind = ctx.input(1);
  const ElementsShape e = elements_shape(X.shape(), ind, ctx.node().attr_i("axis", 0), "GatherElements");
  Tensor& Y = ctx.output(0, ind.shape(), X.dtype());
  const int64_t n = Y.numel();
  if (n == 0) return;
  GR_CHECK(X.numel() > 0, "GatherElements: indices into an empty axis");
  dispatch_width(X.dtype(), [&](auto tag) {
    using U = decltype(tag);
    dispatch_index(ind, [&](auto itag) {
      using I = decltype(itag);
      gather_elements_kernel<U, I><<<grid_for(n), kThreads, 0, stream_of(ctx)>>>(dptr<U>(X), dptr<I>(ind), dptr<U>(Y), e, n);
    });
  });
  GR_LAUNCH_CHECK("gather_elements");
}

enum class ScatterReduction { None, Add, Mul };

// Output element i: the data's value (zero for GatherElementsGrad), then every update aimed at it, in
// the order of the indices along the axis.
template <class T, class I>
__global__ void scatter_elements_kernel(const T* x, const I* idx, const T* upd, T* y, ElementsShape e, int64_t n,
                                        ScatterReduction red) {
  GR_GRID_STRIDE(i, n) {
    T v = x ? x[i] : T(0);
    int64_t c = 0;
    if (elements_source(e, i, 0, &c) >= 0)
      for (int64_t j = 0; j < e.ind_dims[e.axis]; ++j) {
        const int64_t t = elements_source(e, i, j, &c);
        if (element_index(idx, t, e.data_dims[e.axis]) != c) continue;
        v = red == ScatterReduction::Add ? static_cast<T>(v + upd[t]) : red == ScatterReduction::Mul ? static_cast<T>(v * upd[t]) : upd[t];
      }
    y[i] = v;
  }
}

void launch_scatter_elements(KernelContext& ctx, const Tensor* X, const Tensor& ind, const Tensor& upd, Tensor& Y,
                             const ElementsShape& e, ScatterReduction red) {
  const int64_t n = Y.numel();
  if (n == 0) return;
  dispatch_any(Y.dtype(), ctx.node().op_type.c_str(), [&](auto tag) {
    using T = decltype(tag);
    dispatch_index(ind, [&](auto itag) {
      using I = decltype(itag);
      scatter_elements_kernel<T, I><<<grid_for(n), kThreads, 0, stream_of(ctx)>>>(
          X ? dptr<T>(*X) : nullptr, dptr<I>(ind), dptr<T>(upd), dptr<T>(Y), e, n, red);
    });
  });
  GR_LAUNCH_CHECK("scatter_elements");
}

void scatter_elements_op(KernelContext& ctx) {
  const char* what = "ScatterElements";
  const Tensor &X = ctx.input(0), &ind = ctx.input(1), &upd = ctx.input(2);
  const ElementsShape e = elements_shape(X.shape(), ind, ctx.node().attr_i("axis", 0), what);
  GR_CHECK(upd.shape() == ind.shape() && upd.dtype() == X.dtype(),
           what << ": updates " << dtype_name(upd.dtype()) << shape_str(upd.shape()) << " must match indices "
                << shape_str(ind.shape()) << " in shape and data (" << dtype_name(X.dtype()) << ") in element type");
  const std::string r = ctx.node().attr_s("reduction", "none");
  GR_CHECK(r == "none" || r == "add" || r == "mul", what << ": unknown reduction '" << r << "' (none, add, mul)");
  const ScatterReduction red = r == "add" ? ScatterReduction::Add : r == "mul" ? ScatterReduction::Mul : ScatterReduction::None;
  Tensor& Y = ctx.output(0, X.shape(), X.dtype());
  launch_scatter_elements(ctx, &X, ind, upd, Y, e, red);
}

// GatherElementsGrad(dY, indices, shape): zeros of `shape` with dY added at the gathered positions.
void gather_elements_grad_op(KernelContext& ctx) {
  const char* what = "GatherElementsGrad";
  const Tensor &dY = ctx.input(0), &ind = ctx.input(1);
  const Shape xs = host_shape(ctx, 2, what);
  GR_CHECK(dY.shape() == ind.shape(), what << ": dY " << shape_str(dY.shape()) << " and indices " << shape_str(ind.shape())
                                           << " differ in shape");
  GR_CHECK(dY.dtype() == DType::F32 || dY.dtype() == DType::F64, what << ": dY must be f32 or f64, got " << dtype_name(dY.dtype()));
  const ElementsShape e = elements_shape(xs, ind, ctx.node().attr_i("axis", 0), what);
  Tensor& dX = ctx.output(0, xs, dY.dtype());
  launch_scatter_elements(ctx, nullptr, ind, dY, dX, e, ScatterReduction::Add);
}

// ScatterND(data, indices [..., m], updates): the output is data with each index tuple's slice (the
// data's trailing dims after m) combined with its updates. One thread per slice element walks the tuples
// in order, so duplicate tuples apply as on the CPU (deterministic, no atomics); out-of-range tuples are
// skipped (the device cannot raise; the CPU kernel reports them).
struct NdTuples {
  int m = 0;
  int64_t dims[kMaxRank];     // data's leading m dims
  int64_t strides[kMaxRank];  // their element strides
  int64_t tuples = 0, slice = 1;
};

template <class T, class I>
__global__ void scatter_nd_kernel(const I* idx, const T* upd, T* y, NdTuples t, ScatterReduction red) {
  GR_GRID_STRIDE(j, t.slice) {
    for (int64_t k = 0; k < t.tuples; ++k) {
      int64_t off = 0;
      bool ok = true;
      for (int a = 0; a < t.m; ++a) {
        const int64_t v = element_index(idx, k * t.m + a, t.dims[a]);
        ok = ok && v >= 0 && v < t.dims[a];
        off += v * t.strides[a];
      }
      if (!ok) continue;
      T& d = y[off + j];
      const T u = upd[k * t.slice + j];
      d = red == ScatterReduction::Add ? static_cast<T>(d + u) : red == ScatterReduction::Mul ? static_cast<T>(d * u) : u;
    }
  }
}

void scatter_nd_op(KernelContext& ctx) {
  const char* what = "ScatterND";
  const Tensor &X = ctx.input(0), &ind = ctx.input(1), &upd = ctx.input(2);
  GR_CHECK(ind.dtype() == DType::I64 || ind.dtype() == DType::I32, what << ": indices must be i64 or i32");
  GR_CHECK(ind.rank() >= 1, what << ": indices must have rank >= 1");
  NdTuples t;
  t.m = static_cast<int>(ind.dim(ind.rank() - 1));
  GR_CHECK(t.m >= 1 && t.m <= X.rank() && t.m <= kMaxRank,
           what << ": index tuples of length " << t.m << " do not fit data " << shape_str(X.shape()));
  Shape want(ind.shape().begin(), ind.shape().end() - 1);
  want.insert(want.end(), X.shape().begin() + t.m, X.shape().end());
  GR_CHECK(upd.shape() == want && upd.dtype() == X.dtype(), what << ": updates " << dtype_name(upd.dtype())
                                                                 << shape_str(upd.shape()) << ", expected "
                                                                 << dtype_name(X.dtype()) << shape_str(want));
  const std::string r = ctx.node().attr_s("reduction", "none");
  GR_CHECK(r == "none" || r == "add" || r == "mul", what << ": unknown reduction '" << r << "' (none, add, mul)");
  const ScatterReduction red = r == "add" ? ScatterReduction::Add : r == "mul" ? ScatterReduction::Mul : ScatterReduction::None;
  for (int a = t.m; a < X.rank(); ++a) t.slice *= X.dim(a);
  int64_t stride = t.slice;
  for (int a = t.m - 1; a >= 0; --a) {
    t.dims[a] = X.dim(a);
    t.strides[a] = stride;
    stride *= X.dim(a);
  }
  t.tuples = ind.numel() / t.m;
  Tensor& Y = ctx.output(0, X.shape(), X.dtype());
  cudaStream_t st = stream_of(ctx);
  if (Y.numel() == 0) return;
  GR_CUDA_CHECK(cudaMemcpyAsync(Y.raw(), X.raw(), X.nbytes(), cudaMemcpyDeviceToDevice, st));
  if (t.tuples == 0 || t.slice == 0) return;
  dispatch_any(X.dtype(), what, [&](auto tag) {
    using T = decltype(tag);
    dispatch_index(ind, [&](auto itag) {
      using I = decltype(itag);
      scatter_nd_kernel<T, I><<<grid_for(t.slice), kThreads, 0, st>>>(dptr<I>(ind), dptr<T>(upd), dptr<T>(Y), t, red);
    });
  });
  GR_LAUNCH_CHECK("scatter_nd");
}

}  // namespace

GR_REGISTER_OPS(shape) {
  ops.op("Pad").cuda(locked<pad_op>);
  ops.op("Reshape").cuda(locked<reshape_op>);
  ops.op("Flatten").cuda(locked<flatten_op>);
  ops.op("Transpose").cuda(locked<transpose_op>);
  ops.op("Shape").cuda(locked<shape_op>);
  ops.op("Constant").cuda(locked<constant_op>);
  ops.op("Gather").cuda(locked<gather_op>);
  ops.op("Concat").cuda(locked<concat_op>);
  ops.op("ConstantOfShape").cuda(locked<constant_of_shape_op>);
  ops.op("Split").cuda(locked<split_op>);
  ops.op("Tile").cuda(locked<tile_op>);
  ops.op("DepthToSpace").cuda(locked<depth_to_space_op>);
  ops.op("SpaceToDepth").cuda(locked<space_to_depth_op>);
  ops.op("Unsqueeze").cuda(locked<unsqueeze_op>);
  ops.op("Squeeze").cuda(locked<squeeze_op>);
  ops.op("Slice").cuda(locked<slice_op>);
  ops.op(kGraphrunDomain, "SliceGrad").cuda(locked<slice_grad_op>);
  ops.op("GatherElements").cuda(locked<gather_elements_op>);
  ops.op("ScatterElements").cuda(locked<scatter_elements_op>);
  ops.op("Scatter").cuda(locked<scatter_elements_op>);
  ops.op("ScatterND").cuda(locked<scatter_nd_op>);
  ops.op(kGraphrunDomain, "GatherElementsGrad").cuda(locked<gather_elements_grad_op>);
}

}  // namespace graphrun::runtime::cuda

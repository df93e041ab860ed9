// Gradient rules of the spectral family, in standard ops. The DFT is linear: its adjoint is the transform the other
// way, unscaled (n times the inverse DFT; the inverse's adjoint is the forward DFT over n), applied to dY with the
// bins a onesided output dropped put back as zeros; a real input takes the real part, and dft_length's zero padding
// (or truncation) is undone by a Slice (or a Pad). STFT's signal gets that adjoint of each frame, times the window,
// added back where the frame was read (ScatterND with reduction add, over the frames' sample indices); its window
// gets the frames times the adjoint, summed over the batch, the frames and the real and imaginary parts.
// MelWeightMatrix depends on sizes and band edges that the floor to spectrogram bins makes piecewise constant: none.
#include "autodiff/rules/rules.h"

namespace graphrun::autodiff {
namespace {

// The static size of dimension `d` of `v`, or an Error naming the node and what needs it.
int64_t static_dim(GradContext& ctx, const std::string& v, int64_t d, const std::string& where, const char* what) {
  const ValueInfo t = ctx.type_of(v);
  GR_CHECK(t.has_shape && d < static_cast<int64_t>(t.shape.size()) && t.shape[static_cast<size_t>(d)].known(),
           where << ": the gradient needs the static " << what << " (" << t.str() << ")");
  return t.shape[static_cast<size_t>(d)].size;
}

int64_t constant_int(GradContext& ctx, const std::string& v, const std::string& where, const char* what) {
  const Tensor t = ctx.constant_value(v);
  GR_CHECK(t.defined() && t.numel() == 1 && (t.dtype() == DType::I64 || t.dtype() == DType::I32),
           where << ": the gradient needs " << what << " as a constant");
  return t.as_int64s()[0];
}

// The adjoint of a length-n forward DFT (inverse: of the inverse DFT) along `axis` of the complex `g` [..., 2] of
// rank r whose `bins` bins are the first of n.
std::string adjoint(GradContext& ctx, std::string g, int64_t r, int64_t axis, int64_t n, int64_t bins, bool inverse,
                    DType dt) {
  if (bins < n) {
    std::vector<int64_t> pads(static_cast<size_t>(2 * r), 0);
    pads[static_cast<size_t>(r + axis)] = n - bins;
    g = ctx.pad(g, pads);
  }
  const std::string z = ctx.op("DFT", {g}, {{"axis", Attribute::Int(axis)}, {"inverse", Attribute::Int(inverse ? 0 : 1)}});
  return ctx.op("Mul", {z, ctx.scalar(inverse ? 1.0 / static_cast<double>(n) : static_cast<double>(n), dt)});
}

void dft_grad(GradContext& ctx) {
  if (ctx.dy().empty() || !ctx.needs(0)) return;
  const Node& f = ctx.fwd();
  const std::string where = "node '" + f.name + "' (DFT)";
  const int64_t r = ctx.rank(ctx.in(0));
  GR_CHECK(r >= 2, where << ": the gradient needs the input's rank");
  int64_t axis = f.attr_i("axis", 1);
  if (axis < 0) axis += r;
  GR_CHECK(axis >= 0 && axis <= r - 2, where << ": axis " << f.attr_i("axis", 1) << " is out of range");
  const int64_t len = static_dim(ctx, ctx.in(0), axis, where, "length of the transformed axis");
  const int64_t c = static_dim(ctx, ctx.in(0), r - 1, where, "last dimension (real or complex)");
  const int64_t n = ctx.num_inputs() > 1 && !ctx.in(1).empty() ? constant_int(ctx, ctx.in(1), where, "dft_length") : len;
  const bool inverse = f.attr_i("inverse", 0) != 0, onesided = f.attr_i("onesided", 0) != 0;
  std::string z = adjoint(ctx, ctx.dy(), r, axis, n, onesided ? n / 2 + 1 : n, inverse, ctx.dtype(ctx.in(0)));
  if (c == 1) z = ctx.slice(z, {0}, {1}, {r - 1});
  if (n > len) {
    z = ctx.slice(z, {0}, {len}, {axis});
  } else if (n < len) {
    std::vector<int64_t> pads(static_cast<size_t>(2 * r), 0);
    pads[static_cast<size_t>(r + axis)] = len - n;
    z = ctx.pad(z, pads);
  }
  ctx.set_dx(0, z);
}

void stft_grad(GradContext& ctx) {
  const bool has_window = ctx.num_inputs() > 2 && !ctx.in(2).empty();
  if (ctx.dy().empty() || (!ctx.needs(0) && !(has_window && ctx.needs(2)))) return;
  const Node& f = ctx.fwd();
  const std::string where = "node '" + f.name + "' (STFT)";
  const std::string& x = ctx.in(0);
  GR_CHECK(ctx.rank(x) == 3, where << ": the gradient needs the signal's rank");
  const int64_t length = static_dim(ctx, x, 1, where, "signal length");
  const int64_t c = static_dim(ctx, x, 2, where, "last dimension of the signal (real or complex)");
  const int64_t step = constant_int(ctx, ctx.in(1), where, "frame_step");
  const int64_t n = has_window ? static_dim(ctx, ctx.in(2), 0, where, "window length")
                               : constant_int(ctx, ctx.in(3), where, "frame_length");
  GR_CHECK(step >= 1 && n >= 1 && n <= length, where << ": frame_step " << step << " and frames of " << n
                                                      << " samples do not fit a signal of " << length);
  const int64_t frames = (length - n) / step + 1;
  GR_CHECK(frames * n <= (int64_t(1) << 26), where << ": the gradient's " << frames << " x " << n
                                                   << " frame indices are too many");
  const DType dt = ctx.dtype(x);
  const bool onesided = f.attr_i("onesided", 1) != 0;
  std::string z = adjoint(ctx, ctx.dy(), 4, 2, n, onesided ? n / 2 + 1 : n, false, dt);  // [B, F, n, 2]
  if (c == 1) z = ctx.slice(z, {0}, {1}, {3});                                              // [B, F, n, c]
  // Sample index of each frame's element j: f * step + j, as [F, n].
  std::vector<int64_t> at(static_cast<size_t>(frames * n));
  for (int64_t fr = 0; fr < frames; ++fr)
    for (int64_t j = 0; j < n; ++j) at[static_cast<size_t>(fr * n + j)] = fr * step + j;
  const std::string window_col =
      has_window ? ctx.reshape(ctx.in(2), ctx.ints({n, 1})) : std::string();  // broadcasts over [B, F, n, c]
  if (ctx.needs(0)) {
    const std::string du = has_window ? ctx.op("Mul", {z, window_col}) : z;
    const std::string upd = ctx.transpose(du, {1, 2, 0, 3});  // [F, n, B, c]
    const std::string idx =
        ctx.op("Constant", {}, {{"value", Attribute::Tens(Tensor::from_vector<int64_t>({frames, n, 1}, at))}});
    const std::string base = ctx.zeros_like(ctx.transpose(x, {1, 0, 2}));  // [L, B, c]
    const std::string sum = ctx.op("ScatterND", {base, idx, upd}, {{"reduction", Attribute::Str("add")}});
    ctx.set_dx(0, ctx.transpose(sum, {1, 0, 2}));
  }
  if (has_window && ctx.needs(2)) {
    const std::string idx =
        ctx.op("Constant", {}, {{"value", Attribute::Tens(Tensor::from_vector<int64_t>({frames, n}, at))}});
    const std::string framed = ctx.op("Gather", {x, idx}, {{"axis", Attribute::Int(1)}});  // [B, F, n, c]
    const std::string prod = ctx.op("Mul", {framed, z});
    ctx.set_dx(2, ctx.reduce_sum(prod, {0, 1, 3}, false));
  }
}

}  // namespace

GR_REGISTER_OPS(spectral) {
  ops.op("DFT").gradient(dft_grad);
  ops.op("STFT").gradient(stft_grad);
  ops.op("MelWeightMatrix").no_gradient();
}

}  // namespace graphrun::autodiff

// Gradient rules of Gemm (transA/transB/alpha/beta, broadcast C) and MatMul (batched, broadcast, 1-D
// operands): matrix products of the output gradient with the other operand, transposed as needed.
#include "autodiff/rules/rules.h"

namespace graphrun::autodiff {

namespace {

// alpha * op(a) * op(b), op = transpose when the flag is set: a Gemm without C (opset >= 11).
std::string gemm2(GradContext& ctx, const std::string& a, const std::string& b, bool ta, bool tb, float alpha) {
  if (ctx.opset() >= 11) {
    std::map<std::string, Attribute> at;
    if (ta) at["transA"] = Attribute::Int(1);
    if (tb) at["transB"] = Attribute::Int(1);
    if (alpha != 1.f) at["alpha"] = Attribute::Float(alpha);
    return ctx.op("Gemm", {a, b}, at);
  }
  std::string r = ctx.op("MatMul", {ta ? ctx.transpose(a, {1, 0}) : a, tb ? ctx.transpose(b, {1, 0}) : b});
  if (alpha != 1.f) r = ctx.op("Mul", {r, ctx.scalar(alpha, ctx.dtype(a))});
  return r;
}

// Swaps the last two axes of a value of rank r >= 2.
std::string transpose_last2(GradContext& ctx, const std::string& v, int r) {
  std::vector<int64_t> perm;
  for (int i = 0; i < r; ++i) perm.push_back(i);
  std::swap(perm[r - 2], perm[r - 1]);
  return ctx.transpose(v, perm);
}

ValueInfo with_dim_inserted(const ValueInfo& v, int axis) {
  ValueInfo r = v;
  r.shape.insert(r.shape.begin() + (axis < 0 ? static_cast<int>(r.shape.size()) + 1 + axis : axis), Dim(1));
  return r;
}

}  // namespace

// Y = alpha * A' B' + beta * C with A' = transA ? A^T : A, B' = transB ? B^T : B.
void gemm_grad(GradContext& ctx) {
  const Node& n = ctx.fwd();
  const bool ta = n.attr_i("transA", 0) != 0, tb = n.attr_i("transB", 0) != 0;
  const float alpha = n.attr_f("alpha", 1.f), beta = n.attr_f("beta", 1.f);
  const std::string &a = ctx.in(0), &b = ctx.in(1), &dy = ctx.dy();
  if (ctx.needs(0)) {
    // dA' = alpha dY B'^T; dA = dA' or its transpose.
    if (!ta) ctx.set_dx(0, gemm2(ctx, dy, b, false, !tb, alpha));
    else ctx.set_dx(0, gemm2(ctx, b, dy, tb, true, alpha));
  }
  if (ctx.needs(1)) {
    // dB' = alpha A'^T dY; dB = dB' or its transpose.
    if (!tb) ctx.set_dx(1, gemm2(ctx, a, dy, !ta, false, alpha));
    else ctx.set_dx(1, gemm2(ctx, dy, a, true, ta, alpha));
  }
  if (n.has_input(2) && ctx.needs(2)) {
    std::string dc = ctx.reduce_to(dy, ctx.out(0), ctx.in(2));
    if (beta != 1.f) dc = ctx.op("Mul", {dc, ctx.scalar(beta, ctx.dtype(dy))});
    ctx.set_dx(2, dc);
  }
}

// Y = A @ B with numpy semantics: a 1-D A is a row [1,K], a 1-D B a column [K,1], the added axis then
// dropped; batch axes broadcast, so each gradient is summed back to its operand's shape.
void matmul_grad(GradContext& ctx) {
  const std::string &a = ctx.in(0), &b = ctx.in(1), &dy = ctx.dy();
  int ra = ctx.rank(a), rb = ctx.rank(b);
  Shape bs;
  if (rb == 2 && ra != 1 && ra != 2 && ctx.static_shape(b, bs) && ctx.opset() >= 11) {
    // A stack of rows times a weight matrix ([..., K] @ [K, N], A's rank maybe unknown): the weight's
    // gradient is one Gemm over the rows flattened, A's needs no batch sum.
    if (ctx.needs(0)) ctx.set_dx(0, ctx.op("MatMul", {dy, ctx.transpose(b, {1, 0})}));
    if (ctx.needs(1)) {
      std::string rows_a = ctx.reshape(a, ctx.ints({-1, bs[0]}));
      std::string rows_dy = ctx.reshape(dy, ctx.ints({-1, bs[1]}));
      ctx.set_dx(1, gemm2(ctx, rows_a, rows_dy, true, false, 1.f));
    }
    return;
  }
  GR_CHECK(ra >= 1 && rb >= 1, ctx.fwd().describe() << ": the MatMul gradient needs the ranks of both inputs");
  if (ra == 1 && rb == 1) {  // dot product: Y is a scalar
    if (ctx.needs(0)) ctx.set_dx(0, ctx.op("Mul", {dy, b}));
    if (ctx.needs(1)) ctx.set_dx(1, ctx.op("Mul", {dy, a}));
    return;
  }
  // Work on the 2-D+ views: A2 = [1,K] for 1-D A, B2 = [K,1] for 1-D B, dY2 with the dropped axis restored.
  std::string a2 = a, b2 = b, dy2 = dy;
  ValueInfo y2 = ctx.type_of(ctx.out(0));
  if (ra == 1) {
    a2 = ctx.unsqueeze(a, {0});
    dy2 = ctx.unsqueeze(dy2, {-2});
    if (y2.has_shape) y2 = with_dim_inserted(y2, -2);
  }
  if (rb == 1) {
    b2 = ctx.unsqueeze(b, {1});
    dy2 = ctx.unsqueeze(dy2, {-1});
    if (y2.has_shape) y2 = with_dim_inserted(y2, -1);
  }
  const int ra2 = std::max(ra, 2), rb2 = std::max(rb, 2);
  if (ra2 == 2 && rb2 == 2 && ctx.opset() >= 11) {
    // Plain matrices: Gemm reads the transposed operand in place (no batch axes, nothing to sum).
    auto back = [&](size_t i, std::string d, int r_in) {
      ctx.set_dx(i, r_in == 1 ? ctx.squeeze(d, {i == 0 ? 0 : 1}) : d);
    };
    if (ctx.needs(0)) back(0, gemm2(ctx, dy2, b2, false, true, 1.f), ra);
    if (ctx.needs(1)) back(1, gemm2(ctx, a2, dy2, true, false, 1.f), rb);
    return;
  }
  auto back_to = [&](size_t i, const std::string& grad_full, int r_in, const std::string& in, const std::string& in2) {
    // grad_full has the broadcast batch shape; sum it back to the (2-D view of the) input's shape.
    const ValueInfo xi = ctx.type_of(in);
    std::string r;
    const int r_other = i == 0 ? rb : ra;
    if (r_in >= 2 && r_other <= 2) {
      r = grad_full;  // the other operand has no batch axes: grad_full already has this input's shape
    } else if (xi.has_shape) {
      ValueInfo x2 = r_in == 1 ? with_dim_inserted(xi, i == 0 ? 0 : 1) : xi;
      ValueInfo g;  // grad_full's shape: batch axes of Y, then the matrix axes of the input
      if (y2.has_shape) {
        g = y2;
        size_t k = g.shape.size();
        g.shape[k - 2] = x2.shape[x2.shape.size() - 2];
        g.shape[k - 1] = x2.shape[x2.shape.size() - 1];
      }
      r = ctx.reduce_to_info(grad_full, g.has_shape ? &g : nullptr, x2, in2);
      if (r_in == 1) r = ctx.squeeze(r, {i == 0 ? 0 : 1});
    } else {
      GR_CHECK(r_in >= 2, ctx.fwd().describe() << ": the MatMul gradient needs the shape of its 1-D input");
      r = ctx.op("SumToShape", {grad_full, ctx.op("Shape", {in})}, {}, kGraphrunDomain);
    }
    ctx.set_dx(i, r);
  };
  if (ctx.needs(0)) back_to(0, ctx.op("MatMul", {dy2, transpose_last2(ctx, b2, rb2)}), ra, a, a2);
  if (ctx.needs(1)) back_to(1, ctx.op("MatMul", {transpose_last2(ctx, a2, ra2), dy2}), rb, b, b2);
}

GR_REGISTER_OPS(linalg) {
  ops.op("Gemm").gradient(gemm_grad);
  ops.op("MatMul").gradient(matmul_grad);
}

}  // namespace graphrun::autodiff

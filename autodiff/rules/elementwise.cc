// Gradient rules of elementwise ops (arithmetic with broadcasting, activations, Cast, Where, Clip),
// all built from standard ONNX ops; broadcast gradients are summed back to each input's shape.
#include <cmath>

#include "autodiff/rules/rules.h"

namespace graphrun::autodiff {

namespace {

// The gradient of a broadcasting op's input i, given the gradient of the (broadcast) result.
void set_reduced(GradContext& ctx, size_t i, const std::string& grad) {
  ctx.set_dx(i, ctx.reduce_to(grad, ctx.out(0), ctx.in(i)));
}

std::string mul(GradContext& ctx, const std::string& a, const std::string& b) { return ctx.op("Mul", {a, b}); }

// Where(mask, dY, 0): passes the gradient where mask holds.
std::string mask_grad(GradContext& ctx, const std::string& mask, const std::string& grad) {
  return ctx.op("Where", {mask, grad, ctx.scalar(0, ctx.dtype(grad))});
}

}  // namespace

void add_grad(GradContext& ctx) {
  for (size_t i = 0; i < 2; ++i)
    if (ctx.needs(i)) set_reduced(ctx, i, ctx.dy());
}

void sub_grad(GradContext& ctx) {
  if (ctx.needs(0)) set_reduced(ctx, 0, ctx.dy());
  if (ctx.needs(1)) ctx.set_dx(1, ctx.op("Neg", {ctx.reduce_to(ctx.dy(), ctx.out(0), ctx.in(1))}));
}

void mul_grad(GradContext& ctx) {
  if (ctx.needs(0)) set_reduced(ctx, 0, mul(ctx, ctx.dy(), ctx.in(1)));
  if (ctx.needs(1)) set_reduced(ctx, 1, mul(ctx, ctx.dy(), ctx.in(0)));
}

// Y = A / B: dA = dY / B, dB = -dY * Y / B (reusing the forward Y instead of A / B^2).
void div_grad(GradContext& ctx) {
  if (ctx.needs(0)) set_reduced(ctx, 0, ctx.op("Div", {ctx.dy(), ctx.in(1)}));
  if (ctx.needs(1)) {
    std::string t = mul(ctx, ctx.dy(), ctx.op("Div", {ctx.out(0), ctx.in(1)}));
    ctx.set_dx(1, ctx.op("Neg", {ctx.reduce_to(t, ctx.out(0), ctx.in(1))}));
  }
}

// Y = Mod(A, B) = A - B * q with q = trunc(A / B) (fmod 1, C's fmod) or floor(A / B) (fmod 0, Python's %):
// q is piecewise constant, so dA = dY and dB = -dY * q, with q = (A - Y) / B from the forward Y (torch's
// fmod and remainder have the same gradients). Integer Mod carries none (its inputs need none).
void mod_grad(GradContext& ctx) {
  if (ctx.needs(0)) set_reduced(ctx, 0, ctx.dy());
  if (ctx.needs(1)) {
    const std::string q = ctx.op("Div", {ctx.op("Sub", {ctx.in(0), ctx.out(0)}), ctx.in(1)});
    ctx.set_dx(1, ctx.op("Neg", {ctx.reduce_to(mul(ctx, ctx.dy(), q), ctx.out(0), ctx.in(1))}));
  }
}

// Y = A ^ B: dA = dY * B * A^(B-1), dB = dY * Y * log(A).
void pow_grad(GradContext& ctx) {
  const std::string &a = ctx.in(0), &b = ctx.in(1);
  DType ta = ctx.dtype(a);
  if (ctx.needs(0)) {
    std::string bf = b;
    if (ctx.dtype(b) != ta) bf = ctx.op("Cast", {b}, {{"to", Attribute::Int(static_cast<int64_t>(ta))}});
    std::string bm1 = ctx.op("Sub", {bf, ctx.scalar(1, ta)});
    std::string d = mul(ctx, ctx.dy(), mul(ctx, bf, ctx.op("Pow", {a, bm1})));
    set_reduced(ctx, 0, d);
  }
  if (ctx.needs(1)) set_reduced(ctx, 1, mul(ctx, ctx.dy(), mul(ctx, ctx.out(0), ctx.op("Log", {a}))));
}

void neg_grad(GradContext& ctx) { ctx.set_dx(0, ctx.op("Neg", {ctx.dy()})); }

// Y > 0 exactly where X > 0, so the forward output decides (X may then be freed early).
void relu_grad(GradContext& ctx) {
  std::string pos = ctx.op("Greater", {ctx.out(0), ctx.scalar(0, ctx.dtype(ctx.out(0)))});
  ctx.set_dx(0, mask_grad(ctx, pos, ctx.dy()));
}

void leaky_relu_grad(GradContext& ctx) {
  DType t = ctx.dtype(ctx.in(0));
  std::string pos = ctx.op("Greater", {ctx.in(0), ctx.scalar(0, t)});
  std::string neg = mul(ctx, ctx.dy(), ctx.scalar(ctx.fwd().attr_f("alpha", 0.01f), t));
  ctx.set_dx(0, ctx.op("Where", {pos, ctx.dy(), neg}));
}

// dX = dY * Y * (1 - Y)
void sigmoid_grad(GradContext& ctx) {
  const std::string& y = ctx.out(0);
  std::string one_minus = ctx.op("Sub", {ctx.scalar(1, ctx.dtype(y)), y});
  ctx.set_dx(0, mul(ctx, ctx.dy(), mul(ctx, y, one_minus)));
}

// dX = dY * (1 - Y^2)
void tanh_grad(GradContext& ctx) {
  const std::string& y = ctx.out(0);
  std::string d = ctx.op("Sub", {ctx.scalar(1, ctx.dtype(y)), mul(ctx, y, y)});
  ctx.set_dx(0, mul(ctx, ctx.dy(), d));
}

void exp_grad(GradContext& ctx) { ctx.set_dx(0, mul(ctx, ctx.dy(), ctx.out(0))); }

void log_grad(GradContext& ctx) { ctx.set_dx(0, ctx.op("Div", {ctx.dy(), ctx.in(0)})); }

// dX = dY * 0.5 / Y
void sqrt_grad(GradContext& ctx) {
  const std::string& y = ctx.out(0);
  ctx.set_dx(0, ctx.op("Div", {mul(ctx, ctx.dy(), ctx.scalar(0.5, ctx.dtype(y))), y}));
}

// Y = 1/X: dX = -dY * Y^2
void reciprocal_grad(GradContext& ctx) {
  const std::string& y = ctx.out(0);
  ctx.set_dx(0, ctx.op("Neg", {mul(ctx, ctx.dy(), mul(ctx, y, y))}));
}

void abs_grad(GradContext& ctx) { ctx.set_dx(0, mul(ctx, ctx.dy(), ctx.op("Sign", {ctx.in(0)}))); }

void identity_grad(GradContext& ctx) { ctx.set_dx(0, ctx.dy()); }

// The gradient goes back in the input's float type.
// Cast and CastLike: dY cast back to X's type. CastLike's second input gives only a type, so the rule also
// runs for CastLike(constant, x) with x on the path to the loss (torch exports `torch.where(c, x, 0.0)` so):
// then nothing needs a gradient.
void cast_grad(GradContext& ctx) {
  if (!ctx.needs(0)) return;
  DType tx = ctx.dtype(ctx.in(0));
  if (tx == ctx.dtype(ctx.dy()) || tx == DType::Undefined) ctx.set_dx(0, ctx.dy());
  else ctx.set_dx(0, ctx.op("Cast", {ctx.dy()}, {{"to", Attribute::Int(static_cast<int64_t>(tx))}}));
}

// Y = Where(C, A, B): A gets dY where C holds, B where it does not.
void where_grad(GradContext& ctx) {
  std::string zero = ctx.scalar(0, ctx.dtype(ctx.dy()));
  if (ctx.needs(1)) set_reduced(ctx, 1, ctx.op("Where", {ctx.in(0), ctx.dy(), zero}));
  if (ctx.needs(2)) set_reduced(ctx, 2, ctx.op("Where", {ctx.in(0), zero, ctx.dy()}));
}

void sum_grad(GradContext& ctx) {
  for (size_t i = 0; i < ctx.num_inputs(); ++i)
    if (ctx.needs(i)) set_reduced(ctx, i, ctx.dy());
}

void mean_grad(GradContext& ctx) {
  double n = static_cast<double>(ctx.num_inputs());
  std::string d = ctx.op("Div", {ctx.dy(), ctx.scalar(n, ctx.dtype(ctx.dy()))});
  for (size_t i = 0; i < ctx.num_inputs(); ++i)
    if (ctx.needs(i)) set_reduced(ctx, i, d);
}

// Passes dY where min <= X <= max (as torch.clamp's backward does).
// Clip: dX where min <= X <= max. From opset 11 min and max are inputs, which a model can compute (torch.clamp with
// tensor bounds); they get torch's clamp gradient: dmin where X < min (and min < max), dmax where X > max (or max <
// min: then Clip's result is max everywhere), summed to their shape.
void clip_grad(GradContext& ctx) {
  const std::string& x = ctx.in(0);
  DType t = ctx.dtype(x);
  std::string lo, hi;
  if (ctx.opset() >= 11) {
    lo = ctx.in(1);
    hi = ctx.in(2);
  } else {
    if (ctx.fwd().has_attr("min")) lo = ctx.scalar(ctx.fwd().attr_f("min", 0), t);
    if (ctx.fwd().has_attr("max")) hi = ctx.scalar(ctx.fwd().attr_f("max", 0), t);
  }
  if (ctx.needs(0)) {
    std::string mask;
    if (!lo.empty()) mask = ctx.op("GreaterOrEqual", {x, lo});
    if (!hi.empty()) {
      std::string m = ctx.op("LessOrEqual", {x, hi});
      mask = mask.empty() ? m : ctx.op("And", {mask, m});
    }
    ctx.set_dx(0, mask.empty() ? ctx.dy() : mask_grad(ctx, mask, ctx.dy()));
  }
  if (ctx.opset() < 11) return;
  if (!lo.empty() && ctx.needs(1)) {
    std::string below = ctx.op("Less", {x, lo});
    if (!hi.empty()) below = ctx.op("And", {below, ctx.op("Less", {lo, hi})});
    set_reduced(ctx, 1, mask_grad(ctx, below, ctx.dy()));
  }
  if (!hi.empty() && ctx.needs(2)) {
    std::string above = ctx.op("Greater", {x, hi});
    if (!lo.empty()) above = ctx.op("Or", {above, ctx.op("Less", {hi, lo})});
    set_reduced(ctx, 2, mask_grad(ctx, above, ctx.dy()));
  }
}

// Max / Min: the gradient goes to the inputs equal to the result, shared evenly where several are (as
// torch.maximum's backward halves it on a tie): dY / count, count the number of inputs equal to Y there.
void max_min_grad(GradContext& ctx) {
  const size_t n = ctx.num_inputs();
  if (n == 1) return ctx.set_dx(0, ctx.dy());
  const DType t = ctx.dtype(ctx.dy());
  std::vector<std::string> hits(n), ones(n);
  for (size_t i = 0; i < n; ++i) {
    hits[i] = ctx.op("Equal", {ctx.in(i), ctx.out(0)});
    ones[i] = ctx.op("Cast", {hits[i]}, {{"to", Attribute::Int(static_cast<int64_t>(t))}});
  }
  // (Where no input equals Y, a NaN, the count is 0 and the Where below passes 0, not dY / 0.)
  const std::string share = ctx.op("Div", {ctx.dy(), ctx.op("Sum", ones)});
  for (size_t i = 0; i < n; ++i)
    if (ctx.needs(i)) set_reduced(ctx, i, mask_grad(ctx, hits[i], share));
}

// d erf(x)/dx = 2/sqrt(pi) * exp(-x^2)
void erf_grad(GradContext& ctx) {
  const std::string& x = ctx.in(0);
  DType t = ctx.dtype(x);
  std::string e = ctx.op("Exp", {ctx.op("Neg", {mul(ctx, x, x)})});
  ctx.set_dx(0, mul(ctx, ctx.dy(), mul(ctx, e, ctx.scalar(2.0 / std::sqrt(M_PI), t))));
}

void softplus_grad(GradContext& ctx) { ctx.set_dx(0, mul(ctx, ctx.dy(), ctx.op("Sigmoid", {ctx.in(0)}))); }

// Elu: x > 0: dY; else dY * (Y + alpha).
void elu_grad(GradContext& ctx) {
  const std::string& x = ctx.in(0);
  DType t = ctx.dtype(x);
  std::string pos = ctx.op("Greater", {x, ctx.scalar(0, t)});
  std::string neg = mul(ctx, ctx.dy(), ctx.op("Add", {ctx.out(0), ctx.scalar(ctx.fwd().attr_f("alpha", 1.f), t)}));
  ctx.set_dx(0, ctx.op("Where", {pos, ctx.dy(), neg}));
}

}  // namespace graphrun::autodiff

namespace graphrun::autodiff {

namespace {

std::string sq(GradContext& ctx, const std::string& v) { return ctx.op("Mul", {v, v}); }
std::string c(GradContext& ctx, double v) { return ctx.scalar(v, ctx.dtype(ctx.in(0))); }

}  // namespace

// Trigonometric and hyperbolic functions: dX = dY * f'(X).
void sin_grad(GradContext& ctx) { ctx.set_dx(0, mul(ctx, ctx.dy(), ctx.op("Cos", {ctx.in(0)}))); }
void cos_grad(GradContext& ctx) { ctx.set_dx(0, ctx.op("Neg", {mul(ctx, ctx.dy(), ctx.op("Sin", {ctx.in(0)}))})); }
void tan_grad(GradContext& ctx) {  // 1 + tan^2
  ctx.set_dx(0, mul(ctx, ctx.dy(), ctx.op("Add", {c(ctx, 1), sq(ctx, ctx.out(0))})));
}
void asin_grad(GradContext& ctx) {  // 1 / sqrt(1 - x^2)
  ctx.set_dx(0, ctx.op("Div", {ctx.dy(), ctx.op("Sqrt", {ctx.op("Sub", {c(ctx, 1), sq(ctx, ctx.in(0))})})}));
}
void acos_grad(GradContext& ctx) {
  ctx.set_dx(0, ctx.op("Neg", {ctx.op("Div", {ctx.dy(), ctx.op("Sqrt", {ctx.op("Sub", {c(ctx, 1), sq(ctx, ctx.in(0))})})})}));
}
void atan_grad(GradContext& ctx) {  // 1 / (1 + x^2)
  ctx.set_dx(0, ctx.op("Div", {ctx.dy(), ctx.op("Add", {c(ctx, 1), sq(ctx, ctx.in(0))})}));
}
void sinh_grad(GradContext& ctx) { ctx.set_dx(0, mul(ctx, ctx.dy(), ctx.op("Cosh", {ctx.in(0)}))); }
void cosh_grad(GradContext& ctx) { ctx.set_dx(0, mul(ctx, ctx.dy(), ctx.op("Sinh", {ctx.in(0)}))); }
void asinh_grad(GradContext& ctx) {  // 1 / sqrt(x^2 + 1)
  ctx.set_dx(0, ctx.op("Div", {ctx.dy(), ctx.op("Sqrt", {ctx.op("Add", {sq(ctx, ctx.in(0)), c(ctx, 1)})})}));
}
void acosh_grad(GradContext& ctx) {  // 1 / sqrt(x^2 - 1)
  ctx.set_dx(0, ctx.op("Div", {ctx.dy(), ctx.op("Sqrt", {ctx.op("Sub", {sq(ctx, ctx.in(0)), c(ctx, 1)})})}));
}
void atanh_grad(GradContext& ctx) {  // 1 / (1 - x^2)
  ctx.set_dx(0, ctx.op("Div", {ctx.dy(), ctx.op("Sub", {c(ctx, 1), sq(ctx, ctx.in(0))})}));
}

// Softsign: 1 / (1 + |x|)^2
void softsign_grad(GradContext& ctx) {
  std::string d = ctx.op("Add", {c(ctx, 1), ctx.op("Abs", {ctx.in(0)})});
  ctx.set_dx(0, ctx.op("Div", {ctx.dy(), sq(ctx, d)}));
}

// HardSigmoid: alpha inside the linear part (0 < Y < 1), 0 where it is clipped.
void hard_sigmoid_grad(GradContext& ctx) {
  const std::string& y = ctx.out(0);
  std::string inside = ctx.op("And", {ctx.op("Greater", {y, c(ctx, 0)}), ctx.op("Less", {y, c(ctx, 1)})});
  ctx.set_dx(0, mask_grad(ctx, inside, mul(ctx, ctx.dy(), c(ctx, ctx.fwd().attr_f("alpha", 0.2f)))));
}

// HardSwish: 0 below -3, 1 above 3, x/3 + 1/2 between.
void hard_swish_grad(GradContext& ctx) {
  const std::string& x = ctx.in(0);
  std::string mid = mul(ctx, ctx.dy(), ctx.op("Add", {ctx.op("Div", {x, c(ctx, 3)}), c(ctx, 0.5)}));
  std::string upper = ctx.op("Where", {ctx.op("Greater", {x, c(ctx, 3)}), ctx.dy(), mid});
  ctx.set_dx(0, ctx.op("Where", {ctx.op("Less", {x, c(ctx, -3)}), c(ctx, 0), upper}));
}

// Selu: gamma for x > 0, else Y + gamma * alpha.
void selu_grad(GradContext& ctx) {
  const double alpha = ctx.fwd().attr_f("alpha", 1.67326319217681884765625f);
  const double gamma = ctx.fwd().attr_f("gamma", 1.05070102214813232421875f);
  std::string pos = mul(ctx, ctx.dy(), c(ctx, gamma));
  std::string neg = mul(ctx, ctx.dy(), ctx.op("Add", {ctx.out(0), c(ctx, gamma * alpha)}));
  ctx.set_dx(0, ctx.op("Where", {ctx.op("Greater", {ctx.in(0), c(ctx, 0)}), pos, neg}));
}

// Celu: 1 for x > 0, else exp(x / alpha).
void celu_grad(GradContext& ctx) {
  const std::string& x = ctx.in(0);
  std::string e = ctx.op("Exp", {ctx.op("Div", {x, c(ctx, ctx.fwd().attr_f("alpha", 1.f))})});
  ctx.set_dx(0, ctx.op("Where", {ctx.op("Greater", {x, c(ctx, 0)}), ctx.dy(), mul(ctx, ctx.dy(), e)}));
}

void thresholded_relu_grad(GradContext& ctx) {
  std::string above = ctx.op("Greater", {ctx.in(0), c(ctx, ctx.fwd().attr_f("alpha", 1.f))});
  ctx.set_dx(0, mask_grad(ctx, above, ctx.dy()));
}

// Shrink: 1 where |x| > lambd (the shifted parts), 0 in the dead zone.
void shrink_grad(GradContext& ctx) {
  const std::string& x = ctx.in(0);
  const double lambd = ctx.fwd().attr_f("lambd", 0.5f);
  std::string out = ctx.op("Or", {ctx.op("Greater", {x, c(ctx, lambd)}), ctx.op("Less", {x, c(ctx, -lambd)})});
  ctx.set_dx(0, mask_grad(ctx, out, ctx.dy()));
}

// PRelu: Y = X for X > 0, slope * X otherwise (slope broadcast to X).
void prelu_grad(GradContext& ctx) {
  const std::string &x = ctx.in(0), &slope = ctx.in(1);
  std::string pos = ctx.op("Greater", {x, c(ctx, 0)});
  if (ctx.needs(0)) ctx.set_dx(0, ctx.op("Where", {pos, ctx.dy(), mul(ctx, ctx.dy(), slope)}));
  if (ctx.needs(1)) set_reduced(ctx, 1, ctx.op("Where", {pos, c(ctx, 0), mul(ctx, ctx.dy(), x)}));
}

GR_REGISTER_OPS(elementwise) {
  ops.op("Add").gradient(add_grad);
  ops.op("Sub").gradient(sub_grad);
  ops.op("Mul").gradient(mul_grad);
  ops.op("Div").gradient(div_grad);
  ops.op("Pow").gradient(pow_grad);
  ops.op("Mod").gradient(mod_grad);
  ops.op("Neg").gradient(neg_grad);
  ops.op("Relu").gradient(relu_grad);
  ops.op("LeakyRelu").gradient(leaky_relu_grad);
  ops.op("Sigmoid").gradient(sigmoid_grad);
  ops.op("Tanh").gradient(tanh_grad);
  ops.op("Exp").gradient(exp_grad);
  ops.op("Log").gradient(log_grad);
  ops.op("Sqrt").gradient(sqrt_grad);
  ops.op("Reciprocal").gradient(reciprocal_grad);
  ops.op("Abs").gradient(abs_grad);
  ops.op("Identity").gradient(identity_grad);
  ops.op("Cast").gradient(cast_grad);
  ops.op("Where").gradient(where_grad);
  ops.op("Sum").gradient(sum_grad);
  ops.op("Mean").gradient(mean_grad);
  ops.op("Clip").gradient(clip_grad);
  ops.op("Max").gradient(max_min_grad);
  ops.op("Min").gradient(max_min_grad);
  ops.op("Erf").gradient(erf_grad);
  ops.op("Softplus").gradient(softplus_grad);
  ops.op("Elu").gradient(elu_grad);
  ops.op("Sin").gradient(sin_grad);
  ops.op("Cos").gradient(cos_grad);
  ops.op("Tan").gradient(tan_grad);
  ops.op("Asin").gradient(asin_grad);
  ops.op("Acos").gradient(acos_grad);
  ops.op("Atan").gradient(atan_grad);
  ops.op("Sinh").gradient(sinh_grad);
  ops.op("Cosh").gradient(cosh_grad);
  ops.op("Asinh").gradient(asinh_grad);
  ops.op("Acosh").gradient(acosh_grad);
  ops.op("Atanh").gradient(atanh_grad);
  ops.op("Softsign").gradient(softsign_grad);
  ops.op("HardSigmoid").gradient(hard_sigmoid_grad);
  ops.op("HardSwish").gradient(hard_swish_grad);
  ops.op("Selu").gradient(selu_grad);
  ops.op("Celu").gradient(celu_grad);
  ops.op("ThresholdedRelu").gradient(thresholded_relu_grad);
  ops.op("Shrink").gradient(shrink_grad);
  ops.op("PRelu").gradient(prelu_grad);
  ops.op("CastLike").gradient(cast_grad);
  // Comparisons and logic give booleans; Sign, Floor, Ceil and Round are piecewise constant.
  ops.op("Equal").no_gradient().output_dtype(0, DType::Bool);
  // torch's .detach() (exported as ai.graphrun::StopGradient): X's value, none of its gradient.
  ops.op(kGraphrunDomain, "StopGradient").no_gradient();
  ops.op("Greater").no_gradient().output_dtype(0, DType::Bool);
  ops.op("GreaterOrEqual").no_gradient().output_dtype(0, DType::Bool);
  ops.op("Less").no_gradient().output_dtype(0, DType::Bool);
  ops.op("LessOrEqual").no_gradient().output_dtype(0, DType::Bool);
  ops.op("Not").no_gradient().output_dtype(0, DType::Bool);
  ops.op("And").no_gradient().output_dtype(0, DType::Bool);
  ops.op("Or").no_gradient().output_dtype(0, DType::Bool);
  ops.op("Xor").no_gradient().output_dtype(0, DType::Bool);
  ops.op("IsNaN").no_gradient().output_dtype(0, DType::Bool);
  ops.op("IsInf").no_gradient().output_dtype(0, DType::Bool);
  ops.op("Sign").no_gradient();
  ops.op("Floor").no_gradient();
  ops.op("Ceil").no_gradient();
  ops.op("Round").no_gradient();
  ops.op("BitShift").no_gradient();
}

}  // namespace graphrun::autodiff

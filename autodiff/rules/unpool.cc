// Gradient rule of the unpool family: MaxUnpool put X[k] at the unpooled tensor's flat index I[k], so dX[k] is dY
// there: dY cut back to the unpooled shape where output_shape padded it (a Slice), flattened, then a Gather at the
// flattened indices, in X's shape (standard ops). The indices and output_shape get none.
#include "autodiff/rules/rules.h"

namespace graphrun::autodiff {
namespace {

void max_unpool_grad(GradContext& ctx) {
  if (ctx.dy().empty() || !ctx.needs(0)) return;
  std::string dy = ctx.dy();
  if (ctx.num_inputs() > 2 && !ctx.in(2).empty()) {
    // The unpooled shape, as the kernel computes it, from X's static spatial sizes and the attributes.
    const ValueInfo xi = ctx.type_of(ctx.in(0));
    GR_CHECK(xi.has_shape, "node '" << ctx.fwd().name << "' (MaxUnpool): the gradient needs X's rank");
    const auto sd = xi.shape.size() - 2;
    const std::vector<int64_t> kernel = ctx.fwd().attr_ints("kernel_shape");
    const std::vector<int64_t> strides = ctx.fwd().attr_ints("strides", std::vector<int64_t>(sd, 1));
    const std::vector<int64_t> pads = ctx.fwd().attr_ints("pads", std::vector<int64_t>(2 * sd, 0));
    std::vector<int64_t> ends, axes;
    for (size_t d = 0; d < sd; ++d) {
      GR_CHECK(xi.shape[d + 2].known() && kernel.size() == sd,
               "node '" << ctx.fwd().name << "' (MaxUnpool): the gradient needs X's static spatial sizes");
      ends.push_back((xi.shape[d + 2].size - 1) * strides[d] - pads[d] - pads[d + sd] + kernel[d]);
      axes.push_back(static_cast<int64_t>(d + 2));
    }
    dy = ctx.slice(dy, std::vector<int64_t>(sd, 0), ends, axes);
  }
  const std::string flat = ctx.reshape(dy, ctx.ints({-1}));
  const std::string at = ctx.reshape(ctx.in(1), ctx.ints({-1}));
  const std::string picked = ctx.op("Gather", {flat, at}, {{"axis", Attribute::Int(0)}});
  ctx.set_dx(0, ctx.reshape(picked, ctx.shape_of(ctx.in(0))));
}

}  // namespace

GR_REGISTER_OPS(unpool) { ops.op("MaxUnpool").gradient(max_unpool_grad); }

}  // namespace graphrun::autodiff

// The gradient rule table: op -> rule (a function that emits the backward nodes of one forward node),
// or "no gradient" for ops whose outputs are not differentiable (Shape, comparisons, ...).
#pragma once
#include <string>
#include <unordered_map>

#include "autodiff/grad_context.h"

namespace graphrun::autodiff {

using GradRule = void (*)(GradContext&);

struct RuleEntry {
  GradRule rule = nullptr;    // nullptr together with differentiable=false: no_gradient
  bool differentiable = true;
};

// Keyed by Node::op_key() ("Conv", "ai.graphrun::ConvGrad"). Defined in rules/registry.cc.
const std::unordered_map<std::string, RuleEntry>& gradient_rules();

// Rules, one per op, defined in the family files rules/<family>.cc.
#define GR_RULE(name) void name(GradContext& ctx)
// elementwise.cc
GR_RULE(add_grad); GR_RULE(sub_grad); GR_RULE(mul_grad); GR_RULE(div_grad); GR_RULE(pow_grad);
GR_RULE(neg_grad); GR_RULE(relu_grad); GR_RULE(leaky_relu_grad); GR_RULE(sigmoid_grad); GR_RULE(tanh_grad);
GR_RULE(exp_grad); GR_RULE(log_grad); GR_RULE(sqrt_grad); GR_RULE(reciprocal_grad); GR_RULE(abs_grad);
GR_RULE(identity_grad); GR_RULE(cast_grad); GR_RULE(where_grad); GR_RULE(sum_grad); GR_RULE(mean_grad);
GR_RULE(clip_grad); GR_RULE(max_min_grad); GR_RULE(erf_grad); GR_RULE(softplus_grad); GR_RULE(elu_grad);
GR_RULE(sin_grad); GR_RULE(cos_grad); GR_RULE(tan_grad); GR_RULE(asin_grad); GR_RULE(acos_grad); GR_RULE(atan_grad);
GR_RULE(sinh_grad); GR_RULE(cosh_grad); GR_RULE(asinh_grad); GR_RULE(acosh_grad); GR_RULE(atanh_grad);
GR_RULE(softsign_grad); GR_RULE(hard_sigmoid_grad); GR_RULE(hard_swish_grad); GR_RULE(selu_grad); GR_RULE(celu_grad);
GR_RULE(thresholded_relu_grad); GR_RULE(shrink_grad); GR_RULE(prelu_grad);
// nn.cc
GR_RULE(conv_grad); GR_RULE(conv_transpose_grad); GR_RULE(max_pool_grad); GR_RULE(average_pool_grad);
GR_RULE(global_average_pool_grad); GR_RULE(global_max_pool_grad); GR_RULE(batch_norm_grad); GR_RULE(dropout_grad);
// linalg.cc
GR_RULE(gemm_grad); GR_RULE(matmul_grad);
// shape.cc
GR_RULE(reshape_grad); GR_RULE(transpose_grad); GR_RULE(concat_grad); GR_RULE(split_grad); GR_RULE(slice_grad);
GR_RULE(pad_grad); GR_RULE(gather_grad); GR_RULE(expand_grad); GR_RULE(trilu_grad); GR_RULE(tile_grad);
// reduce.cc
GR_RULE(reduce_sum_grad); GR_RULE(reduce_mean_grad); GR_RULE(softmax_grad); GR_RULE(log_softmax_grad);
GR_RULE(reduce_max_min_grad); GR_RULE(reduce_sum_square_grad); GR_RULE(reduce_l1_grad); GR_RULE(reduce_l2_grad);
GR_RULE(reduce_log_sum_exp_grad); GR_RULE(reduce_log_sum_grad); GR_RULE(cumsum_grad);
// loss.cc
GR_RULE(softmax_cross_entropy_loss_grad);
#undef GR_RULE

}  // namespace graphrun::autodiff

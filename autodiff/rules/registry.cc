// The gradient rule table: every op graphrun knows, with its rule or marked as having no gradient.
// An op missing here that lies between a parameter and the loss is an error naming op and node.
#include "autodiff/rules/rules.h"

namespace graphrun::autodiff {

namespace {

using Table = std::unordered_map<std::string, RuleEntry>;

void rule(Table& t, const std::string& op, GradRule fn) { t[op] = RuleEntry{fn, true}; }
// Outputs that carry no gradient (integers, booleans, shapes, constants, piecewise-constant values).
void no_gradient(Table& t, const std::string& op) { t[op] = RuleEntry{nullptr, false}; }

Table build() {
  Table t;
  // elementwise.cc
  rule(t, "Add", add_grad);
  rule(t, "Sub", sub_grad);
  rule(t, "Mul", mul_grad);
  rule(t, "Div", div_grad);
  rule(t, "Pow", pow_grad);
  rule(t, "Neg", neg_grad);
  rule(t, "Relu", relu_grad);
  rule(t, "LeakyRelu", leaky_relu_grad);
  rule(t, "Sigmoid", sigmoid_grad);
  rule(t, "Tanh", tanh_grad);
  rule(t, "Exp", exp_grad);
  rule(t, "Log", log_grad);
  rule(t, "Sqrt", sqrt_grad);
  rule(t, "Reciprocal", reciprocal_grad);
  rule(t, "Abs", abs_grad);
  rule(t, "Identity", identity_grad);
  rule(t, "Cast", cast_grad);
  rule(t, "Where", where_grad);
  rule(t, "Sum", sum_grad);
  rule(t, "Mean", mean_grad);
  rule(t, "Clip", clip_grad);
  rule(t, "Max", max_min_grad);
  rule(t, "Min", max_min_grad);
  rule(t, "Erf", erf_grad);
  rule(t, "Softplus", softplus_grad);
  rule(t, "Elu", elu_grad);
  rule(t, "Sin", sin_grad);
  rule(t, "Cos", cos_grad);
  rule(t, "Tan", tan_grad);
  rule(t, "Asin", asin_grad);
  rule(t, "Acos", acos_grad);
  rule(t, "Atan", atan_grad);
  rule(t, "Sinh", sinh_grad);
  rule(t, "Cosh", cosh_grad);
  rule(t, "Asinh", asinh_grad);
  rule(t, "Acosh", acosh_grad);
  rule(t, "Atanh", atanh_grad);
  rule(t, "Softsign", softsign_grad);
  rule(t, "HardSigmoid", hard_sigmoid_grad);
  rule(t, "HardSwish", hard_swish_grad);
  rule(t, "Selu", selu_grad);
  rule(t, "Celu", celu_grad);
  rule(t, "ThresholdedRelu", thresholded_relu_grad);
  rule(t, "Shrink", shrink_grad);
  rule(t, "PRelu", prelu_grad);
  rule(t, "CastLike", cast_grad);
  // nn.cc
  rule(t, "Conv", conv_grad);
  rule(t, "ConvTranspose", conv_transpose_grad);
  rule(t, "MaxPool", max_pool_grad);
  rule(t, "AveragePool", average_pool_grad);
  rule(t, "GlobalAveragePool", global_average_pool_grad);
  rule(t, "GlobalMaxPool", global_max_pool_grad);
  rule(t, "BatchNormalization", batch_norm_grad);
  rule(t, "Dropout", dropout_grad);
  // linalg.cc
  rule(t, "Gemm", gemm_grad);
  rule(t, "MatMul", matmul_grad);
  // shape.cc
  rule(t, "Reshape", reshape_grad);
  rule(t, "Flatten", reshape_grad);
  rule(t, "Squeeze", reshape_grad);
  rule(t, "Unsqueeze", reshape_grad);
  rule(t, "Transpose", transpose_grad);
  rule(t, "Expand", expand_grad);
  rule(t, "Concat", concat_grad);
  rule(t, "Split", split_grad);
  rule(t, "Slice", slice_grad);
  rule(t, "Pad", pad_grad);
  rule(t, "Gather", gather_grad);
  rule(t, "Trilu", trilu_grad);
  rule(t, "Tile", tile_grad);
  // reduce.cc
  rule(t, "ReduceSum", reduce_sum_grad);
  rule(t, "ReduceMean", reduce_mean_grad);
  rule(t, "Softmax", softmax_grad);
  rule(t, "LogSoftmax", log_softmax_grad);
  rule(t, "ReduceMax", reduce_max_min_grad);
  rule(t, "ReduceMin", reduce_max_min_grad);
  rule(t, "ReduceSumSquare", reduce_sum_square_grad);
  rule(t, "ReduceL1", reduce_l1_grad);
  rule(t, "ReduceL2", reduce_l2_grad);
  rule(t, "ReduceLogSumExp", reduce_log_sum_exp_grad);
  rule(t, "ReduceLogSum", reduce_log_sum_grad);
  rule(t, "CumSum", cumsum_grad);
  // loss.cc
  rule(t, "SoftmaxCrossEntropyLoss", softmax_cross_entropy_loss_grad);

  for (const char* op : {"Shape", "Size", "Constant", "ConstantOfShape", "Range", "Equal", "Greater",
                         "GreaterOrEqual", "Less", "LessOrEqual", "Not", "And", "Or", "Xor", "IsNaN", "IsInf",
                         "ArgMax", "ArgMin", "NonZero", "OneHot", "Sign", "Floor", "Ceil", "Round",
                         "RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "EyeLike",
                         "Hardmax", "BitShift"})
    no_gradient(t, op);
  return t;
}

}  // namespace

const std::unordered_map<std::string, RuleEntry>& gradient_rules() {
  static const Table table = build();
  return table;
}

}  // namespace graphrun::autodiff

// ONNX schemas for the ai.graphrun ops of docs/ops.md, with type and shape inference (dX like X, dW like W, ...).
#include "graph/graphrun_schemas.h"

#include <onnx/defs/schema.h>
#include <onnx/defs/shape_inference.h>

#include <mutex>

#include "graph/ir.h"
#include "graph/onnx_tensor.h"

namespace graphrun {

namespace {

using onnx::AttributeProto;
using onnx::InferenceContext;
using onnx::OpSchema;

const std::vector<std::string> kFloatTypes = {"tensor(float16)", "tensor(float)", "tensor(double)",
                                              "tensor(bfloat16)"};
const std::vector<std::string> kNumericTypes = {
    "tensor(float16)", "tensor(float)", "tensor(double)", "tensor(bfloat16)", "tensor(int8)",
    "tensor(int16)",   "tensor(int32)", "tensor(int64)",  "tensor(uint8)",    "tensor(uint16)",
    "tensor(uint32)",  "tensor(uint64)"};

bool has_input(InferenceContext& ctx, size_t i) { return i < ctx.getNumInputs() && ctx.getInputType(i); }

// Output `out` gets the element type and (when known) the shape of input `in`.
void same_as_input(InferenceContext& ctx, size_t in, size_t out) {
  if (out >= ctx.getNumOutputs() || !has_input(ctx, in)) return;
  onnx::propagateElemTypeFromInputToOutput(ctx, in, out);
  if (onnx::hasInputShape(ctx, in)) onnx::propagateShapeFromInputToOutput(ctx, in, out);
}

// Output `out` is a 1-D bias gradient: element type of input `in`, length taken from dimension `axis`
// of that input (times `group` for ConvTranspose, whose weight holds C_out/group on axis 1).
void bias_like(InferenceContext& ctx, size_t in, size_t out, int axis, int64_t group) {
  if (out >= ctx.getNumOutputs() || !has_input(ctx, in)) return;
  onnx::propagateElemTypeFromInputToOutput(ctx, in, out);
  if (!onnx::hasInputShape(ctx, in)) return;
  const auto& s = onnx::getInputShape(ctx, in);
  if (s.dim_size() <= axis) return;
  auto* dim = ctx.getOutputType(out)->mutable_tensor_type()->mutable_shape()->add_dim();
  const auto& d = s.dim(axis);
  if (d.has_dim_value()) dim->set_dim_value(d.dim_value() * group);
  else if (group == 1 && d.has_dim_param()) dim->set_dim_param(d.dim_param());
}

void conv_attrs(OpSchema& s, bool transpose) {
  s.Attr("auto_pad", "as Conv", AttributeProto::STRING, std::string("NOTSET"))
      .Attr("dilations", "as Conv", AttributeProto::INTS, false)
      .Attr("group", "as Conv", AttributeProto::INT, static_cast<int64_t>(1))
      .Attr("kernel_shape", "as Conv", AttributeProto::INTS, false)
      .Attr("pads", "as Conv", AttributeProto::INTS, false)
      .Attr("strides", "as Conv", AttributeProto::INTS, false);
  if (transpose)
    s.Attr("output_padding", "as ConvTranspose", AttributeProto::INTS, false)
        .Attr("output_shape", "as ConvTranspose", AttributeProto::INTS, false);
}

OpSchema base(const char* name, const char* doc) {
  OpSchema s;
  s.SetName(name).SetDomain(kGraphrunDomain).SinceVersion(1).SetDoc(doc).SetLocation(__FILE__, __LINE__);
  // Extra attributes (for instance ones a later graphrun version adds) should not make older
  // checkers reject a model; the kernels check what they read.
  s.AllowUncheckedAttributes();
  return s;
}

std::vector<OpSchema> graphrun_schemas() {
  std::vector<OpSchema> r;
  for (bool transpose : {false, true}) {
    OpSchema s = base(transpose ? "ConvTransposeGrad" : "ConvGrad",
                      transpose ? "Gradients of Y = ConvTranspose(X, W, B)." : "Gradients of Y = Conv(X, W, B).");
    conv_attrs(s, transpose);
    s.Input(0, "dY", "gradient of Y", "T")
        .Input(1, "X", "forward input", "T")
        .Input(2, "W", "forward weight", "T")
        .Output(0, "dX", "gradient of X", "T", OpSchema::Optional)
        .Output(1, "dW", "gradient of W", "T", OpSchema::Optional)
        .Output(2, "dB", "gradient of B", "T", OpSchema::Optional)
        .TypeConstraint("T", kFloatTypes, "float tensors")
        .TypeAndShapeInferenceFunction([transpose](InferenceContext& ctx) {
          same_as_input(ctx, 1, 0);
          same_as_input(ctx, 2, 1);
          bias_like(ctx, 2, 2, transpose ? 1 : 0, transpose ? onnx::getAttribute(ctx, "group", 1) : 1);
        });
    r.push_back(std::move(s));
  }
  {
    OpSchema s = base("MaxPoolGrad", "Scatters dY to the argmax positions given by MaxPool's Indices.");
    s.Input(0, "dY", "gradient of Y", "T")
        .Input(1, "Indices", "MaxPool's second output", "I")
        .Input(2, "X", "forward input (gives the shape)", "T")
        .Output(0, "dX", "gradient of X", "T")
        .TypeConstraint("T", kFloatTypes, "float tensors")
        .TypeConstraint("I", {"tensor(int64)"}, "flat indices")
        .TypeAndShapeInferenceFunction([](InferenceContext& ctx) { same_as_input(ctx, 2, 0); });
    r.push_back(std::move(s));
  }
  {
    OpSchema s = base("AveragePoolGrad", "Spreads dY evenly over each AveragePool window.");
    s.Attr("auto_pad", "as AveragePool", AttributeProto::STRING, std::string("NOTSET"))
        .Attr("ceil_mode", "as AveragePool", AttributeProto::INT, static_cast<int64_t>(0))
        .Attr("count_include_pad", "as AveragePool", AttributeProto::INT, static_cast<int64_t>(0))
        .Attr("kernel_shape", "as AveragePool", AttributeProto::INTS, false)
        .Attr("pads", "as AveragePool", AttributeProto::INTS, false)
        .Attr("strides", "as AveragePool", AttributeProto::INTS, false)
        .Input(0, "dY", "gradient of Y", "T")
        .Input(1, "X", "forward input (gives the shape)", "T")
        .Output(0, "dX", "gradient of X", "T")
        .TypeConstraint("T", kFloatTypes, "float tensors")
        .TypeAndShapeInferenceFunction([](InferenceContext& ctx) { same_as_input(ctx, 1, 0); });
    r.push_back(std::move(s));
  }
  {
    OpSchema s = base("BatchNormalizationGrad", "Gradients of training-mode BatchNormalization.");
    s.Attr("epsilon", "as BatchNormalization", AttributeProto::FLOAT, 1e-5f)
        .Input(0, "dY", "gradient of Y", "T")
        .Input(1, "X", "forward input", "T")
        .Input(2, "scale", "forward scale", "T")
        .Output(0, "dX", "gradient of X", "T", OpSchema::Optional)
        .Output(1, "dscale", "gradient of scale", "T", OpSchema::Optional)
        .Output(2, "dB", "gradient of B", "T", OpSchema::Optional)
        .TypeConstraint("T", kFloatTypes, "float tensors")
        .TypeAndShapeInferenceFunction([](InferenceContext& ctx) {
          same_as_input(ctx, 1, 0);
          same_as_input(ctx, 2, 1);
          same_as_input(ctx, 2, 2);
        });
    r.push_back(std::move(s));
  }
  {
    OpSchema s = base("SoftmaxCrossEntropyLossGrad", "Gradient of SoftmaxCrossEntropyLoss w.r.t. its scores.");
    s.Attr("reduction", "as SoftmaxCrossEntropyLoss", AttributeProto::STRING, std::string("mean"))
        .Attr("ignore_index", "as SoftmaxCrossEntropyLoss", AttributeProto::INT, false)
        .Input(0, "dloss", "gradient of the loss", "T")
        .Input(1, "log_prob", "the forward's log_prob output", "T")
        .Input(2, "labels", "class indices", "Tind")
        .Input(3, "weights", "class weights", "T", OpSchema::Optional)
        .Output(0, "dscores", "gradient of the scores", "T")
        .TypeConstraint("T", kFloatTypes, "float tensors")
        .TypeConstraint("Tind", {"tensor(int32)", "tensor(int64)"}, "label tensors")
        .TypeAndShapeInferenceFunction([](InferenceContext& ctx) { same_as_input(ctx, 1, 0); });
    r.push_back(std::move(s));
  }
  {
    OpSchema s = base("SumToShape", "Sums X over broadcast axes so that Y has `shape`.");
    s.Input(0, "X", "tensor to reduce", "T")
        .Input(1, "shape", "target shape", "tensor(int64)")
        .Output(0, "Y", "reduced tensor", "T")
        .TypeConstraint("T", kNumericTypes, "numeric tensors")
        .TypeAndShapeInferenceFunction([](InferenceContext& ctx) {
          if (ctx.getNumOutputs() < 1 || !has_input(ctx, 0)) return;
          onnx::propagateElemTypeFromInputToOutput(ctx, 0, 0);
          if (const onnx::TensorProto* data = ctx.getInputData(1)) {
            Tensor t = tensor_from_proto(*data, "SumToShape shape");
            auto* shape = ctx.getOutputType(0)->mutable_tensor_type()->mutable_shape();
            for (int64_t d : t.as_int64s()) shape->add_dim()->set_dim_value(d);
          } else if (const onnx::TensorShapeProto* sym = ctx.getSymbolicInput(1)) {
            *ctx.getOutputType(0)->mutable_tensor_type()->mutable_shape() = *sym;
          } else if (onnx::hasInputShape(ctx, 1)) {
            const auto& s = onnx::getInputShape(ctx, 1);
            if (s.dim_size() == 1 && s.dim(0).has_dim_value()) {
              auto* shape = ctx.getOutputType(0)->mutable_tensor_type()->mutable_shape();
              for (int64_t i = 0; i < s.dim(0).dim_value(); ++i) shape->add_dim();
            }
          }
        });
    r.push_back(std::move(s));
  }
  {
    OpSchema s = base("AllReduce", "Each Ri is the sum over all replicas of Gi; one node carries a bucket.");
    s.Attr("reduction", "only \"sum\"", AttributeProto::STRING, std::string("sum"))
        .Input(0, "G", "gradients of this replica", "T", OpSchema::Variadic, false, 1)
        .Output(0, "R", "sums over the replicas", "T", OpSchema::Variadic, false, 1)
        .TypeConstraint("T", kNumericTypes, "numeric tensors")
        .TypeAndShapeInferenceFunction([](InferenceContext& ctx) {
          for (size_t i = 0; i < ctx.getNumOutputs() && i < ctx.getNumInputs(); ++i) same_as_input(ctx, i, i);
        });
    r.push_back(std::move(s));
  }
  return r;
}

}  // namespace

void register_graphrun_schemas() {
  static std::once_flag once;
  std::call_once(once, [] {
    auto& ranges = onnx::OpSchemaRegistry::DomainToVersionRange::Instance();
    if (!ranges.Map().count(kGraphrunDomain)) ranges.AddDomainToVersion(kGraphrunDomain, 1, 1);
    for (auto& s : graphrun_schemas())
      if (!onnx::OpSchemaRegistry::Schema(s.Name(), 1, kGraphrunDomain)) onnx::RegisterSchema(std::move(s));
  });
}

}  // namespace graphrun

// ONNX schemas for the ai.graphrun ops: the op table's schema specs (registered beside each op's CPU
// kernel) turned into onnx::OpSchema, with their type and shape inference (dX like X, dW like W, ...).
#include "graph/graphrun_schemas.h"

#include <onnx/defs/schema.h>
#include <onnx/defs/shape_inference.h>
#include <onnx/defs/tensor_proto_util.h>

#include <map>
#include <mutex>

#include "graph/ir.h"
#include "graph/op_table.h"
#include "graph/onnx_tensor.h"

namespace graphrun {

namespace {

using onnx::AttributeProto;
using onnx::InferenceContext;
using onnx::OpSchema;

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

// Output `out` takes the shape given by the value of input `in` (a constant or a symbolic shape).
// The output's shape from the values of input `in` (a shape tensor); none where nothing says even its
// rank: an empty shape would declare a scalar, which readers' inference (Gemm's) takes at its word.
void shape_from_value(InferenceContext& ctx, size_t in, size_t out, const std::string& op) {
  if (out >= ctx.getNumOutputs() || !has_input(ctx, 0)) return;
  onnx::propagateElemTypeFromInputToOutput(ctx, 0, out);
  onnx::TensorShapeProto shape;
  if (const onnx::TensorProto* data = ctx.getInputData(in)) {
    Tensor t = tensor_from_proto(*data, op + " shape");
    for (int64_t d : t.as_int64s()) shape.add_dim()->set_dim_value(d);
  } else if (const onnx::TensorShapeProto* sym = ctx.getSymbolicInput(in)) {
    shape = *sym;
  } else if (onnx::hasInputShape(ctx, in) && onnx::getInputShape(ctx, in).dim_size() == 1 &&
             onnx::getInputShape(ctx, in).dim(0).has_dim_value()) {
    for (int64_t i = 0; i < onnx::getInputShape(ctx, in).dim(0).dim_value(); ++i) shape.add_dim();
  } else {
    return;
  }
  *ctx.getOutputType(out)->mutable_tensor_type()->mutable_shape() = shape;
}

void infer(InferenceContext& ctx, const std::vector<OpSchemaSpec::Inference>& rules, const std::string& op) {
  using Kind = OpSchemaSpec::Inference::Kind;
  for (const auto& r : rules) {
    switch (r.kind) {
      case Kind::LikeInput: same_as_input(ctx, r.input, r.output); break;
      case Kind::EachLikeInput:
        for (size_t i = 0; i < ctx.getNumOutputs() && i < ctx.getNumInputs(); ++i) same_as_input(ctx, i, i);
        break;
      case Kind::BiasOf:
        bias_like(ctx, r.input, r.output, r.axis, r.times_attr.empty() ? 1 : onnx::getAttribute(ctx, r.times_attr, 1));
        break;
      case Kind::ShapeFromValue: shape_from_value(ctx, r.input, r.output, op); break;
      case Kind::OptimizerUpdates: {
        const size_t groups = static_cast<size_t>(r.axis), rest = ctx.getNumInputs() - 2;
        if (ctx.getNumInputs() < 2 || rest % groups) break;
        const size_t n = rest / groups;
        for (size_t out = 0; n && out < ctx.getNumOutputs() && out < (groups - 1) * n; ++out) {
          const size_t group = out / n;  // new X, then V, H: input groups 0, 2, 3 (G is group 1)
          same_as_input(ctx, 2 + (group == 0 ? 0 : group + 1) * n + out % n, out);
        }
        break;
      }
    }
  }
}

OpSchema::FormalParameterOption option(OpSchemaSpec::Arity a) {
  switch (a) {
    case OpSchemaSpec::Arity::Optional: return OpSchema::Optional;
    case OpSchemaSpec::Arity::Variadic: return OpSchema::Variadic;
    default: return OpSchema::Single;
  }
}

void add_attr(OpSchema& s, const OpSchemaSpec::Attr& a) {
  using K = Attribute::Kind;
  const std::string& n = a.name;
  const std::string& d = a.doc;
  if (!a.default_value) {
    static const std::map<K, AttributeProto::AttributeType> types = {
        {K::Float, AttributeProto::FLOAT},   {K::Int, AttributeProto::INT},   {K::String, AttributeProto::STRING},
        {K::Tensor, AttributeProto::TENSOR}, {K::Floats, AttributeProto::FLOATS}, {K::Ints, AttributeProto::INTS},
        {K::Strings, AttributeProto::STRINGS}};
    s.Attr(n, d, types.at(a.kind), false);
    return;
  }
  const Attribute& v = *a.default_value;
  switch (v.kind) {
    case K::Float: s.Attr(n, d, AttributeProto::FLOAT, v.f); break;
    case K::Int: s.Attr(n, d, AttributeProto::INT, v.i); break;
    case K::String: s.Attr(n, d, AttributeProto::STRING, v.s); break;
    case K::Ints: s.Attr(n, d, AttributeProto::INTS, v.ints); break;
    case K::Floats: s.Attr(n, d, AttributeProto::FLOATS, v.floats); break;
    default: GR_FAIL("schema attribute '" << n << "': defaults of this kind are not supported");
  }
}

OpSchema to_onnx(const OpFacts& f) {
  const OpSchemaSpec& spec = *f.schema;
  OpSchema s;
  s.SetName(f.op).SetDomain(f.domain).SinceVersion(1).SetDoc(spec.doc).SetLocation(f.family_of("schema"), 0);
  // Extra attributes (for instance ones a later graphrun version adds) should not make older
  // checkers reject a model; the kernels check what they read.
  s.AllowUncheckedAttributes();
  for (const auto& a : spec.attrs) add_attr(s, a);
  // Variadic formals are heterogeneous (a bucket of gradients of any shapes), at least one.
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    const auto& p = spec.inputs[i];
    s.Input(static_cast<int>(i), p.name, p.doc, p.type, option(p.arity), p.arity != OpSchemaSpec::Arity::Variadic, 1);
  }
  for (size_t i = 0; i < spec.outputs.size(); ++i) {
    const auto& p = spec.outputs[i];
    s.Output(static_cast<int>(i), p.name, p.doc, p.type, option(p.arity), p.arity != OpSchemaSpec::Arity::Variadic, 1);
  }
  for (const auto& t : spec.types) s.TypeConstraint(t.name, t.types, t.doc);
  s.TypeAndShapeInferenceFunction([rules = spec.inference, op = f.op](InferenceContext& ctx) { infer(ctx, rules, op); });
  return s;
}

// One scalar integer input known when the model is inferred (a Constant or initializer), or -1.
int64_t known_scalar(InferenceContext& ctx, size_t i) {
  if (ctx.getNumInputs() <= i || !ctx.getInputType(i)) return -1;
  const onnx::TensorProto* t = ctx.getInputData(i);
  if (!t || t->data_type() != onnx::TensorProto::INT64) return -1;
  const std::vector<int64_t> v = onnx::ParseData<int64_t>(t);
  return v.size() == 1 ? v[0] : -1;
}

// STFT's output [batch, frames, bins, 2] (runtime/kernels/spectral.h). ONNX 1.12's inference gives the batch
// dimension 0 and ignores onesided (later onnx releases fixed both), which would make every STFT model's next op
// fail to infer.
void infer_stft(InferenceContext& ctx) {
  onnx::propagateElemTypeFromInputToOutput(ctx, 0, 0);
  if (!onnx::hasInputShape(ctx, 0)) return;
  const auto& signal = onnx::getInputShape(ctx, 0);
  if (signal.dim_size() != 3) fail_shape_inference("STFT: the signal must be [batch, length, 1 or 2]");
  int64_t n = known_scalar(ctx, 3);
  if (ctx.getNumInputs() > 2 && ctx.getInputType(2) && onnx::hasInputShape(ctx, 2)) {
    const auto& w = onnx::getInputShape(ctx, 2);
    if (w.dim_size() == 1 && w.dim(0).has_dim_value()) n = w.dim(0).dim_value();
  }
  const int64_t step = known_scalar(ctx, 1);
  const bool onesided = onnx::getAttribute(ctx, "onesided", 1) != 0;
  auto* out = ctx.getOutputType(0)->mutable_tensor_type()->mutable_shape();
  out->clear_dim();
  *out->add_dim() = signal.dim(0);
  auto* frames = out->add_dim();
  if (signal.dim(1).has_dim_value() && n >= 1 && step >= 1 && n <= signal.dim(1).dim_value())
    frames->set_dim_value((signal.dim(1).dim_value() - n) / step + 1);
  auto* bins = out->add_dim();
  if (n >= 1) bins->set_dim_value(onesided ? n / 2 + 1 : n);
  out->add_dim()->set_dim_value(2);
}

}  // namespace

void register_graphrun_schemas() {
  static std::once_flag once;
  std::call_once(once, [] {
    auto& ranges = onnx::OpSchemaRegistry::DomainToVersionRange::Instance();
    if (!ranges.Map().count(kGraphrunDomain)) ranges.AddDomainToVersion(kGraphrunDomain, 1, 1);
    for (const auto& [key, f] : op_table().ops())
      if (f.schema && !onnx::OpSchemaRegistry::Schema(f.op, 1, f.domain)) onnx::RegisterSchema(to_onnx(f));
    // The registry owns its schemas as mutable objects; only the inference function changes.
    if (const onnx::OpSchema* stft = onnx::OpSchemaRegistry::Schema("STFT", 17, ""))
      const_cast<onnx::OpSchema*>(stft)->TypeAndShapeInferenceFunction(infer_stft);
  });
}

}  // namespace graphrun

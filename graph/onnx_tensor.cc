// TensorProto <-> Tensor: raw_data and every typed field ONNX allows for the numeric element types.
#include "graph/onnx_tensor.h"

#include <cstring>

namespace graphrun {

std::string onnx_dtype_name(int32_t t) {
  if (onnx::TensorProto_DataType_IsValid(t))
    return onnx::TensorProto_DataType_Name(static_cast<onnx::TensorProto_DataType>(t));
  return "type " + std::to_string(t);
}

namespace {

// A tensor of `dt` x `shape` from a typed repeated field, narrowing to the element type; the field must
// hold exactly the values the shape promises (checked before allocating).
template <class Field>
Tensor copy_typed(const Field& field, DType dt, const Shape& shape, const std::string& what, const char* field_name) {
  const int64_t n = shape_numel(shape);
  GR_CHECK(static_cast<int64_t>(field.size()) == n,
           what << ": " << field_name << " holds " << field.size() << " values, but shape " << shape_str(shape)
                << " needs " << n);
  Tensor t(dt, shape);
  auto* out = static_cast<unsigned char*>(t.raw());
  const size_t es = dtype_size(t.dtype());
  for (int64_t i = 0; i < n; ++i) {
    auto v = field.Get(static_cast<int>(i));
    switch (t.dtype()) {
      case DType::F32: { float x = static_cast<float>(v); std::memcpy(out + i * es, &x, es); break; }
      case DType::F64: { double x = static_cast<double>(v); std::memcpy(out + i * es, &x, es); break; }
      case DType::I64: { int64_t x = static_cast<int64_t>(v); std::memcpy(out + i * es, &x, es); break; }
      case DType::I32: { int32_t x = static_cast<int32_t>(v); std::memcpy(out + i * es, &x, es); break; }
      case DType::I16: { int16_t x = static_cast<int16_t>(v); std::memcpy(out + i * es, &x, es); break; }
      case DType::I8: { int8_t x = static_cast<int8_t>(v); std::memcpy(out + i * es, &x, es); break; }
      case DType::U8: { uint8_t x = static_cast<uint8_t>(v); std::memcpy(out + i * es, &x, es); break; }
      case DType::Bool: { uint8_t x = v != 0; std::memcpy(out + i * es, &x, es); break; }
      // float16/bfloat16 travel as their bit patterns in int32_data.
      case DType::U16: case DType::F16: case DType::BF16: {
        uint16_t x = static_cast<uint16_t>(v); std::memcpy(out + i * es, &x, es); break;
      }
      case DType::U32: { uint32_t x = static_cast<uint32_t>(v); std::memcpy(out + i * es, &x, es); break; }
      case DType::U64: { uint64_t x = static_cast<uint64_t>(v); std::memcpy(out + i * es, &x, es); break; }
      default: GR_FAIL(what << ": cannot read element type " << dtype_name(t.dtype()));
    }
  }
  return t;
}

}  // namespace

ProtoLayout proto_layout(const onnx::TensorProto& p, const std::string& what) {
  GR_CHECK(p.has_data_type() && p.data_type() != onnx::TensorProto::UNDEFINED, what << ": element type not set");
  ProtoLayout l;
  l.dtype = static_cast<DType>(p.data_type());
  if (l.dtype == DType::String || dtype_size(l.dtype) == 0)
    GR_FAIL(what << ": element type " << onnx_dtype_name(p.data_type()) << " is not supported");
  GR_CHECK(!p.has_segment(), what << ": segmented tensors are not supported");
  l.shape.assign(p.dims().begin(), p.dims().end());
  for (int64_t d : l.shape)
    GR_CHECK(d >= 0, what << ": negative dimension " << d << " in shape " << shape_str(l.shape));
  l.bytes = static_cast<size_t>(checked_numel(l.dtype, l.shape, what)) * dtype_size(l.dtype);
  return l;
}

Tensor tensor_from_proto(const onnx::TensorProto& p, const std::string& what) {
  if (p.data_location() == onnx::TensorProto::EXTERNAL)
    GR_FAIL(what << ": stored as external data, which graphrun does not read (save the model with its "
                    "weights inside: onnx.save(model, path, save_as_external_data=False))");
  const auto [dt, shape, bytes] = proto_layout(p, what);
  // The file must hold the data the shape promises before anything is allocated for it.
  if (p.has_raw_data()) {
    GR_CHECK(p.raw_data().size() == bytes, what << ": raw_data holds " << p.raw_data().size() << " bytes, but "
                                                << dtype_name(dt) << shape_str(shape) << " needs " << bytes);
    Tensor t(dt, shape);
    if (bytes) std::memcpy(t.raw(), p.raw_data().data(), bytes);
    return t;
  }
  switch (dt) {
    case DType::F32: return copy_typed(p.float_data(), dt, shape, what, "float_data");
    case DType::F64: return copy_typed(p.double_data(), dt, shape, what, "double_data");
    case DType::I64: return copy_typed(p.int64_data(), dt, shape, what, "int64_data");
    case DType::U32: case DType::U64: return copy_typed(p.uint64_data(), dt, shape, what, "uint64_data");
    default: return copy_typed(p.int32_data(), dt, shape, what, "int32_data");
  }
}

void tensor_to_proto(const Tensor& t, const std::string& name, onnx::TensorProto* p) {
  GR_CHECK(t.defined(), "tensor '" << name << "' has no value");
  GR_CHECK(t.device().is_cpu(), "tensor '" << name << "' is on " << t.device().str() << ", not the host");
  p->Clear();
  if (!name.empty()) p->set_name(name);
  p->set_data_type(static_cast<int32_t>(t.dtype()));
  for (int64_t d : t.shape()) p->add_dims(d);
  p->set_raw_data(std::string(static_cast<const char*>(t.raw()), t.nbytes()));
}

}  // namespace graphrun

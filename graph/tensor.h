// Tensor: a typed, shaped block of memory on a device; the value type of initializers, attributes and the runtime.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "graph/error.h"

namespace graphrun {

// Values equal ONNX TensorProto::DataType, so conversion is a cast.
enum class DType : int32_t {
  Undefined = 0, F32 = 1, U8 = 2, I8 = 3, U16 = 4, I16 = 5, I32 = 6, I64 = 7, String = 8,
  Bool = 9, F16 = 10, F64 = 11, U32 = 12, U64 = 13, BF16 = 16
};
size_t dtype_size(DType t);          // bytes per element; 0 for Undefined/String

// Zeroed memory for a large buffer, mapped from the kernel on 2 MiB pages where it allows them
// (transparent huge pages in "madvise" mode): one page fault per 2 MiB at the first touch instead of
// one per 4 KiB, and no zeroing pass. `data` is 2 MiB-aligned; unmap_block releases the mapping.
// Tensors of kMapBytes and more use it, and so do the CPU backend's blocks.
struct MappedBlock {
  void* base = nullptr;
  size_t len = 0;
  void* data = nullptr;
};
constexpr size_t kMapBytes = size_t(4) << 20;
MappedBlock map_zeroed(size_t bytes);  // throws Error when the memory is not there
void unmap_block(const MappedBlock& b);
const char* dtype_name(DType t);     // "f32", "i64", "bool", ...
bool dtype_is_float(DType t);

template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::F32; }
template <> constexpr DType dtype_of<double>() { return DType::F64; }
template <> constexpr DType dtype_of<int64_t>() { return DType::I64; }
template <> constexpr DType dtype_of<int32_t>() { return DType::I32; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::U8; }
template <> constexpr DType dtype_of<int8_t>() { return DType::I8; }
template <> constexpr DType dtype_of<bool>() { return DType::Bool; }

struct Device {
  enum class Kind { CPU, CUDA };
  Kind kind = Kind::CPU;
  int index = 0;
  bool is_cpu() const { return kind == Kind::CPU; }
  std::string str() const;  // "cpu:0", "cuda:1"
  bool operator==(const Device& o) const { return kind == o.kind && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
};

using Shape = std::vector<int64_t>;
// Elements of a shape; an Error when the count overflows int64 (a hostile file can ask for that).
int64_t shape_numel(const Shape& s);
std::string shape_str(const Shape& s);  // "[2,3,4]"

// The largest single tensor graphrun allocates or accepts from a file, in bytes: 16 GiB, or
// GRAPHRUN_MAX_TENSOR_MB from the environment. A size a file asks for beyond it is refused, not tried.
size_t max_tensor_bytes();
void set_max_tensor_bytes(size_t bytes);  // for tests and fuzzers
// Checks that `dtype` x `shape` has non-negative dimensions, an element count that fits int64 and at
// most max_tensor_bytes() bytes; returns the element count. The Error names `what` and the size.
int64_t checked_numel(DType dtype, const Shape& shape, const std::string& what);

// Owning (shared storage) or non-owning view. Copies share storage; clone() copies data.
class Tensor {
 public:
  Tensor() = default;
  Tensor(DType dtype, Shape shape);  // owning host tensor, zero-filled
  static Tensor view(DType dtype, Shape shape, void* data, Device device = {});
  // Owning tensor over memory someone else allocated (device memory): `storage` frees it.
  static Tensor adopt(DType dtype, Shape shape, std::shared_ptr<void> storage, void* data, Device device);
  template <class T> static Tensor from_vector(Shape shape, const std::vector<T>& v);
  template <class T> static Tensor scalar(T v) { return from_vector<T>({}, {v}); }

  bool defined() const { return dtype_ != DType::Undefined; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const { return shape_.at(i < 0 ? i + rank() : i); }
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  Device device() const { return device_; }

  void* raw() { return data_; }
  const void* raw() const { return data_; }
  template <class T> T* data() { check_type(dtype_of<T>()); return static_cast<T*>(data_); }
  template <class T> const T* data() const { check_type(dtype_of<T>()); return static_cast<const T*>(data_); }
  template <class T> std::vector<T> to_vector() const { const T* p = data<T>(); return std::vector<T>(p, p + numel()); }
  // Reads any integer or float tensor as int64 values (for shape-like inputs: axes, pads, shapes).
  std::vector<int64_t> as_int64s() const;
  // Reads any float/integer tensor as double values.
  std::vector<double> as_doubles() const;

  Tensor clone() const;                        // deep copy to host, owning
  // Whether this tensor owns its storage and no other tensor shares it (so it may change in place unseen).
  bool sole_owner() const { return storage_ && storage_.use_count() == 1; }
  Tensor reshaped(Shape shape) const;          // same storage, new shape (numel must match)
  void copy_from(const Tensor& src);           // same dtype and numel; host to host
  std::string str(int max_elems = 8) const;    // "f32[2,3] {1, 2, 3, ...}"

 private:
  void check_type(DType want) const;
  DType dtype_ = DType::Undefined;
  Shape shape_;
  std::shared_ptr<void> storage_;
  void* data_ = nullptr;
  Device device_;
};

template <class T>
Tensor Tensor::from_vector(Shape shape, const std::vector<T>& v) {
  Tensor t(dtype_of<T>(), std::move(shape));
  GR_CHECK(static_cast<int64_t>(v.size()) == t.numel(),
           "Tensor::from_vector: " << v.size() << " values for shape " << shape_str(t.shape()));
  T* p = t.data<T>();
  for (size_t i = 0; i < v.size(); ++i) p[i] = v[i];
  return t;
}

}  // namespace graphrun

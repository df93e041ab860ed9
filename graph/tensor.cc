// Tensor storage, dtype tables and small conversions.
#include "graph/tensor.h"

#include "graph/half.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include <sys/mman.h>

namespace graphrun {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: case DType::I32: case DType::U32: return 4;
    case DType::F64: case DType::I64: case DType::U64: return 8;
    case DType::U8: case DType::I8: case DType::Bool: return 1;
    case DType::U16: case DType::I16: case DType::F16: case DType::BF16: return 2;
    default: return 0;
  }
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "f32"; case DType::F64: return "f64"; case DType::F16: return "f16";
    case DType::BF16: return "bf16"; case DType::I64: return "i64"; case DType::I32: return "i32";
    case DType::I16: return "i16"; case DType::I8: return "i8"; case DType::U8: return "u8";
    case DType::U16: return "u16"; case DType::U32: return "u32"; case DType::U64: return "u64";
    case DType::Bool: return "bool"; case DType::String: return "string";
    default: return "undefined";
  }
}

bool dtype_is_float(DType t) {
  return t == DType::F32 || t == DType::F64 || t == DType::F16 || t == DType::BF16;
}

std::string Device::str() const { return std::string(is_cpu() ? "cpu:" : "cuda:") + std::to_string(index); }

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s)
    if (__builtin_mul_overflow(n, d, &n)) GR_FAIL("shape " << shape_str(s) << " has more than 2^63 elements");
  return n;
}

namespace {
size_t& tensor_limit() {
  static size_t limit = [] {
    size_t bytes = size_t{16} << 30;
    if (const char* mb = std::getenv("GRAPHRUN_MAX_TENSOR_MB")) {
      char* end = nullptr;
      unsigned long long v = std::strtoull(mb, &end, 10);
      if (end != mb && *end == 0 && v > 0 && v < (1ull << 40)) bytes = static_cast<size_t>(v) << 20;
    }
    return bytes;
  }();
  return limit;
}

std::string human_bytes(double b) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (b >= 1024 && u < 6) b /= 1024, ++u;
  std::ostringstream os;
  os.precision(u ? 3 : 20);
  os << b << " " << units[u];
  return os.str();
}
}  // namespace

size_t max_tensor_bytes() { return tensor_limit(); }
void set_max_tensor_bytes(size_t bytes) { tensor_limit() = bytes; }

int64_t checked_numel(DType dtype, const Shape& shape, const std::string& what) {
  int64_t n = 1;
  bool overflow = false;
  long double exact = 1;  // the size to report when int64 cannot hold it
  for (int64_t d : shape) {
    GR_CHECK(d >= 0, what << ": negative dimension in shape " << shape_str(shape));
    exact *= d;
    overflow |= __builtin_mul_overflow(n, d, &n);
  }
  const size_t es = std::max<size_t>(1, dtype_size(dtype));
  const long double bytes = exact * es;
  if (overflow || bytes > static_cast<long double>(max_tensor_bytes())) {
    std::ostringstream os;
    os.precision(3);
    os << static_cast<double>(exact);
    GR_FAIL(what << ": " << dtype_name(dtype) << shape_str(shape) << " has " << os.str() << " elements ("
                 << human_bytes(static_cast<double>(bytes)) << "), more than the limit of "
                 << human_bytes(static_cast<double>(max_tensor_bytes()))
                 << " for one tensor (GRAPHRUN_MAX_TENSOR_MB raises it)");
  }
  return n;
}

std::string shape_str(const Shape& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? "," : "") + std::to_string(s[i]);
  return r + "]";
}

MappedBlock map_zeroed(size_t bytes) {
  constexpr size_t kHuge = size_t(2) << 20;
  MappedBlock b;
  b.len = (std::max<size_t>(bytes, 1) + kHuge - 1) / kHuge * kHuge + kHuge;  // room to align the start
  b.base = mmap(nullptr, b.len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (b.base == MAP_FAILED) GR_FAIL_OUT_OF_MEMORY("out of memory allocating " << bytes << " bytes");
  b.data = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(b.base) + kHuge - 1) / kHuge * kHuge);
  madvise(b.data, b.len - kHuge, MADV_HUGEPAGE);  // advice only: a failure changes nothing
  return b;
}

void unmap_block(const MappedBlock& b) { munmap(b.base, b.len); }

Tensor::Tensor(DType dtype, Shape shape) : dtype_(dtype), shape_(std::move(shape)) {
  for (int64_t d : shape_) GR_CHECK(d >= 0, "negative dimension in tensor shape " << shape_str(shape_));
  GR_CHECK(dtype_size(dtype) > 0, "unsupported tensor element type " << dtype_name(dtype));
  checked_numel(dtype, shape_, "tensor");
  size_t bytes = nbytes();
  // Large tensors (a dataset, an executor's arena): faults are slow in a virtual machine, and
  // zeroing Fashion-MNIST's 188 MB of f32 images was most of `graphrun train`'s start.
  if (bytes >= kMapBytes) {
    const MappedBlock m = map_zeroed(bytes);
    storage_ = std::shared_ptr<void>(m.base, [m](void*) { unmap_block(m); });
    data_ = m.data;
    return;
  }
  size_t alloc = ((bytes + 63) / 64) * 64;
  if (alloc == 0) alloc = 64;
  void* p = std::aligned_alloc(64, alloc);
  if (!p) GR_FAIL_OUT_OF_MEMORY("out of memory allocating " << bytes << " bytes");
  std::memset(p, 0, alloc);
  storage_ = std::shared_ptr<void>(p, std::free);
  data_ = p;
}

Tensor Tensor::view(DType dtype, Shape shape, void* data, Device device) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.data_ = data;
  t.device_ = device;
  return t;
}

Tensor Tensor::adopt(DType dtype, Shape shape, std::shared_ptr<void> storage, void* data, Device device) {
  Tensor t = view(dtype, std::move(shape), data, device);
  t.storage_ = std::move(storage);
  return t;
}

void Tensor::check_type(DType want) const {
  GR_CHECK(dtype_ == want, "tensor holds " << dtype_name(dtype_) << ", read as " << dtype_name(want));
}

template <class F>
static void for_each_as(const Tensor& t, F f) {
  const void* p = t.raw();
  int64_t n = t.numel();
  switch (t.dtype()) {
    case DType::F32: for (int64_t i = 0; i < n; ++i) f(static_cast<const float*>(p)[i]); break;
    case DType::F64: for (int64_t i = 0; i < n; ++i) f(static_cast<const double*>(p)[i]); break;
    case DType::I64: for (int64_t i = 0; i < n; ++i) f(static_cast<const int64_t*>(p)[i]); break;
    case DType::I32: for (int64_t i = 0; i < n; ++i) f(static_cast<const int32_t*>(p)[i]); break;
    case DType::U32: for (int64_t i = 0; i < n; ++i) f(static_cast<const uint32_t*>(p)[i]); break;
    case DType::U64: for (int64_t i = 0; i < n; ++i) f(static_cast<const uint64_t*>(p)[i]); break;
    case DType::I16: for (int64_t i = 0; i < n; ++i) f(static_cast<const int16_t*>(p)[i]); break;
    case DType::U16: for (int64_t i = 0; i < n; ++i) f(static_cast<const uint16_t*>(p)[i]); break;
    case DType::I8: for (int64_t i = 0; i < n; ++i) f(static_cast<const int8_t*>(p)[i]); break;
    case DType::F16: for (int64_t i = 0; i < n; ++i) f(half_to_float(static_cast<const uint16_t*>(p)[i])); break;
    case DType::BF16: for (int64_t i = 0; i < n; ++i) f(bf16_to_float(static_cast<const uint16_t*>(p)[i])); break;
    case DType::U8: case DType::Bool:
      for (int64_t i = 0; i < n; ++i) f(static_cast<const uint8_t*>(p)[i]);
      break;
    default: GR_FAIL("cannot read " << dtype_name(t.dtype()) << " tensor as numbers");
  }
}

std::vector<int64_t> Tensor::as_int64s() const {
  GR_CHECK(device_.is_cpu(), "as_int64s on a " << device_.str() << " tensor");
  std::vector<int64_t> r;
  r.reserve(numel());
  for_each_as(*this, [&](auto v) { r.push_back(static_cast<int64_t>(v)); });
  return r;
}

std::vector<double> Tensor::as_doubles() const {
  GR_CHECK(device_.is_cpu(), "as_doubles on a " << device_.str() << " tensor");
  std::vector<double> r;
  r.reserve(numel());
  for_each_as(*this, [&](auto v) { r.push_back(static_cast<double>(v)); });
  return r;
}

Tensor Tensor::clone() const {
  if (!defined()) return Tensor();
  GR_CHECK(device_.is_cpu(), "clone of a " << device_.str() << " tensor needs the device runtime");
  Tensor t(dtype_, shape_);
  if (nbytes()) std::memcpy(t.data_, data_, nbytes());
  return t;
}

Tensor Tensor::reshaped(Shape shape) const {
  GR_CHECK(shape_numel(shape) == numel(),
           "cannot reshape " << shape_str(shape_) << " to " << shape_str(shape));
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

void Tensor::copy_from(const Tensor& src) {
  GR_CHECK(src.dtype_ == dtype_ && src.numel() == numel(),
           "copy_from: " << dtype_name(src.dtype_) << shape_str(src.shape_) << " into "
                         << dtype_name(dtype_) << shape_str(shape_));
  GR_CHECK(device_.is_cpu() && src.device_.is_cpu(),
           "copy_from: " << src.device_.str() << " to " << device_.str() << " needs the device runtime (runtime/device.h)");
  if (nbytes() && src.data_ != data_) std::memcpy(data_, src.data_, nbytes());
}

std::string Tensor::str(int max_elems) const {
  std::ostringstream os;
  os << dtype_name(dtype_) << shape_str(shape_);
  if (!defined() || !device_.is_cpu() || dtype_ == DType::String) return os.str();
  os << " {";
  std::vector<double> v;
  int64_t n = std::min<int64_t>(numel(), max_elems);
  Tensor head = view(dtype_, {n}, data_);
  v = head.as_doubles();
  for (int64_t i = 0; i < n; ++i) os << (i ? ", " : "") << v[i];
  if (numel() > n) os << ", ...";
  os << "}";
  return os.str();
}

}  // namespace graphrun

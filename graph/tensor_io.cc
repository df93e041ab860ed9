// Tensor files: numpy .npy (format versions 1-3, little-endian, C order) and ONNX TensorProto .pb.
#include "graph/tensor_io.h"

#include "graph/atomic_file.h"

#include <cstring>
#include <fstream>
#include <sstream>
#include <sys/stat.h>

#include "graph/onnx_tensor.h"

#include <onnx/onnx-data_pb.h>

namespace graphrun {

namespace {

std::string read_whole(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) GR_FAIL(path << ": no such file");
  if (S_ISDIR(st.st_mode)) GR_FAIL(path << ": is a directory, not a tensor file");
  std::ifstream f(path, std::ios::binary);
  if (!f) GR_FAIL(path << ": cannot open for reading");
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) GR_FAIL(path << ": read error");
  return ss.str();
}

// Whole or not at all (graph/atomic_file.h): a failed write leaves the file as it was.
void write_whole(const std::string& path, const std::string& head, const void* data, size_t n) {
  AtomicFile f(path);
  f.write(head);
  if (n) f.write(data, n);
  f.commit();
}

struct NpyType {
  const char* code;  // numpy type code without byte order: "f4", "i8", "b1"
  DType dtype;
};
const NpyType kNpyTypes[] = {{"f4", DType::F32}, {"f8", DType::F64}, {"f2", DType::F16}, {"i8", DType::I64},
                             {"i4", DType::I32}, {"i2", DType::I16}, {"i1", DType::I8},  {"u1", DType::U8},
                             {"u2", DType::U16}, {"u4", DType::U32}, {"u8", DType::U64}, {"b1", DType::Bool}};

// numpy's header: a Python dict literal {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
// padded with spaces and ended by a newline. Parsed strictly: exactly those three keys, a string, a
// boolean and a tuple of decimal integers; anything else is a corrupt file, not a guess.
struct NpyHeader {
  std::string descr;
  bool fortran = false;
  Shape shape;
};

class NpyHeaderParser {
 public:
  NpyHeaderParser(const std::string& h, const std::string& path) : h_(h), path_(path) {}

  NpyHeader parse() {
    NpyHeader r;
    bool seen_descr = false, seen_fortran = false, seen_shape = false;
    expect('{');
    for (;;) {
      skip_spaces();
      if (peek() == '}') break;
      const std::string key = string_literal("a key");
      expect(':');
      skip_spaces();
      if (key == "descr" && !seen_descr) {
        r.descr = string_literal("'descr'");
        seen_descr = true;
      } else if (key == "fortran_order" && !seen_fortran) {
        r.fortran = boolean();
        seen_fortran = true;
      } else if (key == "shape" && !seen_shape) {
        r.shape = tuple();
        seen_shape = true;
      } else {
        fail("unexpected or repeated key '" + key + "'");
      }
      skip_spaces();
      if (peek() == ',') ++pos_;
      else if (peek() != '}') fail("expected ',' or '}' after '" + key + "'");
    }
    ++pos_;
    if (!seen_descr || !seen_fortran || !seen_shape)
      fail(std::string("no '") + (!seen_descr ? "descr" : !seen_fortran ? "fortran_order" : "shape") + "'");
    while (pos_ < h_.size() && h_[pos_] == ' ') ++pos_;
    if (pos_ + 1 != h_.size() || h_[pos_] != '\n') fail("the header does not end with a newline after the dict");
    return r;
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    GR_FAIL(path_ << ": not a valid .npy file (header: " << why << ")");
  }
  char peek() const { return pos_ < h_.size() ? h_[pos_] : '\0'; }
  void skip_spaces() {
    while (pos_ < h_.size() && h_[pos_] == ' ') ++pos_;
  }
  void expect(char c) {
    skip_spaces();
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++pos_;
  }
  std::string string_literal(const std::string& what) {
    skip_spaces();
    const char q = peek();
    if (q != '\'' && q != '"') fail("expected a quoted string for " + what);
    size_t e = h_.find(q, pos_ + 1);
    if (e == std::string::npos) fail("unterminated string");
    std::string v = h_.substr(pos_ + 1, e - pos_ - 1);
    pos_ = e + 1;
    return v;
  }
  bool boolean() {
    if (h_.compare(pos_, 4, "True") == 0) return pos_ += 4, true;
    if (h_.compare(pos_, 5, "False") == 0) return pos_ += 5, false;
    fail("fortran_order is neither True nor False");
  }
  // (), (5,), (2, 3) or (2, 3,): decimal integers, each followed by at most one comma.
  Shape tuple() {
    Shape s;
    expect('(');
    for (;;) {
      skip_spaces();
      if (peek() == ')') break;
      if (peek() < '0' || peek() > '9') fail("shape entries must be non-negative decimal integers");
      int64_t d = 0;
      while (peek() >= '0' && peek() <= '9') {
        if (__builtin_mul_overflow(d, 10, &d) || __builtin_add_overflow(d, peek() - '0', &d))
          fail("a shape entry does not fit int64");
        ++pos_;
      }
      if (peek() == 'L') ++pos_;  // Python 2 longs
      s.push_back(d);
      skip_spaces();
      if (peek() == ',') ++pos_;
      else if (peek() != ')') fail("expected ',' or ')' in the shape");
    }
    ++pos_;
    return s;
  }

  const std::string& h_;
  const std::string& path_;
  size_t pos_ = 0;
};

}  // namespace

Tensor read_npy(const std::string& path) { return parse_npy(read_whole(path), path); }

Tensor parse_npy(const std::string& bytes, const std::string& path) {
  static const char kMagic[] = "\x93NUMPY";
  if (bytes.size() < 10 || bytes.compare(0, 6, kMagic, 6) != 0)
    GR_FAIL(path << ": not a .npy file (no numpy magic" << (bytes.size() < 10 ? "; file too short" : "") << ")");
  const int major = static_cast<unsigned char>(bytes[6]);
  size_t header_len, header_start;
  if (major == 1) {
    header_len = static_cast<unsigned char>(bytes[8]) | (static_cast<unsigned char>(bytes[9]) << 8);
    header_start = 10;
  } else if (major == 2 || major == 3) {
    GR_CHECK(bytes.size() >= 12, path << ": truncated .npy file (header cut short)");
    header_len = 0;
    for (int i = 3; i >= 0; --i) header_len = (header_len << 8) | static_cast<unsigned char>(bytes[8 + i]);
    header_start = 12;
  } else {
    GR_FAIL(path << ": .npy format version " << major << " is not supported (1, 2 or 3)");
  }
  GR_CHECK(header_start + header_len <= bytes.size(), path << ": truncated .npy file (header cut short)");
  const std::string header = bytes.substr(header_start, header_len);

  const NpyHeader h = NpyHeaderParser(header, path).parse();
  const std::string& descr = h.descr;
  GR_CHECK(descr.size() >= 2,
           path << ": .npy element type '" << descr << "' is not supported (structured arrays are not)");
  const char order = descr[0];
  const std::string code = descr.substr(1);
  DType dt = DType::Undefined;
  for (const auto& t : kNpyTypes)
    if (code == t.code) dt = t.dtype;
  if (dt == DType::Undefined)
    GR_FAIL(path << ": .npy element type '" << descr << "' is not supported (use float32, float64, float16, "
                 << "int64, int32, int16, int8, uint8, uint16, uint32, uint64 or bool)");
  if (order == '>' && dtype_size(dt) > 1)
    GR_FAIL(path << ": big-endian .npy data ('" << descr << "') is not supported; save it little-endian");
  GR_CHECK(order == '<' || order == '|' || order == '=' || order == '>',
           path << ": .npy element type '" << descr << "' is not supported");
  const Shape& shape = h.shape;
  const int64_t numel = checked_numel(dt, shape, path + ": .npy array");
  const size_t need = static_cast<size_t>(numel) * dtype_size(dt);
  const size_t have = bytes.size() - header_start - header_len;
  if (have < need)
    GR_FAIL(path << ": truncated .npy file (" << have << " data bytes, " << dtype_name(dt) << shape_str(shape)
                 << " needs " << need << ")");
  if (have > need)
    GR_FAIL(path << ": corrupt .npy file (" << have - need << " bytes after the data of " << dtype_name(dt)
                 << shape_str(shape) << ")");
  Tensor t(dt, shape);
  const char* data = bytes.data() + header_start + header_len;
  if (h.fortran && shape.size() > 1) {
    // Column-major (numpy saves a transposed array so): element (i0, ..., ik) at i0 + d0 (i1 + d1 (...)).
    const size_t size = dtype_size(dt);
    std::vector<int64_t> at(shape.size(), 0), stride(shape.size(), 1);
    for (size_t k = 1; k < shape.size(); ++k) stride[k] = stride[k - 1] * shape[k - 1];
    auto* out = static_cast<char*>(t.raw());
    for (int64_t i = 0; i < numel; ++i) {
      int64_t from = 0;
      for (size_t k = 0; k < shape.size(); ++k) from += at[k] * stride[k];
      std::memcpy(out + static_cast<size_t>(i) * size, data + static_cast<size_t>(from) * size, size);
      for (size_t k = shape.size(); k-- > 0;) {  // the C-order index of i + 1
        if (++at[k] < shape[k]) break;
        at[k] = 0;
      }
    }
  } else if (need) {
    std::memcpy(t.raw(), data, need);
  }
  if (dt == DType::Bool) {
    auto* p = static_cast<uint8_t*>(t.raw());
    for (int64_t i = 0; i < numel; ++i) p[i] = p[i] != 0;
  }
  return t;
}

void write_npy(const std::string& path, const Tensor& t) {
  GR_CHECK(t.defined(), path << ": no tensor to write");
  GR_CHECK(t.device().is_cpu(), path << ": tensor is on " << t.device().str() << ", copy it to the host first");
  const char* code = nullptr;
  for (const auto& e : kNpyTypes)
    if (e.dtype == t.dtype()) code = e.code;
  GR_CHECK(code, path << ": element type " << dtype_name(t.dtype()) << " has no .npy equivalent");
  std::string shape = "(";
  for (size_t i = 0; i < t.shape().size(); ++i) shape += std::to_string(t.shape()[i]) + ", ";
  if (t.shape().size() > 1) shape.resize(shape.size() - 2);
  else if (t.shape().size() == 1) shape.resize(shape.size() - 1);
  shape += ")";
  std::string dict = std::string("{'descr': '") + (dtype_size(t.dtype()) == 1 ? "|" : "<") + code +
                     "', 'fortran_order': False, 'shape': " + shape + ", }";
  // numpy pads the header with spaces so the data starts at a multiple of 64 bytes.
  size_t total = 10 + dict.size() + 1;
  dict += std::string((64 - total % 64) % 64, ' ') + "\n";
  GR_CHECK(dict.size() < 65536, path << ": shape too long for a .npy header");
  std::string head = std::string("\x93NUMPY\x01\x00", 8);
  head += static_cast<char>(dict.size() & 0xff);
  head += static_cast<char>(dict.size() >> 8);
  head += dict;
  write_whole(path, head, t.raw(), t.nbytes());
}

Tensor read_tensor_pb(const std::string& path, const std::string& expected_name) {
  return parse_tensor_pb(read_whole(path), path, expected_name);
}

Tensor parse_tensor_pb(const std::string& bytes, const std::string& path, const std::string& expected_name) {
  onnx::TensorProto p;
  if (bytes.empty() || !p.ParseFromString(bytes))
    GR_FAIL(path << ": not an ONNX TensorProto file (truncated, corrupt or another format)");
  if (!p.has_data_type() || p.data_type() == onnx::TensorProto::UNDEFINED)
    GR_FAIL(path << ": not an ONNX TensorProto file (no element type)");
  if (!expected_name.empty() && p.has_name() && !p.name().empty() && p.name() != expected_name)
    GR_FAIL(path << ": holds the tensor '" << p.name() << "', not '" << expected_name
                 << "' (is the file meant for another input?)");
  return tensor_from_proto(p, path);
}

void write_tensor_pb(const std::string& path, const Tensor& t, const std::string& name) {
  onnx::TensorProto p;
  tensor_to_proto(t, name, &p);
  std::string out;
  GR_CHECK(p.SerializeToString(&out), path << ": cannot serialize the tensor (over 2 GiB?)");
  write_whole(path, out, nullptr, 0);
}

Tensor read_tensor_file(const std::string& path, const std::string& expected_name) {
  auto ends_with = [&](const char* ext) {
    size_t n = std::strlen(ext);
    return path.size() >= n && path.compare(path.size() - n, n, ext) == 0;
  };
  if (ends_with(".npy")) return read_npy(path);
  if (ends_with(".pb")) return read_tensor_pb(path, expected_name);
  GR_FAIL(path << ": unknown tensor file type (expected a .npy or .pb file)");
}

std::string CompositeValue::type() const {
  return !optional ? "sequence" : sequence ? "optional(sequence)" : "optional";
}

namespace {

// onnx's SequenceProto::DataType and OptionalProto::DataType share these numbers.
constexpr int32_t kElemTensor = 1, kElemSequence = 3;

std::vector<Tensor> sequence_tensors(const onnx::SequenceProto& s, const std::string& path) {
  GR_CHECK(s.elem_type() == kElemTensor || (s.elem_type() == 0 && s.tensor_values_size() == 0),
           path << ": the sequence holds "
                << (s.elem_type() == kElemSequence ? "sequences" : "values other than tensors")
                << "; graphrun reads sequences of tensors only");
  GR_CHECK(s.tensor_values_size() <= kMaxSequenceLength,
           path << ": the sequence holds " << s.tensor_values_size() << " tensors; graphrun takes at most "
                << kMaxSequenceLength << " (each becomes an input of the graph)");
  std::vector<Tensor> r;
  for (const auto& t : s.tensor_values()) r.push_back(tensor_from_proto(t, path));
  return r;
}

}  // namespace

CompositeValue parse_composite_pb(const std::string& bytes, const std::string& path, bool optional,
                                  const std::string& expected_name) {
  CompositeValue v;
  v.optional = optional;
  if (bytes.empty()) GR_FAIL(path << ": empty file, not an ONNX " << (optional ? "OptionalProto" : "SequenceProto"));
  auto check_name = [&](const std::string& name) {
    if (!expected_name.empty() && !name.empty() && name != expected_name)
      GR_FAIL(path << ": holds the " << (optional ? "optional" : "sequence") << " '" << name << "', not '"
                   << expected_name << "' (is the file meant for another input?)");
  };
  if (!optional) {
    onnx::SequenceProto s;
    if (!s.ParseFromString(bytes))
      GR_FAIL(path << ": not an ONNX SequenceProto file (truncated, corrupt or another format)");
    check_name(s.name());
    v.tensors = sequence_tensors(s, path);
    return v;
  }
  onnx::OptionalProto o;
  if (!o.ParseFromString(bytes))
    GR_FAIL(path << ": not an ONNX OptionalProto file (truncated, corrupt or another format)");
  check_name(o.name());
  if (o.has_tensor_value()) {
    v.sequence = false;
    v.tensors.push_back(tensor_from_proto(o.tensor_value(), path));
  } else if (o.has_sequence_value()) {
    v.tensors = sequence_tensors(o.sequence_value(), path);
  } else {
    GR_CHECK(o.elem_type() == kElemTensor || o.elem_type() == kElemSequence || o.elem_type() == 0,
             path << ": the optional holds a value other than a tensor or a sequence of tensors");
    v.none = true;
    v.sequence = o.elem_type() != kElemTensor;
  }
  return v;
}

CompositeValue read_composite_pb(const std::string& path, bool optional, const std::string& expected_name) {
  return parse_composite_pb(read_whole(path), path, optional, expected_name);
}

void write_composite_pb(const std::string& path, const CompositeValue& v, const std::string& name) {
  auto fill = [&](onnx::SequenceProto& s) {
    s.set_elem_type(kElemTensor);
    for (const Tensor& t : v.tensors) tensor_to_proto(t, "", s.add_tensor_values());
  };
  std::string out;
  bool ok;
  if (!v.optional) {
    onnx::SequenceProto s;
    s.set_name(name);
    fill(s);
    ok = s.SerializeToString(&out);
  } else {
    onnx::OptionalProto o;
    o.set_name(name);
    o.set_elem_type(v.sequence ? kElemSequence : kElemTensor);
    if (!v.none && v.sequence) fill(*o.mutable_sequence_value());
    if (!v.none && !v.sequence) tensor_to_proto(v.tensors.at(0), "", o.mutable_tensor_value());
    ok = o.SerializeToString(&out);
  }
  GR_CHECK(ok, path << ": cannot serialize the " << v.type() << " (over 2 GiB?)");
  write_whole(path, out, nullptr, 0);
}

}  // namespace graphrun

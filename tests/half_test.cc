// float16 and bfloat16 on the CPU: conversion bits against numpy (float16) and torch.bfloat16, Cast between
// the half types and every numeric type, elementwise ops, MatMul/Gemm, Conv, pooling, normalisation and Softmax
// computed in float, files and printing.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>

#include <onnx/onnx_pb.h>

#include "graph/half.h"
#include "graph/tensor_io.h"
#include "tests/math_test_util.h"

namespace graphrun {
namespace {

using mathtest::make;
using mathtest::run_op;

float from_bits(uint32_t x) { float f; std::memcpy(&f, &x, 4); return f; }
uint32_t bits(float f) { uint32_t x; std::memcpy(&x, &f, 4); return x; }
double from_bits64(uint64_t x) { double d; std::memcpy(&d, &x, 8); return d; }

Tensor half_bits(DType dt, const Shape& shape, const std::vector<uint16_t>& v) {
  Tensor t(dt, shape);
  std::memcpy(t.raw(), v.data(), 2 * v.size());
  return t;
}
std::vector<uint16_t> bits_of(const Tensor& t) {
  const auto* p = static_cast<const uint16_t*>(t.raw());
  return std::vector<uint16_t>(p, p + t.numel());
}
std::string error_text(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}
Tensor cast(const Tensor& x, DType to) {
  return run_op("Cast", {x}, {{"to", Attribute::Int(static_cast<int64_t>(to))}})[0];
}

// Inputs (float32 bits) and what numpy 1.24's astype(float16) and torch 1.13's .to(torch.bfloat16) give:
// zeros, max finite and the overflow tie 65520, the smallest normal/subnormals and a value under half the
// smallest subnormal, ties to even in the mantissa, inf, and NaNs (quiet, negative, signalling, payloads).
struct Edge {
  uint32_t f32;
  uint16_t f16, bf16;
};
const Edge kEdges[] = {
    {0x00000000, 0x0000, 0x0000}, {0x80000000, 0x8000, 0x8000}, {0x3f800000, 0x3c00, 0x3f80},
    {0xc0200000, 0xc100, 0xc020}, {0x477fe000, 0x7bff, 0x4780}, {0x477feffd, 0x7bff, 0x4780},
    {0x477ff000, 0x7c00, 0x4780}, {0x49742400, 0x7c00, 0x4974}, {0xc9742400, 0xfc00, 0xc974},
    {0x38800000, 0x0400, 0x3880}, {0x387fc000, 0x03ff, 0x3880}, {0x33800000, 0x0001, 0x3380},
    {0x33000000, 0x0000, 0x3300}, {0x33000001, 0x0001, 0x3300}, {0x3089705f, 0x0000, 0x3089},
    {0x3f801000, 0x3c00, 0x3f80}, {0x3f803000, 0x3c02, 0x3f80}, {0x3f801800, 0x3c01, 0x3f80},
    {0x3dcccccd, 0x2e66, 0x3dcd}, {0x40490fdb, 0x4248, 0x4049}, {0x7f800000, 0x7c00, 0x7f80},
    {0xff800000, 0xfc00, 0xff80},
};
// bfloat16 ties and carries (torch.bfloat16): 1+2^-8 (tie, even down), 1+3*2^-8 (tie, up), above the tie,
// float max (rounds to inf), subnormal ties.
const std::pair<uint32_t, uint16_t> kBf16Ties[] = {{0x3f808000, 0x3f80}, {0x3f818000, 0x3f82}, {0x3f808001, 0x3f81},
                                                   {0x7f7fffff, 0x7f80}, {0x00008000, 0x0000}, {0x00018000, 0x0002},
                                                   {0x00010000, 0x0001}, {0x80008000, 0x8000}};
// float NaN bits -> numpy float16 bits (the sign and top payload bits kept, never inf).
const std::pair<uint32_t, uint16_t> kF16Nans[] = {
    {0x7fc00000, 0x7e00}, {0xffc00000, 0xfe00}, {0x7f800001, 0x7c01}, {0x7fa00000, 0x7d00}};

TEST(Half, FloatToHalfMatchesNumpy) {
  for (const Edge& e : kEdges) EXPECT_EQ(float_to_half(from_bits(e.f32)), e.f16) << std::hex << e.f32;
  for (auto [f, h] : kF16Nans) EXPECT_EQ(float_to_half(from_bits(f)), h) << std::hex << f;
}

TEST(Half, FloatToBf16MatchesTorch) {
  for (const Edge& e : kEdges) EXPECT_EQ(float_to_bf16(from_bits(e.f32)), e.bf16) << std::hex << e.f32;
  for (auto [f, h] : kBf16Ties) EXPECT_EQ(float_to_bf16(from_bits(f)), h) << std::hex << f;
  // torch's vectorised path gives 0xffff for every NaN, its scalar path 0x7fc0: any quiet NaN is right;
  // graphrun gives the quiet NaN with the input's sign (Eigen's choice).
  for (auto [f, h] : kF16Nans) {
    uint16_t b = float_to_bf16(from_bits(f));
    EXPECT_TRUE(std::isnan(bf16_to_float(b))) << std::hex << f;
    EXPECT_EQ(b, (f >> 31 ? 0xffc0 : 0x7fc0)) << std::hex << f;
  }
}

// The bit paths from float and the exact path through long double are two implementations of one rounding:
// they agree on a stride through every float bit pattern (all signs, exponents, subnormals, NaNs).
TEST(Half, FloatAndWidePathsAgree) {
  for (uint64_t x = 0; x <= 0xffffffffull; x += 997) {
    float f = from_bits(static_cast<uint32_t>(x));
    if (std::isnan(f)) continue;
    ASSERT_EQ(float_to_half(f), wide_to_half(f)) << std::hex << x;
    ASSERT_EQ(float_to_bf16(f), wide_to_bf16(f)) << std::hex << x;
  }
}

TEST(Half, EveryHalfRoundTripsThroughFloat) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const auto v = static_cast<uint16_t>(h);
    float f = half_to_float(v);
    ASSERT_EQ(float_to_half(f), v) << std::hex << h;
    // (float -> double quiets a signalling NaN, as it does in numpy, so NaNs only stay NaN there.)
    if (std::isnan(f)) ASSERT_TRUE(std::isnan(half_to_float(wide_to_half(static_cast<double>(f)))));
    else ASSERT_EQ(wide_to_half(static_cast<double>(f)), v) << std::hex << h;
    float b = bf16_to_float(v);
    if (std::isnan(b)) ASSERT_TRUE(std::isnan(bf16_to_float(float_to_bf16(b))));
    else ASSERT_EQ(float_to_bf16(b), v) << std::hex << h;
  }
  EXPECT_EQ(bits(half_to_float(0x0001)), 0x33800000u);  // numpy: the smallest subnormal, 2^-24
  EXPECT_EQ(bits(half_to_float(0x03ff)), 0x387fc000u);
  EXPECT_EQ(bits(half_to_float(0x8001)), 0xb3800000u);
  EXPECT_EQ(bits(half_to_float(0x7e00)), 0x7fc00000u);
}

// numpy's float64 -> float16 rounds once; through float it would round twice (1+2^-11+2^-40 is a tie in
// float, and 2^-25+2^-60 half the smallest subnormal).
TEST(Half, DoubleRoundsOnce) {
  EXPECT_EQ(wide_to_half(1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40)), 0x3c01);
  EXPECT_EQ(wide_to_half(1.0 + std::ldexp(1.0, -11)), 0x3c00);
  EXPECT_EQ(wide_to_half(65519.999999), 0x7bff);
  EXPECT_EQ(wide_to_half(std::ldexp(1.0, -25) + std::ldexp(1.0, -60)), 0x0001);
  EXPECT_EQ(wide_to_half(std::ldexp(1.0, -25)), 0x0000);
  EXPECT_EQ(wide_to_half(1e300), 0x7c00);
  EXPECT_EQ(wide_to_half(-1e300), 0xfc00);
  EXPECT_EQ(wide_to_half(0.1), 0x2e66);
  EXPECT_EQ(wide_to_half(from_bits64(0x7ff8000000000000ull)), 0x7e00);
  EXPECT_EQ(wide_to_bf16(1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40)), 0x3f81);
  EXPECT_EQ(wide_to_bf16(1e300), 0x7f80);
  // int64 2^62 + 2^54 + 1 lies just above a bfloat16 tie; through double it would land on the tie.
  Tensor big = Tensor::from_vector<int64_t>({1}, {(int64_t{1} << 62) + (int64_t{1} << 54) + 1});
  EXPECT_EQ(bits_of(cast(big, DType::BF16)), std::vector<uint16_t>{0x5e81});
}

TEST(Half, CastKernelGivesTheReferenceBits) {
  std::vector<float> in;
  std::vector<uint16_t> want16, wantbf;
  for (const Edge& e : kEdges) {
    in.push_back(from_bits(e.f32));
    want16.push_back(e.f16);
    wantbf.push_back(e.bf16);
  }
  Tensor x = Tensor::from_vector<float>({static_cast<int64_t>(in.size())}, in);
  Tensor h = cast(x, DType::F16), b = cast(x, DType::BF16);
  EXPECT_EQ(h.dtype(), DType::F16);
  EXPECT_EQ(bits_of(h), want16);
  EXPECT_EQ(bits_of(b), wantbf);
  // CastLike takes the type of its second input.
  EXPECT_EQ(bits_of(run_op("CastLike", {x, half_bits(DType::BF16, {1}, {0})})[0]), wantbf);
  // Back to float: exact.
  Tensor back = cast(h, DType::F32);
  for (size_t i = 0; i < want16.size(); ++i) EXPECT_EQ(bits(back.data<float>()[i]), bits(half_to_float(want16[i])));
}

// Every numeric type to float16/bfloat16 and back (numpy: int -> float16 -> int on these values is exact),
// and between the two half types.
TEST(Half, CastBetweenHalfAndEveryNumericType) {
  const std::vector<double> v = {0, 1, 2, 3, 7, 100, 255};
  const std::vector<double> s = {-128, -3, -1, 0, 1, 5, 127};
  for (DType t : {DType::F32, DType::F64, DType::I8, DType::I16, DType::I32, DType::I64, DType::U8, DType::U16,
                  DType::U32, DType::U64, DType::Bool}) {
    const bool sign = t != DType::U8 && t != DType::U16 && t != DType::U32 && t != DType::U64 && t != DType::Bool;
    std::vector<double> vals = t == DType::Bool ? std::vector<double>{0, 1, 1, 0, 1, 0, 0} : (sign ? s : v);
    Tensor x = make(t, {7}, vals);
    for (DType h : {DType::F16, DType::BF16}) {
      Tensor y = cast(x, h);
      ASSERT_EQ(y.dtype(), h);
      EXPECT_EQ(y.as_doubles(), vals) << dtype_name(t) << " -> " << dtype_name(h);
      Tensor z = cast(y, t);
      ASSERT_EQ(z.dtype(), t);
      EXPECT_EQ(z.as_doubles(), vals) << dtype_name(h) << " -> " << dtype_name(t);
    }
  }
  // f16 -> bf16 rounds once (bf16 has fewer mantissa bits); bf16 -> f16 overflows and underflows.
  EXPECT_EQ(bits_of(cast(half_bits(DType::F16, {2}, {0x3c03, 0x3c04}), DType::BF16)), (std::vector<uint16_t>{0x3f80, 0x3f80}));
  EXPECT_EQ(bits_of(cast(half_bits(DType::BF16, {3}, {0x4780, 0x3380, 0x3300}), DType::F16)),
            (std::vector<uint16_t>{0x7c00, 0x0001, 0x0000}));
  // f16 -> bool: nonzero is true, -0 is false.
  EXPECT_EQ(cast(half_bits(DType::F16, {3}, {0x8000, 0x0001, 0x7e00}), DType::Bool).as_doubles(),
            (std::vector<double>{0, 1, 1}));
}

// Computed in float and rounded once: each output is the float kernel's output (on the inputs widened) rounded to
// the half type, bit for bit; outputs in f32_outputs (bit i: output i) stay float32 and equal the float kernel's.
void expect_as_float(const std::string& op, const std::vector<Tensor>& half_inputs,
                     const std::map<std::string, Attribute>& attrs = {}, int num_outputs = 1, unsigned f32_outputs = 0) {
  std::vector<Tensor> wide;
  for (const Tensor& t : half_inputs) wide.push_back(dtype_is_float(t.dtype()) && t.dtype() != DType::F64 ? cast(t, DType::F32) : t);
  const std::vector<Tensor> want = run_op(op, wide, attrs, num_outputs), got = run_op(op, half_inputs, attrs, num_outputs);
  DType h = DType::Undefined;
  for (const Tensor& t : half_inputs)
    if (h == DType::Undefined && (t.dtype() == DType::F16 || t.dtype() == DType::BF16)) h = t.dtype();
  for (int i = 0; i < num_outputs; ++i) {
    const Tensor &want32 = want[i], &g = got[i];
    const bool narrowed = want32.dtype() == DType::F32 && !(f32_outputs >> i & 1u);
    ASSERT_EQ(g.dtype(), narrowed ? h : want32.dtype()) << op << " output " << i;
    ASSERT_EQ(g.shape(), want32.shape()) << op;
    if (narrowed) EXPECT_EQ(bits_of(g), bits_of(cast(want32, h))) << op << " " << dtype_name(h) << " output " << i;
    else EXPECT_EQ(std::memcmp(g.raw(), want32.raw(), g.nbytes()), 0) << op << " output " << i;
  }
}

TEST(Half, ElementwiseOpsComputeInFloat) {
  for (DType h : {DType::F16, DType::BF16}) {
    Tensor a = cast(testing::random_tensor({3, 4}, 1, -3, 3), h), b = cast(testing::random_tensor({4}, 2, 0.5, 2), h);
    for (const char* op : {"Add", "Sub", "Mul", "Div", "Max", "Min", "Sum", "Mean", "Pow"}) expect_as_float(op, {a, b});
    for (const char* op : {"Relu", "Neg", "Abs", "Exp", "Tanh", "Sigmoid", "Sqrt", "Erf", "Floor", "Identity"})
      expect_as_float(op, {op == std::string("Sqrt") ? b : a});
    expect_as_float("LeakyRelu", {a}, {{"alpha", Attribute::Float(0.1f)}});
    for (const char* op : {"Equal", "Less", "Greater"}) expect_as_float(op, {a, b});
    expect_as_float("Where", {make(DType::Bool, {4}, {1, 0, 0, 1}), a, b});
    expect_as_float("Clip", {a, cast(Tensor::scalar<float>(-1), h), cast(Tensor::scalar<float>(1), h)});
    // The type follows the first float input: Pow(half, float) is half.
    Tensor p = run_op("Pow", {a, Tensor::scalar<float>(2)})[0];
    EXPECT_EQ(p.dtype(), h);
    EXPECT_EQ(bits_of(p), bits_of(cast(run_op("Pow", {cast(a, DType::F32), Tensor::scalar<float>(2)})[0], h)));
  }
  // Rounding at the end, not per step: float16 1 + 2^-11 is a tie that the sum of halves cannot see.
  Tensor one = half_bits(DType::F16, {1}, {0x3c00}), tiny = half_bits(DType::F16, {1}, {0x1000});  // 2^-11
  EXPECT_EQ(bits_of(run_op("Add", {one, tiny})[0]), std::vector<uint16_t>{0x3c00});
  EXPECT_EQ(bits_of(run_op("Add", {half_bits(DType::F16, {1}, {0x3c01}), tiny})[0]), std::vector<uint16_t>{0x3c02});
  // Overflow to inf, NaN through.
  Tensor big = half_bits(DType::F16, {2}, {0x7bff, 0x7e00});
  EXPECT_EQ(bits_of(run_op("Add", {big, big})[0]), (std::vector<uint16_t>{0x7c00, 0x7e00}));
}

TEST(Half, MatMulAndGemmComputeInFloat) {
  for (DType h : {DType::F16, DType::BF16}) {
    Tensor a = cast(testing::random_tensor({2, 3, 5}, 3), h), b = cast(testing::random_tensor({5, 4}, 4), h);
    expect_as_float("MatMul", {a, b});
    Tensor a2 = cast(testing::random_tensor({5, 3}, 5), h), c = cast(testing::random_tensor({4}, 6), h);
    expect_as_float("Gemm", {a2, b, c}, {{"transA", Attribute::Int(1)}, {"alpha", Attribute::Float(0.5f)}});
  }
}

TEST(Half, ConvPoolNormSoftmaxComputeInFloat) {
  using A = Attribute;
  for (DType h : {DType::F16, DType::BF16}) {
    SCOPED_TRACE(dtype_name(h));
    auto r = [&](const Shape& s, uint64_t seed, double lo = -2, double hi = 2) {
      return cast(testing::random_tensor(s, seed, lo, hi), h);
    };
    Tensor x = r({2, 4, 5, 5}, 11);
    expect_as_float("Conv", {x, r({6, 2, 3, 3}, 12), r({6}, 13)},
                    {{"pads", A::Ints({1, 0, 1, 2})}, {"strides", A::Ints({2, 1})}, {"group", A::Int(2)}});
    expect_as_float("Conv", {x, r({3, 4, 1, 1}, 14)});
    expect_as_float("MaxPool", {x}, {{"kernel_shape", A::Ints({3, 2})}, {"pads", A::Ints({1, 0, 1, 1})}}, 2);
    expect_as_float("AveragePool", {x}, {{"kernel_shape", A::Ints({3, 3})}, {"pads", A::Ints({1, 1, 1, 1})}});
    expect_as_float("AveragePool", {x},
                    {{"kernel_shape", A::Ints({2, 2})}, {"strides", A::Ints({2, 2})}, {"count_include_pad", A::Int(1)}});
    expect_as_float("GlobalAveragePool", {x});
    expect_as_float("GlobalMaxPool", {x});
    const std::vector<Tensor> bn{x, r({4}, 15), r({4}, 16), r({4}, 17), r({4}, 18, 0.5, 2)};
    expect_as_float("BatchNormalization", bn, {{"epsilon", A::Float(1e-3f)}});
    // Parameters in float32 beside a half X (opset 15's T1/T2): the output follows X.
    std::vector<Tensor> bn_mixed{x};
    for (size_t i = 1; i < bn.size(); ++i) bn_mixed.push_back(cast(bn[i], DType::F32));
    expect_as_float("BatchNormalization", bn_mixed);
    // LayerNormalization's Mean and InvStdDev have the stash type (float32), not X's.
    Tensor x3 = r({2, 3, 8}, 19);
    expect_as_float("LayerNormalization", {x3, r({8}, 20), r({8}, 21)}, {}, 3, 0b110);
    expect_as_float("LayerNormalization", {x3, r({3, 8}, 22)}, {{"axis", A::Int(1)}}, 3, 0b110);
    expect_as_float("InstanceNormalization", {x, r({4}, 23), r({4}, 24)});
    for (const char* op : {"Softmax", "LogSoftmax"}) {
      expect_as_float(op, {x3});
      expect_as_float(op, {x3}, {{"axis", A::Int(1)}});
    }
  }
  // One rounding at the end: float16 softmax of two equal values is exactly 0.5.
  Tensor eq = half_bits(DType::F16, {1, 2}, {0x3c00, 0x3c00});
  EXPECT_EQ(bits_of(run_op("Softmax", {eq})[0]), (std::vector<uint16_t>{0x3800, 0x3800}));
}

// Training-mode BatchNormalization would give running statistics X's type, not input_mean's: refused in one line.
TEST(Half, BatchNormTrainingModeRefused) {
  Tensor x = cast(testing::random_tensor({2, 3, 2, 2}, 1), DType::F16), p = cast(testing::random_tensor({3}, 2, 0.5, 1), DType::F16);
  const std::string e = error_text([&] {
    run_op("BatchNormalization", {x, p, p, p, p}, {{"training_mode", Attribute::Int(1)}}, 3);
  });
  EXPECT_NE(e.find("training mode on f16 is not supported"), std::string::npos) << e;
  EXPECT_NE(e.find("BatchNormalization"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
}

TEST(Half, FilesAndPrinting) {
  const std::string dir = testing::temp_dir("half_files");
  Tensor h = half_bits(DType::F16, {2, 2}, {0x3c00, 0xc100, 0x7c00, 0x0001});
  write_npy(dir + "/h.npy", h);
  Tensor r = read_npy(dir + "/h.npy");
  EXPECT_EQ(r.dtype(), DType::F16);
  EXPECT_EQ(bits_of(r), bits_of(h));
  std::ifstream f(dir + "/h.npy", std::ios::binary);
  std::string header(64, '\0');
  f.read(&header[0], 64);
  EXPECT_NE(header.find("'<f2'"), std::string::npos) << header;
  for (DType t : {DType::F16, DType::BF16}) {
    Tensor x = half_bits(t, {3}, {0x3c00, 0x4000, 0x8000});
    write_tensor_pb(dir + "/x.pb", x, "x");
    Tensor y = read_tensor_pb(dir + "/x.pb", "x");
    EXPECT_EQ(y.dtype(), t);
    EXPECT_EQ(bits_of(y), bits_of(x));
  }
  EXPECT_EQ(h.str(), "f16[2,2] {1, -2.5, inf, 5.96046e-08}");
  EXPECT_EQ(half_bits(DType::BF16, {2}, {0x3f80, 0x4049}).str(), "bf16[2] {1, 3.14062}");
}

}  // namespace
}  // namespace graphrun

namespace graphrun {
namespace {

// A hostile file asks for more float16 elements than it holds: refused before anything is allocated.
TEST(Half, FilesSizedFromTheirBytes) {
  onnx::TensorProto p;
  p.set_name("x");
  p.set_data_type(onnx::TensorProto::FLOAT16);
  p.add_dims(int64_t{1} << 40);
  p.set_raw_data(std::string(4, '\0'));
  std::string e = error_text([&] { parse_tensor_pb(p.SerializeAsString(), "x.pb"); });
  EXPECT_NE(e.find("x.pb"), std::string::npos) << e;
  p.clear_dims();
  p.add_dims(3);
  p.clear_raw_data();
  p.add_int32_data(0x3c00);  // float16 in int32_data: one value each, as the ONNX spec says
  e = error_text([&] { parse_tensor_pb(p.SerializeAsString(), "x.pb"); });
  EXPECT_NE(e.find("int32_data holds 1 values"), std::string::npos) << e;
  p.add_int32_data(0x4000);
  p.add_int32_data(0xbc00);
  Tensor t = parse_tensor_pb(p.SerializeAsString(), "x.pb");
  EXPECT_EQ(t.dtype(), DType::F16);
  EXPECT_EQ(t.as_doubles(), (std::vector<double>{1, 2, -1}));

  std::string h = "{'descr': '<f2', 'fortran_order': False, 'shape': (1000000, 1000000), }";
  while ((10 + h.size() + 1) % 64) h += ' ';
  h += '\n';
  std::string npy = std::string("\x93NUMPY\x01\x00", 8) + char(h.size()) + char(h.size() >> 8) + h + std::string(8, '\0');
  e = error_text([&] { parse_npy(npy, "big.npy"); });
  EXPECT_NE(e.find("big.npy"), std::string::npos) << e;
}

// graphrun run prints half outputs as numbers and writes bfloat16 as .pb; graphrun train refuses f16
// parameters with one line and exit 2.
TEST(Half, RunPrintsAndTrainRefuses) {
  const std::string dir = testing::temp_dir("half_cli");
  auto py = testing::run_command("cd '" + dir + "' && " + testing::python() + " -c \"\n"
      "import onnx, numpy as np\n"
      "from onnx import helper, TensorProto as T, numpy_helper\n"
      "W = numpy_helper.from_array((np.arange(12, dtype=np.float16) / 8).reshape(3, 4), 'W')\n"
      "b = helper.make_tensor('b', T.FLOAT16, [4], np.array([0.5, -1, 2, 0], np.float16))\n"
      "n = [helper.make_node('MatMul', ['x', 'W'], ['m']), helper.make_node('Add', ['m', 'b'], ['a']),\n"
      "     helper.make_node('Relu', ['a'], ['y']), helper.make_node('Cast', ['y'], ['ybf'], to=T.BFLOAT16)]\n"
      "g = helper.make_graph(n, 'g', [helper.make_tensor_value_info('x', T.FLOAT16, [2, 3])],\n"
      "    [helper.make_tensor_value_info('y', T.FLOAT16, [2, 4]), helper.make_tensor_value_info('ybf', T.BFLOAT16, [2, 4])], [W, b])\n"
      "onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid('', 17)]), 'f16.onnx')\n"
      "np.save('x.npy', np.array([[1, 2, 3], [-1, 0.5, 0.25]], np.float16))\n"
      "W = numpy_helper.from_array(np.zeros((784, 10), np.float16), 'W')\n"
      "n = [helper.make_node('Flatten', ['image'], ['f']), helper.make_node('Cast', ['f'], ['h'], to=T.FLOAT16),\n"
      "     helper.make_node('MatMul', ['h', 'W'], ['m']), helper.make_node('Cast', ['m'], ['logits'], to=T.FLOAT)]\n"
      "g = helper.make_graph(n, 'g', [helper.make_tensor_value_info('image', T.FLOAT, ['N', 1, 28, 28])],\n"
      "    [helper.make_tensor_value_info('logits', T.FLOAT, ['N', 10])], [W])\n"
      "onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid('', 17)]), 'train16.onnx')\n"
      "g = helper.make_graph([helper.make_node('Cast', ['ybf'], ['f'], to=T.FLOAT)], 'g',\n"
      "    [helper.make_tensor_value_info('ybf', T.BFLOAT16, [2, 4])], [helper.make_tensor_value_info('f', T.FLOAT, [2, 4])])\n"
      "onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid('', 17)]), 'bf16in.onnx')\n"
      "np.save('u2.npy', np.zeros((2, 4), np.uint16))\n\"");
  ASSERT_EQ(py.exit_code, 0) << py.output;
  auto run = testing::run_command("cd '" + dir + "' && '" + testing::graphrun_cli() +
                                  "' run f16.onnx --input x=x.npy --output-dir out");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  // numpy: relu(float16(x @ W) + b) = [[4.5, 3.75, 7.5, 6.25], [1, 0, 2.438, 0.4062]]
  EXPECT_NE(run.output.find("y: f16[2,4] {4.5, 3.75, 7.5, 6.25, 1, 0, ...}  -> out/y.npy"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("ybf: bf16[2,4] {4.5, 3.75, 7.5, 6.25, 1, 0, ...}  -> out/ybf.pb"), std::string::npos) << run.output;
  Tensor y = read_npy(dir + "/out/y.npy"), ybf = read_tensor_pb(dir + "/out/ybf.pb", "ybf");
  EXPECT_EQ(bits_of(y), (std::vector<uint16_t>{0x4480, 0x4380, 0x4780, 0x4640, 0x3c00, 0x0000, 0x40e0, 0x3680}));
  EXPECT_EQ(ybf.dtype(), DType::BF16);
  EXPECT_EQ(ybf.as_doubles(), y.as_doubles());
  // The .pb written for a bfloat16 output is a bfloat16 input of another model; a .npy cannot be one.
  auto back = testing::run_command("cd '" + dir + "' && '" + testing::graphrun_cli() +
                                   "' run bf16in.onnx --input ybf=out/ybf.pb");
  ASSERT_EQ(back.exit_code, 0) << back.output;
  EXPECT_NE(back.output.find("f: f32[2,4] {4.5, 3.75, 7.5, 6.25, 1, 0, ...}"), std::string::npos) << back.output;
  auto npy = testing::run_command("cd '" + dir + "' && '" + testing::graphrun_cli() +
                                  "' run bf16in.onnx --input ybf=u2.npy");
  EXPECT_EQ(npy.exit_code, 2) << npy.output;
  EXPECT_NE(npy.output.find("input 'ybf' from u2.npy is u16[2,4], but the model expects bf16[2,4] (numpy has no bfloat16: give a .pb"), std::string::npos)
      << npy.output;
  auto train = testing::run_command("cd '" + dir + "' && '" + testing::graphrun_cli() +
                                    "' train train16.onnx --max-steps 1 --devices cpu:1");
  EXPECT_EQ(train.exit_code, 2) << train.output;
  EXPECT_NE(train.output.find("parameter 'W' is f16; graphrun trains f32 (or f64) parameters only"), std::string::npos) << train.output;
}

}  // namespace
}  // namespace graphrun

// float16/bfloat16 <-> float/double conversions (see half.h for the rounding and NaN conventions).
#include "graph/half.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace graphrun {

namespace {

uint32_t bits_of(float f) { uint32_t x; std::memcpy(&x, &f, 4); return x; }
float float_of(uint32_t x) { float f; std::memcpy(&f, &x, 4); return f; }

// |d| (finite, not NaN) in a binary format with `man` stored mantissa bits and exponent bias `bias`:
// the magnitude bits. The significand (hidden bit included) is rounded as an integer by nearbyint (ties
// to even); subnormals share the minimum exponent, and a carry out of the significand moves into the
// exponent field by plain addition, so one formula covers subnormal, normal and overflow to inf.
uint32_t round_magnitude(long double a, int man, int bias, uint32_t inf_bits) {
  if (a == 0) return 0;
  int e;
  std::frexp(a, &e);            // a = m * 2^e, m in [0.5, 1)
  int exp = std::max(e - 1, 1 - bias);
  long double q = std::nearbyint(std::ldexp(a, man - exp));  // exact scaling; rounds half to even
  long double bits = std::ldexp(static_cast<long double>(exp + bias - 1), man) + q;
  return bits >= inf_bits ? inf_bits : static_cast<uint32_t>(bits);
}

}  // namespace

float half_to_float(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  if (exp == 31) return float_of(sign | 0x7f800000u | man << 13);
  if (exp == 0) {  // zero or subnormal: man * 2^-24, exact in float
    float v = std::ldexp(static_cast<float>(man), -24);
    return sign ? -v : v;
  }
  return float_of(sign | (exp + 112) << 23 | man << 13);
}

float bf16_to_float(uint16_t h) { return float_of(static_cast<uint32_t>(h) << 16); }

uint16_t float_to_half(float f) {
  const uint32_t x = bits_of(f), sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) {  // NaN: keep the top payload bits, but never let them become inf's zero
    uint32_t payload = (ax & 0x7fffffu) >> 13;
    return static_cast<uint16_t>(sign | 0x7c00u | (payload ? payload : 1u));
  }
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // 65520 and up round to inf
  if (ax < 0x38800000u) {  // below float16's smallest normal: the subnormal's integer mantissa
    uint32_t m = static_cast<uint32_t>(std::nearbyint(float_of(ax) * 16777216.0f));  // * 2^24, exact
    return static_cast<uint16_t>(sign | m);
  }
  uint32_t h = ((ax >> 23) - 112) << 10 | (ax & 0x7fffffu) >> 13;
  uint32_t rest = ax & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // a carry into the exponent is right, up to inf
  return static_cast<uint16_t>(sign | h);
}

uint16_t float_to_bf16(float f) {
  const uint32_t x = bits_of(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16 & 0x8000u) | 0x7fc0u);
  return static_cast<uint16_t>((x + 0x7fffu + (x >> 16 & 1u)) >> 16);
}

uint16_t wide_to_half(long double d) {
  const uint16_t sign = std::signbit(d) ? 0x8000u : 0;
  if (std::isnan(d)) {
    const double nan = static_cast<double>(d);
    uint64_t b;
    std::memcpy(&b, &nan, 8);
    uint32_t payload = static_cast<uint32_t>((b & 0xfffffffffffffull) >> 42);
    return static_cast<uint16_t>(sign | 0x7c00u | (payload ? payload : 1u));
  }
  if (std::isinf(d)) return static_cast<uint16_t>(sign | 0x7c00u);
  return static_cast<uint16_t>(sign | round_magnitude(std::fabs(d), 10, 15, 0x7c00u));
}

uint16_t wide_to_bf16(long double d) {
  const uint16_t sign = std::signbit(d) ? 0x8000u : 0;
  if (std::isnan(d)) return static_cast<uint16_t>(sign | 0x7fc0u);
  if (std::isinf(d)) return static_cast<uint16_t>(sign | 0x7f80u);
  return static_cast<uint16_t>(sign | round_magnitude(std::fabs(d), 7, 127, 0x7f80u));
}

}  // namespace graphrun

// exp for float that the compiler vectorizes: no library call, no branch. Used where a kernel takes an
// exponential of every element of a large tensor in float (Softmax over attention scores), where the
// library's scalar expf costs several nanoseconds an element.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>

namespace graphrun::runtime::cpu {

// exp(x) = 2^n e^r with n = round(x / ln 2) and |r| <= ln(2) / 2, e^r by Cephes' degree-7 expf polynomial
// and 2^n through the exponent bits. Within 2 ulp of the exact value (tests/reduce_test.cc checks every
// 1/4096 of [-87, 88] against double); NaN stays NaN, x > 88.72 gives inf, and below
// -87.33 the result is 0 where the library's would be a denormal.
inline float exp_f32(float x) {
  constexpr float kHi = 88.7228394f, kLo = -87.3365479f;
  const float xc = std::min(std::max(x, kLo), kHi);  // NaN passes both
  // Round to nearest by adding and subtracting 1.5 * 2^23 (std::floor keeps GCC from vectorizing).
  const float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float e = p * (r * r) + r + 1.0f;
  // 2^n for n in [-126, 128]: 2^128 is not a float, so n = 128 scales by 2^127 and then by 2.
  // (NaN: n is NaN, and std::max(-126, NaN) is -126: no NaN is converted to an integer.)
  const int32_t ni = static_cast<int32_t>(std::min(127.0f, std::max(-126.0f, n)));
  const int32_t bits = (ni + 127) << 23;
  const float two_n = __builtin_bit_cast(float, bits);  // (a memcpy here kept the loop from vectorizing)
  float y = e * two_n * (n > 127.0f ? 2.0f : 1.0f);
  y = x > kHi ? HUGE_VALF : y;
  y = x < kLo ? 0.0f : y;
  return x != x ? x : y;
}

}  // namespace graphrun::runtime::cpu

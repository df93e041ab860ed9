// exp for double that the compiler vectorizes: no library call, no branch, no double -> integer
// conversion (AVX2 has none for packed doubles). Used where a kernel takes an exponential of every element
// of a large tensor in double (the cross-entropy of a language model's logits, softmax and gradient), where
// the library's scalar exp costs several nanoseconds an element.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>

namespace graphrun::runtime::cpu {

// exp(x) = 2^n e^r with n = round(x / ln 2) and |r| <= ln(2) / 2 (ln 2 split in two parts, as fdlibm's),
// e^r by its Taylor series to r^13 (truncation under 1e-17 relative), 2^n through the exponent bits of
// the rounding constant's sum. Within 1 ulp of the library's exp (tests/reduce_test.cc checks every 1/8192 of
// [-708, 709.6] and the edges); NaN stays NaN, x > 709.78 gives inf, and below
// -708.39 the result is 0 where the library's would be a denormal.
inline double exp_f64(double x) {
  constexpr double kHi = 709.782712893383973, kLo = -708.396418532264106;
  constexpr double kRound = 6755399441055744.0;  // 1.5 * 2^52: adding it rounds to an integer
  const double xc = std::min(std::max(x, kLo), kHi);  // NaN passes both
  const double t = xc * 1.44269504088896338700 + kRound;
  const double n = t - kRound;
  const double r = (xc - n * 6.93147180369123816490e-01) - n * 1.90821492927058770002e-10;
  double p = 1.0 / 6227020800.0;  // 1/13!
  p = p * r + 1.0 / 479001600.0;
  p = p * r + 1.0 / 39916800.0;
  p = p * r + 1.0 / 3628800.0;
  p = p * r + 1.0 / 362880.0;
  p = p * r + 1.0 / 40320.0;
  p = p * r + 1.0 / 5040.0;
  p = p * r + 1.0 / 720.0;
  p = p * r + 1.0 / 120.0;
  p = p * r + 1.0 / 24.0;
  p = p * r + 1.0 / 6.0;
  p = p * r + 0.5;
  const double e = p * (r * r) + r + 1.0;
  // t's low bits hold n (two's complement): 2^n is (n + 1023) << 52. n = 1024 (x above 709.44) is no
  // double's exponent: scale by 2^1023 and then by 2. (NaN: the bits are garbage, the select below wins.)
  const int64_t ti = __builtin_bit_cast(int64_t, t);
  const bool top = n > 1023.0;
  const double two_n = __builtin_bit_cast(double, static_cast<int64_t>(static_cast<uint64_t>(ti + (top ? 1022 : 1023)) << 52));
  double y = e * two_n * (top ? 2.0 : 1.0);
  y = x > kHi ? HUGE_VAL : y;
  y = x < kLo ? 0.0 : y;
  return x != x ? x : y;
}

}  // namespace graphrun::runtime::cpu

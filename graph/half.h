// float16 and bfloat16: bit-pattern conversions to and from float/double (round to nearest even), shared by
// the tensor readers, the printers and the CPU kernels, which compute half-precision ops in float.
#pragma once
#include <cstdint>

namespace graphrun {

float half_to_float(uint16_t h);   // exact
float bf16_to_float(uint16_t h);   // exact
// Round to nearest, ties to even, subnormals kept, overflow to inf. NaN stays NaN: float16 keeps the sign
// and the top payload bits (as numpy does), bfloat16 gives the quiet NaN 0x7fc0 with the sign (as Eigen does).
uint16_t float_to_half(float f);
uint16_t float_to_bf16(float f);
// From double or any integer, exactly held in long double, with one rounding (as numpy's float64 -> float16);
// going through float would round twice.
uint16_t wide_to_half(long double d);
uint16_t wide_to_bf16(long double d);

}  // namespace graphrun

// The order of TopK, Hardmax and Unique on both devices: NaN is above every number and equal to itself, as in
// PyTorch's topk and numpy's argmax and unique. With it the comparison is a strict weak order even with NaNs
// (a sort of raw floats is not: where NaN landed depended on the sort).
#pragma once
#include <type_traits>

#ifdef __CUDACC__
#define GR_ORDER_HD __host__ __device__
#else
#define GR_ORDER_HD
#endif

namespace graphrun::runtime {

template <class T>
GR_ORDER_HD inline bool nan_above(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {  // (x != x: NaN, in host and device code alike)
    if (a != a) return b == b;
    if (b != b) return false;
  }
  return a > b;
}

}  // namespace graphrun::runtime

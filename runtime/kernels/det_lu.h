// The math of Det and its gradient, shared by the CPU and CUDA kernels: LU factorisation with partial
// pivoting, and the cofactor matrix (d det(A) / dA), det(A) * inverse(A)^T where A is invertible, else
// from each entry's minor (a singular A still has cofactors: a rank n-1 matrix's are not all zero).
#pragma once
#include <math.h>

#include <cstdint>

#ifdef __CUDACC__
#define GR_DET_HD __host__ __device__
#else
#define GR_DET_HD
#endif

namespace graphrun::runtime::det {

GR_DET_HD inline float abs_of(float v) { return fabsf(v); }
GR_DET_HD inline double abs_of(double v) { return fabs(v); }

// a (n x n, row-major) becomes its LU factors in place: L (unit diagonal) below the diagonal, U on and above;
// row k was swapped with row piv[k] before column k was eliminated. Returns det(a), 0 where a pivot is 0
// (that column is then left as it is).
template <class S>
GR_DET_HD S lu_in_place(S* a, int64_t n, int64_t* piv) {
  S det = 1;
  for (int64_t k = 0; k < n; ++k) {
    int64_t p = k;
    S best = abs_of(a[k * n + k]);
    for (int64_t i = k + 1; i < n; ++i)
      if (abs_of(a[i * n + k]) > best) {
        best = abs_of(a[i * n + k]);
        p = i;
      }
    piv[k] = p;
    if (p != k) {
      for (int64_t j = 0; j < n; ++j) {
        const S t = a[k * n + j];
        a[k * n + j] = a[p * n + j];
        a[p * n + j] = t;
      }
      det = -det;
    }
    const S d = a[k * n + k];
    det *= d;
    if (d == S(0)) continue;
    for (int64_t i = k + 1; i < n; ++i) {
      const S l = a[i * n + k] / d;
      a[i * n + k] = l;
      for (int64_t j = k + 1; j < n; ++j) a[i * n + j] -= l * a[k * n + j];
    }
  }
  return det;
}

// Above this size a near-singular matrix's cofactors come from its inverse too (the minors take O(n^5)).
constexpr int64_t kMaxMinorsSize = 32;

// c = the cofactor matrix of a (n x n): c[i][j] = (-1)^(i+j) det(a without row i and column j), computed as
// det(a) inverse(a)^T, or from the minors where a is near singular (|det| below 1e-8 of Hadamard's bound in
// double, 1e-4 in float) and n <= kMaxMinorsSize. Returns det(a). work: n * n values, piv: n indices.
template <class S>
GR_DET_HD S cofactors(const S* a, int64_t n, S* c, S* work, int64_t* piv) {
  // Hadamard's bound, the product of the rows' lengths, is |det| for orthogonal rows: far below it, a is near
  // singular and det(a) inverse(a) loses every digit to cancellation; the minors keep them.
  S bound = 1;
  for (int64_t i = 0; i < n; ++i) {
    S row = 0;
    for (int64_t j = 0; j < n; ++j) row += a[i * n + j] * a[i * n + j];
    bound *= sqrt(row);
  }
  for (int64_t i = 0; i < n * n; ++i) work[i] = a[i];
  const S det = lu_in_place(work, n, piv);
  const S near_singular = S(sizeof(S) == sizeof(double) ? 1e-8 : 1e-4);
  if (isfinite(det) && (abs_of(det) > near_singular * bound || (n > kMaxMinorsSize && det != S(0)))) {
    // Row i of c is det times column i of inverse(a): solve a x = e_i with the factors.
    for (int64_t i = 0; i < n; ++i) {
      S* x = c + i * n;
      for (int64_t r = 0; r < n; ++r) x[r] = r == i ? S(1) : S(0);
      for (int64_t k = 0; k < n; ++k) {
        const S t = x[k];
        x[k] = x[piv[k]];
        x[piv[k]] = t;
      }
      for (int64_t r = 0; r < n; ++r)
        for (int64_t k = 0; k < r; ++k) x[r] -= work[r * n + k] * x[k];
      for (int64_t r = n - 1; r >= 0; --r) {
        for (int64_t k = r + 1; k < n; ++k) x[r] -= work[r * n + k] * x[k];
        x[r] /= work[r * n + r];
      }
      for (int64_t r = 0; r < n; ++r) x[r] *= det;
    }
    return det;
  }
  // Singular: each minor's determinant, factorised in `work` ((n - 1) x (n - 1) of its n * n values).
  const int64_t m = n - 1;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t r = 0, rr = 0; r < n; ++r) {
        if (r == i) continue;
        for (int64_t q = 0, qq = 0; q < n; ++q) {
          if (q == j) continue;
          work[rr * m + qq] = a[r * n + q];
          ++qq;
        }
        ++rr;
      }
      const S minor = lu_in_place(work, m, piv);
      c[i * n + j] = (i + j) % 2 ? -minor : minor;
    }
  return det;
}

}  // namespace graphrun::runtime::det

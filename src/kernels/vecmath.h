/* vecmath.h: float helpers the compiler can vectorize: an exp, and a check
 * that an array holds only finite values.
 *
 * glibc's expf is accurate but is a call the loops cannot vectorize (its
 * vector variants are only declared under -ffast-math, which we avoid so NaN
 * checks keep working). bs_expf is Cephes' expf: range reduction by ln 2 in
 * two parts, a degree-6 polynomial, and the exponent set by bit arithmetic;
 * about 1 ulp on its range. Inputs are clamped to [-87, 88] so the result is
 * always a normal number (exp(-87) = 1.6e-38 stands for 0, exp(88) = 1.7e38
 * for overflow), which keeps softmax and GELU free of inf and NaN. */
#ifndef BS_KERNELS_VECMATH_H
#define BS_KERNELS_VECMATH_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#pragma omp declare simd notinbranch
static inline float bs_expf(float x) {
    x = x > 88.0f ? 88.0f : x;
    x = x < -87.0f ? -87.0f : x;
    float n = __builtin_floorf(x * 1.44269504088896341f + 0.5f);
    float r = x - n * 0.693359375f;
    r = r + n * 2.12194440e-4f;
    float r2 = r * r;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r2 + r + 1.0f;
    int32_t bits = ((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

/* Whether x[0..n) holds only finite values: x * 0 is 0 for a finite x and
 * NaN for a NaN or an inf, so the sum stays 0 exactly when all are finite
 * (any summation order; the OpenMP split does not change the answer). */
static inline bool floats_all_finite(const float *x, size_t n) {
    float sum = 0;
#pragma omp parallel for simd reduction(+ : sum) schedule(static)
    for (size_t i = 0; i < n; i++) sum += x[i] * 0.0f;
    return sum == 0.0f;
}

/* The index of the first NaN or inf in x[0..n), n when all are finite (one
 * parallel pass; the scan only where there is one to find). */
static inline size_t floats_first_nonfinite(const float *x, size_t n) {
    if (floats_all_finite(x, n)) return n;
    size_t i = 0;
    while (i < n && isfinite(x[i])) i++;
    return i;
}

#endif

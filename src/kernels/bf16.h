/* bf16.h: the bfloat16 number format and conversions to and from float.
 *
 * bf16 is the upper half of an IEEE float: sign, the same 8-bit exponent,
 * 7 stored mantissa bits (8 significant), so a conversion is a rounding of
 * the lower 16 bits. float -> bf16 rounds to nearest, ties to even (as
 * PyTorch, numpy's ml_dtypes and the AVX512-BF16 instructions do); denormals
 * are rounded like any other value, overflow goes to inf, and a NaN stays a
 * NaN (sign and top payload kept, quiet bit set, so a NaN whose payload sits
 * in the low bits never becomes inf). bf16 -> float is exact.
 *
 * The array functions vectorize (integer operations only, no branches) and
 * split large arrays over OpenMP threads. bf16 values are stored as uint16_t:
 * C17 has no bf16 arithmetic type, and nothing here computes in bf16. */
#ifndef BS_KERNELS_BF16_H
#define BS_KERNELS_BF16_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef uint16_t bf16;

#pragma omp declare simd notinbranch
static inline bf16 bf16_from_float(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    uint32_t nan = (u >> 16) | 0x0040u;
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    return (bf16)((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

#pragma omp declare simd notinbranch
static inline float bf16_to_float(bf16 h) {
    uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* dst (n) = bf16(src (n)), rounded to nearest even */
void bf16_from_floats(bf16 *dst, const float *src, size_t n);
/* dst (n) = float(src (n)), exact */
void bf16_to_floats(float *dst, const bf16 *src, size_t n);
/* dst (n) = float(bf16(src (n))): the value a bf16 copy would hold, kept in
 * float (dst may equal src) */
void bf16_round_floats(float *dst, const float *src, size_t n);

#endif

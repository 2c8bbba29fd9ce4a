/* bf16.c: float <-> bf16 over arrays (see bf16.h). Memory-bound loops: a
 * few threads help only once an array is larger than the caches, so small
 * arrays stay on the calling thread. */
#include "kernels/bf16.h"

#define BF16_PARALLEL_MIN ((size_t)1 << 16)

void bf16_from_floats(bf16 *dst, const float *src, size_t n) {
#pragma omp parallel for simd schedule(static) if (n >= BF16_PARALLEL_MIN)
    for (size_t i = 0; i < n; i++) dst[i] = bf16_from_float(src[i]);
}

void bf16_to_floats(float *dst, const bf16 *src, size_t n) {
#pragma omp parallel for simd schedule(static) if (n >= BF16_PARALLEL_MIN)
    for (size_t i = 0; i < n; i++) dst[i] = bf16_to_float(src[i]);
}

void bf16_round_floats(float *dst, const float *src, size_t n) {
#pragma omp parallel for simd schedule(static) if (n >= BF16_PARALLEL_MIN)
    for (size_t i = 0; i < n; i++) dst[i] = bf16_to_float(bf16_from_float(src[i]));
}

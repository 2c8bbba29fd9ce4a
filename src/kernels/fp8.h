/* fp8.h: the two FP8 formats of FP8 training (OCP 8-bit floating point)
 * and their scaled quantization.
 *
 *   E4M3 (e4m3fn)  bias 7, 3 mantissa bits, max 448, no inf, NaN 0x7f/0xff
 *   E5M2           bias 15, 2 mantissa bits, max 57344, inf 0x7c, NaN 0x7d-0x7f
 * Casts round to nearest, ties to even (kernels/minifloat.h, the one
 * rounding routine the fp16 and fp8 codecs also use). Overflow: saturating
 * (beyond max, inf included -> +-max: CUDA's __NV_SATFINITE, what Transformer
 * Engine's casts use) or not (the OCP/ml_dtypes cast: e4m3 -> NaN, e5m2 ->
 * inf). NaN stays NaN either way.
 *
 * Quantization of a (rows, cols) float tensor for a product: each element's
 * code is cast(x * s) saturating and its value code * (1/s) (computed in
 * fp32 as float(code) * float(1/s)), with s:
 *   per tensor (block 0 x 0)  the scale the caller gives (delayed scaling:
 *                             from the amax history, model/fp8_scaling.h)
 *   per block (br x bc)       from the block's own amax, a power of two:
 *                             s = 2^floor(log2(fmax / amax)) (DeepSeek-V3,
 *                             Transformer Engine's Float8BlockScaling with
 *                             power-of-two scales), 1 where amax is 0 or not
 *                             finite; then code * (1/s) is exact.
 * Blocks tile the tensor from its first row and column; edge blocks are
 * smaller. Statistics: the number of values, of non-zero ones, of non-zero
 * ones whose code is 0 (underflow: flushed to zero), of ones saturated
 * (|x s| > fmax: overflow), and the tensor's amax (largest |x|, NaN ignored).
 * Bitwise the same at any thread count (each element is independent; counts
 * are integers and amax a max). */
#ifndef BS_KERNELS_FP8_H
#define BS_KERNELS_FP8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/minifloat.h"

typedef enum { FP8_E4M3, FP8_E5M2 } Fp8Format;

#define FP8_BLOCK 128 /* the block recipe's block side */

static inline const MiniFormat *fp8_mini_format(Fp8Format f, bool saturate) {
    if (f == FP8_E4M3) return saturate ? &MINI_E4M3_SAT : &MINI_E4M3;
    return saturate ? &MINI_E5M2_SAT : &MINI_E5M2;
}

#pragma omp declare simd uniform(f, saturate) notinbranch
static inline uint8_t fp8_cast(float x, Fp8Format f, bool saturate) {
    return (uint8_t)mini_from_float(x, fp8_mini_format(f, saturate));
}

static inline float fp8_value(uint8_t q, Fp8Format f) { return mini_to_float(q, fp8_mini_format(f, false)); }

/* the largest finite value: 448 or 57344 */
float fp8_max(Fp8Format f);
const char *fp8_format_name(Fp8Format f);
/* A block's power-of-two scale for its amax (see above). */
float fp8_block_scale(float amax, Fp8Format f);

typedef struct {
    uint64_t values, nonzero, underflow, overflow;
    float amax;
} Fp8Stats;

/* adds b's counts to a and takes the larger amax */
void fp8_stats_add(Fp8Stats *a, const Fp8Stats *b);

/* How one tensor is quantized: its format, and either one scale (block_rows
 * = block_cols = 0) or the block shape of per-block power-of-two scales. */
typedef struct {
    Fp8Format format;
    int block_rows, block_cols;
    float scale;
} Fp8Quant;

/* dst (rows, cols) = the values of src's codes (dst may equal src);
 * codes (may be NULL) = the codes themselves; stats (may be NULL) += this
 * tensor's. */
void fp8_quantize(float *dst, uint8_t *codes, const float *src, size_t rows, size_t cols, const Fp8Quant *q,
                  Fp8Stats *stats);

#endif

/* fp8.c: fp8 scaled quantization (see fp8.h): tensors are cut into panels of
 * block_rows rows, each panel's blocks get their scale from their amax (or
 * the tensor's one scale), then every element is cast, counted and
 * dequantized. Panels are independent, so they split over OpenMP threads. */
#include "kernels/fp8.h"

#include <math.h>
#include <stdlib.h>

#include "core/error.h"

#define FP8_PARALLEL_MIN ((size_t)1 << 15)

float fp8_max(Fp8Format f) { return f == FP8_E4M3 ? 448.0f : 57344.0f; }

const char *fp8_format_name(Fp8Format f) { return f == FP8_E4M3 ? "e4m3" : "e5m2"; }

float fp8_block_scale(float amax, Fp8Format f) {
    if (!(amax > 0) || !isfinite(amax)) return 1.0f;
    float s = fp8_max(f) / amax;
    if (!isfinite(s)) return 0x1p127f; /* amax below fmax * 2^-128 */
    return mini_bits_float(mini_float_bits(s) & 0xff800000u); /* 2^floor(log2 s): the mantissa cleared */
}

void fp8_stats_add(Fp8Stats *a, const Fp8Stats *b) {
    a->values += b->values;
    a->nonzero += b->nonzero;
    a->underflow += b->underflow;
    a->overflow += b->overflow;
    a->amax = fmaxf(a->amax, b->amax);
}

/* The scales of a panel's blocks: its rows [r0, r1), blocks of bc columns. */
static void panel_scales(float *scales, const float *src, size_t cols, size_t r0, size_t r1, size_t bc,
                         Fp8Format format) {
    const size_t nb = (cols + bc - 1) / bc;
    for (size_t b = 0; b < nb; b++) scales[b] = 0;
    for (size_t r = r0; r < r1; r++)
        for (size_t c = 0; c < cols; c++) scales[c / bc] = fmaxf(scales[c / bc], fabsf(src[r * cols + c]));
    for (size_t b = 0; b < nb; b++) scales[b] = fp8_block_scale(scales[b], format);
}

void fp8_quantize(float *dst, uint8_t *codes, const float *src, size_t rows, size_t cols, const Fp8Quant *q,
                  Fp8Stats *stats) {
    const bool per_tensor = q->block_rows == 0 || q->block_cols == 0;
    const size_t br = per_tensor ? 1 : (size_t)q->block_rows, bc = per_tensor ? (cols ? cols : 1) : (size_t)q->block_cols;
    const size_t panels = (rows + br - 1) / br, nb = (cols + bc - 1) / bc;
    const Fp8Format format = q->format;
    const float fmax = fp8_max(format);
    uint64_t nonzero = 0, underflow = 0, overflow = 0;
    float amax = 0;
#pragma omp parallel if (rows * cols >= FP8_PARALLEL_MIN) reduction(+ : nonzero, underflow, overflow) \
    reduction(max : amax)
    {
        float *scales = bs_malloc((nb ? nb : 1) * sizeof(float));
#pragma omp for schedule(static)
        for (size_t p = 0; p < panels; p++) {
            const size_t r0 = p * br, r1 = r0 + br < rows ? r0 + br : rows;
            if (per_tensor) scales[0] = q->scale;
            else panel_scales(scales, src, cols, r0, r1, bc, format);
            for (size_t r = r0; r < r1; r++)
                for (size_t c = 0; c < cols; c++) {
                    const size_t i = r * cols + c;
                    const float x = src[i], s = scales[c / bc], y = x * s;
                    const uint8_t code = fp8_cast(y, format, true);
                    amax = fmaxf(amax, fabsf(x));
                    nonzero += x != 0;
                    underflow += x != 0 && (code & 0x7f) == 0;
                    overflow += fabsf(y) > fmax;
                    dst[i] = fp8_value(code, format) * (1.0f / s);
                    if (codes) codes[i] = code;
                }
        }
        free(scales);
    }
    if (stats) fp8_stats_add(stats, &(Fp8Stats){rows * cols, nonzero, underflow, overflow, amax});
}

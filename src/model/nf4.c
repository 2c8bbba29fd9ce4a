/* nf4.c: bitsandbytes' NF4 with double quantisation (see nf4.h). Compiled
 * with -ffp-contract=off (CMakeLists.txt): every product and sum is rounded
 * as bitsandbytes' and the tests' float32 arithmetic rounds it. */
#include "model/nf4.h"

#include <math.h>

/* bitsandbytes' NF4 values (functional.py get_4bit_type("nf4"), the QLoRA
 * paper's appendix): the quantiles of N(0, 1) scaled to [-1, 1], 0 exact. */
static const float NF4_VALUES[16] = {
    -1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f,
    -0.28444138169288635f, -0.18477343022823334f, -0.09105003625154495f, 0.0f,
    0.07958029955625534f, 0.16093020141124725f, 0.24611230194568634f, 0.33791524171829224f,
    0.44070982933044434f, 0.5626170039176941f, 0.7229568362236023f, 1.0f};
#define NF4_ZERO 7

const float *nf4_code_book(void) { return NF4_VALUES; }

Nf4Sizes nf4_sizes(size_t n) {
    Nf4Sizes s;
    s.code_bytes = (n + 1) / 2;
    s.blocks = (n + NF4_BLOCK - 1) / NF4_BLOCK;
    s.groups = (s.blocks + NF4_ABSMAX_BLOCK - 1) / NF4_ABSMAX_BLOCK;
    return s;
}

/* create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8): for
 * exponent i = 0..6, the 2^i midpoints of linspace(0.1, 1, 2^i + 1) times
 * 10^(i - 6), both signs; then 0 and 1; sorted. */
void nf4_dynamic_map(float map[256]) {
    static const double POW10[7] = {1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0};
    int n = 0;
    for (int i = 0; i < 7; i++) {
        const int points = (1 << i) + 1;
        const double step = (1.0 - 0.1) / (points - 1);
        for (int j = 0; j + 1 < points; j++) {
            const double lo = 0.1 + j * step, hi = j + 2 == points ? 1.0 : 0.1 + (j + 1) * step;
            const double mean = (lo + hi) / 2.0;
            map[n++] = (float)(POW10[i] * mean);
            map[n++] = (float)(-POW10[i] * mean);
        }
    }
    map[n++] = 0.0f;
    map[n++] = 1.0f;
    for (int i = 1; i < n; i++) /* insertion sort: 256 values */
        for (int j = i; j > 0 && map[j - 1] > map[j]; j--) {
            const float t = map[j];
            map[j] = map[j - 1];
            map[j - 1] = t;
        }
}

/* The index of the nearest of `count` ascending values (the first on a tie). */
static int nearest(float s, const float *values, int count) {
    int best = 0;
    float best_d = fabsf(s - values[0]);
    for (int i = 1; i < count; i++) {
        const float d = fabsf(s - values[i]);
        if (d < best_d) best = i, best_d = d;
    }
    return best;
}

/* max |x| over n values. */
static float block_absmax(const float *x, size_t n) {
    float m = 0.0f;
    for (size_t i = 0; i < n; i++) m = fmaxf(m, fabsf(x[i]));
    return m;
}

/* x's code on `values` given its block's 1 / absmax (0: the block is all zeros, the code of 0). */
static int quantize_one(float x, float inverse, const float *values, int count, int zero) {
    if (inverse == 0.0f) return zero;
    const float s = fminf(fmaxf(x * inverse, -1.0f), 1.0f);
    return nearest(s, values, count);
}

void nf4_quantize_range(const float *x, size_t first, size_t count, Nf4Tensor t, float *absmax) {
    for (size_t i = first / 2; i < (first + count + 1) / 2; i++) t.codes[i] = 0;
    for (size_t b = first / NF4_BLOCK; b * NF4_BLOCK < first + count; b++) {
        const size_t begin = b * NF4_BLOCK, end = first + count - begin < NF4_BLOCK ? first + count : begin + NF4_BLOCK;
        absmax[b] = block_absmax(x + (begin - first), end - begin);
        const float inverse = absmax[b] > 0.0f ? 1.0f / absmax[b] : 0.0f;
        for (size_t i = begin; i < end; i++) {
            const int code = quantize_one(x[i - first], inverse, NF4_VALUES, 16, NF4_ZERO);
            t.codes[i / 2] |= (uint8_t)(i % 2 == 0 ? code << 4 : code);
        }
    }
}

void nf4_quantize_finish(size_t n, Nf4Tensor t, float *absmax) {
    const Nf4Sizes sz = nf4_sizes(n);
    double sum = 0;
    for (size_t b = 0; b < sz.blocks; b++) sum += absmax[b];
    const float offset = sz.blocks ? (float)(sum / (double)sz.blocks) : 0.0f;
    *t.offset = offset;
    float map[256];
    nf4_dynamic_map(map);
    int map_zero = 0;
    while (map[map_zero] != 0.0f) map_zero++;
    for (size_t b = 0; b < sz.blocks; b++) absmax[b] -= offset;
    for (size_t g = 0; g < sz.groups; g++) {
        const size_t first = g * NF4_ABSMAX_BLOCK;
        const size_t len = sz.blocks - first < NF4_ABSMAX_BLOCK ? sz.blocks - first : NF4_ABSMAX_BLOCK;
        t.absmax2[g] = block_absmax(absmax + first, len);
        const float inverse = t.absmax2[g] > 0.0f ? 1.0f / t.absmax2[g] : 0.0f;
        for (size_t b = first; b < first + len; b++)
            t.absmax_codes[b] = (uint8_t)quantize_one(absmax[b], inverse, map, 256, map_zero);
    }
}

void nf4_quantize(const float *x, size_t n, Nf4Tensor t, float *absmax) {
    nf4_quantize_range(x, 0, n, t, absmax);
    nf4_quantize_finish(n, t, absmax);
}

void nf4_dequantize_range(Nf4Tensor t, const float map[256], size_t first, size_t count, float *x) {
    for (size_t b = first / NF4_BLOCK; b * NF4_BLOCK < first + count; b++) {
        const float scaled = map[t.absmax_codes[b]] * t.absmax2[b / NF4_ABSMAX_BLOCK];
        const float absmax = scaled + *t.offset;
        const size_t begin = b * NF4_BLOCK > first ? b * NF4_BLOCK : first;
        const size_t end = first + count - b * NF4_BLOCK < NF4_BLOCK ? first + count : (b + 1) * NF4_BLOCK;
        for (size_t i = begin; i < end; i++) {
            const int code = i % 2 == 0 ? t.codes[i / 2] >> 4 : t.codes[i / 2] & 15;
            x[i - first] = NF4_VALUES[code] * absmax;
        }
    }
}

void nf4_dequantize(Nf4Tensor t, size_t n, float *x) {
    float map[256];
    nf4_dynamic_map(map);
    nf4_dequantize_range(t, map, 0, n, x);
}

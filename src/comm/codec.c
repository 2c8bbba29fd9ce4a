/* codec.c: the codecs of codec.h: fp16 and fp8 through the one rounding
 * routine for small float formats (kernels/minifloat.h; fp8 is the saturating
 * e4m3 cast of kernels/fp8.h, the one FP8 training uses), bf16 from
 * kernels/bf16.h, int8 and fp8 with a scale per block, top-k by a radix
 * select on the magnitudes' bits, 1-bit signs with DeepSpeed's scale; and
 * error feedback over any of them.
 * Single-threaded: the collectives call it from their progress polls. */
#include "comm/codec.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/reason.h"
#include "kernels/bf16.h"
#include "kernels/fp8.h"
#include "kernels/minifloat.h"

/* ---- element formats (kernels/minifloat.h) ---- */

static inline uint32_t float_bits(float x) { return mini_float_bits(x); }
static inline float bits_float(uint32_t u) { return mini_bits_float(u); }

uint16_t codec_fp16_from_float(float x) { return (uint16_t)mini_from_float(x, &MINI_FP16); }
float codec_fp16_to_float(uint16_t h) { return mini_to_float(h, &MINI_FP16); }
uint8_t codec_fp8_from_float(float x) { return fp8_cast(x, FP8_E4M3, true); }
float codec_fp8_to_float(uint8_t q) { return fp8_value(q, FP8_E4M3); }

/* ---- names, sizes, bounds ---- */

static const char *const kind_names[] = {"none", "fp16", "bf16", "fp8", "int8", "topk", "onebit"};
#define KIND_COUNT ((int)(sizeof kind_names / sizeof kind_names[0]))

bool codec_parse(const char *spec, size_t block, Codec *codec, char *why, size_t why_size) {
    if (block < 1) {
        return bs_reason(why, why_size, "codec_block",
                         "the compression block must be at least 1 element per scale (got %zu)", block);
    }
    *codec = (Codec){CODEC_NONE, block, 1.0};
    if (strncmp(spec, "topk:", 5) == 0) {
        char *end;
        double f = strtod(spec + 5, &end);
        if (end == spec + 5 || *end != '\0' || !(f > 0.0 && f <= 1.0)) {
            return bs_reason(why, why_size, "grad_codec",
                             "the gradient codec topk:FRACTION needs a FRACTION in (0, 1], e.g. topk:0.01 (got '%s')",
                             spec);
        }
        codec->kind = CODEC_TOPK;
        codec->fraction = f;
        return true;
    }
    for (int k = 0; k < KIND_COUNT; k++)
        if (k != CODEC_TOPK && strcmp(spec, kind_names[k]) == 0) {
            codec->kind = (CodecKind)k;
            return true;
        }
    return bs_reason(why, why_size, "grad_codec",
                     "the gradient codec must be none, fp16, bf16, fp8, int8, topk:FRACTION or onebit (got '%s')", spec);
}

void codec_format(const Codec *codec, char *out, size_t out_size) {
    if (codec->kind == CODEC_TOPK) snprintf(out, out_size, "topk:%g", codec->fraction);
    else snprintf(out, out_size, "%s", kind_names[codec->kind]);
}

bool codec_is_elementwise(const Codec *codec) { return codec->kind != CODEC_TOPK && codec->kind != CODEC_ONEBIT; }

size_t codec_topk_count(double fraction, size_t n) {
    size_t k = (size_t)ceil(fraction * (double)n);
    return k > n ? n : k;
}

static size_t round4(size_t bytes) { return (bytes + 3) & ~(size_t)3; }

static size_t blocks_of(const Codec *codec, size_t n) { return (n + codec->block - 1) / codec->block; }

size_t codec_encoded_bytes(const Codec *codec, size_t n) {
    switch (codec->kind) {
    case CODEC_NONE: return 4 * n;
    case CODEC_FP16:
    case CODEC_BF16: return round4(2 * n);
    case CODEC_FP8:
    case CODEC_INT8: return 4 * blocks_of(codec, n) + round4(n);
    case CODEC_TOPK: return 8 * codec_topk_count(codec->fraction, n);
    case CODEC_ONEBIT: return n ? 4 + round4((n + 7) / 8) : 0;
    }
    return 0;
}

/* Below this block amax the scale is 0 and the block decodes to zeros. */
#define TINY_AMAX 0x1p-100f

CodecBound codec_bound(const Codec *codec) {
    const double u = 0x1p-24;
    switch (codec->kind) {
    case CODEC_NONE: return (CodecBound){0, 0, 0};
    case CODEC_FP16: return (CodecBound){0x1p-11, 0, 0x1p-25};
    case CODEC_BF16: return (CodecBound){0x1p-8, 0, 0x1p-134};
    /* scaling by 1/s and back: three more roundings relative to x (margin 4u) */
    case CODEC_FP8: return (CodecBound){0x1p-4 + 4 * u, 0x1p-10 / 448 * (1 + 2 * u), TINY_AMAX};
    /* half a step of s = amax/127, plus |x| (<= amax) times the roundings */
    case CODEC_INT8: return (CodecBound){0, 1.0 / 254 + 8 * u, TINY_AMAX};
    default: return (CodecBound){0, 0, 0};
    }
}

/* ---- block-scaled formats: int8 and fp8 ---- */

/* Largest magnitude of x[0..n) as a float (NaN if any is NaN: compared as bits). */
static float block_amax(const float *x, size_t n) {
    uint32_t m = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t a = float_bits(x[i]) & 0x7fffffffu;
        m = a > m ? a : m;
    }
    return bits_float(m);
}

/* The stored scale of a block (amax / qmax) and the multiplier that maps the
 * block onto [-qmax, qmax]; a non-finite block gets scale NaN and multiplier 0. */
static void block_scale(float amax, float qmax, float *scale, float *inv) {
    if (!isfinite(amax)) {
        *scale = NAN;
        *inv = 0;
    } else if (amax < TINY_AMAX) {
        *scale = *inv = 0;
    } else {
        *scale = amax / qmax;
        *inv = qmax / amax;
    }
}

/* Layout: the blocks' scales (floats), then one byte per element, padded. */
static void encode_blocks(const Codec *codec, const float *x, size_t n, void *out) {
    size_t nb = blocks_of(codec, n), B = codec->block;
    float *scales = out;
    uint8_t *q = (uint8_t *)out + 4 * nb;
    bool fp8 = codec->kind == CODEC_FP8;
    for (size_t b = 0; b < nb; b++) {
        size_t begin = b * B, len = n - begin < B ? n - begin : B;
        float inv;
        block_scale(block_amax(x + begin, len), fp8 ? 448.0f : 127.0f, &scales[b], &inv);
        if (inv == 0) { /* tiny or non-finite block: never convert NaN to an integer */
            memset(q + begin, 0, len);
        } else if (fp8) {
            for (size_t i = begin; i < begin + len; i++) q[i] = codec_fp8_from_float(x[i] * inv);
        } else {
            for (size_t i = begin; i < begin + len; i++) {
                float y = nearbyintf(x[i] * inv); /* |x * inv| <= 127 (1 + 2^-23): no clamp needed */
                q[i] = (uint8_t)(int8_t)y;
            }
        }
    }
    memset(q + n, 0, round4(n) - n);
}

static void decode_blocks(const Codec *codec, const void *in, size_t n, float *out, bool add) {
    size_t nb = blocks_of(codec, n), B = codec->block;
    const float *scales = in;
    const uint8_t *q = (const uint8_t *)in + 4 * nb;
    bool fp8 = codec->kind == CODEC_FP8;
    for (size_t b = 0; b < nb; b++) {
        size_t begin = b * B, end = begin + B < n ? begin + B : n;
        float s = scales[b];
        for (size_t i = begin; i < end; i++) {
            float v = (fp8 ? codec_fp8_to_float(q[i]) : (float)(int8_t)q[i]) * s;
            out[i] = add ? out[i] + v : v;
        }
    }
}

/* ---- top-k ---- */

#define RADIX_BITS 11
#define RADIX_SIZE (1u << RADIX_BITS)

/* The k-th largest magnitude key (|x| as bits: ordered like |x|, NaN above
 * inf) of x[0..n), 1 <= k <= n, found digit by digit from the top (11, 11 and
 * 10 bits); *take_equal: how many elements with exactly that key are among
 * the k largest. */
static uint32_t kth_largest_key(const float *x, size_t n, size_t k, size_t *take_equal) {
    static const int shifts[3] = {21, 10, 0};
    uint32_t prefix = 0, mask = 0;
    size_t remaining = k, hist[RADIX_SIZE];
    for (int pass = 0; pass < 3; pass++) {
        int shift = shifts[pass];
        memset(hist, 0, sizeof hist);
        for (size_t i = 0; i < n; i++) {
            uint32_t key = float_bits(x[i]) & 0x7fffffffu;
            if ((key & mask) == prefix) hist[(key >> shift) & (RADIX_SIZE - 1)]++;
        }
        uint32_t d = RADIX_SIZE - 1;
        while (hist[d] < remaining) remaining -= hist[d--];
        prefix |= d << shift;
        mask |= (RADIX_SIZE - 1u) << shift;
    }
    *take_equal = remaining;
    return prefix;
}

/* Layout: k indices (uint32, ascending), then the k values. */
static void encode_topk(const Codec *codec, const float *x, size_t n, void *out) {
    size_t k = codec_topk_count(codec->fraction, n);
    if (k == 0) return;
    if (n > UINT32_MAX) bs_die("internal: a top-k unit holds at most 2^32 - 1 floats (got %zu)", n);
    uint32_t *idx = out;
    float *val = (float *)out + k;
    size_t equal;
    uint32_t threshold = kth_largest_key(x, n, k, &equal), taken = 0;
    for (size_t i = 0; i < n && taken < k; i++) {
        uint32_t key = float_bits(x[i]) & 0x7fffffffu;
        if (key > threshold || (key == threshold && equal > 0)) {
            if (key == threshold) equal--;
            idx[taken] = (uint32_t)i;
            val[taken++] = x[i];
        }
    }
}

static void decode_topk(const Codec *codec, const void *in, size_t n, float *out, bool add) {
    size_t k = codec_topk_count(codec->fraction, n);
    const uint32_t *idx = in;
    const float *val = (const float *)in + k;
    if (!add) memset(out, 0, n * sizeof(float));
    for (size_t j = 0; j < k; j++) out[idx[j]] += val[j];
}

/* ---- 1-bit ---- */

/* Layout: the scale, then the signs, element i in bit i % 8 of byte i / 8
 * (1: x >= 0, decoded +s; 0: decoded -s), padded. */
/* sum of x^2 in double, in 8 interleaved partial sums (so it vectorizes) */
static double sum_squares(const float *x, size_t n) {
    double part[8] = {0};
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) part[k] += (double)x[i + k] * x[i + k];
    for (; i < n; i++) part[0] += (double)x[i] * x[i];
    double sum = 0;
    for (int k = 0; k < 8; k++) sum += part[k];
    return sum;
}

static void encode_onebit(const float *x, size_t n, void *out) {
    if (n == 0) return;
    float scale = (float)(sqrt(sum_squares(x, n)) / sqrt((double)n));
    memcpy(out, &scale, sizeof scale);
    uint8_t *bits = (uint8_t *)out + 4;
    size_t nbytes = (n + 7) / 8;
    memset(bits + nbytes, 0, round4(nbytes) - nbytes);
    for (size_t j = 0; j < nbytes; j++) {
        size_t begin = 8 * j, len = n - begin < 8 ? n - begin : 8;
        unsigned b = 0;
        for (size_t k = 0; k < len; k++) b |= (unsigned)(x[begin + k] >= 0.0f) << k;
        bits[j] = (uint8_t)b;
    }
}

static void decode_onebit(const void *in, size_t n, float *out, bool add) {
    if (n == 0) return;
    float scale;
    memcpy(&scale, in, sizeof scale);
    const uint8_t *bits = (const uint8_t *)in + 4;
    for (size_t j = 0; j < (n + 7) / 8; j++) {
        size_t begin = 8 * j, len = n - begin < 8 ? n - begin : 8;
        for (size_t k = 0; k < len; k++) {
            float v = (bits[j] >> k) & 1u ? scale : -scale;
            out[begin + k] = add ? out[begin + k] + v : v;
        }
    }
}

/* ---- front door ---- */

void codec_encode(const Codec *codec, const float *x, size_t n, void *out) {
    switch (codec->kind) {
    case CODEC_NONE: memcpy(out, x, n * sizeof(float)); break;
    case CODEC_FP16: {
        uint16_t *h = out;
        for (size_t i = 0; i < n; i++) h[i] = codec_fp16_from_float(x[i]);
        if (n % 2) h[n] = 0;
        break;
    }
    case CODEC_BF16: {
        uint16_t *h = out;
        for (size_t i = 0; i < n; i++) h[i] = bf16_from_float(x[i]);
        if (n % 2) h[n] = 0;
        break;
    }
    case CODEC_FP8:
    case CODEC_INT8: encode_blocks(codec, x, n, out); break;
    case CODEC_TOPK: encode_topk(codec, x, n, out); break;
    case CODEC_ONEBIT: encode_onebit(x, n, out); break;
    }
}

static void decode_into(const Codec *codec, const void *in, size_t n, float *out, bool add) {
    switch (codec->kind) {
    case CODEC_NONE: {
        const float *f = in;
        for (size_t i = 0; i < n; i++) out[i] = add ? out[i] + f[i] : f[i];
        break;
    }
    case CODEC_FP16: {
        const uint16_t *h = in;
        for (size_t i = 0; i < n; i++) out[i] = add ? out[i] + codec_fp16_to_float(h[i]) : codec_fp16_to_float(h[i]);
        break;
    }
    case CODEC_BF16: {
        const uint16_t *h = in;
        for (size_t i = 0; i < n; i++) out[i] = add ? out[i] + bf16_to_float(h[i]) : bf16_to_float(h[i]);
        break;
    }
    case CODEC_FP8:
    case CODEC_INT8: decode_blocks(codec, in, n, out, add); break;
    case CODEC_TOPK: decode_topk(codec, in, n, out, add); break;
    case CODEC_ONEBIT: decode_onebit(in, n, out, add); break;
    }
}

void codec_decode(const Codec *codec, const void *in, size_t n, float *out) { decode_into(codec, in, n, out, false); }

void codec_decode_add(const Codec *codec, const void *in, size_t n, float *out) {
    decode_into(codec, in, n, out, true);
}

void codec_encode_feedback(const Codec *codec, float *x, float *residual, size_t n, void *out) {
    if (!residual) {
        codec_encode(codec, x, n, out);
        codec_decode(codec, out, n, x);
        return;
    }
    for (size_t i = 0; i < n; i++) x[i] += residual[i];
    codec_encode(codec, x, n, out);
    codec_decode(codec, out, n, residual); /* the residual's old values are in x already */
    for (size_t i = 0; i < n; i++) {
        float sent = residual[i];
        residual[i] = x[i] - sent;
        x[i] = sent;
    }
}

/* minifloat.h: small binary float formats and the one rounding routine
 * for all of them: IEEE binary16 (the fp16 codec) and the two fp8 formats
 * of FP8 training and the fp8 codec (kernels/fp8.h), each rounded to
 * nearest, ties to even, with a saturating or an IEEE-like overflow.
 *
 * A format: sign bit at sign_bit, then the exponent, then man_bits of
 * mantissa; magnitude codes above max_code are inf (the one equal to
 * inf_code, if the format has one) or NaN. A value beyond the largest
 * finite one after rounding becomes overflow_code: inf (fp16, e5m2), NaN
 * (e4m3fn, which has no inf), or max_code (the saturating casts, which also
 * map +-inf to +-max). A NaN input becomes nan_code with the input's sign.
 * Header-only (static inline) so that the codecs and the kernels share it;
 * comm/ uses kernels/, never the other way round. Under nvcc the functions
 * are host and device code too: the device's FP8 quantize kernels
 * (device/fp8_math.h) round with this same routine. */
#ifndef BS_KERNELS_MINIFLOAT_H
#define BS_KERNELS_MINIFLOAT_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define MINI_INLINE static __host__ __device__ inline
#else
#define MINI_INLINE static inline
#endif

typedef struct {
    int man_bits, bias, max_exp, sign_bit;
    uint32_t max_code;      /* largest finite magnitude */
    uint32_t overflow_code; /* what values beyond max_code round to */
    uint32_t nan_code;
    uint32_t inf_code; /* 0: no inf */
} MiniFormat;

/*                                          man bias maxexp sign  max   overflow nan   inf */
static const MiniFormat MINI_FP16 = {10, 15, 15, 15, 0x7bff, 0x7c00, 0x7e00, 0x7c00};
static const MiniFormat MINI_E4M3 = {3, 7, 8, 7, 0x7e, 0x7f, 0x7f, 0};         /* OCP e4m3fn: overflow -> NaN */
static const MiniFormat MINI_E4M3_SAT = {3, 7, 8, 7, 0x7e, 0x7e, 0x7f, 0};     /* overflow -> +-448 */
static const MiniFormat MINI_E5M2 = {2, 15, 15, 7, 0x7b, 0x7c, 0x7e, 0x7c};    /* OCP e5m2: overflow -> inf */
static const MiniFormat MINI_E5M2_SAT = {2, 15, 15, 7, 0x7b, 0x7b, 0x7e, 0x7c}; /* overflow -> +-57344 */

MINI_INLINE uint32_t mini_float_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

MINI_INLINE float mini_bits_float(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* Round to nearest even (F. Giesen's float_to_half_fast3_rtne, generalized). */
MINI_INLINE uint32_t mini_from_float(float x, const MiniFormat *f) {
    uint32_t u = mini_float_bits(x), a = u & 0x7fffffffu, o;
    if (a > 0x7f800000u) {
        o = f->nan_code;
    } else if (a >= (uint32_t)(127 + f->max_exp + 1) << 23) {
        o = f->overflow_code;
    } else if (a < (uint32_t)(127 + 1 - f->bias) << 23) { /* below the smallest normal */
        /* adding a power of two whose ulp is the smallest subnormal rounds there */
        float magic = mini_bits_float((uint32_t)(127 - f->bias + 23 - f->man_bits + 1) << 23);
        o = mini_float_bits(mini_bits_float(a) + magic) - mini_float_bits(magic);
    } else {
        uint32_t odd = (a >> (23 - f->man_bits)) & 1u;
        a += ((uint32_t)(f->bias - 127) << 23) + (1u << (22 - f->man_bits)) - 1u + odd;
        o = a >> (23 - f->man_bits);
        if (o > f->max_code) o = f->overflow_code;
    }
    return o | (u >> 31) << f->sign_bit;
}

MINI_INLINE float mini_to_float(uint32_t h, const MiniFormat *f) {
    uint32_t mag = h & ((1u << f->sign_bit) - 1u);
    uint32_t e = mag >> f->man_bits, m = mag & ((1u << f->man_bits) - 1u);
    float v;
    if (mag > f->max_code) v = (f->inf_code && mag == f->inf_code) ? INFINITY : NAN;
    else if (e == 0) v = (float)m * mini_bits_float((uint32_t)(127 + 1 - f->bias - f->man_bits) << 23);
    else v = mini_bits_float((e - (uint32_t)f->bias + 127u) << 23 | m << (23 - f->man_bits));
    return (h >> f->sign_bit) & 1u ? -v : v;
}

#endif

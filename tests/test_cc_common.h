/* test_cc_common.h: what the compressed-communication tests share: test
 * data with the magnitudes gradients have (blocks from 1e-9 to 1e3, exact
 * zeros, all-zero blocks, values below a scale's resolution) and the
 * per-element bound of one round trip of an elementwise codec. */
#ifndef BS_TEST_CC_COMMON_H
#define BS_TEST_CC_COMMON_H

#include <math.h>
#include <stddef.h>

#include "comm/codec.h"
#include "core/rng.h"

/* x[0..n): runs of 64 elements share a magnitude drawn from 1e-9..1e3 (or
 * are all zero, one run in 16); one element in 32 is an exact zero. Values
 * stay below max_abs (fp16's range needs it). */
static inline void cc_fill(Rng *rng, float *x, size_t n, double max_abs) {
    double magnitude = 1;
    for (size_t i = 0; i < n; i++) {
        if (i % 64 == 0) magnitude = rng_below(rng, 16) == 0 ? 0 : pow(10.0, -9 + 12 * (double)rng_uniform(rng));
        double v = magnitude * rng_normal(rng);
        if (rng_below(rng, 32) == 0) v = 0;
        if (fabs(v) > max_abs) v = copysign(max_abs, v);
        x[i] = (float)v;
    }
}

/* amax[b] = largest |x| over [b block, (b+1) block), b < ceil(n / block). */
static inline void cc_block_maxima(const float *x, size_t n, size_t block, double *amax) {
    for (size_t b = 0; b * block < n; b++) {
        amax[b] = 0;
        for (size_t j = b * block; j < n && j < (b + 1) * block; j++) amax[b] = fmax(amax[b], fabs((double)x[j]));
    }
}

/* An upper bound of the largest |x| of any block of `block` elements that
 * contains i, whatever the blocks' alignment: such a block lies inside the
 * aligned blocks before, at and after i's. */
static inline double cc_around(const double *amax, size_t n, size_t block, size_t i) {
    size_t b = i / block, last = (n - 1) / block;
    double m = amax[b];
    if (b > 0) m = fmax(m, amax[b - 1]);
    if (b < last) m = fmax(m, amax[b + 1]);
    return m;
}

#endif

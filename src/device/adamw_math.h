/* adamw_math.h: the fused AdamW (DK_ADAMW) over a table of segments,
 * written once for sim and CUDA. The launch numbers the parameters it
 * updates 0 .. n-1 across the segments; a block of consecutive numbers finds
 * its first segment once (a binary search over the table), then each of its
 * elements walks forward from there (a block spans few segments) and
 * updates its parameter with km_adamw, the arithmetic of the per-tensor
 * launches it replaces. */
#ifndef BS_DEVICE_ADAMW_MATH_H
#define BS_DEVICE_ADAMW_MATH_H

#include "device/device_kernels.h"
#include "device/kernel_math.h"

/* The segment holding element i: the last one with first <= i. */
BS_HD int km_adamw_segment_of(const AdamWArgs *a, size_t i) {
    int lo = 0, hi = a->nsegs - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if ((size_t)a->segs[mid].first <= i) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

/* From segment s (at or before element i's), the segment holding i. */
BS_HD int km_adamw_walk(const AdamWArgs *a, int s, size_t i) {
    while (s + 1 < a->nsegs && (size_t)a->segs[s + 1].first <= i) s++;
    return s;
}

/* Element i (in segment s): its parameter's AdamW update and bf16 copy. */
BS_HD void km_adamw_element(const AdamWArgs *a, int s, size_t i) {
    const AdamWSegment *seg = &a->segs[s];
    const AdamWStepScalars *v = a->step ? a->step : &a->scalars;
    const int64_t at = seg->offset + (int64_t)(i - (size_t)seg->first);
    const int64_t p = at - a->param_shift, g = at - a->grad_shift, st = at - a->state_shift;
    const float x = km_adamw(a->params[p], a->grads[g], &a->m[st], &a->v[st], a->beta1, a->beta2, a->eps,
                             v->grad_scale, v->step_size, seg->decays ? v->decay : 1.0f, v->bias2_sqrt);
    a->params[p] = x;
    if (a->params_bf16) a->params_bf16[at] = km_bf16(x);
}

#endif

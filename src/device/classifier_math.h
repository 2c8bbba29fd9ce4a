/* classifier_math.h: the arithmetic of the fused classifier (DK_CLASSIFIER:
 * softmax, cross-entropy loss and its gradient of each row of logits),
 * written once for the CUDA kernel (cuda/classifier.cu) and sim
 * (classifier_sim.c).
 *
 * One read of the row gives its max and its sum of exp(x - max) together
 * (the online softmax: a larger element rescales the sum so far), then one
 * pass writes the gradient over the logits in place: two passes over the
 * vocabulary, where the plain kernel (DK_SOFTMAX_XENT) makes three. A GPU
 * block cuts a row among its threads, each keeping the statistics of its
 * elements, and merges them in a fixed tree (km_softmax_merge). */
#ifndef BS_DEVICE_CLASSIFIER_MATH_H
#define BS_DEVICE_CLASSIFIER_MATH_H

#include "device/device_kernels.h"
#include "device/kernel_math.h"

/* A row's running max m and sum s of exp(x - m) (none yet: -inf and 0). */
typedef struct {
    float m, s;
} SoftmaxStat;

BS_HD SoftmaxStat km_softmax_none(void) {
    SoftmaxStat st = {-INFINITY, 0.0f};
    return st;
}

/* One more element x. */
BS_HD void km_softmax_add(SoftmaxStat *st, float x) {
    if (x > st->m) {
        st->s = st->s * km_exp_shifted(st->m, x) + 1.0f;
        st->m = x;
    } else {
        st->s += km_exp_shifted(x, st->m);
    }
}

/* The statistics of two sets of elements together. */
BS_HD SoftmaxStat km_softmax_merge(SoftmaxStat a, SoftmaxStat b) {
    if (b.s == 0) return a;
    if (a.s == 0) return b;
    SoftmaxStat st;
    st.m = a.m > b.m ? a.m : b.m;
    st.s = a.s * km_exp_shifted(a.m, st.m) + b.s * km_exp_shifted(b.m, st.m);
    return st;
}

/* Row i's statistics over elements j = first, first + step, ... < V. */
BS_HD SoftmaxStat km_classifier_stat(const XentArgs *a, int i, int first, int step) {
    const float *row = a->logits + (size_t)i * a->Vp;
    SoftmaxStat st = km_softmax_none();
    for (int j = first; j < a->V; j += step) km_softmax_add(&st, row[j]);
    return st;
}

/* With the row's statistics st: elements first, first + step, ... of row i
 * become their gradient dloss (softmax - one-hot), 0 in the padding (the
 * loss, from the target's logit, is read before any is written). */
BS_HD void km_classifier_grad(const XentArgs *a, int i, SoftmaxStat st, int first, int step) {
    float *row = a->logits + (size_t)i * a->Vp;
    const int target = a->targets[i];
    const float scale = a->dloss / st.s;
    for (int j = first; j < a->Vp; j += step)
        row[j] = j < a->V ? km_exp_shifted(row[j], st.m) * scale - (j == target ? a->dloss : 0.0f) : 0.0f;
}

#endif

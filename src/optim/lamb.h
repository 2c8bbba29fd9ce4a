/* lamb.h: LAMB (You et al. 2020, "Large Batch Optimization for Deep
 * Learning", Algorithm 2) on one contiguous range of parameters, in two
 * phases so that ranks holding pieces of one tensor can combine its norms:
 *
 *   phase 1 (lamb_moments): on the range, with g = grad * grad_scale,
 *     m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
 *     u = m_hat / (sqrt(v_hat) + eps) + wd * w      (m_hat = m/(1-b1^t), v_hat = v/(1-b2^t))
 *     and ADDS the range's sum of w^2 and of u^2 to sums[0] and sums[1];
 *   the caller adds these partial sums over every piece of the tensor;
 *   phase 2 (lamb_apply): r = lamb_trust_ratio(sum w^2, sum u^2);  w -= lr * r * u.
 *
 * Phase 2 recomputes u from the m and v phase 1 stored and the unchanged w,
 * by the same arithmetic, so no scratch array of `n` floats is needed (under
 * ZeRO that memory is what sharding saves). Phase 1 must run exactly once
 * before phase 2 in each step. The sums are taken in fixed parts in double,
 * so they do not depend on the thread count. */
#ifndef BS_OPTIM_LAMB_H
#define BS_OPTIM_LAMB_H

#include <stdbool.h>
#include <stddef.h>

typedef struct {
    float lr;
    float beta1, beta2, eps;
    float weight_decay; /* the caller passes 0 for tensors that do not decay */
    float grad_scale;   /* gradients are multiplied by this first (clipping) */
    long step;          /* 1-based, for bias correction */
    bool clamp;         /* clamp the trust ratio to [LAMB_CLAMP_MIN, LAMB_CLAMP_MAX] */
} LambStep;

/* DeepSpeed's FusedLamb bounds (min_coeff, max_coeff), used when clamp is set. */
#define LAMB_CLAMP_MIN 0.01
#define LAMB_CLAMP_MAX 10.0

void lamb_moments(const float *params, const float *grads, float *m, float *v, size_t n, const LambStep *s,
                  double sums[2]);
/* ||w|| / ||u|| from the squared norms; 1 if either is zero. */
double lamb_trust_ratio(double w_sq, double u_sq, bool clamp);
void lamb_apply(float *params, const float *m, const float *v, size_t n, const LambStep *s, double trust_ratio);

#endif

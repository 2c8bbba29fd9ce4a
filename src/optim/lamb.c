/* lamb.c: LAMB's two phases on a contiguous range (see lamb.h). */
#include "optim/lamb.h"

#include <math.h>

#define PARTS 64 /* fixed parts of the norm sums, independent of the thread count */

/* The bias-corrected Adam direction plus decoupled decay: one element of u. */
typedef struct {
    float bias1, bias2_sqrt, eps, wd;
} LambDirection;

static LambDirection lamb_direction(const LambStep *s) {
    return (LambDirection){1.0f - powf(s->beta1, (float)s->step), sqrtf(1.0f - powf(s->beta2, (float)s->step)),
                           s->eps, s->weight_decay};
}

static inline float lamb_u(const LambDirection *d, float m, float v, float w) {
    return (m / d->bias1) / (sqrtf(v) / d->bias2_sqrt + d->eps) + d->wd * w;
}

void lamb_moments(const float *params, const float *grads, float *m, float *v, size_t n, const LambStep *s,
                  double sums[2]) {
    const LambDirection d = lamb_direction(s);
    const float b1 = s->beta1, b2 = s->beta2, scale = s->grad_scale;
    double w_part[PARTS], u_part[PARTS];
    size_t per = (n + PARTS - 1) / PARTS;
#pragma omp parallel for schedule(static)
    for (int p = 0; p < PARTS; p++) {
        size_t begin = (size_t)p * per, end = begin + per < n ? begin + per : n;
        double w_acc = 0.0, u_acc = 0.0;
        for (size_t i = begin; i < end; i++) {
            float g = grads[i] * scale;
            float mi = b1 * m[i] + (1.0f - b1) * g;
            float vi = b2 * v[i] + (1.0f - b2) * g * g;
            m[i] = mi;
            v[i] = vi;
            float u = lamb_u(&d, mi, vi, params[i]);
            w_acc += (double)params[i] * params[i];
            u_acc += (double)u * u;
        }
        w_part[p] = w_acc;
        u_part[p] = u_acc;
    }
    for (int p = 0; p < PARTS; p++) sums[0] += w_part[p], sums[1] += u_part[p];
}

double lamb_trust_ratio(double w_sq, double u_sq, bool clamp) {
    if (w_sq <= 0.0 || u_sq <= 0.0) return 1.0;
    double r = sqrt(w_sq) / sqrt(u_sq);
    if (clamp) r = fmin(fmax(r, LAMB_CLAMP_MIN), LAMB_CLAMP_MAX);
    return r;
}

void lamb_apply(float *params, const float *m, const float *v, size_t n, const LambStep *s, double trust_ratio) {
    const LambDirection d = lamb_direction(s);
    const float step_size = (float)(s->lr * trust_ratio);
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) params[i] -= step_size * lamb_u(&d, m[i], v[i], params[i]);
}

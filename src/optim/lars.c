/* lars.c: LARS's two phases on a contiguous range (see lars.h). */
#include "optim/lars.h"

#include <math.h>

#include "optim/grad_norm.h"

void lars_norms(const float *params, const float *grads, size_t n, const LarsStep *s, double sums[2]) {
    double scale = s->grad_scale;
    sums[0] += sum_of_squares(params, n);
    sums[1] += scale * scale * sum_of_squares(grads, n);
}

double lars_trust_ratio(double w_sq, double g_sq, const LarsStep *s) {
    if (w_sq <= 0.0 || g_sq <= 0.0) return 1.0;
    double w_norm = sqrt(w_sq);
    return s->eta * w_norm / (sqrt(g_sq) + s->weight_decay * w_norm + s->eps);
}

void lars_apply(float *params, const float *grads, float *velocity, size_t n, const LarsStep *s, double trust_ratio) {
    const float step_size = (float)(s->lr * trust_ratio);
    const float scale = s->grad_scale, wd = s->weight_decay, mu = s->momentum;
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        float vi = mu * velocity[i] + step_size * (grads[i] * scale + wd * params[i]);
        velocity[i] = vi;
        params[i] -= vi;
    }
}

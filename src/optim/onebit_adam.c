/* onebit_adam.c: 1-bit Adam's warm-up, local momentum and frozen-variance
 * update on a contiguous range (see onebit_adam.h). */
#include "optim/onebit_adam.h"

#include <math.h>

#include "optim/adamw.h"

bool onebit_adam_compressing(const OnebitAdamStep *s) { return s->step > s->freeze_step; }

void onebit_adam_warmup(float *params, const float *grads, float *m, float *v, size_t n, const OnebitAdamStep *s) {
    AdamWStep a = {s->lr, s->beta1, s->beta2, s->eps, s->weight_decay, s->grad_scale, s->step};
    adamw_update(params, grads, m, v, n, &a);
}

void onebit_adam_local_momentum(float *m, const float *grads, size_t n, float beta1, float local_scale) {
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) m[i] = beta1 * m[i] + (1.0f - beta1) * (grads[i] * local_scale);
}

void onebit_adam_apply(float *params, const float *m, const float *v, size_t n, const OnebitAdamStep *s) {
    const float bias1 = 1.0f - powf(s->beta1, (float)s->step);
    const float bias2_sqrt = sqrtf(1.0f - powf(s->beta2, (float)s->freeze_step));
    const float step_size = s->lr / bias1;
    const float decay = 1.0f - s->lr * s->weight_decay;
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        float p = params[i] * decay;
        float move = step_size * m[i] / (sqrtf(v[i]) / bias2_sqrt + s->eps);
        params[i] = v[i] == 0.0f ? p : p - move;
    }
}

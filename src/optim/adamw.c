/* adamw.c: AdamW on a contiguous range (see adamw.h). */
#include "optim/adamw.h"

#include <math.h>

void adamw_update(float *params, const float *grads, float *m, float *v, size_t n, const AdamWStep *s) {
    const float b1 = s->beta1, b2 = s->beta2;
    const float bias1 = 1.0f - powf(b1, (float)s->step);
    const float bias2_sqrt = sqrtf(1.0f - powf(b2, (float)s->step));
    const float step_size = s->lr / bias1;
    const float decay = 1.0f - s->lr * s->weight_decay;
    const float scale = s->grad_scale;
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        float g = grads[i] * scale;
        float mi = b1 * m[i] + (1.0f - b1) * g;
        float vi = b2 * v[i] + (1.0f - b2) * g * g;
        m[i] = mi;
        v[i] = vi;
        float p = params[i] * decay;
        params[i] = p - step_size * mi / (sqrtf(vi) / bias2_sqrt + s->eps);
    }
}

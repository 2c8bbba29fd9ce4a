/* sgd.c: SGD with momentum on a contiguous range (see sgd.h). */
#include "optim/sgd.h"

void sgd_update(float *params, const float *grads, float *buf, size_t n, const SgdStep *s) {
    const float scale = s->grad_scale, wd = s->weight_decay, mu = s->momentum, lr = s->lr;
    const float keep = 1.0f - s->dampening;
    const bool first = s->step <= 1, use_momentum = mu != 0.0f, nesterov = s->nesterov;
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        float g = grads[i] * scale + wd * params[i];
        if (use_momentum) {
            float b = first ? g : mu * buf[i] + keep * g;
            buf[i] = b;
            g = nesterov ? g + mu * b : b;
        }
        params[i] -= lr * g;
    }
}

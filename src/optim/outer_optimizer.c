/* outer_optimizer.c: the outer step (see outer_optimizer.h). */
#include "optim/outer_optimizer.h"

void outer_step(const OuterConfig *cfg, float *global, float *velocity, const float *delta, size_t n) {
    const float lr = cfg->lr, mu = cfg->momentum;
    switch (cfg->kind) {
    case OUTER_NESTEROV:
        for (size_t i = 0; i < n; i++) {
            velocity[i] = mu * velocity[i] + delta[i];
            global[i] -= lr * (delta[i] + mu * velocity[i]);
        }
        break;
    case OUTER_SGD:
        for (size_t i = 0; i < n; i++) {
            velocity[i] = mu * velocity[i] + delta[i];
            global[i] -= lr * velocity[i];
        }
        break;
    case OUTER_AVG:
        for (size_t i = 0; i < n; i++) global[i] -= delta[i];
        break;
    }
}

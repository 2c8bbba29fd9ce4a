/* sgd.h: SGD with momentum (optionally Nesterov), written as PyTorch's
 * torch.optim.SGD computes it, on one contiguous range of parameters.
 * Weight decay is coupled (added to the gradient), as in torch.optim.SGD.
 * Elementwise only: a range may cut a tensor anywhere. */
#ifndef BS_OPTIM_SGD_H
#define BS_OPTIM_SGD_H

#include <stdbool.h>
#include <stddef.h>

typedef struct {
    float lr;
    float momentum;     /* 0 disables the momentum buffer */
    float dampening;
    float weight_decay; /* coupled; the caller passes 0 for tensors that do not decay */
    bool nesterov;
    float grad_scale;   /* gradients are multiplied by this first (clipping) */
    long step;          /* 1-based; on step 1 the buffer is set to the gradient */
} SgdStep;

/* g = grad * grad_scale + wd * p;
 * momentum: buf = g on step 1, else buf = momentum * buf + (1 - dampening) * g;
 *           g = nesterov ? g + momentum * buf : buf;
 * p -= lr * g. `buf` is untouched when momentum is 0. */
void sgd_update(float *params, const float *grads, float *buf, size_t n, const SgdStep *s);

#endif

/* adamw.h: the AdamW update (Loshchilov and Hutter), written as PyTorch's
 * torch.optim.AdamW computes it, on one contiguous range of parameters. */
#ifndef BS_OPTIM_ADAMW_H
#define BS_OPTIM_ADAMW_H

#include <stddef.h>

typedef struct {
    float lr;
    float beta1, beta2, eps;
    float weight_decay; /* decoupled; the caller passes 0 for tensors that do not decay */
    float grad_scale;   /* gradients are multiplied by this first (clipping) */
    long step;          /* 1-based, for bias correction */
} AdamWStep;

/* p *= 1 - lr*wd; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
 * p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps), with g = grad * grad_scale. */
void adamw_update(float *params, const float *grads, float *m, float *v, size_t n, const AdamWStep *s);

#endif

/* lars.h: LARS (You et al. 2017, "Large Batch Training of Convolutional
 * Networks", Algorithm 1) on one contiguous range of parameters, in two
 * phases so that ranks holding pieces of one tensor can combine its norms:
 *
 *   phase 1 (lars_norms): ADDS the range's sum of w^2 and of g^2
 *     (g = grad * grad_scale, before weight decay) to sums[0] and sums[1];
 *   the caller adds these partial sums over every piece of the tensor;
 *   phase 2 (lars_apply): r = lars_trust_ratio(...) =
 *     eta ||w|| / (||g|| + wd ||w|| + eps), or 1 if ||w|| or ||g|| is 0;
 *     v = momentum v + lr r (g + wd w);  w -= v.
 *
 * As in the paper (and TensorFlow's TPU LARS used for MLPerf), the momentum
 * buffer holds the velocity including lr; this equals NVIDIA's LARC (trust
 * ratio on the gradient, lr outside the momentum) while lr is constant. The
 * zero-norm guard is LARC's and TensorFlow's. No Nesterov variant. */
#ifndef BS_OPTIM_LARS_H
#define BS_OPTIM_LARS_H

#include <stddef.h>

typedef struct {
    float lr;
    float momentum;
    float weight_decay; /* the caller passes 0 for tensors that do not decay */
    float eta;          /* trust coefficient, about 1e-3 */
    float eps;
    float grad_scale;   /* gradients are multiplied by this first (clipping) */
} LarsStep;

void lars_norms(const float *params, const float *grads, size_t n, const LarsStep *s, double sums[2]);
double lars_trust_ratio(double w_sq, double g_sq, const LarsStep *s);
void lars_apply(float *params, const float *grads, float *velocity, size_t n, const LarsStep *s, double trust_ratio);

#endif

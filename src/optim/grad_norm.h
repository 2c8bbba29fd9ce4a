/* grad_norm.h: sum of squares of a gradient range, in double, in fixed
 * chunks summed in order, so the result does not depend on the thread count
 * and ranks holding shards can add their parts. */
#ifndef BS_OPTIM_GRAD_NORM_H
#define BS_OPTIM_GRAD_NORM_H

#include <stddef.h>

double sum_of_squares(const float *x, size_t n);
/* Sum of (a[i] - b[i])^2, in the same fixed order. */
double sum_of_squared_differences(const float *a, const float *b, size_t n);
/* Adam's preconditioner 1 / (sqrt(v_hat) + eps) with v_hat = v * v_scale^2:
 * v the second moment (indexed like the gradient), v_scale = 1 / sqrt(1 - beta2^t). */
typedef struct {
    const float *v;
    double v_scale, eps;
} Preconditioner;
/* Sum of ((a[i] - b[i]) / (sqrt(v[i]) v_scale + eps))^2 (b NULL: of a[i]), in the same fixed order. */
double preconditioned_sum_of_squares(const float *a, const float *b, size_t n, const Preconditioner *p);
/* Sum of a[i] b[i] in double, in the same fixed order. */
double dot_product(const float *a, const float *b, size_t n);
/* PyTorch's clip_grad_norm_ coefficient: min(1, max_norm / (norm + 1e-6));
 * max_norm <= 0 disables clipping (returns 1). */
float clip_coefficient(double norm, double max_norm);

#endif

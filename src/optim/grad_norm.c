/* grad_norm.c: deterministic sums of squares, dot products and the clipping coefficient.
 * The range is cut into PARTS fixed parts (independent of the thread count),
 * each summed in order in double, then the parts are added in order. */
#include "optim/grad_norm.h"

#include <math.h>
#include <stdbool.h>

#define PARTS 64

/* Sum over i of one term, in PARTS fixed parts (the bits do not depend on
 * the thread count): product, a_i b_i; else b == NULL: a_i^2, or (a_i -
 * b_i)^2; with pre, each such difference divided by (sqrt(v) * v_scale +
 * eps) before squaring (pre: Adam's preconditioner). */
static double sum_terms(const float *a, const float *b, size_t n, const Preconditioner *pre, bool product) {
    double partial[PARTS];
    size_t per = (n + PARTS - 1) / PARTS;
#pragma omp parallel for schedule(static)
    for (int p = 0; p < PARTS; p++) {
        size_t begin = (size_t)p * per, end = begin + per < n ? begin + per : n;
        double acc = 0.0;
        for (size_t i = begin; i < end; i++) {
            if (product) {
                acc += (double)a[i] * b[i];
                continue;
            }
            double d = b ? (double)a[i] - b[i] : (double)a[i];
            if (pre) d /= sqrt((double)pre->v[i]) * pre->v_scale + pre->eps;
            acc += d * d;
        }
        partial[p] = acc;
    }
    double total = 0.0;
    for (int p = 0; p < PARTS; p++) total += partial[p];
    return total;
}

static double squares(const float *a, const float *b, size_t n, const Preconditioner *pre) {
    return sum_terms(a, b, n, pre, false);
}

double sum_of_squares(const float *x, size_t n) { return squares(x, NULL, n, NULL); }

double sum_of_squared_differences(const float *a, const float *b, size_t n) { return squares(a, b, n, NULL); }

double preconditioned_sum_of_squares(const float *a, const float *b, size_t n, const Preconditioner *pre) {
    return squares(a, b, n, pre);
}

double dot_product(const float *a, const float *b, size_t n) { return sum_terms(a, b, n, NULL, true); }

float clip_coefficient(double norm, double max_norm) {
    if (max_norm <= 0) return 1.0f;
    double coef = max_norm / (norm + 1e-6);
    return coef < 1.0 ? (float)coef : 1.0f;
}

/* grad_norm.c: deterministic sums of squares, dot products and the clipping coefficient.
 * The range is cut into PARTS fixed parts (independent of the thread count),
 * each summed in double over LANES interleaved accumulators, then the parts
 * are added in order: the same bits for any thread count. */
#include "optim/grad_norm.h"

#include <math.h>
#include <stdbool.h>

#define PARTS 64
#define LANES 8 /* interleaved accumulators per part: independent adds the compiler can vectorise */

typedef enum { TERM_SQUARE, TERM_DIFFERENCE, TERM_PRECONDITIONED, TERM_PRODUCT } Term;

/* Term i: a_i^2, (a_i - b_i)^2, ((a_i - b_i) / (sqrt(v_i) v_scale + eps))^2
 * (b may be NULL there: a_i alone), or a_i b_i; in double. */
static inline double term(Term kind, const float *a, const float *b, const Preconditioner *pre, size_t i) {
    if (kind == TERM_PRODUCT) return (double)a[i] * b[i];
    double d = kind == TERM_SQUARE || !b ? (double)a[i] : (double)a[i] - b[i];
    if (kind == TERM_PRECONDITIONED) d /= sqrt((double)pre->v[i]) * pre->v_scale + pre->eps;
    return d * d;
}

/* The terms [begin, end): term i into lane (i - begin) % LANES, the tail
 * after the last whole group of LANES into its own sum; then the lanes in
 * order and the tail. A fixed order for fixed (begin, end). */
static inline double sum_part(Term kind, const float *a, const float *b, const Preconditioner *pre, size_t begin,
                              size_t end) {
    double lane[LANES] = {0}, tail = 0;
    size_t i = begin;
    for (; i + LANES <= end; i += LANES)
        for (int k = 0; k < LANES; k++) lane[k] += term(kind, a, b, pre, i + k);
    for (; i < end; i++) tail += term(kind, a, b, pre, i);
    double total = 0;
    for (int k = 0; k < LANES; k++) total += lane[k];
    return total + tail;
}

/* Sum over i of one term in PARTS fixed parts (the bits do not depend on
 * the thread count), the parts added in order. Each kind is its own loop. */
static double sum_terms(const float *a, const float *b, size_t n, const Preconditioner *pre, Term kind) {
    double partial[PARTS];
    size_t per = (n + PARTS - 1) / PARTS;
#pragma omp parallel for schedule(static)
    for (int p = 0; p < PARTS; p++) {
        size_t begin = (size_t)p * per, end = begin + per < n ? begin + per : n;
        if (begin > end) begin = end;
        switch (kind) {
        case TERM_SQUARE: partial[p] = sum_part(TERM_SQUARE, a, b, pre, begin, end); break;
        case TERM_DIFFERENCE: partial[p] = sum_part(TERM_DIFFERENCE, a, b, pre, begin, end); break;
        case TERM_PRECONDITIONED: partial[p] = sum_part(TERM_PRECONDITIONED, a, b, pre, begin, end); break;
        default: partial[p] = sum_part(TERM_PRODUCT, a, b, pre, begin, end); break;
        }
    }
    double total = 0.0;
    for (int p = 0; p < PARTS; p++) total += partial[p];
    return total;
}

double sum_of_squares(const float *x, size_t n) { return sum_terms(x, NULL, n, NULL, TERM_SQUARE); }

double sum_of_squared_differences(const float *a, const float *b, size_t n) {
    return sum_terms(a, b, n, NULL, TERM_DIFFERENCE);
}

double preconditioned_sum_of_squares(const float *a, const float *b, size_t n, const Preconditioner *pre) {
    return sum_terms(a, b, n, pre, TERM_PRECONDITIONED);
}

double dot_product(const float *a, const float *b, size_t n) { return sum_terms(a, b, n, NULL, TERM_PRODUCT); }

float clip_coefficient(double norm, double max_norm) {
    if (max_norm <= 0) return 1.0f;
    double coef = max_norm / (norm + 1e-6);
    return coef < 1.0 ? (float)coef : 1.0f;
}

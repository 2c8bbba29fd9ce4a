/* curvature.h: the curvature-aware noise scale B_noise = tr(H Sigma) / (G^T H G)
 * (McCandlish et al. 2018, eq. 2.6 and appendix A), from micro-batch gradient
 * deviations and Hessian-vector products by central differences of gradients.
 *
 * Notation: the step's global batch of B = M b sequences is cut into M
 * micro-batches of b; g_i is micro-batch i's mean-loss gradient, g = mean of
 * the g_i the step's gradient, d_i = g_i - g. Each g_i = G + xi_i with
 * Cov(xi_i) = Sigma / b (Sigma: the per-sequence gradient covariance).
 *
 * tr(H Sigma). E[sum_i d_i^T H d_i] = (M - 1) tr(H Sigma) / b (the sample
 * variance identity with the H-weighted inner product), so
 *     tr(H Sigma)_est = b / (M - 1) * sum_i d_i^T H d_i.
 * One probe instead of M products: z = sum_i s_i d_i with balanced signs,
 * a random permutation (independent of the data) of floor(M/2) +1s and
 * ceil(M/2) -1s. Then E[s_i^2] = 1 and, for i != j, E[s_i s_j] = c with
 * c = -1/(M-1) (M even) or -1/M (M odd); since sum_i d_i = 0,
 * sum_{i!=j} d_i^T H d_j = -sum_i d_i^T H d_i, so
 *     E_s[z^T H z] = (1 - c) sum_i d_i^T H d_i,
 * and z^T H z / (1 - c) replaces the sum without bias. (Independent
 * Rademacher signs would give c = 0 but make all signs equal, z = 0, with
 * probability 2^(1-M): 1 in 8 steps at M = 4.) z = sum_i s_i g_i -
 * (sum_i s_i) g needs one signed running sum of the micro-batch gradients,
 * not the M gradients stored.
 *
 * G^T H G. E[g^T H g] = G^T H G + tr(H Sigma) / B, so
 *     (G^T H G)_est = g^T H g - tr(H Sigma)_est / B.
 *
 * v^T H v by differences: v^T (grad(w + h v) - grad(w - h v)) / (2 h), exact
 * for a quadratic loss, error O(h^2) otherwise; h = CURVATURE_STEP |w| / |v|,
 * so the weights move by 1e-3 of their norm whatever the size of v. On the
 * test model (2 layers, 32 channels) G^T H G at steps 1e-4, 1e-3, 1e-2, 3e-2
 * of |w| came out 1.8497, 1.8507, 1.9483, 2.7009: the O(h^2) error is 5e-4
 * at 1e-3 and 5% at 1e-2, while below 1e-3 float rounding of the gradients
 * (relative 2^-24, amplified by 1 / CURVATURE_STEP) takes over.
 *
 * Preconditioned (B_noise(P)). For an update -eps P g with P fixed within
 * the step (Adam's 1 / (sqrt(v_hat) + eps) before the step's update), the
 * expected loss change is -eps G^T P G + eps^2 / 2 (G^T P H P G +
 * tr(P H P Sigma) / B), so McCandlish's eq. 2.6 gives B_noise(P) =
 * tr(P H P Sigma) / (G^T P H P G) (why preconditioning raises the critical
 * batch: Zhang et al. 2019, the noisy quadratic model). P is linear, so
 * everything above carries over with d_i -> P d_i: the probe P z and the
 * gradient P g into the same curvature_estimates.
 *
 * As for B_simple (noise_scale.h) both estimates are averaged by EMAs before
 * the ratio is taken. Deliberately not here: how the trainer evaluates
 * gradients at moved weights, and what it does with the estimate. */
#ifndef BS_OPTIM_CURVATURE_H
#define BS_OPTIM_CURVATURE_H

#include <stdbool.h>
#include <stddef.h>

#include "core/rng.h"
#include "optim/grad_norm.h"

#define CURVATURE_STEP 1e-3 /* |h v| / |w| of the central differences */

typedef struct {
    double ema_decay;  /* weight of the past per measurement */
    double trace_ema;  /* EMA of tr(H Sigma) estimates */
    double ghg_ema;    /* EMA of G^T H G estimates */
    double ema_weight; /* 1 - ema_decay^measurements */
} Curvature;

void curvature_init(Curvature *c, double ema_decay);

/* The probe's signs for M micro-batches (balanced, as above), from rng. */
void curvature_probe_signs(Rng *rng, int micro_batches, float *signs);
/* 1 - c above: E_s[z^T H z] / sum_i d_i^T H d_i. */
double curvature_probe_gain(int micro_batches);

/* One measurement's unbiased estimates from z^T H z (z: the signed sum of
 * deviations with curvature_probe_signs) and g^T H g (g: the step's gradient) with M micro-batches of b
 * sequences; false (outputs untouched) unless M >= 2, b > 0 and both finite. */
bool curvature_estimates(double zhz, double ghg, double b_small, int micro_batches, double *trace_hs,
                         double *ghg_true);
bool curvature_update(Curvature *c, double zhz, double ghg, double b_small, int micro_batches);
/* B_noise in sequences; NaN before the first update or while the G^T H G average is not positive. */
double curvature_noise_scale(const Curvature *c);

/* out = P v, P = 1 / (sqrt(v_hat) + eps) elementwise (grad_norm.h); out may be v. */
void curvature_precondition(const Preconditioner *p, const float *v, float *out, size_t n);

/* The gradient at the weights as they are now (the caller's w), n floats. */
typedef const float *(*GradientAt)(void *ctx);

/* The step h for direction v at weights w (CURVATURE_STEP |w| / |v|); 0 if v is 0. */
double curvature_step(const float *w, const float *v, size_t n);
/* v^T H v by central differences with step h: w is moved to w + h v and
 * w - h v and restored bitwise from saved_w (w's values on entry). With hv
 * non-NULL, H v itself is written there (n floats). Calls grad twice, or
 * not at all when h is 0 (v = 0: the form is 0). */
double curvature_form(float *w, const float *saved_w, const float *v, size_t n, double h, GradientAt grad,
                      void *ctx, float *hv);

#endif

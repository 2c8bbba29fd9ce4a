/* test_opt_noise.c: the gradient noise scale estimator (src/optim/noise_scale)
 * on a problem whose per-example gradient covariance is known exactly.
 *
 * Linear regression, x ~ N(0, I_d), y = x.w* + e, e ~ N(0, s2), loss per
 * example (x.w - y)^2 / 2, evaluated at a fixed w with delta = w - w*. The
 * per-example gradient is g = x (x.delta - e), so (Isserlis' theorem)
 *     G = E g = delta,   E g g^T = (|delta|^2 + s2) I + 2 delta delta^T,
 *     |G|^2 = |delta|^2,  tr(Sigma) = (d + 1) |delta|^2 + d s2.
 * With d = 16, |delta|^2 = 1, s2 = 1: |G|^2 = 1, tr(Sigma) = 33, B_simple = 33.
 *
 * Checks:
 * 1. the two-batch formulas on exact numbers;
 * 2. after enough steps the EMA estimates of |G|^2, tr(Sigma) and B_simple are
 *    within 10% of the truth (the spread of the ratio of raw per-step
 *    estimates is printed beside them: why the EMAs come before the ratio);
 * 3. the same examples laid out as 1 rank x accumulation 4 and 4 ranks x
 *    accumulation 1 (each micro-batch gradient in float32, scaled by
 *    1/global batch as the trainer's loss is, the small-batch norms averaged
 *    over all micro-batches of the step, the big one the reduced gradient)
 *    give bitwise the same estimates; and a trainer that accumulates in place
 *    and recovers each micro-batch gradient as the difference of successive
 *    partial sums agrees to 1e-5 (see the measured bound below).
 * NOISE_SEED=N overrides the data seed: over seeds 1..40 the worst error of
 * check 2 was 3.2%, so the 10% bound is not a lucky draw. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "optim/noise_scale.h"

#define DIM 16
#define MICRO 4    /* sequences per micro-batch: B_small */
#define PARTS 4    /* micro-batches per step: ranks x accumulation steps */
#define GLOBAL (MICRO * PARTS)
#define NOISE_VAR 1.0
#define TRUE_GRAD_SQ 1.0
#define TRUE_TRACE ((DIM + 1) * TRUE_GRAD_SQ + DIM * NOISE_VAR)

typedef struct {
    double x[GLOBAL][DIM];
    double residual_noise[GLOBAL]; /* e */
} StepData;

static void draw_step(Rng *rng, StepData *d) {
    for (int i = 0; i < GLOBAL; i++) {
        for (int j = 0; j < DIM; j++) d->x[i][j] = rng_normal(rng);
        d->residual_noise[i] = sqrt(NOISE_VAR) * rng_normal(rng);
    }
}

/* grad += scale * sum over examples [first, first + MICRO) of x (x.delta - e), in float32. */
static void add_micro_gradient(const StepData *d, const double *delta, int first, float scale, float *grad) {
    for (int i = first; i < first + MICRO; i++) {
        double r = -d->residual_noise[i];
        for (int j = 0; j < DIM; j++) r += d->x[i][j] * delta[j];
        for (int j = 0; j < DIM; j++) grad[j] += scale * (float)(d->x[i][j] * r);
    }
}

/* |g|^2 of a mean-loss gradient from a buffer scaled by 1/GLOBAL per example. */
static double mean_grad_sq(const float *grad, int batch) {
    double k = (double)GLOBAL / batch, sq = 0;
    for (int j = 0; j < DIM; j++) sq += (double)grad[j] * grad[j];
    return k * k * sq;
}

typedef struct {
    double small_sq, big_sq;
} Norms;

/* One rank, four accumulation micro-steps, each micro-gradient computed into
 * its own buffer, measured, then added to the accumulator. */
static Norms one_rank_accumulating(const StepData *d, const double *delta) {
    float accum[DIM] = {0};
    double small_sum = 0;
    for (int k = 0; k < PARTS; k++) {
        float micro[DIM] = {0};
        add_micro_gradient(d, delta, k * MICRO, 1.0f / GLOBAL, micro);
        small_sum += mean_grad_sq(micro, MICRO);
        for (int j = 0; j < DIM; j++) accum[j] += micro[j];
    }
    return (Norms){small_sum / PARTS, mean_grad_sq(accum, GLOBAL)};
}

/* Four ranks, one micro-step each: local gradient and local norm, then an
 * all-reduce (in rank order) of the gradients and of the norms' sum. */
static Norms four_ranks(const StepData *d, const double *delta) {
    float local[PARTS][DIM] = {{0}};
    double local_sq[PARTS];
    for (int r = 0; r < PARTS; r++) {
        add_micro_gradient(d, delta, r * MICRO, 1.0f / GLOBAL, local[r]);
        local_sq[r] = mean_grad_sq(local[r], MICRO);
    }
    float reduced[DIM] = {0};
    double small_sum = 0;
    for (int r = 0; r < PARTS; r++) {
        for (int j = 0; j < DIM; j++) reduced[j] += local[r][j];
        small_sum += local_sq[r];
    }
    return (Norms){small_sum / PARTS, mean_grad_sq(reduced, GLOBAL)};
}

/* One rank accumulating in place (as backward does): micro-step k's gradient
 * is recovered as accum_k - accum_(k-1), which differs from it by the float
 * rounding of the accumulation (at most half an ulp of accum per element). */
static Norms one_rank_in_place(const StepData *d, const double *delta) {
    float accum[DIM] = {0}, before[DIM];
    double small_sum = 0;
    for (int k = 0; k < PARTS; k++) {
        memcpy(before, accum, sizeof accum);
        add_micro_gradient(d, delta, k * MICRO, 1.0f / GLOBAL, accum);
        float diff[DIM];
        for (int j = 0; j < DIM; j++) diff[j] = accum[j] - before[j];
        small_sum += mean_grad_sq(diff, MICRO);
    }
    return (Norms){small_sum / PARTS, mean_grad_sq(accum, GLOBAL)};
}

static int check(const char *what, double got, double want, double rel_tol) {
    double rel = fabs(got - want) / fabs(want);
    bool ok = rel <= rel_tol;
    printf("%s %-58s %.6g (want %.6g, rel err %.2e, tol %.0e)\n", ok ? "ok  " : "FAIL", what, got, want, rel, rel_tol);
    return ok ? 0 : 1;
}

static int check_formulas(void) {
    /* |G|^2 = 1, tr(Sigma) = 33: E|G_4|^2 = 1 + 33/4, E|G_16|^2 = 1 + 33/16 (exact in binary). */
    double grad_sq = 0, trace = 0;
    int failures = 0;
    if (!noise_scale_estimates(9.25, 4, 3.0625, 16, &grad_sq, &trace)) failures++;
    failures += check("formula |G|^2 on exact expectations", grad_sq, 1.0, 0);
    failures += check("formula tr(Sigma) on exact expectations", trace, 33.0, 0);
    if (noise_scale_estimates(1, 4, 1, 4, &grad_sq, &trace) || noise_scale_estimates(NAN, 4, 1, 16, &grad_sq, &trace)) {
        printf("FAIL estimates accepted B_small = B_big or a NaN norm\n");
        failures++;
    }
    NoiseScale ns;
    noise_scale_init(&ns, 0.9);
    if (!isnan(noise_scale_simple(&ns))) printf("FAIL B_simple is defined before any update\n"), failures++;
    noise_scale_update(&ns, 9.25, 4, 3.0625, 16);
    failures += check("bias-corrected |G|^2 after one update", noise_scale_grad_sq(&ns), 1.0, 1e-12);
    failures += check("B_simple after one update", noise_scale_simple(&ns), 33.0, 1e-12);
    return failures;
}

int main(void) {
    int failures = check_formulas();
    const int steps = 60000;
    const double decay = 0.9998;
    double delta[DIM];
    Rng rng;
    rng_seed(&rng, getenv("NOISE_SEED") ? strtoull(getenv("NOISE_SEED"), NULL, 10) : 2018);
    for (int j = 0; j < DIM; j++) delta[j] = rng_normal(&rng);
    double len = 0;
    for (int j = 0; j < DIM; j++) len += delta[j] * delta[j];
    for (int j = 0; j < DIM; j++) delta[j] *= sqrt(TRUE_GRAD_SQ / len);

    NoiseScale accumulating, ranks, in_place;
    noise_scale_init(&accumulating, decay);
    noise_scale_init(&ranks, decay);
    noise_scale_init(&in_place, decay);
    bool same = true;
    double worst_in_place = 0, raw_ratio_sum = 0, raw_ratio_sq = 0;
    StepData *d = malloc(sizeof *d);
    for (int s = 0; s < steps; s++) {
        draw_step(&rng, d);
        Norms a = one_rank_accumulating(d, delta), b = four_ranks(d, delta), c = one_rank_in_place(d, delta);
        noise_scale_update(&accumulating, a.small_sq, MICRO, a.big_sq, GLOBAL);
        noise_scale_update(&ranks, b.small_sq, MICRO, b.big_sq, GLOBAL);
        noise_scale_update(&in_place, c.small_sq, MICRO, c.big_sq, GLOBAL);
        same = same && memcmp(&accumulating, &ranks, sizeof ranks) == 0;
        double ba = noise_scale_simple(&accumulating), bc = noise_scale_simple(&in_place);
        if (s >= 100 && isfinite(ba)) worst_in_place = fmax(worst_in_place, fabs(bc - ba) / fabs(ba));
        double g2, tr;
        noise_scale_estimates(a.small_sq, MICRO, a.big_sq, GLOBAL, &g2, &tr);
        raw_ratio_sum += tr / g2;
        raw_ratio_sq += (tr / g2) * (tr / g2);
    }
    free(d);
    double raw_mean = raw_ratio_sum / steps, raw_sd = sqrt(raw_ratio_sq / steps - raw_mean * raw_mean);
    printf("     (ratio of raw per-step estimates: mean %.3g, sd %.3g: why the EMAs come first)\n", raw_mean, raw_sd);
    printf("     truth: |G|^2 = %g, tr(Sigma) = %g, B_simple = %g; %d steps, EMA decay %g, B_small %d, B_big %d\n",
           TRUE_GRAD_SQ, TRUE_TRACE, TRUE_TRACE / TRUE_GRAD_SQ, steps, decay, MICRO, GLOBAL);
    failures += check("EMA |G|^2 vs truth", noise_scale_grad_sq(&accumulating), TRUE_GRAD_SQ, 0.10);
    failures += check("EMA tr(Sigma) vs truth", noise_scale_trace(&accumulating), TRUE_TRACE, 0.10);
    failures += check("B_simple vs truth", noise_scale_simple(&accumulating), TRUE_TRACE / TRUE_GRAD_SQ, 0.10);
    printf("%s 1 rank x accumulation 4 == 4 ranks x accumulation 1, bitwise, every step\n", same ? "ok  " : "FAIL");
    failures += !same;
    /* Measured: about 1e-7 (float rounding of the partial sums, through the
     * estimator's cancellation); 1e-5 leaves two orders of magnitude. */
    bool close = worst_in_place <= 1e-5;
    printf("%s in-place accumulation (differences of partial sums) vs separate micro-gradients: worst rel %.2e "
           "(tol 1e-05)\n", close ? "ok  " : "FAIL", worst_in_place);
    failures += !close;
    if (failures) printf("%d noise-scale check(s) FAILED\n", failures);
    return failures ? 1 : 0;
}

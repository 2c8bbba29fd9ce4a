/* test_opt_estimators.c: the noise-scale estimators beside B_simple and the
 * goodput choice (src/optim/curvature, goodput, grad_norm's preconditioned
 * norm) on a quadratic model whose H and Sigma are known exactly.
 *
 * Model: loss L(w) = 1/2 (w - w*)^T H (w - w*) plus per-sequence gradient
 * noise: a sequence's gradient is G + xi, G = H (w - w*), xi ~ N(0, Sigma).
 * A micro-batch of b sequences has gradient G + N(0, Sigma / b). DIM = 8, H
 * and Sigma dense symmetric positive definite (built from fixed factors).
 *
 * Checks:
 * 1. H v by central differences (curvature_form) equals the exact H v within
 *    a bound derived from float rounding (weights moved in float, gradients
 *    rounded to float; the bound is computed per element below), and v^T H v
 *    likewise; on a quadratic the differences have no truncation error.
 * 2. Unbiasedness over TRIALS steps of M micro-batches: the mean of each
 *    per-step estimate -- |G|^2 and tr(Sigma) (B_simple), |P G|^2 and
 *    tr(P Sigma P) (B_simple of the preconditioned gradient, P from a fixed
 *    v), G^T H G and tr(H Sigma) (B_noise, one balanced-sign probe per step),
 *    G^T P H P G and tr(P H P Sigma) (B_noise(P): the same probe and
 *    gradient through the same P, curvature_precondition) --
 *    is within 4 standard errors of the truth (the standard error from the
 *    estimates' own sample variance: a 4-sigma miss has probability 6e-5 per
 *    check). For tr(Sigma) the sample variance also equals the known
 *    Gaussian value 2 tr(Sigma^2) / (M - 1) within 10% (the sampling error
 *    of a variance over 20000 draws is about 2%). The EMA ratios (the
 *    logged noise scales) are within the sum of the two relative 4-sigma
 *    bounds of the true ratio.
 *    The probe's gain (1 - c, curvature.h) is exact over every arrangement of
 *    the balanced signs for M = 2..7.
 * 3. The noise probe (train/noise_probe.h) fed as the engine feeds it, at
 *    M = 2 and 8: unbiased within 4 standard errors of its known Gaussian
 *    variance, which the measured variance matches (check_probe).
 * 4. goodput: the fit recovers a planted t = a + b B exactly; the choice is
 *    the brute-force argmax of B / t(B) x (B_noise + B_0) / (B_noise + B)
 *    over the granule's multiples and brackets sqrt(a B_noise / b); one
 *    measured size explores twice the batch; a table survives pack/unpack.
 * 5. The noise curve goodput can follow (optim/noise_curve.h): each loss
 *    reads the B of its stretch (above the first pair's loss the first B, at
 *    a pair's loss still that pair's, below the last the last); malformed,
 *    non-decreasing, non-positive and overlong curves are refused with a
 *    reason. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "core/rng.h"
#include "optim/curvature.h"
#include "optim/goodput.h"
#include "optim/grad_norm.h"
#include "optim/noise_curve.h"
#include "optim/noise_scale.h"
#include "train/noise_probe.h"

#define DIM 8
#define B_SMALL 4
#define MICRO 4 /* micro-batches per step */
#define TRIALS 20000

typedef struct {
    double h[DIM][DIM], sigma[DIM][DIM], sigma_chol[DIM][DIM]; /* sigma = L L^T */
    double w_star[DIM];
} Quadratic;

/* a = F F^T / DIM + diag(shift): symmetric positive definite. */
static void spd_from(Rng *rng, double a[DIM][DIM], double shift) {
    double f[DIM][DIM];
    for (int i = 0; i < DIM; i++)
        for (int j = 0; j < DIM; j++) f[i][j] = rng_normal(rng);
    for (int i = 0; i < DIM; i++)
        for (int j = 0; j < DIM; j++) {
            double s = 0;
            for (int k = 0; k < DIM; k++) s += f[i][k] * f[j][k];
            a[i][j] = s / DIM + (i == j ? shift : 0);
        }
}

static void cholesky(double a[DIM][DIM], double l[DIM][DIM]) {
    memset(l, 0, sizeof(double) * DIM * DIM);
    for (int i = 0; i < DIM; i++)
        for (int j = 0; j <= i; j++) {
            double s = a[i][j];
            for (int k = 0; k < j; k++) s -= l[i][k] * l[j][k];
            l[i][j] = i == j ? sqrt(s) : s / l[j][j];
        }
}

static void matvec(double a[DIM][DIM], const double *x, double *y) {
    for (int i = 0; i < DIM; i++) {
        y[i] = 0;
        for (int j = 0; j < DIM; j++) y[i] += a[i][j] * x[j];
    }
}

/* The exact gradient at w, rounded to float as a trainer holds it. */
typedef struct {
    Quadratic *q;
    float *w;
    float g[DIM];
} QuadGrad;

static const float *quad_gradient(void *ctx) {
    QuadGrad *qg = ctx;
    double d[DIM], g[DIM];
    for (int i = 0; i < DIM; i++) d[i] = (double)qg->w[i] - qg->q->w_star[i];
    matvec(qg->q->h, d, g);
    for (int i = 0; i < DIM; i++) qg->g[i] = (float)g[i];
    return qg->g;
}

static double ulp(double x) { return nextafterf((float)fabs(x), INFINITY) - (float)fabs(x); }

static void check_hvp(Quadratic *q, Rng *rng) {
    float w[DIM], saved[DIM], v[DIM], hv[DIM];
    for (int i = 0; i < DIM; i++) {
        w[i] = saved[i] = (float)(q->w_star[i] + rng_normal(rng));
        v[i] = (float)rng_normal(rng);
    }
    QuadGrad qg = {q, w, {0}};
    double h = curvature_step(w, v, DIM);
    double form = curvature_form(w, saved, v, DIM, h, quad_gradient, &qg, hv);
    CHECK(memcmp(w, saved, sizeof w) == 0, "curvature_form restores the weights bitwise");
    double vd[DIM], exact[DIM], exact_form = 0, form_bound = 0, worst = 0;
    for (int i = 0; i < DIM; i++) vd[i] = v[i];
    matvec(q->h, vd, exact);
    for (int i = 0; i < DIM; i++) {
        /* moved weights: fl(w + fl(h v)) is off by at most one ulp of the moved weight per element, on each side;
         * each gradient is rounded to float (half an ulp of |g| <= |H| |w - w*|), then divided by 2h */
        double bound = 0, g_size = 0;
        for (int j = 0; j < DIM; j++) {
            double moved = fabs(saved[j]) + fabs(h * v[j]);
            bound += fabs(q->h[i][j]) * 2 * ulp(moved);
            g_size += fabs(q->h[i][j]) * (fabs((double)saved[j] - q->w_star[j]) + fabs(h * v[j]));
        }
        bound = (bound + 2 * 0.5 * ulp(g_size)) / (2 * h) + ulp(exact[i]); /* + hv's own rounding to float */
        double err = fabs(hv[i] - exact[i]);
        worst = fmax(worst, err / bound);
        CHECK(err <= bound, "Hv[%d] by differences %.9g, exact %.9g, bound %.3g", i, hv[i], exact[i], bound);
        exact_form += vd[i] * exact[i];
        form_bound += fabs(vd[i]) * (bound - ulp(exact[i]));
    }
    printf("HVP by central differences: h = %.3g, worst error / rounding bound = %.3f; v^T H v %.9g vs exact %.9g\n",
           h, worst, form, exact_form);
    CHECK(fabs(form - exact_form) <= form_bound, "v^T H v %.9g vs %.9g (bound %.3g)", form, exact_form, form_bound);
}

/* Running mean and variance of one estimate. */
typedef struct {
    double n, mean, m2;
} Moments;

static void add(Moments *m, double x) {
    m->n += 1;
    double d = x - m->mean;
    m->mean += d / m->n;
    m->m2 += d * (x - m->mean);
}

static double variance(const Moments *m) { return m->m2 / (m->n - 1); }
static double std_error(const Moments *m) { return sqrt(variance(m) / m->n); }

static void check_mean(const char *name, const Moments *m, double truth) {
    double err = fabs(m->mean - truth), tol = 4 * std_error(m);
    printf("  %-14s mean %10.5f  truth %10.5f  |error| %.5f  4 std errors %.5f\n", name, m->mean, truth, err, tol);
    CHECK(err <= tol, "%s: mean %.6f, truth %.6f, tolerance %.6f", name, m->mean, truth, tol);
}

/* The ratio of two EMA averages against the true ratio: within the sum of
 * the two means' relative 4-sigma bounds (plus the EMA's own noise, bounded
 * the same way from the per-step variances with the EMA's effective count). */
static void check_ratio(const char *name, double ratio, double truth, const Moments *num, const Moments *den,
                        double ema_count) {
    double rel = 4 * sqrt(variance(num) / ema_count) / fabs(num->mean) + 4 * sqrt(variance(den) / ema_count) / fabs(den->mean);
    printf("  %-14s EMA ratio %.4f  truth %.4f  relative error %.4f  bound %.4f\n", name, ratio, truth,
           fabs(ratio - truth) / truth, rel);
    CHECK(fabs(ratio - truth) <= rel * truth, "%s: ratio %.5f, truth %.5f", name, ratio, truth);
}

typedef struct {
    Moments grad_sq, trace, pgrad_sq, ptrace, ghg, trace_hs, pghg, ptrace_hs;
    NoiseScale simple, precond;
    Curvature curv, curv_precond;
} Estimates;

/* One step: M micro-batch gradients g_i = G + N(0, Sigma / b), the
 * estimators fed exactly as the trainer feeds them. */
static void one_step(Quadratic *q, Rng *rng, const double *G, const Preconditioner *pre, Estimates *e) {
    float g[MICRO][DIM], mean[DIM] = {0};
    for (int m = 0; m < MICRO; m++) {
        double z[DIM], noise[DIM];
        for (int i = 0; i < DIM; i++) z[i] = rng_normal(rng) / sqrt(B_SMALL);
        matvec(q->sigma_chol, z, noise);
        for (int i = 0; i < DIM; i++) {
            g[m][i] = (float)(G[i] + noise[i]);
            mean[i] += g[m][i] / MICRO;
        }
    }
    double small = 0, psmall = 0;
    for (int m = 0; m < MICRO; m++) {
        small += sum_of_squares(g[m], DIM) / MICRO;
        psmall += preconditioned_sum_of_squares(g[m], NULL, DIM, pre) / MICRO;
    }
    double big = sum_of_squares(mean, DIM), pbig = preconditioned_sum_of_squares(mean, NULL, DIM, pre);
    double gsq, tr;
    noise_scale_estimates(small, B_SMALL, big, B_SMALL * MICRO, &gsq, &tr);
    add(&e->grad_sq, gsq);
    add(&e->trace, tr);
    noise_scale_estimates(psmall, B_SMALL, pbig, B_SMALL * MICRO, &gsq, &tr);
    add(&e->pgrad_sq, gsq);
    add(&e->ptrace, tr);
    noise_scale_update(&e->simple, small, B_SMALL, big, B_SMALL * MICRO);
    noise_scale_update(&e->precond, psmall, B_SMALL, pbig, B_SMALL * MICRO);
    /* the probe z = sum_i s_i (g_i - g); the forms by differences around w* (the Hessian of a quadratic is the
     * same everywhere) */
    float probe[DIM] = {0}, w[DIM], saved[DIM], signs[MICRO];
    curvature_probe_signs(rng, MICRO, signs);
    for (int m = 0; m < MICRO; m++)
        for (int i = 0; i < DIM; i++) probe[i] += signs[m] * (g[m][i] - mean[i]);
    for (int i = 0; i < DIM; i++) w[i] = saved[i] = (float)q->w_star[i];
    QuadGrad qg = {q, w, {0}};
    double zhz = curvature_form(w, saved, probe, DIM, curvature_step(w, probe, DIM), quad_gradient, &qg, NULL);
    double ghg = curvature_form(w, saved, mean, DIM, curvature_step(w, mean, DIM), quad_gradient, &qg, NULL);
    double trace_hs, ghg_true;
    curvature_estimates(zhz, ghg, B_SMALL, MICRO, &trace_hs, &ghg_true);
    add(&e->trace_hs, trace_hs);
    add(&e->ghg, ghg_true);
    curvature_update(&e->curv, zhz, ghg, B_SMALL, MICRO);
    /* B_noise(P): the same probe and gradient through P */
    float pz[DIM], pg[DIM];
    curvature_precondition(pre, probe, pz, DIM);
    curvature_precondition(pre, mean, pg, DIM);
    double pzhz = curvature_form(w, saved, pz, DIM, curvature_step(w, pz, DIM), quad_gradient, &qg, NULL);
    double pghg = curvature_form(w, saved, pg, DIM, curvature_step(w, pg, DIM), quad_gradient, &qg, NULL);
    curvature_estimates(pzhz, pghg, B_SMALL, MICRO, &trace_hs, &ghg_true);
    add(&e->ptrace_hs, trace_hs);
    add(&e->pghg, ghg_true);
    curvature_update(&e->curv_precond, pzhz, pghg, B_SMALL, MICRO);
}

static double sum_of_squares_d(const double *x) {
    double s = 0;
    for (int i = 0; i < DIM; i++) s += x[i] * x[i];
    return s;
}

static double trace_product(double a[DIM][DIM], double b[DIM][DIM]) {
    double s = 0;
    for (int i = 0; i < DIM; i++)
        for (int j = 0; j < DIM; j++) s += a[i][j] * b[j][i];
    return s;
}

static void check_unbiased(Quadratic *q, Rng *rng) {
    double G[DIM], d[DIM];
    for (int i = 0; i < DIM; i++) d[i] = 0.3 * rng_normal(rng);
    matvec(q->h, d, G);
    float v[DIM];
    double p[DIM]; /* P = 1 / (sqrt(v) v_scale + eps), a fixed preconditioner spanning a factor of about 10 */
    for (int i = 0; i < DIM; i++) v[i] = (float)(1e-4 * (1 + 10.0 * i / DIM) * (1 + 10.0 * i / DIM));
    Preconditioner pre = {v, 1.0 / sqrt(1 - pow(0.95, 3)), 1e-8};
    for (int i = 0; i < DIM; i++) p[i] = 1.0 / (sqrt((double)v[i]) * pre.v_scale + pre.eps);
    double truth_gsq = 0, truth_pgsq = 0, truth_ghg = 0, hg[DIM], truth_ptrace = 0;
    matvec(q->h, G, hg);
    for (int i = 0; i < DIM; i++) {
        truth_gsq += G[i] * G[i];
        truth_pgsq += p[i] * p[i] * G[i] * G[i];
        truth_ghg += G[i] * hg[i];
        truth_ptrace += p[i] * p[i] * q->sigma[i][i];
    }
    double truth_trace = 0, sigma2 = trace_product(q->sigma, q->sigma), truth_ths = trace_product(q->h, q->sigma);
    for (int i = 0; i < DIM; i++) truth_trace += q->sigma[i][i];
    double php[DIM][DIM], pg[DIM], phpg[DIM], truth_pghg = 0; /* P H P, and G^T P H P G */
    for (int i = 0; i < DIM; i++) {
        pg[i] = p[i] * G[i];
        for (int j = 0; j < DIM; j++) php[i][j] = p[i] * q->h[i][j] * p[j];
    }
    matvec(php, G, phpg);
    for (int i = 0; i < DIM; i++) truth_pghg += G[i] * phpg[i];
    const double truth_pths = trace_product(php, q->sigma);
    printf("preconditioned: |P G| / |G| = %.1f, tr(PHP Sigma) %.4g\n", sqrt(sum_of_squares_d(pg) / truth_gsq),
           truth_pths);
    const double decay = 0.999;
    Estimates e = {0};
    noise_scale_init(&e.simple, decay);
    noise_scale_init(&e.precond, decay);
    curvature_init(&e.curv, decay);
    curvature_init(&e.curv_precond, decay);
    for (int t = 0; t < TRIALS; t++) one_step(q, rng, G, &pre, &e);
    printf("unbiasedness over %d steps of %d micro-batches of %d:\n", TRIALS, MICRO, B_SMALL);
    check_mean("|G|^2", &e.grad_sq, truth_gsq);
    check_mean("tr(Sigma)", &e.trace, truth_trace);
    check_mean("|P G|^2", &e.pgrad_sq, truth_pgsq);
    check_mean("tr(P Sigma P)", &e.ptrace, truth_ptrace);
    check_mean("G^T H G", &e.ghg, truth_ghg);
    check_mean("tr(H Sigma)", &e.trace_hs, truth_ths);
    check_mean("G^T PHP G", &e.pghg, truth_pghg);
    check_mean("tr(PHP Sigma)", &e.ptrace_hs, truth_pths);
    double known = 2 * sigma2 / (MICRO - 1);
    printf("  var of tr(Sigma) estimate %.4f, Gaussian theory 2 tr(Sigma^2) / (M - 1) = %.4f\n", variance(&e.trace), known);
    CHECK(fabs(variance(&e.trace) - known) <= 0.1 * known, "variance of tr(Sigma) %.4f vs %.4f", variance(&e.trace), known);
    double ema_count = (1 + decay) / (1 - decay); /* effective samples of an EMA (the variance of its mean) */
    check_ratio("B_simple", noise_scale_simple(&e.simple), truth_trace / truth_gsq, &e.trace, &e.grad_sq, ema_count);
    check_ratio("B_simple(P g)", noise_scale_simple(&e.precond), truth_ptrace / truth_pgsq, &e.ptrace, &e.pgrad_sq,
                ema_count);
    check_ratio("B_noise", curvature_noise_scale(&e.curv), truth_ths / truth_ghg, &e.trace_hs, &e.ghg, ema_count);
    check_ratio("B_noise(P)", curvature_noise_scale(&e.curv_precond), truth_pths / truth_pghg, &e.ptrace_hs, &e.pghg,
                ema_count);
    /* the preconditioner changes the answer on this model, so the check above is not B_noise's again */
    printf("  B_noise(P) / B_noise truth %.3f\n", truth_pths / truth_pghg / (truth_ths / truth_ghg));
    CHECK(fabs(truth_pths / truth_pghg - truth_ths / truth_ghg) > 0.05 * truth_ths / truth_ghg,
          "P moves B_noise on the test model");
}

/* One probe of M micro-batch gradients g_i = G + N(0, Sigma / b), fed as
 * the engine leaves them (the sum of |g_i / M|^2 and |mean g_i|^2, float
 * gradients), alone (EMA 0): its |G|^2 and tr(Sigma). */
static void one_probe(Quadratic *q, Rng *rng, const double *G, int M, double *grad_sq, double *trace) {
    float g[DIM], mean[DIM] = {0};
    double micro_sum_sq = 0;
    for (int m = 0; m < M; m++) {
        double z[DIM], noise[DIM];
        for (int i = 0; i < DIM; i++) z[i] = rng_normal(rng) / sqrt(B_SMALL);
        matvec(q->sigma_chol, z, noise);
        for (int i = 0; i < DIM; i++) {
            g[i] = (float)((G[i] + noise[i]) / M); /* the micro-step's gradient of the loss scaled by 1/M */
            mean[i] += g[i];
        }
        micro_sum_sq += sum_of_squares(g, DIM);
    }
    NoiseScale ns;
    noise_scale_init(&ns, 0.0);
    CHECK(noise_probe_update(&ns, micro_sum_sq, M, B_SMALL, sum_of_squares(mean, DIM)), "a probe of %d", M);
    *grad_sq = noise_scale_grad_sq(&ns);
    *trace = noise_scale_trace(&ns);
}

/* The probe (train/noise_probe.h) at M = 2 (the fewest) and 8 micro-batches:
 * over TRIALS probes the mean |G|^2 and tr(Sigma) are within 4 standard
 * errors of the truth, the standard errors from the Gaussian variances
 *   Var tr = 2 tr(Sigma^2) / (M - 1)
 *   Var |G|^2 = 2 tr(Sigma^2) / (M b)^2 x M / (M - 1) + 4 G^T Sigma G / (M b)
 * (|mean g|^2 of N(G, Sigma / (M b)), minus tr / (M b), independent of the
 * mean for Gaussian draws); the measured variances match those within 10%
 * (a variance's sampling error over 20000 draws is a few %). With EMA 0 a
 * probe's values are its own estimates, whatever came before. */
static void check_probe(Quadratic *q, Rng *rng) {
    double G[DIM], d[DIM], sg[DIM];
    for (int i = 0; i < DIM; i++) d[i] = 0.3 * rng_normal(rng);
    matvec(q->h, d, G);
    matvec(q->sigma, G, sg);
    double truth_trace = 0, gsg = 0, sigma2 = trace_product(q->sigma, q->sigma);
    for (int i = 0; i < DIM; i++) {
        truth_trace += q->sigma[i][i];
        gsg += G[i] * sg[i];
    }
    const double truth_gsq = sum_of_squares_d(G);
    printf("the probe: B_simple truth %.3f\n", truth_trace / truth_gsq);
    const int sizes[2] = {2, 8};
    for (int s = 0; s < 2; s++) {
        const int M = sizes[s];
        const double mb = (double)M * B_SMALL;
        const double var_trace = 2 * sigma2 / (M - 1), var_gsq = 2 * sigma2 / (mb * mb) * M / (M - 1) + 4 * gsg / mb;
        Moments gsq = {0}, tr = {0};
        for (int t = 0; t < TRIALS; t++) {
            double a, b;
            one_probe(q, rng, G, M, &a, &b);
            add(&gsq, a);
            add(&tr, b);
        }
        const double known[2] = {var_gsq, var_trace}, truth[2] = {truth_gsq, truth_trace};
        const Moments *m[2] = {&gsq, &tr};
        const char *names[2] = {"|G|^2", "tr(Sigma)"};
        for (int k = 0; k < 2; k++) {
            double err = fabs(m[k]->mean - truth[k]), tol = 4 * sqrt(known[k] / TRIALS);
            printf("  M=%d %-9s mean %9.5f truth %9.5f |error| %.5f, 4 std errors (known variance) %.5f; variance "
                   "%.4f, known %.4f\n", M, names[k], m[k]->mean, truth[k], err, tol, variance(m[k]), known[k]);
            CHECK(err <= tol, "probe M=%d %s: mean %.6f, truth %.6f, tolerance %.6f", M, names[k], m[k]->mean,
                  truth[k], tol);
            CHECK(fabs(variance(m[k]) - known[k]) <= 0.1 * known[k], "probe M=%d %s: variance %.5f, known %.5f", M,
                  names[k], variance(m[k]), known[k]);
        }
    }
    NoiseScale ns; /* EMA 0: the second probe's values are its own */
    noise_scale_init(&ns, 0.0);
    double want_gsq = NAN, want_tr = NAN;
    CHECK(noise_probe_update(&ns, 0.2, 4, B_SMALL, 0.5) && noise_probe_update(&ns, 0.1, 4, B_SMALL, 0.25) &&
              noise_scale_estimates(0.1 * 4, B_SMALL, 0.25, 4 * B_SMALL, &want_gsq, &want_tr),
          "probes");
    CHECK(want_gsq > 0 && noise_scale_grad_sq(&ns) == want_gsq && noise_scale_trace(&ns) == want_tr &&
              noise_scale_simple(&ns) == want_tr / want_gsq, "EMA 0: each probe alone");
    CHECK(!noise_probe_update(&ns, 2.0, 1, B_SMALL, 0.25), "one micro-batch has no spread");
}

/* E_s[z^T z] over every arrangement of the balanced signs (each equally
 * likely under a uniform permutation) equals gain x sum |d_i|^2 exactly, for
 * deviations d_i summing to zero; and the shuffle draws each count right. */
static void check_probe_gain(Rng *rng) {
    for (int M = 2; M <= 7; M++) {
        double d[7][3], mean[3] = {0}, sum_sq = 0, total = 0;
        for (int i = 0; i < M; i++)
            for (int k = 0; k < 3; k++) {
                d[i][k] = rng_normal(rng);
                mean[k] += d[i][k] / M;
            }
        for (int i = 0; i < M; i++)
            for (int k = 0; k < 3; k++) {
                d[i][k] -= mean[k];
                sum_sq += d[i][k] * d[i][k];
            }
        int arrangements = 0;
        for (int mask = 0; mask < 1 << M; mask++) {
            if (__builtin_popcount((unsigned)mask) != M / 2) continue;
            double z[3] = {0};
            for (int i = 0; i < M; i++)
                for (int k = 0; k < 3; k++) z[k] += (mask >> i & 1 ? 1 : -1) * d[i][k];
            total += z[0] * z[0] + z[1] * z[1] + z[2] * z[2];
            arrangements++;
        }
        double gain = curvature_probe_gain(M), mean_form = total / arrangements;
        CHECK(fabs(mean_form - gain * sum_sq) <= 1e-12 * gain * sum_sq, "M=%d: E[z^T z] %.15g vs %.15g", M, mean_form,
              gain * sum_sq);
        float signs[7];
        curvature_probe_signs(rng, M, signs);
        int plus = 0;
        for (int i = 0; i < M; i++) plus += signs[i] > 0;
        CHECK(plus == M / 2, "M=%d: %d plus signs", M, plus);
    }
}

/* Brute force in double, independent of goodput.c's loop. */
static long best_batch(double a, double b, double b_noise, long lo, long hi, long granule, long base) {
    long best = lo;
    double top = -1;
    for (long B = lo; B <= hi; B += granule) {
        double value = B / (a + b * B) * (b_noise + base) / (b_noise + B);
        if (value > top) top = value, best = B;
    }
    return best;
}

/* --goodput-time-fit: a tried size's time is the fitted line's, not its own
 * scattered measurement, so the choice is the brute force on the line. */
static void check_goodput_fitted_times(long lo, long hi, long granule) {
    const double a = 0.21, b = 0.003, b_noise = 16; /* the 100 Mb/s link's line: sqrt(a B_noise / b) = 33.5 */
    const long sizes[] = {8, 16, 32, 40};
    const double scatter[] = {1.0, 1.1, 1.25, 0.9}; /* one size's timing far off the line */
    Goodput table, line;
    goodput_init(&table, lo, hi, granule, lo);
    for (int i = 0; i < 4; i++) goodput_record(&table, sizes[i], (a + b * sizes[i]) * scatter[i]);
    line = table;
    line.fitted_times = true;
    double fa, fb, gp, eff;
    CHECK(goodput_fit(&line, &fa, &fb), "a line through four sizes");
    CHECK(goodput_step_seconds(&table, 32) == (a + b * 32) * 1.25, "table: a tried size reads its own time");
    CHECK(fabs(goodput_step_seconds(&line, 32) - (fa + fb * 32)) < 1e-15, "fitted: a tried size reads the line");
    long by_table = goodput_choose(&table, b_noise, 16, &gp, &eff), by_line = goodput_choose(&line, b_noise, 16, &gp, &eff);
    long want = best_batch(fa, fb, b_noise, lo, hi, granule, lo);
    printf("goodput, fitted times: line t = %.3f + %.4f B through scattered sizes; chose %ld (brute force on the line "
           "%ld), from the table %ld\n", fa, fb, by_line, want, by_table);
    CHECK(by_line == want, "fitted times chose %ld, the line's best %ld", by_line, want);
    CHECK(by_table != 32, "the table reads 32 as 25%% slow and avoids it (chose %ld)", by_table);
}

static void check_goodput(void) {
    const double a = 0.6, b = 0.004, b_noise = 40;
    const long granule = 4, lo = 8, hi = 256;
    Goodput g;
    goodput_init(&g, lo, hi, granule, lo);
    double gp, eff;
    goodput_record(&g, 8, a + b * 8);
    long first = goodput_choose(&g, b_noise, 8, &gp, &eff);
    CHECK(first == 16, "one measured size explores twice the batch (got %ld)", first);
    CHECK(goodput_choose(&g, NAN, 8, &gp, &eff) == 8, "no noise scale: the batch stays");
    for (int k = 0; k < 3; k++) goodput_record(&g, 16, a + b * 16);
    double fa, fb;
    CHECK(goodput_fit(&g, &fa, &fb) && fabs(fa - a) < 1e-12 && fabs(fb - b) < 1e-12, "fit %.15g %.15g", fa, fb);
    long chosen = goodput_choose(&g, b_noise, 16, &gp, &eff);
    long want = best_batch(a, b, b_noise, lo, hi, granule, lo);
    double star = sqrt(a * b_noise / b);
    printf("goodput: planted t = %.3g + %.3g B, B_noise %.0f: chose %ld (brute force %ld, sqrt(a B_noise / b) = %.1f), "
           "goodput %.2f seq/s, efficiency %.3f\n", a, b, b_noise, chosen, want, star, gp, eff);
    CHECK(chosen == want, "goodput chose %ld, the formula %ld", chosen, want);
    CHECK(fabs((double)chosen - star) < granule, "%ld brackets %.2f", chosen, star);
    CHECK(fabs(eff - (b_noise + lo) / (b_noise + chosen)) < 1e-12, "efficiency %.6f", eff);
    CHECK(fabs(gp - chosen / (a + b * chosen) * eff) < 1e-9, "goodput %.6f", gp);
    /* more noise, larger batch; no fixed cost, the smallest batch */
    CHECK(goodput_choose(&g, 400, 16, &gp, &eff) == best_batch(a, b, 400, lo, hi, granule, lo), "B_noise 400");
    Goodput flat;
    goodput_init(&flat, lo, hi, granule, lo);
    goodput_record(&flat, 8, 0.004 * 8 - 0.001); /* a negative intercept from noise: clamped to a = 0 */
    goodput_record(&flat, 64, 0.004 * 64);
    CHECK(goodput_fit(&flat, &fa, &fb) && fa == 0, "a clamped to 0 (got %g)", fa);
    CHECK(goodput_choose(&flat, b_noise, 64, &gp, &eff) == lo, "no fixed cost: MIN");
    check_goodput_fitted_times(lo, hi, granule);
    double words[GOODPUT_STATE_WORDS];
    goodput_pack(&g, words);
    Goodput back = g;
    back.sizes = 0;
    CHECK(goodput_unpack(&back, words) && memcmp(back.size, g.size, sizeof g.size) == 0 && back.sizes == g.sizes,
          "pack / unpack");
}

static void check_noise_curve(void) {
    NoiseCurve c;
    char why[300];
    CHECK(noise_curve_parse("2.8:9.5,2.6:12,2.45:15.25", &c, why, sizeof why) && c.count == 3, "parse: %s", why);
    const double at[][2] = {{5.5, 9.5}, {2.81, 9.5}, {2.8, 12}, {2.7, 12}, {2.6, 15.25}, {2.5, 15.25},
                            {2.45, 15.25}, {2.0, 15.25}};
    for (size_t k = 0; k < sizeof at / sizeof at[0]; k++)
        CHECK(noise_curve_at(&c, at[k][0]) == at[k][1], "loss %g: %g (want %g)", at[k][0],
              noise_curve_at(&c, at[k][0]), at[k][1]);
    CHECK(isnan(noise_curve_at(&c, NAN)), "a NaN loss reads no noise scale");
    CHECK(noise_curve_parse("3:4", &c, why, sizeof why) && noise_curve_at(&c, 1) == 4, "one pair");
    const char *bad[] = {"", "2.8", "2.8:", ":9", "2.8:9,", "2.8:9,2.9:12", "2.8:9,2.8:12", "2.8:0", "-1:4",
                         "2.8:9;2.6:12", "2.8:9x", "inf:3", "2.8:nan",
                         "17:1,16:1,15:1,14:1,13:1,12:1,11:1,10:1,9:1,8:1,7:1,6:1,5:1,4:1,3:1,2:1,1:1"};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        why[0] = 0;
        CHECK(!noise_curve_parse(bad[k], &c, why, sizeof why) && why[0], "'%s' refused with a reason", bad[k]);
    }
}

int main(void) {
    Rng rng;
    rng_seed(&rng, 2021);
    Quadratic q;
    spd_from(&rng, q.h, 0.5);
    spd_from(&rng, q.sigma, 0.2);
    cholesky(q.sigma, q.sigma_chol);
    for (int i = 0; i < DIM; i++) q.w_star[i] = rng_normal(&rng);
    check_hvp(&q, &rng);
    check_probe_gain(&rng);
    check_unbiased(&q, &rng);
    check_probe(&q, &rng);
    check_goodput();
    check_noise_curve();
    if (failures) fprintf(stderr, "%d check(s) failed\n", failures);
    return failures ? 1 : 0;
}

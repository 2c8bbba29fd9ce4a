/* test_critical_batch.c: the trade-off fit and its bootstrap
 * (src/sweep/critical_batch) on points drawn from the formula.
 *
 * Truth: S_min = 50 steps, B_crit = 12 sequences of 128 tokens (E_min =
 * 76,800 tokens); batches 4..256 sequences (7, doubling), 3 seeds each, as a
 * sweep would run them. A seed's noise is multiplicative on the steps (and so
 * on the tokens, E = B S): S = S(B) exp(SIGMA z), z standard normal.
 *
 * Checks:
 * 1. exact points (SIGMA = 0): S_min, E_min and B_crit come back to 1e-7
 *    relative (the golden-section search stops at 1e-10 in log B_crit);
 * 2. noisy points (SIGMA = 0.05, 5% per run): each of log S_min, log E_min
 *    and log B_crit within 4 standard errors of the truth, the standard
 *    errors those of the linearised least squares, SIGMA^2 (J^T J)^-1 with J
 *    the Jacobian of log S(B_i) in (log S_min, log B_crit);
 * 3. the 95% bootstrap interval (1000 resamples) of each covers the truth on
 *    that data set, and over DATASETS independent data sets it covers it at
 *    least 80% of the time: with 3 seeds per batch the resampled spread is
 *    about sqrt(2/3) of the true one, so the expected coverage is
 *    P(|Z| < 1.96 sqrt(2/3)) = 89% (binomial sd over 100 sets: 3.1%, so 80% is
 *    about 3 sd below; the measured rates are printed); and the interval is
 *    not vacuous: its median width is between 0.5x and 1.2x the linearised
 *    2 x 1.96 x se (expected about sqrt(2/3) = 0.82x);
 * 4. exact points from batches all far below B_crit (B_crit = 1e5 sequences,
 *    batches 4..64, so the truth lies past the search's bound): the fit says
 *    it is not bracketed (and the same batches at B_crit = 12 are); one batch, too few points, and
 *    non-positive steps are refused with a reason;
 * 5. the quantile helper equals numpy's default (linear) on known values. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/rng.h"
#include "sweep/critical_batch.h"

#define T 128.0
#define S_MIN 50.0
#define B_CRIT (12.0 * T)
#define BATCHES 7
#define SEEDS 3
#define POINTS (BATCHES * SEEDS)
#define SIGMA 0.05
#define DATASETS 100
#define RESAMPLES 1000

static double batch_tokens(int b) { return 4.0 * T * (double)(1 << b); }

/* POINTS points from the formula with truth (s_min, b_crit), noise sigma, batches from first_batch. */
static void draw(Rng *rng, double s_min, double b_crit, double sigma, TradeoffPoint *p) {
    for (int b = 0; b < BATCHES; b++)
        for (int s = 0; s < SEEDS; s++) {
            double batch = batch_tokens(b), steps = s_min * (1 + b_crit / batch) * exp(sigma * rng_normal(rng));
            p[b * SEEDS + s] = (TradeoffPoint){steps, steps * batch, b};
        }
}

/* Linearised standard errors of log S_min, log B_crit and log E_min at the truth. */
static void standard_errors(double *se_smin, double *se_bcrit, double *se_emin) {
    double a11 = 0, a12 = 0, a22 = 0;
    for (int b = 0; b < BATCHES; b++) {
        double r = B_CRIT / batch_tokens(b), w = r / (1 + r); /* d log S(B) / d log B_crit */
        a11 += SEEDS, a12 += SEEDS * w, a22 += SEEDS * w * w;
    }
    double det = a11 * a22 - a12 * a12, v11 = a22 / det, v22 = a11 / det, v12 = -a12 / det;
    *se_smin = SIGMA * sqrt(v11), *se_bcrit = SIGMA * sqrt(v22), *se_emin = SIGMA * sqrt(v11 + v22 + 2 * v12);
}

static void check_exact(void) {
    Rng rng;
    rng_seed(&rng, 1);
    TradeoffPoint p[POINTS];
    draw(&rng, S_MIN, B_CRIT, 0, p);
    TradeoffFit f;
    char why[200];
    CHECK(tradeoff_fit(p, POINTS, &f, why, sizeof why), "exact fit refused: %s", why);
    CHECK(fabs(f.s_min / S_MIN - 1) < 1e-7, "exact: S_min %.9g, truth %g", f.s_min, S_MIN);
    CHECK(fabs(f.b_crit / B_CRIT - 1) < 1e-7, "exact: B_crit %.9g, truth %g", f.b_crit, B_CRIT);
    CHECK(fabs(f.e_min / (S_MIN * B_CRIT) - 1) < 1e-7, "exact: E_min %.9g, truth %g", f.e_min, S_MIN * B_CRIT);
    CHECK(f.bracketed && f.rms_log < 1e-7, "exact: bracketed %d, rms %g", f.bracketed, f.rms_log);
    CHECK(fabs(tradeoff_steps(&f, B_CRIT) - 2 * S_MIN) < 1e-5, "at B_crit the steps are 2 S_min: %g",
          tradeoff_steps(&f, B_CRIT));
}

static bool covers(Interval i, double truth) { return i.lo <= truth && truth <= i.hi; }

/* Checks 2 and 3. */
static void check_noisy(void) {
    double se_s, se_b, se_e;
    standard_errors(&se_s, &se_b, &se_e);
    const double truth[3] = {S_MIN, S_MIN * B_CRIT, B_CRIT}, se[3] = {se_s, se_e, se_b};
    const char *names[3] = {"S_min", "E_min", "B_crit"};
    int covered[3] = {0, 0, 0};
    double widths[3][DATASETS];
    Rng rng;
    rng_seed(&rng, 2024);
    for (int d = 0; d < DATASETS; d++) {
        TradeoffPoint p[POINTS];
        draw(&rng, S_MIN, B_CRIT, SIGMA, p);
        TradeoffFit f;
        char why[200];
        if (!tradeoff_fit(p, POINTS, &f, why, sizeof why)) {
            CHECK(false, "noisy fit refused: %s", why);
            return;
        }
        TradeoffInterval ci;
        tradeoff_bootstrap(p, POINTS, RESAMPLES, 0.95, 7 + (uint64_t)d, &ci);
        const double fitted[3] = {f.s_min, f.e_min, f.b_crit};
        const Interval intervals[3] = {ci.s_min, ci.e_min, ci.b_crit};
        for (int k = 0; k < 3; k++) {
            covered[k] += covers(intervals[k], truth[k]);
            widths[k][d] = log(intervals[k].hi / intervals[k].lo) / (2 * 1.96 * se[k]);
            if (d > 0) continue;
            double z = log(fitted[k] / truth[k]) / se[k];
            printf("data set 0: %s %.4g (truth %.4g, %+.2f se of %.3f in log), 95%% interval [%.4g, %.4g]\n",
                   names[k], fitted[k], truth[k], z, se[k], intervals[k].lo, intervals[k].hi);
            CHECK(fabs(z) < 4, "%s %.4g is %.1f standard errors from the truth %.4g", names[k], fitted[k], z,
                  truth[k]);
            CHECK(covers(intervals[k], truth[k]), "data set 0: the interval of %s [%g, %g] misses %g", names[k],
                  intervals[k].lo, intervals[k].hi, truth[k]);
        }
        CHECK(ci.resamples == RESAMPLES && f.bracketed, "resamples %d, bracketed %d", ci.resamples, f.bracketed);
    }
    for (int k = 0; k < 3; k++) {
        double rate = (double)covered[k] / DATASETS;
        double width = quantile_sorted_in_place(widths[k], DATASETS, 0.5);
        printf("%s: the 95%% interval covered the truth in %d of %d data sets (expected about 89%%); median width "
               "%.2fx the linearised 2 x 1.96 se\n", names[k], covered[k], DATASETS, width);
        CHECK(rate >= 0.80, "%s: coverage %.2f below 0.80", names[k], rate);
        CHECK(width > 0.5 && width < 1.2, "%s: median interval width %.2fx the linearised one", names[k], width);
    }
}

static void check_refusals(void) {
    Rng rng;
    rng_seed(&rng, 3);
    TradeoffPoint p[POINTS];
    TradeoffFit f;
    char why[200] = "";
    draw(&rng, S_MIN, 1e5 * T, 0, p);
    CHECK(tradeoff_fit(p, 5 * SEEDS, &f, why, sizeof why) && !f.bracketed,
          "batches 4..64 far below B_crit 1e5: bracketed %d (B_crit %g)", f.bracketed, f.b_crit);
    draw(&rng, S_MIN, B_CRIT, 0, p);
    CHECK(tradeoff_fit(p, POINTS, &f, why, sizeof why) && f.bracketed, "the same batches at B_crit 12: bracketed");
    CHECK(!tradeoff_fit(p, SEEDS, &f, why, sizeof why) && strstr(why, "same batch"), "one batch: '%s'", why);
    CHECK(!tradeoff_fit(p, 1, &f, why, sizeof why) && strstr(why, "at least two"), "one point: '%s'", why);
    p[2].steps = 0;
    CHECK(!tradeoff_fit(p, POINTS, &f, why, sizeof why) && strstr(why, "positive"), "zero steps: '%s'", why);
}

static void check_quantile(void) {
    double v[5] = {4, 1, 3, 2, 10}; /* numpy.quantile([4,1,3,2,10], [0, .25, .9, 1]) = 1, 2, 7.6, 10 */
    const double p[4] = {0, 0.25, 0.9, 1}, want[4] = {1, 2, 7.6, 10};
    for (int i = 0; i < 4; i++) {
        double q = quantile_sorted_in_place(v, 5, p[i]);
        CHECK(fabs(q - want[i]) < 1e-12, "quantile %g: %g, numpy %g", p[i], q, want[i]);
    }
}

int main(void) {
    check_exact();
    check_noisy();
    check_refusals();
    check_quantile();
    if (failures) fprintf(stderr, "%d check(s) failed\n", failures);
    else printf("critical batch fit: all checks passed\n");
    return failures ? 1 : 0;
}

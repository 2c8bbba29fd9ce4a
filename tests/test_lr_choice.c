/* test_lr_choice.c: the per-batch learning-rate choice and its bootstrap
 * (src/sweep/lr_choice) on synthetic sweeps.
 *
 * Truth: S(B) = S_min (1 + B_crit / B) with S_min = 50 steps, B_crit = 12
 * sequences of 128 tokens; batches 4..256 (7, doubling) x 3 lrs x 3 seeds.
 * At each batch one lr is planted as the best (PLANTED: the best lr grows
 * with the batch); a run at another lr takes PENALTY = 1.5x the steps per
 * grid step away from it; each run's steps carry multiplicative noise
 * exp(SIGMA z), SIGMA = 0.05 (the geometric mean of 3 seeds moves by about
 * 0.03 in log, against log 1.5 = 0.41 between neighbours). At batch 0 the
 * largest lr is planted fastest of all (0.5x the steps) but one of its 3
 * runs does not reach the target.
 *
 * Checks:
 * 1. the planted lr is chosen at every batch (at batch 0 by rule 1, over the
 *    faster lr that missed a run); an exact tie goes to the smaller lr;
 * 2. the fit on the chosen runs equals, bit for bit, tradeoff_fit of the
 *    planted runs picked out here, and without noise it returns the truth
 *    to 1e-7;
 * 3. the bootstrap is deterministic for a fixed seed (intervals and choice
 *    counts identical), and another seed moves it;
 * 4. the choice is redone in each resample: at batch 0 the faster lr wins
 *    exactly when its 3 draws all miss the run that did not reach the
 *    target, probability (2/3)^3 = 8/27; its share of 4000 resamples is
 *    within 4 binomial sd of that; elsewhere the planted lr wins every
 *    resample;
 * 5. a resample that leaves one batch is skipped and counted: 2 batches, one
 *    lr, 1 of 2 runs missed at each: a batch survives a resample with
 *    probability 3/4, so the unfitted share is 1 - (3/4)^2 = 7/16 (within 4
 *    sd of 4000);
 * 6. with one lr and every run reached the interval equals
 *    tradeoff_bootstrap's exactly (the same draws in the same order). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/rng.h"
#include "sweep/lr_choice.h"

#define T 128.0
#define S_MIN 50.0
#define B_CRIT (12.0 * T)
#define BATCHES 7
#define LRS 3
#define SEEDS 3
#define RUNS (BATCHES * LRS * SEEDS)
#define PENALTY 1.5
#define SIGMA 0.05
#define RESAMPLES 4000

static const int PLANTED[BATCHES] = {0, 0, 1, 1, 1, 2, 2};

static double batch_tokens(int b) { return 4.0 * T * (double)(1 << b); }

/* The grid's runs, batch by batch, lr by lr, seed by seed. */
static void draw_grid(Rng *rng, double sigma, GridRun *runs) {
    for (int b = 0, i = 0; b < BATCHES; b++)
        for (int l = 0; l < LRS; l++)
            for (int s = 0; s < SEEDS; s++, i++) {
                double factor = pow(PENALTY, abs(l - PLANTED[b]));
                bool reached = true;
                if (b == 0 && l == LRS - 1) factor = 0.5, reached = s != 1; /* fastest, but seed 2 misses */
                double steps = S_MIN * (1 + B_CRIT / batch_tokens(b)) * factor * exp(sigma * rng_normal(rng));
                runs[i] = (GridRun){b, l, reached, reached ? steps : NAN, reached ? steps * batch_tokens(b) : NAN};
            }
}

static bool same_fit(const TradeoffFit *a, const TradeoffFit *b) {
    return a->s_min == b->s_min && a->e_min == b->e_min && a->b_crit == b->b_crit && a->rms_log == b->rms_log &&
           a->bracketed == b->bracketed;
}

static bool same_interval(const TradeoffInterval *a, const TradeoffInterval *b) {
    return a->s_min.lo == b->s_min.lo && a->s_min.hi == b->s_min.hi && a->e_min.lo == b->e_min.lo &&
           a->e_min.hi == b->e_min.hi && a->b_crit.lo == b->b_crit.lo && a->b_crit.hi == b->b_crit.hi &&
           a->unfitted == b->unfitted && a->unbracketed == b->unbracketed;
}

/* Checks 1 and 2 on one grid (sigma 0: also the truth). */
static void check_choice_and_fit(double sigma) {
    Rng rng;
    rng_seed(&rng, 11);
    GridRun runs[RUNS];
    draw_grid(&rng, sigma, runs);
    const LrGrid g = {runs, RUNS, BATCHES, LRS};
    LrCell cells[BATCHES * LRS];
    int chosen[BATCHES];
    lr_choose(&g, cells, chosen);
    for (int b = 0; b < BATCHES; b++)
        CHECK(chosen[b] == PLANTED[b], "sigma %g, batch %d: chose lr %d, planted %d", sigma, b, chosen[b], PLANTED[b]);
    CHECK(cells[LRS - 1].missed == 1 && cells[LRS - 1].mean_log_steps < cells[0].mean_log_steps,
          "batch 0: the largest lr is faster (%g < %g) but missed a run (%d)", cells[LRS - 1].mean_log_steps,
          cells[0].mean_log_steps, cells[LRS - 1].missed);
    TradeoffPoint chosen_points[RUNS], planted[RUNS];
    int n = lr_chosen_points(&g, chosen, chosen_points), m = 0;
    for (int i = 0; i < RUNS; i++)
        if (runs[i].lr == PLANTED[runs[i].batch]) planted[m++] = (TradeoffPoint){runs[i].steps, runs[i].tokens, runs[i].batch};
    TradeoffFit a, b;
    char why[200];
    CHECK(n == m && n == BATCHES * SEEDS, "chosen runs %d, planted %d", n, m);
    CHECK(tradeoff_fit(chosen_points, n, &a, why, sizeof why) && tradeoff_fit(planted, m, &b, why, sizeof why),
          "fit refused: %s", why);
    CHECK(same_fit(&a, &b), "the chosen runs' fit (S_min %.17g, B_crit %.17g) differs from the planted runs' "
          "(%.17g, %.17g)", a.s_min, a.b_crit, b.s_min, b.b_crit);
    if (sigma == 0)
        CHECK(fabs(a.s_min / S_MIN - 1) < 1e-7 && fabs(a.b_crit / B_CRIT - 1) < 1e-7,
              "exact: S_min %.9g (truth %g), B_crit %.9g (truth %g)", a.s_min, S_MIN, a.b_crit, B_CRIT);
    printf("sigma %g: chosen lrs match the planted ones; fit S_min %.3f, B_crit %.1f tokens\n", sigma, a.s_min,
           a.b_crit);
}

static void check_tie(void) {
    GridRun runs[4] = {{0, 0, true, 10, 40}, {0, 1, true, 10, 40}, {0, 2, false, NAN, NAN}, {0, 3, true, 9, 36}};
    LrCell cells[4];
    int chosen;
    LrGrid g = {runs, 3, 1, 4};
    lr_choose(&g, cells, &chosen);
    CHECK(chosen == 0, "an exact tie between lrs 0 and 1: chose %d, want the smaller (0)", chosen);
    g.n = 4;
    lr_choose(&g, cells, &chosen);
    CHECK(chosen == 3, "lr 3 takes fewer steps: chose %d", chosen);
    runs[0].reached = runs[1].reached = runs[3].reached = false;
    lr_choose(&g, cells, &chosen);
    CHECK(chosen == -1, "no run reached: chose %d, want -1", chosen);
}

/* Checks 3 and 4. */
static void check_bootstrap(void) {
    Rng rng;
    rng_seed(&rng, 12);
    GridRun runs[RUNS];
    draw_grid(&rng, SIGMA, runs);
    const LrGrid g = {runs, RUNS, BATCHES, LRS};
    TradeoffInterval a, b, c;
    int counts_a[BATCHES * LRS], counts_b[BATCHES * LRS], counts_c[BATCHES * LRS];
    lr_choice_bootstrap(&g, RESAMPLES, 0.95, 99, &a, counts_a);
    lr_choice_bootstrap(&g, RESAMPLES, 0.95, 99, &b, counts_b);
    lr_choice_bootstrap(&g, RESAMPLES, 0.95, 100, &c, counts_c);
    CHECK(same_interval(&a, &b) && memcmp(counts_a, counts_b, sizeof counts_a) == 0,
          "the same seed gave different intervals or choices");
    CHECK(!same_interval(&a, &c), "seeds 99 and 100 gave the same interval: the seed is not used");
    CHECK(a.unfitted == 0 && a.resamples == RESAMPLES, "unfitted %d of %d", a.unfitted, a.resamples);
    CHECK(a.b_crit.lo < a.b_crit.hi && a.b_crit.lo <= B_CRIT * 1.2 && a.b_crit.hi >= B_CRIT / 1.2,
          "B_crit interval [%g, %g] far from the truth %g", a.b_crit.lo, a.b_crit.hi, B_CRIT);
    const double p = 8.0 / 27, share = (double)counts_a[LRS - 1] / RESAMPLES;
    const double sd = sqrt(p * (1 - p) / RESAMPLES);
    printf("batch 0: the lr that missed a run chosen in %.3f of %d resamples (expected %.3f, sd %.3f)\n", share,
           RESAMPLES, p, sd);
    CHECK(fabs(share - p) < 4 * sd, "batch 0: share %.4f, expected 8/27 = %.4f (sd %.4f)", share, p, sd);
    CHECK(counts_a[0] + counts_a[LRS - 1] == RESAMPLES, "batch 0: lr 1 chosen %d times", counts_a[1]);
    for (int b = 1; b < BATCHES; b++)
        CHECK(counts_a[b * LRS + PLANTED[b]] == RESAMPLES, "batch %d: the planted lr chosen in %d of %d resamples",
              b, counts_a[b * LRS + PLANTED[b]], RESAMPLES);
}

/* Check 5. */
static void check_unfitted(void) {
    GridRun runs[4] = {{0, 0, true, 100, 100 * 512}, {0, 0, false, NAN, NAN}, {1, 0, true, 30, 30 * 4096},
                       {1, 0, false, NAN, NAN}};
    const LrGrid g = {runs, 4, 2, 1};
    TradeoffInterval ci;
    lr_choice_bootstrap(&g, RESAMPLES, 0.95, 5, &ci, NULL);
    const double p = 7.0 / 16, share = (double)ci.unfitted / RESAMPLES, sd = sqrt(p * (1 - p) / RESAMPLES);
    printf("unfitted resamples: %.3f (expected 7/16 = %.3f, sd %.3f)\n", share, p, sd);
    CHECK(fabs(share - p) < 4 * sd, "unfitted share %.4f, expected %.4f (sd %.4f)", share, p, sd);
    /* two batches, two parameters: every fitted resample (the 2 reached runs, some drawn twice) fits them
     * exactly, so the interval has no width beyond the search's tolerance */
    CHECK(fabs(ci.s_min.hi / ci.s_min.lo - 1) < 1e-6, "every fitted resample holds the same 2 runs: S_min "
          "interval [%.9g, %.9g]", ci.s_min.lo, ci.s_min.hi);
}

/* Check 6. */
static void check_single_lr(void) {
    Rng rng;
    rng_seed(&rng, 13);
    GridRun runs[BATCHES * SEEDS];
    TradeoffPoint points[BATCHES * SEEDS];
    for (int b = 0, i = 0; b < BATCHES; b++)
        for (int s = 0; s < SEEDS; s++, i++) {
            double steps = S_MIN * (1 + B_CRIT / batch_tokens(b)) * exp(SIGMA * rng_normal(&rng));
            runs[i] = (GridRun){b, 0, true, steps, steps * batch_tokens(b)};
            points[i] = (TradeoffPoint){steps, steps * batch_tokens(b), b};
        }
    const LrGrid g = {runs, BATCHES * SEEDS, BATCHES, 1};
    TradeoffInterval a, b;
    lr_choice_bootstrap(&g, 1000, 0.95, 7, &a, NULL);
    tradeoff_bootstrap(points, BATCHES * SEEDS, 1000, 0.95, 7, &b);
    CHECK(same_interval(&a, &b), "one lr: B_crit [%.17g, %.17g], tradeoff_bootstrap [%.17g, %.17g]", a.b_crit.lo,
          a.b_crit.hi, b.b_crit.lo, b.b_crit.hi);
}

int main(void) {
    check_choice_and_fit(0);
    check_choice_and_fit(SIGMA);
    check_tie();
    check_bootstrap();
    check_unfitted();
    check_single_lr();
    if (failures) fprintf(stderr, "%d check(s) failed\n", failures);
    else printf("lr choice: all checks passed\n");
    return failures ? 1 : 0;
}

/* test_schedule_bound.c: the bound on what changing the batch can win
 * (src/sweep/schedule_bound), against brute force on the same model.
 *
 * 1. The best constant batch: no batch on a fine grid (1e-3 steps in log B,
 *    1e-3 to 1e6 sequences) takes less time than the closed form's
 *    sqrt(a Bbar / b), and its time is the formula's T(B*).
 * 2. The oracle: each stretch's own minimum over the same grid, summed,
 *    matches oracle_seconds within 1e-6 relative (the grid's resolution:
 *    a minimum is flat to second order, (1e-3)^2 / 8 relative).
 * 3. Jensen: equal local critical batches give a gain of 0 (to 1e-12); on
 *    random stretches and step times the gain is >= 0 and <= gain_ceiling;
 *    at a = b Bbar (the fixed cost equal to the per-sequence cost at the mean
 *    critical batch) it equals the ceiling (to 1e-12).
 * 4. A worked example, the half-width KJV model's stretches (docs/
 *    BATCH_SCALING.md, "Along the loss") at t = 0.21 + 0.003 B: best constant
 *    34.05 sequences, 57.81 s; oracle 57.09 s, 1.26% less (numpy, by hand).
 * 5. Refusals: no stretch, a stretch without steps or critical batch, a or b
 *    not above 0. */
#include <math.h>
#include <stdio.h>

#include "check.h"
#include "core/rng.h"
#include "sweep/schedule_bound.h"

static double grid_minimum(const LossStretch *s, int n, double a, double b, double *at) {
    double best = INFINITY;
    for (double lb = log(1e-3); lb <= log(1e6); lb += 1e-3) {
        double t = schedule_constant_seconds(s, n, a, b, exp(lb));
        if (t < best) best = t, *at = exp(lb);
    }
    return best;
}

static void check_against_grid(const LossStretch *s, int n, double a, double b) {
    ScheduleBound r;
    CHECK(schedule_bound(s, n, a, b, &r), "schedule_bound(s, n, a, b, &r)");
    double at, grid = grid_minimum(s, n, a, b, &at);
    CHECK(r.constant_seconds <= grid * (1 + 1e-12), "r.constant_seconds <= grid * (1 + 1e-12)");
    CHECK(fabs(r.constant_seconds / grid - 1) < 1e-6, "fabs(r.constant_seconds / grid - 1) < 1e-6");
    double steps = 0, weighted = 0;
    for (int i = 0; i < n; i++) steps += s[i].steps, weighted += s[i].steps * s[i].local;
    const double bbar = weighted / steps;
    CHECK(fabs(r.mean_local / bbar - 1) < 1e-12, "fabs(r.mean_local / bbar - 1) < 1e-12");
    CHECK(fabs(r.constant_seconds / (steps * (a + b * bbar) + 2 * steps * sqrt(a * b * bbar)) - 1) < 1e-12, "fabs(r.constant_seconds / (steps * (a + b * bbar) + 2 * steps * sqrt(a * b * bbar)) - 1) < 1e-12");
    double oracle = 0;
    for (int i = 0; i < n; i++) oracle += grid_minimum(&s[i], 1, a, b, &at);
    CHECK(fabs(r.oracle_seconds / oracle - 1) < 1e-6, "fabs(r.oracle_seconds / oracle - 1) < 1e-6");
    CHECK(r.gain >= -1e-12 && r.gain <= r.gain_ceiling + 1e-12, "r.gain >= -1e-12 && r.gain <= r.gain_ceiling + 1e-12");
}

int main(void) {
    const LossStretch half_width[] = {{12.9, 12.7}, {2.8, 6.5}, {6.0, 3.05}, {4.4, 3.79},
                                      {6.9, 8.77}, {10.5, 23.95}, {34.1, 25.84}, {47.0, 13.91}};
    const int n = (int)(sizeof half_width / sizeof half_width[0]);
    check_against_grid(half_width, n, 0.21, 0.003);
    ScheduleBound r;
    CHECK(schedule_bound(half_width, n, 0.21, 0.003, &r), "schedule_bound(half_width, n, 0.21, 0.003, &r)");
    printf("half-width KJV model, t = 0.21 + 0.003 B: best constant %.2f sequences (B_crit %.2f), %.2f s; oracle "
           "%.2f s, %.2f%% less (ceiling %.2f%%)\n", r.best_batch, r.mean_local, r.constant_seconds, r.oracle_seconds,
           100 * r.gain, 100 * r.gain_ceiling);
    CHECK(fabs(r.best_batch - 34.05) < 0.01 && fabs(r.constant_seconds - 57.81) < 0.01 &&
              fabs(r.oracle_seconds - 57.09) < 0.01, "the worked example");

    const LossStretch equal[] = {{10, 16}, {30, 16}, {5, 16}};
    CHECK(schedule_bound(equal, 3, 0.3, 0.01, &r), "schedule_bound(equal, 3, 0.3, 0.01, &r)");
    CHECK(fabs(r.gain) < 1e-12 && fabs(r.gain_ceiling) < 1e-12, "fabs(r.gain) < 1e-12 && fabs(r.gain_ceiling) < 1e-12");

    Rng rng;
    rng_seed(&rng, 21);
    for (int trial = 0; trial < 200; trial++) {
        LossStretch s[6];
        const int m = 1 + trial % 6;
        for (int i = 0; i < m; i++)
            s[i] = (LossStretch){1 + 99 * rng_uniform(&rng), exp(log(0.5) + log(400.0) * rng_uniform(&rng))};
        const double a = exp(log(1e-3) + log(1e4) * rng_uniform(&rng)), b = exp(log(1e-4) + log(1e3) * rng_uniform(&rng));
        if (trial < 20) check_against_grid(s, m, a, b);
        CHECK(schedule_bound(s, m, a, b, &r), "schedule_bound(s, m, a, b, &r)");
        CHECK(r.gain >= -1e-12 && r.gain <= r.gain_ceiling + 1e-12, "r.gain >= -1e-12 && r.gain <= r.gain_ceiling + 1e-12");
        CHECK(schedule_bound(s, m, b * r.mean_local, b, &r), "schedule_bound(s, m, b * r.mean_local, b, &r)"); /* a = b Bbar: the share factor is 1/2 */
        CHECK(fabs(r.gain - r.gain_ceiling) < 1e-12, "fabs(r.gain - r.gain_ceiling) < 1e-12");
    }

    const LossStretch no_steps[] = {{0, 5}}, no_local[] = {{5, 0}}, nan_local[] = {{5, NAN}};
    CHECK(!schedule_bound(half_width, 0, 0.2, 0.01, &r), "!schedule_bound(half_width, 0, 0.2, 0.01, &r)");
    CHECK(!schedule_bound(no_steps, 1, 0.2, 0.01, &r), "!schedule_bound(no_steps, 1, 0.2, 0.01, &r)");
    CHECK(!schedule_bound(no_local, 1, 0.2, 0.01, &r), "!schedule_bound(no_local, 1, 0.2, 0.01, &r)");
    CHECK(!schedule_bound(nan_local, 1, 0.2, 0.01, &r), "!schedule_bound(nan_local, 1, 0.2, 0.01, &r)");
    CHECK(!schedule_bound(half_width, n, 0, 0.01, &r), "!schedule_bound(half_width, n, 0, 0.01, &r)");
    CHECK(!schedule_bound(half_width, n, 0.2, -1, &r), "!schedule_bound(half_width, n, 0.2, -1, &r)");
    CHECK(!schedule_bound(half_width, n, INFINITY, 0.01, &r), "!schedule_bound(half_width, n, INFINITY, 0.01, &r)");
    if (failures == 0) printf("schedule_bound: all checks passed\n");
    return failures > 0;
}

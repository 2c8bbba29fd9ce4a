/* critical_batch.h: the critical batch measured, not estimated: McCandlish
 * et al.'s steps/examples trade-off (2018, "An Empirical Model of
 * Large-Batch Training", equation 2.11) fitted to runs that reached one
 * target loss, with a bootstrap interval.
 *
 * A run at a constant batch B reaches the target in S steps and E = B S
 * examples (tokens here). The trade-off is
 *     (S/S_min - 1)(E/E_min - 1) = 1,
 * which along a run's ray E = B S reads
 *     S(B) = S_min (1 + B_crit / B),   E(B) = E_min (1 + B / B_crit),
 * with B_crit = E_min / S_min.
 *
 * The fit: least squares of log S_i - log S(B_i), with B_i = E_i / S_i.
 * Why this residual: the batch is set exactly and what a seed moves is the
 * steps (and with them the tokens, by the same factor) at that batch, i.e.
 * along the ray, multiplicatively; so the error is measured along the ray and
 * in log space (the log-token residual is the same number). The residual of
 * the product, log((S/S_min - 1)(E/E_min - 1)), is not used: it blows up for
 * runs near an asymptote (a big-batch run whose S is close to S_min) and is
 * undefined for a noisy run below one. For a given B_crit the best log S_min
 * is the mean of log S_i - log(1 + B_crit/B_i) (closed form), so the search is
 * one-dimensional over log B_crit: a grid of 10 points per decade from
 * min(B)/1000 to max(B) x 1000, then golden-section search between the best
 * grid point's neighbours to 1e-10 in log B_crit. No starting point and no
 * derivatives; Gauss-Newton can walk off when B_crit lies outside the
 * batches measured. A minimum at the grid's edge means the batches do not
 * locate B_crit (all far below it: perfect scaling, only E_min is known;
 * all far above: only S_min); the fit says so (bracketed = false).
 *
 * The interval: a bootstrap stratified by batch (the grid of batches is the
 * design, the seeds are the random part): each resample draws, within every
 * batch, as many runs as it has, with replacement, and refits; the interval
 * is the percentiles (1 - level)/2 and (1 + level)/2 of the refitted values
 * (numpy's linear interpolation). The RNG is core/rng.h's, seeded by the
 * caller, so the interval is reproducible. With k runs per batch the
 * resampled spread is about sqrt((k - 1)/k) of the true one, so with 3
 * seeds a 95% interval covers about 89% (tests/test_critical_batch.c
 * measures it). Deliberately not here: running the runs (cli/sweep_run.h). */
#ifndef BS_SWEEP_CRITICAL_BATCH_H
#define BS_SWEEP_CRITICAL_BATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    double steps, tokens; /* to the target loss; the run's batch is tokens / steps */
    int group;            /* runs at the same batch share a group: the bootstrap resamples within it */
} TradeoffPoint;

typedef struct {
    double s_min, e_min; /* steps, and tokens (E's unit) */
    double b_crit;       /* e_min / s_min: E's unit per step */
    double rms_log;      /* root mean square of the log-step residuals */
    bool bracketed;      /* false: B_crit fell on the search's bound (the batches do not locate it) */
} TradeoffFit;

/* Fits n points (steps and tokens positive and finite, at least two
 * different batches). False, with the reason in why, otherwise. */
bool tradeoff_fit(const TradeoffPoint *points, int n, TradeoffFit *fit, char *why, size_t why_size);

/* The fitted steps at a batch (E's unit per step): S_min (1 + B_crit / B). */
double tradeoff_steps(const TradeoffFit *fit, double batch);

typedef struct {
    double lo, hi;
} Interval;

typedef struct {
    Interval s_min, e_min, b_crit;
    double level;    /* the central share the intervals hold, e.g. 0.95 */
    int resamples;   /* resamples drawn (refits done: resamples - unfitted) */
    int unbracketed; /* of them, how many put B_crit on the search's bound */
    int unfitted;    /* resamples left with fewer than two batch sizes, skipped (only sweep/lr_choice.h's) */
} TradeoffInterval;

/* The stratified bootstrap described above, over points that tradeoff_fit accepts. */
void tradeoff_bootstrap(const TradeoffPoint *points, int n, int resamples, double level, uint64_t seed,
                        TradeoffInterval *out);

/* The percentiles of the refits into out's s_min, e_min and b_crit (and out->level): values[k * stride + i] for
 * i < count is refit i's S_min (k = 0), E_min (1) and B_crit (2); sorted in place. NaN if count is 0. */
void tradeoff_percentiles(double *values, int stride, int count, double level, TradeoffInterval *out);

/* The p-quantile (0 <= p <= 1) of n values, sorted in place: numpy's default (linear) interpolation. */
double quantile_sorted_in_place(double *values, int n, double p);

#endif

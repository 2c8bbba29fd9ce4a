/* schedule_bound.h: what changing the batch during a run can win at best.
 *
 * McCandlish et al.'s trade-off, taken stretch by stretch of the loss
 * (batch-sweep --along): stretch i needs dS_i (1 + B_i / B) steps at batch B,
 * dS_i its S_min and B_i its local critical batch. With a step time
 * t(B) = a + b B (a fixed cost per step: the all-reduce, the launches; b per
 * sequence), a constant batch B takes
 *
 *     T(B) = sum_i dS_i (1 + B_i / B) (a + b B),
 *
 * least at B* = sqrt(a Bbar / b), Bbar = sum dS_i B_i / sum dS_i (the whole
 * run's B_crit, E_min / S_min), where T = S (a + b Bbar) + 2 S sqrt(a b Bbar).
 * A schedule that sets every stretch to its own sqrt(a B_i / b) (an oracle:
 * the true local noise scale, no cost to measure it, no exploration) takes
 * S (a + b Bbar) + 2 sqrt(a b) sum dS_i sqrt(B_i). It is faster by
 *
 *     2 sqrt(a b) S (sqrt(Bbar) - mean_i sqrt(B_i)),   mean weighted by dS_i,
 *
 * Jensen's gap of the square root, and as a share of T at most half of
 * 1 - mean sqrt(B_i) / sqrt(Bbar) (the share 2 sqrt(r) / (1 + sqrt(r))^2,
 * r = b Bbar / a, is at most 1/2). No schedule does better under this model,
 * goodput's included: a batch that adapts pays only where the local critical
 * batch spreads by orders of magnitude over the run. Deliberately not here:
 * the warm-up's interplay with the batch, and the estimators' own cost. */
#ifndef BS_SWEEP_SCHEDULE_BOUND_H
#define BS_SWEEP_SCHEDULE_BOUND_H

#include <stdbool.h>

typedef struct {
    double steps; /* dS_i: the stretch's S_min */
    double local; /* B_i: its critical batch (any unit of batch; b is per that unit) */
} LossStretch;

typedef struct {
    double mean_local;       /* Bbar: the step-weighted mean of the stretches' B_i */
    double best_batch;       /* B* = sqrt(a Bbar / b): the best constant batch */
    double constant_seconds; /* T(B*) */
    double oracle_seconds;   /* every stretch at its own best batch */
    double gain;             /* 1 - oracle / constant: what any schedule can win at best */
    double gain_ceiling;     /* (1 - mean sqrt(B_i) / sqrt(Bbar)) / 2: the gain at the best a/b */
} ScheduleBound;

/* Seconds to cross all stretches at a constant batch. */
double schedule_constant_seconds(const LossStretch *s, int n, double a, double b, double batch);
/* False (out untouched) unless n >= 1, every steps > 0 and local > 0, a > 0 and b > 0. */
bool schedule_bound(const LossStretch *s, int n, double a, double b, ScheduleBound *out);

#endif

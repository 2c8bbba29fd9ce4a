/* along.h: the critical batch along the loss (`batch-sweep --along`): the
 * sweep's runs cross every loss above the target on the way to it, and each
 * such loss is fitted from the same runs (sweep/fit.h), giving S_min, E_min
 * and B_crit with an interval at every loss. Beside each, the local critical
 * batch of the stretch from the loss above:
 *
 *     B_local = (E_min(L_k) - E_min(L_k-1)) / (S_min(L_k) - S_min(L_k-1))
 *
 * (the first stretch from the sweep's start, where B_local = B_crit).
 * McCandlish et al.'s model makes E_min the integral of the noise scale over
 * the steps S_min, so B_local is the noise scale averaged over that stretch,
 * where B_crit averages it from the start. A stretch whose S_min or E_min
 * does not grow (noise in two close fits) has none ("not located"). No
 * interval on B_local: the per-loss fits' resamples are not paired.
 * Deliberately not here: reading the runs at a loss, parsing, printing
 * (cli/sweep_along.h). */
#ifndef BS_SWEEP_ALONG_H
#define BS_SWEEP_ALONG_H

#include <stdbool.h>

#include "sweep/fit.h"

#define SWEEP_MAX_ALONG 16

typedef struct {
    double loss;     /* the validation loss fitted */
    bool fitted;     /* false: fewer than two batch sizes crossed it (after their first evaluation) */
    int runs_used;
    TradeoffFit fit; /* tokens */
    bool has_interval;
    TradeoffInterval interval;
    double local;    /* B_local in tokens; NaN: not located */
} AlongPoint;

/* Fills each point's local critical batch from the fits (points in decreasing loss, the target last). */
void sweep_along_local(AlongPoint *p, int n);
/* Fits at[k], the runs read at losses[k] (decreasing, above the target), into points[k]; then the target's own fit
 * into points[n]; then the local critical batches. Returns n + 1. */
int sweep_along_fit(const SweepRuns *at, const double *losses, int n, double target, const SweepFit *target_fit,
                    AlongPoint *points);

#endif

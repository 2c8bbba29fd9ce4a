/* sweep_along.h: the critical batch along the loss, `batch-sweep --along
 * 2.8,2.6,2.45`. The sweep's runs train to --target-loss and so cross every
 * higher loss on the way; each of those losses is fitted from the same runs
 * (steps and tokens interpolated between the evaluations around it, as for
 * the target), giving S_min, E_min and B_crit with an interval at every loss.
 *
 * Beside each, the local critical batch of the stretch from the loss above:
 *
 *     B_local = (E_min(L_k) - E_min(L_k-1)) / (S_min(L_k) - S_min(L_k-1))
 *
 * (the first stretch from the sweep's start, where B_local = B_crit).
 * McCandlish et al.'s model makes E_min the integral of the noise scale
 * over the steps S_min, so B_local is the noise scale averaged over that
 * stretch, where B_crit averages it from the start: B_crit lags a noise
 * scale that grows as the loss falls. A stretch whose S_min or E_min does
 * not grow (noise in two close fits) has none ("not located"). The local
 * values are printed as a --goodput-noise-curve for `train`
 * (optim/noise_curve.h). No interval on B_local: the per-loss fits'
 * resamples are not paired. Deliberately not here: running and fitting
 * (cli/cmd_batch_sweep.c). */
#ifndef BS_CLI_SWEEP_ALONG_H
#define BS_CLI_SWEEP_ALONG_H

#include <jansson.h>
#include <stdbool.h>

#include "optim/critical_batch.h"

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

/* --along "2.8,2.6": distinct losses above `target`, sorted decreasing into losses[]; returns the count. */
int sweep_along_parse(const char *text, double target, double *losses);
/* Fills each point's local critical batch from the fits (points in decreasing loss, the target last). */
void sweep_along_local(AlongPoint *p, int n);
void sweep_along_print(const AlongPoint *p, int n, int seq_len);
json_t *sweep_along_json(const AlongPoint *p, int n, int seq_len);

#endif

/* sweep_along.h: `batch-sweep --along 2.8,2.6,2.45`: the losses parsed, and
 * the critical batch along the loss printed and written to sweep.json (each
 * loss's S_min, E_min, B_crit with its interval, and the local critical
 * batch of the stretch from the loss above, sweep/along.h). The local values
 * are printed as a --goodput-noise-curve for `train` (optim/noise_curve.h).
 * Deliberately not here: the fits and B_local (sweep/along.h), reading the
 * runs at a loss (cli/sweep_run.h). */
#ifndef BS_CLI_SWEEP_ALONG_H
#define BS_CLI_SWEEP_ALONG_H

#include <jansson.h>
#include <stdbool.h>

#include "sweep/along.h"

/* --along "2.8,2.6": distinct losses above `target`, sorted decreasing into losses[]; returns the count. */
int sweep_along_parse(const char *text, double target, double *losses);
void sweep_along_print(const AlongPoint *p, int n, int seq_len);
json_t *sweep_along_json(const AlongPoint *p, int n, int seq_len);

#endif

/* sweep_bound.h: `batch-sweep --step-time A:B`: what changing the batch
 * during the run could win at best, from the sweep's own fits. A step at a
 * batch of B sequences takes A + B x B seconds (measured by the user: the
 * fixed part is the all-reduce and the launches, the rest per sequence);
 * the stretches are --along's located ones (steps dS_min, local critical
 * batch), or the target's fit alone without --along (one stretch: nothing
 * to adapt to, the gain is 0). Prints the best constant batch, its time to
 * the target, and an oracle schedule's (optim/schedule_bound.h), and writes
 * them to sweep.json. Deliberately not here: the bound itself. */
#ifndef BS_CLI_SWEEP_BOUND_H
#define BS_CLI_SWEEP_BOUND_H

#include <jansson.h>
#include <stdbool.h>

#include "cli/sweep_along.h"
#include "optim/critical_batch.h"
#include "optim/schedule_bound.h"

typedef struct {
    double a, b;          /* seconds per step = a + b x batch in sequences */
    bool computed;        /* false: no stretch with a located critical batch */
    int stretches;        /* the stretches in the bound */
    int left_out;         /* fitted stretches without a located critical batch */
    ScheduleBound bound;  /* batches in sequences */
} SweepBound;

/* --step-time "0.21:0.003": a > 0 and b > 0 seconds, or one line naming the flag and the process ends. */
void sweep_step_time_parse(const char *text, double *a, double *b);
/* From the along points (n > 0) or else the target's fit; batches converted to sequences of seq_len tokens. */
void sweep_bound_compute(const AlongPoint *along, int n, const TradeoffFit *fit, int seq_len, SweepBound *out);
void sweep_bound_print(const SweepBound *s);
json_t *sweep_bound_json(const SweepBound *s);

#endif

/* sweep_bound.h: `batch-sweep --step-time A:B`: what changing the batch
 * during the run could win at best, from the sweep's own fits. A step at a
 * batch of B sequences takes A + B x B seconds (measured by the user: the
 * fixed part is the all-reduce and the launches, the rest per sequence);
 * the stretches are --along's located ones (steps dS_min, local critical
 * batch), or the target's fit alone without --along (one stretch: nothing
 * to adapt to, the gain is 0). Prints the best constant batch, its time to
 * the target, and an oracle schedule's (sweep/schedule_bound.h), and writes
 * them to sweep.json. Deliberately not here: the stretches and the bound
 * (sweep/bound.h, sweep/schedule_bound.h). */
#ifndef BS_CLI_SWEEP_BOUND_H
#define BS_CLI_SWEEP_BOUND_H

#include <jansson.h>
#include <stdbool.h>

#include "sweep/bound.h"

/* --step-time "0.21:0.003": a > 0 and b > 0 seconds, or one line naming the flag and the process ends. */
void sweep_step_time_parse(const char *text, double *a, double *b);
void sweep_bound_print(const SweepBound *s);
json_t *sweep_bound_json(const SweepBound *s);

#endif

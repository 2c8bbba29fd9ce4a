/* bound.h: what changing the batch during the run could win at best
 * (`batch-sweep --step-time A:B`), from the sweep's own fits: a step at a
 * batch of B sequences takes A + B x B seconds; the stretches are the located
 * ones along the loss (sweep/along.h: steps dS_min, local critical batch), or
 * the target's fit alone without them (one stretch: nothing to adapt to, the
 * gain is 0). The bound itself is sweep/schedule_bound.h's; the printing is
 * cli/sweep_bound.h's. */
#ifndef BS_SWEEP_BOUND_H
#define BS_SWEEP_BOUND_H

#include <stdbool.h>

#include "sweep/along.h"
#include "sweep/critical_batch.h"
#include "sweep/schedule_bound.h"

typedef struct {
    double a, b;          /* seconds per step = a + b x batch in sequences */
    bool computed;        /* false: no stretch with a located critical batch */
    int stretches;        /* the stretches in the bound */
    int left_out;         /* fitted stretches without a located critical batch */
    ScheduleBound bound;  /* batches in sequences */
} SweepBound;

/* From the along points (n > 0) or else the target's fit; batches converted to sequences of seq_len tokens. */
void sweep_bound_compute(const AlongPoint *along, int n, const TradeoffFit *fit, int seq_len, SweepBound *out);

#endif

/* bound.c: the schedule bound from the sweep's fits (see bound.h). */
#include "sweep/bound.h"

#include <math.h>

void sweep_bound_compute(const AlongPoint *along, int n, const TradeoffFit *fit, int seq_len, SweepBound *out) {
    LossStretch stretch[SWEEP_MAX_ALONG + 1];
    int used = 0, left_out = 0;
    const double t = seq_len;
    if (n == 0) {
        stretch[used++] = (LossStretch){fit->s_min, fit->b_crit / t};
    } else {
        double s_before = 0; /* the stretches as sweep_along_local cuts them */
        for (int k = 0; k < n; k++) {
            if (!along[k].fitted) continue;
            const double ds = along[k].fit.s_min - s_before;
            s_before = along[k].fit.s_min;
            if (isfinite(along[k].local) && ds > 0) stretch[used++] = (LossStretch){ds, along[k].local / t};
            else left_out++;
        }
    }
    out->stretches = used, out->left_out = left_out;
    out->computed = schedule_bound(stretch, used, out->a, out->b, &out->bound);
}

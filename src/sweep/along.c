/* along.c: the critical batch along the loss (see along.h). */
#include "sweep/along.h"

#include <math.h>
#include <stdlib.h>

#include "core/error.h"

void sweep_along_local(AlongPoint *p, int n) {
    double s_before = 0, e_before = 0; /* the sweep's start: steps and tokens count from it */
    for (int k = 0; k < n; k++) {
        p[k].local = NAN;
        if (!p[k].fitted) continue;
        const double ds = p[k].fit.s_min - s_before, de = p[k].fit.e_min - e_before;
        if (ds > 0 && de > 0) p[k].local = de / ds;
        s_before = p[k].fit.s_min, e_before = p[k].fit.e_min;
    }
}

int sweep_along_fit(const SweepRuns *at, const double *losses, int n, double target, const SweepFit *target_fit,
                    AlongPoint *points) {
    for (int k = 0; k < n; k++) {
        const int cells = at[k].num_batches * at[k].num_lrs > 0 ? at[k].num_batches * at[k].num_lrs : 1;
        SweepFit f = {.chosen = bs_calloc((size_t)at[k].num_batches, sizeof(int)),
                      .cells = bs_calloc((size_t)cells, sizeof(LrCell)),
                      .choice_counts = bs_calloc((size_t)cells, sizeof(int))};
        const bool fitted = sweep_fit(&at[k], &f);
        points[k] = (AlongPoint){losses[k], fitted, f.runs_used, f.fit, fitted && f.has_interval, f.interval, NAN};
        free(f.choice_counts);
        free(f.cells);
        free(f.chosen);
    }
    const SweepFit *t = target_fit;
    points[n] = (AlongPoint){target, true, t->runs_used, t->fit, t->has_interval, t->interval, NAN};
    sweep_along_local(points, n + 1);
    return n + 1;
}

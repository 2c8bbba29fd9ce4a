/* fit.c: a sweep's runs fitted, with or without an lr grid (see fit.h). */
#include "sweep/fit.h"

#include <math.h>
#include <stdlib.h>

#include "core/error.h"

bool sweep_point_in_fit(const SweepRuns *in, const SweepFit *f, int i) {
    const SweepPoint *u = &in->runs[i];
    return u->reached && (in->num_lrs == 0 || f->chosen[u->batch_index] == u->lr_index);
}

/* The range of the fitted runs' batches, in tokens, and whether B_crit lies within it. */
static bool within_batches(const SweepRuns *in, const SweepFit *f) {
    double lo = INFINITY, hi = 0;
    for (int i = 0; i < in->num_runs; i++)
        if (sweep_point_in_fit(in, f, i))
            lo = fmin(lo, (double)in->runs[i].batch * in->seq_len), hi = fmax(hi, (double)in->runs[i].batch * in->seq_len);
    return f->fit.b_crit >= lo && f->fit.b_crit <= hi;
}

/* Fits the runs that reached the target; an interval when some batch has two of them. */
static bool fit_runs(const SweepRuns *in, SweepFit *f) {
    TradeoffPoint *points = bs_malloc(sizeof *points * (size_t)in->num_runs);
    int n = 0, per_batch_max = 0, count = 0;
    for (int i = 0; i < in->num_runs; i++) {
        const SweepPoint *u = &in->runs[i];
        count = i > 0 && u->batch == in->runs[i - 1].batch ? count : 0;
        if (!u->reached) continue;
        points[n++] = (TradeoffPoint){u->steps, u->tokens, u->batch};
        if (++count > per_batch_max) per_batch_max = count;
    }
    char why[200];
    f->runs_used = n;
    f->fitted = tradeoff_fit(points, n, &f->fit, why, sizeof why);
    if (f->fitted) {
        f->within_batches = within_batches(in, f);
        f->has_interval = per_batch_max >= 2;
        if (f->has_interval)
            tradeoff_bootstrap(points, n, in->resamples, SWEEP_LEVEL, SWEEP_BOOTSTRAP_SEED, &f->interval);
    }
    free(points);
    return f->fitted;
}

/* Chooses the lr per batch, fits its runs that reached the target, and bootstraps with the choice inside. */
static bool fit_chosen(const SweepRuns *in, SweepFit *f) {
    GridRun *grid = bs_malloc(sizeof *grid * (size_t)in->num_runs);
    TradeoffPoint *points = bs_malloc(sizeof *points * (size_t)in->num_runs);
    for (int i = 0; i < in->num_runs; i++) {
        const SweepPoint *u = &in->runs[i];
        grid[i] = (GridRun){u->batch_index, u->lr_index, u->reached, u->steps, u->tokens};
    }
    const LrGrid g = {grid, in->num_runs, in->num_batches, in->num_lrs};
    lr_choose(&g, f->cells, f->chosen);
    char why[200];
    f->runs_used = lr_chosen_points(&g, f->chosen, points);
    f->fitted = tradeoff_fit(points, f->runs_used, &f->fit, why, sizeof why);
    if (f->fitted) {
        f->within_batches = within_batches(in, f);
        f->has_interval = in->seeds >= 2;
        if (f->has_interval)
            lr_choice_bootstrap(&g, in->resamples, SWEEP_LEVEL, SWEEP_BOOTSTRAP_SEED, &f->interval, f->choice_counts);
    }
    free(points);
    free(grid);
    return f->fitted;
}

bool sweep_fit(const SweepRuns *in, SweepFit *f) { return in->num_lrs > 0 ? fit_chosen(in, f) : fit_runs(in, f); }

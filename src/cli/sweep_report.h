/* sweep_report.h: what `batchscale batch-sweep` prints and writes: the
 * table of runs, the fit with its interval, the JSON summary and the PNG of
 * the Pareto front (steps against tokens, log axes, one point per run, the
 * fitted curve, and the point (2 S_min, 2 E_min) where B = B_crit).
 * With --lrs: the table's lr column (the chosen lr per batch marked), a line
 * per batch with its chosen lr and the others', a warning when a chosen lr
 * is at an end of the grid, the grid and the choice in the JSON; the PNG
 * draws only the runs at each batch's chosen lr (the runs in the fit; the
 * others are in the table and the JSON). Deliberately not here: running and
 * fitting. */
#ifndef BS_CLI_SWEEP_REPORT_H
#define BS_CLI_SWEEP_REPORT_H

#include <stdbool.h>

#include "cli/sweep_along.h"
#include "cli/sweep_bound.h"
#include "cli/sweep_run.h"
#include "sweep/critical_batch.h"
#include "sweep/lr_choice.h"

typedef struct {
    const SweepSettings *settings;
    int seeds;
    const SweepRun *runs; /* every run of the grid: batch by batch, then lr by lr (with --lrs), then seed */
    int num_runs;
    const char *command; /* the train command as given */
    int seq_len;         /* tokens per sequence */
    bool fitted;         /* false: too few runs reached the target to fit */
    int runs_used;       /* the runs in the fit (those that reached the target) */
    TradeoffFit fit;     /* in tokens */
    TradeoffInterval interval;
    bool has_interval;   /* false: one run per batch, nothing to resample */
    bool within_batches; /* B_crit lies between the smallest and largest batch measured */
    const int *batches;  /* the --batches, in the runs' order */
    int num_batches;
    const double *lrs;  /* --lrs, ascending */
    int num_lrs;        /* 0: no --lrs (every run at the command's lr) */
    int *chosen;        /* with --lrs, per batch: the chosen lr's index (-1: no run at that batch reached the target) */
    LrCell *cells;      /* with --lrs: [batch * num_lrs + lr], what the choice compared */
    int *choice_counts; /* with --lrs and an interval: [batch * num_lrs + lr], the resamples that chose it */
    const AlongPoint *along; /* with --along: each loss's fit, decreasing, the target last (cli/sweep_along.h) */
    int num_along;
    const SweepBound *bound; /* with --step-time: what changing the batch can win (NULL: not asked) */
} SweepResult;

/* The run's batch's index in --batches (the runs are in grid order). */
int sweep_batch_index(const SweepResult *r, int run);
/* True if run i is in the fit: it reached the target (at its batch's chosen lr, with --lrs). */
bool sweep_run_in_fit(const SweepResult *r, int run);

void sweep_print_table(const SweepResult *r);
void sweep_print_fit(const SweepResult *r);
/* With --lrs: each batch's chosen lr against the others, and the warnings for a chosen lr at an end of --lrs. */
void sweep_print_choice(const SweepResult *r);
void sweep_write_json(const SweepResult *r, const char *path);
void sweep_write_png(const SweepResult *r, const char *path);

#endif

/* sweep_report.h: what `batchscale batch-sweep` prints and writes: the
 * table of runs, the fit with its interval, the JSON summary and the PNG of
 * the Pareto front (steps against tokens, log axes, one point per run, the
 * fitted curve, and the point (2 S_min, 2 E_min) where B = B_crit).
 * Deliberately not here: running and fitting. */
#ifndef BS_CLI_SWEEP_REPORT_H
#define BS_CLI_SWEEP_REPORT_H

#include <stdbool.h>

#include "cli/sweep_run.h"
#include "optim/critical_batch.h"

typedef struct {
    const SweepSettings *settings;
    int seeds;
    const SweepRun *runs; /* every run of the grid, batch by batch */
    int num_runs;
    const char *command; /* the train command as given */
    int seq_len;         /* tokens per sequence */
    bool fitted;         /* false: too few runs reached the target to fit */
    int runs_used;       /* the runs in the fit (those that reached the target) */
    TradeoffFit fit;     /* in tokens */
    TradeoffInterval interval;
    bool has_interval;   /* false: one run per batch, nothing to resample */
    bool within_batches; /* B_crit lies between the smallest and largest batch measured */
} SweepResult;

void sweep_print_table(const SweepResult *r);
void sweep_print_fit(const SweepResult *r);
void sweep_write_json(const SweepResult *r, const char *path);
void sweep_write_png(const SweepResult *r, const char *path);

#endif

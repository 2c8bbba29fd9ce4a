/* sweep_lr.h: the learning-rate grid of `batchscale batch-sweep --lrs`
 * (cli/cmd_batch_sweep.c): the list parsed, the command's own --lr and
 * --min-lr read, and a run's --lr and --min-lr written.
 *
 * Each lr of the grid replaces the command's --lr; the command's --min-lr,
 * if it gives one, is scaled by the same factor (min-lr / lr x the run's
 * lr), so the schedule keeps its shape: a constant-lr command (--min-lr
 * equal to --lr) stays constant, exactly. An lr is written as the shortest
 * %g spelling that reads back as the same double ("0.002", "1e-05"): on the
 * child's command line and in the metrics file name. Deliberately not here:
 * the choice of an lr per batch (sweep/lr_choice.h). */
#ifndef BS_CLI_SWEEP_LR_H
#define BS_CLI_SWEEP_LR_H

#include <stddef.h>

#include "cli/run_command.h"

#define SWEEP_MAX_LRS 16

/* --lrs "1e-3,2e-3,4e-3": positive finite numbers, distinct, at most SWEEP_MAX_LRS, into lrs ascending.
 * Returns the count; dies with one line naming --lrs otherwise. */
int sweep_lrs_parse(const char *text, double *lrs);

/* The train command's --lr and --min-lr (NaN: not given). Dies if it gives no --lr, or a value that is not a
 * positive number. */
void sweep_lr_base(const RunCommand *cmd, double *lr, double *min_lr);

/* The shortest spelling of x that reads back as x. */
void sweep_lr_spell(double x, char *text, size_t size);

/* Sets --lr to lr in cmd and, if min_lr (the command's) is not NaN, --min-lr to min_lr / base_lr x lr. */
void sweep_lr_apply(RunCommand *cmd, double base_lr, double min_lr, double lr);

#endif

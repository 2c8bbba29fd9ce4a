/* lr_choice.h: each batch's own best learning rate in a batch sweep over a
 * grid of learning rates, the trade-off fit on the chosen runs, and its
 * bootstrap with the choice made again inside every resample.
 *
 * McCandlish et al. (2018, "An Empirical Model of Large-Batch Training",
 * section 2.2 and appendix) define the steps/examples trade-off with every
 * batch trained at its own best learning rate. A sweep with an lr grid runs
 * every (batch, lr, seed); per batch it keeps the lr whose runs reach the
 * target in the fewest steps. The rule, in order:
 *   1. fewest runs that did not reach the target (a failed run counts as
 *      not reached): an lr whose runs all reached it beats any lr with one
 *      that did not;
 *   2. then the smallest geometric mean of the steps S over its runs that
 *      reached the target (compared as the mean of log S);
 *   3. then, on an exact tie, the smaller lr (the lower index: the grid is
 *      ascending).
 * An lr none of whose runs reached the target is never chosen: a batch with
 * no such run has no choice (-1) and is not in the fit. The fit is
 * sweep/critical_batch.h's tradeoff_fit over the chosen lr's runs that
 * reached the target, one bootstrap group per batch.
 *
 * The interval includes the uncertainty of the choice: each resample draws,
 * for each batch and each lr, as many of that (batch, lr)'s runs as it has,
 * with replacement (reached or not); chooses the lr per batch from the drawn
 * runs by the rule above; and refits the drawn runs of the chosen lrs. The
 * interval is the percentiles of the refits, as tradeoff_bootstrap's. A
 * resample in which fewer than two batches keep a run that reached the
 * target cannot be fitted: it is skipped and counted (unfitted). Runs are
 * drawn in the order given, each from its own (batch, lr), so with one lr and
 * every run reached this draws what tradeoff_bootstrap draws and gives its
 * interval exactly. Deliberately not here: running the runs and the grid's
 * command lines (cli/sweep_lr.h). */
#ifndef BS_SWEEP_LR_CHOICE_H
#define BS_SWEEP_LR_CHOICE_H

#include <stdbool.h>
#include <stdint.h>

#include "sweep/critical_batch.h"

typedef struct {
    int batch, lr;        /* indices: the batch (0..num_batches-1) and the lr in the ascending grid */
    bool reached;         /* reached the target within the cap */
    double steps, tokens; /* to the target, when reached */
} GridRun;

typedef struct {
    const GridRun *runs;
    int n, num_batches, num_lrs;
} LrGrid;

/* What the rule compares, per (batch, lr). */
typedef struct {
    int runs, missed;      /* runs at this batch and lr; of them, how many did not reach the target */
    double mean_log_steps; /* mean of log S over those that did (NaN: none) */
} LrCell;

/* cells[batch * num_lrs + lr] for every batch and lr of the grid. */
void lr_cells(const LrGrid *g, LrCell *cells);

/* The rule over one batch's num_lrs cells: the chosen lr's index, or -1 if no run reached the target. */
int lr_best(const LrCell *cells, int num_lrs);

/* chosen[batch] for every batch (cells: scratch of num_batches x num_lrs, left holding lr_cells's values). */
void lr_choose(const LrGrid *g, LrCell *cells, int *chosen);

/* The runs of the chosen lrs that reached the target, in the grid's order, group = batch; returns how many. */
int lr_chosen_points(const LrGrid *g, const int *chosen, TradeoffPoint *points);

/* The bootstrap described above. choice_counts (NULL, or num_batches x num_lrs) receives, per batch and lr,
 * how many resamples chose that lr. */
void lr_choice_bootstrap(const LrGrid *g, int resamples, double level, uint64_t seed, TradeoffInterval *out,
                         int *choice_counts);

#endif

/* step_stats.h: a step's statistics across ranks from ONE collective. Each
 * rank packs a small record (its share of the loss, its micro-batch gradient
 * norms, where it saw a non-finite value, its compute time, the step's time
 * so far, its peak memory, its pipeline busy and idle time, a stop signal it
 * received); one all-gather over the world gives every rank every record,
 * and each computes the same sums, maxima, minimum, median, straggler and
 * decision to stop from them.
 *
 * It runs after backward and the gradient norm, before the guard decides
 * whether to update, so the step time it sees is the time up to that point:
 * the trainer's step_ms_max / step_ms_min are the maximum / minimum over ranks
 * of the time before the exchange plus rank 0's own time after it (the
 * optimizer), and peak memory is as of the exchange (the optimizer allocates
 * nothing; its state's first touch shows from the second step on). Sums run
 * in rank order, the same on every rank and for every MPI. */
#ifndef BS_TRAIN_STEP_STATS_H
#define BS_TRAIN_STEP_STATS_H

#include "comm/comm.h"

/* One rank's record. */
typedef struct {
    double loss_sum;     /* its share of the batch's summed token losses (0 where another rank counts it) */
    double micro_sq;     /* sum over its micro-batches of squared gradient norms (the noise scale) */
    double micro_sq_precond; /* the same in Adam's preconditioned metric (train/estimators.h; 0 when off) */
    double nonfinite[2]; /* guard_nonfinite_keys (train/guard.h) */
    double compute;      /* seconds of compute */
    double seconds;      /* the step so far */
    double peak_rss;     /* peak resident bytes (filled by step_stats_exchange) */
    double pipe_busy, pipe_idle; /* seconds */
    double stop_signal;  /* a stop signal this rank received (train/preempt.h), else 0 */
} StepRecord;

/* What every rank knows after the exchange. */
typedef struct {
    double loss_sum, micro_sq, micro_sq_precond; /* sums over ranks */
    double nonfinite[2];       /* maxima over ranks */
    double slowest, fastest;   /* the step so far: maximum and minimum over ranks */
    double peak_rss;           /* maximum over ranks */
    double bubble;             /* largest idle share (idle / (busy + idle)) over ranks */
    int stop_signal;           /* largest stop signal over ranks: every rank stops after this step (0: none) */
    double median_compute;     /* lower median over ranks (straggler.h) */
    int straggler;             /* the slowest rank beyond the threshold, or -1 */
    const double *compute;     /* compute seconds per world rank, until the next exchange */
} StepStats;

/* The exchange's buffers, allocated once. */
typedef struct {
    Comm *world;
    int ranks;
    double straggler_threshold; /* --straggler-threshold */
    StepRecord *records;        /* every rank's, in rank order */
    double *compute, *scratch;  /* per rank */
} StepStatsExchange;

void step_stats_init(StepStatsExchange *x, Comm *world, double straggler_threshold);
void step_stats_free(StepStatsExchange *x);
/* Collective over the world: fills mine->peak_rss, gathers every record and
 * reduces them (step_stats_reduce). */
StepStats step_stats_exchange(StepStatsExchange *x, StepRecord *mine);
/* The reduction alone, from records already gathered (no communication). */
StepStats step_stats_reduce(StepStatsExchange *x);

#endif

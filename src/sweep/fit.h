/* fit.h: a batch sweep's runs reduced to McCandlish et al.'s trade-off: the
 * runs that reached the target fitted (sweep/critical_batch.h), or with an lr
 * grid each batch's lr chosen first and the choice made again in every
 * bootstrap resample (sweep/lr_choice.h); whether the fitted B_crit lies
 * among the batches measured. The command (cli/cmd_batch_sweep.c) runs the
 * runs and prints; this only computes. */
#ifndef BS_SWEEP_FIT_H
#define BS_SWEEP_FIT_H

#include <stdbool.h>

#include "sweep/critical_batch.h"
#include "sweep/lr_choice.h"

#define SWEEP_BOOTSTRAP_SEED 20180614 /* fixed: the interval is reproducible (the date of McCandlish et al.'s preprint) */
#define SWEEP_LEVEL 0.95

/* One run of the grid, as the fit sees it. */
typedef struct {
    int batch;       /* sequences */
    int batch_index; /* in the sweep's batches */
    int lr_index;    /* in the ascending lr grid (0 without one) */
    bool reached;    /* reached the target loss */
    double steps, tokens;
} SweepPoint;

/* Every run of a grid, batch by batch, then lr by lr, then seed. */
typedef struct {
    const SweepPoint *runs;
    int num_runs, num_batches;
    int num_lrs; /* 0: no lr grid (every run at the command's lr) */
    int seeds, seq_len, resamples;
} SweepRuns;

typedef struct {
    bool fitted;         /* false: fewer than two batch sizes reached the target */
    int runs_used;       /* the runs in the fit */
    TradeoffFit fit;     /* in tokens */
    TradeoffInterval interval;
    bool has_interval;   /* false: one run per batch, nothing to resample */
    bool within_batches; /* B_crit lies between the smallest and largest batch fitted */
    /* with an lr grid, arrays the caller owns: */
    int *chosen;        /* [num_batches]: the chosen lr's index (-1: none reached the target) */
    LrCell *cells;      /* [num_batches x num_lrs]: what the choice compared */
    int *choice_counts; /* [num_batches x num_lrs]: the resamples that chose each lr */
} SweepFit;

/* True if run i is in the fit: it reached the target (at its batch's chosen lr, with an lr grid). */
bool sweep_point_in_fit(const SweepRuns *in, const SweepFit *f, int i);
/* Fits the runs (choosing each batch's lr first with a grid); returns f->fitted. */
bool sweep_fit(const SweepRuns *in, SweepFit *f);

#endif

/* fault.h: --debug-inject-fault, the faults tests inject into a run: a rank that
 * stalls or dies at a step, a NaN in a rank's gradient (once, or every step
 * from one on), a rank slower than the others. It parses the flag, checks the
 * target exists and answers "does it strike now"; the trainer acts (poisons
 * the gradient block). It knows nothing of the trainer or the grid beyond the
 * layer ranges it is given. */
#ifndef BS_TRAIN_FAULT_H
#define BS_TRAIN_FAULT_H

#include <stdbool.h>

typedef enum { FAULT_NONE, FAULT_STALL, FAULT_EXIT, FAULT_NAN, FAULT_NANS, FAULT_SLOW } FaultKind;

typedef struct {
    const char *spec; /* the flag's text, for messages */
    FaultKind kind;
    int rank;         /* the world rank it strikes */
    int step;         /* stall, exit, nan: the step (counted from 1) it strikes; nans: the first */
    int layer;        /* nan, nans: the layer named, -1: the rank's first */
    int block;        /* nan, nans: the gradient block to poison (fault_target_nan; 0: the embeddings) */
    double factor;    /* slow: how many times slower */
} FaultPlan;

/* Where the layers live: a world rank r is on pipeline stage r / tp % pp,
 * which holds layers [stage_first[s], stage_first[s] + stage_layers[s]). */
typedef struct {
    int world, num_layers, tp, pp;
    const int *stage_first, *stage_layers;
} FaultLayout;

/* stall|exit:RANK:STEP, nan|nans:RANK:STEP[:LAYER], slow:RANK:FACTOR, or ""
 * (none). Bad text dies with one line naming --debug-inject-fault. */
void fault_parse(FaultPlan *f, const char *spec);
/* Any kind: the plan's rank must be one of the world's (every rank checks;
 * dies with one line naming --debug-inject-fault). */
void fault_check_rank(const FaultPlan *f, int world);
/* nan, nans: checks the rank and the layer exist and the layer is on that
 * rank's stage (every rank checks, so all stop with the same line), and
 * sets the gradient block to poison. */
void fault_target_nan(FaultPlan *f, const FaultLayout *layout);
/* stall, exit: before step `step` (from 1) on `rank`, dies like a lost
 * machine (SIGKILL: no message, no clean-up) or stalls forever. */
void fault_maybe_stop(const FaultPlan *f, int rank, long step);
/* nan, nans: whether `rank`'s gradient gets a NaN in step `step`. */
bool fault_nan_now(const FaultPlan *f, int rank, long step);
/* slow: idles (FACTOR - 1) x compute seconds on the slow rank; returns the
 * time added (0 elsewhere). */
double fault_slow_down(const FaultPlan *f, int rank, double compute);

#endif

/* crossing.h: where a run of the batch sweep reached a validation loss: its
 * evaluations fed in order, the first at or below the loss found, and the
 * steps and tokens to it interpolated linearly in the loss between that
 * evaluation and the one before, so the evaluation interval does not
 * quantise S. A run that reaches the loss at its first evaluation has none
 * before: its steps are that evaluation's, an upper bound, flagged.
 * Deliberately not here: reading the metrics file (cli/sweep_run.c). */
#ifndef BS_SWEEP_CROSSING_H
#define BS_SWEEP_CROSSING_H

#include <stdbool.h>

/* An evaluation: steps and tokens counted from the sweep's start, and its validation loss. */
typedef struct {
    double step, tokens, loss;
} SweepEval;

typedef struct {
    double target;
    bool reached;
    SweepEval before, at; /* the last evaluation above the target (NaN step: none) and the first at or below it */
    double best_loss;     /* the lowest evaluated up to the crossing (NaN: none) */
} SweepCrossing;

void sweep_crossing_start(SweepCrossing *c, double target);
/* The next evaluation; one without a finite loss, or after the crossing, is not looked at. */
void sweep_crossing_add(SweepCrossing *c, SweepEval e);
/* With c->reached: the steps and tokens to the target, and whether it was the first evaluation (an upper bound). */
void sweep_crossing_point(const SweepCrossing *c, double *steps, double *tokens, bool *at_first_eval);

#endif

/* scaling.h: the same job from one node to a large fleet: at each GPU count
 * the best layout the search finds, its throughput, and its linear scaling
 * efficiency, the tokens/s per GPU against the smallest count that fits
 * (one node when the model fits there).
 *
 * Weak scaling keeps the tokens per GPU per step of the plan (the global
 * batch grows with the fleet); strong scaling keeps the global batch. One
 * GPU kind only. */
#ifndef BS_PLAN_SCALING_H
#define BS_PLAN_SCALING_H

#include <stdbool.h>

#include "plan/plan.h"
#include "plan/search.h"

#define SCALING_MAX_POINTS 24

typedef struct {
    int gpus;
    bool found;          /* some layout fits and the batch splits */
    PlanResult best;
    double efficiency;   /* per-GPU tokens/s relative to the baseline point */
} ScalePoint;

/* GPU counts from `from` to `to`, doubling; returns the number of points.
 * *baseline gets the index of the reference point (-1 if none fits). */
int scaling_sweep(const PlanInput *in, const SearchSpace *space, bool weak, int from, int to, ScalePoint *points,
                  int *baseline);

#endif

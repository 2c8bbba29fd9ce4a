/* scaling.h: the same job from one node to a large fleet: at each GPU count
 * the best layout the search finds, its throughput, and two efficiencies:
 *   linear: tokens/s against N times one GPU computing the whole job alone
 *           (no communication, no bubble, no stragglers; its memory limit
 *           ignored), the "linear scaling efficiency" of scaling tables;
 *   relative: tokens/s per GPU against the smallest count that fits (one
 *           node when the model fits there).
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
    double linear;       /* tokens/s / (gpus x one GPU's ideal tokens/s) */
} ScalePoint;

/* Tokens/s of one GPU (of the first kind) running the job alone with its
 * best micro-batch, as if it had the memory. */
double ideal_single_gpu_tokens_per_s(const PlanInput *in);

/* GPU counts from `from` to `to`, doubling; returns the number of points.
 * *baseline gets the index of the reference point (-1 if none fits). */
int scaling_sweep(const PlanInput *in, const SearchSpace *space, bool weak, int from, int to, ScalePoint *points,
                  int *baseline);

#endif

/* guard.h: the step guard: whether a step's update must be skipped (a
 * non-finite value anywhere, a loss spike), the window of accepted losses the
 * spike test compares with, and the skip counts (--max-skips in a row stop the
 * run). Where a non-finite value first appeared is agreed by all ranks from
 * one sortable key per direction; encoding a rank's keys and decoding their
 * maxima over ranks are pure functions here, the reduction is the caller's. */
#ifndef BS_TRAIN_GUARD_H
#define BS_TRAIN_GUARD_H

#include <stdbool.h>
#include <stddef.h>

typedef struct {
    double spike_sigmas;    /* --skip-spikes: skip a loss this many standard deviations high (0: off) */
    int window, max_skips;  /* --spike-window, --max-skips */
    double *losses;         /* the last `window` accepted losses, a ring */
    int next, count;
    long skips;             /* steps skipped in the run */
    int consecutive;        /* steps skipped in a row */
} Guard;

void guard_init(Guard *g, double spike_sigmas, int window, int max_skips);
void guard_free(Guard *g);

/* This rank's keys: key[0] from the lowest layer whose output was non-finite
 * in forward (a value spreads to later layers: the lowest is the origin),
 * key[1] from the highest gradient block found non-finite in backward (it
 * spreads to earlier blocks); -1: none. Among ranks with the same place
 * (tensor-parallel peers) the lowest rank has the larger key. 0: finite. */
void guard_nonfinite_keys(int rank, int world, int num_layers, int layer, int block, double key[2]);
/* From the maxima over ranks of those keys: false if every rank was finite,
 * else true with the reason naming the rank and the layer (or the
 * embeddings, or the final layer norm). */
bool guard_nonfinite_reason(const double key[2], int world, int num_layers, char *reason, size_t size);

/* Whether the update must be skipped for a non-finite loss or gradient norm
 * (grad_sq: its square), or a loss spike against the window; writes why. */
bool guard_skip(const Guard *g, double loss, double grad_sq, char *reason, size_t size);
/* An update happened: the loss joins the window, the run of skips ends. */
void guard_accept(Guard *g, double loss);
void guard_reject(Guard *g);
/* Dies after --max-skips skips in a row, naming the last step and its reason. */
void guard_stop_if_stuck(const Guard *g, long step, const char *reason);

#endif

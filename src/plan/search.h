/* search.h: every layout of a job on its fleet, evaluated and ranked by time
 * to train; the best that fit are kept, with what the search learned about
 * the ones that did not (to say why the winner wins).
 *
 * Searched: tp (powers of two up to a node, dividing heads and MLP), cp
 * (powers of two dividing the sequence), pp (every divisor up to the layer
 * count), dp (the rest), ep (MoE only), micro-batch (divisors of the batch
 * per data-parallel rank), 1F1B or interleaved with v dividing the layers
 * per stage, recomputation none/selective/full, ZeRO 0-3. Any field may be
 * pinned. GPipe is never faster than 1F1B (same bubble, more memory) and is
 * not searched; overlap, TP and EP overlap, sequence parallelism, the CP
 * algorithm and the rank order are inputs (the order, unless given,
 * is rank_order_default of each layout's ep). The ranking
 * keeps one entry per grid (tp, pp, dp, cp, ep, micro-batch, recomputation):
 * the best ZeRO stage and virtual-stage count of it. */
#ifndef BS_PLAN_SEARCH_H
#define BS_PLAN_SEARCH_H

#include <stdbool.h>

#include "plan/plan.h"

#define SEARCH_MAX_TOP 64

typedef struct {
    /* > 0 pins the field; 0 searches it (zero, recompute, schedule: -1 searches) */
    int tp, pp, dp, cp, ep, micro_batch, virtual_stages;
    int zero, recompute, schedule;
    unsigned zero_stages, recompute_policies; /* unpinned, the search tries stage z / policy r where bit z / r is set
                                                 (a stack's space); search_space_all: ZeRO 0-3, none/selective/full */
    bool overlap, sequence_parallel, tp_overlap; /* tp_overlap applies where tp > 1 with sequence parallelism */
    bool pp_overlap;                             /* applies to interleaved layouts */
    CpAlgo cp_algo; /* an input, as overlap is */
    RankOrder rank_order;
    bool rank_order_default; /* true: each layout gets rank_order_default(its ep) instead (search_space_all) */
    EpOverlap ep_overlap; /* applies where ep > 1 */
    int etp;              /* expert tensor parallelism, an input (0: tp) */
    int top; /* layouts to keep, <= SEARCH_MAX_TOP */
} SearchSpace;

typedef struct {
    long evaluated, fitting;
    bool have_fastest_unfit;  /* a layout faster than the winner that does not fit */
    PlanResult fastest_unfit;
    bool have_least_memory;   /* the layout needing the least memory (for "fits nowhere") */
    PlanResult least_memory;
} SearchStats;

/* A space that searches everything, keeping `top` layouts. */
SearchSpace search_space_all(int top);
/* Fills top[0..k) best first, returns k (0: nothing fits). */
int plan_search(const PlanInput *in, const SearchSpace *space, PlanResult *top, SearchStats *stats);

#endif

/* balance.h: --balance, micro-batches shared among data-parallel replicas by
 * measured speed (heterogeneous machines): how many micro-batches this
 * replica runs in a step, where its sequences start in the global batch, and
 * the next steps' split from this step's per-rank compute times. Without
 * --balance every replica runs an equal share, its micro-batches interleaved
 * with the others'. Every rank computes the same split from the same times;
 * the times' exchange is the caller's. */
#ifndef BS_TRAIN_BALANCE_H
#define BS_TRAIN_BALANCE_H

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    bool on;               /* --balance */
    int replicas, index;   /* data-parallel replicas; this one */
    int ranks_per_replica; /* tp x pp: replica d holds world ranks [d x this, (d + 1) x this) */
    int micro_batch;       /* sequences per micro-batch */
    int *split;            /* micro-batches per replica */
    int total;             /* micro-batches in the split's batch (another batch size starts from equal shares) */
    double *micro_time;    /* average seconds per micro-batch per replica */
} Balance;

void balance_init(Balance *b, bool on, int replicas, int index, int ranks_per_replica, int micro_batch);
void balance_free(Balance *b);
/* Micro-batches this replica runs in a step of `batch` sequences. */
int balance_micro_batches(Balance *b, long batch);
/* --balance: this replica's first sequence in the batch (replica d's are
 * contiguous, after those of the replicas before it); -1 without: the
 * replicas' micro-batches interleave. */
int64_t balance_first_sequence(const Balance *b);
/* Shares the next steps' micro-batches in proportion to each replica's
 * speed (an average of its seconds per micro-batch, a replica as slow as its
 * slowest rank), at least one each. rank_times: compute seconds per world rank. */
void balance_update(Balance *b, const double *rank_times);

#endif

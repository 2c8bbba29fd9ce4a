/* balance.c: micro-batches by measured speed (see balance.h). */
#include "train/balance.h"

#include <stdlib.h>

#include "core/error.h"

void balance_init(Balance *b, bool on, int replicas, int index, int ranks_per_replica, int micro_batch) {
    *b = (Balance){on, replicas, index, ranks_per_replica, micro_batch, NULL, 0, NULL};
    b->split = bs_calloc((size_t)replicas, sizeof(int));
    b->micro_time = bs_calloc((size_t)replicas, sizeof(double));
}

void balance_free(Balance *b) {
    free(b->split);
    free(b->micro_time);
    b->split = NULL;
    b->micro_time = NULL;
}

int balance_micro_batches(Balance *b, long batch) {
    int total = (int)(batch / b->micro_batch);
    if (!b->on) return total / b->replicas;
    if (b->total != total) { /* a new batch size: start from equal shares */
        for (int d = 0; d < b->replicas; d++) b->split[d] = total / b->replicas + (d < total % b->replicas ? 1 : 0);
        b->total = total;
    }
    return b->split[b->index];
}

int64_t balance_first_sequence(const Balance *b) {
    if (!b->on) return -1;
    int64_t first = 0;
    for (int d = 0; d < b->index; d++) first += (int64_t)b->split[d] * b->micro_batch;
    return first;
}

/* Whole micro-batches: the remainder goes to the replicas that would finish
 * soonest with one more, an excess comes off those that finish last. */
static void round_split(Balance *b, int assigned) {
    const double *t = b->micro_time;
    int *split = b->split;
    while (assigned < b->total) {
        int best = 0;
        for (int d = 1; d < b->replicas; d++)
            if (t[d] * (split[d] + 1) < t[best] * (split[best] + 1)) best = d;
        split[best]++, assigned++;
    }
    while (assigned > b->total) {
        int worst = -1;
        for (int d = 0; d < b->replicas; d++)
            if (split[d] > 1 && (worst < 0 || t[d] * split[d] > t[worst] * split[worst])) worst = d;
        split[worst]--, assigned--;
    }
}

void balance_update(Balance *b, const double *rank_times) {
    if (!b->on || b->total <= 0) return;
    double speed_sum = 0;
    for (int d = 0; d < b->replicas; d++) {
        double t = 0; /* a replica is as slow as its slowest rank */
        for (int k = 0; k < b->ranks_per_replica; k++) {
            double x = rank_times[d * b->ranks_per_replica + k];
            t = x > t ? x : t;
        }
        double per_micro = t / b->split[d];
        b->micro_time[d] = b->micro_time[d] > 0 ? 0.7 * b->micro_time[d] + 0.3 * per_micro : per_micro;
        speed_sum += 1 / b->micro_time[d];
    }
    int assigned = 0;
    for (int d = 0; d < b->replicas; d++) {
        int m = (int)((double)b->total * (1 / b->micro_time[d]) / speed_sum);
        b->split[d] = m < 1 ? 1 : m;
        assigned += b->split[d];
    }
    round_split(b, assigned);
}

/* expert_exchange.h: expert parallelism's exchange of rows. An EP group of
 * ep ranks shares E experts, E/ep per rank: rank r holds experts
 * [r E/ep, (r+1) E/ep). Each rank has rows sorted by destination expert
 * (the MoE layer's dispatch order, moe.h); plan exchanges the per-expert
 * counts (MPI_Alltoall), dispatch moves every row to the rank holding its
 * expert (MPI_Ialltoallv: variable blocks, no padding) and hands them over
 * grouped by local expert, sources in rank order within an expert (so in
 * global token order when each source's rows are in its token order); the
 * return moves rows in that same expert order back to where they came from.
 * Backward uses the same two moves for the gradients (dispatch the output
 * gradients, return the input gradients).
 *
 * Rows are opaque: `width` bytes each (C floats, or per-row metadata).
 * Start and finish are split so a caller can compute while rows move; one
 * move in flight per exchange. Not here: routing, capacity, the experts. */
#ifndef BS_PARALLEL_EXPERT_EXCHANGE_H
#define BS_PARALLEL_EXPERT_EXCHANGE_H

#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"

typedef struct ExpertExchange ExpertExchange;

/* For up to max_send rows sent and max_recv rows received per move, of up
 * to max_width bytes each. experts must be a multiple of the group's size. */
ExpertExchange *expert_exchange_create(Comm *ep_group, int experts, size_t max_send, size_t max_recv,
                                       size_t max_width);
void expert_exchange_free(ExpertExchange *x);

/* expert_counts (E): this rank's rows per expert, in expert order. Blocking
 * (the counts' all-to-all). */
void expert_exchange_plan(ExpertExchange *x, const size_t *expert_counts);
/* After plan: the rows this rank's experts receive, and per local expert. */
size_t expert_exchange_received(const ExpertExchange *x);
const size_t *expert_exchange_local_counts(const ExpertExchange *x);

/* rows (sent, width) in expert order -> out (received, width) grouped by
 * local expert. rows must stay unchanged, and out untouched, until finish. */
void expert_exchange_start_dispatch(ExpertExchange *x, const void *rows, void *out, size_t width);
/* rows (received, width) grouped by local expert -> out (sent, width) in
 * this rank's expert order (rows may be reused at once; out at finish). */
void expert_exchange_start_return(ExpertExchange *x, const void *rows, void *out, size_t width);
/* Waits for the move in flight. */
void expert_exchange_finish(ExpertExchange *x);

/* Bytes this rank has sent to other ranks (rows and counts), and moves done. */
uint64_t expert_exchange_bytes(const ExpertExchange *x);
uint64_t expert_exchange_moves(const ExpertExchange *x);

#endif

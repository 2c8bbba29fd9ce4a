/* expert_exchange.c: the all-to-all moves of expert parallelism (see
 * expert_exchange.h). A dispatch lands in a staging buffer in source order
 * and is permuted into local-expert order at finish; a return is permuted
 * back into source order before it is sent. */
#include "parallel/expert_exchange.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/reason.h"

struct ExpertExchange {
    Comm *comm;
    int ep, rank, local; /* group size, rank, experts per rank */
    size_t max_send, max_recv, max_width;
    size_t *recv_expert;            /* (ep, local): rows from source s for local expert e */
    size_t *send_rows, *recv_rows;  /* (ep): rows to / from each rank */
    size_t *local_counts;           /* (local) */
    size_t sent, received;
    size_t *order;                  /* (max_recv): expert-order row j is source-order row order[j] */
    unsigned char *staging;         /* (max_recv x max_width) */
    CommOp *op;
    bool dispatching;               /* the move in flight is a dispatch (permute at finish) */
    void *out;
    size_t width;
    uint64_t bytes, moves;
};

ExpertExchange *expert_exchange_create(Comm *ep_group, int experts, size_t max_send, size_t max_recv,
                                       size_t max_width) {
    const int ep = comm_size(ep_group);
    if (experts % ep != 0) bs_die_about("ep experts", "expert exchange: %d experts do not divide over %d ranks", experts, ep);
    ExpertExchange *x = bs_calloc(1, sizeof *x);
    x->comm = ep_group, x->ep = ep, x->rank = comm_rank(ep_group), x->local = experts / ep;
    x->max_send = max_send, x->max_recv = max_recv, x->max_width = max_width;
    x->recv_expert = bs_calloc((size_t)experts, sizeof(size_t));
    x->send_rows = bs_calloc((size_t)ep, sizeof(size_t));
    x->recv_rows = bs_calloc((size_t)ep, sizeof(size_t));
    x->local_counts = bs_calloc((size_t)x->local, sizeof(size_t));
    x->order = bs_malloc(sizeof(size_t) * (max_recv ? max_recv : 1));
    x->staging = bs_malloc(max_recv * max_width + 1);
    return x;
}

void expert_exchange_free(ExpertExchange *x) {
    if (!x) return;
    free(x->recv_expert), free(x->send_rows), free(x->recv_rows), free(x->local_counts);
    free(x->order), free(x->staging), free(x);
}

void expert_exchange_plan(ExpertExchange *x, const size_t *expert_counts) {
    const int ep = x->ep, local = x->local;
    comm_alltoall_sizes(x->comm, expert_counts, x->recv_expert, local);
    x->bytes += (uint64_t)(ep - 1) * local * sizeof(size_t);
    x->sent = x->received = 0;
    memset(x->local_counts, 0, sizeof(size_t) * (size_t)local);
    for (int r = 0; r < ep; r++) {
        x->send_rows[r] = x->recv_rows[r] = 0;
        for (int e = 0; e < local; e++) {
            x->send_rows[r] += expert_counts[r * local + e];
            x->recv_rows[r] += x->recv_expert[r * local + e];
            x->local_counts[e] += x->recv_expert[r * local + e];
        }
        x->sent += x->send_rows[r], x->received += x->recv_rows[r];
    }
    if (x->sent > x->max_send || x->received > x->max_recv)
        bs_die("expert exchange: %zu rows out, %zu in exceed the %zu, %zu planned", x->sent, x->received, x->max_send,
               x->max_recv);
    /* expert order: local expert, then source rank, then the source's order */
    size_t j = 0;
    for (int e = 0; e < local; e++) {
        size_t source_start = 0;
        for (int s = 0; s < ep; source_start += x->recv_rows[s], s++) {
            size_t at = source_start;
            for (int f = 0; f < e; f++) at += x->recv_expert[s * local + f];
            for (size_t i = 0; i < x->recv_expert[s * local + e]; i++) x->order[j++] = at + i;
        }
    }
}

size_t expert_exchange_received(const ExpertExchange *x) { return x->received; }
const size_t *expert_exchange_local_counts(const ExpertExchange *x) { return x->local_counts; }

static void count_move(ExpertExchange *x, const size_t *rows_to, size_t width) {
    for (int r = 0; r < x->ep; r++)
        if (r != x->rank) x->bytes += rows_to[r] * width;
    x->moves++;
}

void expert_exchange_start_dispatch(ExpertExchange *x, const void *rows, void *out, size_t width) {
    if (x->op || width > x->max_width) bs_die("expert exchange: a move is in flight or rows are too wide");
    x->op = comm_start_alltoallv(x->comm, rows, x->send_rows, x->staging, x->recv_rows, width);
    x->dispatching = true, x->out = out, x->width = width;
    count_move(x, x->send_rows, width);
}

void expert_exchange_start_return(ExpertExchange *x, const void *rows, void *out, size_t width) {
    if (x->op || width > x->max_width) bs_die("expert exchange: a move is in flight or rows are too wide");
    const unsigned char *src = rows;
    for (size_t j = 0; j < x->received; j++) memcpy(x->staging + x->order[j] * width, src + j * width, width);
    x->op = comm_start_alltoallv(x->comm, x->staging, x->recv_rows, out, x->send_rows, width);
    x->dispatching = false, x->out = out, x->width = width;
    count_move(x, x->recv_rows, width);
}

void expert_exchange_finish(ExpertExchange *x) {
    if (!x->op) return;
    comm_wait(x->op);
    x->op = NULL;
    if (!x->dispatching) return;
    unsigned char *dst = x->out;
    for (size_t j = 0; j < x->received; j++) memcpy(dst + j * x->width, x->staging + x->order[j] * x->width, x->width);
}

uint64_t expert_exchange_bytes(const ExpertExchange *x) { return x->bytes; }
uint64_t expert_exchange_moves(const ExpertExchange *x) { return x->moves; }

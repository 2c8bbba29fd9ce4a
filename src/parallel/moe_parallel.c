/* moe_parallel.c: the MoE layer over an EP group (see moe_parallel.h): the
 * token side of model/moe.c on each rank's rows, the expert side on the
 * experts' ranks, parallel/expert_exchange.c between them. Per forward: the
 * group's row counts (all-gather: positions and capacity), the per-expert
 * counts, the rows' metadata (score, position), the rows, and the outputs
 * back; per backward: the output gradients out, the input gradients back. */
#include "parallel/moe_parallel.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/reason.h"
#include "parallel/expert_exchange.h"

typedef struct {
    int64_t position; /* in the group's rows, rank order */
    float score;
    int32_t pad;
} RowMeta;

struct MoeParallel {
    MoeConfig cfg;
    Comm *comm;
    int ep, rank, first, local;
    MoeLayer *layer;
    ExpertExchange *exchange;
    size_t group_rows; /* of the last forward */
    size_t capacity_group; /* rows per capacity decision; 0: group_rows */
    uint64_t *rank_rows; /* (ep): each rank's rows in the last forward */
    /* token side (N K rows, dispatch order) */
    float *send, *y, *dy, *drows;
    RowMeta *meta;
    /* expert side (received rows, local-expert order) */
    float *rows, *rows_y, *rows_dy, *rows_dx, *scores;
    int64_t *positions;
    RowMeta *rows_meta;
};

MoeParallel *moe_parallel_create(const MoeConfig *cfg, Comm *ep_group, size_t max_rows) {
    MoeParallel *p = bs_calloc(1, sizeof *p);
    p->cfg = *cfg, p->comm = ep_group, p->ep = comm_size(ep_group), p->rank = comm_rank(ep_group);
    if (cfg->experts % p->ep != 0) bs_die_about("ep experts", "the expert-parallel degree %d does not divide the %d experts", p->ep, cfg->experts);
    p->local = cfg->experts / p->ep, p->first = p->rank * p->local;
    const size_t K = (size_t)cfg->top_k, C = (size_t)cfg->channels, S = max_rows * K;
    /* worst case: every row of the group sends min(K, local) assignments here */
    const size_t M = max_rows * (size_t)p->ep * (K < (size_t)p->local ? K : (size_t)p->local);
    p->layer = moe_layer_create(cfg, max_rows, p->first, p->local, M);
    const size_t width = sizeof(float) * C > sizeof(RowMeta) ? sizeof(float) * C : sizeof(RowMeta);
    p->exchange = expert_exchange_create(ep_group, cfg->experts, S, M, width);
    p->send = bs_malloc(sizeof(float) * S * C), p->y = bs_malloc(sizeof(float) * S * C);
    p->dy = bs_malloc(sizeof(float) * S * C), p->drows = bs_malloc(sizeof(float) * S * C);
    p->meta = bs_malloc(sizeof(RowMeta) * S);
    p->rows = bs_malloc(sizeof(float) * M * C), p->rows_y = bs_malloc(sizeof(float) * M * C);
    p->rows_dy = bs_malloc(sizeof(float) * M * C), p->rows_dx = bs_malloc(sizeof(float) * M * C);
    p->scores = bs_malloc(sizeof(float) * M), p->positions = bs_malloc(sizeof(int64_t) * M);
    p->rows_meta = bs_malloc(sizeof(RowMeta) * M);
    p->rank_rows = bs_malloc(sizeof(uint64_t) * (size_t)p->ep);
    return p;
}

void moe_parallel_free(MoeParallel *p) {
    if (!p) return;
    moe_free(p->layer);
    expert_exchange_free(p->exchange);
    free(p->send), free(p->y), free(p->dy), free(p->drows), free(p->meta), free(p->rows), free(p->rows_y);
    free(p->rows_dy), free(p->rows_dx), free(p->scores), free(p->positions), free(p->rows_meta), free(p->rank_rows), free(p);
}

int moe_parallel_first_expert(const MoeParallel *p) { return p->first; }
int moe_parallel_local_experts(const MoeParallel *p) { return p->local; }

/* This rank's first position among the group's rows; sets group_rows. */
static int64_t row_offset(MoeParallel *p, size_t N) {
    uint64_t mine = N, *all = p->rank_rows;
    comm_allgather_bytes(p->comm, &mine, sizeof mine, all);
    int64_t offset = 0;
    p->group_rows = 0;
    for (int r = 0; r < p->ep; r++) {
        if (r < p->rank) offset += (int64_t)all[r];
        p->group_rows += all[r];
    }
    return offset;
}

void moe_parallel_forward(MoeParallel *p, float *out, const float *x, size_t N, const float *router_w,
                          const float *experts, const float *bias, MoeStats *stats) {
    const size_t C = (size_t)p->cfg.channels, S = N * (size_t)p->cfg.top_k;
    moe_route(p->layer, x, N, router_w, bias, stats);
    const int64_t offset = row_offset(p, N);
    const int32_t *row = moe_dispatch_rows(p->layer);
    const float *score = moe_dispatch_scores(p->layer);
    for (size_t j = 0; j < S; j++) p->meta[j] = (RowMeta){offset + row[j], score[j], 0};
    expert_exchange_plan(p->exchange, moe_dispatch_counts(p->layer));
    expert_exchange_start_dispatch(p->exchange, p->meta, p->rows_meta, sizeof(RowMeta));
    moe_gather(p->layer, p->send, x); /* overlaps the metadata's move */
    expert_exchange_finish(p->exchange);
    expert_exchange_start_dispatch(p->exchange, p->send, p->rows, sizeof(float) * C);
    const size_t M = expert_exchange_received(p->exchange);
    for (size_t j = 0; j < M; j++) p->scores[j] = p->rows_meta[j].score, p->positions[j] = p->rows_meta[j].position;
    expert_exchange_finish(p->exchange);
    moe_experts_forward(p->layer, p->rows_y, p->rows, expert_exchange_local_counts(p->exchange), p->scores,
                        p->positions, moe_capacity(&p->cfg, p->capacity_group ? p->capacity_group : p->group_rows),
                        experts, stats);
    expert_exchange_start_return(p->exchange, p->rows_y, p->y, sizeof(float) * C);
    expert_exchange_finish(p->exchange);
    moe_combine(p->layer, out, p->y);
}

void moe_parallel_backward(MoeParallel *p, float *dx, float *drouter_w, float *dexperts, const float *dout,
                           const float *x, const float *router_w, const float *experts, const MoeStats *global) {
    const size_t C = (size_t)p->cfg.channels;
    moe_combine_backward(p->layer, p->dy, dout, p->y);
    expert_exchange_start_dispatch(p->exchange, p->dy, p->rows_dy, sizeof(float) * C);
    expert_exchange_finish(p->exchange);
    moe_experts_backward(p->layer, p->rows_dx, p->rows_dy, experts, dexperts);
    expert_exchange_start_return(p->exchange, p->rows_dx, p->drows, sizeof(float) * C);
    expert_exchange_finish(p->exchange);
    moe_route_backward(p->layer, dx, drouter_w, p->drows, x, router_w, global);
}

void moe_parallel_set_capacity_group(MoeParallel *p, size_t rows) {
    p->capacity_group = rows;
    moe_set_capacity_group(p->layer, rows);
}

void moe_parallel_set_loss_coefs(MoeParallel *p, double aux_coef, double z_coef) {
    moe_set_loss_coefs(p->layer, aux_coef, z_coef);
}

void moe_parallel_set_tensor_parallel(MoeParallel *p, bool lead, MoeSumFn sum, void *ctx) {
    moe_set_tensor_parallel(p->layer, lead, sum, ctx);
}

uint64_t moe_parallel_bytes(const MoeParallel *p) { return expert_exchange_bytes(p->exchange); }
uint64_t moe_parallel_moves(const MoeParallel *p) { return expert_exchange_moves(p->exchange); }

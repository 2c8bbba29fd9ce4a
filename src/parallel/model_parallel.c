/* model_parallel.c: tied weights across stages, global norms, the whole
 * model to and from one rank (see model_parallel.h). */
#include "parallel/model_parallel.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/range.h"
#include "optim/grad_norm.h"

#define TAG_TIED_WEIGHTS 1000001
#define TAG_TIED_GRADS 1000002

static size_t wte_numel(const GPT *model) { return gpt_tensor_numel(&model->cfg, TK_WTE); }

void mp_share_output_weights(const Grid *g, GPT *model, DataParallel *dp) {
    if (g->pp == 1) return;
    const int last = g->pp - 1;
    const size_t n = wte_numel(model);
    if (g->pp_index == 0) {
        /* decide on the whole buffer, not on wte alone: the gather is a collective, and whether wte falls in
         * this rank's ZeRO-3 shard differs between ranks */
        float *wte = dp_params_at(dp, 0, model->num_params);
        float *full = NULL;
        if (!wte) { /* ZeRO-3: gather this stage's parameters first */
            full = bs_malloc(model->num_params * sizeof(float));
            dp_gather_params(dp, full);
            wte = full;
        }
        comm_wait(comm_start_send(g->pp_group, wte, n, last, TAG_TIED_WEIGHTS));
        free(full);
    } else if (g->pp_index == last) {
        comm_wait(comm_start_recv(g->pp_group, model->head_wte, n, 0, TAG_TIED_WEIGHTS));
    }
}

void mp_start_tied_grads(const Grid *g, GPT *model, TiedGrads *t) {
    t->op = NULL;
    if (g->pp == 1) return;
    const size_t n = wte_numel(model);
    if (g->pp_index == 0) {
        if (!t->buf) t->buf = bs_malloc(n * sizeof(float));
        t->op = comm_start_recv(g->pp_group, t->buf, n, g->pp - 1, TAG_TIED_GRADS);
    } else if (g->pp_index == g->pp - 1) {
        memset(model->head_dwte, 0, n * sizeof(float));
    }
}

void mp_send_tied_grads(const Grid *g, GPT *model, TiedGrads *t) {
    if (g->pp == 1 || g->pp_index != g->pp - 1) return;
    t->op = comm_start_send(g->pp_group, model->head_dwte, wte_numel(model), 0, TAG_TIED_GRADS);
}

void mp_wait_tied_grads(GPT *model, TiedGrads *t) {
    if (!t->op || !t->buf) return;
    comm_wait(t->op);
    t->op = NULL;
    model->extra_wte_grad = t->buf;
}

void mp_finish_tied_grads(TiedGrads *t) {
    if (t->op) comm_wait(t->op);
    t->op = NULL;
}

bool mp_counts_in_norm(const GPTConfig *cfg, const DataParallel *dp, TensorKind kind) {
    GPTConfig c = *cfg;
    /* the experts sharded over their own group (ZeRO 1-2): every rank's dense pieces are its own, not copies */
    if (dp_experts_sharded_apart(dp)) c.ep_rank = 0;
    return gpt_tensor_primary(&c, kind);
}

double mp_local_grad_sum_squares(const GPT *model, DataParallel *dp) {
    const GPTConfig *cfg = &model->cfg;
    int cap = gpt_max_segments(cfg);
    ParamSegment *segs = bs_malloc(sizeof(ParamSegment) * (size_t)cap);
    int n = gpt_param_segments(cfg, segs, cap);
    double sum = 0;
    for (int k = 0; k < dp_num_pieces(dp); k++) {
        const DPPiece p = dp_piece(dp, k);
        const Range mine = range_make(p.offset, p.count);
        for (int i = 0; i < n; i++) {
            if (!mp_counts_in_norm(cfg, dp, segs[i].kind)) continue;
            Range part = range_intersect(range_make(segs[i].offset, segs[i].count), mine);
            if (!range_empty(part)) sum += sum_of_squares(p.grads + range_offset_in(part, mine), part.count);
        }
    }
    free(segs);
    return sum;
}

void mp_copy_from_logical(const GPTConfig *cfg, const float *logical, float *dst, size_t offset, size_t count) {
    int n;
    ShardRun *runs = gpt_shard_runs_alloc(cfg, &n);
    const Range wanted = range_make(offset, count);
    for (int i = 0; i < n; i++) {
        Range run = range_make(runs[i].local, runs[i].count), part = range_intersect(run, wanted);
        if (!range_empty(part))
            memcpy(dst + range_offset_in(part, wanted), logical + runs[i].logical + range_offset_in(part, run),
                   part.count * sizeof(float));
    }
    free(runs);
}

/* Packs this shard's primary runs (in run order) into out; returns floats written. */
static size_t pack_primary(const GPTConfig *cfg, const float *local, float *out) {
    int n;
    ShardRun *runs = gpt_shard_runs_alloc(cfg, &n);
    size_t k = 0;
    for (int i = 0; i < n; i++)
        if (runs[i].primary) {
            if (out) memcpy(out + k, local + runs[i].local, runs[i].count * sizeof(float));
            k += runs[i].count;
        }
    free(runs);
    return k;
}

static void unpack_primary(const GPTConfig *cfg, const float *packed, float *logical) {
    int n;
    ShardRun *runs = gpt_shard_runs_alloc(cfg, &n);
    size_t k = 0;
    for (int i = 0; i < n; i++)
        if (runs[i].primary) {
            memcpy(logical + runs[i].logical, packed + k, runs[i].count * sizeof(float));
            k += runs[i].count;
        }
    free(runs);
}

void mp_gather_logical(const Grid *g, GPT *model, DataParallel *dp, const GPTConfig *rank_shards, float *out) {
    float *local = bs_malloc(model->num_params * sizeof(float));
    dp_gather_params(dp, local); /* every data-parallel rank: its stage's whole shard */
    mp_gather_shards(g, &model->cfg, local, rank_shards, out);
    free(local);
}

void mp_gather_shards(const Grid *g, const GPTConfig *cfg, const float *local, const GPTConfig *rank_shards,
                      float *out) {
    bool sender = g->edp_index == 0 && g->cp_index == 0; /* one copy of each shard (each ep rank: its experts) */
    size_t n = sender ? pack_primary(cfg, local, NULL) : 0;
    float *packed = bs_malloc((n ? n : 1) * sizeof(float));
    if (sender) pack_primary(cfg, local, packed);
    int world = comm_size(g->world), me = comm_rank(g->world);
    GPTConfig whole = gpt_logical_config(cfg);
    size_t total = me == 0 ? gpt_num_params(&whole) : 0; /* the primary copies: each element once */
    float *all = me == 0 ? bs_malloc((total ? total : 1) * sizeof(float)) : NULL;
    size_t *counts = me == 0 ? bs_malloc(sizeof(size_t) * (size_t)world) : NULL;
    comm_gatherv_floats(g->world, packed, n, all, counts, 0);
    free(packed);
    if (me == 0) {
        size_t at = 0;
        for (int r = 0; r < world; r++) {
            if (counts[r] == 0) continue;
            unpack_primary(&rank_shards[r], all + at, out);
            at += counts[r];
        }
        free(all);
        free(counts);
    }
}

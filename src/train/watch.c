/* watch.c: per-layer and per-rank norms, MFU and the TensorBoard scalars
 * (see watch.h). */
#include "train/watch.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/range.h"
#include "optim/grad_norm.h"
#include "train/metrics.h"

void watch_init(Watch *w, const TrainConfig *c, int rank, int ranks, int layers, double flops_per_token) {
    *w = (Watch){0};
    w->on = (c->output.metrics && c->output.metrics[0]) || (c->output.tensorboard && c->output.tensorboard[0]);
    w->blocks = layers + 2;
    w->ranks = ranks;
    w->grad_sq = bs_calloc(2 * (size_t)w->blocks, sizeof(double));
    w->weight_sq = w->grad_sq + w->blocks;
    w->rank_grad = bs_calloc((size_t)ranks, sizeof(double));
    w->flops_per_token = flops_per_token;
    w->peak_flops = c->output.peak_gflops * 1e9;
    w->tensorboard = rank == 0 && c->output.tensorboard && c->output.tensorboard[0];
    if (w->tensorboard) tensorboard_open(&w->tb, c->output.tensorboard);
}

void watch_free(Watch *w) {
    if (w->tensorboard) tensorboard_close(&w->tb);
    free(w->grad_sq);
    free(w->rank_grad);
    *w = (Watch){0};
}

/* A tensor's block: 0 the embeddings, 1..L its layer, L+1 the final LayerNorm. */
static int block_of(const ParamSegment *s, int blocks) {
    if (gpt_tensor_is_per_layer(s->kind)) return s->layer + 1;
    return s->kind == TK_WTE || s->kind == TK_WPE ? 0 : blocks - 1;
}

/* This rank's share of each block's squared norms: the copies that count
 * (mp_counts_in_norm) in the pieces it updates. */
static void add_chunk(Watch *w, const EngineChunk *ch) {
    const GPTConfig *cfg = &ch->model.cfg;
    int cap = gpt_max_segments(cfg);
    ParamSegment *segs = bs_malloc(sizeof(ParamSegment) * (size_t)cap);
    int n = gpt_param_segments(cfg, segs, cap);
    for (int k = 0; k < engine_chunk_num_pieces(ch); k++) {
        const DPPiece p = engine_chunk_piece(ch, k);
        const Range mine = range_make(p.offset, p.count);
        for (int i = 0; i < n; i++) {
            if (!engine_chunk_counts_in_norm(ch, segs[i].kind)) continue;
            Range part = range_intersect(range_make(segs[i].offset, segs[i].count), mine);
            if (range_empty(part)) continue;
            const int b = block_of(&segs[i], w->blocks);
            w->grad_sq[b] += sum_of_squares(p.grads + range_offset_in(part, mine), part.count);
            w->weight_sq[b] += sum_of_squares(p.params + range_offset_in(part, mine), part.count);
        }
    }
    free(segs);
}

/* On a device (the whole model, a pipeline stage's chunks or a TP shard): each tensor's sums computed there, chunk
 * after chunk, added by block. */
static bool add_device(Watch *w, Engine *e) {
    uint64_t bytes;
    if (!engine_device_traffic(e, &bytes)) return false;
    int cap = 0, n = 0;
    for (int c = 0; c < engine_num_chunks(e); c++) cap += gpt_max_segments(engine_chunk_config(e, c));
    ParamSegment *segs = bs_malloc(sizeof(ParamSegment) * (size_t)cap);
    for (int c = 0; c < engine_num_chunks(e); c++) n += gpt_param_segments(engine_chunk_config(e, c), segs + n, cap - n);
    double *sums = bs_malloc(2 * sizeof(double) * (size_t)n);
    engine_device_tensor_norms(e, sums, sums + n);
    for (int i = 0; i < n; i++) {
        w->grad_sq[block_of(&segs[i], w->blocks)] += sums[i];
        w->weight_sq[block_of(&segs[i], w->blocks)] += sums[n + i];
    }
    free(sums);
    free(segs);
    return true;
}

void watch_measure(Watch *w, Engine *e, const TrainConfig *c, const StepRecord *records) {
    if (!w->on) return;
    memset(w->grad_sq, 0, 2 * (size_t)w->blocks * sizeof(double));
    w->on_device = add_device(w, e);
    for (int k = 0; !w->on_device && k < engine_num_chunks(e); k++) add_chunk(w, engine_chunk(e, k));
    uint64_t bytes = 0;
    if (engine_device_traffic(e, &bytes)) w->step_device_bytes = bytes - w->device_bytes, w->device_bytes = bytes;
    /* as engine_grad_sum_squares: ZeRO shards over every rank, else one model-parallel group holds one copy */
    const Grid *g = engine_grid(e);
    comm_allreduce_double(c->parallel.zero >= 1 ? g->world : g->mp_group, w->grad_sq, 2 * w->blocks);
    if (g->ep > 1 && c->parallel.zero == 0) comm_allreduce_double(g->ep_group, w->grad_sq, 2 * w->blocks); /* each its experts */
    for (int r = 0; r < w->ranks; r++) w->rank_grad[r] = c->estimators.noise_scale ? sqrt(records[r].micro_sq) : NAN;
}

double watch_mfu(const Watch *w, const StepResult *r, int seq_len) {
    if (w->peak_flops <= 0) return NAN;
    return step_tokens_per_s(r, seq_len) * w->flops_per_token / (w->ranks * w->peak_flops);
}

/* Tag "PREFIX/embeddings", "PREFIX/layer_NN" or "PREFIX/final_ln" of block b. */
static void block_tag(char *tag, size_t n, const char *prefix, int b, int blocks) {
    if (b == 0) snprintf(tag, n, "%s/embeddings", prefix);
    else if (b == blocks - 1) snprintf(tag, n, "%s/final_ln", prefix);
    else snprintf(tag, n, "%s/layer_%02d", prefix, b - 1);
}

void watch_write_tensorboard(Watch *w, const StepResult *r, long step, double val_loss, int seq_len) {
    if (!w->tensorboard) return;
    TensorBoard *tb = &w->tb;
    tensorboard_begin(tb, step);
    tensorboard_scalar(tb, "train/loss", r->loss);
    tensorboard_scalar(tb, "val/loss", val_loss);
    tensorboard_scalar(tb, "train/lr", r->lr);
    tensorboard_scalar(tb, "train/global_batch", (double)r->batch);
    tensorboard_scalar(tb, "train/grad_norm", r->grad_norm);
    tensorboard_scalar(tb, "train/noise_scale", r->noise_scale);
    tensorboard_scalar(tb, "perf/tokens_per_s", step_tokens_per_s(r, seq_len));
    tensorboard_scalar(tb, "perf/mfu", watch_mfu(w, r, seq_len));
    tensorboard_scalar(tb, "perf/comm_exposed_ms", r->comm_exposed * 1e3);
    tensorboard_scalar(tb, "perf/comm_exposed_share", r->comm_exposed / r->seconds);
    char tag[64];
    for (int b = 0; b < w->blocks; b++) {
        block_tag(tag, sizeof tag, "grad_norm", b, w->blocks);
        tensorboard_scalar(tb, tag, sqrt(w->grad_sq[b]));
        block_tag(tag, sizeof tag, "weight_norm", b, w->blocks);
        tensorboard_scalar(tb, tag, sqrt(w->weight_sq[b]));
    }
    for (int k = 0; k < w->ranks; k++) {
        snprintf(tag, sizeof tag, "grad_norm_rank/%03d", k);
        tensorboard_scalar(tb, tag, w->rank_grad[k]);
    }
    tensorboard_end(tb);
}

/* The root of each of n squared norms, as an array. */
static json_t *roots(const double *sq, int n) {
    json_t *a = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(a, metrics_number(sqrt(sq[i])));
    return a;
}

void watch_metrics(const Watch *w, json_t *record, double mfu) {
    if (!w->on) return;
    json_object_set_new(record, "grad_norm_layers", roots(w->grad_sq, w->blocks));
    json_object_set_new(record, "weight_norm_layers", roots(w->weight_sq, w->blocks));
    if (!isnan(w->rank_grad[0])) {
        json_t *ranks = json_array();
        for (int k = 0; k < w->ranks; k++) json_array_append_new(ranks, metrics_number(w->rank_grad[k]));
        json_object_set_new(record, "grad_norm_ranks", ranks);
    }
    if (w->peak_flops > 0) json_object_set_new(record, "mfu", metrics_number(mfu));
    if (w->on_device) json_object_set_new(record, "device_to_host_bytes", json_integer((json_int_t)w->step_device_bytes));
}

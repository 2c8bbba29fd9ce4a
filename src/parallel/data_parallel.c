/* data_parallel.c: buckets, ZeRO shards and block access (see data_parallel.h). */
#include "parallel/data_parallel.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/reason.h"
#include "core/range.h"
#include "kernels/vecmath.h"
#include "optim/grad_norm.h"
#include "parallel/fp8_gather.h"

#define MAX_INFLIGHT 256
#define GRAD_POOL 2
/* stage 3 parameter slots: embeddings, final LayerNorm, two rotating layer slots */
enum { SLOT_EMB, SLOT_LNF, SLOT_LAYER_A, SLOT_LAYER_B, NUM_SLOTS };

/* A range of the flat layout and the group that reduces and shards it. */
typedef struct {
    Range range;
    Comm *group;
} GroupRange;

typedef struct {
    int first_block, last_block; /* ascending; backward finishes last_block first */
    size_t offset, count;        /* flat range */
    int pending;                 /* blocks still to finish this micro-step */
    float *buf;                  /* stage 2/3: where backward writes this bucket */
    int pool_index;              /* -1: the dedicated embeddings buffer */
    CommOp *op;
    GroupRange *split;           /* expert parallelism: its expert ranges and the ranges between them */
    CommOp **parts;              /* their reductions (num_parts, NULL when done) */
    int num_parts;
    CompressedScratch *scratch;  /* compressed gradients: this bucket's buffers */
    size_t server_offset;        /* stage 0, exchange scheme: its server residual in dp->server_residual */
} Bucket;

typedef struct {
    float *buf;
    size_t capacity;
    int block;   /* block held (or being gathered), -1 if none */
    bool in_use;  /* between params() and params_done() */
    bool rounded; /* bf16 mode: its matrices rounded since the gather */
    bool fill_secondary;        /* hpZ: copy the node's part into the secondary shard once gathered */
    CommOp *op;                 /* gather in flight */
    CompressedScratch *scratch; /* qwZ */
} ParamSlot;

struct DataParallel {
    Comm *comm;
    GPT *model;
    DPOptions opt;
    int stage, num_blocks;
    size_t total;
    Range shard; /* this rank's part under the group's partition */
    Range *pieces;       /* what this rank updates, ascending (one range unless experts are sharded apart) */
    size_t *piece_packed; /* where each piece starts in the update arrays */
    int num_pieces;
    size_t update_floats; /* the pieces' elements together */
    float *shard_params, *shard_grads; /* stage 3 / stages 2-3 */
    Bucket *buckets;
    int num_buckets;
    int *bucket_of_block;
    float *emb_grad_buf;
    float *grad_pool[GRAD_POOL];
    bool pool_busy[GRAD_POOL];
    size_t pool_floats;
    int inflight[MAX_INFLIGHT]; /* bucket indices, in launch order */
    int num_inflight;
    ParamSlot slots[NUM_SLOTS];
    bool last_micro, in_backward, communicate;
    bool measure_micro;   /* gradient noise scale: per micro-step local norms */
    float *grad_snapshot; /* stages 0-1: the accumulated gradient before this micro-step */
    double micro_sumsq;
    Preconditioner precond;   /* stage 0: Adam's preconditioner for the second micro norm (v NULL: off) */
    double micro_precond_sumsq;
    float *probe;             /* stage 0: sum over micro-steps k of probe_signs[k] x that micro-step's gradient */
    const float *probe_signs;
    int micro_index;          /* micro-steps finished this step */
    int first_nonfinite_block; /* guard, this step */
    int poison_block;          /* tests: -1 or the block to poison */
    BlockAccess train_access, eval_access;
    DPMemory memory;
    bool compress_grads, local;
    float *residual;        /* worker error feedback, total floats */
    float *server_residual; /* stage 0, exchange scheme: each bucket's own chunk */
    size_t server_floats;
    Comm *expert_comm;      /* expert parallelism: the expert tensors' reduction group (NULL: dp->comm) */
    Range *expert_ranges;   /* the TK_EXPERTS tensors, ascending */
    int num_expert_ranges;
    GroupRange *layout_split; /* [0, total) cut into the expert ranges and the ranges between them */
    int num_layout_split;
    Comm *node;             /* hpZ: the node group and the secondary shard */
    float *secondary;
    Range secondary_range;
};

static void block_range(const DataParallel *dp, int block, size_t *off, size_t *count) {
    gpt_block_range(&dp->model->cfg, block, off, count);
}

/* ---- gradient buckets ---- */

static void plan_buckets(DataParallel *dp) {
    const int nb = dp->num_blocks;
    dp->buckets = bs_calloc((size_t)nb, sizeof(Bucket));
    dp->bucket_of_block = bs_malloc(sizeof(int) * (size_t)nb);
    int k = -1;
    size_t filled = 0;
    for (int b = 0; b < nb; b++) dp->bucket_of_block[b] = -1;
    for (int b = nb - 1; b >= 0; b--) { /* backward order; blocks of other pipeline stages are absent */
        if (!gpt_block_present(&dp->model->cfg, b)) continue;
        size_t off, count;
        block_range(dp, b, &off, &count);
        bool new_bucket = k < 0 || b == 0 || filled >= dp->opt.bucket_floats;
        if (new_bucket) {
            k++;
            dp->buckets[k].last_block = b;
            dp->buckets[k].count = 0;
            filled = 0;
        }
        Bucket *bk = &dp->buckets[k];
        bk->first_block = b;
        bk->offset = off;
        bk->count += count;
        filled += count;
        dp->bucket_of_block[b] = k;
    }
    dp->num_buckets = k + 1;
    for (int i = 0; i < dp->num_buckets; i++)
        if (dp->buckets[i].first_block != 0 && dp->buckets[i].count > dp->pool_floats)
            dp->pool_floats = dp->buckets[i].count;
}

/* A finished reduce-scatter: add this rank's parts into the shard gradient. */
static void absorb(DataParallel *dp, Bucket *bk) {
    const Range bucket = range_make(bk->offset, bk->count);
    for (int k = 0; k < dp->num_pieces; k++) {
        const Range mine = range_intersect(bucket, dp->pieces[k]);
        if (range_empty(mine)) continue;
        float *dst = dp->shard_grads + dp->piece_packed[k] + range_offset_in(mine, dp->pieces[k]);
        const float *src = bk->buf + range_offset_in(mine, bucket);
        for (size_t i = 0; i < mine.count; i++) dst[i] += src[i];
    }
    if (bk->pool_index >= 0) dp->pool_busy[bk->pool_index] = false;
    bk->buf = NULL;
}

static void finish_bucket(DataParallel *dp, int k) {
    Bucket *bk = &dp->buckets[k];
    bk->op = NULL;
    if (dp->stage >= 2) absorb(dp, bk);
}

static void remove_inflight(DataParallel *dp, int i) {
    memmove(dp->inflight + i, dp->inflight + i + 1, sizeof(int) * (size_t)(dp->num_inflight - i - 1));
    dp->num_inflight--;
}

/* Whether bucket k's reduction is complete (advancing it). */
static bool bucket_test(DataParallel *dp, int k) {
    Bucket *bk = &dp->buckets[k];
    if (!dp->expert_comm) return comm_test(bk->op);
    bool done = true;
    for (int i = 0; i < bk->num_parts; i++) {
        if (bk->parts[i] && comm_test(bk->parts[i])) bk->parts[i] = NULL;
        done = done && !bk->parts[i];
    }
    return done;
}

static void bucket_wait(DataParallel *dp, int k) {
    Bucket *bk = &dp->buckets[k];
    if (!dp->expert_comm) {
        comm_wait(bk->op);
        return;
    }
    for (int i = 0; i < bk->num_parts; i++)
        if (bk->parts[i]) comm_wait(bk->parts[i]), bk->parts[i] = NULL;
}

/* Advances every operation in flight, absorbing the finished ones. */
static void poll(DataParallel *dp) {
    for (int i = 0; i < dp->num_inflight;) {
        int k = dp->inflight[i];
        if (bucket_test(dp, k)) {
            finish_bucket(dp, k);
            remove_inflight(dp, i);
        } else {
            i++;
        }
    }
    for (int s = 0; s < NUM_SLOTS; s++)
        if (dp->slots[s].op && comm_test(dp->slots[s].op)) dp->slots[s].op = NULL;
}

static void wait_oldest(DataParallel *dp) {
    int k = dp->inflight[0];
    bucket_wait(dp, k);
    finish_bucket(dp, k);
    remove_inflight(dp, 0);
}

/* Stages 0-1: this micro-step's own gradient over [off, off + count) is the
 * accumulated gradient minus the snapshot: its squared norm, in Adam's metric
 * too, and its signed share of the probe. */
static void measure_range(DataParallel *dp, size_t off, size_t count) {
    const float *now = dp->model->grads + off, *before = dp->grad_snapshot + off;
    dp->micro_sumsq += sum_of_squared_differences(now, before, count);
    if (dp->precond.v) {
        Preconditioner p = dp->precond;
        p.v += off;
        dp->micro_precond_sumsq += preconditioned_sum_of_squares(now, before, count, &p);
    }
    if (dp->probe) {
        const float sign = dp->probe_signs[dp->micro_index];
        float *probe = dp->probe + off;
        for (size_t i = 0; i < count; i++) probe[i] += sign * (now[i] - before[i]);
    }
}

/* This micro-step's own gradient over a bucket, before it is reduced. */
static void measure_bucket(DataParallel *dp, const Bucket *bk) {
    if (!dp->measure_micro) return;
    if (dp->stage >= 2) dp->micro_sumsq += sum_of_squares(bk->buf, bk->count);
    else measure_range(dp, bk->offset, bk->count);
}

/* Stage 0 all-reduces the bucket, the others reduce-scatter it; compressed
 * with this rank's residuals of the bucket's range when a codec is set. */
static CommOp *start_reduction(DataParallel *dp, Bucket *bk) {
    float *buf = dp->stage >= 2 ? bk->buf : dp->model->grads + bk->offset;
    bool whole = dp->stage == 0;
    if (!dp->compress_grads)
        return whole ? comm_start_allreduce(dp->comm, buf, bk->count)
                     : comm_start_reduce_scatter(dp->comm, buf, bk->offset, bk->count, dp->total);
    if (!bk->scratch) bk->scratch = compressed_scratch_new();
    Compression z = {dp->opt.grad_codec, dp->opt.grad_scheme, false, dp->residual ? dp->residual + bk->offset : NULL,
                     dp->server_residual ? dp->server_residual + bk->server_offset : NULL};
    return whole ? comm_start_compressed_allreduce(dp->comm, bk->scratch, &z, buf, 0, bk->count, bk->count)
                 : comm_start_compressed_reduce_scatter(dp->comm, bk->scratch, &z, buf, bk->offset, bk->count, dp->total);
}

/* Expert parallelism (uncompressed): each part of the bucket reduced over
 * its own group, each its own operation: the expert ranges over the
 * expert-data-parallel group (the ranks holding the same experts), the
 * ranges between them over the whole data group. All-reduced at stage 0,
 * reduce-scattered above under that group's partition (plan_pieces). */
static void start_split_reduction(DataParallel *dp, Bucket *bk) {
    float *base = dp->stage >= 2 ? bk->buf : dp->model->grads + bk->offset;
    const Range bucket = range_make(bk->offset, bk->count);
    for (int i = 0; i < bk->num_parts; i++) {
        const GroupRange *part = &bk->split[i];
        float *buf = base + range_offset_in(part->range, bucket);
        bk->parts[i] = dp->stage == 0 ? comm_start_allreduce(part->group, buf, part->range.count)
                                      : comm_start_reduce_scatter(part->group, buf, part->range.offset,
                                                                  part->range.count, dp->total);
    }
}

static void launch_bucket(DataParallel *dp, int k) {
    Bucket *bk = &dp->buckets[k];
    measure_bucket(dp, bk);
    if (dp->num_inflight == MAX_INFLIGHT) wait_oldest(dp);
    if (dp->expert_comm) start_split_reduction(dp, bk);
    else bk->op = start_reduction(dp, bk);
    dp->inflight[dp->num_inflight++] = k;
}

static float *acquire_grad_buffer(DataParallel *dp, Bucket *bk) {
    if (bk->first_block == 0) {
        bk->pool_index = -1;
        return dp->emb_grad_buf;
    }
    for (;;) {
        for (int i = 0; i < GRAD_POOL; i++)
            if (!dp->pool_busy[i]) {
                dp->pool_busy[i] = true;
                bk->pool_index = i;
                return dp->grad_pool[i];
            }
        if (dp->num_inflight == 0) bs_die("internal: no free gradient bucket buffer");
        wait_oldest(dp);
    }
}

static float *access_grads(void *ctx, int block) {
    DataParallel *dp = ctx;
    dp->in_backward = true;
    size_t off, count;
    block_range(dp, block, &off, &count);
    if (dp->stage < 2) return dp->model->grads + off;
    Bucket *bk = &dp->buckets[dp->bucket_of_block[block]];
    if (!bk->buf) {
        bk->buf = acquire_grad_buffer(dp, bk);
        memset(bk->buf, 0, bk->count * sizeof(float));
    }
    return bk->buf + (off - bk->offset);
}

/* The block's gradient as this micro-step leaves it (local, not yet reduced). */
static float *block_grads(DataParallel *dp, int block) {
    size_t off, count;
    block_range(dp, block, &off, &count);
    if (dp->stage < 2) return dp->model->grads + off;
    const Bucket *bk = &dp->buckets[dp->bucket_of_block[block]];
    return bk->buf + (off - bk->offset);
}

/* Guard: checked on the micro-steps that reduce (stages 0-1: the last, where
 * the accumulated gradient is whole; stages 2-3: each). */
static void check_block(DataParallel *dp, int block) {
    size_t off, count;
    block_range(dp, block, &off, &count);
    float *g = block_grads(dp, block);
    if (dp->poison_block == block && count > 0) {
        g[0] = NAN;
        dp->poison_block = -1;
    }
    /* the first block found bad is the origin: backward finishes blocks from
     * the head down, and a bad gradient spreads to the blocks after it */
    if (dp->first_nonfinite_block < 0 && !floats_all_finite(g, count)) dp->first_nonfinite_block = block;
}

int dp_first_nonfinite_block(const DataParallel *dp) { return dp->first_nonfinite_block; }

void dp_inject_nan(DataParallel *dp, int block) { dp->poison_block = block; }

static void access_grads_done(void *ctx, int block) {
    DataParallel *dp = ctx;
    if (dp->last_micro || dp->stage >= 2) check_block(dp, block);
    if (!dp->communicate) return;
    int k = dp->bucket_of_block[block];
    if (--dp->buckets[k].pending == 0 && dp->opt.overlap) launch_bucket(dp, k);
    poll(dp);
}

/* ---- stage 3 parameter gathers ---- */

static int slot_kind(const DataParallel *dp, int block) {
    if (block == 0) return SLOT_EMB;
    if (block == dp->num_blocks - 1) return SLOT_LNF;
    return SLOT_LAYER_A;
}

/* The slot holding `block`, or a free slot for it (-1 if none is free). */
static int find_slot(DataParallel *dp, int block) {
    int kind = slot_kind(dp, block);
    int candidates[2] = {kind, kind == SLOT_LAYER_A ? SLOT_LAYER_B : kind};
    for (int i = 0; i < 2; i++)
        if (dp->slots[candidates[i]].block == block) return candidates[i];
    for (int i = 0; i < 2; i++)
        if (!dp->slots[candidates[i]].in_use) return candidates[i];
    return -1;
}

/* Copies the elements of range_a ∩ range_b from array a (holding range_a) to
 * array b (holding range_b). */
static void copy_overlap(const float *a, Range range_a, float *b, Range range_b) {
    Range both = range_intersect(range_a, range_b);
    if (!range_empty(both))
        memcpy(b + range_offset_in(both, range_b), a + range_offset_in(both, range_a), both.count * sizeof(float));
}

/* Waits for the slot's gather and, under hpZ, keeps the node's part of it. */
static void settle_slot(DataParallel *dp, ParamSlot *slot) {
    if (slot->op) {
        comm_wait(slot->op);
        slot->op = NULL;
    }
    if (!slot->fill_secondary) return;
    size_t off, count;
    block_range(dp, slot->block, &off, &count);
    copy_overlap(slot->buf, range_make(off, count), dp->secondary, dp->secondary_range);
    slot->fill_secondary = false;
}

/* Forward gathers over the whole group (int8 under qwZ) and, under hpZ, fill
 * the secondary shard; backward gathers under hpZ stay inside the node. */
static void start_gather(DataParallel *dp, int s, int block) {
    ParamSlot *slot = &dp->slots[s];
    settle_slot(dp, slot);
    size_t off, count;
    block_range(dp, block, &off, &count);
    bool in_node = dp->opt.hpz && dp->in_backward;
    Comm *group = in_node ? dp->node : dp->comm;
    if (in_node) copy_overlap(dp->secondary, dp->secondary_range, slot->buf, range_make(off, count));
    else copy_overlap(dp->shard_params, dp->shard, slot->buf, range_make(off, count));
    slot->block = block;
    slot->rounded = false;
    slot->fill_secondary = dp->opt.hpz && !in_node;
    if (dp->opt.fp8_gather && !in_node && slot_kind(dp, block) == SLOT_LAYER_A) {
        fp8_gather_layer(group, dp->model, block, slot->buf, off, count, dp->total, dp->shard_params, dp->shard);
        slot->rounded = true; /* its matrices hold FP8 values: bf16 rounding would only move them off */
        slot->op = NULL;
    } else if (dp->opt.quant_weights && !in_node) {
        if (!slot->scratch) slot->scratch = compressed_scratch_new();
        Codec int8 = {CODEC_INT8, dp->opt.quant_block, 0};
        slot->op = comm_start_compressed_allgather(group, slot->scratch, &int8, slot->buf, off, count, dp->total);
    } else {
        slot->op = comm_start_allgather(group, slot->buf, off, count, dp->total);
    }
}

static void prefetch(DataParallel *dp, int block) {
    if (block < 0 || block >= dp->num_blocks || !gpt_block_present(&dp->model->cfg, block)) return;
    int s = find_slot(dp, block);
    if (s < 0 || dp->slots[s].block == block) return;
    start_gather(dp, s, block);
}

static float *access_params(void *ctx, int block) {
    DataParallel *dp = ctx;
    size_t off, count;
    block_range(dp, block, &off, &count);
    if (dp->stage < 3) return dp->model->params + off;
    poll(dp);
    int s = find_slot(dp, block);
    if (s < 0) bs_die("internal: no free parameter slot for block %d", block);
    ParamSlot *slot = &dp->slots[s];
    if (slot->block != block) start_gather(dp, s, block);
    settle_slot(dp, slot); /* before bf16 rounding: the secondary keeps what was gathered */
    if (dp->model->bf16 && !slot->rounded) { /* gathered in fp32, used as bf16 */
        gpt_round_block_matrices(&dp->model->cfg, slot->buf, block);
        slot->rounded = true;
    }
    slot->in_use = true;
    /* forward walks blocks up, backward down (starting from the embeddings) */
    int L1 = dp->num_blocks - 1;
    if (!dp->in_backward) prefetch(dp, block + 1);
    else prefetch(dp, block == 0 ? L1 : (block >= 2 ? block - 1 : -1));
    return slot->buf;
}

static void access_params_done(void *ctx, int block) {
    DataParallel *dp = ctx;
    if (dp->stage < 3) return;
    for (int s = 0; s < NUM_SLOTS; s++)
        if (dp->slots[s].block == block && dp->slots[s].in_use) {
            /* released: gathered again when needed. Never "keep it if the gather is still in flight": whether
             * it is depends on timing, and every rank must start the same collectives in the same order */
            dp->slots[s].in_use = false;
            dp->slots[s].block = -1;
        }
}

/* ---- set-up ---- */

static size_t alloc_tracked(float **p, size_t floats, size_t *account) {
    *p = bs_calloc(floats ? floats : 1, sizeof(float));
    *account += floats * sizeof(float);
    return floats;
}

/* Residuals of compressed gradients; the hpZ node group and secondary shard. */
static void setup_compression(DataParallel *dp) {
    const DPOptions *o = &dp->opt;
    DPMemory *mem = &dp->memory;
    if ((o->quant_weights || o->hpz) && dp->stage != 3)
        bs_die("internal: quantized or node-local parameter gathers need ZeRO stage 3 (got %d)", dp->stage);
    dp->compress_grads = o->grad_codec.kind != CODEC_NONE && comm_size(dp->comm) > 1;
    if (dp->compress_grads && o->grad_scheme == COMPRESSED_RING && !codec_is_elementwise(&o->grad_codec))
        bs_die("internal: the ring cannot carry top-k or 1-bit encodings");
    if (dp->compress_grads && o->error_feedback) {
        alloc_tracked(&dp->residual, dp->total, &mem->buffer_bytes);
        if (dp->stage == 0 && o->grad_scheme == COMPRESSED_EXCHANGE) {
            for (int k = 0; k < dp->num_buckets; k++) {
                Bucket *bk = &dp->buckets[k];
                bk->server_offset = dp->server_floats;
                dp->server_floats += compressed_server_floats(dp->comm, 0, bk->count, bk->count);
            }
            alloc_tracked(&dp->server_residual, dp->server_floats, &mem->buffer_bytes);
        }
    }
    if (o->hpz) {
        dp->node = comm_node_group(dp->comm);
        comm_partition(dp->node, dp->total, comm_rank(dp->node), &dp->secondary_range.offset, &dp->secondary_range.count);
        alloc_tracked(&dp->secondary, dp->secondary_range.count, &mem->buffer_bytes);
    }
}

static void add_piece(DataParallel *dp, Range piece) {
    dp->pieces[dp->num_pieces] = piece;
    dp->piece_packed[dp->num_pieces++] = dp->update_floats;
    dp->update_floats += piece.count;
}

/* What this rank updates: everything at stage 0, the shard above; with the
 * experts reduced apart (layout_split), its part of each range under that
 * range's group's partition, so an expert range's owners are the ranks
 * holding the same experts and a dense range's the whole data group. */
static void plan_pieces(DataParallel *dp) {
    free(dp->pieces);
    free(dp->piece_packed);
    const int cap = dp->num_layout_split > 0 ? dp->num_layout_split : 1;
    dp->pieces = bs_malloc(sizeof(Range) * (size_t)cap);
    dp->piece_packed = bs_malloc(sizeof(size_t) * (size_t)cap);
    dp->num_pieces = 0;
    dp->update_floats = 0;
    if (dp->stage == 0 || dp->num_layout_split == 0) {
        add_piece(dp, dp->stage == 0 ? range_make(0, dp->total) : dp->shard);
        return;
    }
    for (int i = 0; i < dp->num_layout_split; i++) {
        const GroupRange *part = &dp->layout_split[i];
        Range own;
        comm_partition(part->group, dp->total, comm_rank(part->group), &own.offset, &own.count);
        const Range piece = range_intersect(part->range, own);
        if (!range_empty(piece)) add_piece(dp, piece);
    }
}

DataParallel *dp_create(Comm *comm, GPT *model, const DPOptions *opt) {
    DataParallel *dp = bs_calloc(1, sizeof *dp);
    dp->comm = comm;
    dp->model = model;
    dp->opt = *opt;
    dp->stage = opt->zero_stage;
    if (dp->stage < 0 || dp->stage > 3) bs_die_about("zero_stage", "the ZeRO stage must be 0, 1, 2 or 3 (got %d)", dp->stage);
    if (dp->opt.bucket_floats == 0) dp->opt.bucket_floats = 1;
    dp->num_blocks = gpt_num_blocks(&model->cfg);
    dp->total = gpt_num_params(&model->cfg);
    comm_partition(comm, dp->total, comm_rank(comm), &dp->shard.offset, &dp->shard.count);
    plan_pieces(dp);
    DPMemory *mem = &dp->memory;
    int alloc = (dp->stage < 3 ? GPT_ALLOC_PARAMS : 0) | (dp->stage < 2 ? GPT_ALLOC_GRADS : 0);
    gpt_create_with(model, &model->cfg, alloc);
    if (model->params) mem->param_bytes += dp->total * sizeof(float);
    if (model->grads) mem->grad_bytes += dp->total * sizeof(float);
    plan_buckets(dp);
    if (dp->stage >= 2) {
        alloc_tracked(&dp->shard_grads, dp->update_floats, &mem->grad_bytes);
        if (dp->bucket_of_block[0] >= 0) /* the first stage: the embeddings bucket */
            alloc_tracked(&dp->emb_grad_buf, dp->buckets[dp->bucket_of_block[0]].count, &mem->buffer_bytes);
        for (int i = 0; i < GRAD_POOL; i++) alloc_tracked(&dp->grad_pool[i], dp->pool_floats, &mem->buffer_bytes);
    }
    for (int s = 0; s < NUM_SLOTS; s++) dp->slots[s].block = -1;
    dp->poison_block = -1;
    dp->first_nonfinite_block = -1;
    if (dp->stage == 3) {
        alloc_tracked(&dp->shard_params, dp->shard.count, &mem->param_bytes);
        size_t off, count, layer = 0;
        block_range(dp, 0, &off, &count);
        dp->slots[SLOT_EMB].capacity = alloc_tracked(&dp->slots[SLOT_EMB].buf, count, &mem->buffer_bytes);
        block_range(dp, dp->num_blocks - 1, &off, &count);
        dp->slots[SLOT_LNF].capacity = alloc_tracked(&dp->slots[SLOT_LNF].buf, count, &mem->buffer_bytes);
        for (int b = 1; b < dp->num_blocks - 1 && layer == 0; b++) block_range(dp, b, &off, &layer);
        for (int s = SLOT_LAYER_A; s <= SLOT_LAYER_B; s++)
            dp->slots[s].capacity = alloc_tracked(&dp->slots[s].buf, layer, &mem->buffer_bytes);
    }
    setup_compression(dp);
    dp->train_access = (BlockAccess){access_params, access_params_done, access_grads, access_grads_done, dp};
    dp->eval_access = (BlockAccess){access_params, access_params_done, NULL, NULL, dp};
    return dp;
}

/* The window cut into its expert ranges (reduced over the expert group) and
 * the ranges between them (over the data group), in order; returns how many
 * (at most 2 x expert ranges + 1). */
static int split_window(const DataParallel *dp, Range window, GroupRange *out) {
    int n = 0;
    size_t at = window.offset;
    const size_t end = range_end(window);
    for (int i = 0; i < dp->num_expert_ranges && at < end; i++) {
        const Range part = range_intersect(dp->expert_ranges[i], range_make(at, end - at));
        if (range_empty(part)) continue;
        if (part.offset > at) out[n++] = (GroupRange){range_make(at, part.offset - at), dp->comm};
        out[n++] = (GroupRange){part, dp->expert_comm};
        at = range_end(part);
    }
    if (at < end) out[n++] = (GroupRange){range_make(at, end - at), dp->comm};
    return n;
}

static GroupRange *split_alloc(const DataParallel *dp, Range window, int *n) {
    GroupRange *parts = bs_malloc(sizeof(GroupRange) * (size_t)(2 * dp->num_expert_ranges + 1));
    *n = split_window(dp, window, parts);
    return parts;
}

void dp_set_expert_group(DataParallel *dp, Comm *edp) {
    if (dp->stage == 3 || dp->compress_grads)
        bs_die_about("ep zero_stage grad_codec", "expert parallelism reduces gradients at ZeRO stage 0, 1 or 2 without gradient compression only (yet)");
    const GPTConfig *cfg = &dp->model->cfg;
    int cap = gpt_max_segments(cfg);
    ParamSegment *segs = bs_malloc(sizeof(ParamSegment) * (size_t)cap);
    int n = gpt_param_segments(cfg, segs, cap);
    dp->expert_ranges = bs_malloc(sizeof(Range) * (size_t)(n > 0 ? n : 1));
    for (int i = 0; i < n; i++)
        if (segs[i].kind == TK_EXPERTS && segs[i].count > 0)
            dp->expert_ranges[dp->num_expert_ranges++] = range_make(segs[i].offset, segs[i].count);
    free(segs);
    dp->expert_comm = edp;
    for (int k = 0; k < dp->num_buckets; k++) {
        Bucket *bk = &dp->buckets[k];
        bk->split = split_alloc(dp, range_make(bk->offset, bk->count), &bk->num_parts);
        bk->parts = bs_calloc((size_t)(bk->num_parts > 0 ? bk->num_parts : 1), sizeof(CommOp *));
    }
    dp->layout_split = split_alloc(dp, range_make(0, dp->total), &dp->num_layout_split);
    plan_pieces(dp);
    if (dp->stage == 2) { /* the shard gradient holds the new pieces */
        dp->memory.grad_bytes -= dp->shard.count * sizeof(float);
        free(dp->shard_grads);
        alloc_tracked(&dp->shard_grads, dp->update_floats, &dp->memory.grad_bytes);
    }
}

void dp_free(DataParallel *dp) {
    if (!dp) return;
    free(dp->expert_ranges);
    free(dp->layout_split);
    free(dp->pieces);
    free(dp->piece_packed);
    for (int k = 0; k < dp->num_buckets; k++) free(dp->buckets[k].parts), free(dp->buckets[k].split);
    for (int k = 0; k < dp->num_buckets; k++) compressed_scratch_free(dp->buckets[k].scratch);
    free(dp->buckets);
    free(dp->bucket_of_block);
    free(dp->shard_params);
    free(dp->shard_grads);
    free(dp->emb_grad_buf);
    free(dp->grad_snapshot);
    for (int i = 0; i < GRAD_POOL; i++) free(dp->grad_pool[i]);
    for (int s = 0; s < NUM_SLOTS; s++) {
        free(dp->slots[s].buf);
        compressed_scratch_free(dp->slots[s].scratch);
    }
    free(dp->residual);
    free(dp->server_residual);
    free(dp->secondary);
    gpt_free(dp->model);
    free(dp);
}

bool dp_experts_sharded_apart(const DataParallel *dp) { return dp->layout_split && dp->stage >= 1; }

/* The one piece of a rank that updates a contiguous range. */
static Range single_piece(const DataParallel *dp) {
    if (dp_experts_sharded_apart(dp))
        bs_die_about("ep zero_stage", "this feature needs one contiguous range of parameters per rank, but expert "
                     "parallelism at ZeRO stage %d updates the dense and the expert tensors as %d pieces (use stage 0)",
                     dp->stage, dp->num_pieces);
    return dp->pieces[0];
}

void dp_update_range(const DataParallel *dp, size_t *offset, size_t *count) {
    const Range r = single_piece(dp);
    *offset = r.offset;
    *count = r.count;
}

float *dp_update_params(DataParallel *dp) {
    const Range r = single_piece(dp);
    return dp->stage == 3 ? dp->shard_params : dp->model->params + r.offset;
}

float *dp_update_grads(DataParallel *dp) {
    const Range r = single_piece(dp);
    return dp->stage >= 2 ? dp->shard_grads : dp->model->grads + r.offset;
}

int dp_num_pieces(const DataParallel *dp) { return dp->num_pieces; }

size_t dp_update_floats(const DataParallel *dp) { return dp->update_floats; }

DPPiece dp_piece(DataParallel *dp, int k) {
    const Range r = dp->pieces[k];
    const size_t at = dp->piece_packed[k];
    DPPiece p = {r.offset, r.count, at, NULL, NULL};
    p.params = dp->stage == 3 ? dp->shard_params + at : dp->model->params + r.offset;
    p.grads = dp->stage >= 2 ? dp->shard_grads + at : dp->model->grads + r.offset;
    return p;
}

void dp_shard_range(const DataParallel *dp, size_t *offset, size_t *count) {
    *offset = dp->shard.offset;
    *count = dp->shard.count;
}

float *dp_params_at(DataParallel *dp, size_t offset, size_t count) {
    if (dp->stage < 3) return dp->model->params + offset;
    Range wanted = range_make(offset, count);
    if (range_contains(dp->shard, wanted)) return dp->shard_params + range_offset_in(wanted, dp->shard);
    return NULL;
}

int dp_num_buckets(const DataParallel *dp) { return dp->num_buckets; }

void dp_bucket(const DataParallel *dp, int k, size_t *offset, size_t *count, int *first_block, int *last_block) {
    const Bucket *bk = &dp->buckets[k];
    *offset = bk->offset;
    *count = bk->count;
    *first_block = bk->first_block;
    *last_block = bk->last_block;
}

int dp_bucket_of_block(const DataParallel *dp, int block) { return dp->bucket_of_block[block]; }

bool dp_overlaps(const DataParallel *dp) { return dp->opt.overlap; }

void dp_begin_step(DataParallel *dp) {
    if (dp->stage < 2) gpt_zero_grads(dp->model);
    else memset(dp->shard_grads, 0, dp->update_floats * sizeof(float));
    dp->micro_sumsq = 0;
    dp->micro_precond_sumsq = 0;
    dp->micro_index = 0;
    dp->first_nonfinite_block = -1;
    if (dp->node) comm_reset_stats(dp->node);
    if (dp->grad_snapshot) memset(dp->grad_snapshot, 0, dp->total * sizeof(float));
}

void dp_measure_micro_norms(DataParallel *dp) {
    dp->measure_micro = true;
    if (dp->stage < 2 && !dp->grad_snapshot)
        alloc_tracked(&dp->grad_snapshot, dp->total, &dp->memory.buffer_bytes);
}

double dp_micro_sum_squares(const DataParallel *dp) { return dp->micro_sumsq; }

void dp_measure_micro_preconditioned(DataParallel *dp, const Preconditioner *p) {
    if (p && (dp->stage != 0 || !dp->measure_micro)) bs_die("internal: preconditioned micro norms need ZeRO 0 and micro norms");
    dp->precond = p ? *p : (Preconditioner){0};
}

double dp_micro_precond_sum_squares(const DataParallel *dp) { return dp->micro_precond_sumsq; }

void dp_set_probe(DataParallel *dp, float *probe, const float *signs) {
    if (probe && (dp->stage != 0 || !dp->measure_micro)) bs_die("internal: the curvature probe needs ZeRO 0 and micro norms");
    dp->probe = probe;
    dp->probe_signs = signs;
}

const BlockAccess *dp_micro_access(DataParallel *dp, bool last_micro) {
    dp->last_micro = last_micro;
    dp->in_backward = false;
    dp->communicate = comm_size(dp->comm) > 1 && (last_micro || dp->stage >= 2) && !dp->local;
    for (int k = 0; k < dp->num_buckets; k++)
        dp->buckets[k].pending = dp->buckets[k].last_block - dp->buckets[k].first_block + 1;
    if (dp->stage >= 2 && comm_size(dp->comm) == 1) dp->communicate = true; /* the shard is everything */
    return &dp->train_access;
}

const BlockAccess *dp_eval_access(DataParallel *dp) {
    dp->in_backward = false;
    return &dp->eval_access;
}

/* Stage 3: every gathered block settled and given back (the next pass gathers again). */
static void release_param_slots(DataParallel *dp) {
    for (int s = 0; s < NUM_SLOTS; s++) {
        ParamSlot *slot = &dp->slots[s];
        settle_slot(dp, slot);
        slot->block = -1;
        slot->in_use = slot->rounded = false;
    }
}

void dp_end_micro(DataParallel *dp) {
    if (dp->communicate && !dp->opt.overlap)
        for (int k = 0; k < dp->num_buckets; k++) launch_bucket(dp, k);
    if (dp->measure_micro && dp->stage < 2 && !dp->communicate) { /* no bucket was measured */
        measure_range(dp, 0, dp->total);
        memcpy(dp->grad_snapshot, dp->model->grads, dp->total * sizeof(float));
    }
    dp->micro_index++;
    while (dp->num_inflight > 0) wait_oldest(dp);
    release_param_slots(dp);
}

const BlockAccess *dp_input_access(DataParallel *dp) {
    dp->in_backward = true; /* gathers walk down, inside the node under hpZ */
    dp->communicate = false;
    return &dp->train_access;
}

void dp_end_input(DataParallel *dp) { release_param_slots(dp); }

double dp_grad_sum_squares(DataParallel *dp) {
    double s = 0;
    for (int k = 0; k < dp->num_pieces; k++) {
        const DPPiece p = dp_piece(dp, k);
        s += sum_of_squares(p.grads, p.count);
    }
    if (dp->stage >= 1) comm_allreduce_double(dp->comm, &s, 1);
    return s;
}

/* Stages 1-2: every rank's pieces of buf (the whole layout) sent to all,
 * each range over the group that shards it. */
static void allgather_layout(DataParallel *dp, float *buf) {
    if (!dp->layout_split) {
        comm_allgather(dp->comm, buf, 0, dp->total, dp->total);
        return;
    }
    for (int i = 0; i < dp->num_layout_split; i++) {
        const GroupRange *part = &dp->layout_split[i];
        comm_allgather(part->group, buf + part->range.offset, part->range.offset, part->range.count, dp->total);
    }
}

void dp_after_update(DataParallel *dp) {
    if (dp->stage == 1 || dp->stage == 2) allgather_layout(dp, dp->model->params);
}

void dp_gather_state(DataParallel *dp, const float *packed, size_t offset, size_t count, float *out) {
    if (dp->stage != 1 && dp->stage != 2) bs_die("internal: dp_gather_state is for ZeRO stages 1 and 2");
    float *whole = bs_calloc(dp->total ? dp->total : 1, sizeof(float));
    for (int k = 0; k < dp->num_pieces; k++)
        memcpy(whole + dp->pieces[k].offset, packed + dp->piece_packed[k], dp->pieces[k].count * sizeof(float));
    allgather_layout(dp, whole);
    memcpy(out, whole + offset, count * sizeof(float));
    free(whole);
}

void dp_gather_params(DataParallel *dp, float *out) {
    if (dp->stage < 3) {
        memcpy(out, dp->model->params, dp->total * sizeof(float));
        return;
    }
    memcpy(out + dp->shard.offset, dp->shard_params, dp->shard.count * sizeof(float));
    comm_allgather(dp->comm, out, 0, dp->total, dp->total);
}

DPMemory dp_memory(const DataParallel *dp) {
    DPMemory m = dp->memory; /* plus the compression buffers, which grow to the largest message */
    for (int k = 0; k < dp->num_buckets; k++)
        if (dp->buckets[k].scratch) m.buffer_bytes += compressed_scratch_bytes(dp->buckets[k].scratch);
    for (int s = 0; s < NUM_SLOTS; s++)
        if (dp->slots[s].scratch) m.buffer_bytes += compressed_scratch_bytes(dp->slots[s].scratch);
    return m;
}

void dp_residuals(DataParallel *dp, float **worker, size_t *worker_count, float **server, size_t *server_count) {
    *worker = dp->residual;
    *worker_count = dp->residual ? dp->total : 0;
    *server = dp->server_residual;
    *server_count = dp->server_residual ? dp->server_floats : 0;
}

void dp_reset_residuals(DataParallel *dp) {
    if (dp->residual) memset(dp->residual, 0, dp->total * sizeof(float));
    if (dp->server_residual) memset(dp->server_residual, 0, dp->server_floats * sizeof(float));
}

void dp_set_local_gradients(DataParallel *dp, bool local) {
    if (local && dp->stage >= 2) bs_die("internal: local gradients need ZeRO stage 0 or 1");
    dp->local = local;
}

CommStats dp_node_stats(DataParallel *dp) {
    CommStats none = {0};
    return dp->node ? comm_stats(dp->node) : none;
}

/* engine.c: the parallel engine (see engine.h). */
#include "parallel/engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/reason.h"
#include "core/io.h"
#include "model/frozen_load.h"
#include "model/model_file.h"
#include "model/moe_upcycle.h"
#include "model/safetensors_file.h"
#include "parallel/engine_device.h"
#include "parallel/model_parallel.h"
#include "parallel/moe_hooks.h"

/* Context parallelism: the caller's loader fills whole sequences, this rank keeps its chunks. */
typedef struct {
    PipeLoad whole;
    void *ctx;
    int B, T, cp_size, cp_rank;
    CpSplit split;
    int32_t *inputs, *targets; /* (B, T) */
} ContextLoad;

static void load_local(void *ctx, int micro, int32_t *inputs, int32_t *targets) {
    const ContextLoad *cl = ctx;
    cl->whole(cl->ctx, micro, cl->inputs, cl->targets);
    context_take_rows(cl->cp_size, cl->cp_rank, cl->split, cl->inputs, inputs, cl->B, cl->T);
    context_take_rows(cl->cp_size, cl->cp_rank, cl->split, cl->targets, targets, cl->B, cl->T);
}

/* What the optimizer's per-tensor norm callback needs of one chunk. */
typedef struct {
    struct Engine *engine;
    int chunk;
} NormContext;

struct Engine {
    EngineConfig cfg;
    Grid *grid;
    int num_chunks, virtual_stages;
    EngineChunk *chunks;
    Comm **chunk_comm;   /* the data-parallel group of each chunk (chunk 0: the grid's) */
    NormContext *norm_ctx;
    int *vs_first, *vs_layers; /* per virtual stage */
    Pipeline *pipe;
    TiedGrads tied;
    long optimizer_step;
    ContextLoad context_load; /* cp > 1: whole sequences in, this rank's chunks out */
    MoeEpContext moe_ep;      /* ep > 1: the MoE layers over the EP group */
    uint64_t base_hash;       /* LoRA: lora_base_hash of the frozen base */
    EngineDevice *device;     /* --device cuda|sim: the step there (NULL: on the CPU) */
};

const Grid *engine_grid(const Engine *e) { return e->grid; }
int engine_num_chunks(const Engine *e) { return e->num_chunks; }
/* On a device the host's copy of the state is refreshed before anyone reads it (engine_device.h). */
static void host_current(Engine *e) {
    if (e->device) engine_device_sync_host(e->device, &e->chunks[0]);
}

EngineChunk *engine_chunk(Engine *e, int c) {
    host_current(e);
    return &e->chunks[c];
}
const GPTConfig *engine_chunk_config(const Engine *e, int c) { return &e->chunks[c].model.cfg; }
int engine_virtual_stages(const Engine *e) { return e->virtual_stages; }
long engine_optimizer_step(const Engine *e) { return e->optimizer_step; }
void engine_set_optimizer_step(Engine *e, long step) { e->optimizer_step = step; }
uint64_t engine_base_hash(const Engine *e) { return e->base_hash; }

float *engine_reduced_gradients(Engine *e, int c) {
    host_current(e);
    return dp_update_grads(e->chunks[c].dp);
}

size_t engine_optimizer_state_bytes(const Engine *e, int arrays) {
    size_t bytes = 0;
    for (int c = 0; c < e->num_chunks; c++) bytes += e->chunks[c].update_count * sizeof(float) * (size_t)arrays;
    return bytes;
}

void engine_stage_layers(const Engine *e, int vs, int *first, int *count) {
    *first = e->vs_first[vs];
    *count = e->vs_layers[vs];
}

/* Virtual stage c p + s holds 1/v of pipeline stage s's layers, in
 * virtual-stage order along the model. */
static void split_virtual_stages(Engine *e) {
    const Grid *g = e->grid;
    const int p = g->pp, v = e->num_chunks;
    e->virtual_stages = p * v;
    e->vs_first = bs_calloc((size_t)(p * v), sizeof(int));
    e->vs_layers = bs_calloc((size_t)(p * v), sizeof(int));
    for (int s = 0; s < p; s++)
        if (g->stage_layers[s] % v != 0)
            bs_die_about("virtual_stages", "%d virtual stages do not divide the %d layers of pipeline stage %d (each "
                         "stage's layers are split into %d equal chunks)", v, g->stage_layers[s], s, v);
    for (int vs = 0, first = 0; vs < p * v; vs++) {
        e->vs_first[vs] = first;
        e->vs_layers[vs] = g->stage_layers[vs % p] / v;
        first += e->vs_layers[vs];
    }
}

/* The shard config of (tp_index, virtual stage vs, ep_index). */
static GPTConfig chunk_config(const Engine *e, const GPTConfig *whole, int tp_index, int vs, int ep_index) {
    GPTConfig c = gpt_logical_config(whole);
    char why[256];
    if (!gpt_set_shard(&c, e->grid->tp, tp_index, e->virtual_stages, vs, e->vs_first[vs], e->vs_layers[vs], why,
                       sizeof why))
        bs_die("%s", why);
    if (e->grid->ep > 1) c.ep_size = e->grid->ep, c.ep_rank = ep_index;
    return c;
}

/* The whole model from the --init-from file: as it is, or (a dense file, an
 * MoE model) upcycled, the router seeded (model/moe_upcycle.h). */
static void read_init_file(const Engine *e, const GPTConfig *whole, GPT *file) {
    GPTConfig stated = {.num_heads = whole->num_heads};
    model_file_read_config(e->cfg.init_from, &stated);
    if (!gpt_is_moe(whole) || gpt_is_moe(&stated)) {
        model_file_read_params(e->cfg.init_from, file);
        return;
    }
    GPT dense;
    gpt_create_with(&dense, &stated, GPT_ALLOC_PARAMS);
    model_file_read_params(e->cfg.init_from, &dense);
    gpt_init_weights(file, e->cfg.seed);
    char why[256];
    if (!moe_upcycle(&dense, file, e->cfg.seed, e->cfg.upcycle_noise, why, sizeof why))
        bs_die_about("init_from", "upcycling %s: %s", e->cfg.init_from, why);
    gpt_free(&dense);
}

/* Parameters from the model file, the seeded initialisation, or (ZeRO-3)
 * the seeded values of this rank's shard only. An MoE model's selection bias
 * (its stage's layers) comes with the file's parameters. */
static void init_chunk(Engine *e, EngineChunk *ch, const GPTConfig *whole) {
    const GPTConfig *mc = &ch->model.cfg;
    size_t shard_off, shard_cnt;
    dp_shard_range(ch->dp, &shard_off, &shard_cnt);
    if (e->cfg.init_from) {
        GPT file;
        gpt_create_with(&file, whole, GPT_ALLOC_PARAMS);
        read_init_file(e, whole, &file);
        float *dst = dp_params_at(ch->dp, 0, ch->model.num_params);
        if (dst) mp_copy_from_logical(mc, file.params, dst, 0, ch->model.num_params);
        else mp_copy_from_logical(mc, file.params, dp_update_params(ch->dp), shard_off, shard_cnt);
        if (file.moe_bias)
            memcpy(ch->model.moe_bias, file.moe_bias + (size_t)gpt_first_layer(mc) * whole->experts,
                   (size_t)gpt_stage_layers(mc) * whole->experts * sizeof(float));
        gpt_free(&file);
    } else if (ch->model.params) {
        gpt_init_weights(&ch->model, e->cfg.seed);
    } else {
        gpt_init_range(mc, e->cfg.seed, dp_update_params(ch->dp), shard_off, shard_cnt);
    }
}

/* LoRA: the frozen base from the model file or the seeded initialisation
 * (the same values the whole model would start from), the adapters seeded
 * (A Kaiming-uniform, B zero) or read from --lora-init's file. */
static void init_lora_chunk(Engine *e, EngineChunk *ch, const GPTConfig *whole) {
    gpt_load_frozen_base(&ch->model, e->cfg.init_from, e->cfg.seed); /* this shard's, tensor by tensor */
    const GPTConfig base = gpt_part_config(whole, GPT_PART_BASE); /* the base's identity, alike in every layout */
    e->base_hash = e->cfg.init_from ? model_file_hash(e->cfg.init_from) : model_seeded_hash(&base, e->cfg.seed);
    gpt_init_weights(&ch->model, e->cfg.seed);
    if (e->cfg.lora_init) {
        GPTConfig adapters = gpt_part_config(whole, GPT_PART_ADAPTERS);
        float *file = bs_calloc(gpt_num_params(&adapters), sizeof(float));
        char path[4200];
        snprintf(path, sizeof path, bs_is_dir(e->cfg.lora_init) ? "%s/adapter_model.safetensors" : "%s",
                 e->cfg.lora_init); /* a peft directory, or its file */
        safetensors_read_adapters(path, &adapters, file);
        mp_copy_from_logical(&ch->model.cfg, file, ch->model.params, 0, ch->model.num_params);
        free(file);
    }
}

/* A setting a feature does not compose with: its subject keys (core/reason.h) and its words. */
typedef struct {
    const char *subjects, *what;
} Conflict;

static BS_NORETURN void die_conflict(const char *feature_subject, const char *feature, Conflict no) {
    char subjects[128];
    snprintf(subjects, sizeof subjects, "%s %s", feature_subject, no.subjects);
    bs_die_about(subjects, "%s does not work with %s", feature, no.what);
}

/* What LoRA does not compose with yet: one line each, before any work. */
static void check_lora(const Engine *e, const GPTConfig *whole) {
    const EngineConfig *c = &e->cfg;
    const Conflict no =
        c->data_parallel.zero_stage == 3
            ? (Conflict){"zero_stage", "ZeRO stage 3 (the frozen base is kept whole on every rank; use stage 1 or 2)"}
        : e->grid->pp > 1 ? (Conflict){"pp", "pipeline stages (the frozen tied embeddings are not shared between stages yet)"}
        : c->fp8 ? (Conflict){"precision", "fp8 precision"}
        : c->bf16 ? (Conflict){"precision", "bf16 precision (adapters train in fp32 over an fp32 base)"}
        : c->outlier_scale != 0 ? (Conflict){"outlier_scale", "an injected activation outlier"}
        : c->lora_dropout > 0 && e->grid->cp > 1
            ? (Conflict){"lora_dropout cp", "adapter dropout under context parallelism (the masks are keyed by whole sequences)"}
        : whole->base_weights == BASE_WEIGHTS_INT8 && e->grid->tp > 1
            ? (Conflict){"base_weights tp", "an int8 base under tensor parallelism (a row-parallel shard would scale its part of each row alone)"}
        : whole->base_weights == BASE_WEIGHTS_NF4 && e->grid->tp > 1
            ? (Conflict){"base_weights tp", "an nf4 base under tensor parallelism (a shard's blocks and their double quantisation differ from the whole matrix's)"}
            : (Conflict){NULL, NULL};
    if (no.what) {
        char feature[64];
        snprintf(feature, sizeof feature, "LoRA of rank %d", whole->lora_rank);
        die_conflict("lora_rank", feature, no);
    }
}

/* --debug-outlier-scale F (tests): LayerNorm 1's gain of channel 0 times F in each
 * layer, an activation outlier in every qkv input, alike in every precision. */
static void inject_outlier(Engine *e, EngineChunk *ch) {
    if (e->cfg.outlier_scale == 0) return;
    const GPTConfig *mc = &ch->model.cfg;
    float *params = dp_params_at(ch->dp, 0, ch->model.num_params);
    if (!params)
        bs_die_about("outlier_scale zero_stage", "an injected activation outlier needs each rank's parameters whole (not ZeRO stage 3)");
    for (int i = 0; i < gpt_stage_layers(mc); i++) {
        size_t offset, count;
        gpt_block_range(mc, gpt_first_layer(mc) + i + 1, &offset, &count);
        gpt_layer_tensors(mc, params + offset, gpt_first_layer(mc) + i).ln1w[0] *= (float)e->cfg.outlier_scale;
    }
}

/* What expert parallelism does not compose with yet: one line each, before any work. */
static void check_expert_parallel(Engine *e, const GPTConfig *whole) {
    const EngineConfig *c = &e->cfg;
    const Grid *g = e->grid;
    char why[256];
    if (!gpt_is_moe(whole))
        bs_die_about("ep experts", "expert parallelism of degree %d needs a Mixture-of-Experts model (more than 1 expert)", g->ep);
    if (!moe_ep_check(whole->experts, g->ep, g->dp, why, sizeof why)) bs_die("%s", why);
    const Conflict no =
        c->data_parallel.zero_stage == 3 ? (Conflict){"zero_stage", "ZeRO stage 3 yet (use stage 0, 1 or 2)"}
        : c->virtual_stages > 1 ? (Conflict){"virtual_stages", "virtual pipeline stages yet"}
        : c->data_parallel.grad_codec.kind != CODEC_NONE ? (Conflict){"grad_codec", "gradient compression yet"}
        : c->optimizer.kind == OPTIM_LAMB || c->optimizer.kind == OPTIM_LARS
            ? (Conflict){"optimizer", "the lamb or lars optimizer yet (their per-tensor norms would see each rank's experts only)"}
        : c->optimizer.kind == OPTIM_ONEBIT_ADAM ? (Conflict){"optimizer", "the onebit-adam optimizer yet"}
                                                 : (Conflict){NULL, NULL};
    if (no.what) {
        char feature[64];
        snprintf(feature, sizeof feature, "expert parallelism of degree %d", g->ep);
        die_conflict("ep", feature, no);
    }
}

/* The optimizer sees each tensor's trained elements (not wte's padded rows). */
static void setup_optimizer(Engine *e, EngineChunk *ch) {
    const GPTConfig *mc = &ch->model.cfg;
    int cap = gpt_max_segments(mc);
    ParamSegment *segs = bs_malloc(sizeof(ParamSegment) * (size_t)cap);
    int n = gpt_param_segments(mc, segs, cap);
    OptimTensor *tensors = bs_malloc(sizeof(OptimTensor) * (size_t)n);
    ch->tensor_primary = bs_malloc(sizeof(bool) * (size_t)n);
    for (int i = 0; i < n; i++) {
        tensors[i] = (OptimTensor){segs[i].offset, gpt_tensor_trained(mc, segs[i].kind), gpt_tensor_decays(segs[i].kind)};
        ch->tensor_primary[i] = gpt_tensor_primary(mc, segs[i].kind);
    }
    optimizer_init(&ch->opt, &e->cfg.optimizer, tensors, n);
    free(tensors);
    free(segs);
    ch->update_offset = dp_num_pieces(ch->dp) > 0 ? dp_piece(ch->dp, 0).offset : 0;
    ch->update_count = dp_update_floats(ch->dp);
    for (int k = 0; k < optimizer_state_arrays(e->cfg.optimizer.kind); k++)
        ch->state[k] = bs_calloc(ch->update_count ? ch->update_count : 1, sizeof(float));
    ch->num_pieces = dp_num_pieces(ch->dp);
    ch->pieces = bs_calloc((size_t)(ch->num_pieces > 0 ? ch->num_pieces : 1), sizeof(OptimizerShard));
    for (int k = 0; k < ch->num_pieces; k++) { /* the buffers stay where they are: set once */
        const DPPiece p = dp_piece(ch->dp, k);
        OptimizerShard *o = &ch->pieces[k];
        *o = (OptimizerShard){p.offset, p.count, p.params, p.grads, {NULL, NULL}};
        for (int a = 0; a < OPTIMIZER_MAX_STATE; a++) o->state[a] = ch->state[a] ? ch->state[a] + p.packed : NULL;
    }
}

static void setup_chunk(Engine *e, int c, const GPTConfig *whole) {
    const Grid *g = e->grid;
    EngineChunk *ch = &e->chunks[c];
    ch->virtual_stage = c * g->pp + g->pp_index;
    ch->model.cfg = chunk_config(e, whole, g->tp_index, ch->virtual_stage, g->ep_index);
    if (whole->lora_rank > 0) ch->model.cfg.part = GPT_PART_ADAPTERS; /* only the adapters train */
    e->chunk_comm[c] = c == 0 ? g->dp_group : comm_split(g->dp_group, 0, g->dp_index, "data-parallel chunk");
    ch->dp = dp_create(e->chunk_comm[c], &ch->model, &e->cfg.data_parallel);
    ch->model.tp = g->tp_group;
    ch->model.moe_dp = e->chunk_comm[c]; /* MoE: the losses' statistics over the data-parallel micro-step */
    if (g->ep > 1) { /* the experts' all-to-all over the EP group, their gradients over the expert-data group */
        if (c == 0) moe_hooks_init(&e->moe_ep, &ch->model.cfg, g->ep_group, g->tp_group); /* alike for every chunk */
        ch->model.moe_ep = &e->moe_ep.hooks;
        dp_set_expert_group(ch->dp, g->edp_group);
    }
    ch->model.doc_separator = e->cfg.doc_mask ? e->cfg.doc_separator : -1;
    if (g->cp > 1) {
        ch->model.cfg.cp_size = g->cp;
        ch->model.context = context_attention_create(g->cp_group, e->cfg.cp_algo, e->cfg.cp_split, e->cfg.micro_batch,
                                                     e->cfg.seq_len / g->cp, whole->channels / g->tp,
                                                     whole->num_heads / g->tp);
    }
    if (whole->lora_rank > 0) {
        ch->model.lora_scale = e->cfg.lora_alpha / (float)whole->lora_rank;
        ch->model.lora_dropout = e->cfg.lora_dropout;
        ch->model.lora_seed = e->cfg.seed;
        init_lora_chunk(e, ch, whole);
    } else {
        init_chunk(e, ch, whole);
    }
    inject_outlier(e, ch);
    setup_optimizer(e, ch);
    if (e->cfg.measure_micro_norms) dp_measure_micro_norms(ch->dp);
    if (e->cfg.bf16) gpt_enable_bf16(&ch->model, e->cfg.bf16_path);
    if (e->cfg.fp8) gpt_enable_fp8(&ch->model, e->cfg.fp8);
}

/* The chunks holding the tied weights: the embeddings (virtual stage 0) and the head (the last one). */
static EngineChunk *embedding_chunk(Engine *e) { return e->grid->pp_index == 0 ? &e->chunks[0] : NULL; }
static EngineChunk *head_chunk(Engine *e) {
    return e->grid->pp_index == e->grid->pp - 1 ? &e->chunks[e->num_chunks - 1] : NULL;
}
static EngineChunk *tied_chunk(Engine *e) {
    EngineChunk *ch = embedding_chunk(e);
    return ch ? ch : head_chunk(e) ? head_chunk(e) : &e->chunks[0];
}

void engine_share_output_weights(Engine *e) {
    EngineChunk *ch = tied_chunk(e);
    mp_share_output_weights(e->grid, &ch->model, ch->dp);
    for (int c = 0; c < e->num_chunks; c++) gpt_refresh_bf16(&e->chunks[c].model);
    if (e->device) engine_device_upload(e->device, &e->chunks[0]); /* the host's state replaced the device's (resume) */
}

Engine *engine_create(Comm *world, const GPTConfig *whole, const EngineConfig *cfg) {
    Engine *e = bs_calloc(1, sizeof *e);
    e->cfg = *cfg;
    GridShape shape = {cfg->tp, cfg->cp > 1 ? cfg->cp : 1, cfg->pp, cfg->dp, cfg->ep};
    e->grid = grid_create_split(world, shape, cfg->stage_layers, whole->num_layers, whole->num_heads);
    const Grid *g = e->grid;
    if (g->ep > 1) check_expert_parallel(e, whole);
    if (cfg->seq_len % (2 * g->cp) != 0)
        bs_die_about("seq_len cp", "the sequence length %d is not a multiple of 2 x the context-parallel degree %d (each "
                     "sequence is cut into 2 chunks per context-parallel rank)", cfg->seq_len, g->cp);
    if (whole->padded_vocab_size % g->tp != 0)
        bs_die_about("tp", "the tensor-parallel degree %d does not divide the padded vocabulary %d", g->tp, whole->padded_vocab_size);
    if (whole->lora_rank > 0) check_lora(e, whole);
    e->num_chunks = cfg->virtual_stages > 0 ? cfg->virtual_stages : 1;
    if (e->num_chunks > PIPE_MAX_CHUNKS)
        bs_die_about("virtual_stages", "%d virtual stages: at most %d", e->num_chunks, PIPE_MAX_CHUNKS);
    split_virtual_stages(e);
    e->chunks = bs_calloc((size_t)e->num_chunks, sizeof(EngineChunk));
    e->chunk_comm = bs_calloc((size_t)e->num_chunks, sizeof(Comm *));
    e->norm_ctx = bs_calloc((size_t)e->num_chunks, sizeof(NormContext));
    PipeChunk pipe_chunks[PIPE_MAX_CHUNKS];
    for (int c = 0; c < e->num_chunks; c++) {
        setup_chunk(e, c, whole);
        e->norm_ctx[c] = (NormContext){e, c};
        pipe_chunks[c] = (PipeChunk){&e->chunks[c].model, e->chunks[c].dp, NULL};
    }
    e->pipe = pipeline_create(g->pp_group, g->pp_index, g->pp, pipe_chunks, e->num_chunks, cfg->schedule,
                              cfg->micro_batch, cfg->seq_len / g->cp);
    if (g->cp > 1) {
        size_t tokens = (size_t)cfg->micro_batch * cfg->seq_len;
        e->context_load = (ContextLoad){NULL, NULL, cfg->micro_batch, cfg->seq_len, g->cp, g->cp_index,
                                        cfg->cp_split, bs_malloc(tokens * sizeof(int32_t)),
                                        bs_malloc(tokens * sizeof(int32_t))};
    }
    engine_share_output_weights(e);
    if (cfg->on_device) {
        char reason[512];
        e->device = engine_device_create(cfg->device, cfg, &e->chunks[0], e->grid, reason, sizeof reason);
        if (!e->device) bs_die_about("device", "the %s device: %s", cfg->device == DEVICE_CUDA ? "cuda" : "sim", reason);
    }
    return e;
}

void engine_free(Engine *e) {
    if (!e) return;
    engine_device_free(e->device);
    pipeline_free(e->pipe);
    for (int c = 0; c < e->num_chunks; c++) {
        EngineChunk *ch = &e->chunks[c];
        dp_free(ch->dp);
        context_attention_free(ch->model.context);
        free(ch->tensor_primary);
        free(ch->pieces);
        for (int k = 0; k < OPTIMIZER_MAX_STATE; k++) free(ch->state[k]);
        optimizer_free(&ch->opt);
        if (c > 0) comm_free(e->chunk_comm[c]);
    }
    free(e->tied.buf);
    free(e->context_load.inputs);
    free(e->context_load.targets);
    free(e->chunks);
    free(e->chunk_comm);
    free(e->norm_ctx);
    free(e->vs_first);
    free(e->vs_layers);
    grid_free(e->grid);
    free(e);
}

/* ---- the step ---- */

/* The loader the pipeline calls: the caller's, or (cp > 1) the one that keeps this rank's chunks. */
static PipeLoad local_loader(Engine *e, PipeLoad load, void *ctx, void **local_ctx) {
    if (e->grid->cp == 1) {
        *local_ctx = ctx;
        return load;
    }
    e->context_load.whole = load;
    e->context_load.ctx = ctx;
    *local_ctx = &e->context_load;
    return load_local;
}

/* Tied weights: the head's gradient reaches the embeddings' chunk before its last gradient pass. */
static void before_last_grads(void *ctx, int chunk) {
    Engine *e = ctx;
    EngineChunk *ch = embedding_chunk(e);
    if (e->grid->pp > 1 && ch && chunk == 0) mp_wait_tied_grads(&ch->model, &e->tied);
}

static void after_last_grads(void *ctx, int chunk) {
    Engine *e = ctx;
    EngineChunk *ch = head_chunk(e);
    if (e->grid->pp > 1 && ch && chunk == e->num_chunks - 1) mp_send_tied_grads(e->grid, &ch->model, &e->tied);
}

/* Mean seconds per action of chunk c and compute kind k (0 if none ran). */
static double mean(const PipeStats *ps, int c, int k) {
    return ps->count[c][k] > 0 ? ps->seconds[c][k] / ps->count[c][k] : 0;
}

/* The schedule's closed-form idle share with this rank's mean seconds per
 * action over its chunks (only zbh1's depends on them: B and W apart). */
static double bubble_theory(const Engine *e, int m, const PipeStats *ps) {
    PipeStats all = {0}; /* every chunk's actions as chunk 0's */
    for (int c = 0; c < e->num_chunks; c++)
        for (int k = 0; k < PIPE_COMPUTE_KINDS; k++) {
            all.seconds[0][k] += ps->seconds[c][k];
            all.count[0][k] += ps->count[c][k];
        }
    double f = mean(&all, 0, PIPE_FORWARD), fused = mean(&all, 0, PIPE_BACKWARD);
    double b = mean(&all, 0, PIPE_BACKWARD_INPUT), w = mean(&all, 0, PIPE_BACKWARD_WEIGHT);
    ScheduleShape shape = {e->cfg.schedule, e->grid->pp, e->num_chunks, m};
    return schedule_bubble_theory(&shape, f, fused > 0 ? fused : b, fused > 0 ? 0 : w);
}

/* The schedule replayed with every stage's measured seconds per action of
 * each chunk (one all-gather over the pipeline group): the idle share the
 * schedule itself predicts on these stages, unequal ones included. */
static double bubble_simulated(Engine *e, const Pipeline *pipe, const PipeStats *ps) {
    const int p = e->grid->pp, v = e->num_chunks, per_rank = v * PIPE_COMPUTE_KINDS;
    double mine[PIPE_MAX_CHUNKS * PIPE_COMPUTE_KINDS];
    for (int c = 0; c < v; c++)
        for (int k = 0; k < PIPE_COMPUTE_KINDS; k++) mine[c * PIPE_COMPUTE_KINDS + k] = mean(ps, c, k);
    double *all = bs_malloc(sizeof(double) * (size_t)(p * per_rank));
    comm_allgather_bytes(e->grid->pp_group, mine, sizeof(double) * (size_t)per_rank, all);
    double share = pipeline_simulated_bubble(pipe, all);
    free(all);
    return share;
}

EngineStepStats engine_forward_backward(Engine *e, int m, float dloss, PipeLoad load, void *ctx) {
    if (e->device) {
        comm_reset_stats(e->chunk_comm[0]); /* the step's data-parallel traffic, as below */
        comm_reset_stats(e->grid->ep_group); /* the step's expert-parallel traffic, as below */
        comm_reset_stats(e->grid->edp_group);
        void *local_ctx;
        PipeLoad local = local_loader(e, load, ctx, &local_ctx); /* context parallelism: this rank's rows */
        engine_device_moe_begin(e->device, &e->chunks[0].model, m);
        EngineStepStats st = {.loss_sum = engine_device_train(e->device, m, dloss, local, local_ctx), .max_live = 1};
        engine_device_moe_end(e->device, &e->chunks[0].model);
        PipeStats ps;
        const Pipeline *stage = engine_device_pipeline(e->device, &ps); /* --pp: the stage's measurements, as below */
        if (stage) st = (EngineStepStats){st.loss_sum, ps.busy, ps.idle, ps.max_live, 0, bubble_theory(e, m, &ps),
                                          bubble_simulated(e, stage, &ps)};
        return st;
    }
    for (int c = 0; c < e->num_chunks; c++) {
        comm_reset_stats(e->chunk_comm[c]);
        dp_begin_step(e->chunks[c].dp);
        e->chunks[c].model.first_nonfinite_layer = -1;
        e->chunks[c].model.lora_step = e->optimizer_step; /* LoRA dropout's masks follow the optimizer step */
        gpt_moe_begin_step(&e->chunks[c].model);
        e->chunks[c].model.moe_loss_weight = 1.0 / m; /* the mean of the micro-steps' MoE losses */
    }
    comm_reset_stats(e->grid->cp_group);
    comm_reset_stats(e->grid->ep_group);
    comm_reset_stats(e->grid->edp_group);
    EngineChunk *tied = tied_chunk(e);
    mp_start_tied_grads(e->grid, &tied->model, &e->tied);
    PipeHooks hooks = {before_last_grads, after_last_grads, e};
    void *local_ctx;
    PipeLoad local = local_loader(e, load, ctx, &local_ctx);
    for (int c = 0; c < e->num_chunks; c++)
        if (e->chunks[c].model.fp8) fp8_scaling_begin_step(e->chunks[c].model.fp8);
    PipeStats ps = pipeline_train(e->pipe, m, dloss, local, local_ctx, &hooks);
    for (int c = 0; c < e->num_chunks; c++)
        if (e->chunks[c].model.fp8) fp8_scaling_set_recording(e->chunks[c].model.fp8, false);
    mp_finish_tied_grads(&e->tied);
    EngineStepStats st = {e->grid->tp_index == 0 ? ps.loss_sum : 0, ps.busy, ps.idle, ps.max_live, 0,
                          bubble_theory(e, m, &ps), e->grid->pp > 1 ? bubble_simulated(e, e->pipe, &ps) : 0};
    for (int c = 0; c < e->num_chunks; c++) st.micro_sum_squares += dp_micro_sum_squares(e->chunks[c].dp);
    return st;
}

double engine_grad_sum_squares(Engine *e) {
    if (e->device) return engine_device_grad_sum_squares(e->device);
    double sum = 0;
    for (int c = 0; c < e->num_chunks; c++) sum += mp_local_grad_sum_squares(&e->chunks[c].model, e->chunks[c].dp);
    const bool sharded = e->cfg.data_parallel.zero_stage >= 1;
    comm_allreduce_double(sharded ? e->grid->world : e->grid->mp_group, &sum, 1);
    /* EP at ZeRO 0: each ep rank holds its experts, the dense tensors count on ep rank 0 (gpt_tensor_primary);
     * above, every rank's pieces are its own (mp_local_grad_sum_squares) and the world sum counts each once */
    if (e->grid->ep > 1 && !sharded) comm_allreduce_double(e->grid->ep_group, &sum, 1);
    return sum;
}

/* ZeRO >= 1 over more than one rank: each holds a part of the update range. */
static bool sharded_over_data(const Engine *e) {
    return e->cfg.data_parallel.zero_stage >= 1 && comm_size(e->grid->dp_group) > 1;
}

/* LAMB and LARS sum per-tensor partial norms: over data-parallel shards
 * (ZeRO >= 1) and tensor-parallel pieces; a tensor every tensor-parallel rank
 * holds whole counts once (its other copies contribute 0). */
static void sum_tensor_norms(void *ctx, double *values, int n) {
    const NormContext *nc = ctx;
    Engine *e = nc->engine;
    const EngineChunk *ch = &e->chunks[nc->chunk];
    if (sharded_over_data(e)) comm_allreduce_double(e->chunk_comm[nc->chunk], values, n);
    if (e->grid->tp > 1) {
        for (int t = 0; t < ch->opt.num_tensors && 2 * t + 1 < n; t++)
            if (!ch->tensor_primary[t]) values[2 * t] = values[2 * t + 1] = 0;
        comm_allreduce_double(e->grid->tp_group, values, n);
    }
}

void engine_after_update(Engine *e) {
    for (int c = 0; c < e->num_chunks; c++) {
        dp_after_update(e->chunks[c].dp);
        /* delayed scaling: amaxes reduced over the tensor-parallel group and the chunk's data-parallel one */
        if (e->chunks[c].model.fp8) fp8_scaling_update(e->chunks[c].model.fp8, e->grid->tp_group, e->chunk_comm[c]);
    }
    engine_share_output_weights(e);
}

void engine_update(Engine *e, double lr, float grad_scale) {
    const bool sharded = sharded_over_data(e) || e->grid->tp > 1;
    OptimizerStep step = {(float)lr, grad_scale, ++e->optimizer_step};
    if (e->device) {
        engine_device_update(e->device, &e->cfg.optimizer, lr, grad_scale, step.step);
        return;
    }
    for (int c = 0; c < e->num_chunks; c++) {
        EngineChunk *ch = &e->chunks[c];
        optimizer_step_pieces(&ch->opt, ch->pieces, ch->num_pieces, &step, sharded ? sum_tensor_norms : NULL,
                              &e->norm_ctx[c]);
    }
    engine_after_update(e);
}

double engine_evaluate(Engine *e, int m, int counted, PipeLoad load, void *ctx) {
    void *local_ctx;
    PipeLoad local = local_loader(e, load, ctx, &local_ctx);
    if (e->device) {
        engine_device_moe_bias(e->device, &e->chunks[0].model); /* the bias update moved them */
        return engine_device_evaluate(e->device, m, counted, local, local_ctx);
    }
    double loss = pipeline_eval(e->pipe, m, counted, local, local_ctx);
    return e->grid->tp_index == 0 ? loss : 0;
}

/* Chunk by chunk: every rank's chunk c, unpacked on rank 0 by its shard
 * config; the trained parameters, or (BASE) LoRA's frozen base. out: the
 * whole of that part, on rank 0. */
static void gather_part(Engine *e, GPTPart part, float *out) {
    const Grid *g = e->grid;
    const int world = comm_size(g->world);
    GPTConfig whole = gpt_part_config(&e->chunks[0].model.cfg, part);
    whole = gpt_logical_config(&whole);
    GPTConfig *shards = bs_malloc(sizeof(GPTConfig) * (size_t)world);
    if (comm_rank(g->world) == 0) memset(out, 0, gpt_num_params(&whole) * sizeof(float));
    for (int c = 0; c < e->num_chunks; c++) {
        for (int r = 0; r < world; r++) {
            GridCoord at = grid_coord_of(g, r);
            shards[r] = chunk_config(e, &whole, at.tp, c * g->pp + at.pp, at.dp % g->ep);
        }
        EngineChunk *ch = &e->chunks[c];
        if (part == GPT_PART_BASE) {
            GPTConfig mine = gpt_part_config(&ch->model.cfg, GPT_PART_BASE);
            float *local = bs_malloc(gpt_num_params(&mine) * sizeof(float));
            gpt_frozen_base(&ch->model, local);
            mp_gather_shards(g, &mine, local, shards, out);
            free(local);
        } else {
            mp_gather_logical(g, &ch->model, ch->dp, shards, out);
        }
    }
    free(shards);
}

void engine_gather_model(Engine *e, float *out) {
    host_current(e);
    const GPTConfig *mc = &e->chunks[0].model.cfg;
    if (mc->part != GPT_PART_ADAPTERS) {
        gather_part(e, mc->part, out);
        return;
    }
    GPTConfig all = gpt_part_config(mc, GPT_PART_ALL), base = gpt_part_config(mc, GPT_PART_BASE);
    GPTConfig adapters = gpt_logical_config(mc);
    all = gpt_logical_config(&all);
    base = gpt_logical_config(&base);
    const bool root = comm_rank(e->grid->world) == 0;
    float *parts[2] = {root ? bs_malloc(gpt_num_params(&base) * sizeof(float)) : NULL,
                       root ? bs_malloc(gpt_num_params(&adapters) * sizeof(float)) : NULL};
    gather_part(e, GPT_PART_BASE, parts[0]);
    gather_part(e, GPT_PART_ADAPTERS, parts[1]);
    if (root) {
        gpt_copy_part(&all, GPT_PART_BASE, parts[0], out);
        gpt_copy_part(&all, GPT_PART_ADAPTERS, parts[1], out);
    }
    free(parts[0]);
    free(parts[1]);
}

/* ---- what the layers above read ---- */

int engine_first_nonfinite_layer(const Engine *e) {
    if (e->device) return engine_device_nonfinite_layer(e->device);
    int layer = -1;
    for (int c = 0; c < e->num_chunks; c++) {
        int l = e->chunks[c].model.first_nonfinite_layer;
        if (l >= 0 && (layer < 0 || l < layer)) layer = l;
    }
    return layer;
}

int engine_first_nonfinite_block(const Engine *e) {
    if (e->device) return engine_device_nonfinite_block(e->device);
    int block = -1; /* backward runs from the head down: the highest bad block is the origin */
    for (int c = 0; c < e->num_chunks; c++) {
        int b = dp_first_nonfinite_block(e->chunks[c].dp);
        if (b > block) block = b;
    }
    return block;
}

void engine_inject_nan(Engine *e, int block) {
    if (e->device) {
        engine_device_inject_nan(e->device, block);
        return;
    }
    for (int c = 0; c < e->num_chunks; c++)
        if (gpt_block_present(&e->chunks[c].model.cfg, block)) dp_inject_nan(e->chunks[c].dp, block);
}

bool engine_device_tensor_norms(Engine *e, double *grads, double *params) {
    if (!e->device) return false;
    engine_device_tensor_sum_squares(e->device, grads, params);
    return true;
}

const char *engine_device_comm(const Engine *e) { return e->device ? engine_device_comm_path(e->device) : NULL; }

bool engine_device_traffic(const Engine *e, uint64_t *bytes_to_host) {
    if (!e->device) return false;
    *bytes_to_host = engine_device_bytes_to_host(e->device);
    return true;
}

bool engine_device_memory_peak(const Engine *e, size_t *bytes) {
    *bytes = e->device ? engine_device_memory_used(e->device) : 0;
    return *bytes > 0;
}

DPMemory engine_memory(const Engine *e) {
    DPMemory total = {0, 0, 0};
    for (int c = 0; c < e->num_chunks; c++) {
        DPMemory m = dp_memory(e->chunks[c].dp);
        total.param_bytes += gpt_frozen_bytes(&e->chunks[c].model); /* LoRA's frozen base */
        total.param_bytes += m.param_bytes;
        total.grad_bytes += m.grad_bytes;
        total.buffer_bytes += m.buffer_bytes;
    }
    return total;
}

size_t engine_activation_bytes(const Engine *e) {
    size_t total = pipeline_activation_bytes(e->pipe);
    for (int c = 0; c < e->num_chunks; c++) total += context_attention_bytes(e->chunks[c].model.context);
    return total;
}

static void add_stats(CommStats *a, CommStats b) {
    a->bytes_sent += b.bytes_sent;
    a->uncompressed_bytes += b.uncompressed_bytes;
    a->wait_seconds += b.wait_seconds;
    a->busy_seconds += b.busy_seconds;
}

CommStats engine_comm_stats(const Engine *e) {
    CommStats total;
    memset(&total, 0, sizeof total);
    for (int c = 0; c < e->num_chunks; c++) {
        add_stats(&total, comm_stats(e->chunk_comm[c]));
        add_stats(&total, dp_node_stats(e->chunks[c].dp));
    }
    add_stats(&total, comm_stats(e->grid->edp_group)); /* expert parallelism: the expert gradients' reductions */
    return total;
}

void engine_fp8_stats(Engine *e, Fp8Stats out[FP8_KINDS]) {
    double sums[4 * FP8_KINDS] = {0};
    for (int k = 0; k < FP8_KINDS; k++) {
        for (int c = 0; c < e->num_chunks; c++) {
            if (!e->chunks[c].model.fp8) continue;
            Fp8Stats st = fp8_scaling_kind_stats(e->chunks[c].model.fp8, k);
            double v[4] = {(double)st.values, (double)st.nonzero, (double)st.underflow, (double)st.overflow};
            for (int j = 0; j < 4; j++) sums[4 * k + j] += v[j];
        }
    }
    comm_allreduce_double(e->grid->world, sums, 4 * FP8_KINDS);
    for (int k = 0; k < FP8_KINDS; k++)
        out[k] = (Fp8Stats){(uint64_t)sums[4 * k], (uint64_t)sums[4 * k + 1], (uint64_t)sums[4 * k + 2],
                            (uint64_t)sums[4 * k + 3], 0};
}

CommStats engine_context_stats(const Engine *e) { return comm_stats(e->grid->cp_group); }
CommStats engine_expert_stats(const Engine *e) { return comm_stats(e->grid->ep_group); }

void engine_set_trace(Engine *e, Trace *trace) {
    for (int c = 0; c < e->num_chunks; c++) comm_set_trace(e->chunk_comm[c], trace);
    pipeline_set_trace(e->pipe, trace);
}

void engine_set_local_gradients(Engine *e, bool local) {
    for (int c = 0; c < e->num_chunks; c++) dp_set_local_gradients(e->chunks[c].dp, local);
}

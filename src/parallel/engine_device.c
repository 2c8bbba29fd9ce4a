/* engine_device.c: the engine's step on a device (engine_device.h). A
 * device error inside a step ends the run with its one-line reason. With
 * --pp the step is this rank's pipeline stage (pipeline_device.h). Data
 * parallelism alone reduces the gradients on the device bucket by bucket as
 * backward finishes them (device_buckets.h) as the CPU's data_parallel.c sums
 * them: all-reduced at ZeRO 0; at ZeRO 1-3 reduce-scattered, each rank
 * updating its part of the flat buffer, the parameters all-gathered after
 * (ZeRO 1-2) or block by block before each use (ZeRO 3, device_gather.h);
 * so do tensor shards, context ranks and pipeline stages (each micro-batch's
 * gradient pass, the tied weights' gradient added after; ZeRO 3 gathers
 * around each forward and backward pass of the schedule). With graphs, and
 * with interleaved virtual stages (ZeRO 0-1), the gradient is reduced in one
 * collective after the step's backward. Interleaved virtual stages: the
 * rank's v chunks are v device models (each chunk's flat buffers, as the
 * CPU's EngineChunks), every per-chunk step run over each.
 * Tensor parallelism: each rank's device model is its shard, the sums inside
 * a layer over the tensor group's own DeviceComm (model/gpt_device_tp.h);
 * data parallelism then reduces each shard over its data-parallel group.
 * Context parallelism: each rank's device model takes its rows of every
 * sequence, attention over the context group's DeviceComm
 * (model/gpt_device_cp.h); the data-parallel group spans dp x cp, as on CPU.
 * Expert parallelism (ZeRO 0-2): each rank's device model holds its experts,
 * the rows moved over the EP group's DeviceComm (model/moe_device_exchange.h);
 * after backward the expert tensors' gradients sum over the expert-data
 * group, the rest over the data group (device_expert_grads.h), as on CPU; at
 * ZeRO 1-2 reduce-scattered, the rank updating its pieces (the CPU's
 * dp_piece), the parameters all-gathered range by range after. */
#include "parallel/engine_device.h"

#include <stdio.h>
#include <stdlib.h>

#include "comm/device_comm.h"
#include "parallel/device_buckets.h"
#include "parallel/device_expert_grads.h"
#include "parallel/device_gather.h"
#include "core/error.h"
#include "model/gpt_device.h"
#include "parallel/pipeline_device.h"
#include "model/moe_device.h"

/* What of the chunk's host copy the device has changed since the last sync. */
enum { STALE_PARAMS = 1, STALE_GRADS = 2, STALE_MOMENTS = 4 };

struct EngineDevice {
    Device *dev;
    GPTDevice *model; /* chunk 0's (the only one without virtual stages) */
    int num_chunks;   /* the rank's model chunks: interleaved virtual stages, each its own device model */
    GPTDevice *models[PIPE_MAX_CHUNKS];  /* models[0] is model */
    DeviceComm *comms[PIPE_MAX_CHUNKS];  /* each chunk's over the data-parallel group (comms[0] is comm) */
    int B, T;
    int32_t *inputs, *targets; /* one micro-batch on the host */
    unsigned stale;            /* STALE_*: the host copy's arrays the device has moved past */
    int poison_block;          /* --debug-inject-fault nan: the next train's (-1: none) */
    int nonfinite_layer, nonfinite_block;
    Comm *group;      /* the data-parallel group, with more than one rank (else NULL) */
    DeviceComm *comm; /* the device buffers over it */
    DeviceComm *tensor_comm; /* the tensor group's (more than one rank, else NULL) */
    DeviceComm *context_comm; /* the context group's (more than one rank, else NULL) */
    Comm *norm_group; /* where the gradient's sum of squares is summed (NULL: this rank's is whole) */
    bool counts_loss; /* tensor rank 0: the loss counts once per tensor group, as on the CPU */
    DeviceBuckets *buckets; /* the gradients' reductions over it */
    DeviceGather *gather;   /* ZeRO 3 over it: the parameters' gathers */
    bool zero3;             /* ZeRO 3: the device keeps the rank's part of the parameters */
    bool sharded;     /* ZeRO >= 1 over the group: this rank updates its part */
    Fp8State *fp8;    /* --precision fp8: the chunk's delayed scales (on the host), else NULL */
    Comm *tensor_group; /* its amaxes' max over the tensor group first, as engine_after_update's */
    PipelineDevice *pipe; /* --pp > 1: this rank's stage in the schedule (else NULL) */
    DeviceComm *expert_comm, *expert_data_comm; /* --ep: the EP group's rows; the expert-data group's (> 1 rank) */
    DeviceExpertGrads *expert_grads; /* --ep: the gradient's split reduction (instead of comm's one) */
};

static void check(EngineDevice *d, int rc) {
    if (rc != 0) bs_die("device %s: %s", device_name(d->dev), device_error(d->dev));
}

static const char *refusal(const EngineConfig *cfg, const EngineChunk *chunk, const Grid *g) {
    if ((g->tp > 1 || g->cp > 1 || g->pp > 1) && cfg->fp8 && cfg->fp8->recipe == FP8_RECIPE_BLOCK)
        return "runs FP8's block recipe without tensor, context or pipeline parallelism for now (the delayed one runs)";
    if (g->cp > 1 && cfg->doc_mask) return "runs context parallelism over whole sequences only for now (not packed documents)";
    if (pipeline_device_refusal(cfg, g)) return pipeline_device_refusal(cfg, g);
    if (g->ep > 1 && cfg->data_parallel.zero_stage >= 3) return "runs expert parallelism at ZeRO stages 0-2 only for now";
    if (cfg->data_parallel.zero_stage >= 3 && (cfg->bf16 || chunk->model.fp8))
        return "runs ZeRO stage 3 in fp32 only for now (not bf16 or FP8)";
    if (cfg->measure_micro_norms) return "does not measure micro-step norms yet";
    if (chunk->model.frozen) return "does not train adapters over a frozen base yet";
    return NULL;
}

/* The tensor group's device collectives, given to the model (its shard's sums). */
static int open_tensor_comm(EngineDevice *d, const Grid *g, GpuCommKind path, char *reason, size_t reason_size) {
    d->tensor_comm = device_comm_create(g->tp_group, d->dev, gpt_device_compute_stream(d->model), path, reason,
                                        reason_size);
    if (!d->tensor_comm) return -1;
    if (gpt_device_set_tensor_group(d->model, d->tensor_comm) == 0) return 0;
    snprintf(reason, reason_size, "%s", device_error(d->dev));
    return -1;
}

/* The context group's device collectives, given to the model (attention over the whole sequence). */
static int open_context_comm(EngineDevice *d, const EngineConfig *cfg, const Grid *g, GpuCommKind path, char *reason,
                             size_t reason_size) {
    d->context_comm = device_comm_create(g->cp_group, d->dev, gpt_device_compute_stream(d->model), path, reason,
                                         reason_size);
    if (!d->context_comm) return -1;
    return gpt_device_set_context_group(d->model, d->context_comm, g->cp, g->cp_index, cfg->cp_algo, cfg->cp_split,
                                        reason, reason_size);
}

/* Expert parallelism: the EP group's device collectives, given to the model
 * (the rows' moves), and the gradient's reduction split by group. */
static int open_expert_comms(EngineDevice *d, const EngineChunk *chunk, const Grid *g, GpuCommKind path, char *reason,
                             size_t reason_size) {
    DeviceStream *compute = gpt_device_compute_stream(d->model);
    if (!(d->expert_comm = device_comm_create(g->ep_group, d->dev, compute, path, reason, reason_size))) return -1;
    gpt_device_set_expert_group(d->model, g->ep_group, d->expert_comm);
    if (comm_size(g->edp_group) > 1 &&
        !(d->expert_data_comm = device_comm_create(g->edp_group, d->dev, compute, path, reason, reason_size)))
        return -1;
    d->expert_grads = device_expert_grads_create(&chunk->model.cfg, d->comm, d->expert_data_comm, d->sharded);
    return 0;
}

/* What chunk c's device model updates: the CPU's range, or its pieces with
 * expert parallelism at ZeRO 1-2 (gpt_device_set_update_pieces). */
static void set_update_pieces(EngineDevice *d, int c, const EngineChunk *chunk) {
    if (!dp_experts_sharded_apart(chunk->dp)) {
        check(d, gpt_device_set_update_range(d->models[c], chunk->update_offset, chunk->update_count));
        return;
    }
    const int n = dp_num_pieces(chunk->dp);
    GPTDevicePiece *pieces = bs_malloc(sizeof *pieces * (size_t)n);
    for (int k = 0; k < n; k++) {
        const DPPiece p = dp_piece(chunk->dp, k);
        pieces[k] = (GPTDevicePiece){p.offset, p.count, p.packed};
    }
    check(d, gpt_device_set_update_pieces(d->models[c], pieces, n));
    free(pieces);
}

/* The tensor, context and data-parallel groups' device collectives on the model's compute stream (more than one rank). */
static int open_comm(EngineDevice *d, const EngineConfig *cfg, const EngineChunk *chunk, const Grid *g, char *reason,
                     size_t reason_size) {
    for (int c = 0; c < d->num_chunks; c++) set_update_pieces(d, c, &chunk[c]);
    d->zero3 = cfg->data_parallel.zero_stage >= 3;
    if (d->zero3) gpt_device_keep_param_part(d->model); /* one rank: its part is all */
    if (g->pp > 1 && !(d->pipe = pipeline_device_create(d->dev, d->models, d->num_chunks, cfg, chunk, g,
                                                          cfg->skip_pipe_wait ? PIPELINE_DEVICE_SKIP_RECV_WAIT : 0, reason, reason_size))) return -1;
    const bool data = comm_size(g->dp_group) > 1;
    if (!data && g->tp == 1 && g->cp == 1) return 0;
    GpuCommKind path;
    if (gpu_comm_choose(g->world, d->dev, cfg->gpu_comm, &path, reason, reason_size) != 0) return -1;
    if (g->tp > 1 && open_tensor_comm(d, g, path, reason, reason_size) != 0) return -1;
    if (g->cp > 1 && open_context_comm(d, cfg, g, path, reason, reason_size) != 0) return -1;
    if (!data) return 0;
    d->group = g->dp_group;
    d->sharded = cfg->data_parallel.zero_stage >= 1;
    for (int c = 0; c < d->num_chunks; c++) /* each on its chunk model's stream */
        if (!(d->comms[c] = device_comm_create(d->group, d->dev, gpt_device_compute_stream(d->models[c]), path, reason,
                                               reason_size))) return -1;
    d->comm = d->comms[0];
    if (g->ep > 1) return open_expert_comms(d, chunk, g, path, reason, reason_size); /* reduce_gradients: split */
    /* reduce_gradients: one collective after backward (graphs: outside the captured micro-batch; each chunk's) */
    if (cfg->cuda_graphs || d->num_chunks > 1) return 0;
    d->buckets = device_buckets_create(d->dev, d->model, d->comm, chunk->dp, cfg->data_parallel.zero_stage, reason,
                                       reason_size);
    if (d->buckets && d->zero3) d->gather = device_gather_create(d->dev, d->model, d->comm, reason, reason_size);
    if (d->pipe) pipeline_device_set_data_parallel(d->pipe, d->buckets, d->gather);
    return d->buckets && (d->gather || !d->zero3) ? 0 : -1;
}

/* chunk's device model with the run's options (precision, graphs, attention), or NULL with the reason. */
static GPTDevice *make_model(EngineDevice *d, const EngineConfig *cfg, const EngineChunk *chunk, char *reason,
                             size_t reason_size) {
    GPTDevice *model = gpt_device_create(d->dev, &chunk->model.cfg, d->B, d->T, 0, reason, reason_size);
    if (!model) return NULL;
    const char *why = NULL;
    if (cfg->bf16 && gpt_device_enable_bf16(model) != 0) why = device_error(d->dev);
    else if (cfg->cuda_graphs && (chunk->model.fp8 || gpt_device_enable_graphs(model) != 0))
        why = chunk->model.fp8 ? "graphs do not run FP8 (its scales are the host's, by value)"
              : device_error(d->dev)[0] ? device_error(d->dev) : "out of host memory";
    else if (chunk->model.fp8 && gpt_device_enable_fp8(model, chunk->model.fp8) != 0) why = device_error(d->dev);
    if (why) snprintf(reason, reason_size, "%s", why);
    if (!why && cfg->doc_mask) gpt_device_set_doc_separator(model, cfg->doc_separator);
    if (why || (cfg->fused_attention >= 0 && gpt_device_set_fused_attention(model, cfg->fused_attention, reason, reason_size)) ||
        (cfg->bf16_activations && gpt_device_enable_bf16_activations(model, reason, reason_size))) {
        gpt_device_free(model);
        return NULL;
    }
    return model;
}

EngineDevice *engine_device_create(DeviceKind kind, const EngineConfig *cfg, const EngineChunk *chunk, const Grid *grid,
                                   char *reason, size_t reason_size) {
    const char *no = refusal(cfg, chunk, grid);
    if (no) {
        snprintf(reason, reason_size, "the device %s", no);
        return NULL;
    }
    EngineDevice *d = bs_calloc(1, sizeof *d);
    int ranks_here;
    DeviceOptions options = {.seed = cfg->seed, .memory_limit = cfg->sim_memory,
                             .gpu = gpu_comm_local_rank(grid->world, &ranks_here)};
    d->B = cfg->micro_batch;
    d->T = cfg->seq_len / grid->cp; /* context parallelism: this rank's rows of each sequence */
    d->poison_block = d->nonfinite_layer = d->nonfinite_block = -1;
    d->counts_loss = grid->tp_index == 0;
    /* as engine_grad_sum_squares: ZeRO shards over every rank, else one model-parallel group (tp x pp) holds one copy */
    d->norm_group = cfg->data_parallel.zero_stage >= 1 && comm_size(grid->dp_group) > 1 ? grid->world
                    : grid->tp > 1                                                      ? grid->mp_group
                    : grid->ep > 1 ? grid->ep_group /* each its experts, the dense tensors on ep rank 0 */
                                                                                        : NULL;
    d->dev = device_open(kind, &options, reason, reason_size);
    d->num_chunks = cfg->virtual_stages > 1 ? cfg->virtual_stages : 1;
    for (int c = 0; c < d->num_chunks && d->dev && (c == 0 || d->models[c - 1]); c++)
        d->models[c] = make_model(d, cfg, &chunk[c], reason, reason_size);
    d->model = d->models[0];
    if (!d->models[d->num_chunks - 1] || open_comm(d, cfg, chunk, grid, reason, reason_size) != 0) {
        engine_device_free(d);
        return NULL;
    }
    d->fp8 = chunk->model.fp8;
    d->tensor_group = grid->tp_group;
    d->inputs = bs_malloc(sizeof(int32_t) * (size_t)d->B * d->T);
    d->targets = bs_malloc(sizeof(int32_t) * (size_t)d->B * d->T);
    engine_device_upload(d, chunk);
    return d;
}

void engine_device_free(EngineDevice *d) {
    if (!d) return;
    pipeline_device_free(d->pipe);
    device_gather_free(d->gather);
    device_buckets_free(d->buckets);
    for (int c = 0; c < d->num_chunks; c++) device_comm_free(d->comms[c]);
    device_comm_free(d->tensor_comm);
    device_comm_free(d->context_comm);
    device_expert_grads_free(d->expert_grads);
    device_comm_free(d->expert_comm);
    device_comm_free(d->expert_data_comm);
    for (int c = 0; c < d->num_chunks; c++) gpt_device_free(d->models[c]);
    device_close(d->dev);
    free(d->inputs);
    free(d->targets);
    free(d);
}


/* The host's copy of the device's parameters: the whole (ZeRO 3: the rank's part, as the CPU keeps it). */
static float *host_params(const EngineDevice *d, const EngineChunk *chunk) {
    return d->zero3 ? dp_update_params(chunk->dp) : chunk->model.params;
}

void engine_device_upload(EngineDevice *d, const EngineChunk *chunk) {
    if (d->stale & (STALE_PARAMS | STALE_MOMENTS))
        bs_die("internal error: the host's parameters would replace the device's newer ones (read through engine_chunk)");
    for (int c = 0; c < d->num_chunks; c++)
        check(d, gpt_device_set_state(d->models[c], host_params(d, &chunk[c]), chunk[c].state[0], chunk[c].state[1]));
    if (d->pipe) pipeline_device_upload_head(d->pipe, &chunk[d->num_chunks - 1].model); /* the head's chunk */
}

void engine_device_sync_host(EngineDevice *d, EngineChunk *chunk) {
    if (!d->stale) return;
    const unsigned s = d->stale;
    for (int c = 0; c < d->num_chunks; c++) {
        EngineChunk *ch = &chunk[c];
        const bool pieces = dp_num_pieces(ch->dp) > 1; /* their gradients piece by piece, where the CPU keeps each */
        check(d, gpt_device_get_state(d->models[c], s & STALE_PARAMS ? host_params(d, ch) : NULL,
                                      s & STALE_GRADS && !pieces ? dp_update_grads(ch->dp) : NULL,
                                      s & STALE_MOMENTS ? ch->state[0] : NULL, s & STALE_MOMENTS ? ch->state[1] : NULL));
        for (int k = 0; s & STALE_GRADS && pieces && k < dp_num_pieces(ch->dp); k++) {
            const DPPiece p = dp_piece(ch->dp, k);
            check(d, gpt_device_get_grads(d->models[c], p.offset, p.count, p.grads));
        }
    }
    d->stale = 0;
}

/* micro-batches [0, m), the first `counted` adding to the loss (tensor rank 0's); dloss 0: forward only */
static double run(EngineDevice *d, int m, int counted, float dloss, PipeLoad load, void *ctx) {
    double total = 0;
    for (int micro = 0; micro < m; micro++) {
        double loss = 0;
        load(ctx, micro, d->inputs, d->targets);
        if (d->buckets && dloss != 0) device_buckets_begin_micro(d->buckets, micro == m - 1);
        if (d->gather) device_gather_begin_pass(d->gather, dloss != 0);
        check(d, gpt_device_step(d->model, d->inputs, d->targets, dloss, &loss));
        if (d->gather) device_gather_end_pass(d->gather);
        if (d->buckets && dloss != 0) device_buckets_end_micro(d->buckets);
        if (micro < counted && d->counts_loss) total += loss;
        if (dloss != 0 && d->nonfinite_layer < 0) d->nonfinite_layer = gpt_device_nonfinite_layer(d->model);
    }
    return total;
}

/* One rank: the gradient's non-finite check (a planted NaN first). Over a
 * group the buckets check each block before they reduce it, as the CPU. */
static void check_local_gradients(EngineDevice *d) {
    d->nonfinite_block = -1;
    for (int c = 0; c < d->num_chunks; c++) { /* blocks by their logical index: the highest bad one is the origin */
        int block;
        if (d->poison_block >= 0) check(d, gpt_device_poison_grad(d->models[c], d->poison_block)); /* where present */
        check(d, gpt_device_first_nonfinite_block(d->models[c], &block));
        if (block > d->nonfinite_block) d->nonfinite_block = block;
    }
    d->poison_block = -1;
}

/* Chunk c's flat buffer's floats. */
static size_t chunk_floats(const EngineDevice *d, int c) { return gpt_num_params(gpt_device_config(d->models[c])); }

/* Without buckets (tensor, context or pipeline parallelism at ZeRO 0-1):
 * the gradients summed over the data-parallel group in one collective. */
static void reduce_gradients(EngineDevice *d) {
    if (!d->comm) return;
    if (d->expert_grads) {
        device_expert_grads_reduce(d->expert_grads, gpt_device_array(d->model, GPT_DEVICE_GRADS));
        return;
    }
    for (int c = 0; c < d->num_chunks; c++) {
        float *grads = gpt_device_array(d->models[c], GPT_DEVICE_GRADS);
        const size_t total = chunk_floats(d, c);
        if (d->sharded) device_comm_reduce_scatter(d->comms[c], grads, 0, total, total);
        else device_comm_allreduce(d->comms[c], grads, total, false);
        device_comm_wait(d->comms[c]);
        device_comm_finish(d->comms[c]);
    }
}

/* The loss scale already divides by the global batch, as on the CPU: the
 * reductions sum the gradients over the group (whole at ZeRO 0, this rank's
 * part above). */
double engine_device_train(EngineDevice *d, int m, float dloss, PipeLoad load, void *ctx) {
    for (int c = 0; c < d->num_chunks; c++) check(d, gpt_device_zero_grads(d->models[c]));
    d->stale |= STALE_GRADS;
    d->nonfinite_layer = -1;
    if (d->buckets) {
        device_buckets_begin_step(d->buckets);
        if (d->poison_block >= 0) device_buckets_inject_nan(d->buckets, d->poison_block);
        d->poison_block = -1;
    }
    check(d, gpt_device_fp8_begin_step(d->model));
    double loss = d->pipe ? pipeline_device_train(d->pipe, m, dloss, load, ctx) : run(d, m, m, dloss, load, ctx);
    if (!d->counts_loss) loss = 0; /* the stage's tensor ranks: once per tensor group, as run counts it */
    if (d->pipe) d->nonfinite_layer = pipeline_device_nonfinite_layer(d->pipe);
    check(d, gpt_device_fp8_end_step(d->model));
    if (!d->buckets) {
        check_local_gradients(d);
        reduce_gradients(d);
        return loss;
    }
    d->nonfinite_block = device_buckets_first_nonfinite_block(d->buckets);
    device_buckets_finish(d->buckets);
    return loss;
}

const Pipeline *engine_device_pipeline(const EngineDevice *d, PipeStats *last) {
    return d->pipe ? pipeline_device_pipeline(d->pipe, last) : NULL;
}

int engine_device_nonfinite_layer(const EngineDevice *d) { return d->nonfinite_layer; }
int engine_device_nonfinite_block(const EngineDevice *d) { return d->nonfinite_block; }
void engine_device_inject_nan(EngineDevice *d, int block) { d->poison_block = block; }

double engine_device_evaluate(EngineDevice *d, int m, int counted, PipeLoad load, void *ctx) {
    return d->pipe ? pipeline_device_eval(d->pipe, m, counted, load, ctx) : run(d, m, counted, 0.0f, load, ctx);
}

/* ZeRO >= 1: each rank's sum covers its part of the gradients; tensor
 * parallelism: its shard's (a replicated tensor on tensor rank 0 alone);
 * their sum over the ranks, as engine_grad_sum_squares sums the CPU's shards. */
double engine_device_grad_sum_squares(EngineDevice *d) {
    double s = 0;
    for (int c = 0; c < d->num_chunks; c++) {
        double chunk = 0;
        check(d, gpt_device_grad_sum_squares(d->models[c], &chunk));
        s += chunk;
    }
    if (d->norm_group) comm_allreduce_double(d->norm_group, &s, 1); /* the world's: every stage's parts too */
    else if (d->pipe) pipeline_device_sum(d->pipe, &s, 1);           /* each stage's tensors */
    return s;
}

void engine_device_tensor_sum_squares(EngineDevice *d, double *grads, double *params) {
    for (int c = 0; c < d->num_chunks; c++) { /* chunk after chunk */
        check(d, gpt_device_tensor_sum_squares(d->models[c], GPT_DEVICE_GRADS, grads));
        check(d, gpt_device_tensor_sum_squares(d->models[c], GPT_DEVICE_PARAMS, params));
        grads += gpt_device_num_tensors(d->models[c]);
        params += gpt_device_num_tensors(d->models[c]);
    }
}

void engine_device_update(EngineDevice *d, const OptimizerConfig *opt, double lr, float grad_scale, long step) {
    AdamWStep s = {(float)lr, opt->beta1, opt->beta2, opt->eps, opt->weight_decay, grad_scale, step};
    for (int c = 0; c < d->num_chunks; c++) check(d, gpt_device_adamw(d->models[c], &s));
    d->stale |= STALE_PARAMS | STALE_MOMENTS;
    if (d->fp8) fp8_scaling_update(d->fp8, d->tensor_group, d->group); /* as engine_after_update: amaxes over tp, dp, then the scales */
    if (d->expert_grads && d->sharded) { /* each range over its group */
        device_expert_grads_gather(d->expert_grads, gpt_device_array(d->model, GPT_DEVICE_PARAMS));
        check(d, gpt_device_params_changed(d->model));
    }
    for (int c = 0; d->sharded && !d->zero3 && !d->expert_grads && c < d->num_chunks; c++) { /* ZeRO 3 gathers each block when it is used */
        const size_t total = chunk_floats(d, c);
        device_comm_allgather(d->comms[c], gpt_device_array(d->models[c], GPT_DEVICE_PARAMS), 0, total, total);
        device_comm_wait(d->comms[c]);
        device_comm_finish(d->comms[c]);
        check(d, gpt_device_params_changed(d->models[c]));
    }
    if (d->pipe) pipeline_device_share_weights(d->pipe); /* the tied weights, as engine_share_output_weights */
}

/* Every group takes the path gpu_comm_choose chose once for the job. */
const char *engine_device_comm_path(const EngineDevice *d) {
    const DeviceComm *any = d->comm ? d->comm : d->tensor_comm ? d->tensor_comm : d->context_comm;
    return any ? device_comm_path(any) : NULL;
}

uint64_t engine_device_bytes_to_host(const EngineDevice *d) { return device_bytes_copied(d->dev, COPY_DEVICE_TO_HOST); }

size_t engine_device_memory_used(const EngineDevice *d) { return device_memory_peak(d->dev); }

/* MoE: the step's selection biases and losses' weight to the device, as gpt_moe_begin_step on the CPU. */
void engine_device_moe_begin(EngineDevice *d, GPT *model, int m) {
    MoeDevice *moe = gpt_device_moe(d->model);
    if (!moe) return;
    gpt_moe_begin_step(model);
    model->moe_loss_weight = 1.0 / m;
    moe_device_begin_step(moe, model->moe_loss_weight, model->moe_dp);
    engine_device_moe_bias(d, model);
}

void engine_device_moe_bias(EngineDevice *d, const GPT *model) {
    MoeDevice *moe = gpt_device_moe(d->model);
    if (moe) check(d, moe_device_set_bias(moe, gpt_device_compute_stream(d->model), model->moe_bias));
}

/* MoE: the step's statistics and losses into the host model, where the trainer reads the CPU's. */
void engine_device_moe_end(EngineDevice *d, GPT *model) {
    const MoeDevice *moe = gpt_device_moe(d->model);
    if (!moe) return;
    for (int l = 0; l < model->cfg.num_layers; l++) model->moe_step[l] = *moe_device_step_stats(moe, l);
    moe_device_step_losses(moe, &model->moe_aux, &model->moe_z);
}

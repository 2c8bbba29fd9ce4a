/* engine_device.c: the engine's step on a device (engine_device.h). A
 * device error inside a step ends the run with its one-line reason. With
 * --pp the step is this rank's pipeline stage (pipeline_device.h). Data
 * parallelism reduces the
 * gradients on the device (comm/device_comm.h) as the CPU's data_parallel.c
 * sums them: all-reduced at ZeRO 0; at ZeRO 1-2 reduce-scattered, each rank
 * updating its part of the flat buffer, the parameters all-gathered after. */
#include "parallel/engine_device.h"

#include <stdio.h>
#include <stdlib.h>

#include "comm/device_comm.h"
#include "core/error.h"
#include "model/gpt_device.h"
#include "parallel/pipeline_device.h"

/* What of the chunk's host copy the device has changed since the last sync. */
enum { STALE_PARAMS = 1, STALE_GRADS = 2, STALE_MOMENTS = 4 };

struct EngineDevice {
    Device *dev;
    GPTDevice *model;
    int B, T;
    int32_t *inputs, *targets; /* one micro-batch on the host */
    unsigned stale;            /* STALE_*: the host copy's arrays the device has moved past */
    int poison_block;          /* --debug-inject-fault nan: the next train's (-1: none) */
    int nonfinite_layer, nonfinite_block;
    Comm *group;      /* the data-parallel group, with more than one rank (else NULL) */
    DeviceComm *comm; /* the device buffers over it */
    bool sharded;     /* ZeRO >= 1 over the group: this rank updates its part */
    size_t total;     /* the flat buffer's floats */
    Fp8State *fp8;    /* --precision fp8: the chunk's delayed scales (on the host), else NULL */
    PipelineDevice *pipe; /* --pp > 1: this rank's stage in the schedule (else NULL) */
};

static void check(EngineDevice *d, int rc) {
    if (rc != 0) bs_die("device %s: %s", device_name(d->dev), device_error(d->dev));
}

static const char *refusal(const EngineConfig *cfg, const EngineChunk *chunk, const Grid *g) {
    if (g->tp > 1) return "runs data parallelism only for now (not tensor parallelism)";
    if (pipeline_device_refusal(cfg, g)) return pipeline_device_refusal(cfg, g);
    if (g->cp > 1) return "runs data parallelism only for now (not context parallelism)";
    if (g->ep > 1) return "runs data parallelism only for now (not expert parallelism)";
    if (cfg->data_parallel.zero_stage >= 3) return "shards up to ZeRO stage 2 for now (not the parameters: stage 3)";
    if (cfg->measure_micro_norms) return "does not measure micro-step norms yet";
    if (chunk->model.frozen) return "does not train adapters over a frozen base yet";
    if (dp_num_pieces(chunk->dp) > 1) return "needs one contiguous update range per rank";
    return NULL;
}

/* The data-parallel group's device collectives on the model's compute stream (more than one rank). */
static int open_comm(EngineDevice *d, const EngineConfig *cfg, const EngineChunk *chunk, const Grid *g, char *reason,
                     size_t reason_size) {
    d->total = chunk->model.num_params;
    check(d, gpt_device_set_update_range(d->model, chunk->update_offset, chunk->update_count));
    if (g->pp > 1 && !(d->pipe = pipeline_device_create(d->dev, d->model, cfg, chunk, g,
                                                          cfg->skip_pipe_wait ? PIPELINE_DEVICE_SKIP_RECV_WAIT : 0, reason, reason_size))) return -1;
    if (comm_size(g->dp_group) == 1) return 0;
    GpuCommKind path;
    if (gpu_comm_choose(g->world, d->dev, cfg->gpu_comm, &path, reason, reason_size) != 0) return -1;
    d->group = g->dp_group;
    d->sharded = cfg->data_parallel.zero_stage >= 1;
    d->comm = device_comm_create(d->group, d->dev, gpt_device_compute_stream(d->model), path, reason, reason_size);
    return d->comm ? 0 : -1;
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
    d->T = cfg->seq_len;
    d->poison_block = d->nonfinite_layer = d->nonfinite_block = -1;
    d->dev = device_open(kind, &options, reason, reason_size);
    if (d->dev) d->model = gpt_device_create(d->dev, &chunk->model.cfg, d->B, d->T, 0, reason, reason_size);
    if (d->model && cfg->bf16 && gpt_device_enable_bf16(d->model) != 0) {
        snprintf(reason, reason_size, "%s", device_error(d->dev));
        gpt_device_free(d->model);
        d->model = NULL;
    }
    if (d->model && chunk->model.fp8 && gpt_device_enable_fp8(d->model, chunk->model.fp8) != 0) {
        snprintf(reason, reason_size, "%s", device_error(d->dev));
        gpt_device_free(d->model);
        d->model = NULL;
    }
    if (!d->model) {
        engine_device_free(d);
        return NULL;
    }
    if (cfg->doc_mask) gpt_device_set_doc_separator(d->model, cfg->doc_separator);
    if ((cfg->fused_attention >= 0 && gpt_device_set_fused_attention(d->model, cfg->fused_attention, reason, reason_size)) ||
        (cfg->bf16_activations && gpt_device_enable_bf16_activations(d->model, reason, reason_size)) ||
        open_comm(d, cfg, chunk, grid, reason, reason_size) != 0) {
        engine_device_free(d);
        return NULL;
    }
    d->fp8 = chunk->model.fp8;
    d->inputs = bs_malloc(sizeof(int32_t) * (size_t)d->B * d->T);
    d->targets = bs_malloc(sizeof(int32_t) * (size_t)d->B * d->T);
    engine_device_upload(d, chunk);
    return d;
}

void engine_device_free(EngineDevice *d) {
    if (!d) return;
    pipeline_device_free(d->pipe);
    device_comm_free(d->comm);
    gpt_device_free(d->model);
    device_close(d->dev);
    free(d->inputs);
    free(d->targets);
    free(d);
}


void engine_device_upload(EngineDevice *d, const EngineChunk *chunk) {
    if (d->stale & (STALE_PARAMS | STALE_MOMENTS))
        bs_die("internal error: the host's parameters would replace the device's newer ones (read through engine_chunk)");
    check(d, gpt_device_set_state(d->model, chunk->model.params, chunk->state[0], chunk->state[1]));
    if (d->pipe) pipeline_device_upload_head(d->pipe, &chunk->model);
}

void engine_device_sync_host(EngineDevice *d, EngineChunk *chunk) {
    if (!d->stale) return;
    const unsigned s = d->stale;
    check(d, gpt_device_get_state(d->model, s & STALE_PARAMS ? chunk->model.params : NULL,
                                  s & STALE_GRADS ? dp_update_grads(chunk->dp) : NULL, s & STALE_MOMENTS ? chunk->state[0] : NULL,
                                  s & STALE_MOMENTS ? chunk->state[1] : NULL));
    d->stale = 0;
}

/* micro-batches [0, m), the first `counted` adding to the loss; dloss 0: forward only */
static double run(EngineDevice *d, int m, int counted, float dloss, PipeLoad load, void *ctx) {
    double total = 0;
    for (int micro = 0; micro < m; micro++) {
        double loss = 0;
        load(ctx, micro, d->inputs, d->targets);
        check(d, gpt_device_step(d->model, d->inputs, d->targets, dloss, &loss));
        if (micro < counted) total += loss;
        if (dloss != 0 && d->nonfinite_layer < 0) d->nonfinite_layer = gpt_device_nonfinite_layer(d->model);
    }
    return total;
}

/* The gradients summed over the group (the loss scale already divides by the
 * global batch, as on the CPU): whole at ZeRO 0, this rank's part above. */
static void reduce_gradients(EngineDevice *d) {
    if (!d->comm) return;
    float *grads = gpt_device_array(d->model, GPT_DEVICE_GRADS);
    if (d->sharded) device_comm_reduce_scatter(d->comm, grads, 0, d->total, d->total);
    else device_comm_allreduce(d->comm, grads, d->total, false);
    device_comm_wait(d->comm);
    device_comm_finish(d->comm);
}

double engine_device_train(EngineDevice *d, int m, float dloss, PipeLoad load, void *ctx) {
    check(d, gpt_device_zero_grads(d->model));
    d->stale |= STALE_GRADS;
    d->nonfinite_layer = -1;
    check(d, gpt_device_fp8_begin_step(d->model));
    double loss = d->pipe ? pipeline_device_train(d->pipe, m, dloss, load, ctx) : run(d, m, m, dloss, load, ctx);
    if (d->pipe) d->nonfinite_layer = pipeline_device_nonfinite_layer(d->pipe);
    check(d, gpt_device_fp8_end_step(d->model));
    if (d->poison_block >= 0) check(d, gpt_device_poison_grad(d->model, d->poison_block));
    d->poison_block = -1;
    check(d, gpt_device_first_nonfinite_block(d->model, &d->nonfinite_block)); /* local, as the CPU checks before reducing */
    reduce_gradients(d);
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

/* ZeRO >= 1: each rank's sum covers its part of the gradients; their sum
 * over the group, as engine_grad_sum_squares sums the CPU's shards. */
double engine_device_grad_sum_squares(EngineDevice *d) {
    double s = 0;
    check(d, gpt_device_grad_sum_squares(d->model, &s));
    if (d->sharded) comm_allreduce_double(d->group, &s, 1);
    if (d->pipe) pipeline_device_sum(d->pipe, &s, 1); /* each stage's tensors */
    return s;
}

void engine_device_tensor_sum_squares(EngineDevice *d, double *grads, double *params) {
    check(d, gpt_device_tensor_sum_squares(d->model, GPT_DEVICE_GRADS, grads));
    check(d, gpt_device_tensor_sum_squares(d->model, GPT_DEVICE_PARAMS, params));
}

void engine_device_update(EngineDevice *d, const OptimizerConfig *opt, double lr, float grad_scale, long step) {
    AdamWStep s = {(float)lr, opt->beta1, opt->beta2, opt->eps, opt->weight_decay, grad_scale, step};
    check(d, gpt_device_adamw(d->model, &s));
    d->stale |= STALE_PARAMS | STALE_MOMENTS;
    if (d->fp8) fp8_scaling_update(d->fp8, NULL, d->group); /* as engine_after_update: amaxes over dp, then the scales */
    if (d->sharded) {
        device_comm_allgather(d->comm, gpt_device_array(d->model, GPT_DEVICE_PARAMS), 0, d->total, d->total);
        device_comm_wait(d->comm);
        device_comm_finish(d->comm);
        check(d, gpt_device_params_changed(d->model));
    }
    if (d->pipe) pipeline_device_share_weights(d->pipe); /* the tied weights, as engine_share_output_weights */
}

const char *engine_device_comm_path(const EngineDevice *d) { return d->comm ? device_comm_path(d->comm) : NULL; }

uint64_t engine_device_bytes_to_host(const EngineDevice *d) { return device_bytes_copied(d->dev, COPY_DEVICE_TO_HOST); }
size_t engine_device_memory_used(const EngineDevice *d) { return device_memory_peak(d->dev); }

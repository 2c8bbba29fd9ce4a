/* engine_device.c: the engine's step on a device (engine_device.h). A
 * device error inside a step ends the run with its one-line reason. */
#include "parallel/engine_device.h"

#include <stdio.h>
#include <stdlib.h>

#include "core/error.h"
#include "model/gpt_device.h"

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
};

static const char *refusal(const EngineConfig *cfg, const EngineChunk *chunk, int world_size) {
    if (world_size > 1) return "runs one process for now (no mpirun)";
    if (cfg->fp8) return "trains in fp32 or bf16 for now";
    if (cfg->measure_micro_norms) return "does not measure micro-step norms yet";
    if (chunk->model.frozen) return "does not train adapters over a frozen base yet";
    if (chunk->update_offset != 0 || chunk->update_count != chunk->model.num_params)
        return "needs the whole flat buffer in one process";
    return NULL;
}

EngineDevice *engine_device_create(DeviceKind kind, const EngineConfig *cfg, const EngineChunk *chunk, int world_size,
                                   char *reason, size_t reason_size) {
    const char *no = refusal(cfg, chunk, world_size);
    if (no) {
        snprintf(reason, reason_size, "the device %s", no);
        return NULL;
    }
    EngineDevice *d = bs_calloc(1, sizeof *d);
    DeviceOptions options = {.seed = cfg->seed, .memory_limit = cfg->sim_memory};
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
    if (!d->model) {
        engine_device_free(d);
        return NULL;
    }
    if (cfg->doc_mask) gpt_device_set_doc_separator(d->model, cfg->doc_separator);
    if (cfg->fused_attention >= 0 && gpt_device_set_fused_attention(d->model, cfg->fused_attention, reason, reason_size)) {
        engine_device_free(d);
        return NULL;
    }
    d->inputs = bs_malloc(sizeof(int32_t) * (size_t)d->B * d->T);
    d->targets = bs_malloc(sizeof(int32_t) * (size_t)d->B * d->T);
    engine_device_upload(d, chunk);
    return d;
}

void engine_device_free(EngineDevice *d) {
    if (!d) return;
    gpt_device_free(d->model);
    device_close(d->dev);
    free(d->inputs);
    free(d->targets);
    free(d);
}

static void check(EngineDevice *d, int rc) {
    if (rc != 0) bs_die("device %s: %s", device_name(d->dev), device_error(d->dev));
}

void engine_device_upload(EngineDevice *d, const EngineChunk *chunk) {
    if (d->stale & (STALE_PARAMS | STALE_MOMENTS))
        bs_die("internal error: the host's parameters would replace the device's newer ones (read through engine_chunk)");
    check(d, gpt_device_set_state(d->model, chunk->model.params, chunk->state[0], chunk->state[1]));
}

void engine_device_sync_host(EngineDevice *d, EngineChunk *chunk) {
    if (!d->stale) return;
    const unsigned s = d->stale;
    check(d, gpt_device_get_state(d->model, s & STALE_PARAMS ? chunk->model.params : NULL,
                                  s & STALE_GRADS ? chunk->model.grads : NULL, s & STALE_MOMENTS ? chunk->state[0] : NULL,
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

double engine_device_train(EngineDevice *d, int m, float dloss, PipeLoad load, void *ctx) {
    check(d, gpt_device_zero_grads(d->model));
    d->stale |= STALE_GRADS;
    d->nonfinite_layer = -1;
    double loss = run(d, m, m, dloss, load, ctx);
    if (d->poison_block >= 0) check(d, gpt_device_poison_grad(d->model, d->poison_block));
    d->poison_block = -1;
    check(d, gpt_device_first_nonfinite_block(d->model, &d->nonfinite_block));
    return loss;
}

int engine_device_nonfinite_layer(const EngineDevice *d) { return d->nonfinite_layer; }
int engine_device_nonfinite_block(const EngineDevice *d) { return d->nonfinite_block; }
void engine_device_inject_nan(EngineDevice *d, int block) { d->poison_block = block; }

double engine_device_evaluate(EngineDevice *d, int m, int counted, PipeLoad load, void *ctx) {
    return run(d, m, counted, 0.0f, load, ctx);
}

double engine_device_grad_sum_squares(EngineDevice *d) {
    double s = 0;
    check(d, gpt_device_grad_sum_squares(d->model, &s));
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
}

uint64_t engine_device_bytes_to_host(const EngineDevice *d) { return device_bytes_copied(d->dev, COPY_DEVICE_TO_HOST); }

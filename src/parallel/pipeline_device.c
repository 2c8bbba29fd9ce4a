/* pipeline_device.c: a pipeline stage on a device, driven by the CPU's executor (pipeline_device.h). */
#include "parallel/pipeline_device.h"

#include <stdio.h>
#include <stdlib.h>

#include "comm/device_comm.h"
#include "core/error.h"

#define TAG_TIED_WEIGHTS 1000001 /* as model_parallel.c's */
#define TAG_TIED_GRADS 1000002

/* One of the rank's model chunks as the executor's ops see it. */
typedef struct {
    PipelineDevice *pd;
    GPTDevice *model;
    DeviceComm *comm; /* the pipeline group's device collectives (the host path) on the model's compute stream */
    PipeChunkOps ops;
} StageChunk;

struct PipelineDevice {
    Device *dev;
    Comm *group;      /* the pipeline group */
    int stage, stages, debug, num_chunks;
    StageChunk chunks[PIPE_MAX_CHUNKS]; /* chunk c: virtual stage c x stages + stage */
    Pipeline *pipe;   /* the CPU's executor over their ops */
    PipeStats last;   /* its last train's */
    size_t stage_floats; /* B T C: an activation or its gradient */
    size_t wte_floats;
    float *tied_grad;    /* first stage: the head's gradient of wte, received */
    int nonfinite_layer;
    bool training;
    DeviceBuckets *buckets; /* the data-parallel group's reductions (NULL: none) */
    DeviceGather *gather;   /* ZeRO 3: its parameter gathers (NULL: none) */
    int m, grads_done;      /* the step's micro-batches, and how many passes wrote their gradients */
};

static void check(PipelineDevice *pd, int rc) {
    if (rc != 0) bs_die("device %s: %s", device_name(pd->dev), device_error(pd->dev));
}

const char *pipeline_device_refusal(const EngineConfig *cfg, const Grid *g) {
    if (g->pp == 1) return NULL;
    if (cfg->fp8 && cfg->virtual_stages > 1)
        return "runs interleaved virtual stages in fp32 or bf16 for now (not FP8: one chunk's scaling state)";
    if ((cfg->fp8 || cfg->bf16) && (g->tp > 1 || g->cp > 1))
        return "runs pipeline stages with tensor or context parallelism in fp32 only for now";
    if (cfg->virtual_stages > 1 && (g->tp > 1 || g->cp > 1))
        return "runs interleaved virtual stages of whole layers for now (not with tensor or context parallelism)";
    if (cfg->virtual_stages > 1 && cfg->data_parallel.zero_stage >= 2)
        return "runs interleaved virtual stages at ZeRO 0-1 for now (each chunk's gradient reduced after backward)";
    return NULL;
}

/* Set `set` is the chunk model's current one: the chunk. */
static StageChunk *use(void *ctx, int set) {
    StageChunk *ch = ctx;
    check(ch->pd, gpt_device_use_acts(ch->model, set));
    return ch;
}

static double op_forward(void *ctx, int set, const int32_t *inputs, const int32_t *targets, float dloss) {
    StageChunk *ch = use(ctx, set);
    PipelineDevice *pd = ch->pd;
    double loss = 0;
    if (pd->gather) device_gather_begin_stage_pass(pd->gather, false);
    check(pd, gpt_device_stage_forward(ch->model, inputs, targets, dloss, &loss));
    if (pd->gather) device_gather_end_pass(pd->gather);
    if (pd->training && pd->nonfinite_layer < 0) pd->nonfinite_layer = gpt_device_nonfinite_layer(ch->model);
    return loss;
}

/* The buckets around each micro-batch's gradient pass (the fused backward, or W): reduced as it finishes them;
 * ZeRO 3's gathers around every backward pass (B too). */
static void begin_backward(PipelineDevice *pd, bool grads) {
    if (pd->gather) device_gather_begin_stage_pass(pd->gather, true);
    if (grads && pd->buckets) device_buckets_begin_micro(pd->buckets, pd->grads_done == pd->m - 1);
}

static void end_backward(PipelineDevice *pd, bool grads) {
    if (pd->gather) device_gather_end_pass(pd->gather);
    if (grads && pd->buckets) device_buckets_end_micro(pd->buckets);
    pd->grads_done += grads;
}

static void op_backward(void *ctx, int set) {
    StageChunk *ch = use(ctx, set);
    begin_backward(ch->pd, true);
    check(ch->pd, gpt_device_stage_backward(ch->model));
    end_backward(ch->pd, true);
}

/* zbh1's B or W (the model carves each set's stash: pipeline_device_create). */
static void op_backward_split(void *ctx, int set, bool weight) {
    StageChunk *ch = use(ctx, set);
    begin_backward(ch->pd, weight);
    check(ch->pd, weight ? gpt_device_stage_backward_weight(ch->model) : gpt_device_stage_backward_input(ch->model));
    end_backward(ch->pd, weight);
}

/* A receive's buffer is read by the compute stream only after the group's event (the wait sim checks). */
static void op_transfer(void *ctx, int set, ActionKind kind, int peer, int tag) {
    StageChunk *ch = use(ctx, set);
    const size_t n = ch->pd->stage_floats;
    switch (kind) {
    case ACT_RECV_ACTIVATION: device_comm_recv(ch->comm, gpt_device_stage_input(ch->model), n, peer, tag); break;
    case ACT_RECV_GRAD: device_comm_recv(ch->comm, gpt_device_stage_grad(ch->model), n, peer, tag); break;
    case ACT_SEND_ACTIVATION: device_comm_send(ch->comm, gpt_device_stage_output(ch->model), n, peer, tag); break;
    case ACT_SEND_GRAD: device_comm_send(ch->comm, gpt_device_stage_grad(ch->model), n, peer, tag); break;
    default: bs_die("internal: pipeline transfer of a compute action");
    }
    const bool recv = kind == ACT_RECV_ACTIVATION || kind == ACT_RECV_GRAD;
    if (!recv || !(ch->pd->debug & PIPELINE_DEVICE_SKIP_RECV_WAIT)) device_comm_wait(ch->comm);
}

/* The chunk holding the embeddings (stage 0) and the one holding the head (the last stage). */
static StageChunk *embedding(PipelineDevice *pd) { return &pd->chunks[0]; }
static StageChunk *head(PipelineDevice *pd) { return &pd->chunks[pd->num_chunks - 1]; }

/* Chunk c over model: its pipeline collectives on the model's stream, its split backward for zbh1. */
static int open_chunk(PipelineDevice *pd, int c, GPTDevice *model, PipeSchedule schedule, char *reason,
                      size_t reason_size) {
    StageChunk *ch = &pd->chunks[c];
    *ch = (StageChunk){.pd = pd, .model = model,
                       .ops = {.forward = op_forward, .backward = op_backward, .backward_split = op_backward_split,
                               .transfer = op_transfer, .ctx = ch}};
    if (schedule == PIPE_ZBH1 && gpt_device_enable_split_backward(model) != 0) {
        snprintf(reason, reason_size, "%s", device_error(pd->dev));
        return -1;
    }
    ch->comm = device_comm_create(pd->group, pd->dev, gpt_device_compute_stream(model), GPU_COMM_HOST, reason, reason_size);
    return ch->comm ? 0 : -1;
}

PipelineDevice *pipeline_device_create(Device *dev, GPTDevice *const *models, int num_chunks, const EngineConfig *cfg,
                                       const EngineChunk *chunks, const Grid *g, int debug, char *reason, size_t reason_size) {
    PipelineDevice *pd = bs_calloc(1, sizeof *pd);
    *pd = (PipelineDevice){.dev = dev, .group = g->pp_group, .stage = g->pp_index, .stages = g->pp,
                           .debug = debug, .nonfinite_layer = -1,
                           .stage_floats = (size_t)cfg->micro_batch * (cfg->seq_len / g->cp) * (size_t)chunks[0].model.cfg.channels,
                           .wte_floats = gpt_tensor_numel(&chunks[0].model.cfg, TK_WTE)};
    PipeChunk stage[PIPE_MAX_CHUNKS];
    for (int c = 0; c < num_chunks; c++, pd->num_chunks++) {
        if (open_chunk(pd, c, models[c], cfg->schedule, reason, reason_size) != 0) {
            pipeline_device_free(pd);
            return NULL;
        }
        stage[c] = (PipeChunk){(GPT *)&chunks[c].model, NULL, &pd->chunks[c].ops};
    }
    if (pd->stage == 0 && !(pd->tied_grad = device_alloc(dev, pd->wte_floats * sizeof(float)))) {
        snprintf(reason, reason_size, "%s", device_error(dev));
        pipeline_device_free(pd);
        return NULL;
    }
    pd->pipe = pipeline_create(g->pp_group, g->pp_index, g->pp, stage, num_chunks, cfg->schedule, cfg->micro_batch,
                               cfg->seq_len / g->cp); /* context parallelism: this rank's rows, as the CPU's */
    return pd;
}

void pipeline_device_free(PipelineDevice *pd) {
    if (!pd) return;
    pipeline_free(pd->pipe);
    for (int c = 0; c < PIPE_MAX_CHUNKS; c++) device_comm_free(pd->chunks[c].comm);
    device_free(pd->dev, pd->tied_grad);
    free(pd);
}

/* The host waits for every chunk's transfers. */
static void finish(PipelineDevice *pd) {
    for (int c = 0; c < pd->num_chunks; c++) device_comm_finish(pd->chunks[c].comm);
}

void pipeline_device_set_data_parallel(PipelineDevice *pd, DeviceBuckets *buckets, DeviceGather *gather) {
    pd->buckets = buckets;
    pd->gather = gather;
}

/* The head's gradient of the tied weights, summed into the first stage's wte gradient (with buckets: summed over
 * the data-parallel group first, into what the rank keeps). */
static void add_tied_grads(PipelineDevice *pd) {
    const int last = pd->stages - 1;
    StageChunk *from = head(pd), *to = embedding(pd);
    if (pd->stage == last) device_comm_send(from->comm, gpt_device_head_wte(from->model, GPT_DEVICE_GRADS), pd->wte_floats, 0, TAG_TIED_GRADS);
    if (pd->stage == 0) {
        device_comm_recv(to->comm, pd->tied_grad, pd->wte_floats, last, TAG_TIED_GRADS);
        device_comm_wait(to->comm);
        float *dwte = gpt_device_array(to->model, GPT_DEVICE_GRADS); /* wte leads the first stage's layout */
        DeviceCall add = {.kernel = DK_RESIDUAL_FORWARD, .a.elementwise = {dwte, dwte, pd->tied_grad, pd->wte_floats}};
        if (pd->buckets) device_buckets_add_reduced(pd->buckets, pd->tied_grad, 0, pd->wte_floats);
        else check(pd, device_launch(pd->dev, gpt_device_compute_stream(to->model), &add));
    }
    finish(pd);
}

double pipeline_device_train(PipelineDevice *pd, int m, float dloss, PipeLoad load, void *ctx) {
    pd->nonfinite_layer = -1;
    pd->training = true;
    pd->m = m;
    pd->grads_done = 0;
    pd->last = pipeline_train(pd->pipe, m, dloss, load, ctx, NULL);
    add_tied_grads(pd);
    return pd->last.loss_sum;
}

const Pipeline *pipeline_device_pipeline(const PipelineDevice *pd, PipeStats *last) {
    *last = pd->last;
    return pd->pipe;
}

double pipeline_device_eval(PipelineDevice *pd, int m, int counted, PipeLoad load, void *ctx) {
    pd->training = false;
    double loss = pipeline_eval(pd->pipe, m, counted, load, ctx);
    finish(pd);
    return loss;
}

int pipeline_device_nonfinite_layer(const PipelineDevice *pd) { return pd->nonfinite_layer; }

void pipeline_device_upload_head(PipelineDevice *pd, const GPT *host) {
    GPTDevice *model = head(pd)->model;
    float *copy = gpt_device_head_wte(model, GPT_DEVICE_PARAMS);
    if (!copy) return;
    DeviceStream *s = gpt_device_compute_stream(model);
    check(pd, device_copy(pd->dev, s, copy, host->head_wte, pd->wte_floats * sizeof(float), COPY_HOST_TO_DEVICE));
    check(pd, gpt_device_head_changed(model));
    check(pd, device_stream_sync(pd->dev, s));
}

void pipeline_device_share_weights(PipelineDevice *pd) {
    const int last = pd->stages - 1;
    StageChunk *from = embedding(pd), *to = head(pd);
    if (pd->stage == 0) {
        const float *wte = gpt_device_array(from->model, GPT_DEVICE_PARAMS);
        if (pd->gather) { /* ZeRO 3: the rank keeps its part; tied_grad is free until the next step's end */
            device_gather_window(pd->gather, pd->tied_grad, 0, pd->wte_floats);
            wte = pd->tied_grad;
        }
        device_comm_send(from->comm, wte, pd->wte_floats, last, TAG_TIED_WEIGHTS);
    }
    if (pd->stage == last) {
        device_comm_recv(to->comm, gpt_device_head_wte(to->model, GPT_DEVICE_PARAMS), pd->wte_floats, 0, TAG_TIED_WEIGHTS);
        device_comm_wait(to->comm);
        check(pd, gpt_device_head_changed(to->model));
    }
    finish(pd);
}

void pipeline_device_sum(PipelineDevice *pd, double *x, int n) { comm_allreduce_double(pd->group, x, n); }

/* pipeline_device.c: a pipeline stage on a device, driven by the CPU's executor (pipeline_device.h). */
#include "parallel/pipeline_device.h"

#include <stdio.h>
#include <stdlib.h>

#include "comm/device_comm.h"
#include "core/error.h"

#define TAG_TIED_WEIGHTS 1000001 /* as model_parallel.c's */
#define TAG_TIED_GRADS 1000002

struct PipelineDevice {
    Device *dev;
    GPTDevice *model;
    Comm *group;      /* the pipeline group */
    int stage, stages, debug;
    DeviceComm *comm; /* its device collectives (the host path) */
    Pipeline *pipe;   /* the CPU's executor over ops */
    PipeStats last;   /* its last train's */
    PipeChunkOps ops;
    size_t stage_floats; /* B T C: an activation or its gradient */
    size_t wte_floats;
    float *tied_grad;    /* first stage: the head's gradient of wte, received */
    int nonfinite_layer;
    bool training;
};

static void check(PipelineDevice *pd, int rc) {
    if (rc != 0) bs_die("device %s: %s", device_name(pd->dev), device_error(pd->dev));
}

const char *pipeline_device_refusal(const EngineConfig *cfg, const Grid *g) {
    if (g->pp == 1) return NULL;
    if (cfg->virtual_stages > 1) return "runs one pipeline chunk per rank for now (not interleaved virtual stages)";
    return NULL;
}

/* Set `set` is the model's current one. */
static void use(PipelineDevice *pd, int set) { check(pd, gpt_device_use_acts(pd->model, set)); }

static double op_forward(void *ctx, int set, const int32_t *inputs, const int32_t *targets, float dloss) {
    PipelineDevice *pd = ctx;
    double loss = 0;
    use(pd, set);
    check(pd, gpt_device_stage_forward(pd->model, inputs, targets, dloss, &loss));
    if (pd->training && pd->nonfinite_layer < 0) pd->nonfinite_layer = gpt_device_nonfinite_layer(pd->model);
    return loss;
}

static void op_backward(void *ctx, int set) {
    PipelineDevice *pd = ctx;
    use(pd, set);
    check(pd, gpt_device_stage_backward(pd->model));
}

/* zbh1's B or W (the model carves each set's stash: pipeline_device_create). */
static void op_backward_split(void *ctx, int set, bool weight) {
    PipelineDevice *pd = ctx;
    use(pd, set);
    check(pd, weight ? gpt_device_stage_backward_weight(pd->model) : gpt_device_stage_backward_input(pd->model));
}

/* A receive's buffer is read by the compute stream only after the group's event (the wait sim checks). */
static void op_transfer(void *ctx, int set, ActionKind kind, int peer, int tag) {
    PipelineDevice *pd = ctx;
    use(pd, set);
    const size_t n = pd->stage_floats;
    switch (kind) {
    case ACT_RECV_ACTIVATION: device_comm_recv(pd->comm, gpt_device_stage_input(pd->model), n, peer, tag); break;
    case ACT_RECV_GRAD: device_comm_recv(pd->comm, gpt_device_stage_grad(pd->model), n, peer, tag); break;
    case ACT_SEND_ACTIVATION: device_comm_send(pd->comm, gpt_device_stage_output(pd->model), n, peer, tag); break;
    case ACT_SEND_GRAD: device_comm_send(pd->comm, gpt_device_stage_grad(pd->model), n, peer, tag); break;
    default: bs_die("internal: pipeline transfer of a compute action");
    }
    const bool recv = kind == ACT_RECV_ACTIVATION || kind == ACT_RECV_GRAD;
    if (!recv || !(pd->debug & PIPELINE_DEVICE_SKIP_RECV_WAIT)) device_comm_wait(pd->comm);
}

PipelineDevice *pipeline_device_create(Device *dev, GPTDevice *model, const EngineConfig *cfg, const EngineChunk *chunk,
                                       const Grid *g, int debug, char *reason, size_t reason_size) {
    PipelineDevice *pd = bs_calloc(1, sizeof *pd);
    *pd = (PipelineDevice){.dev = dev, .model = model, .group = g->pp_group, .stage = g->pp_index, .stages = g->pp,
                           .debug = debug, .nonfinite_layer = -1,
                           .stage_floats = (size_t)cfg->micro_batch * cfg->seq_len * (size_t)chunk->model.cfg.channels,
                           .wte_floats = gpt_tensor_numel(&chunk->model.cfg, TK_WTE)};
    pd->ops = (PipeChunkOps){.forward = op_forward, .backward = op_backward, .backward_split = op_backward_split,
                             .transfer = op_transfer, .ctx = pd};
    if (cfg->schedule == PIPE_ZBH1 && gpt_device_enable_split_backward(model) != 0) {
        snprintf(reason, reason_size, "%s", device_error(dev));
        pipeline_device_free(pd);
        return NULL;
    }
    pd->comm = device_comm_create(g->pp_group, dev, gpt_device_compute_stream(model), GPU_COMM_HOST, reason, reason_size);
    if (pd->stage == 0 && pd->comm && !(pd->tied_grad = device_alloc(dev, pd->wte_floats * sizeof(float))))
        snprintf(reason, reason_size, "%s", device_error(dev));
    if (!pd->comm || (pd->stage == 0 && !pd->tied_grad)) {
        pipeline_device_free(pd);
        return NULL;
    }
    PipeChunk stage = {(GPT *)&chunk->model, NULL, &pd->ops};
    pd->pipe = pipeline_create(g->pp_group, g->pp_index, g->pp, &stage, 1, cfg->schedule, cfg->micro_batch, cfg->seq_len);
    return pd;
}

void pipeline_device_free(PipelineDevice *pd) {
    if (!pd) return;
    pipeline_free(pd->pipe);
    device_comm_free(pd->comm);
    device_free(pd->dev, pd->tied_grad);
    free(pd);
}

/* The head's gradient of the tied weights, summed into the first stage's wte gradient. */
static void add_tied_grads(PipelineDevice *pd) {
    const int last = pd->stages - 1;
    if (pd->stage == last) device_comm_send(pd->comm, gpt_device_head_wte(pd->model, GPT_DEVICE_GRADS), pd->wte_floats, 0, TAG_TIED_GRADS);
    if (pd->stage == 0) {
        device_comm_recv(pd->comm, pd->tied_grad, pd->wte_floats, last, TAG_TIED_GRADS);
        device_comm_wait(pd->comm);
        float *dwte = gpt_device_array(pd->model, GPT_DEVICE_GRADS); /* wte leads the first stage's layout */
        DeviceCall add = {.kernel = DK_RESIDUAL_FORWARD, .a.elementwise = {dwte, dwte, pd->tied_grad, pd->wte_floats}};
        check(pd, device_launch(pd->dev, gpt_device_compute_stream(pd->model), &add));
    }
    device_comm_finish(pd->comm);
}

double pipeline_device_train(PipelineDevice *pd, int m, float dloss, PipeLoad load, void *ctx) {
    pd->nonfinite_layer = -1;
    pd->training = true;
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
    device_comm_finish(pd->comm);
    return loss;
}

int pipeline_device_nonfinite_layer(const PipelineDevice *pd) { return pd->nonfinite_layer; }

void pipeline_device_upload_head(PipelineDevice *pd, const GPT *host) {
    float *head = gpt_device_head_wte(pd->model, GPT_DEVICE_PARAMS);
    if (!head) return;
    DeviceStream *s = gpt_device_compute_stream(pd->model);
    check(pd, device_copy(pd->dev, s, head, host->head_wte, pd->wte_floats * sizeof(float), COPY_HOST_TO_DEVICE));
    check(pd, gpt_device_head_changed(pd->model));
    check(pd, device_stream_sync(pd->dev, s));
}

void pipeline_device_share_weights(PipelineDevice *pd) {
    const int last = pd->stages - 1;
    if (pd->stage == 0) device_comm_send(pd->comm, gpt_device_array(pd->model, GPT_DEVICE_PARAMS), pd->wte_floats, last, TAG_TIED_WEIGHTS);
    if (pd->stage == last) {
        device_comm_recv(pd->comm, gpt_device_head_wte(pd->model, GPT_DEVICE_PARAMS), pd->wte_floats, 0, TAG_TIED_WEIGHTS);
        device_comm_wait(pd->comm);
        check(pd, gpt_device_head_changed(pd->model));
    }
    device_comm_finish(pd->comm);
}

void pipeline_device_sum(PipelineDevice *pd, double *x, int n) { comm_allreduce_double(pd->group, x, n); }

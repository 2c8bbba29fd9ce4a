/* pipeline.c: GPipe and 1F1B schedules over point-to-point messages (see pipeline.h). */
#include "parallel/pipeline.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/timer.h"
#include "core/trace.h"

typedef struct {
    GPTActs acts;
    int32_t *inputs, *targets;
    CommOp *send; /* the forward send of its output, in flight */
    bool in_use;
} ActSlot;

struct Pipeline {
    Grid *grid;
    GPT *model;
    DataParallel *dp;
    PipeSchedule schedule;
    int B, T, stage, stages;
    ActSlot *slots;
    int num_slots;
    int *slot_of; /* micro-batch -> slot */
    int slot_of_capacity;
    float *grad_send[2]; /* gradients to the previous stage, in flight */
    CommOp *grad_op[2];
    int next_grad_buf;
    PipeStats stats;
    int live;
    Trace *trace;
};

void pipeline_set_trace(Pipeline *p, Trace *trace) { p->trace = trace; }

bool pipeline_parse_schedule(const char *name, PipeSchedule *out) {
    if (strcmp(name, "gpipe") == 0) *out = PIPE_GPIPE;
    else if (strcmp(name, "1f1b") == 0) *out = PIPE_1F1B;
    else return false;
    return true;
}

Pipeline *pipeline_create(Grid *grid, GPT *model, DataParallel *dp, PipeSchedule schedule, int B, int T) {
    Pipeline *p = bs_calloc(1, sizeof *p);
    p->grid = grid;
    p->model = model;
    p->dp = dp;
    p->schedule = schedule;
    p->B = B;
    p->T = T;
    p->stage = grid->pp_index;
    p->stages = grid->pp;
    size_t n = (size_t)B * T * (size_t)model->cfg.channels;
    for (int i = 0; i < 2; i++) p->grad_send[i] = bs_malloc(n * sizeof(float));
    return p;
}

void pipeline_free(Pipeline *p) {
    if (!p) return;
    for (int i = 0; i < p->num_slots; i++) {
        gpt_acts_free(&p->slots[i].acts);
        free(p->slots[i].inputs);
        free(p->slots[i].targets);
    }
    free(p->slots);
    free(p->slot_of);
    for (int i = 0; i < 2; i++) free(p->grad_send[i]);
    free(p);
}

/* Activation sets are made on first need and kept (one allocation per shape). */
static int acquire_slot(Pipeline *p) {
    for (int i = 0; i < p->num_slots; i++)
        if (!p->slots[i].in_use) {
            p->slots[i].in_use = true;
            return i;
        }
    p->slots = realloc(p->slots, sizeof(ActSlot) * (size_t)(p->num_slots + 1));
    if (!p->slots) bs_die("out of memory for pipeline activations");
    ActSlot *s = &p->slots[p->num_slots];
    memset(s, 0, sizeof *s);
    gpt_acts_create(&s->acts, &p->model->cfg, p->B, p->T, true);
    if (p->num_slots > 0) gpt_acts_share_backward(&s->acts, &p->slots[0].acts); /* one backward at a time */
    s->inputs = bs_malloc((size_t)p->B * p->T * sizeof(int32_t));
    s->targets = bs_malloc((size_t)p->B * p->T * sizeof(int32_t));
    s->in_use = true;
    return p->num_slots++;
}

static void wait_timed(Pipeline *p, CommOp *op) {
    double t0 = bs_now();
    comm_wait(op);
    double t1 = bs_now();
    p->stats.idle += t1 - t0;
    if (t1 - t0 > 1e-4) trace_add(p->trace, "pipeline wait", "idle", t0, t1);
}

static int tag_of(int micro, int gradient) { return (micro % 16384) * 2 + gradient; }

static void forward(Pipeline *p, int micro, float dloss, PipeLoad load, void *ctx, bool training) {
    const GPTConfig *cfg = &p->model->cfg;
    const size_t n = (size_t)p->B * p->T * (size_t)cfg->channels;
    int k = acquire_slot(p);
    ActSlot *s = &p->slots[k];
    if (micro >= p->slot_of_capacity) {
        p->slot_of_capacity = 2 * micro + 16;
        p->slot_of = realloc(p->slot_of, sizeof(int) * (size_t)p->slot_of_capacity);
        if (!p->slot_of) bs_die("out of memory");
    }
    p->slot_of[micro] = k;
    if (++p->live > p->stats.max_live) p->stats.max_live = p->live;
    load(ctx, micro, s->inputs, s->targets);
    if (p->stage > 0)
        wait_timed(p, comm_start_recv(p->grid->pp_group, gpt_stage_input(cfg, &s->acts), n, p->stage - 1,
                                      tag_of(micro, 0)));
    const BlockAccess *access = training ? dp_micro_access(p->dp, false) : dp_eval_access(p->dp);
    double t0 = bs_now();
    p->stats.loss_sum +=
        gpt_forward(p->model, &s->acts, s->inputs, s->targets, p->B, p->T, training ? dloss : 0.0f, access);
    p->stats.busy += bs_now() - t0;
    trace_add(p->trace, training ? "forward" : "eval forward", "compute", t0, bs_now());
    if (p->stage < p->stages - 1)
        s->send = comm_start_send(p->grid->pp_group, gpt_stage_output(cfg, &s->acts), n, p->stage + 1,
                                  tag_of(micro, 0));
}

static void release_slot(Pipeline *p, int micro) {
    ActSlot *s = &p->slots[p->slot_of[micro]];
    if (s->send) wait_timed(p, s->send);
    s->send = NULL;
    s->in_use = false;
    p->live--;
}

static void backward(Pipeline *p, int micro, bool last) {
    const GPTConfig *cfg = &p->model->cfg;
    const size_t n = (size_t)p->B * p->T * (size_t)cfg->channels;
    ActSlot *s = &p->slots[p->slot_of[micro]];
    if (p->stage < p->stages - 1)
        wait_timed(p, comm_start_recv(p->grid->pp_group, gpt_stage_grad(&s->acts), n, p->stage + 1,
                                      tag_of(micro, 1)));
    const BlockAccess *access = dp_micro_access(p->dp, last);
    double t0 = bs_now();
    gpt_backward(p->model, &s->acts, s->inputs, p->B, p->T, access);
    dp_end_micro(p->dp);
    p->stats.busy += bs_now() - t0;
    trace_add(p->trace, "backward", "compute", t0, bs_now());
    if (p->stage > 0) { /* the gradient of this stage's input goes back; copy it out of the shared scratch */
        int b = p->next_grad_buf;
        p->next_grad_buf ^= 1;
        if (p->grad_op[b]) wait_timed(p, p->grad_op[b]);
        memcpy(p->grad_send[b], gpt_stage_grad(&s->acts), n * sizeof(float));
        p->grad_op[b] = comm_start_send(p->grid->pp_group, p->grad_send[b], n, p->stage - 1, tag_of(micro, 1));
    }
    release_slot(p, micro);
}

static void finish_sends(Pipeline *p) {
    for (int b = 0; b < 2; b++)
        if (p->grad_op[b]) {
            wait_timed(p, p->grad_op[b]);
            p->grad_op[b] = NULL;
        }
}

/* Backward of micro-batch i, with the hook before the last one. */
static void backward_at(Pipeline *p, int i, int m, const PipeHooks *hooks) {
    if (i == m - 1 && hooks && hooks->before_last_backward) hooks->before_last_backward(hooks->ctx);
    backward(p, i, i == m - 1);
    if (i == m - 1 && hooks && hooks->after_last_backward) hooks->after_last_backward(hooks->ctx);
}

PipeStats pipeline_train(Pipeline *p, int m, float dloss, PipeLoad load, void *ctx, const PipeHooks *hooks) {
    memset(&p->stats, 0, sizeof p->stats);
    p->live = 0;
    if (p->stages == 1) { /* plain accumulation: one activation set alive */
        for (int i = 0; i < m; i++) {
            forward(p, i, dloss, load, ctx, true);
            backward_at(p, i, m, hooks);
        }
    } else if (p->schedule == PIPE_GPIPE) {
        for (int i = 0; i < m; i++) forward(p, i, dloss, load, ctx, true);
        for (int i = 0; i < m; i++) backward_at(p, i, m, hooks);
    } else {
        int warmup = p->stages - p->stage - 1;
        if (warmup > m) warmup = m;
        for (int i = 0; i < warmup; i++) forward(p, i, dloss, load, ctx, true);
        for (int j = 0; j < m - warmup; j++) {
            forward(p, warmup + j, dloss, load, ctx, true);
            backward_at(p, j, m, hooks);
        }
        for (int j = m - warmup; j < m; j++) backward_at(p, j, m, hooks);
    }
    finish_sends(p);
    return p->stats;
}

double pipeline_eval(Pipeline *p, int m, int counted, PipeLoad load, void *ctx) {
    memset(&p->stats, 0, sizeof p->stats);
    p->live = 0;
    double loss = 0;
    for (int i = 0; i < m; i++) {
        double before = p->stats.loss_sum;
        forward(p, i < counted ? i : 0, 0.0f, load, ctx, false);
        if (i < counted) loss += p->stats.loss_sum - before;
        release_slot(p, i < counted ? i : 0);
    }
    return loss;
}

/* pipeline.c: the executor of pipeline action lists (see pipeline.h). */
#include "parallel/pipeline.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/reason.h"
#include "core/timer.h"
#include "core/trace.h"

enum { KIND_FORWARD = PIPE_FORWARD, KIND_BACKWARD = PIPE_BACKWARD, KIND_INPUT = PIPE_BACKWARD_INPUT,
       KIND_WEIGHT = PIPE_BACKWARD_WEIGHT };
#define MAX_CHUNKS PIPE_MAX_CHUNKS

typedef struct {
    GPTActs acts;
    int32_t *inputs, *targets;
    float *grad_out;     /* the gradient of the set's input, kept for its send */
    CommOp *send, *grad_send;
    int micro;
    bool in_use, grads_done, grad_sent;
} ActSlot;

typedef struct {
    PipeChunk chunk;
    int virtual_stage;
    ActSlot *slots;
    int num_slots;
    int last_grad_action; /* index in the step's list of the chunk's last gradient-producing action */
} ChunkState;

struct Pipeline {
    Comm *group;
    int stage, stages, num_chunks, virtual_stages;
    ChunkState chunks[MAX_CHUNKS];
    ScheduleShape shape;
    ActionList *lists; /* every stage's, for the simulation; this rank's is lists[stage] */
    const ActionList *list; /* = &lists[stage] */
    int B, T;
    PipeStats stats;
    int live;
    Trace *trace;
};

void pipeline_set_trace(Pipeline *p, Trace *trace) { p->trace = trace; }

size_t pipeline_activation_bytes(const Pipeline *p) {
    size_t total = 0;
    for (int c = 0; c < p->num_chunks; c++) {
        const ChunkState *cs = &p->chunks[c];
        const GPTConfig *cfg = &cs->chunk.model->cfg;
        size_t forward = gpt_acts_bytes(cfg, p->B, p->T, false);
        if (cs->num_slots > 0) total += gpt_acts_bytes(cfg, p->B, p->T, true) - forward; /* the shared scratch */
        for (int i = 0; i < cs->num_slots; i++)
            total += forward + (cs->slots[i].acts.stash ? gpt_acts_stash_bytes(cfg, p->B, p->T) : 0);
    }
    return total;
}

Pipeline *pipeline_create(Comm *pp_group, int stage, int stages, const PipeChunk *chunks, int num_chunks,
                          PipeSchedule schedule, int B, int T) {
    if (num_chunks < 1 || num_chunks > MAX_CHUNKS) bs_die_about("virtual_stages", "a stage holds 1..%d virtual stages", MAX_CHUNKS);
    Pipeline *p = bs_calloc(1, sizeof *p);
    p->group = pp_group;
    p->stage = stage;
    p->stages = stages;
    p->num_chunks = num_chunks;
    p->virtual_stages = stages * num_chunks;
    for (int c = 0; c < num_chunks; c++) {
        p->chunks[c].chunk = chunks[c];
        p->chunks[c].virtual_stage = c * stages + stage;
    }
    p->shape = (ScheduleShape){schedule, stages, num_chunks, 0};
    p->B = B;
    p->T = T;
    return p;
}

static void free_lists(Pipeline *p) {
    if (p->lists)
        for (int s = 0; s < p->stages; s++) action_list_free(&p->lists[s]);
    free(p->lists);
    p->lists = NULL;
}

void pipeline_free(Pipeline *p) {
    if (!p) return;
    for (int c = 0; c < p->num_chunks; c++) {
        ChunkState *cs = &p->chunks[c];
        for (int i = 0; i < cs->num_slots; i++) {
            gpt_acts_free(&cs->slots[i].acts);
            free(cs->slots[i].inputs);
            free(cs->slots[i].targets);
            free(cs->slots[i].grad_out);
        }
        free(cs->slots);
    }
    free_lists(p);
    free(p);
}

static size_t stage_floats(const Pipeline *p, int chunk) {
    return (size_t)p->B * p->T * (size_t)p->chunks[chunk].chunk.model->cfg.channels;
}

static void wait_timed(Pipeline *p, CommOp *op) {
    double t0 = bs_now();
    comm_wait(op);
    double t1 = bs_now();
    p->stats.idle += t1 - t0;
    if (t1 - t0 > 1e-4) trace_add(p->trace, "pipeline wait", "idle", t0, t1);
}

/* A fresh activation set for (chunk, micro): a free one whose input
 * gradient has been received (the previous stage may take it only much
 * later in its list: waiting for it here would stall this stage where the
 * schedule has it compute), else a new one. Sets of one chunk share one
 * backward scratch (one backward runs at a time; what a split backward's W
 * needs lives in the set itself). */
static ActSlot *acquire_slot(Pipeline *p, int chunk, int micro, bool split) {
    ChunkState *cs = &p->chunks[chunk];
    ActSlot *s = NULL;
    for (int i = 0; i < cs->num_slots && !s; i++) { /* a free set whose gradient has left: never wait for one */
        ActSlot *free_set = &cs->slots[i];
        if (free_set->in_use) continue;
        if (free_set->grad_send && comm_test(free_set->grad_send)) free_set->grad_send = NULL;
        if (!free_set->grad_send) s = free_set;
    }
    if (!s) {
        cs->slots = realloc(cs->slots, sizeof(ActSlot) * (size_t)(cs->num_slots + 1));
        if (!cs->slots) bs_die("out of memory for pipeline activations");
        s = &cs->slots[cs->num_slots];
        memset(s, 0, sizeof *s);
        const GPTConfig *cfg = &cs->chunk.model->cfg;
        if (!cs->chunk.ops) { /* ops keep the set's activations themselves */
            if (split) gpt_acts_create_split(&s->acts, cfg, p->B, p->T);
            else gpt_acts_create(&s->acts, cfg, p->B, p->T, true);
            if (cs->num_slots > 0) gpt_acts_share_backward(&s->acts, &cs->slots[0].acts);
            s->grad_out = bs_malloc(stage_floats(p, chunk) * sizeof(float));
        }
        s->inputs = bs_malloc((size_t)p->B * p->T * sizeof(int32_t));
        s->targets = bs_malloc((size_t)p->B * p->T * sizeof(int32_t));
        cs->num_slots++;
    }
    s->micro = micro;
    s->in_use = true;
    s->grads_done = s->grad_sent = false;
    if (++p->live > p->stats.max_live) p->stats.max_live = p->live;
    return s;
}

/* The set's index among its chunk's (what ops call it). */
static int set_of(const Pipeline *p, int chunk, const ActSlot *s) { return (int)(s - p->chunks[chunk].slots); }

static ActSlot *slot_of(Pipeline *p, int chunk, int micro) {
    ChunkState *cs = &p->chunks[chunk];
    for (int i = 0; i < cs->num_slots; i++)
        if (cs->slots[i].in_use && cs->slots[i].micro == micro) return &cs->slots[i];
    return NULL;
}

/* Given back once its gradients are done and the input gradient has left
 * (the forward send is waited for here; the gradient send at the next use). */
static void maybe_release(Pipeline *p, int chunk, ActSlot *s) {
    bool first = p->chunks[chunk].virtual_stage == 0;
    if (!s->grads_done || (!first && !s->grad_sent)) return;
    if (s->send) wait_timed(p, s->send);
    s->send = NULL;
    s->in_use = false;
    p->live--;
}

/* A message is named by its micro-batch, direction and the chunk that receives it (both sides know it: the
 * neighbour of virtual stage k is k + 1 forward, k - 1 backward). */
static int tag_of(int micro, int receiving_chunk, int gradient) {
    return ((micro % 2048) * MAX_CHUNKS + receiving_chunk) * 2 + gradient;
}

static int chunk_of_stage(const Pipeline *p, int virtual_stage) { return virtual_stage / p->stages; }

static void load_tokens(ActSlot *s, PipeLoad load, void *ctx) { load(ctx, s->micro, s->inputs, s->targets); }

static void forward(Pipeline *p, const Action *a, float dloss, PipeLoad load, void *ctx, bool training) {
    ActSlot *s = slot_of(p, a->chunk, a->micro);
    if (!s) s = acquire_slot(p, a->chunk, a->micro, p->shape.schedule == PIPE_ZBH1);
    PipeChunk *ch = &p->chunks[a->chunk].chunk;
    load_tokens(s, load, ctx);
    const BlockAccess *access = ch->ops ? NULL : training ? dp_micro_access(ch->dp, false) : dp_eval_access(ch->dp);
    double t0 = bs_now();
    const float d = training ? dloss : 0.0f;
    p->stats.loss_sum += ch->ops ? ch->ops->forward(ch->ops->ctx, set_of(p, a->chunk, s), s->inputs, s->targets, d)
                                 : gpt_forward(ch->model, &s->acts, s->inputs, s->targets, p->B, p->T, d, access);
    double t1 = bs_now();
    p->stats.busy += t1 - t0;
    p->stats.seconds[a->chunk][KIND_FORWARD] += t1 - t0;
    p->stats.count[a->chunk][KIND_FORWARD]++;
    trace_add(p->trace, training ? "forward" : "eval forward", "compute", t0, t1);
}

/* Fused backward, its input half (B) or its weight half (W). */
static void backward(Pipeline *p, const Action *a, int index, const PipeHooks *hooks) {
    ActSlot *s = slot_of(p, a->chunk, a->micro);
    if (!s) bs_die("internal: pipeline backward of micro-batch %d chunk %d without its forward", a->micro, a->chunk);
    PipeChunk *ch = &p->chunks[a->chunk].chunk;
    const bool last = index == p->chunks[a->chunk].last_grad_action;
    const int kind = a->kind == ACT_BACKWARD ? KIND_BACKWARD : a->kind == ACT_BACKWARD_INPUT ? KIND_INPUT : KIND_WEIGHT;
    if (kind != KIND_INPUT && last && hooks && hooks->before_last_grads) hooks->before_last_grads(hooks->ctx, a->chunk);
    double t0 = bs_now();
    if (ch->ops) {
        const int set = set_of(p, a->chunk, s);
        if (kind == KIND_BACKWARD) ch->ops->backward(ch->ops->ctx, set);
        else if (ch->ops->backward_split) ch->ops->backward_split(ch->ops->ctx, set, kind == KIND_WEIGHT);
        else bs_die("internal: a split backward on a chunk without a weight-only backward");
    } else if (kind == KIND_INPUT) {
        gpt_backward_input(ch->model, &s->acts, s->inputs, p->B, p->T, dp_input_access(ch->dp));
        dp_end_input(ch->dp);
    } else {
        const BlockAccess *access = dp_micro_access(ch->dp, last);
        if (kind == KIND_BACKWARD) gpt_backward(ch->model, &s->acts, s->inputs, p->B, p->T, access);
        else gpt_backward_weight(ch->model, &s->acts, s->inputs, p->B, p->T, access);
        dp_end_micro(ch->dp);
    }
    double t1 = bs_now();
    p->stats.busy += t1 - t0;
    p->stats.seconds[a->chunk][kind] += t1 - t0;
    p->stats.count[a->chunk][kind]++;
    trace_add(p->trace, kind == KIND_BACKWARD ? "backward" : kind == KIND_INPUT ? "backward B" : "backward W", "compute",
              t0, t1);
    if (kind != KIND_WEIGHT && p->chunks[a->chunk].virtual_stage > 0 && !ch->ops) /* out of the shared scratch, for its send */
        memcpy(s->grad_out, gpt_stage_grad(&s->acts), stage_floats(p, a->chunk) * sizeof(float));
    if (kind != KIND_INPUT) {
        if (last && hooks && hooks->after_last_grads) hooks->after_last_grads(hooks->ctx, a->chunk);
        s->grads_done = true;
        maybe_release(p, a->chunk, s);
    }
}

/* A send or receive through the chunk's ops (a receive's time counted idle, as a CPU wait). */
static void transfer(Pipeline *p, const Action *a, ActSlot *s, int tag) {
    const PipeChunkOps *ops = p->chunks[a->chunk].chunk.ops;
    double t0 = bs_now();
    ops->transfer(ops->ctx, set_of(p, a->chunk, s), a->kind, a->peer, tag);
    if (a->kind == ACT_RECV_ACTIVATION || a->kind == ACT_RECV_GRAD) p->stats.idle += bs_now() - t0;
    if (a->kind == ACT_SEND_GRAD) {
        s->grad_sent = true;
        maybe_release(p, a->chunk, s);
    }
}

static void communicate(Pipeline *p, const Action *a) {
    const size_t n = stage_floats(p, a->chunk);
    ActSlot *s = slot_of(p, a->chunk, a->micro);
    if (p->chunks[a->chunk].chunk.ops) {
        const int vs = p->chunks[a->chunk].virtual_stage, receiving =
            a->kind == ACT_SEND_ACTIVATION ? chunk_of_stage(p, vs + 1) : a->kind == ACT_SEND_GRAD ? chunk_of_stage(p, vs - 1) : a->chunk;
        if (!s) s = acquire_slot(p, a->chunk, a->micro, false); /* a receive of the set's input */
        transfer(p, a, s, tag_of(a->micro, receiving, a->kind == ACT_RECV_GRAD || a->kind == ACT_SEND_GRAD));
        return;
    }
    const GPTConfig *cfg = &p->chunks[a->chunk].chunk.model->cfg;
    const int vs = p->chunks[a->chunk].virtual_stage;
    switch (a->kind) {
    case ACT_RECV_ACTIVATION:
        if (!s) s = acquire_slot(p, a->chunk, a->micro, p->shape.schedule == PIPE_ZBH1);
        wait_timed(p, comm_start_recv(p->group, gpt_stage_input(cfg, &s->acts), n, a->peer, tag_of(a->micro, a->chunk, 0)));
        break;
    case ACT_SEND_ACTIVATION:
        s->send = comm_start_send(p->group, gpt_stage_output(cfg, &s->acts), n, a->peer,
                                  tag_of(a->micro, chunk_of_stage(p, vs + 1), 0));
        break;
    case ACT_RECV_GRAD: /* into the shared scratch the backward that follows reads */
        wait_timed(p, comm_start_recv(p->group, gpt_stage_grad(&s->acts), n, a->peer, tag_of(a->micro, a->chunk, 1)));
        break;
    case ACT_SEND_GRAD:
        s->grad_send = comm_start_send(p->group, s->grad_out, n, a->peer, tag_of(a->micro, chunk_of_stage(p, vs - 1), 1));
        s->grad_sent = true;
        maybe_release(p, a->chunk, s);
        break;
    default:
        break;
    }
}

/* The list for m micro-batches, built and validated when m changes (the
 * validation runs every rank's list: a schedule that could deadlock or
 * lose a message never starts). */
static void prepare_list(Pipeline *p, int m) {
    if (p->shape.micro == m && p->lists) return;
    ScheduleShape shape = p->shape;
    shape.micro = m;
    char why[256];
    if (!schedule_check(&shape, why, sizeof why)) bs_die("%s", why);
    free_lists(p);
    p->lists = bs_calloc((size_t)p->stages, sizeof(ActionList));
    for (int s = 0; s < p->stages; s++) schedule_build(&shape, s, &p->lists[s]);
    if (!schedule_validate(&shape, p->lists, why, sizeof why))
        bs_die("internal: the %s schedule for %d micro-batches is invalid: %s", pipe_schedule_name(shape.schedule), m,
               why);
    p->shape = shape;
    p->list = &p->lists[p->stage];
    for (int c = 0; c < p->num_chunks; c++) p->chunks[c].last_grad_action = -1;
    for (int i = 0; i < p->list->count; i++) {
        const Action *a = &p->list->items[i];
        if (a->kind == ACT_BACKWARD || a->kind == ACT_BACKWARD_WEIGHT) p->chunks[a->chunk].last_grad_action = i;
    }
}

double pipeline_simulated_bubble(const Pipeline *p, const double *means) {
    if (!p->lists) return -1;
    const int v = p->num_chunks;
    double *costs = bs_calloc((size_t)p->stages * (size_t)v * ACT_KIND_COUNT, sizeof(double));
    for (int s = 0; s < p->stages; s++)
        for (int c = 0; c < v; c++) {
            const double *m = means + ((size_t)s * v + c) * PIPE_COMPUTE_KINDS;
            double *k = costs + ((size_t)s * v + c) * ACT_KIND_COUNT;
            k[ACT_FORWARD] = m[PIPE_FORWARD];
            k[ACT_BACKWARD] = m[PIPE_BACKWARD];
            k[ACT_BACKWARD_INPUT] = m[PIPE_BACKWARD_INPUT];
            k[ACT_BACKWARD_WEIGHT] = m[PIPE_BACKWARD_WEIGHT];
        }
    StageSim *sim = bs_calloc((size_t)p->stages, sizeof(StageSim));
    double worst = -1;
    if (schedule_simulate_costs(&p->shape, p->lists, costs, sim))
        for (int s = 0; s < p->stages; s++) {
            double total = sim[s].busy + sim[s].waiting;
            double share = total > 0 ? sim[s].waiting / total : 0;
            if (share > worst) worst = share;
        }
    free(sim);
    free(costs);
    return worst;
}

static void finish_sends(Pipeline *p) {
    for (int c = 0; c < p->num_chunks; c++)
        for (int i = 0; i < p->chunks[c].num_slots; i++) {
            ActSlot *s = &p->chunks[c].slots[i];
            if (s->grad_send) wait_timed(p, s->grad_send);
            if (s->send) wait_timed(p, s->send);
            s->grad_send = s->send = NULL;
        }
}

PipeStats pipeline_train(Pipeline *p, int m, float dloss, PipeLoad load, void *ctx, const PipeHooks *hooks) {
    memset(&p->stats, 0, sizeof p->stats);
    p->live = 0;
    prepare_list(p, m);
    for (int i = 0; i < p->list->count; i++) {
        const Action *a = &p->list->items[i];
        if (a->kind == ACT_FORWARD) forward(p, a, dloss, load, ctx, true);
        else if (a->kind == ACT_BACKWARD || a->kind == ACT_BACKWARD_INPUT || a->kind == ACT_BACKWARD_WEIGHT)
            backward(p, a, i, hooks);
        else communicate(p, a);
    }
    finish_sends(p);
    return p->stats;
}

/* Evaluation: for each micro-batch, the chunks in order, each receiving its
 * input, running forward and passing its output on. */
double pipeline_eval(Pipeline *p, int m, int counted, PipeLoad load, void *ctx) {
    memset(&p->stats, 0, sizeof p->stats);
    p->live = 0;
    double loss = 0;
    const int prev = (p->stage + p->stages - 1) % p->stages, next = (p->stage + 1) % p->stages;
    for (int i = 0; i < m; i++)
        for (int c = 0; c < p->num_chunks; c++) {
            const int micro = i < counted ? i : 0, vs = p->chunks[c].virtual_stage;
            Action a = {ACT_RECV_ACTIVATION, c, micro, prev};
            if (vs > 0) communicate(p, &a);
            double before = p->stats.loss_sum;
            a.kind = ACT_FORWARD;
            forward(p, &a, 0.0f, load, ctx, false);
            if (i < counted) loss += p->stats.loss_sum - before;
            a.kind = ACT_SEND_ACTIVATION;
            a.peer = next;
            if (vs < p->virtual_stages - 1) communicate(p, &a);
            ActSlot *s = slot_of(p, c, micro);
            s->grads_done = s->grad_sent = true;
            maybe_release(p, c, s);
        }
    return loss;
}

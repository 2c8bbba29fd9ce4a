/* schedule.c: the schedule generators, the shape check, the names and the
 * closed-form bubbles (see schedule.h). Validation and simulation replay the
 * lists in schedule_replay.c. */
#include "parallel/schedule.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/reason.h"

static const char *const SCHEDULE_NAMES[PIPE_SCHEDULE_COUNT] = {"gpipe", "1f1b", "interleaved", "zbh1"};
static const char *const KIND_NAMES[ACT_KIND_COUNT] = {
    "F", "BW", "B", "W", "recv activation", "send activation", "recv gradient", "send gradient"};

const char *pipe_schedule_name(PipeSchedule s) {
    return (unsigned)s < PIPE_SCHEDULE_COUNT ? SCHEDULE_NAMES[s] : "unknown";
}

bool pipe_schedule_parse(const char *name, PipeSchedule *out) {
    for (int i = 0; i < PIPE_SCHEDULE_COUNT; i++)
        if (strcmp(name, SCHEDULE_NAMES[i]) == 0) {
            *out = (PipeSchedule)i;
            return true;
        }
    return false;
}

const char *action_kind_name(ActionKind k) { return (unsigned)k < ACT_KIND_COUNT ? KIND_NAMES[k] : "unknown"; }

bool action_is_compute(ActionKind k) { return k <= ACT_BACKWARD_WEIGHT; }

bool schedule_check(const ScheduleShape *s, char *why, size_t n) {
    const int p = s->stages, v = s->chunks, m = s->micro;
    const char *name = pipe_schedule_name(s->schedule);
    if ((unsigned)s->schedule >= PIPE_SCHEDULE_COUNT)
        bs_reason(why, n, "pp_schedule", "the pipeline schedule must be gpipe, 1f1b, interleaved or zbh1");
    else if (p < 1)
        bs_reason(why, n, "pp", "the pipeline needs at least 1 stage (got %d)", p);
    else if (m < 1)
        bs_reason(why, n, "global_batch micro_batch", "the global and micro batches give %d micro-batches per step: at least 1 is needed", m);
    else if (v < 1)
        bs_reason(why, n, "virtual_stages", "each stage needs at least 1 virtual stage (got %d)", v);
    else if (v > 1 && s->schedule != PIPE_INTERLEAVED)
        bs_reason(why, n, "virtual_stages pp_schedule", "%d virtual stages need the interleaved pipeline schedule (got %s)", v, name);
    else if (p == 1 && (s->schedule == PIPE_INTERLEAVED || s->schedule == PIPE_ZBH1))
        bs_reason(why, n, "pp_schedule pp", "the %s pipeline schedule needs 2 or more stages (got 1)", name);
    else if (s->schedule == PIPE_INTERLEAVED && m % p != 0)
        bs_reason(why, n, "pp_schedule global_batch micro_batch pp",
                  "the interleaved pipeline schedule needs the micro-batches per step (%d) to be a multiple of the %d "
                  "pipeline stages",
                  m, p);
    else
        return true;
    return false;
}

/* ---- building lists ---- */

static void push(ActionList *l, ActionKind kind, int chunk, int micro, int peer) {
    if (l->count == l->capacity) {
        int capacity = l->capacity ? 2 * l->capacity : 64;
        Action *items = realloc(l->items, sizeof(Action) * (size_t)capacity);
        if (!items) bs_die("out of memory for a pipeline schedule of %d actions", capacity);
        l->items = items;
        l->capacity = capacity;
    }
    l->items[l->count++] = (Action){kind, chunk, micro, peer};
}

typedef struct {
    const ScheduleShape *shape;
    int stage;
    ActionList *out;
} Builder;

static int virtual_stage(const Builder *b, int chunk) { return chunk * b->shape->stages + b->stage; }
static int last_virtual_stage(const Builder *b) { return b->shape->stages * b->shape->chunks - 1; }
static int next_rank(const Builder *b) { return (b->stage + 1) % b->shape->stages; }
static int previous_rank(const Builder *b) { return (b->stage + b->shape->stages - 1) % b->shape->stages; }

/* F with its receive before it and its send after it, where needed. */
static void emit_forward(Builder *b, int chunk, int micro) {
    int k = virtual_stage(b, chunk);
    if (k > 0) push(b->out, ACT_RECV_ACTIVATION, chunk, micro, previous_rank(b));
    push(b->out, ACT_FORWARD, chunk, micro, -1);
    if (k < last_virtual_stage(b)) push(b->out, ACT_SEND_ACTIVATION, chunk, micro, next_rank(b));
}

/* BW or B, with the gradient's receive before it and its send after it. */
static void emit_backward(Builder *b, ActionKind kind, int chunk, int micro) {
    int k = virtual_stage(b, chunk);
    if (k < last_virtual_stage(b)) push(b->out, ACT_RECV_GRAD, chunk, micro, next_rank(b));
    push(b->out, kind, chunk, micro, -1);
    if (k > 0) push(b->out, ACT_SEND_GRAD, chunk, micro, previous_rank(b));
}

static void build_accumulation(Builder *b) {
    for (int i = 0; i < b->shape->micro; i++) {
        emit_forward(b, 0, i);
        emit_backward(b, ACT_BACKWARD, 0, i);
    }
}

static void build_gpipe(Builder *b) {
    for (int i = 0; i < b->shape->micro; i++) emit_forward(b, 0, i);
    for (int i = 0; i < b->shape->micro; i++) emit_backward(b, ACT_BACKWARD, 0, i);
}

static int warmup_1f1b(const Builder *b) {
    int w = b->shape->stages - b->stage - 1;
    return w < b->shape->micro ? w : b->shape->micro;
}

static void build_1f1b(Builder *b) {
    const int m = b->shape->micro, w = warmup_1f1b(b);
    for (int i = 0; i < w; i++) emit_forward(b, 0, i);
    for (int j = 0; j < m - w; j++) {
        emit_forward(b, 0, w + j);
        emit_backward(b, ACT_BACKWARD, 0, j);
    }
    for (int j = m - w; j < m; j++) emit_backward(b, ACT_BACKWARD, 0, j);
}

/* Megatron-LM's order: the k-th forward (or backward) chunk of the step. */
static int interleaved_chunk(const ScheduleShape *s, int k, bool forward) {
    int c = (k / s->stages) % s->chunks;
    return forward ? c : s->chunks - 1 - c;
}
static int interleaved_micro(const ScheduleShape *s, int k) {
    return k / (s->stages * s->chunks) * s->stages + k % s->stages;
}

static void build_interleaved(Builder *b) {
    const ScheduleShape *s = b->shape;
    const int total = s->micro * s->chunks;
    int w = 2 * (s->stages - b->stage - 1) + (s->chunks - 1) * s->stages;
    if (w > total) w = total;
    for (int k = 0; k < w; k++) emit_forward(b, interleaved_chunk(s, k, true), interleaved_micro(s, k));
    for (int j = 0; j < total - w; j++) {
        emit_forward(b, interleaved_chunk(s, w + j, true), interleaved_micro(s, w + j));
        emit_backward(b, ACT_BACKWARD, interleaved_chunk(s, j, false), interleaved_micro(s, j));
    }
    for (int j = total - w; j < total; j++)
        emit_backward(b, ACT_BACKWARD, interleaved_chunk(s, j, false), interleaved_micro(s, j));
}

/* ZB-H1: 1F1B with the backward split; rank r holds its W back r steps in
 * the steady state, so F - W (live sets) peaks at (p-r-1) + 1 + r = p. */
static void build_zbh1(Builder *b) {
    const int m = b->shape->micro, w = warmup_1f1b(b);
    int next_w = 0;
    for (int i = 0; i < w; i++) emit_forward(b, 0, i);
    for (int j = 0; j < m - w; j++) {
        emit_forward(b, 0, w + j);
        emit_backward(b, ACT_BACKWARD_INPUT, 0, j);
        if (j >= b->stage) push(b->out, ACT_BACKWARD_WEIGHT, 0, next_w++, -1);
    }
    for (int j = m - w; j < m; j++) {
        emit_backward(b, ACT_BACKWARD_INPUT, 0, j);
        push(b->out, ACT_BACKWARD_WEIGHT, 0, next_w++, -1);
    }
    while (next_w < m) push(b->out, ACT_BACKWARD_WEIGHT, 0, next_w++, -1);
}

void schedule_build(const ScheduleShape *s, int stage, ActionList *out) {
    Builder b = {s, stage, out};
    out->count = 0;
    if (s->stages == 1) build_accumulation(&b);
    else if (s->schedule == PIPE_GPIPE) build_gpipe(&b);
    else if (s->schedule == PIPE_1F1B) build_1f1b(&b);
    else if (s->schedule == PIPE_INTERLEAVED) build_interleaved(&b);
    else build_zbh1(&b);
}

void action_list_free(ActionList *l) {
    free(l->items);
    *l = (ActionList){0};
}

/* ---- theory ---- */

double schedule_bubble_theory(const ScheduleShape *s, double f, double b, double w) {
    const double p = s->stages, m = s->micro, v = s->chunks;
    if (s->stages == 1) return 0.0;
    if (s->schedule == PIPE_GPIPE || s->schedule == PIPE_1F1B) return (p - 1) / (m + p - 1);
    if (s->schedule == PIPE_INTERLEAVED) return (p - 1) / (v * m + p - 1);
    /* zbh1's critical path: m + p - 1 of F + B, and its W: the m - p the last
     * stage runs before its last B (none when m < p), and rank 0's last one. */
    double path_w = m - p + 1 > 1 ? m - p + 1 : 1;
    double makespan = (m + p - 1) * (f + b) + path_w * w;
    return (makespan - m * (f + b + w)) / makespan;
}

/* schedule_replay.c: checking and replaying the p action lists of a step
 * (schedule_validate, schedule_simulate; see schedule.h).
 *
 * Validation runs in four passes, each assuming the ones before it passed:
 * each list alone (ranges, peers, duplicates, order, live count, number of
 * compute actions); the lists together (every send received, every receive
 * sent); each list's messages complete (every F and backward has the
 * receive and the send its virtual stage needs); and a replay with every
 * receive blocking, which finds deadlocks. The simulation is the same replay
 * with costs. Nothing here knows what an action computes. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/error.h"
#include "parallel/schedule.h"

/* What one list holds for one (chunk, micro), as bits. */
enum {
    HAS_RECV_ACT = 1 << 0,
    HAS_FORWARD = 1 << 1,
    HAS_SEND_ACT = 1 << 2,
    HAS_RECV_GRAD = 1 << 3,
    HAS_BACKWARD = 1 << 4, /* BW, or B in zbh1 */
    HAS_SEND_GRAD = 1 << 5,
    HAS_WEIGHT = 1 << 6
};

static int bit_of(ActionKind k) {
    switch (k) {
    case ACT_RECV_ACTIVATION: return HAS_RECV_ACT;
    case ACT_FORWARD: return HAS_FORWARD;
    case ACT_SEND_ACTIVATION: return HAS_SEND_ACT;
    case ACT_RECV_GRAD: return HAS_RECV_GRAD;
    case ACT_BACKWARD:
    case ACT_BACKWARD_INPUT: return HAS_BACKWARD;
    case ACT_SEND_GRAD: return HAS_SEND_GRAD;
    case ACT_BACKWARD_WEIGHT: return HAS_WEIGHT;
    }
    return 0;
}

typedef struct {
    const ScheduleShape *shape;
    const ActionList *lists;
    unsigned char *seen; /* [stage][chunk][micro]: HAS_* bits */
    char *why;
    size_t why_size;
} Checker;

static unsigned char *seen_at(const Checker *c, int stage, int chunk, int micro) {
    const ScheduleShape *s = c->shape;
    return &c->seen[((size_t)stage * s->chunks + chunk) * s->micro + micro];
}

/* zbh1 runs B and W; the others BW. (zbh1 needs p > 1: schedule_check.) */
static bool splits_backward(const ScheduleShape *s) { return s->schedule == PIPE_ZBH1; }

/* Live activation sets: one from an F until its W or BW. */
static int live_change(ActionKind k) {
    return k == ACT_FORWARD ? 1 : (k == ACT_BACKWARD || k == ACT_BACKWARD_WEIGHT) ? -1 : 0;
}

static int vstage_of(const ScheduleShape *s, int stage, int chunk) { return chunk * s->stages + stage; }
static int last_vstage(const ScheduleShape *s) { return s->stages * s->chunks - 1; }

/* The rank on the other side of a message, or -1 if the virtual stage has
 * no neighbour that way. */
static int expected_peer(const ScheduleShape *s, int stage, const Action *a) {
    int k = vstage_of(s, stage, a->chunk), p = s->stages;
    bool backwards = a->kind == ACT_RECV_ACTIVATION || a->kind == ACT_SEND_GRAD;
    if (backwards) return k > 0 ? (stage + p - 1) % p : -1;
    return k < last_vstage(s) ? (stage + 1) % p : -1;
}

/* Writes the reason and returns false. */
BS_PRINTF(2, 3) static bool fail(const Checker *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->why, c->why_size, fmt, ap);
    va_end(ap);
    return false;
}

/* Range, kind, peer and duplicates of one action. */
static bool check_fields(const Checker *c, int stage, int index, const Action *a) {
    const ScheduleShape *s = c->shape;
    if ((unsigned)a->kind >= ACT_KIND_COUNT)
        return fail(c, "stage %d: action %d has unknown kind %d", stage, index, a->kind);
    const char *name = action_kind_name(a->kind);
    if (a->chunk < 0 || a->chunk >= s->chunks || a->micro < 0 || a->micro >= s->micro)
        return fail(c, "stage %d: action %d (%s) has chunk %d micro %d, outside %d chunks x %d micro-batches", stage,
                    index, name, a->chunk, a->micro, s->chunks, s->micro);
    bool zbh1 = splits_backward(s);
    if (a->kind == ACT_BACKWARD && zbh1)
        return fail(c, "stage %d: BW of micro %d chunk %d is fused, but zbh1 splits every backward into B and W", stage,
                    a->micro, a->chunk);
    if ((a->kind == ACT_BACKWARD_INPUT || a->kind == ACT_BACKWARD_WEIGHT) && !zbh1)
        return fail(c, "stage %d: %s of micro %d chunk %d: only zbh1 splits the backward, %s runs BW", stage, name,
                    a->micro, a->chunk, pipe_schedule_name(s->schedule));
    int peer = action_is_compute(a->kind) ? -1 : expected_peer(s, stage, a);
    if (!action_is_compute(a->kind) && peer < 0)
        return fail(c, "stage %d: %s of micro %d chunk %d on virtual stage %d, which has no neighbour that way", stage,
                    name, a->micro, a->chunk, vstage_of(s, stage, a->chunk));
    if (a->peer != peer)
        return fail(c, "stage %d: %s of micro %d chunk %d has peer %d, expected %d", stage, name, a->micro, a->chunk,
                    a->peer, peer);
    if (*seen_at(c, stage, a->chunk, a->micro) & bit_of(a->kind))
        return fail(c, "stage %d: a second %s of micro %d chunk %d", stage, name, a->micro, a->chunk);
    return true;
}

/* What must come before an action in its list (0: nothing), and what must
 * not have come yet. */
static int required_before(ActionKind k) {
    switch (k) {
    case ACT_BACKWARD:
    case ACT_BACKWARD_INPUT:
    case ACT_SEND_ACTIVATION: return HAS_FORWARD;
    case ACT_BACKWARD_WEIGHT:
    case ACT_SEND_GRAD: return HAS_BACKWARD;
    default: return 0;
    }
}
static int forbidden_before(ActionKind k) {
    return k == ACT_RECV_ACTIVATION ? HAS_FORWARD : k == ACT_RECV_GRAD ? HAS_BACKWARD : 0;
}

/* One list alone: fields, live count, order, and the number of compute actions. */
static bool check_list(const Checker *c, int stage) {
    const ScheduleShape *s = c->shape;
    const ActionList *l = &c->lists[stage];
    int live = 0, compute = 0;
    for (int i = 0; i < l->count; i++) {
        const Action *a = &l->items[i];
        if (!check_fields(c, stage, i, a)) return false;
        unsigned char *seen = seen_at(c, stage, a->chunk, a->micro);
        const char *name = action_kind_name(a->kind);
        live += live_change(a->kind);
        if (live < 0)
            return fail(c, "stage %d: live activations negative at action %d (%s of micro %d chunk %d)", stage, i, name,
                        a->micro, a->chunk);
        int need = required_before(a->kind), forbid = forbidden_before(a->kind);
        if (need && !(*seen & need))
            return fail(c, "stage %d: %s of micro %d chunk %d before its %s", stage, name, a->micro, a->chunk,
                        need == HAS_FORWARD ? "F" : splits_backward(s) ? "B" : "BW");
        if (forbid && (*seen & forbid))
            return fail(c, "stage %d: %s of micro %d chunk %d after the compute that needs it", stage, name, a->micro,
                        a->chunk);
        *seen |= (unsigned char)bit_of(a->kind);
        compute += action_is_compute(a->kind);
    }
    int per_item = splits_backward(s) ? 3 : 2;
    int expected = per_item * s->micro * s->chunks;
    if (compute == expected) return true;
    for (int chunk = 0; chunk < s->chunks; chunk++)
        for (int micro = 0; micro < s->micro; micro++) {
            int seen = *seen_at(c, stage, chunk, micro);
            const char *missing = !(seen & HAS_FORWARD) ? "F" : !(seen & HAS_BACKWARD) ? (per_item == 3 ? "B" : "BW")
                                  : per_item == 3 && !(seen & HAS_WEIGHT) ? "W" : NULL;
            if (missing)
                return fail(c,
                            "stage %d: count of compute actions %d, expected %dmv=%d: %s of micro %d chunk %d missing",
                            stage, compute, per_item, expected, missing, micro, chunk);
        }
    return fail(c, "stage %d: count of compute actions %d, expected %dmv=%d", stage, compute, per_item, expected);
}

/* Where the other side of a message held in a list sits, and what it must hold. */
typedef struct {
    int bit, vstage_step, partner_bit;
    const char *verb, *what, *partner_verb;
} MessageRule;

static const MessageRule MESSAGE_RULES[] = {
    {HAS_SEND_ACT, +1, HAS_RECV_ACT, "sends", "activation", "receives"},
    {HAS_SEND_GRAD, -1, HAS_RECV_GRAD, "sends", "gradient", "receives"},
    {HAS_RECV_ACT, -1, HAS_SEND_ACT, "receives", "activation", "sends"},
    {HAS_RECV_GRAD, +1, HAS_SEND_GRAD, "receives", "gradient", "sends"},
};

/* The lists together: every message has both its ends. */
static bool check_messages_matched(const Checker *c) {
    const ScheduleShape *s = c->shape;
    for (int stage = 0; stage < s->stages; stage++)
        for (int chunk = 0; chunk < s->chunks; chunk++)
            for (int micro = 0; micro < s->micro; micro++)
                for (size_t r = 0; r < sizeof MESSAGE_RULES / sizeof MESSAGE_RULES[0]; r++) {
                    const MessageRule *rule = &MESSAGE_RULES[r];
                    if (!(*seen_at(c, stage, chunk, micro) & rule->bit)) continue;
                    int k = vstage_of(s, stage, chunk) + rule->vstage_step; /* in range: peers were checked */
                    int other = k % s->stages;
                    if (*seen_at(c, other, k / s->stages, micro) & rule->partner_bit) continue;
                    return fail(c, "stage %d %s %s of micro %d chunk %d that stage %d never %s", stage, rule->verb,
                                rule->what, micro, chunk, other, rule->partner_verb);
                }
    return true;
}

/* Each list: every F and backward has the messages its virtual stage needs. */
static bool check_messages_complete(const Checker *c) {
    const ScheduleShape *s = c->shape;
    const char *backward = splits_backward(s) ? "B" : "BW";
    for (int stage = 0; stage < s->stages; stage++)
        for (int chunk = 0; chunk < s->chunks; chunk++)
            for (int micro = 0; micro < s->micro; micro++) {
                int seen = *seen_at(c, stage, chunk, micro), k = vstage_of(s, stage, chunk);
                bool first = k == 0, last = k == last_vstage(s);
                if (!first && !(seen & HAS_RECV_ACT))
                    return fail(c, "stage %d: F of micro %d chunk %d has no recv activation before it", stage, micro,
                                chunk);
                if (!last && !(seen & HAS_SEND_ACT))
                    return fail(c, "stage %d: F of micro %d chunk %d has no send activation after it", stage, micro,
                                chunk);
                if (!last && !(seen & HAS_RECV_GRAD))
                    return fail(c, "stage %d: %s of micro %d chunk %d has no recv gradient before it", stage, backward,
                                micro, chunk);
                if (!first && !(seen & HAS_SEND_GRAD))
                    return fail(c, "stage %d: %s of micro %d chunk %d has no send gradient after it", stage, backward,
                                micro, chunk);
            }
    return true;
}

/* ---- replay ---- */

/* Index of the message to (direction, receiving virtual stage, micro). */
static size_t message_index(const ScheduleShape *s, bool gradient, int vstage, int micro) {
    return ((size_t)gradient * (size_t)(last_vstage(s) + 1) + (size_t)vstage) * (size_t)s->micro + (size_t)micro;
}

static size_t message_of(const ScheduleShape *s, int stage, const Action *a) {
    int k = vstage_of(s, stage, a->chunk);
    bool gradient = a->kind == ACT_RECV_GRAD || a->kind == ACT_SEND_GRAD;
    if (a->kind == ACT_SEND_ACTIVATION) k++;
    if (a->kind == ACT_SEND_GRAD) k--;
    return message_index(s, gradient, k, a->micro);
}

/* Runs one stage as far as its receives allow; true if it moved. sent[] is
 * when each message was sent (< 0: not yet). */
static bool advance(const ScheduleShape *s, const ActionList *l, int stage, const double *cost, double *sent,
                    double *received, int *next, int *live, StageSim *st) {
    bool moved = false;
    while (next[stage] < l->count) {
        const Action *a = &l->items[next[stage]];
        if (a->kind == ACT_RECV_ACTIVATION || a->kind == ACT_RECV_GRAD) {
            double t = sent[message_of(s, stage, a)];
            if (t < 0) break; /* its send has not run yet */
            if (t > st->finish) st->waiting += t - st->finish, st->finish = t;
            received[message_of(s, stage, a)] = st->finish;
        } else if (a->kind == ACT_SEND_ACTIVATION || a->kind == ACT_SEND_GRAD) {
            sent[message_of(s, stage, a)] = st->finish;
        } else {
            double c = cost[((size_t)stage * (size_t)s->chunks + (size_t)a->chunk) * ACT_KIND_COUNT + a->kind];
            st->finish += c;
            st->busy += c;
            *live += live_change(a->kind);
            if (*live > st->max_live) st->max_live = *live;
        }
        next[stage]++;
        moved = true;
    }
    return moved;
}

static void describe_deadlock(const ScheduleShape *s, const ActionList *lists, const int *next, char *why, size_t n) {
    size_t used = (size_t)snprintf(why, n, "deadlock:");
    const char *separator = " ";
    for (int stage = 0; stage < s->stages && used < n; stage++) {
        if (next[stage] == lists[stage].count) continue;
        const Action *a = &lists[stage].items[next[stage]]; /* a receive: nothing else blocks */
        used += (size_t)snprintf(why + used, n - used, "%sstage %d waits for %s of micro %d chunk %d from stage %d",
                                 separator, stage, a->kind == ACT_RECV_GRAD ? "gradient" : "activation", a->micro,
                                 a->chunk, a->peer);
        separator = ", ";
    }
}

/* A stage's step ends when its own messages have been received (an
 * executor waits for its sends before the step is over): the time after its
 * last action until then counts as waiting, as the executor measures it. */
static void wait_for_deliveries(const ScheduleShape *s, const ActionList *lists, const double *received,
                                StageSim *out) {
    for (int r = 0; r < s->stages; r++) {
        double end = out[r].finish;
        for (int i = 0; i < lists[r].count; i++) {
            const Action *a = &lists[r].items[i];
            if (a->kind != ACT_SEND_ACTIVATION && a->kind != ACT_SEND_GRAD) continue;
            double t = received[message_of(s, r, a)];
            end = t > end ? t : end;
        }
        out[r].waiting += end - out[r].finish;
    }
}

/* Replays lists that passed the checks above; false (and why) on a deadlock. */
static bool replay(const ScheduleShape *s, const ActionList *lists, const double *cost, StageSim *out, char *why,
                   size_t n) {
    const int p = s->stages;
    size_t messages = message_index(s, true, last_vstage(s), s->micro - 1) + 1;
    double *sent = bs_malloc(messages * sizeof(double)), *received = bs_calloc(messages, sizeof(double));
    int *next = bs_calloc((size_t)p, sizeof(int)), *live = bs_calloc((size_t)p, sizeof(int));
    for (size_t i = 0; i < messages; i++) sent[i] = -1.0;
    for (int r = 0; r < p; r++) out[r] = (StageSim){0};
    bool done = false, moved = true;
    while (!done && moved) {
        done = true, moved = false;
        for (int r = 0; r < p; r++) {
            moved |= advance(s, &lists[r], r, cost, sent, received, next, &live[r], &out[r]);
            done &= next[r] == lists[r].count;
        }
    }
    if (!done) describe_deadlock(s, lists, next, why, n);
    if (done) wait_for_deliveries(s, lists, received, out);
    double makespan = 0;
    for (int r = 0; r < p; r++) makespan = out[r].finish > makespan ? out[r].finish : makespan;
    for (int r = 0; r < p; r++) out[r].makespan = makespan, out[r].idle = makespan - out[r].busy;
    free(sent);
    free(received);
    free(next);
    free(live);
    return done;
}

bool schedule_validate(const ScheduleShape *s, const ActionList *lists, char *why, size_t why_size) {
    if (!schedule_check(s, why, why_size)) return false;
    Checker c = {s, lists, bs_calloc((size_t)s->stages * s->chunks * s->micro, 1), why, why_size};
    bool ok = true;
    for (int r = 0; r < s->stages && ok; r++) ok = check_list(&c, r);
    ok = ok && check_messages_matched(&c) && check_messages_complete(&c);
    free(c.seen);
    if (!ok) return false;
    double *no_cost = bs_calloc((size_t)s->stages * s->chunks * ACT_KIND_COUNT, sizeof(double));
    StageSim *sim = bs_calloc((size_t)s->stages, sizeof(StageSim));
    ok = replay(s, lists, no_cost, sim, why, why_size);
    free(sim);
    free(no_cost);
    return ok;
}

bool schedule_simulate_costs(const ScheduleShape *s, const ActionList *lists, const double *costs, StageSim *out) {
    char why[256];
    return schedule_validate(s, lists, why, sizeof why) && replay(s, lists, costs, out, why, sizeof why);
}

bool schedule_simulate(const ScheduleShape *s, const ActionList *lists, double f, double b, double w, StageSim *out) {
    const size_t n = (size_t)s->stages * (size_t)(s->chunks > 0 ? s->chunks : 1);
    double *costs = bs_calloc(n * ACT_KIND_COUNT, sizeof(double));
    for (size_t i = 0; i < n; i++) {
        double *c = costs + i * ACT_KIND_COUNT;
        c[ACT_FORWARD] = f;
        c[ACT_BACKWARD] = b + w;
        c[ACT_BACKWARD_INPUT] = b;
        c[ACT_BACKWARD_WEIGHT] = w;
    }
    bool ok = schedule_simulate_costs(s, lists, costs, out);
    free(costs);
    return ok;
}

/* test_schedule.c: pipeline schedules as data (parallel/schedule.h).
 *
 * Every list generated for p in {1,2,3,4,8}, m in 1..16, v in {1,2,3} and
 * the four schedules validates, has 2mv (3mv) compute actions, holds the
 * activation sets its schedule promises, and idles in simulation exactly
 * the closed form: GPipe and 1F1B (p-1)/(m+p-1) (Narayanan et al. 2021),
 * interleaved (p-1)/(vm+p-1) (the same paper's (p-1)/(vm) bubble ratio), and
 * ZB-H1 (Qi et al. 2023) (p-1)(f+b-w) over the step for m >= p. The orders
 * are checked against their sources: today's pipeline.c loops for GPipe and
 * 1F1B, Megatron-LM's schedule table for interleaved, and the paper's rule
 * for ZB-H1. The validator rejects hand-made bad lists with the expected
 * line, and schedule_check rejects the shapes that cannot be scheduled. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cli/subject_flags.h"
#include "parallel/schedule.h"

enum { MAX_STAGES = 8 };

static const int STAGE_COUNTS[] = {1, 2, 3, 4, 8};
static const PipeSchedule SCHEDULES[] = {PIPE_GPIPE, PIPE_1F1B, PIPE_INTERLEAVED, PIPE_ZBH1};

typedef struct {
    ScheduleShape shape;
    ActionList lists[MAX_STAGES];
} Step;

static void build_step(Step *st, PipeSchedule schedule, int p, int v, int m) {
    st->shape = (ScheduleShape){schedule, p, v, m};
    for (int r = 0; r < p; r++) schedule_build(&st->shape, r, &st->lists[r]);
}

static void free_step(Step *st) {
    for (int r = 0; r < MAX_STAGES; r++) action_list_free(&st->lists[r]);
}

/* "F0 F1 BW0 ..." (compute only) or with messages ("rA0 F0 sA0 ..."); a
 * chunk other than 0 shows as F3c1. */
static void format_list(const ActionList *l, bool messages, char *buf, size_t n) {
    static const char *const SHORT[ACT_KIND_COUNT] = {"F", "BW", "B", "W", "rA", "sA", "rG", "sG"};
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < l->count && used < n; i++) {
        const Action *a = &l->items[i];
        if (!messages && !action_is_compute(a->kind)) continue;
        used += (size_t)snprintf(buf + used, n - used, a->chunk ? "%s%s%dc%d" : "%s%s%d", used ? " " : "",
                                 SHORT[a->kind], a->micro, a->chunk);
    }
}

static bool near(double a, double b) { return fabs(a - b) <= 1e-9; }

/* ---- every generated shape ---- */

static int count_compute(const ActionList *l) {
    int n = 0;
    for (int i = 0; i < l->count; i++) n += action_is_compute(l->items[i].kind);
    return n;
}

/* Activation sets the schedule promises on stage r (F until its W or BW). */
static int promised_live(const ScheduleShape *s, int r) {
    const int p = s->stages, m = s->micro, mv = s->micro * s->chunks;
    if (p == 1) return 1;
    if (s->schedule == PIPE_GPIPE) return m;
    if (s->schedule == PIPE_1F1B) return p - r < m ? p - r : m;
    if (s->schedule == PIPE_ZBH1) return p < m ? p : m; /* the same p on every stage: 1F1B's peak on stage 0 */
    int warmup = 2 * (p - r - 1) + (s->chunks - 1) * p; /* Megatron: the warm-up forwards and one more */
    return warmup + 1 < mv ? warmup + 1 : mv;
}

static void check_one_shape(const Step *st, double *bubble_out) {
    const ScheduleShape *s = &st->shape;
    char why[512], name[64];
    snprintf(name, sizeof name, "%s p=%d v=%d m=%d", pipe_schedule_name(s->schedule), s->stages, s->chunks, s->micro);
    bool ok = schedule_validate(s, st->lists, why, sizeof why);
    CHECK(ok, "%s: generated lists rejected: %s", name, why);
    if (!ok) return;
    int per_item = s->schedule == PIPE_ZBH1 ? 3 : 2;
    StageSim sim[MAX_STAGES];
    CHECK(schedule_simulate(s, st->lists, 1, 1, 1, sim), "%s: simulation failed", name);
    double theory = schedule_bubble_theory(s, 1, 1, 1);
    for (int r = 0; r < s->stages; r++) {
        CHECK(count_compute(&st->lists[r]) == per_item * s->micro * s->chunks, "%s stage %d: %d compute actions", name,
              r, count_compute(&st->lists[r]));
        CHECK(sim[r].max_live == promised_live(s, r), "%s stage %d: %d live sets, promised %d", name, r,
              sim[r].max_live, promised_live(s, r));
        if (s->schedule == PIPE_ZBH1)
            CHECK(sim[r].max_live <= s->stages, "%s stage %d: %d live sets, above 1F1B's peak p", name, r,
                  sim[r].max_live);
        CHECK(near(sim[r].busy + sim[r].idle, sim[r].makespan), "%s stage %d: busy + idle != makespan", name, r);
        CHECK(near(sim[r].idle / sim[r].makespan, theory), "%s stage %d: simulated bubble %.12f, theory %.12f", name, r,
              sim[r].idle / sim[r].makespan, theory);
    }
    *bubble_out = sim[0].idle / sim[0].makespan;
}

static void test_every_shape(void) {
    Step st = {0};
    int shapes = 0;
    for (size_t pi = 0; pi < sizeof STAGE_COUNTS / sizeof STAGE_COUNTS[0]; pi++)
        for (int m = 1; m <= 16; m++) {
            double bubble[4] = {0};
            for (int si = 0; si < 4; si++)
                for (int v = 1; v <= 3; v++) {
                    const PipeSchedule schedule = SCHEDULES[si];
                    const int p = STAGE_COUNTS[pi];
                    ScheduleShape shape = {schedule, p, v, m};
                    char why[256];
                    bool allowed = (v == 1 || schedule == PIPE_INTERLEAVED) &&
                                   (p > 1 || (schedule != PIPE_INTERLEAVED && schedule != PIPE_ZBH1)) &&
                                   (schedule != PIPE_INTERLEAVED || m % p == 0);
                    CHECK(schedule_check(&shape, why, sizeof why) == allowed, "%s p=%d v=%d m=%d: check %s",
                          pipe_schedule_name(schedule), p, v, m, allowed ? "rejects" : "accepts");
                    if (!allowed) continue;
                    build_step(&st, schedule, p, v, m);
                    check_one_shape(&st, v == 1 ? &bubble[si] : &(double){0});
                    shapes++;
                }
            /* ZB-H1 at most half of 1F1B's bubble once m >= p (equal costs). */
            if (STAGE_COUNTS[pi] > 1 && m >= STAGE_COUNTS[pi])
                CHECK(bubble[3] <= 0.5 * bubble[1] + 1e-12, "p=%d m=%d: zbh1 bubble %.4f, 1f1b %.4f", STAGE_COUNTS[pi],
                      m, bubble[3], bubble[1]);
        }
    free_step(&st);
    printf("every shape: %d shapes validated and simulated\n", shapes);
}

/* ---- orders against their sources ---- */

typedef struct {
    PipeSchedule schedule;
    int p, v, m, stage;
    bool messages;
    const char *expected;
} Literal;

/* GPipe and 1F1B as parallel/pipeline.c runs them today (forward: receive,
 * compute, send; backward: receive the gradient, compute, send it back;
 * one stage: F0 BW0 F1 BW1 ...), and ZB-H1 by the paper's rule. */
static const Literal LITERALS[] = {
    {PIPE_1F1B, 4, 1, 5, 1, false, "F0 F1 F2 BW0 F3 BW1 F4 BW2 BW3 BW4"},
    {PIPE_1F1B, 4, 1, 5, 3, false, "F0 BW0 F1 BW1 F2 BW2 F3 BW3 F4 BW4"},
    {PIPE_1F1B, 4, 1, 2, 0, false, "F0 F1 BW0 BW1"},
    {PIPE_1F1B, 3, 1, 2, 1, true, "rA0 F0 sA0 rA1 F1 sA1 rG0 BW0 sG0 rG1 BW1 sG1"},
    {PIPE_GPIPE, 2, 1, 3, 0, true, "F0 sA0 F1 sA1 F2 sA2 rG0 BW0 rG1 BW1 rG2 BW2"},
    {PIPE_GPIPE, 1, 1, 3, 0, true, "F0 BW0 F1 BW1 F2 BW2"},
    {PIPE_1F1B, 1, 1, 2, 0, true, "F0 BW0 F1 BW1"},
    /* ZB-H1: the last stage holds W back p-1 steps, rank 0 none; each B
     * after the steady state is followed by one W */
    {PIPE_ZBH1, 3, 1, 4, 2, false, "F0 B0 F1 B1 F2 B2 W0 F3 B3 W1 W2 W3"},
    {PIPE_ZBH1, 3, 1, 4, 1, false, "F0 F1 B0 F2 B1 W0 F3 B2 W1 B3 W2 W3"},
    {PIPE_ZBH1, 3, 1, 4, 0, false, "F0 F1 F2 B0 W0 F3 B1 W1 B2 W2 B3 W3"},
    {PIPE_ZBH1, 2, 1, 1, 1, true, "rA0 F0 B0 sG0 W0"},
};

static void test_literal_orders(void) {
    ActionList l = {0};
    char got[1024];
    for (size_t i = 0; i < sizeof LITERALS / sizeof LITERALS[0]; i++) {
        const Literal *t = &LITERALS[i];
        ScheduleShape s = {t->schedule, t->p, t->v, t->m};
        schedule_build(&s, t->stage, &l);
        format_list(&l, t->messages, got, sizeof got);
        CHECK(strcmp(got, t->expected) == 0, "%s p=%d m=%d stage %d:\n  got      %s\n  expected %s",
              pipe_schedule_name(t->schedule), t->p, t->m, t->stage, got, t->expected);
    }
    action_list_free(&l);
}

/* Megatron-LM (core/pipeline_parallel/schedules.py) builds a table of
 * (micro, chunk) over groups of p micro-batches: for each group, for each
 * chunk, the group's micros in order; forwards walk it, backwards walk it
 * with chunk v-1-c. The lists' F and BW must follow it. */
static void test_interleaved_against_megatron_table(void) {
    ActionList l = {0};
    const int shapes[][3] = {{2, 2, 4}, {4, 2, 8}, {4, 3, 12}, {3, 3, 6}, {8, 2, 16}};
    for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++) {
        const int p = shapes[t][0], v = shapes[t][1], m = shapes[t][2];
        int *micro = malloc(sizeof(int) * (size_t)(m * v)), *chunk = malloc(sizeof(int) * (size_t)(m * v)), n = 0;
        for (int group = 0; group < m; group += p)
            for (int c = 0; c < v; c++)
                for (int i = group; i < group + p && i < m; i++) micro[n] = i, chunk[n] = c, n++;
        ScheduleShape s = {PIPE_INTERLEAVED, p, v, m};
        for (int r = 0; r < p; r++) {
            schedule_build(&s, r, &l);
            int nf = 0, nb = 0;
            for (int i = 0; i < l.count; i++) {
                const Action *a = &l.items[i];
                if (a->kind == ACT_FORWARD) {
                    CHECK(a->micro == micro[nf] && a->chunk == chunk[nf],
                          "p=%d v=%d m=%d stage %d: forward %d is %d/%d", p, v, m, r, nf, a->micro, a->chunk);
                    nf++;
                } else if (a->kind == ACT_BACKWARD) {
                    CHECK(a->micro == micro[nb] && a->chunk == v - 1 - chunk[nb],
                          "p=%d v=%d m=%d stage %d: backward %d is %d/%d", p, v, m, r, nb, a->micro, a->chunk);
                    nb++;
                }
            }
            /* Megatron's warm-up: 2(p-r-1) + (v-1)p forwards before the first backward */
            int warmup = 0;
            for (int i = 0; l.items[i].kind != ACT_BACKWARD; i++) warmup += l.items[i].kind == ACT_FORWARD;
            int expected = 2 * (p - r - 1) + (v - 1) * p + 1; /* and the steady state's first F */
            CHECK(warmup == (expected < m * v ? expected : m * v), "p=%d v=%d m=%d stage %d: %d forwards before BW", p,
                  v, m, r, warmup);
        }
        free(micro);
        free(chunk);
    }
    action_list_free(&l);
}

/* ---- unequal costs ---- */

/* GPipe, 1F1B and interleaved idle the same share whatever the costs; the
 * ZB-H1 closed form is exact when w <= min(f, b) and a lower bound of these
 * lists otherwise (a W longer than an F or a B stalls the B chain). */
static void test_unequal_costs(void) {
    const double costs[][3] = {{1, 2, 1},   {2, 1, 0.5}, {1, 1, 0.25}, {1.5, 3, 1.5},
                               {0.5, 1, 1}, {1, 0.5, 1}, {1, 1, 3}};
    Step st = {0};
    int exact = 0, bounded = 0;
    for (size_t ci = 0; ci < sizeof costs / sizeof costs[0]; ci++)
        for (int si = 0; si < 4; si++)
            for (size_t pi = 1; pi < sizeof STAGE_COUNTS / sizeof STAGE_COUNTS[0]; pi++)
                for (int m = 1; m <= 16; m++) {
                    const double f = costs[ci][0], b = costs[ci][1], w = costs[ci][2];
                    const int p = STAGE_COUNTS[pi], v = SCHEDULES[si] == PIPE_INTERLEAVED ? 2 : 1;
                    if (SCHEDULES[si] == PIPE_INTERLEAVED && m % p) continue;
                    build_step(&st, SCHEDULES[si], p, v, m);
                    StageSim sim[MAX_STAGES];
                    if (!schedule_simulate(&st.shape, st.lists, f, b, w, sim)) {
                        CHECK(false, "%s p=%d m=%d: simulation failed", pipe_schedule_name(SCHEDULES[si]), p, m);
                        continue;
                    }
                    double theory = schedule_bubble_theory(&st.shape, f, b, w), got = sim[0].idle / sim[0].makespan;
                    bool must_equal = SCHEDULES[si] != PIPE_ZBH1 || w <= fmin(f, b);
                    CHECK(must_equal ? near(got, theory) : got >= theory - 1e-12,
                          "%s p=%d m=%d f=%g b=%g w=%g: simulated %.12f, theory %.12f",
                          pipe_schedule_name(SCHEDULES[si]), p, m, f, b, w, got, theory);
                    exact += must_equal, bounded += !must_equal;
                }
    free_step(&st);
    printf("unequal costs: %d shapes equal to theory, %d zbh1 shapes at or above it (w > min(f, b))\n", exact, bounded);
}

/* The closed forms against the papers' own statements of them. */
static void test_published_forms(void) {
    for (int p = 2; p <= 8; p++)
        for (int m = p; m <= 32; m += p) {
            /* Narayanan et al. 2021: bubble / ideal = (p-1)/m for 1F1B, (p-1)/(vm) interleaved */
            ScheduleShape s = {PIPE_1F1B, p, 1, m};
            double share = schedule_bubble_theory(&s, 1, 2, 0);
            CHECK(near(share / (1 - share), (p - 1.0) / m), "1f1b p=%d m=%d: ratio %.6f", p, m, share / (1 - share));
            s = (ScheduleShape){PIPE_INTERLEAVED, p, 3, m};
            share = schedule_bubble_theory(&s, 1, 2, 0);
            CHECK(near(share / (1 - share), (p - 1.0) / (3.0 * m)), "interleaved p=%d m=%d", p, m);
            /* Qi et al. 2023 (ZB-H1): bubble time (p-1)(T_F + T_B - T_W) over a step of m(T_F+T_B+T_W) */
            s = (ScheduleShape){PIPE_ZBH1, p, 1, m};
            const double f = 1.0, b = 1.2, w = 0.8;
            share = schedule_bubble_theory(&s, f, b, w);
            double bubble = (p - 1) * (f + b - w), work = m * (f + b + w);
            CHECK(near(share, bubble / (work + bubble)), "zbh1 p=%d m=%d: %.6f", p, m, share);
            /* ... a third of 1F1B's bubble time with equal costs */
            double zb = schedule_bubble_theory(&s, 1, 1, 1) * (3.0 * m + p - 1);
            ScheduleShape pd = {PIPE_1F1B, p, 1, m};
            double one_f_one_b = schedule_bubble_theory(&pd, 1, 1, 1) * (3.0 * m + 3.0 * (p - 1));
            CHECK(near(zb, one_f_one_b / 3), "zbh1 p=%d m=%d: bubble time %.6f, 1f1b %.6f", p, m, zb, one_f_one_b);
        }
    ScheduleShape one = {PIPE_GPIPE, 1, 1, 8};
    CHECK(schedule_bubble_theory(&one, 1, 1, 1) == 0.0, "one stage has no bubble");
}

/* ---- the validator on hand-made bad lists ---- */

static int find(const ActionList *l, ActionKind kind, int chunk, int micro) {
    for (int i = 0; i < l->count; i++)
        if (l->items[i].kind == kind && l->items[i].chunk == chunk && l->items[i].micro == micro) return i;
    return -1;
}

static void remove_at(ActionList *l, int at) {
    memmove(&l->items[at], &l->items[at + 1], sizeof(Action) * (size_t)(l->count - at - 1));
    l->count--;
}

/* Moves the action at `from` to stand at `to` (indices of the list before the move). */
static void move(ActionList *l, int from, int to) {
    Action a = l->items[from];
    remove_at(l, from);
    if (to > from) to--;
    memmove(&l->items[to + 1], &l->items[to], sizeof(Action) * (size_t)(l->count - to));
    l->items[to] = a;
    l->count++;
}

static void expect_rejected(const Step *st, const char *what, const char *expected) {
    char why[512] = "";
    bool ok = schedule_validate(&st->shape, st->lists, why, sizeof why);
    CHECK(!ok, "%s: accepted", what);
    CHECK(strstr(why, expected) != NULL, "%s:\n  got      '%s'\n  expected '%s'", what, why, expected);
    StageSim sim[MAX_STAGES];
    CHECK(!schedule_simulate(&st->shape, st->lists, 1, 1, 1, sim), "%s: simulated", what);
    printf("rejected (%s): %s\n", what, why);
}

/* The messages the issue names: order, a missing W, unmatched messages, a deadlock. */
static void test_validator_rejects_order_and_messages(void) {
    Step st = {0};
    ActionList *l;

    build_step(&st, PIPE_ZBH1, 2, 1, 4);
    l = &st.lists[1];
    move(l, find(l, ACT_BACKWARD_INPUT, 0, 3), find(l, ACT_RECV_ACTIVATION, 0, 3));
    expect_rejected(&st, "B before F", "stage 1: B of micro 3 chunk 0 before its F");

    build_step(&st, PIPE_ZBH1, 2, 1, 4);
    remove_at(&st.lists[0], find(&st.lists[0], ACT_BACKWARD_WEIGHT, 0, 2));
    expect_rejected(&st, "a missing W",
                    "stage 0: count of compute actions 11, expected 3mv=12: W of micro 2 chunk 0 missing");

    build_step(&st, PIPE_ZBH1, 3, 1, 4);
    l = &st.lists[2];
    move(l, find(l, ACT_BACKWARD_WEIGHT, 0, 1), find(l, ACT_BACKWARD_INPUT, 0, 1));
    expect_rejected(&st, "W before B", "stage 2: W of micro 1 chunk 0 before its B");

    build_step(&st, PIPE_1F1B, 3, 1, 4);
    remove_at(&st.lists[2], find(&st.lists[2], ACT_RECV_ACTIVATION, 0, 0));
    expect_rejected(&st, "a send without its receive",
                    "stage 1 sends activation of micro 0 chunk 0 that stage 2 never receives");

    build_step(&st, PIPE_1F1B, 3, 1, 4);
    remove_at(&st.lists[1], find(&st.lists[1], ACT_SEND_GRAD, 0, 1));
    expect_rejected(&st, "a receive without its send",
                    "stage 0 receives gradient of micro 1 chunk 0 that stage 1 never sends");

    build_step(&st, PIPE_INTERLEAVED, 2, 2, 4);
    remove_at(&st.lists[0], find(&st.lists[0], ACT_SEND_ACTIVATION, 1, 2));
    remove_at(&st.lists[1], find(&st.lists[1], ACT_RECV_ACTIVATION, 1, 2));
    expect_rejected(&st, "an F never sent on", "stage 0: F of micro 2 chunk 1 has no send activation after it");

    /* stage 0 waits for gradient 0 before it sends activation 0, which stage 1 needs to make that gradient */
    build_step(&st, PIPE_1F1B, 2, 1, 2);
    l = &st.lists[0];
    move(l, find(l, ACT_SEND_ACTIVATION, 0, 0), find(l, ACT_BACKWARD, 0, 0));
    expect_rejected(&st, "deadlock",
                    "deadlock: stage 0 waits for gradient of micro 0 chunk 0 from stage 1, "
                    "stage 1 waits for activation of micro 0 chunk 0 from stage 0");
    free_step(&st);
}

/* Malformed actions: live count, misplaced receive, peers, duplicates, kinds, ranges. */
static void test_validator_rejects_fields(void) {
    Step st = {0};
    ActionList *l;

    build_step(&st, PIPE_1F1B, 2, 1, 3);
    l = &st.lists[1];
    move(l, find(l, ACT_BACKWARD, 0, 0), 0);
    expect_rejected(&st, "live negative", "stage 1: live activations negative at action 0 (BW of micro 0 chunk 0)");

    build_step(&st, PIPE_1F1B, 2, 1, 3);
    l = &st.lists[1];
    move(l, find(l, ACT_RECV_ACTIVATION, 0, 1), find(l, ACT_SEND_GRAD, 0, 1) + 1);
    expect_rejected(&st, "a receive after its F",
                    "stage 1: recv activation of micro 1 chunk 0 after the compute that needs it");

    build_step(&st, PIPE_GPIPE, 3, 1, 2);
    st.lists[1].items[find(&st.lists[1], ACT_SEND_ACTIVATION, 0, 1)].peer = 0;
    expect_rejected(&st, "a wrong peer", "stage 1: send activation of micro 1 chunk 0 has peer 0, expected 2");

    build_step(&st, PIPE_GPIPE, 2, 1, 2);
    st.lists[0].items[find(&st.lists[0], ACT_FORWARD, 0, 1)].micro = 0;
    expect_rejected(&st, "a duplicate F", "stage 0: a second F of micro 0 chunk 0");

    build_step(&st, PIPE_ZBH1, 2, 1, 2);
    l = &st.lists[0];
    l->items[find(l, ACT_BACKWARD_INPUT, 0, 1)].kind = ACT_BACKWARD;
    expect_rejected(&st, "a fused backward in zbh1", "stage 0: BW of micro 1 chunk 0 is fused");

    build_step(&st, PIPE_1F1B, 2, 1, 2);
    st.lists[1].items[find(&st.lists[1], ACT_FORWARD, 0, 1)].chunk = 1;
    expect_rejected(&st, "a chunk out of range", "stage 1: action");

    build_step(&st, PIPE_1F1B, 2, 1, 2);
    l = &st.lists[0];
    l->items[0] = (Action){ACT_RECV_ACTIVATION, 0, 0, 1};
    expect_rejected(&st, "a receive on the first virtual stage", "has no neighbour that way");
    free_step(&st);
}

/* ---- shapes, names, reuse ---- */

static void test_check_rejects(void) {
    const struct {
        ScheduleShape shape;
        const char *expected;
    } bad[] = {
        {{PIPE_ZBH1, 1, 1, 4}, "the zbh1 pipeline schedule needs 2 or more stages (got 1) (flags: --pp-schedule, --pp)"},
        {{PIPE_INTERLEAVED, 1, 2, 4}, "the interleaved pipeline schedule needs 2 or more stages (got 1) (flags: --pp-schedule, --pp)"},
        {{PIPE_1F1B, 2, 0, 4}, "at least 1 virtual stage (got 0) (flags: --virtual-stages)"},
        {{PIPE_1F1B, 2, 2, 4}, "2 virtual stages need the interleaved pipeline schedule (got 1f1b) (flags: --virtual-stages, --pp-schedule)"},
        {{PIPE_ZBH1, 2, 2, 4}, "2 virtual stages need the interleaved pipeline schedule (got zbh1) (flags: --virtual-stages, --pp-schedule)"},
        {{PIPE_INTERLEAVED, 4, 2, 2}, "per step (2) to be a multiple of the 4 pipeline stages"},
        {{PIPE_INTERLEAVED, 2, 2, 5}, "per step (5) to be a multiple of the 2 pipeline stages (flags: --pp-schedule, --global-batch, --micro-batch, --pp)"},
        {{PIPE_1F1B, 2, 1, 0}, "give 0 micro-batches per step: at least 1 is needed (flags: --global-batch, --micro-batch)"},
        {{PIPE_GPIPE, 0, 1, 4}, "the pipeline needs at least 1 stage (got 0) (flags: --pp)"},
        {{(PipeSchedule)7, 2, 1, 4}, "the pipeline schedule must be gpipe, 1f1b, interleaved or zbh1 (flags: --pp-schedule)"},
    };
    cli_name_subjects(); /* the flags, as `batchscale train` names them */
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char why[256] = "";
        CHECK(!schedule_check(&bad[i].shape, why, sizeof why), "shape %zu accepted", i);
        CHECK(strstr(why, bad[i].expected) != NULL && !strchr(why, '\n'), "shape %zu: '%s', expected '%s'", i, why,
              bad[i].expected);
    }
    char why[256];
    ScheduleShape good = {PIPE_INTERLEAVED, 2, 2, 4};
    CHECK(schedule_check(&good, why, sizeof why), "interleaved p=2 v=2 m=4 rejected: %s", why);
    /* a bad shape never validates, whatever the lists */
    ActionList none[2] = {{0}, {0}};
    ScheduleShape zb1 = {PIPE_ZBH1, 1, 1, 2};
    CHECK(!schedule_validate(&zb1, none, why, sizeof why) && strstr(why, "2 or more stages"), "zbh1 on one stage validated");
}

static void test_names_and_reuse(void) {
    for (int i = 0; i < PIPE_SCHEDULE_COUNT; i++) {
        PipeSchedule s;
        CHECK(pipe_schedule_parse(pipe_schedule_name((PipeSchedule)i), &s) && s == (PipeSchedule)i, "name %d", i);
    }
    PipeSchedule s;
    CHECK(!pipe_schedule_parse("zb-h1", &s) && !pipe_schedule_parse("", &s), "unknown names parse");
    CHECK(strcmp(pipe_schedule_name(PIPE_ZBH1), "zbh1") == 0 && strcmp(pipe_schedule_name(PIPE_GPIPE), "gpipe") == 0,
          "names");
    /* a list that fits is rebuilt in place */
    ActionList l = {0};
    ScheduleShape big = {PIPE_INTERLEAVED, 4, 3, 16}, small = {PIPE_1F1B, 4, 1, 4};
    schedule_build(&big, 1, &l);
    const Action *items = l.items;
    int capacity = l.capacity;
    schedule_build(&small, 1, &l);
    CHECK(l.items == items && l.capacity == capacity && l.count < capacity, "a smaller list reallocated");
    action_list_free(&l);
    CHECK(l.items == NULL && l.count == 0 && l.capacity == 0, "free leaves an empty list");
}

/* The bubble table for p = 4, m = 8 (the benchmark's shape), for the record. */
static void print_table(void) {
    Step st = {0};
    const struct {
        PipeSchedule s;
        int v;
    } rows[] = {{PIPE_GPIPE, 1}, {PIPE_1F1B, 1}, {PIPE_INTERLEAVED, 2}, {PIPE_ZBH1, 1}};
    printf("p=4 m=8, f=b=w=1: schedule, simulated bubble, theory, most live sets (stage 0..3)\n");
    for (int i = 0; i < 4; i++) {
        build_step(&st, rows[i].s, 4, rows[i].v, 8);
        StageSim sim[MAX_STAGES];
        if (!schedule_simulate(&st.shape, st.lists, 1, 1, 1, sim)) continue;
        printf("  %-11s v=%d  %.4f  %.4f  %d %d %d %d\n", pipe_schedule_name(rows[i].s), rows[i].v,
               sim[0].idle / sim[0].makespan, schedule_bubble_theory(&st.shape, 1, 1, 1), sim[0].max_live,
               sim[1].max_live, sim[2].max_live, sim[3].max_live);
    }
    free_step(&st);
}

int main(void) {
    test_every_shape();
    test_literal_orders();
    test_interleaved_against_megatron_table();
    test_unequal_costs();
    test_published_forms();
    test_validator_rejects_order_and_messages();
    test_validator_rejects_fields();
    test_check_rejects();
    test_names_and_reuse();
    print_table();
    if (failures) fprintf(stderr, "%d failures\n", failures);
    return failures ? 1 : 0;
}

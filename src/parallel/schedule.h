/* schedule.h: pipeline schedules as data. For each pipeline rank, one
 * generator emits the ordered list of actions of a training step (forward F,
 * fused backward BW, input-gradient backward B, weight-gradient backward W,
 * and the sends and receives between neighbours); a validator checks the p
 * lists alone and together (order, counts, live activations, matching
 * messages, no deadlock); an event simulation replays them with per-action
 * costs; and the closed forms of the bubble are here beside them.
 *
 * Virtual stages: with v chunks per rank, chunk c of rank r is virtual stage
 * k = c p + r. Virtual stage k's forward output goes to virtual stage k + 1
 * (rank (r + 1) % p) and its input gradient to k - 1. A receive stands just
 * before the compute that needs it (the executor waits there); a send just
 * after the compute that made it (sends are non-blocking).
 *
 * Pure and MPI-free: nothing here moves a byte or reads a clock. The executor
 * (parallel/pipeline.c) runs the lists; the plan layer keeps its own cost
 * model. */
#ifndef BS_PARALLEL_SCHEDULE_H
#define BS_PARALLEL_SCHEDULE_H

#include <stdbool.h>
#include <stddef.h>

typedef enum { PIPE_GPIPE, PIPE_1F1B, PIPE_INTERLEAVED, PIPE_ZBH1 } PipeSchedule;
#define PIPE_SCHEDULE_COUNT 4

const char *pipe_schedule_name(PipeSchedule s); /* "gpipe" "1f1b" "interleaved" "zbh1" */
bool pipe_schedule_parse(const char *name, PipeSchedule *out);

typedef enum {
    ACT_FORWARD,         /* F: forward of (chunk, micro) */
    ACT_BACKWARD,        /* BW: the whole backward, B and W fused (gpipe, 1f1b, interleaved) */
    ACT_BACKWARD_INPUT,  /* B: input-gradient backward only (zbh1) */
    ACT_BACKWARD_WEIGHT, /* W: weight-gradient backward (zbh1), after its B */
    ACT_RECV_ACTIVATION, /* the forward's input from the previous virtual stage */
    ACT_SEND_ACTIVATION, /* the forward's output to the next one */
    ACT_RECV_GRAD,       /* the backward's output-gradient from the next virtual stage */
    ACT_SEND_GRAD        /* the backward's input-gradient to the previous one */
} ActionKind;
#define ACT_KIND_COUNT 8

/* "F" "BW" "B" "W" "recv activation" "send activation" "recv gradient" "send gradient" */
const char *action_kind_name(ActionKind k);
bool action_is_compute(ActionKind k);

/* chunk: this rank's chunk the action belongs to (for a receive, the chunk
 * whose compute needs it; for a send, the chunk that made it). */
typedef struct {
    ActionKind kind;
    int chunk, micro;
    int peer; /* pipeline rank of the other side; -1 for compute */
} Action;

typedef struct {
    Action *items;
    int count, capacity;
} ActionList;

/* p stages, v chunks per stage (1 unless interleaved), m micro-batches per step. */
typedef struct {
    PipeSchedule schedule;
    int stages, chunks, micro;
} ScheduleShape;

/* false and a one-line reason naming the flag (--pp, --pp-schedule,
 * --virtual-stages, --global-batch/--micro-batch) if the shape cannot be
 * scheduled: p < 1, m < 1, v < 1, v > 1 without interleaved, zbh1 or
 * interleaved with p == 1, interleaved with m % p != 0 or m < p (Megatron-LM's
 * rule). */
bool schedule_check(const ScheduleShape *s, char *why, size_t why_size);

/* The action list of pipeline rank `stage` (0 <= stage < p) of a checked
 * shape. `out` is reused across calls: it is reallocated only when the list
 * does not fit its capacity. With p == 1 every schedule is plain
 * accumulation, F0 BW0 F1 BW1 ...
 *   gpipe:       all F, then all BW in micro order.
 *   1f1b:        PipeDream-Flush: min(p-r-1, m) warm-up F, then one F one BW,
 *                then the remaining BW.
 *   interleaved: Megatron-LM's interleaved 1F1B over m v forward chunks:
 *                warm-up min(2(p-r-1) + (v-1)p, m v); the k-th forward is
 *                chunk (k/p) % v of micro (k/(p v)) p + k % p, the k-th
 *                backward the same micro of chunk v-1-(k/p) % v.
 *   zbh1:        Qi et al. 2023 (ZB-H1): 1F1B's warm-up; in the steady state
 *                F, B, and on rank r the W of the micro r steps older (so
 *                every rank holds at most p activation sets, 1F1B's peak on
 *                rank 0); after the steady state each B is followed by one
 *                W, and the W still pending end the list. */
void schedule_build(const ScheduleShape *s, int stage, ActionList *out);
void action_list_free(ActionList *l);

/* Checks the p lists (lists[stage]) of a shape, alone and together: every
 * action in range with the right peer; each (chunk, micro) has one F and one
 * BW (or, for zbh1, one B and one W), F before its backward, B before its W;
 * the running count of live activation sets never negative; 2mv compute
 * actions (3mv for zbh1); every send received by its peer and every receive
 * sent; each F and backward has its receive before it and its send after it
 * where its virtual stage needs them; and the lists run to the end without
 * deadlock when every receive blocks and no send does. false and one line
 * naming the stage and the action on the first problem, e.g.
 * "stage 1: B of micro 3 chunk 0 before its F",
 * "stage 1 sends activation of micro 0 chunk 0 that stage 2 never receives",
 * "deadlock: stage 0 waits for gradient of micro 0 chunk 0 from stage 1, ...". */
bool schedule_validate(const ScheduleShape *s, const ActionList *lists, char *why, size_t why_size);

/* One stage's figures from a replay of the p lists. A stage computes busy
 * seconds and is idle for the rest of the step (waiting for a neighbour, or
 * done and waiting for the slowest stage), so busy + idle == makespan on
 * every stage and idle / makespan is its bubble share. */
typedef struct {
    double busy;     /* sum of its action costs */
    double idle;     /* makespan - busy */
    double makespan; /* the step: when the last stage finishes (the same on all stages) */
    int max_live;    /* most activation sets live at once (F until its W or BW) */
    double waiting;  /* time blocked on receives inside its own list, and after it until its own messages are
                        received (what an executor that waits for its sends before the step ends measures) */
    double finish;   /* when its own last action ends */
} StageSim;

/* Event simulation: every stage starts at 0 and runs its list in order; F
 * costs f, B b, W w, BW b + w; sends are free and never block; a receive
 * waits until its send. false (out untouched) if the lists do not pass
 * schedule_validate. out[stages]. */
bool schedule_simulate(const ScheduleShape *s, const ActionList *lists, double f, double b, double w, StageSim *out);
/* The same with a cost per stage, chunk and action kind (seconds, e.g. as
 * measured): costs[(stage * chunks + chunk) * ACT_KIND_COUNT + kind]. */
bool schedule_simulate_costs(const ScheduleShape *s, const ActionList *lists, const double *costs, StageSim *out);

/* Idle share of a step, idle / (busy + idle), in theory, with per-action
 * costs f, b, w (a fused backward costs b + w):
 *   gpipe, 1f1b:  (p-1) / (m + p - 1), any costs;
 *   interleaved:  (p-1) / (v m + p - 1), any costs (Megatron-LM's (p-1)/(v m)
 *                 bubble-to-compute ratio, as a share of the step);
 *   zbh1:         makespan T = (m+p-1)(f+b) + max(1, m-p+1) w, share
 *                 (T - m(f+b+w)) / T. For m >= p this is Qi et al.'s
 *                 (p-1)(f+b-w) / (m(f+b+w) + (p-1)(f+b-w)); for m < p their
 *                 form undercounts (one W always trails the last B). Exact
 *                 for the lists above when w <= min(f, b); for larger w those
 *                 lists idle more than this.
 * 0 when p == 1. */
double schedule_bubble_theory(const ScheduleShape *s, double f, double b, double w);

#endif

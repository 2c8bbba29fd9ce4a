/* answer.h: everything `batchscale plan` computes for one question, as one
 * struct the command only prints (cli/plan_report.h): the layouts ranked by
 * time or by cost (the cost search tries the job on 1, 2, 4, ... nodes up to
 * the fleet), the chosen layout with its reliability and cost, its scaling
 * against one GPU and one node, a mixed fleet against each kind alone, a
 * scaling sweep, and the words on why the winner wins (plan/explain.h).
 * The command fills `in`, `money`, `reliability_in` and the batch fields,
 * then calls plan_answer_search (or plan_evaluate for a given layout) and
 * plan_answer_finish. */
#ifndef BS_PLAN_ANSWER_H
#define BS_PLAN_ANSWER_H

#include <stdbool.h>

#include "plan/assumptions.h"
#include "plan/cost.h"
#include "plan/plan.h"
#include "plan/reliability.h"
#include "plan/scaling.h"
#include "plan/search.h"

#define PLAN_ANSWER_MAX_ALONE 4

typedef struct {
    char label[64];
    bool found;
    int gpus;
    PlanResult best;
    double cost_usd; /* 0 if no rate */
} FleetAlternative;

typedef struct {
    PlanInput in;
    MoneyInput money[PLAN_MAX_KINDS];
    ReliabilityInput reliability_in;
    const char *rank_by;        /* "time" or "cost" */
    /* the answer */
    bool searched;
    int n_top;
    PlanResult top[SEARCH_MAX_TOP];
    double top_cost[SEARCH_MAX_TOP];
    SearchStats stats;
    double search_seconds;
    PlanResult plan;            /* the explicit layout, or the winner */
    Reliability reliability;
    double cost_usd;            /* wall GPU-hours x planning rate (0: no rate) */
    char why[2048];             /* searched: why the winner wins */
    /* batch */
    double loss, critical_batch;
    bool loss_given;
    /* linear scaling: against N x one GPU computing alone (0: mixed fleet) */
    double ideal_gpu_tokens_per_s, linear_efficiency;
    /* scaling against one node */
    bool have_reference;
    int reference_gpus;
    double reference_efficiency;
    /* mixed fleets: each kind alone */
    int n_alone;
    FleetAlternative alone[PLAN_ANSWER_MAX_ALONE];
    /* sweep */
    bool weak;
    int n_points, baseline;
    ScalePoint points[SCALING_MAX_POINTS];
    double point_goodput[SCALING_MAX_POINTS]; /* each found point's goodput with failures */
    char note[256];             /* an assumption worth stating (calibration) */
    Assumptions assumptions;    /* where each modelling switch came from */
} PlanAnswer;

/* GPU-hours including failures, and their cost at each kind's rate. */
double plan_answer_cost(const PlanAnswer *a, const PlanResult *p, const Reliability *rel);
/* Searches the layouts, ranked by time, or with by_cost (one GPU kind only) by cost over 1, 2, 4, ... nodes up to
 * the fleet; fills top, top_cost, stats, plan (the winner, when any fits: n_top > 0) and searched. With by_cost the
 * fleet's count becomes the winner's GPUs. */
void plan_answer_search(PlanAnswer *a, const SearchSpace *space, bool by_cost);
/* Given the chosen plan: its reliability and cost, linear efficiency, the one-node and each-kind-alone comparisons,
 * the scaling sweep from `from` to `to` GPUs when `scaling` (one GPU kind), and why the winner wins. */
void plan_answer_finish(PlanAnswer *a, const SearchSpace *space, bool scaling, int from, int to);

#endif

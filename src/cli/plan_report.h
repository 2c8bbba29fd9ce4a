/* plan_report.h: everything `batchscale plan` computed for one question,
 * and the three ways to show it: a readable table, JSON for tools, and a
 * scaling chart (PNG or SVG through cairo). */
#ifndef BS_CLI_PLAN_REPORT_H
#define BS_CLI_PLAN_REPORT_H

#include <stdbool.h>

#include "plan/assumptions.h"
#include "plan/cost.h"
#include "plan/plan.h"
#include "plan/reliability.h"
#include "plan/scaling.h"
#include "plan/search.h"

#define REPORT_MAX_ALONE 4

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
    FleetAlternative alone[REPORT_MAX_ALONE];
    /* sweep */
    bool weak;
    int n_points, baseline;
    ScalePoint points[SCALING_MAX_POINTS];
    char note[256];             /* an assumption worth stating (calibration) */
    Assumptions assumptions;    /* where each modelling switch came from */
} PlanReport;

/* GPU-hours including failures, and their cost at each kind's rate. */
double report_cost(const PlanReport *r, const PlanResult *p, const Reliability *rel);

void report_print(const PlanReport *r);
void report_print_json(const PlanReport *r);
/* Writes the scaling chart; the format follows the extension (.png, .svg). */
void report_plot(const PlanReport *r, const char *path);
/* One paragraph on why the winner of a search wins (into buf). */
void report_why(const PlanReport *r, char *buf, size_t n);

#endif

/* assumptions.h: where each modelling switch of an answer came from (pinned
 * by the user, set by a stack preset, chosen by the search, or the planner's
 * default), the value the answer used, and a warning for each switch the
 * search chose whose stack default would change the step by more than a
 * threshold. The origins are recorded by cli/ (which knows the flags); this
 * file reads the values off the answer and does the comparison. */
#ifndef BS_PLAN_ASSUMPTIONS_H
#define BS_PLAN_ASSUMPTIONS_H

#include "plan/plan.h"
#include "plan/stack_preset.h"

#define ASSUMPTION_MAX_WARNINGS 4
#define ASSUMPTION_WARN_STEP 0.05 /* the step change a search's choice is worth a warning at */

/* ORIGIN_DEFAULT_EP: the planner's default that differs for expert-parallel layouts (the rank order,
 * rank_order_default), shown when the answer's layout has ep > 1. */
typedef enum { ORIGIN_DEFAULT, ORIGIN_USER, ORIGIN_STACK, ORIGIN_SEARCH, ORIGIN_DEFAULT_EP } AssumptionOrigin;

typedef struct {
    const StackPreset *stack; /* NULL: none given */
    AssumptionOrigin origin[SWITCH_COUNT];
    char value[SWITCH_COUNT][24]; /* in the planner's words */
    int n_warnings;
    char warning[ASSUMPTION_MAX_WARNINGS][200];
} Assumptions;

const char *assumption_origin_name(AssumptionOrigin o);
/* Fills value[] from the answer's input and layout; a default rank order of
 * an expert-parallel layout becomes ORIGIN_DEFAULT_EP. */
void assumptions_read_values(Assumptions *a, const PlanInput *in, const Layout *l);
/* For each switch the search chose (recompute, ZeRO) that differs from the
 * stack's default: the winner re-evaluated with the stack's value; a warning
 * when the step changes by more than ASSUMPTION_WARN_STEP. */
void assumptions_check_search(Assumptions *a, const PlanInput *in, const PlanResult *winner);

#endif

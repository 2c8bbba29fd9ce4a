/* explain.h: why a search's winner wins, in words, and the parts of a step
 * time that the explanation and the report both name.
 *
 * The explanation is computed, not canned: it compares the winner with the
 * runner-up component by component, names the fastest layout that did not
 * fit, and evaluates the winner's neighbours (half the pipeline or tensor
 * degree, less recomputation, a lower ZeRO stage) to say what stops each. */
#ifndef BS_PLAN_EXPLAIN_H
#define BS_PLAN_EXPLAIN_H

#include <stdbool.h>
#include <stddef.h>

#include "plan/answer.h"
#include "plan/plan.h"

#define PLAN_STEP_PARTS 9

/* "compute", "TP communication", ... "stragglers": the parts of StepTime, in order. */
const char *plan_step_part_name(int part);
/* The exposed seconds of each part into out[PLAN_STEP_PARTS]. */
void plan_step_parts(const StepTime *t, double *out);
/* The largest part; with overheads_only, the largest but compute. */
int plan_largest_part(const StepTime *t, bool overheads_only);
/* "12.3 ms", "4.5 s", "6.7 min", "8.9 h", "1.2 days". Returns buf. */
const char *plan_duration_text(double seconds, char *buf, size_t n);
/* One paragraph into buf on why a search's winner (a->plan; a->top[1] the runner-up) wins. */
void plan_explain_winner(const PlanAnswer *a, char *buf, size_t n);

#endif

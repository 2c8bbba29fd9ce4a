/* plan_report.h: the three ways `batchscale plan` shows its answer
 * (plan/answer.h): a readable table, JSON for tools, and a scaling chart
 * (PNG or SVG through cairo). Printing only: everything shown is computed
 * before, by plan/. */
#ifndef BS_CLI_PLAN_REPORT_H
#define BS_CLI_PLAN_REPORT_H

#include "plan/answer.h"

void report_print(const PlanAnswer *r);
void report_print_json(const PlanAnswer *r);
/* Writes the scaling chart; the format follows the extension (.png, .svg). */
void report_plot(const PlanAnswer *r, const char *path);

#endif

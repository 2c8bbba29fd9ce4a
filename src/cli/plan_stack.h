/* plan_stack.h: `batchscale plan --stack NAME[@VERSION]`: a stack preset's
 * values become the values of the modelling flags the user did not give
 * (through the command's option table, so they are parsed and checked as
 * typed flags are), the search is kept inside what the stack can express,
 * and each switch's origin is recorded for the report. */
#ifndef BS_CLI_PLAN_STACK_H
#define BS_CLI_PLAN_STACK_H

#include <jansson.h>
#include <stdbool.h>

#include "cli/options.h"
#include "plan/assumptions.h"
#include "plan/search.h"

/* stack: the --stack value or NULL. searching: the answer is a search.
 * Dies with one line naming --stack on an unknown stack. */
void plan_stack_apply(const char *stack, const OptionTable *table, bool searching, Assumptions *out);
/* The stack's ZeRO stages and (where it lets the search pick one) its
 * recomputation policies become the search's space. */
void plan_stack_restrict(const Assumptions *as, SearchSpace *space);

/* The report's lines on the stack, each switch's origin and value, and the
 * search's warnings; and the same as the JSON object "assumptions". */
void plan_stack_print(const Assumptions *as);
json_t *plan_stack_json(const Assumptions *as);

#endif

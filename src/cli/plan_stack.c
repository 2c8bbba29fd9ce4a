/* plan_stack.c: --stack applied to `batchscale plan`'s options (plan_stack.h). */
#include "cli/plan_stack.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

/* The flag of each modelling switch (ModelSwitch order). */
static const char *const SWITCH_FLAGS[SWITCH_COUNT] = {
    "tp-overlap", "pp-overlap", "overlap",     "sequence-parallel", "recompute",   "zero",      "attention", "grad-reduce",
    "pipeline-engine", "layer-split", "zero1-reduce", "rank-order", "fp8-linears", "moe-probs", "cp-algo"};

static const OptionSpec *find_spec(const OptionSpec *specs, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (strcmp(specs[i].name, name) == 0) return &specs[i];
    bs_die("internal error: plan has no option --%s", name);
}

/* Sets an option's target as if `--name value` had been typed. */
static void set_option(const OptionSpec *spec, const char *value) {
    switch (spec->type) {
    case OPT_STRING: *(const char **)spec->target = value; return;
    case OPT_INT: *(int *)spec->target = atoi(value); return;
    case OPT_ENUM:
        for (int w = 0; spec->words[w]; w++)
            if (strcmp(spec->words[w], value) == 0) {
                *(int *)spec->target = w;
                return;
            }
        break;
    default: break;
    }
    bs_die("internal error: a stack preset gives --%s the value '%s'", spec->name, value);
}

void plan_stack_apply(const char *stack, const OptionTable *table, bool searching, Assumptions *out) {
    const OptionSpec *specs = table->specs;
    const int n_specs = table->count;
    memset(out, 0, sizeof *out);
    char why[512];
    if (stack && !stack_preset_find(stack, &out->stack, why, sizeof why)) bs_die("--stack: %s", why);
    const StackPreset *st = out->stack;
    for (int s = 0; s < SWITCH_COUNT; s++) {
        const OptionSpec *spec = find_spec(specs, n_specs, SWITCH_FLAGS[s]);
        bool searched = searching && (s == SWITCH_ZERO || (s == SWITCH_RECOMPUTE && (!st || st->recompute_per_run)));
        if (options_table_given(table, spec->name)) out->origin[s] = ORIGIN_USER;
        else if (searched) out->origin[s] = ORIGIN_SEARCH;
        else if (st && st->value[s]) {
            set_option(spec, st->value[s]);
            out->origin[s] = ORIGIN_STACK;
        } else out->origin[s] = ORIGIN_DEFAULT;
    }
    const bool has[] = {st && st->tensor_parallel, st && st->context_parallel, st && st->pipeline};
    const char *const degrees[] = {"tp", "cp", "pp"};
    for (int i = 0; st && i < 3; i++) /* what the stack cannot split, it does not */
        if (!has[i] && !options_table_given(table, degrees[i])) set_option(find_spec(specs, n_specs, degrees[i]), "1");
}

void plan_stack_restrict(const Assumptions *as, SearchSpace *space) {
    const StackPreset *st = as->stack;
    if (!st) return;
    space->zero_stages = st->zero_stages;
    if (st->recompute_per_run) space->recompute_policies = st->recompute_policies;
}

void plan_stack_print(const Assumptions *as) {
    static const AssumptionOrigin ORDER[] = {ORIGIN_USER, ORIGIN_STACK, ORIGIN_SEARCH, ORIGIN_DEFAULT, ORIGIN_DEFAULT_EP};
    if (as->stack) printf("stack      %s@%s: %s\n", as->stack->name, as->stack->version, as->stack->what);
    const char *label = "switches";
    for (int i = 0; i < (int)(sizeof ORDER / sizeof ORDER[0]); i++) {
        int shown = 0;
        for (int s = 0; s < SWITCH_COUNT; s++) {
            if (as->origin[s] != ORDER[i]) continue;
            if (shown++ == 0) printf("%-10s %-8s ", label, assumption_origin_name(ORDER[i])), label = "";
            printf("%s%s %s", shown > 1 ? ", " : "", model_switch_key((ModelSwitch)s), as->value[s]);
        }
        if (shown) printf("\n");
    }
    for (int i = 0; i < as->n_warnings; i++) printf("warning    %s\n", as->warning[i]);
}

json_t *plan_stack_json(const Assumptions *as) {
    json_t *switches = json_object();
    for (int s = 0; s < SWITCH_COUNT; s++)
        json_object_set_new(switches, model_switch_key((ModelSwitch)s),
                            json_pack("{s:s, s:s}", "value", as->value[s], "origin", assumption_origin_name(as->origin[s])));
    json_t *warnings = json_array();
    for (int i = 0; i < as->n_warnings; i++) json_array_append_new(warnings, json_string(as->warning[i]));
    json_t *stack = json_null();
    if (as->stack) stack = json_pack("{s:s, s:s}", "name", as->stack->name, "version", as->stack->version);
    return json_pack("{s:o, s:o, s:o}", "stack", stack, "switches", switches, "warnings", warnings);
}

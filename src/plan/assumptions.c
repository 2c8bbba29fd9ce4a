/* assumptions.c: an answer's switch values and the search-versus-stack
 * warnings (assumptions.h). */
#include "plan/assumptions.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const char *const ORIGIN_NAMES[] = {"default", "user", "stack", "search", "default (expert-parallel layouts)"};

const char *assumption_origin_name(AssumptionOrigin o) { return ORIGIN_NAMES[o]; }

static const char *on_off(bool b) { return b ? "on" : "off"; }

void assumptions_read_values(Assumptions *a, const PlanInput *in, const Layout *l) {
    static const char *const FP8[] = {"te", "te-delayed", "torchao"};
    const char *v[SWITCH_COUNT] = {
        [SWITCH_TP_OVERLAP] = on_off(l->tp_overlap),
        [SWITCH_PP_OVERLAP] = on_off(l->pp_overlap),
        [SWITCH_OVERLAP] = on_off(l->overlap),
        [SWITCH_SEQUENCE_PARALLEL] = on_off(l->sequence_parallel),
        [SWITCH_RECOMPUTE] = recompute_name(l->recompute),
        [SWITCH_ATTENTION] = attention_name(in->attention),
        [SWITCH_GRAD_REDUCE] = in->grad_reduce_fp32 ? "fp32" : "weights",
        [SWITCH_PIPELINE_ENGINE] = in->pipe_engine == PIPE_ENGINE_DEEPSPEED ? "deepspeed" : "megatron",
        [SWITCH_LAYER_SPLIT] = in->split.even ? "even" : "balanced",
        [SWITCH_ZERO1_REDUCE] = in->zero1_allreduce ? "allreduce" : "reduce-scatter",
        [SWITCH_RANK_ORDER] = rank_order_name(l->rank_order),
        [SWITCH_FP8_LINEARS] = FP8[in->model.fp8_linears],
        [SWITCH_MOE_PROBS] = in->model.moe_probs_in_activation ? "activation" : "combine",
        [SWITCH_CP_ALGO] = cp_algo_name(l->cp_algo),
    };
    for (int s = 0; s < SWITCH_COUNT; s++)
        if (s == SWITCH_ZERO) snprintf(a->value[s], sizeof a->value[s], "%d", l->zero);
        else snprintf(a->value[s], sizeof a->value[s], "%s", v[s]);
    if (a->origin[SWITCH_RANK_ORDER] == ORIGIN_DEFAULT && l->ep > 1) a->origin[SWITCH_RANK_ORDER] = ORIGIN_DEFAULT_EP;
}

/* The winner with one searched switch set to the stack's value. */
static bool stack_variant(const StackPreset *st, ModelSwitch s, const Layout *winner, Layout *out) {
    *out = *winner;
    const char *want = st->value[s];
    if (!want) return false;
    if (s == SWITCH_ZERO) {
        int z = want[0] - '0';
        if (z == winner->zero || (z > 0 && winner->dp * winner->cp == 1)) return false;
        out->zero = z;
        return true;
    }
    Recompute r;
    if (!recompute_parse(want, &r) || r == winner->recompute) return false;
    out->recompute = r;
    return true;
}

void assumptions_check_search(Assumptions *a, const PlanInput *in, const PlanResult *winner) {
    a->n_warnings = 0;
    if (!a->stack) return;
    const ModelSwitch searched[] = {SWITCH_RECOMPUTE, SWITCH_ZERO};
    for (int i = 0; i < 2; i++) {
        ModelSwitch s = searched[i];
        Layout alt;
        char why[256];
        if (a->origin[s] != ORIGIN_SEARCH || !stack_variant(a->stack, s, &winner->layout, &alt)) continue;
        if (!layout_check(in, &alt, why, sizeof why)) continue;
        PlanResult at_default;
        plan_evaluate(in, &alt, &at_default);
        double change = winner->time.step / at_default.time.step - 1;
        if (fabs(change) <= ASSUMPTION_WARN_STEP || a->n_warnings == ASSUMPTION_MAX_WARNINGS) continue;
        snprintf(a->warning[a->n_warnings++], sizeof a->warning[0], "%s %s chosen by search: step %+.1f%% vs the stack's %s (%s@%s)%s",
                 model_switch_key(s), a->value[s], 100 * change, a->stack->value[s], a->stack->name, a->stack->version,
                 at_default.fits ? "" : ", which does not fit");
    }
}

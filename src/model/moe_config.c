/* moe_config.c: the MoE layer's configuration and statistics (see moe.h):
 * the checks, sizes and capacity, the losses and metrics over summed
 * MoeStats, the loss-free bias update. No kernels: the layout and the
 * checkpoint readers (tests/fuzz) link it without them. */
#include "model/moe.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/reason.h"

bool moe_config_check(const MoeConfig *c, bool capacity_given, char *why, size_t why_size) {
    if (c->experts < 1 || c->experts > MOE_MAX_EXPERTS)
        bs_reason(why, why_size, "experts", "the number of experts must be 1..%d (got %d)", MOE_MAX_EXPERTS, c->experts);
    else if (c->top_k < 1 || c->top_k > c->experts)
        bs_reason(why, why_size, "top_k", "the experts per token must be 1..%d, the number of experts (got %d)",
                  c->experts, c->top_k);
    else if (capacity_given && !(c->capacity_factor > 0 && isfinite(c->capacity_factor)))
        bs_reason(why, why_size, "capacity_factor", "the capacity factor must be a number > 0 (got %g); dropless "
                  "routing never drops", c->capacity_factor);
    else if (!capacity_given && c->capacity_factor != 0)
        bs_reason(why, why_size, "capacity_factor", "the capacity factor is %g though none was given (0 means dropless)",
                  c->capacity_factor);
    else if (c->hidden < 1)
        bs_reason(why, why_size, "moe_ffn", "the experts' hidden width must be >= 1 (got %d)", c->hidden);
    else if (c->channels < 1)
        bs_reason(why, why_size, "channels", "the width must be >= 1 (got %d)", c->channels);
    else if (!(c->aux_coef >= 0 && isfinite(c->aux_coef)))
        bs_reason(why, why_size, "moe_aux_loss", "the load-balancing loss coefficient must be a number >= 0 (got %g)",
                  c->aux_coef);
    else if (!(c->z_coef >= 0 && isfinite(c->z_coef)))
        bs_reason(why, why_size, "moe_z_loss", "the router z-loss coefficient must be a number >= 0 (got %g)", c->z_coef);
    else if (!(c->routed_scale > 0 && isfinite(c->routed_scale)))
        bs_reason(why, why_size, "moe_routed_scale", "the routed experts' scale must be a number > 0 (got %g)",
                  c->routed_scale);
    else if ((unsigned)c->gates > MOE_GATES_PRE_SOFTMAX)
        bs_reason(why, why_size, "moe_gates", "unknown expert gates %d", (int)c->gates);
    else if (c->gates == MOE_GATES_PRE_SOFTMAX && c->router != MOE_ROUTER_SOFTMAX)
        bs_reason(why, why_size, "moe_gates router", "pre-softmax gates are the softmax router's (Megatron's "
                  "moe_router_pre_softmax); the %s router takes unnormalized gates", moe_router_name(c->router));
    else
        return true;
    return false;
}

bool moe_ep_check(int experts, int ep, int dp_size, char *why, size_t why_size) {
    if (ep < 1 || experts % ep != 0)
        bs_reason(why, why_size, "ep experts", "the expert-parallel degree %d must divide the %d experts", ep, experts);
    else if (dp_size % ep != 0)
        bs_reason(why, why_size, "ep dp", "the expert-parallel degree %d must divide the data-parallel size %d", ep,
                  dp_size);
    else
        return true;
    return false;
}

bool moe_parse_router(const char *name, MoeRouter *out) {
    if (strcmp(name, "softmax") == 0) *out = MOE_ROUTER_SOFTMAX;
    else if (strcmp(name, "sigmoid") == 0) *out = MOE_ROUTER_SIGMOID;
    else return false;
    return true;
}

const char *moe_router_name(MoeRouter router) { return router == MOE_ROUTER_SIGMOID ? "sigmoid" : "softmax"; }

static const char *const GATES_NAMES[] = {"normalized", "unnormalized", "pre-softmax"};

bool moe_parse_gates(const char *name, MoeGates *out) {
    for (int i = 0; i <= MOE_GATES_PRE_SOFTMAX; i++)
        if (strcmp(name, GATES_NAMES[i]) == 0) {
            *out = (MoeGates)i;
            return true;
        }
    return false;
}

const char *moe_gates_name(MoeGates gates) {
    return (unsigned)gates <= MOE_GATES_PRE_SOFTMAX ? GATES_NAMES[gates] : "unknown";
}

MoeGates moe_default_gates(int top_k) { return top_k > 1 ? MOE_GATES_NORMALIZED : MOE_GATES_UNNORMALIZED; }

size_t moe_router_numel(const MoeConfig *c) { return (size_t)c->experts * c->channels; }
size_t moe_expert_numel(const MoeConfig *c) { return 2 * (size_t)c->hidden * c->channels + c->hidden + c->channels; }

MoeExpert moe_expert(const MoeConfig *c, const real *experts, int e) {
    real *p = (real *)experts + (size_t)e * moe_expert_numel(c);
    const size_t fc = (size_t)c->hidden * c->channels;
    return (MoeExpert){p, p + fc, p + fc + c->hidden, p + 2 * fc + c->hidden};
}

size_t moe_capacity(const MoeConfig *c, size_t tokens) {
    if (c->capacity_factor <= 0) return SIZE_MAX;
    return (size_t)ceil((double)tokens * c->top_k / c->experts * c->capacity_factor);
}

/* ---- statistics and losses ---- */

void moe_losses(const MoeConfig *c, const MoeStats *local, const MoeStats *global, double *aux, double *z) {
    const double n = global->tokens > 0 ? global->tokens : 1;
    double s = 0;
    for (int i = 0; i < c->experts; i++) s += global->routed[i] / (n * c->top_k) * (local->prob[i] / n);
    *aux = c->aux_coef * c->experts * s;
    *z = c->z_coef * local->lse_sq / n;
}

MoeMetrics moe_metrics(const MoeConfig *c, const MoeStats *g) {
    MoeMetrics m = {0, 0, 0, 0, 0};
    double routed = 0, kept = 0;
    for (int i = 0; i < c->experts; i++) {
        routed += g->routed[i], kept += g->kept[i];
        if (g->routed[i] > m.max_load) m.max_load = g->routed[i];
    }
    m.mean_load = routed / c->experts;
    m.dropped_fraction = routed > 0 ? 1 - kept / routed : 0;
    moe_losses(c, g, g, &m.aux_loss, &m.z_loss);
    return m;
}

void moe_bias_update(const MoeConfig *c, real *bias, const MoeStats *g, double u) {
    double mean = 0;
    for (int i = 0; i < c->experts; i++) mean += g->routed[i];
    mean /= c->experts;
    for (int i = 0; i < c->experts; i++) {
        const double d = mean - g->routed[i];
        bias[i] += (real)(u * (d > 0 ? 1 : d < 0 ? -1 : 0));
    }
}

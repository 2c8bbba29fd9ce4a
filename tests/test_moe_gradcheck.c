/* test_moe_gradcheck.c: finite-difference gradient check of the MoE layer
 * (src/model/moe.c) in double precision: moe.c and the kernels it calls are
 * compiled into this test with BS_REAL_DOUBLE (src/kernels/real.h), so the
 * code checked is the code that trains, with float replaced by double.
 *
 * L = sum(out * w) + L_aux + L_z (statistics of this forward taken as the
 * global ones); backward with dout = w must equal central differences
 * (L(p + h e_i) - L(p - h e_i)) / 2h, h = 1e-5, for every element of x, the
 * router and the experts, within 1e-6 relative to the largest gradient
 * (truncation O(h^2) = 1e-10). Top-k choices and drops are piecewise
 * constant: the check also asserts that no perturbation changed the
 * per-expert routed or kept counts (else
 * a difference would straddle a kink). Cases: both routers, dropless and
 * with a capacity factor that drops, with a selection bias; and each
 * --moe-gates choice at top-1 and top-2 with a routed scale (1.5): the
 * unnormalized and pre-softmax gates and top-2 normalized ones give the
 * router a gradient, top-1 normalized only through the aux and z losses. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/error.h"
#include "model/moe.h"

static unsigned long long rng_state = 88172645463325252ULL;
static double uniform(void) { /* xorshift64, test-local */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

static double *rand_vec(size_t n, double scale) {
    double *v = bs_malloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) v[i] = scale * uniform();
    return v;
}

typedef struct {
    MoeLayer *layer;
    const MoeConfig *cfg;
    size_t N;
    double *x, *wr, *experts, *bias, *w, *out;
    MoeStats stats, first;
    int changed; /* evaluations whose routed or kept counts differ from the first */
} Ctx;

static double loss(Ctx *c) {
    memset(&c->stats, 0, sizeof c->stats);
    moe_forward(c->layer, c->out, c->x, c->N, c->wr, c->experts, c->bias, &c->stats);
    double aux, z, s = 0;
    moe_losses(c->cfg, &c->stats, &c->stats, &aux, &z);
    for (size_t i = 0; i < c->N * c->cfg->channels; i++) s += c->out[i] * c->w[i];
    if (memcmp(c->stats.routed, c->first.routed, sizeof c->stats.routed) ||
        memcmp(c->stats.kept, c->first.kept, sizeof c->stats.kept))
        c->changed++;
    return s + aux + z;
}

static void check_grad(Ctx *c, const char *what, double *p, const double *analytic, size_t n) {
    const double h = 1e-5;
    double max_err = 0, max_ref = 0;
    for (size_t i = 0; i < n; i++) {
        const double saved = p[i];
        p[i] = saved + h;
        const double lp = loss(c);
        p[i] = saved - h;
        const double lm = loss(c);
        p[i] = saved;
        const double num = (lp - lm) / (2 * h);
        max_err = fmax(max_err, fabs(num - analytic[i]));
        max_ref = fmax(max_ref, fabs(num));
    }
    const double rel = max_err / (max_ref > 0 ? max_ref : 1);
    printf("  %-9s rel err %.2e (max |grad| %.2e)\n", what, rel, max_ref);
    CHECK(rel < 1e-6 && max_ref > 0, "%s: rel err %.3e", what, rel);
}

static void check_case(MoeRouter router, double capacity_factor, MoeGates gates, int top_k, double scale) {
    const MoeConfig cfg = {.channels = 6, .hidden = 8, .experts = 4, .top_k = top_k, .router = router,
                           .gates = gates, .routed_scale = scale, .capacity_factor = capacity_factor,
                           .aux_coef = 0.5, .z_coef = 0.1};
    const size_t N = 16, C = 6, nr = moe_router_numel(&cfg), ne = cfg.experts * moe_expert_numel(&cfg);
    Ctx c = {.layer = moe_create(&cfg, N), .cfg = &cfg, .N = N};
    c.x = rand_vec(N * C, 1), c.wr = rand_vec(nr, 1), c.experts = rand_vec(ne, 0.5), c.bias = rand_vec(4, 0.1);
    c.w = rand_vec(N * C, 1), c.out = bs_malloc(sizeof(double) * N * C);
    double *dx = bs_calloc(N * C, sizeof(double)), *dwr = bs_calloc(nr, sizeof(double));
    double *dexperts = bs_calloc(ne, sizeof(double));
    memset(&c.first, 0, sizeof c.first);
    moe_forward(c.layer, c.out, c.x, N, c.wr, c.experts, c.bias, &c.first);
    moe_backward(c.layer, dx, dwr, dexperts, c.w, c.x, c.wr, c.experts, &c.first);
    MoeMetrics m = moe_metrics(&cfg, &c.first);
    printf("%s router, %s gates, top-%d, scale %g, capacity factor %g: dropped fraction %.3f\n",
           moe_router_name(router), moe_gates_name(gates), top_k, scale, capacity_factor, m.dropped_fraction);
    CHECK((m.dropped_fraction > 0) == (capacity_factor > 0), "dropped fraction %.3f", m.dropped_fraction);
    check_grad(&c, "dx", c.x, dx, N * C);
    check_grad(&c, "drouter", c.wr, dwr, nr);
    check_grad(&c, "dexperts", c.experts, dexperts, ne);
    CHECK(c.changed == 0, "%d perturbations changed the choices or drops", c.changed);
    moe_free(c.layer);
    free(c.x), free(c.wr), free(c.experts), free(c.bias), free(c.w), free(c.out), free(dx), free(dwr), free(dexperts);
}

int main(void) {
    check_case(MOE_ROUTER_SOFTMAX, 0, MOE_GATES_NORMALIZED, 2, 1);
    check_case(MOE_ROUTER_SIGMOID, 0, MOE_GATES_NORMALIZED, 2, 1);
    check_case(MOE_ROUTER_SOFTMAX, 1.0, MOE_GATES_NORMALIZED, 2, 1);
    check_case(MOE_ROUTER_SIGMOID, 0.75, MOE_GATES_NORMALIZED, 2, 1);
    for (int k = 1; k <= 2; k++) {
        check_case(MOE_ROUTER_SOFTMAX, 0, MOE_GATES_NORMALIZED, k, 1.5);
        check_case(MOE_ROUTER_SOFTMAX, 0, MOE_GATES_UNNORMALIZED, k, 1.5);
        check_case(MOE_ROUTER_SOFTMAX, 1.0, MOE_GATES_PRE_SOFTMAX, k, 1.5);
        check_case(MOE_ROUTER_SIGMOID, 0, MOE_GATES_UNNORMALIZED, k, 1.5);
    }
    printf("%s (%d failure(s))\n", failures ? "FAILED" : "ok", failures);
    return failures ? 1 : 0;
}

/* moe_hooks.c: the model's expert-parallel MoE layer (see moe_hooks.h). */
#include "parallel/moe_hooks.h"

#include <stdlib.h>

#include "core/error.h"
#include "core/timer.h"
#include "parallel/moe_parallel.h"

typedef struct {
    MoeEpContext *ctx;
    MoeParallel *layer;
} HookState;

static void *create(void *ctx, size_t max_rows, size_t seq_len) {
    MoeEpContext *c = ctx;
    HookState *s = bs_malloc(sizeof *s);
    s->ctx = c;
    s->layer = moe_parallel_create(&c->cfg, c->ep_group, max_rows);
    moe_parallel_set_capacity_group(s->layer, seq_len);
    return s;
}

static void destroy(void *state) {
    HookState *s = state;
    moe_parallel_free(s->layer);
    free(s);
}

static void forward(void *state, float *out, const float *x, size_t N, const float *router_w, const float *experts,
                    const float *bias, MoeStats *stats) {
    HookState *s = state;
    const uint64_t before = moe_parallel_bytes(s->layer);
    const double t0 = bs_now();
    moe_parallel_forward(s->layer, out, x, N, router_w, experts, bias, stats);
    s->ctx->seconds += bs_now() - t0;
    s->ctx->bytes += moe_parallel_bytes(s->layer) - before;
}

static void backward(void *state, float *dx, float *drouter_w, float *dexperts, const float *dout, const float *x,
                     const float *router_w, const float *experts, const MoeStats *global, double aux_coef,
                     double z_coef) {
    HookState *s = state;
    const uint64_t before = moe_parallel_bytes(s->layer);
    const double t0 = bs_now();
    moe_parallel_set_loss_coefs(s->layer, aux_coef, z_coef);
    moe_parallel_backward(s->layer, dx, drouter_w, dexperts, dout, x, router_w, experts, global);
    s->ctx->seconds += bs_now() - t0;
    s->ctx->bytes += moe_parallel_bytes(s->layer) - before;
}

void moe_hooks_init(MoeEpContext *ctx, const GPTConfig *cfg, Comm *ep_group) {
    ctx->cfg = gpt_moe_config(cfg);
    ctx->ep_group = ep_group;
    ctx->bytes = 0;
    ctx->seconds = 0;
    ctx->hooks = (MoeExpertHooks){create, destroy, forward, backward, ctx};
}

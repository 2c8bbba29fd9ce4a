/* moe_hooks.c: the model's expert-parallel MoE layer (see moe_hooks.h); a
 * hook state is one MoeParallel. */
#include "parallel/moe_hooks.h"

#include "parallel/moe_parallel.h"

static void sum_over_tp(void *tp_group, float *values, size_t n) { comm_allreduce(tp_group, values, n); }

static void *create(void *ctx, size_t max_rows, size_t seq_len) {
    const MoeEpContext *c = ctx;
    MoeParallel *layer = moe_parallel_create(&c->cfg, c->ep_group, max_rows);
    moe_parallel_set_capacity_group(layer, seq_len);
    if (comm_size(c->tp_group) > 1) moe_parallel_set_tensor_parallel(layer, c->tp_lead, sum_over_tp, c->tp_group);
    return layer;
}

static void destroy(void *state) { moe_parallel_free(state); }

static void forward(void *state, float *out, const float *x, size_t N, const float *router_w, const float *experts,
                    const float *bias, MoeStats *stats) {
    moe_parallel_forward(state, out, x, N, router_w, experts, bias, stats);
}

static void backward(void *state, float *dx, float *drouter_w, float *dexperts, const float *dout, const float *x,
                     const float *router_w, const float *experts, const MoeStats *global, double aux_coef,
                     double z_coef) {
    moe_parallel_set_loss_coefs(state, aux_coef, z_coef);
    moe_parallel_backward(state, dx, drouter_w, dexperts, dout, x, router_w, experts, global);
}

void moe_hooks_init(MoeEpContext *ctx, const GPTConfig *cfg, Comm *ep_group, Comm *tp_group) {
    ctx->cfg = gpt_moe_config(cfg);
    ctx->ep_group = ep_group;
    ctx->tp_group = tp_group;
    ctx->tp_lead = gpt_tp_rank(cfg) == 0;
    ctx->hooks = (MoeExpertHooks){create, destroy, forward, backward, ctx};
}

/* optimizer.c: the optimizer front door (see optimizer.h): maps the owned
 * range onto tensor pieces and calls the per-range update of each optimizer. */
#include "optim/optimizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/reason.h"
#include "core/range.h"
#include "optim/adamw.h"
#include "optim/lamb.h"
#include "optim/lars.h"
#include "optim/sgd.h"

static const char *const kind_names[OPTIM_KIND_COUNT] = {"adamw", "sgd", "lamb", "lars", "onebit-adam"};
static const int kind_state_arrays[OPTIM_KIND_COUNT] = {2, 1, 2, 1, 2};

bool optimizer_kind_parse(const char *name, OptimizerKind *kind, char *why, size_t why_size) {
    for (int k = 0; k < OPTIM_KIND_COUNT; k++) {
        if (strcmp(name, kind_names[k]) == 0) {
            *kind = (OptimizerKind)k;
            return true;
        }
    }
    return bs_reason(why, why_size, "optimizer", "the optimizer must be adamw, sgd, lamb, lars or onebit-adam (got '%s')",
                     name);
}

const char *optimizer_kind_name(OptimizerKind kind) { return kind_names[kind]; }

int optimizer_state_arrays(OptimizerKind kind) { return kind_state_arrays[kind]; }

void optimizer_init(Optimizer *opt, const OptimizerConfig *cfg, const OptimTensor *tensors, int num_tensors) {
    for (int t = 1; t < num_tensors; t++)
        if (tensors[t].offset < tensors[t - 1].offset + tensors[t - 1].count)
            bs_die("internal: optimizer tensors must be in buffer order without overlap (tensor %d)", t);
    opt->cfg = *cfg;
    opt->num_tensors = num_tensors;
    opt->tensors = bs_malloc(sizeof(OptimTensor) * (size_t)(num_tensors > 0 ? num_tensors : 1));
    memcpy(opt->tensors, tensors, sizeof(OptimTensor) * (size_t)num_tensors);
    opt->sums = bs_calloc((size_t)(2 * num_tensors + 1), sizeof(double));
}

void optimizer_free(Optimizer *opt) {
    free(opt->tensors);
    free(opt->sums);
    memset(opt, 0, sizeof *opt);
}

int optimizer_num_sums(const Optimizer *opt) {
    bool per_tensor_norms = opt->cfg.kind == OPTIM_LAMB || opt->cfg.kind == OPTIM_LARS;
    return per_tensor_norms ? 2 * opt->num_tensors : 0;
}

/* The part of tensor t inside the shard as [*local, *local + *count) of the
 * shard's arrays; false if they do not meet. */
static bool shard_piece(const OptimTensor *t, const OptimizerShard *shard, size_t *local, size_t *count) {
    Range mine = range_make(shard->offset, shard->count);
    Range piece = range_intersect(range_make(t->offset, t->count), mine);
    if (range_empty(piece)) return false;
    *local = range_offset_in(piece, mine);
    *count = piece.count;
    return true;
}

static float decay_of(const Optimizer *opt, const OptimTensor *t) { return t->decays ? opt->cfg.weight_decay : 0.0f; }

static LambStep lamb_step(const Optimizer *opt, const OptimTensor *t, const OptimizerStep *step) {
    const OptimizerConfig *c = &opt->cfg;
    return (LambStep){step->lr, c->beta1, c->beta2, c->eps, decay_of(opt, t), step->grad_scale, step->step,
                      c->lamb_clamp};
}

static LarsStep lars_step(const Optimizer *opt, const OptimTensor *t, const OptimizerStep *step) {
    const OptimizerConfig *c = &opt->cfg;
    return (LarsStep){step->lr, c->momentum, decay_of(opt, t), c->lars_eta, c->eps, step->grad_scale};
}

void optimizer_norms_phase(const Optimizer *opt, const OptimizerShard *shard, const OptimizerStep *step, double *sums) {
    if (optimizer_num_sums(opt) == 0) return;
    for (int i = 0; i < opt->num_tensors; i++) {
        const OptimTensor *t = &opt->tensors[i];
        size_t at, n;
        if (!shard_piece(t, shard, &at, &n)) continue;
        const float *p = shard->params + at, *g = shard->grads + at;
        if (opt->cfg.kind == OPTIM_LAMB) {
            LambStep s = lamb_step(opt, t, step);
            lamb_moments(p, g, shard->state[0] + at, shard->state[1] + at, n, &s, sums + 2 * i);
        } else {
            LarsStep s = lars_step(opt, t, step);
            lars_norms(p, g, n, &s, sums + 2 * i);
        }
    }
}

void optimizer_update_phase(const Optimizer *opt, const OptimizerShard *shard, const OptimizerStep *step,
                            const double *sums) {
    const OptimizerConfig *c = &opt->cfg;
    for (int i = 0; i < opt->num_tensors; i++) {
        const OptimTensor *t = &opt->tensors[i];
        size_t at, n;
        if (!shard_piece(t, shard, &at, &n)) continue;
        float *p = shard->params + at, *s0 = shard->state[0] + at;
        const float *g = shard->grads + at;
        switch (c->kind) {
        case OPTIM_ADAMW:
        case OPTIM_ONEBIT_ADAM: { /* its warm-up */
            AdamWStep s = {step->lr, c->beta1, c->beta2, c->eps, decay_of(opt, t), step->grad_scale, step->step};
            adamw_update(p, g, s0, shard->state[1] + at, n, &s);
            break;
        }
        case OPTIM_SGD: {
            SgdStep s = {step->lr, c->momentum, c->dampening, decay_of(opt, t), c->nesterov, step->grad_scale,
                         step->step};
            sgd_update(p, g, s0, n, &s);
            break;
        }
        case OPTIM_LAMB: {
            LambStep s = lamb_step(opt, t, step);
            double ratio = lamb_trust_ratio(sums[2 * i], sums[2 * i + 1], c->lamb_clamp);
            lamb_apply(p, s0, shard->state[1] + at, n, &s, ratio);
            break;
        }
        case OPTIM_LARS: {
            LarsStep s = lars_step(opt, t, step);
            lars_apply(p, g, s0, n, &s, lars_trust_ratio(sums[2 * i], sums[2 * i + 1], &s));
            break;
        }
        }
    }
}

void optimizer_step_pieces(Optimizer *opt, const OptimizerShard *pieces, int num_pieces, const OptimizerStep *step,
                           SumAcrossRanks sum_across_ranks, void *ctx) {
    int n = optimizer_num_sums(opt);
    memset(opt->sums, 0, sizeof(double) * (size_t)n);
    for (int k = 0; k < num_pieces; k++) optimizer_norms_phase(opt, &pieces[k], step, opt->sums);
    if (n > 0 && sum_across_ranks) sum_across_ranks(ctx, opt->sums, n);
    for (int k = 0; k < num_pieces; k++) optimizer_update_phase(opt, &pieces[k], step, opt->sums);
}

void optimizer_step(Optimizer *opt, const OptimizerShard *shard, const OptimizerStep *step,
                    SumAcrossRanks sum_across_ranks, void *ctx) {
    optimizer_step_pieces(opt, shard, 1, step, sum_across_ranks, ctx);
}

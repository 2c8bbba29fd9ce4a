/* moe.c: the Mixture-of-Experts MLP (see moe.h for the definitions): the
 * router (scores, top-k, combine weights, aux and z losses), capacity
 * dropping, and the experts computed as gemms over the rows routed to each
 * (matmul.c's kernels, so the bits do not depend on the thread count).
 *
 * Loops over rows that are independent run in parallel; every sum over rows
 * (statistics, weight gradients) runs in row order or inside the blocked
 * kernels. Nothing here knows about ranks. The configuration, sizes, losses
 * and metrics are moe_config.c. */
#include "model/moe.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kernels/kernels.h"
#include "kernels/vecmath.h"

struct MoeLayer {
    MoeConfig cfg;
    size_t max_rows, max_expert_rows;
    int first_expert, local_experts;
    /* token side, from the last moe_route */
    size_t N;
    real *logits, *scores, *lse; /* (N,E), (N,E), (N) */
    int32_t *slot_expert;        /* (N K): expert of slot t K + k */
    real *slot_weight, *slot_dweight;
    int32_t *slot_pos;  /* (N K): the slot's place in dispatch order */
    int32_t *disp_row;  /* (N K): row of each dispatch place */
    real *disp_score;   /* (N K) */
    size_t counts[MOE_MAX_EXPERTS];
    real *dlogits, *dx_router; /* (N,E), (N,C) */
    /* moe_forward's own buffers, dispatch order */
    real *rows, *y, *dy, *drows; /* (N K, C) */
    int64_t *positions;          /* (N K) */
    /* expert side, from the last moe_experts_forward */
    size_t M, kept_total;
    size_t kept_counts[MOE_MAX_EXPERTS]; /* per local expert */
    int32_t *kept_index;                 /* (M): the kept rows, grouped by expert */
    struct Ranked *ranked;               /* (M): capacity sort scratch */
    real *xk, *h, *g, *tmp_c, *tmp_f;    /* (M,C), (M,F), (M,F), (M,C), (M,F) */
    int64_t capacity_group;              /* rows per capacity decision (positions / it); 0: all rows one group */
    /* tensor parallelism (moe_set_tensor_parallel) */
    bool lead;
    MoeSumFn tp_sum;
    void *tp_ctx;
};

typedef struct Ranked {
    real score;
    int64_t position;
    int32_t index;
} Ranked;

/* ---- create ---- */

MoeLayer *moe_layer_create(const MoeConfig *cfg, size_t max_rows, int first_expert, int local_experts,
                           size_t max_expert_rows) {
    MoeLayer *L = bs_calloc(1, sizeof *L);
    L->cfg = *cfg;
    L->max_rows = max_rows, L->max_expert_rows = max_expert_rows;
    L->first_expert = first_expert, L->local_experts = local_experts;
    L->lead = true;
    const size_t E = (size_t)cfg->experts, C = (size_t)cfg->channels, F = (size_t)cfg->hidden;
    const size_t S = max_rows * (size_t)cfg->top_k, M = max_expert_rows;
    L->logits = bs_malloc(sizeof(real) * max_rows * E);
    L->scores = bs_malloc(sizeof(real) * max_rows * E);
    L->dlogits = bs_malloc(sizeof(real) * max_rows * E);
    L->lse = bs_malloc(sizeof(real) * max_rows);
    L->dx_router = bs_malloc(sizeof(real) * max_rows * C);
    L->slot_expert = bs_malloc(sizeof(int32_t) * S);
    L->slot_pos = bs_malloc(sizeof(int32_t) * S);
    L->disp_row = bs_malloc(sizeof(int32_t) * S);
    L->slot_weight = bs_malloc(sizeof(real) * S);
    L->slot_dweight = bs_calloc(S, sizeof(real));
    L->disp_score = bs_malloc(sizeof(real) * S);
    L->kept_index = bs_malloc(sizeof(int32_t) * M);
    L->ranked = bs_malloc(sizeof(Ranked) * M);
    L->xk = bs_malloc(sizeof(real) * M * C);
    L->tmp_c = bs_malloc(sizeof(real) * M * C);
    L->h = bs_malloc(sizeof(real) * M * F);
    L->g = bs_malloc(sizeof(real) * M * F);
    L->tmp_f = bs_malloc(sizeof(real) * M * F);
    return L;
}

MoeLayer *moe_create(const MoeConfig *cfg, size_t max_rows) {
    const size_t S = max_rows * (size_t)cfg->top_k, C = (size_t)cfg->channels;
    MoeLayer *L = moe_layer_create(cfg, max_rows, 0, cfg->experts, S);
    L->rows = bs_malloc(sizeof(real) * S * C);
    L->y = bs_malloc(sizeof(real) * S * C);
    L->dy = bs_malloc(sizeof(real) * S * C);
    L->drows = bs_malloc(sizeof(real) * S * C);
    L->positions = bs_malloc(sizeof(int64_t) * S);
    return L;
}

void moe_free(MoeLayer *L) {
    if (!L) return;
    void *bufs[] = {L->logits, L->scores,      L->dlogits,     L->lse,         L->dx_router, L->slot_expert,
                    L->slot_pos, L->disp_row,  L->slot_weight, L->slot_dweight, L->disp_score, L->kept_index,
                    L->ranked, L->xk,          L->tmp_c,       L->h,           L->g,         L->tmp_f,
                    L->rows,   L->y,           L->dy,          L->drows,       L->positions};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    free(L);
}

const MoeConfig *moe_layer_config(const MoeLayer *L) { return &L->cfg; }

void moe_set_loss_coefs(MoeLayer *L, double aux_coef, double z_coef) {
    L->cfg.aux_coef = aux_coef;
    L->cfg.z_coef = z_coef;
}

void moe_set_tensor_parallel(MoeLayer *L, bool lead, MoeSumFn sum, void *ctx) {
    L->lead = lead, L->tp_sum = sum, L->tp_ctx = ctx;
}

/* ---- the token side ---- */

/* Scores, logsumexp and the chosen experts with their weights of row t. */
static void route_row(MoeLayer *L, size_t t, const real *bias) {
    const int E = L->cfg.experts, K = L->cfg.top_k;
    const real *l = L->logits + t * E;
    real *s = L->scores + t * E;
    real max = l[0];
    for (int i = 1; i < E; i++) max = l[i] > max ? l[i] : max;
    real sum = 0;
    for (int i = 0; i < E; i++) sum += real_exp(l[i] - max);
    L->lse[t] = max + real_log(sum);
    for (int i = 0; i < E; i++)
        s[i] = L->cfg.router == MOE_ROUTER_SOFTMAX ? real_exp(l[i] - max) / sum : 1 / (1 + real_exp(-l[i]));
    int32_t *chosen = L->slot_expert + t * K;
    real total = 0;
    for (int k = 0; k < K; k++) {
        int best = -1;
        real best_key = 0;
        for (int i = 0; i < E; i++) {
            bool taken = false;
            for (int j = 0; j < k; j++) taken |= chosen[j] == i;
            const real key = s[i] + (bias ? bias[i] : 0);
            if (!taken && (best < 0 || key > best_key)) best = i, best_key = key;
        }
        chosen[k] = best;
        total += s[best];
    }
    /* the gates: S s / total (normalized) or S s */
    const bool normalized = L->cfg.gates == MOE_GATES_NORMALIZED;
    for (int k = 0; k < K; k++)
        L->slot_weight[t * K + k] = (normalized ? s[chosen[k]] / total : s[chosen[k]]) * (real)L->cfg.routed_scale;
}

/* The router probability P_i counts: s for softmax, s / sum s for sigmoid. */
static void add_route_stats(const MoeLayer *L, MoeStats *st) {
    const int E = L->cfg.experts, K = L->cfg.top_k;
    for (size_t t = 0; t < L->N; t++) {
        const real *s = L->scores + t * E;
        double norm = 1;
        if (L->cfg.router == MOE_ROUTER_SIGMOID) {
            double sum = 0;
            for (int i = 0; i < E; i++) sum += s[i];
            norm = 1 / sum;
        }
        for (int i = 0; i < E; i++) st->prob[i] += s[i] * norm;
        for (int k = 0; k < K; k++) st->routed[L->slot_expert[t * K + k]] += 1;
        st->lse_sq += (double)L->lse[t] * L->lse[t];
    }
    st->tokens += (double)L->N;
}

/* logits (N,E) = x (N,C) @ router_w^T, one row at a time in a fixed order: a
 * row's logits, and so its routing, do not depend on where it sits among the
 * rows (a BLAS kernel may round a row differently at another offset in the
 * block, and then equal tokens would not tie under the capacity rule, and a
 * layout that moves rows could route them differently). */
static void router_logits(real *logits, const real *x, const real *router_w, size_t N, int C, int E) {
#pragma omp parallel for schedule(static)
    for (size_t t = 0; t < N; t++)
        for (int e = 0; e < E; e++) {
            const real *xt = x + t * (size_t)C, *w = router_w + (size_t)e * C;
            real sum = 0;
            for (int c = 0; c < C; c++) sum += xt[c] * w[c];
            logits[t * (size_t)E + e] = sum;
        }
}

void moe_route(MoeLayer *L, const real *x, size_t N, const real *router_w, const real *bias, MoeStats *stats) {
    if (N > L->max_rows) bs_die("moe: %zu rows exceed the layer's %zu", N, L->max_rows);
    const int E = L->cfg.experts, K = L->cfg.top_k;
    L->N = N;
    router_logits(L->logits, x, router_w, N, L->cfg.channels, E);
#pragma omp parallel for schedule(static)
    for (size_t t = 0; t < N; t++) route_row(L, t, bias);
    add_route_stats(L, stats);
    /* dispatch order: counting sort by expert, rows ascending within one */
    size_t next[MOE_MAX_EXPERTS];
    memset(L->counts, 0, sizeof L->counts);
    for (size_t j = 0; j < N * K; j++) L->counts[L->slot_expert[j]]++;
    for (int e = 0, at = 0; e < E; at += (int)L->counts[e], e++) next[e] = (size_t)at;
    for (size_t t = 0; t < N; t++)
        for (int k = 0; k < K; k++) {
            const int e = L->slot_expert[t * K + k];
            const size_t p = next[e]++;
            L->slot_pos[t * K + k] = (int32_t)p;
            L->disp_row[p] = (int32_t)t;
            L->disp_score[p] = L->scores[t * E + e];
        }
}

const size_t *moe_dispatch_counts(const MoeLayer *L) { return L->counts; }
const real *moe_dispatch_scores(const MoeLayer *L) { return L->disp_score; }
const int32_t *moe_dispatch_rows(const MoeLayer *L) { return L->disp_row; }

void moe_gather(const MoeLayer *L, real *rows, const real *x) {
    const size_t C = (size_t)L->cfg.channels, S = L->N * L->cfg.top_k;
#pragma omp parallel for schedule(static)
    for (size_t p = 0; p < S; p++) memcpy(rows + p * C, x + (size_t)L->disp_row[p] * C, sizeof(real) * C);
}

void moe_combine(const MoeLayer *L, real *out, const real *y) {
    const int C = L->cfg.channels, K = L->cfg.top_k;
#pragma omp parallel for schedule(static)
    for (size_t t = 0; t < L->N; t++) {
        real *o = out + t * C;
        for (int c = 0; c < C; c++) o[c] = 0;
        for (int k = 0; k < K; k++) {
            const real w = L->slot_weight[t * K + k], *yk = y + (size_t)L->slot_pos[t * K + k] * C;
            for (int c = 0; c < C; c++) o[c] += w * yk[c];
        }
    }
}

void moe_combine_backward(MoeLayer *L, real *dy, const real *dout, const real *y) {
    const int C = L->cfg.channels, K = L->cfg.top_k;
#pragma omp parallel for schedule(static)
    for (size_t t = 0; t < L->N; t++) {
        const real *d = dout + t * C;
        for (int k = 0; k < K; k++) {
            const size_t p = (size_t)L->slot_pos[t * K + k];
            const real w = L->slot_weight[t * K + k], *yp = y + p * C;
            real *dyp = dy + p * C, dw = 0;
            for (int c = 0; c < C; c++) dyp[c] = w * d[c], dw += d[c] * yp[c];
            L->slot_dweight[t * K + k] = dw;
        }
    }
}

/* dlogits of row t: the combine weights', the aux loss's (a_i = c E f_i / n)
 * and the z loss's (zscale = 2 c_z / n). */
static void router_row_backward(MoeLayer *L, size_t t, const real *a, real zscale) {
    const int E = L->cfg.experts, K = L->cfg.top_k;
    const real *s = L->scores + t * E, *l = L->logits + t * E;
    const int32_t *chosen = L->slot_expert + t * K;
    const real scale = (real)L->cfg.routed_scale, *dw = L->slot_dweight + t * K;
    real ds[MOE_MAX_EXPERTS] = {0}, total = 0, gdw = 0;
    for (int k = 0; k < K; k++) total += s[chosen[k]];
    if (L->cfg.gates == MOE_GATES_NORMALIZED) {
        /* w_k = S g_k, g_k = s_k / total: ds_j = S (dw_j - sum_k g_k dw_k) / total, exactly 0 at K = 1 */
        for (int k = 0; k < K; k++) gdw += s[chosen[k]] / total * dw[k];
        for (int k = 0; k < K; k++) ds[chosen[k]] += scale * (dw[k] - gdw) / total;
    } else { /* w_k = S s_k */
        for (int k = 0; k < K; k++) ds[chosen[k]] += scale * dw[k];
    }
    real *dl = L->dlogits + t * E;
    if (L->cfg.router == MOE_ROUTER_SOFTMAX) {
        real sd = 0;
        for (int i = 0; i < E; i++) ds[i] += a[i], sd += s[i] * ds[i];
        for (int i = 0; i < E; i++) dl[i] = s[i] * (ds[i] - sd);
    } else {
        real sum = 0, sa = 0; /* P counts s / sum s */
        for (int i = 0; i < E; i++) sum += s[i];
        for (int i = 0; i < E; i++) sa += s[i] / sum * a[i];
        for (int i = 0; i < E; i++) dl[i] = (ds[i] + (a[i] - sa) / sum) * s[i] * (1 - s[i]);
    }
    for (int i = 0; i < E; i++) dl[i] += zscale * L->lse[t] * real_exp(l[i] - L->lse[t]);
}

void moe_route_backward(MoeLayer *L, real *dx, real *drouter_w, const real *drows, const real *x,
                        const real *router_w, const MoeStats *global) {
    const int E = L->cfg.experts, K = L->cfg.top_k, C = L->cfg.channels;
    const double n = global->tokens > 0 ? global->tokens : 1;
    real a[MOE_MAX_EXPERTS];
    for (int i = 0; i < E; i++) a[i] = (real)(L->cfg.aux_coef * E * global->routed[i] / (n * K) / n);
    const real zscale = (real)(2 * L->cfg.z_coef / n);
    if (L->tp_sum) L->tp_sum(L->tp_ctx, L->slot_dweight, L->N * (size_t)K); /* dout . y over the whole y */
#pragma omp parallel for schedule(static)
    for (size_t t = 0; t < L->N; t++) router_row_backward(L, t, a, zscale);
    matmul_backward(L->dx_router, drouter_w, NULL, L->dlogits, x, router_w, L->N, C, E);
    const bool router_dx = L->lead; /* the TP group's other ranks hold the same router gradient */
#pragma omp parallel for schedule(static)
    for (size_t t = 0; t < L->N; t++) {
        real *d = dx + t * C;
        const real *r = L->dx_router + t * C;
        for (int c = 0; router_dx && c < C; c++) d[c] += r[c];
        for (int k = 0; k < K; k++) {
            const real *dr = drows + (size_t)L->slot_pos[t * K + k] * C;
            for (int c = 0; c < C; c++) d[c] += dr[c];
        }
    }
}

/* ---- the expert side ---- */

/* Higher score first; at equal scores the earlier token. */
static int ranked_order(const void *pa, const void *pb) {
    const Ranked *a = pa, *b = pb;
    if (a->score != b->score) return a->score > b->score ? -1 : 1;
    return a->position < b->position ? -1 : a->position > b->position;
}

static int index_order(const void *pa, const void *pb) {
    const Ranked *a = pa, *b = pb;
    return (a->index > b->index) - (a->index < b->index);
}

/* The rows [begin, begin + n) one capacity decision covers: all of them,
 * or their `capacity` best, into kept (in their order among the rows). */
static size_t keep_best(MoeLayer *L, size_t begin, size_t n, const real *scores, const int64_t *positions,
                        size_t capacity, int32_t *kept) {
    if (n <= capacity) {
        for (size_t i = 0; i < n; i++) kept[i] = (int32_t)(begin + i);
        return n;
    }
    Ranked *r = L->ranked;
    for (size_t i = 0; i < n; i++) r[i] = (Ranked){scores[begin + i], positions[begin + i], (int32_t)(begin + i)};
    qsort(r, n, sizeof *r, ranked_order);
    qsort(r, capacity, sizeof *r, index_order); /* the capacity best, back in row order */
    for (size_t i = 0; i < capacity; i++) kept[i] = r[i].index;
    return capacity;
}

/* kept_index: the rows each expert computes (all, or its `capacity` best
 * per capacity group), in their order among the rows. An expert's rows come
 * in position order, so a group's rows are one contiguous run. */
static void choose_kept(MoeLayer *L, const size_t *counts, const real *scores, const int64_t *positions,
                        size_t capacity, MoeStats *stats) {
    size_t begin = 0, kept = 0;
    const int64_t group = L->capacity_group;
    for (int e = 0; e < L->local_experts; begin += counts[e], e++) {
        const size_t end = begin + counts[e];
        L->kept_counts[e] = 0;
        for (size_t run = begin, stop; run < end; run = stop) {
            stop = run + 1;
            while (group > 0 && stop < end && positions[stop] / group == positions[run] / group) stop++;
            if (group <= 0) stop = end;
            int32_t *into = L->kept_index + kept + L->kept_counts[e];
            L->kept_counts[e] += keep_best(L, run, stop - run, scores, positions, capacity, into);
        }
        kept += L->kept_counts[e];
        stats->kept[L->first_expert + e] += (double)L->kept_counts[e];
    }
    L->kept_total = kept;
}

void moe_set_capacity_group(MoeLayer *L, size_t rows) { L->capacity_group = (int64_t)rows; }

void moe_experts_forward(MoeLayer *L, real *y, const real *rows, const size_t *counts, const real *scores,
                         const int64_t *positions, size_t capacity, const real *experts, MoeStats *stats) {
    const int C = L->cfg.channels, F = L->cfg.hidden;
    size_t M = 0;
    for (int e = 0; e < L->local_experts; e++) M += counts[e];
    if (M > L->max_expert_rows) bs_die("moe: %zu expert rows exceed the layer's %zu", M, L->max_expert_rows);
    L->M = M;
    choose_kept(L, counts, scores, positions, capacity, stats);
    memset(y, 0, sizeof(real) * M * C);
    for (size_t i = 0; i < L->kept_total; i++)
        memcpy(L->xk + i * C, rows + (size_t)L->kept_index[i] * C, sizeof(real) * C);
    size_t r0 = 0;
    for (int e = 0; e < L->local_experts; r0 += L->kept_counts[e], e++) {
        const size_t n = L->kept_counts[e];
        if (n == 0) continue;
        const MoeExpert p = moe_expert(&L->cfg, experts, e);
        matmul_forward(L->h + r0 * F, L->xk + r0 * C, p.fcw, p.fcb, n, C, F);
        gelu_forward(L->g + r0 * F, L->h + r0 * F, n * F);
        matmul_forward(L->tmp_c + r0 * C, L->g + r0 * F, p.fcprojw, L->lead ? p.fcprojb : NULL, n, F, C);
    }
    for (size_t i = 0; i < L->kept_total; i++)
        memcpy(y + (size_t)L->kept_index[i] * C, L->tmp_c + i * C, sizeof(real) * C);
}

void moe_experts_backward(MoeLayer *L, real *drows, const real *dy, const real *experts, real *dexperts) {
    const int C = L->cfg.channels, F = L->cfg.hidden;
    for (size_t i = 0; i < L->kept_total; i++)
        memcpy(L->tmp_c + i * C, dy + (size_t)L->kept_index[i] * C, sizeof(real) * C);
    size_t r0 = 0;
    for (int e = 0; e < L->local_experts; r0 += L->kept_counts[e], e++) {
        const size_t n = L->kept_counts[e];
        if (n == 0) continue;
        const MoeExpert p = moe_expert(&L->cfg, experts, e), d = moe_expert(&L->cfg, dexperts, e);
        real *dyk = L->tmp_c + r0 * C, *dg = L->tmp_f + r0 * F;
        matmul_backward(dg, d.fcprojw, L->lead ? d.fcprojb : NULL, dyk, L->g + r0 * F, p.fcprojw, n, F, C);
        gelu_backward(dg, L->h + r0 * F, dg, n * F);
        /* dyk is consumed: the input gradient takes its place */
        matmul_backward(dyk, d.fcw, d.fcb, dg, L->xk + r0 * C, p.fcw, n, C, F);
    }
    memset(drows, 0, sizeof(real) * L->M * C);
    for (size_t i = 0; i < L->kept_total; i++)
        memcpy(drows + (size_t)L->kept_index[i] * C, L->tmp_c + i * C, sizeof(real) * C);
}

/* ---- one process ---- */

void moe_forward(MoeLayer *L, real *out, const real *x, size_t N, const real *router_w, const real *experts,
                 const real *bias, MoeStats *stats) {
    moe_route(L, x, N, router_w, bias, stats);
    const size_t S = N * L->cfg.top_k;
    for (size_t p = 0; p < S; p++) L->positions[p] = L->disp_row[p];
    moe_gather(L, L->rows, x);
    const size_t group = L->capacity_group > 0 ? (size_t)L->capacity_group : N;
    moe_experts_forward(L, L->y, L->rows, L->counts, L->disp_score, L->positions, moe_capacity(&L->cfg, group),
                        experts, stats);
    moe_combine(L, out, L->y);
}

void moe_backward(MoeLayer *L, real *dx, real *drouter_w, real *dexperts, const real *dout, const real *x,
                  const real *router_w, const real *experts, const MoeStats *global) {
    moe_combine_backward(L, L->dy, dout, L->y);
    moe_experts_backward(L, L->drows, L->dy, experts, dexperts);
    moe_route_backward(L, dx, drouter_w, L->drows, x, router_w, global);
}

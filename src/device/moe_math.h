/* moe_math.h: the arithmetic of the MoE kernels (DK_MOE_*: the router's
 * top-k and gates, the dispatch order and statistics, the combine and their
 * backward), written once for the CUDA kernels (cuda/moe_kernels.cu) and
 * sim (moe_sim.c), formula for formula as model/moe.c runs them on the CPU
 * (its exp on the host, so sim's routing is the CPU's). A "row" function is
 * one token's work; the dispatch is one serial pass (a counting sort and
 * the statistics' sums in row order, as moe.c's). */
#ifndef BS_DEVICE_MOE_MATH_H
#define BS_DEVICE_MOE_MATH_H

#include "device/device_kernels.h"
#include "device/kernel_math.h"

#ifdef __CUDACC__
#define KM_MOE_EXP expf
#else
#include "kernels/vecmath.h"
#define KM_MOE_EXP bs_expf
#endif

/* Row t's logits, scores, logsumexp, chosen experts and gates (moe.c's
 * router_logits and route_row). */
BS_HD void km_moe_route_row(const MoeArgs *a, int t) {
    const int E = a->E, K = a->K, C = a->C;
    const float *xt = a->x + (size_t)t * C;
    float *l = a->logits + (size_t)t * E, *s = a->scores + (size_t)t * E;
    for (int e = 0; e < E; e++) {
        const float *w = a->router_w + (size_t)e * C;
        float sum = 0;
        for (int c = 0; c < C; c++) sum += xt[c] * w[c];
        l[e] = sum;
    }
    float max = l[0];
    for (int i = 1; i < E; i++) max = l[i] > max ? l[i] : max;
    float sum = 0;
    for (int i = 0; i < E; i++) sum += KM_MOE_EXP(l[i] - max);
    a->lse[t] = max + logf(sum);
    for (int i = 0; i < E; i++)
        s[i] = a->router == DK_MOE_SOFTMAX ? KM_MOE_EXP(l[i] - max) / sum : 1 / (1 + KM_MOE_EXP(-l[i]));
    int32_t *chosen = a->slot_expert + (size_t)t * K;
    float total = 0;
    for (int k = 0; k < K; k++) {
        int best = -1;
        float best_key = 0;
        for (int i = 0; i < E; i++) {
            int taken = 0;
            for (int j = 0; j < k; j++) taken |= chosen[j] == i;
            const float key = s[i] + (a->bias ? a->bias[i] : 0);
            if (!taken && (best < 0 || key > best_key)) best = i, best_key = key;
        }
        chosen[k] = best;
        total += s[best];
    }
    const int normalized = a->gates == DK_MOE_NORMALIZED;
    for (int k = 0; k < K; k++)
        a->slot_weight[(size_t)t * K + k] = (normalized ? s[chosen[k]] / total : s[chosen[k]]) * a->routed_scale;
}

/* The dispatch order (assignments by expert, rows ascending within one:
 * counts, each slot's place, each place's row) and the statistics added in
 * row order (moe.c's add_route_stats; dropless, every assignment kept). */
BS_HD void km_moe_dispatch(const MoeArgs *a) {
    const int E = a->E, K = a->K;
    double *st = a->stats;
    int32_t next[DK_MOE_MAX_EXPERTS];
    for (int e = 0; e < E; e++) a->counts[e] = 0;
    for (size_t j = 0; j < (size_t)a->N * K; j++) a->counts[a->slot_expert[j]]++;
    for (int e = 0, at = 0; e < E; at += a->counts[e], e++) next[e] = at;
    for (int t = 0; t < a->N; t++) {
        const float *s = a->scores + (size_t)t * E;
        double norm = 1;
        if (a->router == DK_MOE_SIGMOID) {
            double sum = 0;
            for (int i = 0; i < E; i++) sum += s[i];
            norm = 1 / sum;
        }
        for (int i = 0; i < E; i++) st[DK_MOE_STAT_PROB + i] += s[i] * norm;
        for (int k = 0; k < K; k++) {
            const int e = a->slot_expert[(size_t)t * K + k], p = next[e]++;
            st[DK_MOE_STAT_ROUTED + e] += 1;
            a->slot_pos[(size_t)t * K + k] = p;
            a->disp_row[p] = t;
        }
        st[DK_MOE_STAT_LSE_SQ] += (double)a->lse[t] * a->lse[t];
    }
    st[DK_MOE_STAT_TOKENS] += (double)a->N;
    for (int e = 0; e < E; e++) st[DK_MOE_STAT_KEPT + e] += (double)a->counts[e];
}

/* rows[p] = x[disp_row[p]], channel c of place p */
BS_HD void km_moe_gather(const MoeArgs *a, size_t p, int c) {
    a->rows[p * a->C + c] = a->x[(size_t)a->disp_row[p] * a->C + c];
}

/* out[t] = sum_k w_k y[slot place], channel c, slots in order */
BS_HD void km_moe_combine(const MoeArgs *a, int t, int c) {
    float o = 0;
    for (int k = 0; k < a->K; k++) {
        const size_t j = (size_t)t * a->K + k;
        o += a->slot_weight[j] * a->y[(size_t)a->slot_pos[j] * a->C + c];
    }
    a->out[(size_t)t * a->C + c] = o;
}

/* dy[place] = w dout[t] and the weight's gradient dout[t] . y[place] of slot j = t K + k */
BS_HD void km_moe_combine_backward(const MoeArgs *a, size_t j) {
    const int C = a->C;
    const size_t t = j / a->K, p = (size_t)a->slot_pos[j];
    const float w = a->slot_weight[j], *d = a->dout + t * C, *yp = a->y + p * C;
    float *dyp = a->dy + p * C, dw = 0;
    for (int c = 0; c < C; c++) dyp[c] = w * d[c], dw += d[c] * yp[c];
    a->slot_dweight[j] = dw;
}

/* Row t's logits' gradient: the gates', the aux loss's and the z loss's
 * (moe.c's router_row_backward, a_i and zscale from the statistics). */
BS_HD void km_moe_router_backward_row(const MoeArgs *a, int t) {
    const int E = a->E, K = a->K;
    const double *st = a->stats, n = st[DK_MOE_STAT_TOKENS] > 0 ? st[DK_MOE_STAT_TOKENS] : 1;
    const float *s = a->scores + (size_t)t * E, *l = a->logits + (size_t)t * E;
    const int32_t *chosen = a->slot_expert + (size_t)t * K;
    const float *dw = a->slot_dweight + (size_t)t * K, zscale = (float)(2 * a->z_coef / n);
    float ds[DK_MOE_MAX_EXPERTS], aux[DK_MOE_MAX_EXPERTS], total = 0, gdw = 0;
    for (int i = 0; i < E; i++)
        ds[i] = 0, aux[i] = (float)(a->aux_coef * E * st[DK_MOE_STAT_ROUTED + i] / (n * K) / n);
    for (int k = 0; k < K; k++) total += s[chosen[k]];
    if (a->gates == DK_MOE_NORMALIZED) {
        for (int k = 0; k < K; k++) gdw += s[chosen[k]] / total * dw[k];
        for (int k = 0; k < K; k++) ds[chosen[k]] += a->routed_scale * (dw[k] - gdw) / total;
    } else {
        for (int k = 0; k < K; k++) ds[chosen[k]] += a->routed_scale * dw[k];
    }
    float *dl = a->dlogits + (size_t)t * E;
    if (a->router == DK_MOE_SOFTMAX) {
        float sd = 0;
        for (int i = 0; i < E; i++) ds[i] += aux[i], sd += s[i] * ds[i];
        for (int i = 0; i < E; i++) dl[i] = s[i] * (ds[i] - sd);
    } else {
        float sum = 0, sa = 0;
        for (int i = 0; i < E; i++) sum += s[i];
        for (int i = 0; i < E; i++) sa += s[i] / sum * aux[i];
        for (int i = 0; i < E; i++) dl[i] = (ds[i] + (aux[i] - sa) / sum) * s[i] * (1 - s[i]);
    }
    const float lse = a->lse[t];
    for (int i = 0; i < E; i++) dl[i] += zscale * lse * KM_MOE_EXP(l[i] - lse);
}

/* dx[t] = the router's input gradient + the row's assignments' drows, channel c */
BS_HD void km_moe_scatter_backward(const MoeArgs *a, int t, int c) {
    float d = a->dx_router[(size_t)t * a->C + c];
    for (int k = 0; k < a->K; k++) d += a->drows[(size_t)a->slot_pos[(size_t)t * a->K + k] * a->C + c];
    a->dx[(size_t)t * a->C + c] = d;
}

#endif

/* flash_math.h: the arithmetic of fused causal attention, FlashAttention-2
 * (Dao 2023, algorithms 1 and 2), written once for the CUDA kernels
 * (cuda/flash_attention.cu) and sim (flash_sim.c).
 *
 * Forward, per query row: the keys are taken a tile of FLASH_TILE at a
 * time; the row keeps its running max m, its sum l of exp(s - m) and its
 * unnormalised output acc; a tile with a new max m' rescales l and acc by
 * exp(m - m') (the online softmax). At the end out = acc / l and the row's
 * log-sum-exp lse = m + log l is kept for backward: nothing of size T x T is
 * ever stored. Backward recomputes each probability as exp(s - lse), with
 * D = rowsum(dout * out): dS = P (dout v^T - D), dq = scale dS k, dk =
 * scale dS^T q, dv = P^T dout. dq is one pass over query rows (keys in
 * tiles), dk and dv a second over key rows (queries in tiles), so every sum
 * has one owner and a fixed order: no atomics, the same bits every run.
 *
 * A tile's rows are read through a pointer and a stride, so the CUDA
 * kernels hand the tile they staged in shared memory and sim the global
 * arrays themselves: the same operations in the same order. */
#ifndef BS_DEVICE_FLASH_MATH_H
#define BS_DEVICE_FLASH_MATH_H

#include "device/device_kernels.h"
#include "device/kernel_math.h"

/* FLASH_TILE keys (forward, dq) or queries (dk, dv) per tile; a head has at
 * most FLASH_MAX_HEAD channels (a row's accumulators are that long). */
enum { FLASH_TILE = 32, FLASH_MAX_HEAD = 128 };

/* One row of the fused kernels: batch b, head h, row i (a query's, or a key's). */
typedef struct {
    int b, h, i, hs;
    float scale; /* 1 / sqrt(head size) */
} FlashRow;

/* The call over whole sequences: qkv (B,T,3C) and its gradient dqkv, out
 * and dout (B,T,C), lse (B,H,T), each query seeing the keys of its
 * document up to itself. */
static inline FlashArgs flash_self_attention(float *out, float *lse, float *dqkv, const float *qkv, const float *dout,
                                             const int32_t *doc_start, int B, int T, int C, int H) {
    FlashArgs a = {out, lse, dqkv, dqkv ? dqkv + C : NULL, dqkv ? dqkv + 2 * C : NULL, qkv, qkv + C, qkv + 2 * C, dout,
                   NULL, NULL, doc_start, B, T, T, C, H, 3 * C, 3 * C, 0};
    return a;
}

/* Row index idx = (b H + h) rows + i. */
BS_HD FlashRow km_flash_row(const FlashArgs *a, int idx, int rows) {
    FlashRow r;
    r.i = idx % rows;
    r.h = idx / rows % a->H;
    r.b = idx / (rows * a->H);
    r.hs = a->C / a->H;
    r.scale = 1.0f / sqrtf((float)r.hs);
    return r;
}

/* Offsets of query row i (q_stride apart), key row j (kv_stride), row i of out/dout (C), and of lse. */
BS_HD size_t km_flash_q_at(const FlashArgs *a, int b, int h, int i) {
    return ((size_t)b * a->Tq + i) * a->q_stride + (size_t)h * (a->C / a->H);
}
BS_HD size_t km_flash_kv_at(const FlashArgs *a, int b, int h, int j) {
    return ((size_t)b * a->Tk + j) * a->kv_stride + (size_t)h * (a->C / a->H);
}
BS_HD size_t km_flash_out_at(const FlashArgs *a, int b, int h, int i) {
    return ((size_t)b * a->Tq + i) * a->C + (size_t)h * (a->C / a->H);
}
BS_HD size_t km_flash_lse_at(const FlashArgs *a, int b, int h, int i) { return ((size_t)b * a->H + h) * a->Tq + i; }

/* Whether query i of batch b sees key j: causal within its document. */
BS_HD int km_flash_sees(const FlashArgs *a, int b, int i, int j) {
    const int qp = a->q_pos ? a->q_pos[i] : i, kp = a->k_pos ? a->k_pos[j] : j;
    return kp <= qp && kp >= (a->doc_start ? a->doc_start[(size_t)b * a->Tq + i] : 0);
}

/* Whether query i sees any of the keys [j0, j0 + n). */
BS_HD int km_flash_sees_tile(const FlashArgs *a, int b, int i, int j0, int n) {
    for (int jj = 0; jj < n; jj++)
        if (km_flash_sees(a, b, i, j0 + jj)) return 1;
    return 0;
}

BS_HD float km_flash_dot(const float *x, const float *y, int n) {
    float s = 0;
    for (int c = 0; c < n; c++) s += x[c] * y[c];
    return s;
}

/* A query row's running state: max m, sum l of exp(s - m), output acc (hs). */
typedef struct {
    float m, l;
    float acc[FLASH_MAX_HEAD];
} FlashState;

BS_HD void km_flash_begin(FlashState *st, int hs) {
    st->m = -INFINITY;
    st->l = 0;
    for (int c = 0; c < hs; c++) st->acc[c] = 0;
}

/* Query row (r.b, r.h, r.i), q its row, against keys [j0, j0 + n): key jj's
 * k and v rows at kt + jj stride and vt + jj stride. */
BS_HD void km_flash_forward_tile(const FlashArgs *a, const FlashRow *r, const float *q, int j0, int n,
                                 const float *kt, const float *vt, int stride, FlashState *st) {
    float s[FLASH_TILE], m = st->m;
    int any = 0;
    for (int jj = 0; jj < n; jj++) {
        const int seen = km_flash_sees(a, r->b, r->i, j0 + jj);
        s[jj] = seen ? km_flash_dot(q, kt + (size_t)jj * stride, r->hs) * r->scale : 0.0f;
        m = seen && s[jj] > m ? s[jj] : m;
        any |= seen;
    }
    if (!any) return;
    const float keep = km_exp_shifted(st->m, m); /* exp(m_old - m_new): 0 before the first key */
    st->l *= keep;
    for (int c = 0; c < r->hs; c++) st->acc[c] *= keep;
    for (int jj = 0; jj < n; jj++) {
        if (!km_flash_sees(a, r->b, r->i, j0 + jj)) continue;
        const float p = km_exp_shifted(s[jj], m), *v = vt + (size_t)jj * stride;
        st->l += p;
        for (int c = 0; c < r->hs; c++) st->acc[c] += p * v[c];
    }
    st->m = m;
}

/* out = acc / l and lse = m + log l (no key seen: out 0, lse -inf). */
BS_HD void km_flash_finish(const FlashArgs *a, const FlashRow *r, const FlashState *st) {
    float *o = a->out + km_flash_out_at(a, r->b, r->h, r->i);
    const float inv = st->l > 0 ? 1.0f / st->l : 0.0f;
    for (int c = 0; c < r->hs; c++) o[c] = st->acc[c] * inv;
    a->lse[km_flash_lse_at(a, r->b, r->h, r->i)] = st->l > 0 ? st->m + logf(st->l) : -INFINITY;
}

/* D = rowsum(dout * out) of query row i. */
BS_HD float km_flash_delta(const FlashArgs *a, int b, int h, int i) {
    const size_t at = km_flash_out_at(a, b, h, i);
    return km_flash_dot(a->dout + at, a->out + at, a->C / a->H);
}

/* The score gradient dS of query i and key j from the score s, the row's lse and D, and dout . v. */
BS_HD float km_flash_ds(float s, float lse, float dp, float D, float *p) {
    *p = km_exp_shifted(s, lse);
    return km_softmax_grad(*p, dp, D);
}

/* dq's accumulator (hs) of query row r += dS k over keys [j0, j0 + n) (tile as km_flash_forward_tile). */
BS_HD void km_flash_dq_tile(const FlashArgs *a, const FlashRow *r, const float *q, const float *dout, float lse,
                            float D, int j0, int n, const float *kt, const float *vt, int stride, float *dq) {
    for (int jj = 0; jj < n; jj++) {
        if (!km_flash_sees(a, r->b, r->i, j0 + jj)) continue;
        const float *k = kt + (size_t)jj * stride, *v = vt + (size_t)jj * stride;
        float p, ds = km_flash_ds(km_flash_dot(q, k, r->hs) * r->scale, lse, km_flash_dot(dout, v, r->hs), D, &p);
        for (int c = 0; c < r->hs; c++) dq[c] += ds * k[c];
    }
}

/* The key row r's dk and dv accumulators (hs each) += over queries [i0, i0
 * + n): query ii's q and dout rows at qt + ii q_stride and dt + ii d_stride,
 * its lse and D at lse[ii] and D[ii]. */
BS_HD void km_flash_dkv_tile(const FlashArgs *a, const FlashRow *r, const float *k, const float *v, int i0, int n,
                             const float *qt, int q_stride, const float *dt, int d_stride, const float *lse,
                             const float *D, float *dk, float *dv) {
    for (int ii = 0; ii < n; ii++) {
        if (!km_flash_sees(a, r->b, i0 + ii, r->i)) continue;
        const float *q = qt + (size_t)ii * q_stride, *d = dt + (size_t)ii * d_stride;
        float p, ds = km_flash_ds(km_flash_dot(q, k, r->hs) * r->scale, lse[ii], km_flash_dot(d, v, r->hs), D[ii], &p);
        for (int c = 0; c < r->hs; c++) {
            dv[c] += p * d[c];
            dk[c] += ds * q[c];
        }
    }
}

/* dst (hs) = acc x scale, or += with accumulate. */
BS_HD void km_flash_store(float *dst, const float *acc, float scale, int hs, int accumulate) {
    for (int c = 0; c < hs; c++) dst[c] = accumulate ? dst[c] + acc[c] * scale : acc[c] * scale;
}

/* Row idx = (b H + h) T + i of a merge: (out, lse) and the part's, by log-sum-exp. */
BS_HD void km_flash_merge_row(const FlashMergeArgs *a, int idx) {
    const int i = idx % a->T, h = idx / a->T % a->H, b = idx / (a->T * a->H), hs = a->C / a->H;
    const float mine = a->lse[idx], part = a->part_lse[idx];
    if (part == -INFINITY) return;
    const float m = mine > part ? mine : part, wa = km_exp_shifted(mine, m), wb = km_exp_shifted(part, m);
    const float inv = 1.0f / (wa + wb);
    float *o = a->out + ((size_t)b * a->T + i) * a->C + (size_t)h * hs;
    const float *po = a->part_out + ((size_t)b * a->T + i) * a->C + (size_t)h * hs;
    for (int c = 0; c < hs; c++) o[c] = (wa * o[c] + wb * po[c]) * inv;
    a->lse[idx] = m + logf(wa + wb);
}

#endif

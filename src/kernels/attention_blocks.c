/* attention_blocks.c: causal attention of a rank's query rows against one
 * block of keys and values at a time (context parallelism).
 *
 * A sequence of T tokens is cut into 2N chunks of c = T / 2N rows; a rank
 * holds two of them (its "local rows", t = 2c) and sees the keys and values
 * of every rank's two chunks as blocks (one per ring step, or all at once
 * after an all-gather). Row blocks of ATTENTION_ROW_BLOCK queries are taken
 * one at a time; against a block whose chunks are ordered (the first chunk
 * before the second), the keys a query may see are always a prefix of the
 * block's rows, so each product is one gemm over that prefix:
 *
 *   key chunk < query chunk: all c keys of that chunk
 *   key chunk = query chunk: the keys up to the query (causal diagonal)
 *   key chunk > query chunk: none
 *
 * Forward keeps the running row max m and sum l of exp(s - m) and merges each
 * block's partial output by log-sum-exp (exact, in any block order). The raw
 * scores land in att (B,H,t,T) at their global key positions; the finish
 * turns them into the softmax probabilities P, 0 above
 * the diagonal, as attention_forward keeps them: exp(s - m) / l with the
 * row's final max and sum, rounded as the single-process kernel rounds. Backward then needs no
 * recomputation: with D = rowsum(dout * out), dS = P * (dout V^T - D). */
#include <math.h>
#include <omp.h>
#include <stdbool.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/vecmath.h"

typedef struct {
    const AttentionRows *r;
    int b, h, half;      /* the (batch, head) pair and the local chunk */
    int r0, r1;          /* rows of the row block inside that chunk */
    int chunk;           /* rows per chunk (t / 2) */
    const int *kv_chunks;
} RowBlock;

/* Everything one pass over a key/value block reads and writes. */
typedef struct {
    const AttentionRows *r;
    const int *kv_chunks;
    const real *qkv, *kv;
    real *out, *row_max, *row_sum, *att;                 /* forward */
    real *dqkv, *dkv; const real *dout, *delta;          /* backward */
    real *scratch;
    int slots;
    const AttentionPoll *poll;
} BlockPass;

size_t attention_blocks_scratch_floats(int t, int C, int H) {
    return (size_t)ATTENTION_ROW_BLOCK * (2 * (size_t)t + (size_t)(C / H));
}

/* Keys of chunk kv seen by row `row` (inside a chunk of `c` rows) of chunk q. */
static int keys_seen(int kv, int q, int row, int c) { return kv < q ? c : kv == q ? row + 1 : 0; }

/* Keys seen by one row of the block: a prefix of the block's rows. */
static int prefix_of(const RowBlock *x, int row) {
    int q = x->r->q_chunks[x->half];
    int first = keys_seen(x->kv_chunks[0], q, row, x->chunk);
    return first < x->chunk ? first : first + keys_seen(x->kv_chunks[1], q, row, x->chunk);
}

static RowBlock row_block(const AttentionRows *r, const int *kv_chunks, int b, int h, int half, int r0) {
    RowBlock x = {r, b, h, half, r0, 0, r->t / 2, kv_chunks};
    x.r1 = r0 + ATTENTION_ROW_BLOCK < x.chunk ? r0 + ATTENTION_ROW_BLOCK : x.chunk;
    return x;
}

/* Offsets of row i of the block (local row half*c + i) in (B,t,width) and att. */
static size_t row_at(const RowBlock *x, int i, int width) {
    return ((size_t)x->b * x->r->t + (size_t)x->half * x->chunk + (size_t)i) * (size_t)width;
}
static size_t att_row(const RowBlock *x, int i) {
    return (((size_t)x->b * x->r->H + x->h) * x->r->t + (size_t)x->half * x->chunk + (size_t)i) * (size_t)x->r->T;
}
/* Column of the block's key j in att: its global position. */
static size_t att_col(const RowBlock *x, int j) {
    return j < x->chunk ? (size_t)x->kv_chunks[0] * x->chunk + (size_t)j
                        : (size_t)x->kv_chunks[1] * x->chunk + (size_t)(j - x->chunk);
}

/* Copies n scores of a scratch row to att (to_att) or back, at their global columns. */
static void move_row(real *att_row_p, real *scratch_row, const RowBlock *x, int n, bool to_att) {
    for (int part = 0; part < 2; part++) {
        int j0 = part * x->chunk, j1 = n < j0 + x->chunk ? n : j0 + x->chunk;
        if (j1 <= j0) break;
        real *a = att_row_p + att_col(x, j0);
        real *s = scratch_row + j0;
        memcpy(to_att ? a : s, to_att ? s : a, sizeof(real) * (size_t)(j1 - j0));
    }
}

void attention_blocks_begin(real *out, real *row_max, real *row_sum, const AttentionRows *r) {
    size_t rows = (size_t)r->B * r->H * r->t;
    memset(out, 0, sizeof(real) * (size_t)r->B * r->t * r->C);
    for (size_t i = 0; i < rows; i++) row_max[i] = -INFINITY, row_sum[i] = 0;
}

/* Index of row i of the block in the (B,H,t) row statistics. */
static size_t stat_at(const RowBlock *x, int i) {
    return ((size_t)x->b * x->r->H + x->h) * x->r->t + (size_t)x->half * x->chunk + (size_t)i;
}

/* One row block of the forward: scores, softmax against the block, P V, merged. */
static void forward_rows(const RowBlock *x, const BlockPass *ps, real *scratch) {
    const AttentionRows *r = x->r;
    real *out = ps->out, *row_max = ps->row_max, *row_sum = ps->row_sum, *att = ps->att;
    const real *qkv = ps->qkv, *kv = ps->kv;
    const int C = r->C, hs = C / r->H, t = r->t, rows = x->r1 - x->r0, n = prefix_of(x, x->r1 - 1);
    if (n == 0) return;
    const real scale = 1 / real_sqrt((real)hs);
    const real *q = qkv + row_at(x, x->r0, 3 * C) + x->h * hs;
    const real *k = kv + (size_t)x->b * t * 2 * C + x->h * hs, *v = k + C;
    real *s = scratch, *o = scratch + (size_t)ATTENTION_ROW_BLOCK * t;
    real block_max[ATTENTION_ROW_BLOCK], block_sum[ATTENTION_ROW_BLOCK];
    bs_gemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, n, hs, scale, q, 3 * C, k, 2 * C, 0, s, t);
    for (int i = 0; i < rows; i++) {
        real *srow = s + (size_t)i * t;
        int seen = prefix_of(x, x->r0 + i);
        move_row(att + att_row(x, x->r0 + i), srow, x, seen, true);
        real m = -INFINITY, l = 0;
        for (int j = 0; j < seen; j++) m = srow[j] > m ? srow[j] : m;
        for (int j = 0; j < seen; j++) l += (srow[j] = real_exp(srow[j] - m));
        for (int j = seen; j < n; j++) srow[j] = 0;
        block_max[i] = m, block_sum[i] = l;
    }
    bs_gemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hs, n, 1, s, t, v, 2 * C, 0, o, hs);
    for (int i = 0; i < rows; i++) {
        size_t at = stat_at(x, x->r0 + i);
        if (block_sum[i] == 0) continue; /* no key seen */
        real m = row_max[at] > block_max[i] ? row_max[at] : block_max[i];
        real keep = row_sum[at] > 0 ? real_exp(row_max[at] - m) : 0, add = real_exp(block_max[i] - m);
        real *orow = out + row_at(x, x->r0 + i, C) + x->h * hs;
        const real *brow = o + (size_t)i * hs;
        for (int d = 0; d < hs; d++) orow[d] = keep * orow[d] + add * brow[d];
        row_sum[at] = keep * row_sum[at] + add * block_sum[i];
        row_max[at] = m;
    }
}

/* Global position of local row i. */
static int position_of(const AttentionRows *r, int i) {
    int c = r->t / 2;
    return r->q_chunks[i / c] * c + i % c;
}

void attention_blocks_finish(real *out, const real *row_max, const real *row_sum, real *att, const AttentionRows *r) {
    const int hs = r->C / r->H;
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < r->B; b++)
        for (int h = 0; h < r->H; h++)
            for (int i = 0; i < r->t; i++) {
                size_t at = ((size_t)b * r->H + h) * r->t + (size_t)i;
                real m = row_max[at], inv = 1 / row_sum[at]; /* exp(s - m) / l: attention_forward's rounding */
                real *orow = out + ((size_t)b * r->t + i) * r->C + h * hs;
                for (int d = 0; d < hs; d++) orow[d] *= inv;
                real *arow = att + at * (size_t)r->T;
                int pos = position_of(r, i);
                for (int j = 0; j <= pos; j++) arow[j] = real_exp(arow[j] - m) * inv;
                memset(arow + pos + 1, 0, sizeof(real) * (size_t)(r->T - pos - 1));
            }
}

void attention_blocks_delta(real *delta, const real *dout, const real *out, const AttentionRows *r) {
    const int hs = r->C / r->H;
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < r->B; b++)
        for (int i = 0; i < r->t; i++)
            for (int h = 0; h < r->H; h++) {
                const real *o = out + ((size_t)b * r->t + i) * r->C + h * hs;
                const real *d = dout + ((size_t)b * r->t + i) * r->C + h * hs;
                real sum = 0;
                for (int k = 0; k < hs; k++) sum += o[k] * d[k];
                delta[((size_t)b * r->H + h) * r->t + (size_t)i] = sum;
            }
}

/* One row block of the backward against one key/value block. */
static void backward_rows(const RowBlock *x, const BlockPass *ps, real *scratch) {
    const AttentionRows *r = x->r;
    real *dqkv = ps->dqkv, *dkv = ps->dkv, *att = ps->att;
    const real *dout = ps->dout, *qkv = ps->qkv, *kv = ps->kv, *delta = ps->delta;
    const int C = r->C, hs = C / r->H, t = r->t, rows = x->r1 - x->r0, n = prefix_of(x, x->r1 - 1);
    if (n == 0) return;
    const real scale = 1 / real_sqrt((real)hs);
    const size_t kv_at = (size_t)x->b * t * 2 * C + x->h * hs;
    const real *q = qkv + row_at(x, x->r0, 3 * C) + x->h * hs, *k = kv + kv_at, *v = k + C;
    const real *dO = dout + row_at(x, x->r0, C) + x->h * hs;
    real *dq = dqkv + row_at(x, x->r0, 3 * C) + x->h * hs, *dk = dkv + kv_at, *dv = dk + C;
    real *p = scratch, *ds = scratch + (size_t)ATTENTION_ROW_BLOCK * t;
    bs_gemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, n, hs, 1, dO, C, v, 2 * C, 0, ds, t);
    for (int i = 0; i < rows; i++) {
        real *prow = p + (size_t)i * t, *drow = ds + (size_t)i * t;
        move_row(att + att_row(x, x->r0 + i), prow, x, n, false);
        real D = delta[stat_at(x, x->r0 + i)];
        for (int j = 0; j < n; j++) drow[j] = prow[j] * (drow[j] - D);
    }
    bs_gemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hs, n, scale, ds, t, k, 2 * C, 1, dq, 3 * C);
    bs_gemm(CblasRowMajor, CblasTrans, CblasNoTrans, n, hs, rows, scale, ds, t, q, 3 * C, 1, dk, 2 * C);
    bs_gemm(CblasRowMajor, CblasTrans, CblasNoTrans, n, hs, rows, 1, p, t, dO, C, 1, dv, 2 * C);
}

static void run_pass(const BlockPass *ps, bool backward) {
    const AttentionRows *r = ps->r;
    const size_t per_slot = attention_blocks_scratch_floats(r->t, r->C, r->H);
    int nthreads = omp_get_max_threads() < ps->slots ? omp_get_max_threads() : ps->slots;
#pragma omp parallel for collapse(2) schedule(dynamic, 1) num_threads(nthreads)
    for (int b = 0; b < r->B; b++)
        for (int h = 0; h < r->H; h++) {
            real *slot = ps->scratch + (size_t)omp_get_thread_num() * per_slot;
            for (int half = 0; half < 2; half++)
                for (int r0 = 0; r0 < r->t / 2; r0 += ATTENTION_ROW_BLOCK) {
                    RowBlock x = row_block(r, ps->kv_chunks, b, h, half, r0);
                    if (backward) backward_rows(&x, ps, slot);
                    else forward_rows(&x, ps, slot);
                    if (ps->poll && omp_get_thread_num() == 0) ps->poll->fn(ps->poll->ctx);
                }
        }
}

void attention_blocks_forward(real *out, real *row_max, real *row_sum, real *att, const real *qkv, const real *kv,
                              const int kv_chunks[2], const AttentionRows *r, real *scratch, int slots,
                              const AttentionPoll *poll) {
    BlockPass ps = {.r = r, .kv_chunks = kv_chunks, .qkv = qkv, .kv = kv, .out = out, .row_max = row_max,
                    .row_sum = row_sum, .att = att, .scratch = scratch, .slots = slots, .poll = poll};
    run_pass(&ps, false);
}

void attention_blocks_backward(real *dqkv, real *dkv, const real *dout, const real *qkv, const real *kv,
                               const real *att, const real *delta, const int kv_chunks[2], const AttentionRows *r,
                               real *scratch, int slots, const AttentionPoll *poll) {
    BlockPass ps = {.r = r, .kv_chunks = kv_chunks, .qkv = qkv, .kv = kv, .att = (real *)att, .dqkv = dqkv,
                    .dkv = dkv, .dout = dout, .delta = delta, .scratch = scratch, .slots = slots, .poll = poll};
    run_pass(&ps, true);
}

/* flash_sim.c: sim's fused attention (device_kernels.h's FlashArgs): the
 * arithmetic of flash_math.h in the order the CUDA kernels run it, each
 * row's tiles one after another, read from the global arrays where a GPU
 * stages them in shared memory. */
#include "device/flash_math.h"
#include "device/sim_kernels.h"

static int tile_len(int start, int rows) { return rows - start < FLASH_TILE ? rows - start : FLASH_TILE; }

/* Every query row: its key tiles in order, then its output and lse. */
static void flash_forward(const FlashArgs *a) {
    FlashState st;
    for (int idx = 0; idx < a->B * a->H * a->Tq; idx++) {
        const FlashRow r = km_flash_row(a, idx, a->Tq);
        const float *q = a->q + km_flash_q_at(a, r.b, r.h, r.i);
        km_flash_begin(&st, r.hs);
        for (int j0 = 0; j0 < a->Tk; j0 += FLASH_TILE) {
            const size_t kv = km_flash_kv_at(a, r.b, r.h, j0);
            km_flash_forward_tile(a, &r, q, j0, tile_len(j0, a->Tk), a->k + kv, a->v + kv, a->kv_stride, &st);
        }
        km_flash_finish(a, &r, &st);
    }
}

/* dq of every query row, its key tiles in order. */
static void flash_dq(const FlashArgs *a) {
    float dq[FLASH_MAX_HEAD];
    for (int idx = 0; idx < a->B * a->H * a->Tq; idx++) {
        const FlashRow r = km_flash_row(a, idx, a->Tq);
        const float *q = a->q + km_flash_q_at(a, r.b, r.h, r.i), *d = a->dout + km_flash_out_at(a, r.b, r.h, r.i);
        const float lse = a->lse[km_flash_lse_at(a, r.b, r.h, r.i)], D = km_flash_delta(a, r.b, r.h, r.i);
        for (int c = 0; c < r.hs; c++) dq[c] = 0;
        for (int j0 = 0; j0 < a->Tk; j0 += FLASH_TILE) {
            const size_t kv = km_flash_kv_at(a, r.b, r.h, j0);
            km_flash_dq_tile(a, &r, q, d, lse, D, j0, tile_len(j0, a->Tk), a->k + kv, a->v + kv, a->kv_stride, dq);
        }
        km_flash_store(a->dq + km_flash_q_at(a, r.b, r.h, r.i), dq, r.scale, r.hs, a->accumulate);
    }
}

/* dk and dv of every key row, its query tiles in order (each tile's lse and D gathered first, as a GPU block stages them). */
static void flash_dkv(const FlashArgs *a) {
    float dk[FLASH_MAX_HEAD], dv[FLASH_MAX_HEAD], lse[FLASH_TILE], D[FLASH_TILE];
    for (int idx = 0; idx < a->B * a->H * a->Tk; idx++) {
        const FlashRow r = km_flash_row(a, idx, a->Tk);
        const size_t at = km_flash_kv_at(a, r.b, r.h, r.i);
        for (int c = 0; c < r.hs; c++) dk[c] = dv[c] = 0;
        for (int i0 = 0; i0 < a->Tq; i0 += FLASH_TILE) {
            const int n = tile_len(i0, a->Tq);
            for (int ii = 0; ii < n; ii++) {
                lse[ii] = a->lse[km_flash_lse_at(a, r.b, r.h, i0 + ii)];
                D[ii] = km_flash_delta(a, r.b, r.h, i0 + ii);
            }
            km_flash_dkv_tile(a, &r, a->k + at, a->v + at, i0, n, a->q + km_flash_q_at(a, r.b, r.h, i0), a->q_stride,
                              a->dout + km_flash_out_at(a, r.b, r.h, i0), a->C, lse, D, dk, dv);
        }
        km_flash_store(a->dk + at, dk, r.scale, r.hs, a->accumulate);
        km_flash_store(a->dv + at, dv, 1.0f, r.hs, a->accumulate);
    }
}

static void flash_merge(const FlashMergeArgs *a) {
    for (int idx = 0; idx < a->B * a->H * a->T; idx++) km_flash_merge_row(a, idx);
}

void sim_flash(const DeviceCall *c) {
    if (c->kernel == DK_FLASH_FORWARD) flash_forward(&c->a.flash);
    else if (c->kernel == DK_FLASH_MERGE) flash_merge(&c->a.flash_merge);
    else {
        flash_dq(&c->a.flash);
        flash_dkv(&c->a.flash);
    }
}

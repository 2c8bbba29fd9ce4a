/* gpt_device_cp.c: context-parallel attention in the device step (gpt_device_cp.h): the all-gather and the ring. */
#include "model/gpt_device_cp.h"

#include <stdbool.h>
#include <stdlib.h>

struct GPTDeviceCP {
    Device *dev;
    DeviceStream *compute;
    DeviceComm *comm;
    int size, rank, B, t, C, H;
    CpAlgo algo;
    size_t block;                /* one rank's qkv floats: B t 3C */
    float *qkv_all, *dqkv_all;   /* allgather: every rank's block, rank r's at r x block */
    float *ring[2];              /* ring: the block in hand and the one arriving, each qkv then (backward) its gradient */
    float *part_out, *part_lse;  /* one block's partial output (B,t,C) and log-sum-exp (B,H,t) */
    int32_t *k_pos, *positions;  /* each rank's t positions (size t); this rank's per sequence (B t) */
};

/* Every rank's positions, and this rank's repeated per sequence, onto the device. */
static int upload_positions(GPTDeviceCP *cp, CpSplit split) {
    const size_t t = (size_t)cp->t;
    int32_t *all = malloc(sizeof(int32_t) * t * (size_t)(cp->size + cp->B));
    if (!all) return -1;
    for (int r = 0; r < cp->size; r++) context_positions(cp->size, r, split, cp->t * cp->size, all + (size_t)r * t);
    for (int b = 0; b < cp->B; b++)
        for (size_t i = 0; i < t; i++) all[(size_t)(cp->size + b) * t + i] = all[(size_t)cp->rank * t + i];
    int rc = device_copy(cp->dev, cp->compute, cp->k_pos, all, sizeof(int32_t) * t * (size_t)cp->size,
                         COPY_HOST_TO_DEVICE);
    rc = rc ? rc : device_copy(cp->dev, cp->compute, cp->positions, all + (size_t)cp->size * t,
                               sizeof(int32_t) * t * (size_t)cp->B, COPY_HOST_TO_DEVICE);
    rc = rc ? rc : device_stream_sync(cp->dev, cp->compute);
    free(all);
    return rc;
}

/* The algorithm's buffers: the gathered blocks and their gradients, or the ring's two travelling blocks. */
static bool alloc_blocks(GPTDeviceCP *cp) {
    if (cp->algo == CP_ALGO_RING) {
        cp->ring[0] = device_alloc(cp->dev, sizeof(float) * 2 * cp->block);
        cp->ring[1] = device_alloc(cp->dev, sizeof(float) * 2 * cp->block);
        return cp->ring[0] && cp->ring[1];
    }
    const size_t all = sizeof(float) * cp->block * (size_t)cp->size;
    cp->qkv_all = device_alloc(cp->dev, all);
    cp->dqkv_all = device_alloc(cp->dev, all);
    return cp->qkv_all && cp->dqkv_all;
}

GPTDeviceCP *gpt_device_cp_create(Device *dev, DeviceStream *compute, DeviceComm *comm, int size, int rank,
                                  CpAlgo algo, CpSplit split, int B, int t, int C, int H) {
    GPTDeviceCP *cp = calloc(1, sizeof *cp);
    if (!cp) return NULL;
    *cp = (GPTDeviceCP){.dev = dev, .compute = compute, .comm = comm, .size = size, .rank = rank, .algo = algo,
                        .B = B, .t = t, .C = C, .H = H, .block = (size_t)B * t * 3 * C};
    const size_t rows = (size_t)B * t;
    const bool blocks = alloc_blocks(cp);
    cp->part_out = device_alloc(dev, sizeof(float) * rows * (size_t)C);
    cp->part_lse = device_alloc(dev, sizeof(float) * rows * (size_t)H);
    cp->k_pos = device_alloc(dev, sizeof(int32_t) * (size_t)t * (size_t)size);
    cp->positions = device_alloc(dev, sizeof(int32_t) * rows);
    if (!blocks || !cp->part_out || !cp->part_lse || !cp->k_pos || !cp->positions ||
        upload_positions(cp, split) != 0) {
        gpt_device_cp_free(cp);
        return NULL;
    }
    return cp;
}

void gpt_device_cp_free(GPTDeviceCP *cp) {
    if (!cp) return;
    void *buffers[] = {cp->qkv_all, cp->dqkv_all, cp->ring[0], cp->ring[1], cp->part_out, cp->part_lse, cp->k_pos,
                       cp->positions};
    for (size_t i = 0; i < sizeof buffers / sizeof buffers[0]; i++) device_free(cp->dev, buffers[i]);
    free(cp);
}

const int32_t *gpt_device_cp_positions(const GPTDeviceCP *cp) { return cp->positions; }

/* Every rank's qkv into qkv_all (rank order, whatever the group's partition); the compute stream waits for it. */
static int gather_qkv(GPTDeviceCP *cp, const float *qkv) {
    float *mine = cp->qkv_all + (size_t)cp->rank * cp->block;
    if (device_copy(cp->dev, cp->compute, mine, qkv, sizeof(float) * cp->block, COPY_DEVICE_TO_DEVICE) != 0) return -1;
    for (int r = 0; r < cp->size; r++) device_comm_broadcast(cp->comm, cp->qkv_all + (size_t)r * cp->block, cp->block, r);
    device_comm_wait(cp->comm);
    return 0;
}

/* The blocks in the order they are taken: this rank's first, then the others. */
static int block_at(const GPTDeviceCP *cp, int step) { return (cp->rank + step) % cp->size; }

/* This rank's queries (q, q_stride 3C) against rank r's keys and values in kv (its qkv block). */
static FlashArgs block_args(const GPTDeviceCP *cp, int r, const float *q, const float *kv) {
    const int C = cp->C;
    FlashArgs a = {.q = q, .k = kv + C, .v = kv + 2 * C, .q_pos = cp->k_pos + (size_t)cp->rank * cp->t,
                   .k_pos = cp->k_pos + (size_t)r * cp->t, .B = cp->B, .Tq = cp->t, .Tk = cp->t, .C = C, .H = cp->H,
                   .q_stride = 3 * C, .kv_stride = 3 * C};
    return a;
}

/* Step s of forward: this rank's queries against rank r's block kv, into (out, lse) at step 0, merged after. */
static int forward_block(GPTDeviceCP *cp, int s, int r, float *out, float *lse, const float *qkv, const float *kv) {
    DeviceCall call = {.kernel = DK_FLASH_FORWARD, .a.flash = block_args(cp, r, qkv, kv)};
    call.a.flash.out = s ? cp->part_out : out;
    call.a.flash.lse = s ? cp->part_lse : lse;
    if (device_launch(cp->dev, cp->compute, &call) != 0) return -1;
    if (!s) return 0;
    DeviceCall merge = {.kernel = DK_FLASH_MERGE,
                        .a.flash_merge = {out, lse, cp->part_out, cp->part_lse, cp->B, cp->t, cp->C, cp->H}};
    return device_launch(cp->dev, cp->compute, &merge);
}

/* One hop of the ring: n floats of send to the next rank, the previous rank's into recv; the compute stream waits. */
static void hop(GPTDeviceCP *cp, const float *send, float *recv, size_t n) {
    device_comm_sendrecv(cp->comm, send, n, (cp->rank + 1) % cp->size, recv, n, (cp->rank + cp->size - 1) % cp->size,
                         0);
    device_comm_wait(cp->comm);
}

/* Ring: at step s this rank holds rank - s's block and passes it on while computing with it (queued before). */
static int ring_forward(GPTDeviceCP *cp, float *out, float *lse, const float *qkv) {
    const float *held = qkv;
    for (int s = 0; s < cp->size; s++) {
        float *next = cp->ring[s % 2];
        if (s + 1 < cp->size) hop(cp, held, next, cp->block);
        if (forward_block(cp, s, (cp->rank + cp->size - s) % cp->size, out, lse, qkv, held) != 0) return -1;
        held = next;
    }
    return 0;
}

int gpt_device_cp_forward(GPTDeviceCP *cp, float *out, float *lse, const float *qkv) {
    if (cp->algo == CP_ALGO_RING) return ring_forward(cp, out, lse, qkv);
    if (gather_qkv(cp, qkv) != 0) return -1;
    for (int s = 0; s < cp->size; s++) {
        const int r = block_at(cp, s);
        if (forward_block(cp, s, r, out, lse, qkv, cp->qkv_all + (size_t)r * cp->block) != 0) return -1;
    }
    return 0;
}

/* Backward of this rank's queries against rank r's block kv: dq added into dq (this rank's, stride 3C), dk and dv
 * into dkv's k and v columns. */
static int backward_block(GPTDeviceCP *cp, int r, float *dq, float *dkv, const float *kv, const float *dout,
                          const float *qkv, float *out, float *lse) {
    DeviceCall call = {.kernel = DK_FLASH_BACKWARD, .a.flash = block_args(cp, r, qkv, kv)};
    FlashArgs *a = &call.a.flash;
    a->out = out, a->lse = lse, a->dout = dout, a->accumulate = 1;
    a->dq = dq, a->dk = dkv + cp->C, a->dv = dkv + 2 * cp->C;
    return device_launch(cp->dev, cp->compute, &call);
}

/* Ring: each block travels with its key/value gradient so far (ring[i] = qkv, then its gradient), each rank adding
 * its share; after the last block one more hop brings this rank's own gradient home, added to its dq in dqkv. */
static int ring_backward(GPTDeviceCP *cp, float *dqkv, const float *dout, const float *qkv, float *out, float *lse) {
    const size_t n = cp->block;
    float *held = cp->ring[0];
    if (device_zero(cp->dev, cp->compute, dqkv, sizeof(float) * n) != 0 ||
        device_copy(cp->dev, cp->compute, held, qkv, sizeof(float) * n, COPY_DEVICE_TO_DEVICE) != 0 ||
        device_zero(cp->dev, cp->compute, held + n, sizeof(float) * n) != 0)
        return -1;
    for (int s = 0; s < cp->size; s++) {
        if (backward_block(cp, (cp->rank + cp->size - s) % cp->size, dqkv, held + n, held, dout, qkv, out, lse) != 0)
            return -1;
        float *next = cp->ring[(s + 1) % 2];
        hop(cp, held, next, 2 * n);
        held = next;
    }
    DeviceCall add = {.kernel = DK_RESIDUAL_FORWARD, .a.elementwise = {dqkv, dqkv, held + n, n}};
    return device_launch(cp->dev, cp->compute, &add);
}

/* Each block's dk and dv (and this rank's dq, in its own block's q columns) are added into dqkv_all, summed over
 * the group: this rank's block then holds its dq and every rank's dk and dv of its keys. */
int gpt_device_cp_backward(GPTDeviceCP *cp, float *dqkv, const float *dout, const float *qkv, float *out, float *lse) {
    if (cp->algo == CP_ALGO_RING) return ring_backward(cp, dqkv, dout, qkv, out, lse);
    const size_t all = cp->block * (size_t)cp->size;
    if (gather_qkv(cp, qkv) != 0 || device_zero(cp->dev, cp->compute, cp->dqkv_all, sizeof(float) * all) != 0)
        return -1;
    float *mine = cp->dqkv_all + (size_t)cp->rank * cp->block;
    for (int s = 0; s < cp->size; s++) {
        const int r = block_at(cp, s);
        const size_t at = (size_t)r * cp->block;
        if (backward_block(cp, r, mine, cp->dqkv_all + at, cp->qkv_all + at, dout, qkv, out, lse) != 0) return -1;
    }
    device_comm_allreduce(cp->comm, cp->dqkv_all, all, false);
    device_comm_wait(cp->comm);
    return device_copy(cp->dev, cp->compute, dqkv, mine, sizeof(float) * cp->block, COPY_DEVICE_TO_DEVICE);
}

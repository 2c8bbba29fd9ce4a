/* gpt_device_cp.c: context-parallel attention in the device step (gpt_device_cp.h). */
#include "model/gpt_device_cp.h"

#include <stdlib.h>

struct GPTDeviceCP {
    Device *dev;
    DeviceStream *compute;
    DeviceComm *comm;
    int size, rank, B, t, C, H;
    size_t block;                /* one rank's qkv floats: B t 3C */
    float *qkv_all, *dqkv_all;   /* every rank's block, rank r's at r x block */
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

GPTDeviceCP *gpt_device_cp_create(Device *dev, DeviceStream *compute, DeviceComm *comm, int size, int rank,
                                  CpSplit split, int B, int t, int C, int H) {
    GPTDeviceCP *cp = calloc(1, sizeof *cp);
    if (!cp) return NULL;
    *cp = (GPTDeviceCP){.dev = dev, .compute = compute, .comm = comm, .size = size, .rank = rank, .B = B, .t = t,
                        .C = C, .H = H, .block = (size_t)B * t * 3 * C};
    const size_t all = sizeof(float) * cp->block * (size_t)size, rows = (size_t)B * t;
    cp->qkv_all = device_alloc(dev, all);
    cp->dqkv_all = device_alloc(dev, all);
    cp->part_out = device_alloc(dev, sizeof(float) * rows * (size_t)C);
    cp->part_lse = device_alloc(dev, sizeof(float) * rows * (size_t)H);
    cp->k_pos = device_alloc(dev, sizeof(int32_t) * (size_t)t * (size_t)size);
    cp->positions = device_alloc(dev, sizeof(int32_t) * rows);
    if (!cp->qkv_all || !cp->dqkv_all || !cp->part_out || !cp->part_lse || !cp->k_pos || !cp->positions ||
        upload_positions(cp, split) != 0) {
        gpt_device_cp_free(cp);
        return NULL;
    }
    return cp;
}

void gpt_device_cp_free(GPTDeviceCP *cp) {
    if (!cp) return;
    void *buffers[] = {cp->qkv_all, cp->dqkv_all, cp->part_out, cp->part_lse, cp->k_pos, cp->positions};
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

/* This rank's queries (q, q_stride 3C) against rank r's keys and values in qkv_all. */
static FlashArgs block_args(const GPTDeviceCP *cp, int r, const float *q) {
    const float *kv = cp->qkv_all + (size_t)r * cp->block;
    const int C = cp->C;
    FlashArgs a = {.q = q, .k = kv + C, .v = kv + 2 * C, .q_pos = cp->k_pos + (size_t)cp->rank * cp->t,
                   .k_pos = cp->k_pos + (size_t)r * cp->t, .B = cp->B, .Tq = cp->t, .Tk = cp->t, .C = C, .H = cp->H,
                   .q_stride = 3 * C, .kv_stride = 3 * C};
    return a;
}

int gpt_device_cp_forward(GPTDeviceCP *cp, float *out, float *lse, const float *qkv) {
    if (gather_qkv(cp, qkv) != 0) return -1;
    for (int s = 0; s < cp->size; s++) {
        DeviceCall call = {.kernel = DK_FLASH_FORWARD, .a.flash = block_args(cp, block_at(cp, s), qkv)};
        call.a.flash.out = s ? cp->part_out : out;
        call.a.flash.lse = s ? cp->part_lse : lse;
        if (device_launch(cp->dev, cp->compute, &call) != 0) return -1;
        if (!s) continue;
        DeviceCall merge = {.kernel = DK_FLASH_MERGE,
                            .a.flash_merge = {out, lse, cp->part_out, cp->part_lse, cp->B, cp->t, cp->C, cp->H}};
        if (device_launch(cp->dev, cp->compute, &merge) != 0) return -1;
    }
    return 0;
}

/* Each block's dk and dv (and this rank's dq, in its own block's q columns) are added into dqkv_all, summed over
 * the group: this rank's block then holds its dq and every rank's dk and dv of its keys. */
int gpt_device_cp_backward(GPTDeviceCP *cp, float *dqkv, const float *dout, const float *qkv, float *out, float *lse) {
    const size_t all = cp->block * (size_t)cp->size;
    if (gather_qkv(cp, qkv) != 0 || device_zero(cp->dev, cp->compute, cp->dqkv_all, sizeof(float) * all) != 0)
        return -1;
    float *mine = cp->dqkv_all + (size_t)cp->rank * cp->block;
    for (int s = 0; s < cp->size; s++) {
        const int r = block_at(cp, s);
        float *dkv = cp->dqkv_all + (size_t)r * cp->block;
        DeviceCall call = {.kernel = DK_FLASH_BACKWARD, .a.flash = block_args(cp, r, qkv)};
        FlashArgs *a = &call.a.flash;
        a->out = out, a->lse = lse, a->dout = dout, a->accumulate = 1;
        a->dq = mine, a->dk = dkv + cp->C, a->dv = dkv + 2 * cp->C;
        if (device_launch(cp->dev, cp->compute, &call) != 0) return -1;
    }
    device_comm_allreduce(cp->comm, cp->dqkv_all, all, false);
    device_comm_wait(cp->comm);
    return device_copy(cp->dev, cp->compute, dqkv, mine, sizeof(float) * cp->block, COPY_DEVICE_TO_DEVICE);
}

/* device_gather.c: ZeRO 3's parameter gathers on device buffers
 * (device_gather.h); the device's counterpart of data_parallel.c's slots. */
#include "parallel/device_gather.h"

#include <stdio.h>
#include <stdlib.h>

#include "core/error.h"
#include "core/range.h"

enum { SLOT_EMB, SLOT_LNF, SLOT_LAYER_A, SLOT_LAYER_B, NUM_SLOTS };

typedef struct {
    float *buf;
    int block;   /* block held or being gathered, -1: none */
    bool in_use; /* between the hook's params and params_done */
    bool waited; /* the compute stream waits for its gather */
    DeviceEvent *gathered; /* its gather's end on the communication stream */
} Slot;

struct DeviceGather {
    Device *dev;
    GPTDevice *model;
    DeviceComm *comm;
    const GPTConfig *cfg;
    Range shard;
    size_t total;
    Slot slots[NUM_SLOTS];
    int *order; /* the blocks in the order a pass asks for them */
    int length, at;
};

static void check(const DeviceGather *z, int rc) {
    if (rc != 0) bs_die("device %s: %s", device_name(z->dev), device_error(z->dev));
}

static Range block_range(const DeviceGather *z, int block) {
    Range r;
    gpt_block_range(z->cfg, block, &r.offset, &r.count);
    return r;
}

static int slot_kind(const DeviceGather *z, int block) {
    return block == 0 ? SLOT_EMB : block == z->cfg->num_layers + 1 ? SLOT_LNF : SLOT_LAYER_A;
}

/* The slot holding block, or a free one for it, or -1. */
static int find_slot(const DeviceGather *z, int block) {
    const int kind = slot_kind(z, block), candidates[2] = {kind, kind == SLOT_LAYER_A ? SLOT_LAYER_B : kind};
    for (int i = 0; i < 2; i++)
        if (z->slots[candidates[i]].block == block) return candidates[i];
    for (int i = 0; i < 2; i++)
        if (!z->slots[candidates[i]].in_use && z->slots[candidates[i]].block < 0) return candidates[i];
    return -1;
}

/* This rank's part of window r into buf (compute stream), then r all-gathered (communication stream). */
static void gather_window(DeviceGather *z, float *buf, Range r) {
    const Range mine = range_intersect(r, z->shard);
    if (!range_empty(mine))
        check(z, device_copy(z->dev, gpt_device_compute_stream(z->model), buf + range_offset_in(mine, r),
                             gpt_device_array(z->model, GPT_DEVICE_PARAMS) + range_offset_in(mine, z->shard),
                             mine.count * sizeof(float), COPY_DEVICE_TO_DEVICE));
    if (!range_empty(r)) device_comm_allgather(z->comm, buf, r.offset, r.count, z->total);
}

/* Block into the slot; its event marks the gather's end (a pipeline stage's absent block 0: nothing to gather). */
static void gather(DeviceGather *z, int s, int block) {
    Slot *slot = &z->slots[s];
    gather_window(z, slot->buf, block_range(z, block));
    device_comm_record(z->comm, slot->gathered);
    slot->block = block;
    slot->waited = false;
}

static float *hook_params(void *ctx, int block) {
    DeviceGather *z = ctx;
    if (z->at >= z->length || z->order[z->at] != block) bs_die("internal: device ZeRO 3 asked for block %d out of order", block);
    int s = find_slot(z, block);
    if (s < 0) bs_die("internal: no free device parameter slot for block %d", block);
    Slot *slot = &z->slots[s];
    if (slot->block != block) gather(z, s, block);
    if (!slot->waited) /* this gather only, not the reductions queued after it */
        check(z, device_stream_wait(z->dev, gpt_device_compute_stream(z->model), slot->gathered));
    slot->waited = slot->in_use = true;
    if (++z->at < z->length) { /* the next block's gather runs beside this one's work */
        const int next = z->order[z->at], t = find_slot(z, next);
        if (t >= 0 && z->slots[t].block != next) gather(z, t, next);
    }
    return slot->buf;
}

/* Given back: gathered again when asked for next (every rank gathers the same blocks in the same order). */
static void hook_params_done(void *ctx, int block) {
    DeviceGather *z = ctx;
    for (int s = 0; s < NUM_SLOTS; s++)
        if (z->slots[s].block == block && z->slots[s].in_use) z->slots[s].block = -1, z->slots[s].in_use = false;
}

DeviceGather *device_gather_create(Device *dev, GPTDevice *model, DeviceComm *comm, char *reason, size_t reason_size) {
    DeviceGather *z = bs_calloc(1, sizeof *z);
    const GPTConfig *cfg = gpt_device_config(model);
    const int L = cfg->num_layers;
    *z = (DeviceGather){.dev = dev, .model = model, .comm = comm, .cfg = cfg, .total = gpt_num_params(cfg)};
    gpt_device_update_range(model, &z->shard.offset, &z->shard.count);
    z->order = bs_malloc(sizeof(int) * (size_t)(2 * L + 4));
    const int layer = gpt_first_layer(cfg) + 1, blocks[NUM_SLOTS] = {0, L + 1, layer, layer}; /* a stage's blocks */
    for (int s = 0; s < NUM_SLOTS; s++) {
        const size_t floats = block_range(z, blocks[s]).count;
        z->slots[s].block = -1;
        z->slots[s].buf = device_alloc(dev, sizeof(float) * (floats ? floats : 1));
        z->slots[s].gathered = device_event_create(dev);
        if (!z->slots[s].buf || !z->slots[s].gathered) {
            snprintf(reason, reason_size, "%s", device_error(dev));
            device_gather_free(z);
            return NULL;
        }
    }
    gpt_device_keep_param_part(model);
    GPTDeviceParamHooks hooks = {hook_params, hook_params_done, z};
    gpt_device_set_param_hooks(model, &hooks);
    return z;
}

void device_gather_free(DeviceGather *z) {
    if (!z) return;
    gpt_device_set_param_hooks(z->model, NULL);
    for (int s = 0; s < NUM_SLOTS; s++) {
        device_free(z->dev, z->slots[s].buf);
        device_event_destroy(z->dev, z->slots[s].gathered);
    }
    free(z->order);
    free(z);
}

/* gpt_device.h's order over the model's (a stage's) blocks: forward 0 (asked on every stage), its layers, and
 * with the head L + 1 and, where the embeddings are here too, 0 again (the classifier); backward L + 1, then the
 * layers down. */
static void add_forward(DeviceGather *z) {
    const int L = z->cfg->num_layers, first = gpt_first_layer(z->cfg) + 1, last = first + gpt_stage_layers(z->cfg) - 1;
    z->order[z->length++] = 0;
    for (int b = first; b <= last; b++) z->order[z->length++] = b;
    if (!gpt_has_head(z->cfg)) return;
    z->order[z->length++] = L + 1;
    if (gpt_has_embeddings(z->cfg)) z->order[z->length++] = 0;
}

static void add_backward(DeviceGather *z) {
    const int first = gpt_first_layer(z->cfg) + 1, last = first + gpt_stage_layers(z->cfg) - 1;
    if (gpt_has_head(z->cfg)) z->order[z->length++] = z->cfg->num_layers + 1;
    for (int b = last; b >= first; b--) z->order[z->length++] = b;
}

void device_gather_begin_pass(DeviceGather *z, bool training) {
    z->length = z->at = 0;
    add_forward(z);
    if (training) add_backward(z);
}

void device_gather_begin_stage_pass(DeviceGather *z, bool backward) {
    z->length = z->at = 0;
    if (backward) add_backward(z);
    else add_forward(z);
}

void device_gather_window(DeviceGather *z, float *buf, size_t offset, size_t count) {
    gather_window(z, buf, range_make(offset, count));
    device_comm_wait(z->comm);
}

void device_gather_end_pass(DeviceGather *z) {
    if (z->at != z->length) bs_die("internal: device ZeRO 3's pass asked for %d of %d blocks", z->at, z->length);
    for (int s = 0; s < NUM_SLOTS; s++) z->slots[s].block = -1, z->slots[s].in_use = false;
}

/* gpt_device_tp.c: tensor parallelism inside the device step (gpt_device_tp.h). */
#include "model/gpt_device_tp.h"

#include <stdlib.h>

struct GPTDeviceTP {
    Device *dev;
    DeviceStream *compute;
    DeviceComm *comm;
    int size, rank;
    bool skip_wait;
    size_t shard;      /* one rank's wte floats: (Vp / tp) C */
    float *wte, *dwte; /* the whole vocabulary's (Vp, C), shard r at r x shard */
};

GPTDeviceTP *gpt_device_tp_create(Device *dev, DeviceStream *compute, const GPTConfig *cfg, DeviceComm *comm,
                                  bool skip_wait) {
    GPTDeviceTP *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    *t = (GPTDeviceTP){.dev = dev, .compute = compute, .comm = comm, .size = gpt_tp_size(cfg),
                       .rank = gpt_tp_rank(cfg), .skip_wait = skip_wait, .shard = gpt_tensor_numel(cfg, TK_WTE)};
    t->wte = device_alloc(dev, sizeof(float) * t->shard * (size_t)t->size);
    t->dwte = device_alloc(dev, sizeof(float) * t->shard * (size_t)t->size);
    if (!t->wte || !t->dwte) {
        gpt_device_tp_free(t);
        return NULL;
    }
    return t;
}

void gpt_device_tp_free(GPTDeviceTP *t) {
    if (!t) return;
    device_free(t->dev, t->wte);
    device_free(t->dev, t->dwte);
    free(t);
}

/* Work queued on the compute stream from now on reads the group's results. */
static void wait_for_group(GPTDeviceTP *t) {
    if (!t->skip_wait) device_comm_wait(t->comm);
}

int gpt_device_tp_sum(GPTDeviceTP *t, float *x, size_t n) {
    device_comm_allreduce(t->comm, x, n, false);
    wait_for_group(t);
    return 0;
}

/* Each rank's shard broadcast from it into its rows (rank order is vocabulary order, whatever the group's partition). */
int gpt_device_tp_gather_wte(GPTDeviceTP *t, const float *own) {
    float *mine = t->wte + (size_t)t->rank * t->shard;
    if (device_copy(t->dev, t->compute, mine, own, sizeof(float) * t->shard, COPY_DEVICE_TO_DEVICE) != 0) return -1;
    for (int r = 0; r < t->size; r++) device_comm_broadcast(t->comm, t->wte + (size_t)r * t->shard, t->shard, r);
    wait_for_group(t);
    return 0;
}

const float *gpt_device_tp_wte(const GPTDeviceTP *t) { return t->wte; }
float *gpt_device_tp_dwte(const GPTDeviceTP *t) { return t->dwte; }

int gpt_device_tp_zero_dwte(GPTDeviceTP *t) {
    return device_zero(t->dev, t->compute, t->dwte, sizeof(float) * t->shard * (size_t)t->size);
}

int gpt_device_tp_take_dwte(GPTDeviceTP *t, float *own) {
    return device_copy(t->dev, t->compute, own, t->dwte + (size_t)t->rank * t->shard, sizeof(float) * t->shard,
                       COPY_DEVICE_TO_DEVICE);
}

void gpt_device_tp_finish(GPTDeviceTP *t) { device_comm_finish(t->comm); }

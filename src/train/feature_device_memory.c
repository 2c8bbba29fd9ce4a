/* feature_device_memory.c: on a device (--device cuda|sim), the device
 * memory in use at its highest so far, the largest over the ranks, as
 * "device_memory_peak_bytes" in each step's metrics line (device_memory_peak:
 * sim counts the bytes it allocated; cuda the GPU's memory less its free
 * memory after each allocation, the CUDA context included). */
#include <stdlib.h>

#include "core/error.h"
#include "train/feature.h"

typedef struct {
    double *peaks; /* per world rank, after the last step */
} DeviceMemory;

static bool wanted(const TrainConfig *cfg) { return cfg->device.kind != TRAIN_DEVICE_CPU; }

static void *create(const TrainContext *cx) {
    DeviceMemory *m = bs_calloc(1, sizeof *m);
    m->peaks = bs_calloc((size_t)cx->world_size, sizeof(double));
    return m;
}

static void destroy(void *state, const TrainContext *cx) {
    (void)cx;
    DeviceMemory *m = state;
    free(m->peaks);
    free(m);
}

/* A collective over the world, every step. */
static void after_step(void *state, const TrainContext *cx, TrainStep *s) {
    (void)s;
    DeviceMemory *m = state;
    size_t bytes = 0;
    engine_device_memory_peak(cx->engine, &bytes);
    const double mine = (double)bytes;
    comm_allgather_bytes(cx->world, &mine, sizeof mine, m->peaks);
}

static void metrics(void *state, const TrainContext *cx, json_t *record) {
    const DeviceMemory *m = state;
    double peak = 0;
    for (int r = 0; r < cx->world_size; r++) peak = m->peaks[r] > peak ? m->peaks[r] : peak;
    json_object_set_new(record, "device_memory_peak_bytes", json_integer((json_int_t)peak));
}

const Feature device_memory_feature = {
    .name = "device_memory", .wanted = wanted, .create = create, .free = destroy, .after_step = after_step,
    .metrics = metrics,
};

/* engine_device.h: the engine's step on a device (--device cuda|sim): the
 * one chunk's parameters, gradients and AdamW moments live in flat device
 * buffers (model/gpt_device.h) at the CPU layout's offsets; the host keeps
 * the loop, data, schedules and files. The gradients after each backward,
 * and the parameters and moments after each update, are copied back into the
 * chunk's host buffers, so checkpoints, per-layer norms, sampling and export
 * read them as on the CPU; after
 * the host replaced them (resume) they are copied in again. */
#ifndef BS_PARALLEL_ENGINE_DEVICE_H
#define BS_PARALLEL_ENGINE_DEVICE_H

#include "device/device.h"
#include "parallel/engine.h"

typedef struct EngineDevice EngineDevice;

/* The device and the chunk's state on it, or NULL with a one-line reason
 * (no GPU, not built in, out of device memory, a layout it cannot run). */
EngineDevice *engine_device_create(DeviceKind kind, const EngineConfig *cfg, const EngineChunk *chunk, int world_size,
                                   char *reason, size_t reason_size);
void engine_device_free(EngineDevice *d);
/* The chunk's parameters and moments from the host into the device. */
void engine_device_upload(EngineDevice *d, const EngineChunk *chunk);
/* m micro-batches forward and backward (gradients zeroed first), the
 * gradients then copied into chunk's host buffer; the loss sum. */
double engine_device_train(EngineDevice *d, EngineChunk *chunk, int m, float dloss, PipeLoad load, void *ctx);
/* Forward only of m micro-batches, of which the first `counted` count. */
double engine_device_evaluate(EngineDevice *d, int m, int counted, PipeLoad load, void *ctx);
double engine_device_grad_sum_squares(EngineDevice *d);
/* AdamW (step numbered step) on the device, then the state back into chunk. */
void engine_device_update(EngineDevice *d, EngineChunk *chunk, const OptimizerConfig *opt, double lr,
                          float grad_scale, long step);

#endif

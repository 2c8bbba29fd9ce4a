/* engine_device.h: the engine's step on a device (--device cuda|sim): the
 * rank's chunks' parameters, gradients and AdamW moments live in flat device
 * buffers (model/gpt_device.h; one device model per chunk, several with
 * interleaved virtual stages) at the CPU layout's offsets; the host keeps
 * the loop, data, schedules and files.
 *
 * The device's buffers are the truth. The chunk's host buffers are a copy
 * that goes stale when the device changes them (the gradients at each
 * backward, the parameters and moments at each update) and is refreshed only
 * when the host reads it: engine_device_sync_host, which the engine's doors
 * to host state (engine_chunk, engine_gather_model, engine_reduced_gradients)
 * call first, so no host read can see a stale copy. Per step only the losses,
 * the non-finite flags and the norms' per-tensor sums cross to the host
 * (engine_device_bytes_to_host counts what crossed). After the host replaced
 * the state (resume) it is copied in again (engine_device_upload). */
#ifndef BS_PARALLEL_ENGINE_DEVICE_H
#define BS_PARALLEL_ENGINE_DEVICE_H

#include <stdint.h>

#include "device/device.h"
#include "parallel/engine.h"

typedef struct EngineDevice EngineDevice;

/* The device and the chunks' state on it (chunk: the rank's cfg->virtual_stages
 * chunks, or one), or NULL with a one-line reason
 * (no GPU, not built in, out of device memory, a layout it cannot run: data
 * parallelism at ZeRO 0-3, stage 3 in fp32; tensor and context parallelism
 * (FP8's amaxes reduced over the tensor group too); pipeline stages, parallel/pipeline_device.h). Over several data-parallel
 * ranks each opens the GPU of its node-local rank, and the group's gradients
 * (device_buckets.h) and (ZeRO >= 1) parameters (ZeRO 3: device_gather.h)
 * move through device collectives on the path cfg->gpu_comm asks (auto:
 * comm/device_comm.h's rule). Collective over the grid's world. */
EngineDevice *engine_device_create(DeviceKind kind, const EngineConfig *cfg, const EngineChunk *chunk, const Grid *grid,
                                   char *reason, size_t reason_size);
void engine_device_free(EngineDevice *d);
/* The chunks' parameters and moments from the host into the device (the host
 * copy must be current: it is then the truth for both). */
void engine_device_upload(EngineDevice *d, const EngineChunk *chunk);
/* The host copy of whatever the device changed since the last sync (no-op
 * when current). */
void engine_device_sync_host(EngineDevice *d, EngineChunk *chunk);
/* m micro-batches forward and backward (gradients zeroed first; each
 * block's gradient, a poisoned one made NaN, checked for non-finite values
 * before it is summed over the data-parallel group bucket by bucket: whole
 * at ZeRO 0, the rank's update range above); this rank's loss sum. */
double engine_device_train(EngineDevice *d, int m, float dloss, PipeLoad load, void *ctx);
/* With --pp: the stage's executor and its last train's measurements (else NULL). */
const Pipeline *engine_device_pipeline(const EngineDevice *d, PipeStats *last);
/* MoE models (no-ops for a dense one): around engine_device_train, the
 * step's selection biases and losses' weight (1/m) from model, and after it
 * the step's statistics and weighted losses into model (moe_step, moe_aux,
 * moe_z: what the trainer reads after the CPU's step). */
void engine_device_moe_begin(EngineDevice *d, GPT *model, int m);
void engine_device_moe_end(EngineDevice *d, GPT *model);
/* MoE: model's selection biases to the device (before an evaluation: the bias update moved them). */
void engine_device_moe_bias(EngineDevice *d, const GPT *model);
/* The guard's: the first layer whose output was not finite in the last
 * train's forwards and the first block whose gradient was not (-1: none). */
int engine_device_nonfinite_layer(const EngineDevice *d);
int engine_device_nonfinite_block(const EngineDevice *d);
/* The next train's gradient of this block gets a NaN (--debug-inject-fault nan). */
void engine_device_inject_nan(EngineDevice *d, int block);
/* Forward only of m micro-batches, of which the first `counted` count. */
double engine_device_evaluate(EngineDevice *d, int m, int counted, PipeLoad load, void *ctx);
/* The whole gradient's sum of squares (ZeRO >= 1: the ranks' parts summed over the group). */
double engine_device_grad_sum_squares(EngineDevice *d);
/* Per tensor (gpt_param_segments' order, chunk after chunk) the gradients' and the parameters'
 * sums of squares over this rank's update range, computed on the device
 * (ZeRO >= 1: its part, which the caller sums over the ranks as the CPU's
 * shards). */
void engine_device_tensor_sum_squares(EngineDevice *d, double *grads, double *params);
/* AdamW (step numbered step) on the device over the rank's update range
 * (ZeRO >= 1: then the parameters all-gathered); the host copy goes stale. */
void engine_device_update(EngineDevice *d, const OptimizerConfig *opt, double lr, float grad_scale, long step);
/* "host" or "nccl": how device buffers move between ranks, every group alike (NULL: one rank). */
const char *engine_device_comm_path(const EngineDevice *d);
/* Bytes copied from the device to the host since it opened. */
uint64_t engine_device_bytes_to_host(const EngineDevice *d);
/* The most device memory held at once since it opened (device_memory_peak: 0 where not counted). */
size_t engine_device_memory_used(const EngineDevice *d);

#endif

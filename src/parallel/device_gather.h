/* device_gather.h: ZeRO 3 on device buffers: each rank keeps its part of the
 * parameters (gpt_device_keep_param_part) and every block is all-gathered
 * into a slot before each use, on the group's communication stream
 * (comm/device_comm.h), the next block's gather issued before this one's
 * work is queued, so it runs beside it; a slot is given back after each use
 * and gathered again for the next (forward and backward each gather), as
 * data_parallel.c does on the CPU. Slots: the embeddings, the final
 * LayerNorm and two rotating layer slots. A pipeline stage gathers its own
 * blocks, each forward and each backward apart as its schedule runs them.
 *
 * It does not own the group or the model; it knows nothing of flags. */
#ifndef BS_PARALLEL_DEVICE_GATHER_H
#define BS_PARALLEL_DEVICE_GATHER_H

#include <stdbool.h>
#include <stddef.h>

#include "comm/device_comm.h"
#include "model/gpt_device.h"

typedef struct DeviceGather DeviceGather;

/* The slots for model (whose update range is this rank's part: the shard)
 * over comm; installs the model's parameter hooks. NULL with the reason when
 * the device has no room. */
DeviceGather *device_gather_create(Device *dev, GPTDevice *model, DeviceComm *comm, char *reason, size_t reason_size);
void device_gather_free(DeviceGather *z);
/* Before each micro-batch's pass: training (forward and backward) or forward only. */
void device_gather_begin_pass(DeviceGather *z, bool training);
/* A pipeline stage's forward or backward (fused, or zbh1's B or W) alone, as the schedule runs them. */
void device_gather_begin_stage_pass(DeviceGather *z, bool backward);
/* After it: every slot given back. */
void device_gather_end_pass(DeviceGather *z);
/* [offset, +count) of the parameters all-gathered into buf (device, count
 * floats) outside a pass; the compute stream waits for it (a pipeline's tied
 * weights for the last stage). */
void device_gather_window(DeviceGather *z, float *buf, size_t offset, size_t count);

#endif

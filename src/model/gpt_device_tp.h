/* gpt_device_tp.h: tensor parallelism inside gpt_device.h's step (Megatron,
 * as gpt.h's shard on the CPU): the shard's flat buffers hold its columns of
 * qkv and fc, its rows of attproj and fcproj and its rows of the vocabulary
 * (wte), at the CPU shard layout's offsets. What the step adds for it:
 *   - the sums over the tensor group (DeviceComm, comm/device_comm.h) of the
 *     row-parallel products' outputs in forward and of the column-parallel
 *     products' input gradients in backward, queued on the group's
 *     communication stream after the compute stream's work, the compute
 *     stream waiting for the result through an event (device_comm_wait);
 *   - the embedding and the tied output layer on the whole vocabulary: wte's
 *     shards all-gathered (once per update, not per micro-batch) into a whole
 *     copy the encoder and the classifier read, their gradient accumulated
 *     into a whole buffer of which each rank keeps its own rows (every rank
 *     computes the same whole gradient: the same tokens and, after the sums,
 *     the same activations).
 * Everything returns 0, or -1 with the reason in device_error; a failed
 * collective ends the job with one line (device_comm.h). */
#ifndef BS_MODEL_GPT_DEVICE_TP_H
#define BS_MODEL_GPT_DEVICE_TP_H

#include <stdbool.h>
#include <stddef.h>

#include "comm/device_comm.h"
#include "device/device.h"
#include "model/gpt.h"

typedef struct GPTDeviceTP GPTDeviceTP;

/* cfg: the shard (gpt_set_shard); comm: its tensor group (gpt_tp_size(cfg)
 * ranks, rank order = tp rank), kept by the caller. skip_wait (tests of what
 * sim catches): the compute stream does not wait for the sums. NULL when the
 * device has no room (device_error). */
GPTDeviceTP *gpt_device_tp_create(Device *dev, DeviceStream *compute, const GPTConfig *cfg, DeviceComm *comm,
                                  bool skip_wait);
void gpt_device_tp_free(GPTDeviceTP *t);
/* x (n floats on the device) summed over the tensor group, in place. */
int gpt_device_tp_sum(GPTDeviceTP *t, float *x, size_t n);
/* The whole wte from every rank's shard (own: this rank's, in the flat parameters). */
int gpt_device_tp_gather_wte(GPTDeviceTP *t, const float *own);
/* The whole wte (Vp, C), and the whole gradient the step accumulates into. */
const float *gpt_device_tp_wte(const GPTDeviceTP *t);
float *gpt_device_tp_dwte(const GPTDeviceTP *t);
int gpt_device_tp_zero_dwte(GPTDeviceTP *t);
/* This rank's rows of the whole gradient into its shard's (own, in the flat gradients). */
int gpt_device_tp_take_dwte(GPTDeviceTP *t, float *own);
/* The host waits for the group's operations (nccl: under the group's timeout). */
void gpt_device_tp_finish(GPTDeviceTP *t);

#endif

/* device_expert_grads.h: expert parallelism's gradient reduction on a
 * device at ZeRO 0, as data_parallel.c splits it on the CPU
 * (dp_set_expert_group): after a step's backward the expert tensors'
 * (TK_EXPERTS) ranges of the flat gradient are all-reduced over the
 * expert-data-parallel group (the ranks holding the same experts), the
 * ranges between them over the data-parallel group. A group of one rank is
 * passed as NULL and its ranges stay as they are. */
#ifndef BS_PARALLEL_DEVICE_EXPERT_GRADS_H
#define BS_PARALLEL_DEVICE_EXPERT_GRADS_H

#include "comm/device_comm.h"
#include "model/gpt.h"

typedef struct DeviceExpertGrads DeviceExpertGrads;

/* cfg: this rank's shard (its flat layout); data and expert_data kept by the caller. */
DeviceExpertGrads *device_expert_grads_create(const GPTConfig *cfg, DeviceComm *data, DeviceComm *expert_data);
void device_expert_grads_free(DeviceExpertGrads *x);
/* grads (the flat gradient on the device) summed over each range's group; the host waits for it. */
void device_expert_grads_reduce(DeviceExpertGrads *x, float *grads);

#endif

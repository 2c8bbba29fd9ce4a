/* device_expert_grads.h: expert parallelism's gradient reduction on a
 * device, as data_parallel.c splits it on the CPU (dp_set_expert_group):
 * after a step's backward the expert tensors' (TK_EXPERTS) ranges of the
 * flat gradient are summed over the expert-data-parallel group (the ranks
 * holding the same experts), the ranges between them over the data-parallel
 * group. At ZeRO 0 all-reduced; at ZeRO 1-2 (sharded) reduce-scattered, each
 * range under its group's partition of the whole layout (comm_partition), so
 * this rank's part of each is its dp_piece; after the update each range's
 * parameters are all-gathered over the same group. A group of one rank is
 * passed as NULL and its ranges stay as they are (the rank's whole). */
#ifndef BS_PARALLEL_DEVICE_EXPERT_GRADS_H
#define BS_PARALLEL_DEVICE_EXPERT_GRADS_H

#include "comm/device_comm.h"
#include "model/gpt.h"

typedef struct DeviceExpertGrads DeviceExpertGrads;

/* cfg: this rank's shard (its flat layout); data and expert_data kept by the caller. */
DeviceExpertGrads *device_expert_grads_create(const GPTConfig *cfg, DeviceComm *data, DeviceComm *expert_data,
                                              bool sharded);
void device_expert_grads_free(DeviceExpertGrads *x);
/* grads (the flat gradient on the device) summed over each range's group; the host waits for it. */
void device_expert_grads_reduce(DeviceExpertGrads *x, float *grads);
/* Sharded: params (the flat parameters on the device) all-gathered range by range; the host waits for it. */
void device_expert_grads_gather(DeviceExpertGrads *x, float *params);

#endif

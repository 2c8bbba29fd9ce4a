/* device_buckets.h: the data-parallel gradient reduction on device buffers,
 * bucket by bucket as backward finishes them (the CPU's buckets, read from
 * data_parallel.h), each on the group's communication stream after an event
 * of the compute stream (comm/device_comm.h), so it overlaps the rest of
 * backward.
 *
 *   ZeRO 0  all-reduces each bucket of the flat gradient, on the last micro-batch;
 *   ZeRO 1  reduce-scatters each bucket of it, on the last micro-batch;
 *   ZeRO 2  keeps only the rank's part of the gradient (gpt_device_keep_grad_part):
 *           backward writes each bucket into a small reusable device buffer
 *           (two rotating, plus one for the embeddings, whose gradient starts in
 *           forward), reduce-scattered every micro-batch and its part added to the
 *           rank's part of the gradient, as data_parallel.c does on the CPU.
 * The guard's check, as on the CPU: each block's gradient is checked for
 * non-finite values before it is reduced (ZeRO 0-1: on the last micro-batch;
 * ZeRO 2: on each).
 *
 * It does not own the group or the model; it knows nothing of flags. */
#ifndef BS_PARALLEL_DEVICE_BUCKETS_H
#define BS_PARALLEL_DEVICE_BUCKETS_H

#include <stdbool.h>
#include <stddef.h>

#include "comm/device_comm.h"
#include "model/gpt_device.h"
#include "parallel/data_parallel.h"

typedef struct DeviceBuckets DeviceBuckets;

/* The buckets of dp (the host chunk's, at the same stage) over comm; installs
 * the model's gradient hooks (ZeRO 2: after gpt_device_set_update_range, it
 * shrinks the model's gradient to the part). NULL with the reason when the
 * device has no room. */
DeviceBuckets *device_buckets_create(Device *dev, GPTDevice *model, DeviceComm *comm, const DataParallel *dp,
                                     int zero_stage, char *reason, size_t reason_size);
void device_buckets_free(DeviceBuckets *b);
/* Before a step's first micro-batch (the guard's finding cleared). */
void device_buckets_begin_step(DeviceBuckets *b);
/* Before each micro-batch's step; last: the step's last one. */
void device_buckets_begin_micro(DeviceBuckets *b, bool last);
/* After each micro-batch's step: the buckets not reduced during backward
 * (no overlap), at ZeRO 2 every bucket's part added, and the guard's flags read. */
void device_buckets_end_micro(DeviceBuckets *b);
/* After the last micro-batch: the compute stream, and the host, wait for every reduction. */
void device_buckets_finish(DeviceBuckets *b);
/* The first block (backward's order) whose gradient held a non-finite
 * value in the step's checks (before it was reduced), or -1. */
int device_buckets_first_nonfinite_block(const DeviceBuckets *b);
/* After the last micro-batch, a gradient backward did not write (a pipeline's
 * tied head weights: buf holds the flat layout's [offset, +count) on the
 * device): summed over the group (all-reduced at ZeRO 0, reduce-scattered
 * above) and added to what the rank keeps of the gradient; buf is then
 * scratch. Before device_buckets_finish. */
void device_buckets_add_reduced(DeviceBuckets *b, float *buf, size_t offset, size_t count);
/* The next check of block's gradient plants a NaN first (--debug-inject-fault nan). */
void device_buckets_inject_nan(DeviceBuckets *b, int block);

#endif

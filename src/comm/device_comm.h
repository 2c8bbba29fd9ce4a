/* device_comm.h: collectives on device buffers (device/device.h) over a
 * process group of comm.h, for the engine's state kept on a GPU (or sim).
 *
 * Two paths, chosen per group when it is created:
 *   host  each operation copies the device buffer into staging host memory
 *         (pinned on a GPU), runs the group's own CPU collective on it
 *         (comm.h: same algorithm, same summation order, same timeout) and
 *         copies the result back. Works for any number of ranks per GPU and on
 *         sim, and gives the CPU engine's results bit for bit.
 *   nccl  NCCL (loaded with dlopen when the group is created, nccl_api.h) on a
 *         communicator of the group's ranks, initialised from a unique id rank
 *         0 broadcasts over MPI. Needs one GPU per rank.
 *
 * Stream order: every operation runs on the group's communication stream
 * after the work queued on the compute stream so far (an event the
 * communication stream waits for), so backward can go on queuing work while
 * a bucket moves; device_comm_wait makes the compute stream wait for every
 * operation queued so far, device_comm_finish makes the host wait (on nccl
 * under the group's timeout: a watchdog that aborts the communicator and ends
 * the job with one line naming the operation, the group and the rank). On the
 * host path the host blocks in MPI inside each operation, as comm_wait does.
 *
 * Windows: reduce-scatter and all-gather work on the window [window_offset,
 * +n) of [0, total) under the group's partition (comm_partition), as
 * comm_reduce_scatter/comm_allgather do; nccl pads the parts to equal size in
 * a scratch buffer, as NCCL needs. A device failure during an operation ends
 * the job with one line (the other ranks would wait forever). */
#ifndef BS_COMM_DEVICE_COMM_H
#define BS_COMM_DEVICE_COMM_H

#include <stdbool.h>
#include <stddef.h>

#include "comm/comm.h"
#include "device/device.h"

typedef enum { GPU_COMM_AUTO, GPU_COMM_NCCL, GPU_COMM_HOST } GpuCommKind;

bool gpu_comm_parse(const char *name, GpuCommKind *out);
/* "auto", "nccl" or "host" */
const char *gpu_comm_name(GpuCommKind kind);

/* The rule: host on sim or when the ranks of a node outnumber its GPUs (NCCL
 * refuses two ranks on one GPU), else nccl; `asked` nccl where it cannot
 * work: -1 and the reason. ranks_per_node and gpus: the most crowded node's. */
int gpu_comm_rule(bool sim, int ranks_per_node, int gpus, GpuCommKind asked, GpuCommKind *chosen, char *reason,
                  size_t reason_size);
/* This rank's index among the processes of its machine (MPI's shared-memory
 * node, whatever nodes are emulated), and their count: the GPU to open is the
 * index (DeviceOptions.gpu). Collective over world. */
int gpu_comm_local_rank(Comm *world, int *local_size);
/* The rule for this job (collective over world: every rank takes the same path). */
int gpu_comm_choose(Comm *world, Device *dev, GpuCommKind asked, GpuCommKind *chosen, char *reason,
                    size_t reason_size);

typedef struct DeviceComm DeviceComm;

/* Collective over group (every rank calls it with the same path, not auto);
 * compute is the stream the engine queues its work on. NULL with the reason
 * (on every rank alike) when NCCL cannot be loaded or initialised. */
DeviceComm *device_comm_create(Comm *group, Device *dev, DeviceStream *compute, GpuCommKind path, char *reason,
                               size_t reason_size);
/* Waits for the queued operations, then frees. */
void device_comm_free(DeviceComm *dc);
/* "nccl" or "host" */
const char *device_comm_path(const DeviceComm *dc);

/* Sum (average: the sum times 1/size) of every rank's n floats at buf. */
void device_comm_allreduce(DeviceComm *dc, float *buf, size_t n, bool average);
/* buf holds the window; afterwards window ∩ own part holds the sum (the rest is unspecified). */
void device_comm_reduce_scatter(DeviceComm *dc, float *buf, size_t window_offset, size_t n, size_t total);
/* Each rank's window ∩ own part is copied to every rank's buf. */
void device_comm_allgather(DeviceComm *dc, float *buf, size_t window_offset, size_t n, size_t total);
void device_comm_broadcast(DeviceComm *dc, float *buf, size_t n, int root);
/* n floats to / from group rank peer; a send and the receive it meets carry
 * the same tag (host path; NCCL matches them in order). On nccl a send waits
 * for its receive on the device: ranks that both send and receive (a ring, or
 * stages exchanging activations and gradients) use device_comm_sendrecv. */
void device_comm_send(DeviceComm *dc, const float *buf, size_t n, int peer, int tag);
void device_comm_recv(DeviceComm *dc, float *buf, size_t n, int peer, int tag);
/* send_n floats to group rank to and recv_n floats from group rank from, as
 * one operation (NCCL runs the two together; either may be to itself). */
void device_comm_sendrecv(DeviceComm *dc, const float *send, size_t send_n, int to, float *recv, size_t recv_n,
                          int from, int tag);
/* send_counts[r] elements of elem_bytes to group rank r, recv_counts[r] from
 * it; both device buffers hold the blocks in rank order without gaps. */
void device_comm_alltoallv(DeviceComm *dc, const void *send, const size_t *send_counts, void *recv,
                           const size_t *recv_counts, size_t elem_bytes);

/* Work queued on the compute stream from now on waits for every operation queued so far. */
void device_comm_wait(DeviceComm *dc);
/* e completes when every operation queued so far has: waiting on it
 * (device_stream_wait) waits for one operation, not for later ones. */
void device_comm_record(DeviceComm *dc, DeviceEvent *e);
/* The host waits for every operation queued so far (nccl: under the timeout). */
void device_comm_finish(DeviceComm *dc);

#endif

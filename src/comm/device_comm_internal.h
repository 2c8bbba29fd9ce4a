/* device_comm_internal.h: what the two paths of device_comm.h share: the
 * group's state and each path's table of operations (device_comm_host.c,
 * device_comm_nccl.c); read by those files and device_comm.c only. */
#ifndef BS_COMM_DEVICE_COMM_INTERNAL_H
#define BS_COMM_DEVICE_COMM_INTERNAL_H

#include "comm/comm_internal.h"
#include "comm/device_comm.h"

typedef struct NcclState NcclState;

typedef struct {
    const char *name;
    void (*allreduce)(DeviceComm *dc, float *buf, size_t n, bool average);
    void (*reduce_scatter)(DeviceComm *dc, float *buf, size_t window_offset, size_t n, size_t total);
    void (*allgather)(DeviceComm *dc, float *buf, size_t window_offset, size_t n, size_t total);
    void (*broadcast)(DeviceComm *dc, float *buf, size_t n, int root);
    /* send NULL: receive only; recv NULL: send only */
    void (*sendrecv)(DeviceComm *dc, const float *send, size_t send_n, int to, float *recv, size_t recv_n, int from,
                     int tag);
    void (*alltoallv)(DeviceComm *dc, const void *send, const size_t *send_counts, void *recv,
                      const size_t *recv_counts, size_t elem_bytes);
    void (*finish)(DeviceComm *dc); /* the host waits for the queued operations */
    void (*destroy)(DeviceComm *dc);
} DeviceCommPath;

/* Host path: sends stay in flight until their slot comes round again (a
 * pipeline's stage may send several times, over several chunks, before its
 * neighbour receives the first) or the group finishes. */
#define DEVICE_COMM_SENDS 16
typedef struct {
    CommOp *op; /* NULL: complete */
    void *stage;
    size_t stage_bytes;
} DeviceCommSend;

struct DeviceComm {
    Comm *group;
    Device *dev;
    DeviceStream *compute, *stream; /* the engine's, and this group's communication stream */
    DeviceEvent *ready, *done;      /* compute's point an operation starts after; the latest operation's end */
    const DeviceCommPath *path;
    const char *last_op; /* the latest operation queued (for a timeout's line) */
    size_t last_bytes;
    void *stage; /* host path: staging host memory */
    size_t stage_bytes;
    DeviceCommSend sends[DEVICE_COMM_SENDS]; /* host path: sends in flight, each from its own staging memory */
    int next_send;                           /* the slot the next send takes (the oldest in flight) */
    float *scratch; /* nccl: the padded window */
    size_t scratch_count;
    NcclState *nccl;
};

const DeviceCommPath *device_comm_host_path(void);
/* Sets up dc->nccl (collective over the group); -1 with the reason on every rank alike. */
int device_comm_nccl_open(DeviceComm *dc, char *reason, size_t reason_size);
const DeviceCommPath *device_comm_nccl_path(void);

/* Ends the job with "<what> on the <group> group: <device's reason>" when rc != 0. */
void device_comm_check(const DeviceComm *dc, int rc, const char *what);
/* Host memory of at least n bytes in *buf (sized *bytes), grown after the queued work has run. */
void device_comm_reserve_host(DeviceComm *dc, void **buf, size_t *bytes, size_t n);

#endif

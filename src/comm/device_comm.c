/* device_comm.c: the front end of device_comm.h: which path a job takes,
 * creating a group's state, and the stream order around every operation
 * (the communication stream waits for the compute stream's point of call;
 * the compute stream waits for the operations on device_comm_wait). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/device_comm_internal.h"
#include "core/error.h"

bool gpu_comm_parse(const char *name, GpuCommKind *out) {
    if (strcmp(name, "auto") == 0) *out = GPU_COMM_AUTO;
    else if (strcmp(name, "nccl") == 0) *out = GPU_COMM_NCCL;
    else if (strcmp(name, "host") == 0) *out = GPU_COMM_HOST;
    else return false;
    return true;
}

const char *gpu_comm_name(GpuCommKind kind) {
    switch (kind) {
    case GPU_COMM_AUTO: return "auto";
    case GPU_COMM_NCCL: return "nccl";
    case GPU_COMM_HOST: return "host";
    }
    return "?";
}

int gpu_comm_rule(bool sim, int ranks, int gpus, GpuCommKind asked, GpuCommKind *chosen, char *reason,
                  size_t reason_size) {
    const bool shared = ranks > gpus;
    *chosen = asked == GPU_COMM_AUTO ? (sim || shared ? GPU_COMM_HOST : GPU_COMM_NCCL) : asked;
    if (*chosen != GPU_COMM_NCCL) return 0;
    if (sim) {
        snprintf(reason, reason_size, "nccl needs CUDA GPUs; the sim device moves its buffers through host memory");
        return -1;
    }
    if (shared) {
        snprintf(reason, reason_size,
                 "nccl needs one GPU per rank: %d ranks of a node share %d GPU%s (NCCL refuses two ranks on one GPU)",
                 ranks, gpus, gpus == 1 ? "" : "s");
        return -1;
    }
    return 0;
}

int gpu_comm_local_rank(Comm *world, int *local_size) {
    MPI_Comm machine;
    int rank = 0;
    comm_check(MPI_Comm_split_type(world->mpi, MPI_COMM_TYPE_SHARED, world->rank, MPI_INFO_NULL, &machine), world,
               "machine detection");
    MPI_Comm_rank(machine, &rank);
    MPI_Comm_size(machine, local_size);
    MPI_Comm_free(&machine);
    return rank;
}

int gpu_comm_choose(Comm *world, Device *dev, GpuCommKind asked, GpuCommKind *chosen, char *reason,
                    size_t reason_size) {
    int local_size = 1;
    gpu_comm_local_rank(world, &local_size);
    /* the most crowded machine decides for all */
    double crowd[2] = {(double)local_size, -(double)device_gpu_count(dev)};
    comm_allreduce_max_double(world, crowd, 2);
    return gpu_comm_rule(strcmp(device_name(dev), "sim") == 0, (int)crowd[0], (int)-crowd[1], asked, chosen, reason,
                         reason_size);
}

void device_comm_check(const DeviceComm *dc, int rc, const char *what) {
    if (rc != 0) bs_die("%s on the %s group: %s", what, dc->group->name, device_error(dc->dev));
}

void device_comm_reserve_host(DeviceComm *dc, void **buf, size_t *bytes, size_t n) {
    if (*bytes >= n && *buf) return;
    device_comm_check(dc, device_stream_sync(dc->dev, dc->stream), "staging");
    device_host_free(dc->dev, *buf);
    *buf = device_host_alloc(dc->dev, n);
    if (!*buf) device_comm_check(dc, -1, "staging");
    *bytes = n;
}

static void destroy(DeviceComm *dc) {
    if (dc->stream) device_stream_sync(dc->dev, dc->stream);
    if (dc->path) dc->path->destroy(dc);
    device_host_free(dc->dev, dc->stage);
    for (int i = 0; i < DEVICE_COMM_SENDS; i++) device_host_free(dc->dev, dc->sends[i].stage);
    device_free(dc->dev, dc->scratch);
    device_event_destroy(dc->dev, dc->ready);
    device_event_destroy(dc->dev, dc->done);
    device_stream_destroy(dc->dev, dc->stream);
    free(dc);
}

DeviceComm *device_comm_create(Comm *group, Device *dev, DeviceStream *compute, GpuCommKind path, char *reason,
                               size_t reason_size) {
    DeviceComm *dc = bs_calloc(1, sizeof *dc);
    dc->group = group;
    dc->dev = dev;
    dc->compute = compute;
    dc->last_op = "nothing";
    dc->stream = device_stream_create(dev);
    dc->ready = dc->stream ? device_event_create(dev) : NULL;
    dc->done = dc->ready ? device_event_create(dev) : NULL;
    int ok = dc->done != NULL;
    if (!ok) snprintf(reason, reason_size, "communication stream: %s", device_error(dev));
    else if (path == GPU_COMM_NCCL) ok = device_comm_nccl_open(dc, reason, reason_size) == 0;
    else if (path == GPU_COMM_AUTO) ok = (snprintf(reason, reason_size, "choose the path first (gpu_comm_choose)"), 0);
    if (!ok) {
        destroy(dc);
        return NULL;
    }
    dc->path = path == GPU_COMM_NCCL ? device_comm_nccl_path() : device_comm_host_path();
    return dc;
}

void device_comm_free(DeviceComm *dc) {
    if (!dc) return;
    device_comm_finish(dc);
    destroy(dc);
}

const char *device_comm_path(const DeviceComm *dc) { return dc->path->name; }

/* The communication stream continues after the compute stream's work so far. */
static void begin(DeviceComm *dc, const char *what, size_t bytes) {
    dc->last_op = what;
    dc->last_bytes = bytes;
    device_comm_check(dc, device_event_record(dc->dev, dc->compute, dc->ready), what);
    device_comm_check(dc, device_stream_wait(dc->dev, dc->stream, dc->ready), what);
}

static void end(DeviceComm *dc) {
    device_comm_check(dc, device_event_record(dc->dev, dc->stream, dc->done), dc->last_op);
}

void device_comm_allreduce(DeviceComm *dc, float *buf, size_t n, bool average) {
    begin(dc, "all-reduce", n * sizeof(float));
    dc->path->allreduce(dc, buf, n, average);
    end(dc);
}

void device_comm_reduce_scatter(DeviceComm *dc, float *buf, size_t window_offset, size_t n, size_t total) {
    begin(dc, "reduce-scatter", n * sizeof(float));
    dc->path->reduce_scatter(dc, buf, window_offset, n, total);
    end(dc);
}

void device_comm_allgather(DeviceComm *dc, float *buf, size_t window_offset, size_t n, size_t total) {
    begin(dc, "all-gather", n * sizeof(float));
    dc->path->allgather(dc, buf, window_offset, n, total);
    end(dc);
}

void device_comm_broadcast(DeviceComm *dc, float *buf, size_t n, int root) {
    begin(dc, "broadcast", n * sizeof(float));
    dc->path->broadcast(dc, buf, n, root);
    end(dc);
}

void device_comm_send(DeviceComm *dc, const float *buf, size_t n, int peer, int tag) {
    begin(dc, "send", n * sizeof(float));
    dc->path->sendrecv(dc, buf, n, peer, NULL, 0, -1, tag);
    end(dc);
}

void device_comm_recv(DeviceComm *dc, float *buf, size_t n, int peer, int tag) {
    begin(dc, "receive", n * sizeof(float));
    dc->path->sendrecv(dc, NULL, 0, -1, buf, n, peer, tag);
    end(dc);
}

void device_comm_sendrecv(DeviceComm *dc, const float *send, size_t send_n, int to, float *recv, size_t recv_n,
                          int from, int tag) {
    begin(dc, "send/receive", (send_n + recv_n) * sizeof(float));
    dc->path->sendrecv(dc, send, send_n, to, recv, recv_n, from, tag);
    end(dc);
}

void device_comm_alltoallv(DeviceComm *dc, const void *send, const size_t *send_counts, void *recv,
                           const size_t *recv_counts, size_t elem_bytes) {
    size_t bytes = 0;
    for (int r = 0; r < dc->group->size; r++) bytes += send_counts[r] * elem_bytes;
    begin(dc, "all-to-all", bytes);
    dc->path->alltoallv(dc, send, send_counts, recv, recv_counts, elem_bytes);
    end(dc);
}

void device_comm_wait(DeviceComm *dc) {
    device_comm_check(dc, device_stream_wait(dc->dev, dc->compute, dc->done), "waiting for communication");
}

void device_comm_record(DeviceComm *dc, DeviceEvent *e) {
    device_comm_check(dc, device_event_record(dc->dev, dc->stream, e), "recording an event");
}

void device_comm_finish(DeviceComm *dc) { dc->path->finish(dc); }

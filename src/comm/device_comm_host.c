/* device_comm_host.c: the host path of device_comm.h: device buffers move
 * through staging host memory (pinned on a GPU) and the group's own CPU
 * collective (comm.h) runs on the copy, so its results, timeout and failure
 * lines are the CPU engine's. Copies run on the communication stream; the
 * host waits for the copy out before MPI reads the staging memory, and every
 * copy back is queued after that, so the next operation's copy out (same
 * stream) cannot overwrite staging memory a copy back still reads. */
#include <string.h>

#include "comm/device_comm_internal.h"

static float *stage_floats(DeviceComm *dc, size_t n) {
    device_comm_reserve_host(dc, &dc->stage, &dc->stage_bytes, n * sizeof(float));
    return dc->stage;
}

static void copy(DeviceComm *dc, void *dst, const void *src, size_t bytes, DeviceCopyKind kind) {
    if (bytes) device_comm_check(dc, device_copy(dc->dev, dc->stream, dst, src, bytes, kind), dc->last_op);
}

/* The host waits for the communication stream (staging memory is then the host's). */
static void settle(DeviceComm *dc) { device_comm_check(dc, device_stream_sync(dc->dev, dc->stream), dc->last_op); }

static void host_allreduce(DeviceComm *dc, float *buf, size_t n, bool average) {
    float *h = stage_floats(dc, n);
    copy(dc, h, buf, n * sizeof(float), COPY_DEVICE_TO_HOST);
    settle(dc);
    comm_allreduce(dc->group, h, n);
    if (average) {
        const float inv = 1.0f / (float)dc->group->size;
        for (size_t i = 0; i < n; i++) h[i] *= inv;
    }
    copy(dc, buf, h, n * sizeof(float), COPY_HOST_TO_DEVICE);
}

static void host_reduce_scatter(DeviceComm *dc, float *buf, size_t window_offset, size_t n, size_t total) {
    float *h = stage_floats(dc, n);
    size_t rel, count;
    comm_window_part(dc->group, window_offset, n, total, dc->group->rank, &rel, &count);
    copy(dc, h, buf, n * sizeof(float), COPY_DEVICE_TO_HOST);
    settle(dc);
    comm_reduce_scatter(dc->group, h, window_offset, n, total);
    copy(dc, buf + rel, h + rel, count * sizeof(float), COPY_HOST_TO_DEVICE);
}

static void host_allgather(DeviceComm *dc, float *buf, size_t window_offset, size_t n, size_t total) {
    float *h = stage_floats(dc, n);
    size_t rel, count;
    comm_window_part(dc->group, window_offset, n, total, dc->group->rank, &rel, &count);
    copy(dc, h + rel, buf + rel, count * sizeof(float), COPY_DEVICE_TO_HOST);
    settle(dc);
    comm_allgather(dc->group, h, window_offset, n, total);
    copy(dc, buf, h, n * sizeof(float), COPY_HOST_TO_DEVICE);
}

static void host_broadcast(DeviceComm *dc, float *buf, size_t n, int root) {
    float *h = stage_floats(dc, n);
    const bool is_root = dc->group->rank == root;
    if (is_root) copy(dc, h, buf, n * sizeof(float), COPY_DEVICE_TO_HOST);
    settle(dc);
    comm_broadcast(dc->group, h, n, root);
    if (!is_root) copy(dc, buf, h, n * sizeof(float), COPY_HOST_TO_DEVICE);
}

/* The send in slot i (if any) completes; its staging memory is free again. */
static void complete_send(DeviceComm *dc, int i) {
    if (!dc->sends[i].op) return;
    comm_wait(dc->sends[i].op);
    dc->sends[i].op = NULL;
}

static void complete_sends(DeviceComm *dc) {
    for (int i = 0; i < DEVICE_COMM_SENDS; i++) complete_send(dc, i);
}

/* The send leaves its data in staging memory of its own and stays in flight
 * (until its slot comes round again, DEVICE_COMM_SENDS sends later, or
 * finish): the receive it meets may be posted after this rank's own receive,
 * or after this rank's later sends. */
static void host_sendrecv(DeviceComm *dc, const float *send, size_t send_n, int to, float *recv, size_t recv_n,
                          int from, int tag) {
    if (send) {
        DeviceCommSend *s = &dc->sends[dc->next_send];
        complete_send(dc, dc->next_send);
        dc->next_send = (dc->next_send + 1) % DEVICE_COMM_SENDS;
        device_comm_reserve_host(dc, &s->stage, &s->stage_bytes, send_n * sizeof(float));
        copy(dc, s->stage, send, send_n * sizeof(float), COPY_DEVICE_TO_HOST);
        settle(dc);
        s->op = comm_start_send(dc->group, s->stage, send_n, to, tag);
    }
    if (recv) {
        float *h = stage_floats(dc, recv_n);
        settle(dc); /* a copy back of the previous operation may still read the staging memory */
        comm_wait(comm_start_recv(dc->group, h, recv_n, from, tag));
        copy(dc, recv, h, recv_n * sizeof(float), COPY_HOST_TO_DEVICE);
    }
}

static void host_alltoallv(DeviceComm *dc, const void *send, const size_t *send_counts, void *recv,
                           const size_t *recv_counts, size_t elem_bytes) {
    size_t send_bytes = 0, recv_bytes = 0;
    for (int r = 0; r < dc->group->size; r++) {
        send_bytes += send_counts[r] * elem_bytes;
        recv_bytes += recv_counts[r] * elem_bytes;
    }
    /* the receive part never starts where the send part does, even with nothing to send: Open MPI takes equal
     * buffers for MPI_IN_PLACE and would send this rank's receive counts */
    const size_t recv_at = (send_bytes + 16) & ~(size_t)15;
    device_comm_reserve_host(dc, &dc->stage, &dc->stage_bytes, recv_at + recv_bytes);
    unsigned char *h_send = dc->stage, *h_recv = h_send + recv_at;
    copy(dc, h_send, send, send_bytes, COPY_DEVICE_TO_HOST);
    settle(dc);
    comm_wait(comm_start_alltoallv(dc->group, h_send, send_counts, h_recv, recv_counts, elem_bytes));
    copy(dc, recv, h_recv, recv_bytes, COPY_HOST_TO_DEVICE);
}

static void host_finish(DeviceComm *dc) {
    complete_sends(dc);
    settle(dc);
}

static void host_destroy(DeviceComm *dc) { complete_sends(dc); }

static const DeviceCommPath host_path = {
    .name = "host",
    .allreduce = host_allreduce,
    .reduce_scatter = host_reduce_scatter,
    .allgather = host_allgather,
    .broadcast = host_broadcast,
    .sendrecv = host_sendrecv,
    .alltoallv = host_alltoallv,
    .finish = host_finish,
    .destroy = host_destroy,
};

const DeviceCommPath *device_comm_host_path(void) { return &host_path; }

/* device_comm_nccl.c: the nccl path of device_comm.h: one NCCL communicator
 * per group (ncclCommInitRank from a unique id rank 0 broadcasts over MPI),
 * operations queued on the group's communication stream, and a watchdog
 * while the host waits: it polls the stream's completion and
 * ncclCommGetAsyncError, and past the group's timeout aborts the
 * communicator (ncclCommAbort) and ends the job with one line naming the
 * operation, the group and the rank. Reduce-scatter and all-gather of a
 * window move each rank's part into an equal block of a padded scratch
 * buffer, since NCCL's parts are equal. Built where CUDA is (BS_HAVE_CUDA). */
#include <stdio.h>
#include <stdlib.h>

#include "comm/device_comm_internal.h"
#include "core/reason.h"
#include "core/error.h"

#ifdef BS_HAVE_CUDA
#include "comm/nccl_api.h"
#include "core/timer.h"

struct NcclState {
    NcclApi api;
    ncclComm_t comm;
    cudaStream_t stream;
};

static void nccl_check(const DeviceComm *dc, ncclResult_t r, const char *what) {
    if (r == ncclSuccess) return;
    const NcclApi *api = &dc->nccl->api;
    bs_die("%s (nccl) on the %s group failed on rank %d: %s (%s)", what, dc->group->name, dc->group->world_rank,
           api->GetErrorString(r), api->GetLastError(dc->nccl->comm));
}

/* True on every rank when ok holds on every rank. */
static bool all_ok(DeviceComm *dc, bool ok) {
    double failed = ok ? 0 : 1;
    comm_allreduce_max_double(dc->group, &failed, 1);
    return failed == 0;
}

static int open_fail(DeviceComm *dc, bool here, const char *other, char *reason, size_t reason_size) {
    if (!here) snprintf(reason, reason_size, "%s", other);
    if (dc->nccl->api.library) dlclose(dc->nccl->api.library);
    free(dc->nccl);
    dc->nccl = NULL;
    return -1;
}

int device_comm_nccl_open(DeviceComm *dc, char *reason, size_t reason_size) {
    NcclState *st = dc->nccl = bs_calloc(1, sizeof *st);
    st->stream = device_native_stream(dc->dev, dc->stream);
    bool ok = st->stream != NULL;
    if (!ok) snprintf(reason, reason_size, "nccl needs a CUDA device (this one is %s)", device_name(dc->dev));
    ok = ok && nccl_load(&st->api, reason, reason_size);
    if (!all_ok(dc, ok)) return open_fail(dc, ok, "nccl could not be set up on another rank", reason, reason_size);
    struct {
        int ok;
        ncclUniqueId id;
    } root = {0};
    ncclResult_t r = ncclSuccess;
    if (dc->group->rank == 0) root.ok = (r = st->api.GetUniqueId(&root.id)) == ncclSuccess;
    comm_broadcast_bytes(dc->group, &root, sizeof root, 0);
    if (!root.ok) {
        snprintf(reason, reason_size, "ncclGetUniqueId failed on the %s group's first rank%s%s", dc->group->name,
                 r != ncclSuccess ? ": " : "", r != ncclSuccess ? st->api.GetErrorString(r) : "");
        return open_fail(dc, true, "", reason, reason_size);
    }
    r = st->api.CommInitRank(&st->comm, dc->group->size, root.id, dc->group->rank);
    ok = r == ncclSuccess;
    if (!ok) snprintf(reason, reason_size, "ncclCommInitRank on the %s group: %s", dc->group->name, st->api.GetErrorString(r));
    if (!all_ok(dc, ok)) {
        if (ok) st->api.CommDestroy(st->comm);
        return open_fail(dc, ok, "ncclCommInitRank failed on another rank", reason, reason_size);
    }
    return 0;
}

/* The group's accounts (comm_stats) as the CPU path keeps them: the bytes a
 * ring would send from this rank, and one operation. */
static void account(DeviceComm *dc, double bytes) {
    dc->group->stats.bytes_sent += (uint64_t)bytes;
    dc->group->stats.uncompressed_bytes += (uint64_t)bytes;
    dc->group->stats.operations++;
}

/* (size - 1) / size of n floats: one ring pass */
static double ring_pass(const DeviceComm *dc, size_t n) {
    return (double)(dc->group->size - 1) / dc->group->size * (double)n * sizeof(float);
}

static void nccl_allreduce(DeviceComm *dc, float *buf, size_t n, bool average) {
    NcclState *st = dc->nccl;
    account(dc, 2 * ring_pass(dc, n));
    nccl_check(dc, st->api.AllReduce(buf, buf, n, ncclFloat, average ? ncclAvg : ncclSum, st->comm, st->stream),
               "all-reduce");
}

/* The largest window ∩ part over the group's ranks: every rank's block in the padded buffer. */
static size_t padded_block(const DeviceComm *dc, size_t window_offset, size_t n, size_t total) {
    size_t block = 0;
    for (int q = 0; q < dc->group->size; q++) {
        size_t rel, count;
        comm_window_part(dc->group, window_offset, n, total, q, &rel, &count);
        if (count > block) block = count;
    }
    return block;
}

static float *scratch(DeviceComm *dc, size_t count) {
    if (dc->scratch_count < count) {
        device_comm_check(dc, device_stream_sync(dc->dev, dc->stream), dc->last_op);
        device_free(dc->dev, dc->scratch);
        dc->scratch = device_alloc(dc->dev, count * sizeof(float));
        if (!dc->scratch) device_comm_check(dc, -1, dc->last_op);
        dc->scratch_count = count;
    }
    return dc->scratch;
}

/* Rank q's window ∩ part between buf and its block of the padded buffer. */
static void move_part(DeviceComm *dc, float *buf, float *padded, size_t block, int q, size_t window_offset, size_t n,
                      size_t total, bool into_padded) {
    size_t rel, count;
    comm_window_part(dc->group, window_offset, n, total, q, &rel, &count);
    float *part = buf + rel, *slot = padded + (size_t)q * block;
    if (count)
        device_comm_check(dc,
                          device_copy(dc->dev, dc->stream, into_padded ? slot : part, into_padded ? part : slot,
                                      count * sizeof(float), COPY_DEVICE_TO_DEVICE),
                          dc->last_op);
}

static void nccl_reduce_scatter(DeviceComm *dc, float *buf, size_t window_offset, size_t n, size_t total) {
    NcclState *st = dc->nccl;
    const size_t block = padded_block(dc, window_offset, n, total);
    const int size = dc->group->size, rank = dc->group->rank;
    if (block == 0) return;
    float *padded = scratch(dc, block * (size_t)size);
    account(dc, ring_pass(dc, block * (size_t)size));
    for (int q = 0; q < size; q++) move_part(dc, buf, padded, block, q, window_offset, n, total, true);
    nccl_check(dc,
               st->api.ReduceScatter(padded, padded + (size_t)rank * block, block, ncclFloat, ncclSum, st->comm,
                                     st->stream),
               "reduce-scatter");
    move_part(dc, buf, padded, block, rank, window_offset, n, total, false);
}

static void nccl_allgather(DeviceComm *dc, float *buf, size_t window_offset, size_t n, size_t total) {
    NcclState *st = dc->nccl;
    const size_t block = padded_block(dc, window_offset, n, total);
    const int size = dc->group->size, rank = dc->group->rank;
    if (block == 0) return;
    float *padded = scratch(dc, block * (size_t)size);
    account(dc, ring_pass(dc, block * (size_t)size));
    move_part(dc, buf, padded, block, rank, window_offset, n, total, true);
    nccl_check(dc, st->api.AllGather(padded + (size_t)rank * block, padded, block, ncclFloat, st->comm, st->stream),
               "all-gather");
    for (int q = 0; q < size; q++) move_part(dc, buf, padded, block, q, window_offset, n, total, false);
}

static void nccl_broadcast(DeviceComm *dc, float *buf, size_t n, int root) {
    NcclState *st = dc->nccl;
    account(dc, dc->group->rank == root ? (double)n * sizeof(float) : 0);
    nccl_check(dc, st->api.Broadcast(buf, buf, n, ncclFloat, root, st->comm, st->stream), "broadcast");
}

/* One NCCL group, so a rank's send and receive run together (NCCL matches
 * them by order, not by tag). */
static void nccl_sendrecv(DeviceComm *dc, const float *send, size_t send_n, int to, float *recv, size_t recv_n,
                          int from, int tag) {
    (void)tag;
    NcclState *st = dc->nccl;
    account(dc, send && to != dc->group->rank ? (double)send_n * sizeof(float) : 0);
    nccl_check(dc, st->api.GroupStart(), dc->last_op);
    if (send) nccl_check(dc, st->api.Send(send, send_n, ncclFloat, to, st->comm, st->stream), dc->last_op);
    if (recv) nccl_check(dc, st->api.Recv(recv, recv_n, ncclFloat, from, st->comm, st->stream), dc->last_op);
    nccl_check(dc, st->api.GroupEnd(), dc->last_op);
}

/* One group of sends and receives (NCCL runs them together: no order between peers to deadlock on). */
static void nccl_alltoallv(DeviceComm *dc, const void *send, const size_t *send_counts, void *recv,
                           const size_t *recv_counts, size_t elem_bytes) {
    NcclState *st = dc->nccl;
    const unsigned char *s = send;
    unsigned char *d = recv;
    size_t others = 0;
    for (int r = 0; r < dc->group->size; r++) others += r == dc->group->rank ? 0 : send_counts[r] * elem_bytes;
    account(dc, (double)others);
    nccl_check(dc, st->api.GroupStart(), "all-to-all");
    for (int r = 0; r < dc->group->size; r++) {
        const size_t sb = send_counts[r] * elem_bytes, rb = recv_counts[r] * elem_bytes;
        if (sb) nccl_check(dc, st->api.Send(s, sb, ncclUint8, r, st->comm, st->stream), "all-to-all");
        if (rb) nccl_check(dc, st->api.Recv(d, rb, ncclUint8, r, st->comm, st->stream), "all-to-all");
        s += sb;
        d += rb;
    }
    nccl_check(dc, st->api.GroupEnd(), "all-to-all");
}

/* Past the timeout: the communicator is aborted (its kernels end) and the job with it, in one line. */
static void nccl_timed_out(DeviceComm *dc) {
    NcclState *st = dc->nccl;
    st->api.CommAbort(st->comm);
    st->comm = NULL;
    char line[512];
    bs_reason(line, sizeof line, "comm_timeout",
              "%s (nccl, %.1f MB) on the %s group did not finish within %.0f s on rank %d; its NCCL communicator "
              "was aborted; aborting the job (raise the collective timeout if a rank is only slow)",
              dc->last_op, (double)dc->last_bytes / 1e6, dc->group->name, dc->group->timeout_s, dc->group->world_rank);
    bs_error("%s", line);
    comm_abort(dc->group, 1);
}

/* The watchdog: the host waits for the communication stream under the group's timeout. */
static void nccl_finish(DeviceComm *dc) {
    NcclState *st = dc->nccl;
    double t0 = bs_now(), polled = t0;
    for (;;) {
        int done = device_event_done(dc->dev, dc->done);
        if (done < 0) device_comm_check(dc, -1, dc->last_op);
        if (done) {
            dc->group->stats.wait_seconds += bs_now() - t0;
            return;
        }
        ncclResult_t async = ncclSuccess;
        st->api.CommGetAsyncError(st->comm, &async);
        if (async != ncclSuccess && async != ncclInProgress) {
            st->api.CommAbort(st->comm);
            st->comm = NULL;
            bs_die("%s (nccl) on the %s group failed on rank %d: %s", dc->last_op, dc->group->name,
                   dc->group->world_rank, st->api.GetErrorString(async));
        }
        double now = bs_now();
        if (now - polled > COMM_FATAL_POLL_S) { /* a rank that failed waits to hear whether this one works on */
            comm_fatal_poll();
            polled = now;
        }
        if (now - t0 > dc->group->timeout_s) nccl_timed_out(dc);
    }
}

static void nccl_destroy(DeviceComm *dc) {
    NcclState *st = dc->nccl;
    if (!st) return;
    if (st->comm) st->api.CommDestroy(st->comm);
    dlclose(st->api.library);
    free(st);
    dc->nccl = NULL;
}

static const DeviceCommPath nccl_path = {
    .name = "nccl",
    .allreduce = nccl_allreduce,
    .reduce_scatter = nccl_reduce_scatter,
    .allgather = nccl_allgather,
    .broadcast = nccl_broadcast,
    .sendrecv = nccl_sendrecv,
    .alltoallv = nccl_alltoallv,
    .finish = nccl_finish,
    .destroy = nccl_destroy,
};

const DeviceCommPath *device_comm_nccl_path(void) { return &nccl_path; }

#else

int device_comm_nccl_open(DeviceComm *dc, char *reason, size_t reason_size) {
    (void)dc;
    snprintf(reason, reason_size, "nccl is not built into this batchscale (CUDA was not found when it was built)");
    return -1;
}

const DeviceCommPath *device_comm_nccl_path(void) { return NULL; }

#endif

/* compressed_qgz.c: the qgz scheme of compressed.h, ZeRO++'s quantized
 * gradient reduce-scatter as a two-step hierarchical all-to-all:
 *   start   encode every chunk of the input into send1, slot order (local
 *           index first: "tensor slice reordering"), and send node peer l
 *           the M units of local index l, one contiguous message;
 *   node    decode and sum the L units of this rank's local index (the
 *           peers' and its own) into partial, M chunks;
 *   cross   encode those sums into send2 and send chunk (b, l) to rank
 *           (b, l); decode and sum the M units of the own chunk into buf.
 * A step over a group of one (L = 1 or M = 1) is skipped: nothing moves, so
 * nothing is encoded. Messages are point-to-point on the group with the
 * operation's own tags (tag: node step, tag + 1: cross step), so qgZ
 * reduce-scatters may be in flight with any other operations. Deliberately
 * not here: error feedback (ZeRO++ keeps none) and all-reduce. */
#include <stdlib.h>
#include <string.h>

#include "comm/compressed_internal.h"
#include "core/error.h"
#include "core/reason.h"

static void *grow_array(void *p, size_t size) {
    free(p);
    return bs_malloc(size ? size : 1);
}

/* The slot table of this group: who sits where, and every slot's chunk. */
static void plan_slots(Qgz *q, size_t window_offset, size_t n, size_t total) {
    Comm *c = q->comm;
    const int N = c->size;
    if (!c->uniform_nodes)
        bs_die_about("zero_quant_grads ranks_per_node",
                     "qgZ (quantized gradients) needs the same number of ranks on every node of the %s group", c->name);
    if (q->ranks_capacity < N) {
        q->rank_at = grow_array(q->rank_at, sizeof(int) * (size_t)N);
        q->offset = grow_array(q->offset, sizeof(size_t) * (size_t)N);
        q->length = grow_array(q->length, sizeof(size_t) * (size_t)N);
        q->unit_offset = grow_array(q->unit_offset, sizeof(size_t) * (size_t)N);
        q->unit_bytes = grow_array(q->unit_bytes, sizeof(size_t) * (size_t)N);
        q->partial_offset = grow_array(q->partial_offset, sizeof(size_t) * (size_t)N);
        q->requests = grow_array(q->requests, sizeof(MPI_Request) * 2 * (size_t)N);
        q->ranks_capacity = N;
    }
    q->nodes = c->num_nodes;
    q->locals = c->local_size;
    q->me = c->local_index * q->nodes + c->node_index;
    for (int r = 0; r < N; r++) q->rank_at[c->rank_local[r] * q->nodes + c->rank_node[r]] = r;
    size_t bytes = 0;
    for (int s = 0; s < N; s++) {
        comm_window_part(c, window_offset, n, total, q->rank_at[s], &q->offset[s], &q->length[s]);
        q->unit_bytes[s] = codec_encoded_bytes(q->codec, q->length[s]);
        q->unit_offset[s] = bytes;
        bytes += q->unit_bytes[s];
    }
}

/* Slot of node b in this rank's local index row; bytes of local index l's row. */
static int row_slot(const Qgz *q, int b) { return (q->me / q->nodes) * q->nodes + b; }
static size_t row_bytes_of(const Qgz *q, int l) {
    size_t bytes = 0;
    for (int b = 0; b < q->nodes; b++) bytes += q->unit_bytes[l * q->nodes + b];
    return bytes;
}

static void plan_buffers(Qgz *q) {
    const int N = q->comm->size, L = q->locals, M = q->nodes;
    size_t floats = 0;
    for (int b = 0; b < M; b++) {
        q->partial_offset[b] = floats;
        floats += q->length[row_slot(q, b)];
    }
    q->row_bytes = row_bytes_of(q, q->me / M);
    q->send1 = compressed_grow(q->send1, &q->send1_capacity, L > 1 ? q->unit_offset[N - 1] + q->unit_bytes[N - 1] : 0);
    q->recv1 = compressed_grow(q->recv1, &q->recv1_capacity, L > 1 ? (size_t)L * q->row_bytes : 0);
    q->partial = compressed_grow(q->partial, &q->partial_capacity, floats * sizeof(float));
    q->send2 = compressed_grow(q->send2, &q->send2_capacity, M > 1 ? q->row_bytes : 0);
    q->recv2 = compressed_grow(q->recv2, &q->recv2_capacity, M > 1 ? (size_t)M * q->unit_bytes[q->me] : 0);
}

static void post_pair(Qgz *q, CommOp *op, int peer, int tag, uint8_t *recv_to, size_t recv_bytes,
                      const uint8_t *send_from, size_t send_bytes) {
    Comm *c = q->comm;
    comm_check(MPI_Irecv(recv_to, (int)recv_bytes, MPI_BYTE, peer, tag, c->mpi, &q->requests[q->num_requests++]), c,
               "qgZ receive");
    comm_check(MPI_Isend(send_from, (int)send_bytes, MPI_BYTE, peer, tag, c->mpi, &q->requests[q->num_requests++]), c,
               "qgZ send");
    op->extra_bytes += send_bytes;
}

/* Step 1: encode every chunk, send each node peer its row, receive theirs of mine. */
static void post_node_step(Qgz *q, CommOp *op) {
    const int M = q->nodes, my_local = q->me / M, my_node = q->me % M;
    for (int s = 0; s < q->comm->size; s++)
        codec_encode(q->codec, q->buf + q->offset[s], q->length[s], q->send1 + q->unit_offset[s]);
    q->num_requests = 0;
    for (int l = 0; l < q->locals; l++)
        if (l != my_local)
            post_pair(q, op, q->rank_at[l * M + my_node], q->tag, q->recv1 + (size_t)l * q->row_bytes, q->row_bytes,
                      q->send1 + q->unit_offset[l * M], row_bytes_of(q, l));
}

/* The node's sum of chunk (b, my local index) for every b; with L = 1 it is
 * this rank's input. */
static void node_sum(Qgz *q) {
    const int M = q->nodes, my_local = q->me / M;
    for (int b = 0; b < M; b++) {
        int s = row_slot(q, b);
        float *dst = q->partial + q->partial_offset[b];
        if (q->locals == 1) {
            memcpy(dst, q->buf + q->offset[s], q->length[s] * sizeof(float));
            continue;
        }
        memset(dst, 0, q->length[s] * sizeof(float));
        size_t within = q->unit_offset[s] - q->unit_offset[my_local * M]; /* the unit's place in a row message */
        for (int l = 0; l < q->locals; l++) {
            const uint8_t *unit =
                l == my_local ? q->send1 + q->unit_offset[s] : q->recv1 + (size_t)l * q->row_bytes + within;
            codec_decode_add(q->codec, unit, q->length[s], dst);
        }
    }
}

/* Step 2: encode the node sums, send chunk (b, l) to node b, receive every node's sum of mine. */
static void post_cross_step(Qgz *q, CommOp *op) {
    const int M = q->nodes, my_local = q->me / M, my_node = q->me % M;
    q->num_requests = 0;
    for (int b = 0; b < M; b++) {
        int s = row_slot(q, b);
        uint8_t *unit = q->send2 + (q->unit_offset[s] - q->unit_offset[my_local * M]);
        codec_encode(q->codec, q->partial + q->partial_offset[b], q->length[s], unit);
        if (b != my_node)
            post_pair(q, op, q->rank_at[s], q->tag + 1, q->recv2 + (size_t)b * q->unit_bytes[q->me],
                      q->unit_bytes[q->me], unit, q->unit_bytes[s]);
    }
}

/* The own chunk: the sum over nodes of their node sums (decoded), or with
 * M = 1 the node sum itself; the mean if asked. */
static void finish(Qgz *q) {
    const int M = q->nodes, my_local = q->me / M, my_node = q->me % M;
    size_t len = q->length[q->me];
    float *own = q->buf + q->offset[q->me];
    if (M == 1) {
        memcpy(own, q->partial, len * sizeof(float));
    } else {
        memset(own, 0, len * sizeof(float));
        for (int b = 0; b < M; b++) {
            const uint8_t *unit = b == my_node ? q->send2 + (q->unit_offset[q->me] - q->unit_offset[my_local * M])
                                               : q->recv2 + (size_t)b * q->unit_bytes[q->me];
            codec_decode_add(q->codec, unit, len, own);
        }
    }
    if (q->average)
        for (size_t i = 0; i < len; i++) own[i] /= (float)q->comm->size;
}

static bool all_done(Qgz *q) {
    int flag;
    comm_check(MPI_Testall(q->num_requests, q->requests, &flag, MPI_STATUSES_IGNORE), q->comm, "qgZ reduce-scatter");
    return flag != 0;
}

/* After the node step (or at once with L = 1): start the cross step, or
 * finish when there is a single node. True when the operation is complete. */
static bool after_node_step(CommOp *op, Qgz *q) {
    node_sum(q);
    if (q->nodes > 1) {
        post_cross_step(q, op);
        q->phase = 2;
        return false;
    }
    finish(q);
    return true;
}

static bool qgz_progress(CommOp *op) {
    CompressedScratch *s = op->progress_state;
    Qgz *q = &s->qgz;
    if (!all_done(q)) return false;
    if (q->phase == 1 && !after_node_step(op, q)) return false;
    if (q->phase == 2) finish(q);
    compressed_scratch_release(s);
    return true;
}

void compressed_qgz_start(CommOp *op, CompressedScratch *s, const Compression *z, float *buf, size_t window_offset,
                          size_t n, size_t total) {
    Qgz *q = &s->qgz;
    q->comm = op->comm;
    q->codec = &s->codec;
    q->buf = buf;
    q->average = z->average;
    q->tag = comm_next_tag(op->comm);
    plan_slots(q, window_offset, n, total);
    plan_buffers(q);
    q->num_requests = 0;
    if (q->locals > 1) {
        post_node_step(q, op);
        q->phase = 1;
    } else {
        after_node_step(op, q); /* N > 1 here, so M > 1: the cross step is in flight */
    }
    op->progress = qgz_progress;
    op->progress_state = s;
}

size_t compressed_qgz_bytes(const Comm *c, const Codec *codec, size_t window_offset, size_t n, size_t total) {
    size_t bytes = 0; /* step 1: the chunks of the other local indices; step 2: the own index's on other nodes */
    for (int r = 0; r < c->size; r++) {
        size_t rel, len;
        comm_window_part(c, window_offset, n, total, r, &rel, &len);
        if (r != c->rank) bytes += codec_encoded_bytes(codec, len);
    }
    return bytes;
}

size_t compressed_qgz_scratch_bytes(const Qgz *q) {
    return q->send1_capacity + q->recv1_capacity + q->partial_capacity + q->send2_capacity + q->recv2_capacity;
}

void compressed_qgz_free(Qgz *q) {
    free(q->rank_at), free(q->offset), free(q->length), free(q->unit_offset), free(q->unit_bytes);
    free(q->partial_offset), free(q->requests);
    free(q->send1), free(q->recv1), free(q->partial), free(q->send2), free(q->recv2);
}

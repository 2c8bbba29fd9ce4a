/* compressed_exchange.c: the exchange scheme of compressed.h (DeepSpeed's
 * compressed all-reduce, for any codec):
 *   phase 1  encode every chunk (worker feedback), send chunk p to rank p,
 *            receive every rank's encoding of the own chunk;
 *   server   decode and sum them (mean if asked) into a dense chunk; for a
 *            reduce-scatter that is the result; for an all-reduce add the
 *            server residual, encode again (server feedback), keep the
 *            decoded values;
 *   phase 2  (all-reduce) send that encoding to every rank, decode theirs.
 * Messages are point-to-point with the operation's own tags, so several
 * exchanges and rings may be in flight on one group in any order of
 * completion. The server's work runs inside comm_test when phase 1 is
 * complete. */
#include <stdlib.h>
#include <string.h>

#include "comm/compressed_internal.h"
#include "core/error.h"

/* The chunk table of this window and the buffers it needs. */
static void plan(Exchange *x, size_t window_offset, size_t n, size_t total) {
    const int N = x->comm->size;
    if (x->ranks_capacity < N) {
        free(x->offset), free(x->length), free(x->unit_bytes), free(x->unit_offset), free(x->requests);
        x->offset = bs_malloc(sizeof(size_t) * (size_t)N);
        x->length = bs_malloc(sizeof(size_t) * (size_t)N);
        x->unit_bytes = bs_malloc(sizeof(size_t) * (size_t)N);
        x->unit_offset = bs_malloc(sizeof(size_t) * (size_t)N);
        x->requests = bs_malloc(sizeof(MPI_Request) * 2 * (size_t)N);
        x->ranks_capacity = N;
    }
    size_t all = 0;
    for (int p = 0; p < N; p++) {
        comm_window_part(x->comm, window_offset, n, total, p, &x->offset[p], &x->length[p]);
        x->unit_bytes[p] = codec_encoded_bytes(x->codec, x->length[p]);
        x->unit_offset[p] = all;
        all += x->unit_bytes[p];
    }
    const int me = x->comm->rank;
    x->send = compressed_grow(x->send, &x->send_capacity, all);
    x->gather = compressed_grow(x->gather, &x->gather_capacity, all);
    x->recv = compressed_grow(x->recv, &x->recv_capacity, (size_t)N * x->unit_bytes[me]);
    if (x->dense_capacity < x->length[me] || !x->dense) {
        free(x->dense);
        x->dense = bs_malloc((x->length[me] ? x->length[me] : 1) * sizeof(float));
        x->dense_capacity = x->length[me];
    }
}

static void post_pair(Exchange *x, CommOp *op, int peer, int tag, uint8_t *recv_to, size_t recv_bytes,
                      const uint8_t *send_from, size_t send_bytes) {
    Comm *c = x->comm;
    comm_check(MPI_Irecv(recv_to, (int)recv_bytes, MPI_BYTE, peer, tag, c->mpi, &x->requests[x->num_requests++]), c,
               "compressed exchange receive");
    comm_check(MPI_Isend(send_from, (int)send_bytes, MPI_BYTE, peer, tag, c->mpi, &x->requests[x->num_requests++]),
               c, "compressed exchange send");
    op->extra_bytes += send_bytes;
}

/* Phase 1: chunk p's encoding to rank p; every rank's encoding of the own chunk in. */
static void post_to_servers(Exchange *x, CommOp *op) {
    const int me = x->comm->rank;
    x->num_requests = 0;
    for (int p = 0; p < x->comm->size; p++)
        if (p != me)
            post_pair(x, op, p, x->tag, x->recv + (size_t)p * x->unit_bytes[me], x->unit_bytes[me],
                      x->send + x->unit_offset[p], x->unit_bytes[p]);
}

/* Phase 2: the own chunk's server encoding to every rank; theirs in. */
static void post_from_servers(Exchange *x, CommOp *op) {
    const int me = x->comm->rank;
    x->num_requests = 0;
    for (int p = 0; p < x->comm->size; p++)
        if (p != me)
            post_pair(x, op, p, x->tag + 1, x->gather + x->unit_offset[p], x->unit_bytes[p],
                      x->gather + x->unit_offset[me], x->unit_bytes[me]);
}

static bool all_done(Exchange *x) {
    int flag;
    comm_check(MPI_Testall(x->num_requests, x->requests, &flag, MPI_STATUSES_IGNORE), x->comm, "compressed exchange");
    return flag != 0;
}

/* Sums every rank's encoding of the own chunk into dense. */
static void server_sum(Exchange *x) {
    const int N = x->comm->size, me = x->comm->rank;
    size_t len = x->length[me];
    memset(x->dense, 0, len * sizeof(float));
    for (int p = 0; p < N; p++) {
        const uint8_t *unit = p == me ? x->send + x->unit_offset[me] : x->recv + (size_t)p * x->unit_bytes[me];
        codec_decode_add(x->codec, unit, len, x->dense);
    }
    if (x->average)
        for (size_t i = 0; i < len; i++) x->dense[i] /= (float)N;
}

static bool exchange_progress(CommOp *op) {
    CompressedScratch *s = op->progress_state;
    Exchange *x = &s->exchange;
    const int N = x->comm->size, me = x->comm->rank;
    if (!all_done(x)) return false;
    if (x->phase == 1) {
        server_sum(x);
        float *own = x->buf + x->offset[me];
        size_t len = x->length[me];
        if (x->allreduce) {
            codec_encode_feedback(x->codec, x->dense, x->server_residual, len, x->gather + x->unit_offset[me]);
            post_from_servers(x, op);
            x->phase = 2;
        }
        memcpy(own, x->dense, len * sizeof(float));
        if (x->allreduce) return false;
    } else {
        for (int p = 0; p < N; p++)
            if (p != me) codec_decode(x->codec, x->gather + x->unit_offset[p], x->length[p], x->buf + x->offset[p]);
    }
    compressed_scratch_release(s);
    return true;
}

void compressed_exchange_start(CommOp *op, CompressedScratch *s, const Compression *z, bool allreduce, float *buf,
                               size_t window_offset, size_t n, size_t total) {
    Exchange *x = &s->exchange;
    x->comm = op->comm;
    x->codec = &s->codec;
    x->buf = buf;
    x->average = z->average;
    x->allreduce = allreduce;
    x->residual = z->residual;
    x->server_residual = z->server_residual;
    x->tag = comm_next_tag(op->comm);
    plan(x, window_offset, n, total);
    for (int p = 0; p < x->comm->size; p++)
        codec_encode_feedback(x->codec, buf + x->offset[p], x->residual ? x->residual + x->offset[p] : NULL,
                              x->length[p], x->send + x->unit_offset[p]);
    post_to_servers(x, op);
    x->phase = 1;
    op->progress = exchange_progress;
    op->progress_state = s;
}

size_t compressed_exchange_bytes(const Comm *c, bool allreduce, const Codec *codec, size_t window_offset, size_t n,
                                 size_t total) {
    size_t bytes = 0;
    for (int p = 0; p < c->size; p++) {
        size_t rel, len;
        comm_window_part(c, window_offset, n, total, p, &rel, &len);
        if (p != c->rank) bytes += codec_encoded_bytes(codec, len);
        else if (allreduce) bytes += (size_t)(c->size - 1) * codec_encoded_bytes(codec, len);
    }
    return bytes;
}

void compressed_exchange_free(Exchange *x) {
    free(x->offset), free(x->length), free(x->unit_bytes), free(x->unit_offset), free(x->requests);
    free(x->send), free(x->recv), free(x->gather), free(x->dense);
}

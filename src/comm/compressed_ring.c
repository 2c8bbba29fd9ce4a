/* compressed_ring.c: the ring scheme of compressed.h. A pass of ring.c
 * with a RingCoding attached: ring.c keeps the schedule (which chunk each
 * step sends and receives, segment by segment); the functions here move
 * encoded bytes instead of floats.
 *   reduce step        encode the segment of the partial sum (with error
 *                      feedback), send it; decode the received one and add it
 *   all-gather step 0  encode the own chunk's segment, keep its decoded values
 *                      in place (the owner then holds what everyone decodes)
 *   all-gather step g  send the bytes received at step g-1 unchanged
 * Each segment is one codec unit (its own scales), so both ends agree on
 * the units without any header. */
#include <stdlib.h>

#include "comm/compressed_internal.h"
#include "core/error.h"

void ring_coding_prepare(RingPass *r, size_t largest_segment) {
    RingCoding *rc = r->coding;
    size_t cap = codec_encoded_bytes(rc->codec, largest_segment);
    size_t need = 2 * (size_t)r->segments * cap;
    if (need > rc->allocated || !rc->bytes) {
        free(rc->bytes);
        rc->bytes = bs_malloc(need ? need : 1);
        rc->allocated = need;
    }
    rc->capacity = cap;
    for (int j = 0; j < r->segments; j++) {
        rc->send[j] = rc->bytes + 2 * (size_t)j * cap;
        rc->recv[j] = rc->send[j] + cap;
    }
}

void ring_coding_post(RingPass *r, int j, int gather_step, size_t soff, size_t slen, size_t roff, size_t rlen,
                      int left, int right, int tag) {
    RingCoding *rc = r->coding;
    Comm *c = r->comm;
    RingSegment *s = &r->seg[j];
    if (gather_step > 0) { /* forward what arrived at the previous step */
        uint8_t *t = rc->send[j];
        rc->send[j] = rc->recv[j];
        rc->recv[j] = t;
    } else {
        codec_encode_feedback(rc->codec, r->buf + soff, rc->residual ? rc->residual + soff : NULL, slen, rc->send[j]);
    }
    size_t send_bytes = codec_encoded_bytes(rc->codec, slen), recv_bytes = codec_encoded_bytes(rc->codec, rlen);
    rc->pending_offset[j] = roff;
    rc->pending_length[j] = rlen;
    rc->pending_add[j] = gather_step < 0;
    comm_check(MPI_Irecv(rc->recv[j], (int)recv_bytes, MPI_BYTE, left, tag, c->mpi, &s->recv), c,
               "compressed ring receive");
    comm_check(MPI_Isend(rc->send[j], (int)send_bytes, MPI_BYTE, right, tag, c->mpi, &s->send), c,
               "compressed ring send");
    s->recv_active = s->send_active = true;
    r->bytes_sent += send_bytes;
}

void ring_coding_received(RingPass *r, int j) {
    RingCoding *rc = r->coding;
    float *dst = r->buf + rc->pending_offset[j];
    if (rc->pending_add[j]) codec_decode_add(rc->codec, rc->recv[j], rc->pending_length[j], dst);
    else codec_decode(rc->codec, rc->recv[j], rc->pending_length[j], dst);
}

static bool ring_op_progress(CommOp *op) {
    if (!comm_op_advance_rings(op)) return false;
    CompressedScratch *s = op->progress_state;
    RingCoding *rc = &s->ring;
    if (rc->average) {
        float *x = op->phase[0].buf + rc->scale_offset;
        for (size_t i = 0; i < rc->scale_count; i++) x[i] /= (float)op->comm->size;
    }
    compressed_scratch_release(s);
    return true;
}

void compressed_ring_start(CommOp *op, CompressedScratch *s, RingKind kind, const Compression *z, float *buf,
                           size_t window_offset, size_t n, size_t total) {
    Comm *c = op->comm;
    RingPass *r = comm_op_add_ring(op, c, kind, buf, comm_next_tag(c));
    comm_ring_window_chunks(r, c, window_offset, n, total);
    RingCoding *rc = &s->ring;
    rc->codec = &s->codec;
    rc->residual = z->residual;
    size_t off = r->chunk_offset[c->rank], len = r->chunk_length[c->rank];
    rc->average = z->average && kind != RING_ALLGATHER;
    rc->scale_offset = kind == RING_ALLREDUCE ? 0 : off;
    rc->scale_count = kind == RING_ALLREDUCE ? n : len;
    r->coding = rc;
    if (kind == RING_REDUCE_SCATTER && z->residual) { /* the own chunk is never sent: its residual stays here */
        float *residual = z->residual;
        for (size_t i = off; i < off + len; i++) {
            buf[i] += residual[i];
            residual[i] = 0;
        }
    }
    op->progress = ring_op_progress;
    op->progress_state = s;
    comm_op_start_rings(op);
}

/* Bytes of one chunk of `length` floats sent as `segments` units. */
static size_t chunk_bytes(const Codec *codec, size_t length, int segments) {
    size_t per = (length + (size_t)segments - 1) / (size_t)segments, bytes = 0;
    for (int j = 0; j < segments; j++) {
        size_t begin = (size_t)j * per;
        if (begin < length) bytes += codec_encoded_bytes(codec, length - begin < per ? length - begin : per);
    }
    return bytes;
}

size_t compressed_ring_bytes(const Comm *c, RingKind kind, const Codec *codec, size_t window_offset, size_t n,
                             size_t total) {
    const int N = c->size;
    if (N == 1) return 0;
    size_t *length = bs_malloc(sizeof(size_t) * (size_t)N), largest = 0, bytes = 0;
    for (int p = 0; p < N; p++) {
        size_t rel;
        comm_window_part(c, window_offset, n, total, p, &rel, &length[p]);
        if (length[p] > largest) largest = length[p];
    }
    int segments = ring_segment_count(largest);
    for (int k = 0; k < N - 1; k++) {
        if (kind != RING_ALLGATHER) bytes += chunk_bytes(codec, length[((c->rank - k - 1) % N + N) % N], segments);
        if (kind != RING_REDUCE_SCATTER) bytes += chunk_bytes(codec, length[((c->rank - k) % N + N) % N], segments);
    }
    free(length);
    return bytes;
}

void compressed_ring_free(RingCoding *rc) { free(rc->bytes); }

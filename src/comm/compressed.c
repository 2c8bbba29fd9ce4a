/* compressed.c: the front door of compressed.h: checks the arguments,
 * hands the operation to the ring, exchange or qgZ scheme, sets its
 * accounting (the fp32 ring's bytes beside the bytes sent) and owns the
 * scratch. */
#include <stdlib.h>
#include <string.h>

#include "comm/compressed_internal.h"
#include "core/error.h"

CompressedScratch *compressed_scratch_new(void) { return bs_calloc(1, sizeof(CompressedScratch)); }

void compressed_scratch_free(CompressedScratch *s) {
    if (!s) return;
    compressed_ring_free(&s->ring);
    compressed_exchange_free(&s->exchange);
    compressed_qgz_free(&s->qgz);
    free(s);
}

size_t compressed_scratch_bytes(const CompressedScratch *s) {
    const Exchange *x = &s->exchange;
    return s->ring.allocated + x->send_capacity + x->gather_capacity + x->recv_capacity +
           x->dense_capacity * sizeof(float) + compressed_qgz_scratch_bytes(&s->qgz);
}

void compressed_scratch_release(CompressedScratch *s) { s->busy = false; }

void *compressed_grow(void *p, size_t *capacity, size_t need) {
    if (p && need <= *capacity) return p;
    free(p);
    *capacity = need;
    return bs_malloc(need ? need : 1);
}

CompressedScheme compressed_default_scheme(const Codec *codec) {
    return codec_is_elementwise(codec) ? COMPRESSED_RING : COMPRESSED_EXCHANGE;
}

bool compressed_parse_scheme(const char *name, CompressedScheme *out) {
    if (strcmp(name, "ring") == 0) *out = COMPRESSED_RING;
    else if (strcmp(name, "exchange") == 0) *out = COMPRESSED_EXCHANGE;
    else return false;
    return true;
}

const char *compressed_scheme_name(CompressedScheme scheme) {
    switch (scheme) {
    case COMPRESSED_RING: return "ring";
    case COMPRESSED_EXCHANGE: return "exchange";
    case COMPRESSED_QGZ: return "qgz";
    }
    return "?";
}

void compressed_own_chunk(const Comm *c, size_t window_offset, size_t n, size_t total, size_t *rel_offset,
                          size_t *count) {
    comm_window_part(c, window_offset, n, total, c->rank, rel_offset, count);
}

size_t compressed_server_floats(const Comm *c, size_t window_offset, size_t n, size_t total) {
    size_t rel, count;
    compressed_own_chunk(c, window_offset, n, total, &rel, &count);
    return count;
}

static const RingKind ring_kinds[] = {RING_ALLREDUCE, RING_REDUCE_SCATTER, RING_ALLGATHER};
static const char *const op_names[] = {"compressed all-reduce", "compressed reduce-scatter", "compressed all-gather"};

size_t compressed_bytes_per_op(const Comm *c, CompressedOpKind kind, const Codec *codec, CompressedScheme scheme,
                               size_t window_offset, size_t n, size_t total) {
    if (c->size == 1) return 0;
    if (scheme == COMPRESSED_RING) return compressed_ring_bytes(c, ring_kinds[kind], codec, window_offset, n, total);
    if (scheme == COMPRESSED_QGZ) return compressed_qgz_bytes(c, codec, window_offset, n, total);
    return compressed_exchange_bytes(c, kind == COMPRESSED_OP_ALLREDUCE, codec, window_offset, n, total);
}

static CommOp *start(Comm *c, CompressedScratch *s, CompressedOpKind kind, const Compression *z, float *buf,
                     size_t window_offset, size_t n, size_t total) {
    if (window_offset > total || n > total - window_offset)
        bs_die("internal: %s window [%zu, +%zu) outside [0, %zu)", op_names[kind], window_offset, n, total);
    if (z->scheme == COMPRESSED_RING && !codec_is_elementwise(&z->codec))
        bs_die("internal: the ring cannot carry top-k or 1-bit encodings (use the exchange scheme)");
    if (kind == COMPRESSED_OP_ALLGATHER && z->scheme != COMPRESSED_RING)
        bs_die("internal: the compressed all-gather runs on the ring");
    if (z->scheme == COMPRESSED_QGZ && (kind != COMPRESSED_OP_REDUCE_SCATTER || !codec_is_elementwise(&z->codec) ||
                                        z->residual || z->server_residual))
        bs_die("internal: qgZ is a reduce-scatter of an elementwise codec without error feedback");
    CommOp *op = comm_op_new(c, op_names[kind], n * sizeof(float));
    if (c->size == 1) return op;
    if (s->busy) bs_die("internal: a compressed collective's scratch is already in flight");
    s->busy = true;
    s->codec = z->codec;
    double share = (double)(c->size - 1) / c->size * (double)n * sizeof(float);
    op->uncompressed_bytes = (uint64_t)(kind == COMPRESSED_OP_ALLREDUCE ? 2 * share : share);
    if (z->scheme == COMPRESSED_RING)
        compressed_ring_start(op, s, ring_kinds[kind], z, buf, window_offset, n, total);
    else if (z->scheme == COMPRESSED_QGZ) compressed_qgz_start(op, s, z, buf, window_offset, n, total);
    else compressed_exchange_start(op, s, z, kind == COMPRESSED_OP_ALLREDUCE, buf, window_offset, n, total);
    return op;
}

CommOp *comm_start_compressed_allreduce(Comm *c, CompressedScratch *s, const Compression *z, float *buf,
                                        size_t window_offset, size_t n, size_t total) {
    return start(c, s, COMPRESSED_OP_ALLREDUCE, z, buf, window_offset, n, total);
}

CommOp *comm_start_compressed_reduce_scatter(Comm *c, CompressedScratch *s, const Compression *z, float *buf,
                                             size_t window_offset, size_t n, size_t total) {
    return start(c, s, COMPRESSED_OP_REDUCE_SCATTER, z, buf, window_offset, n, total);
}

CommOp *comm_start_compressed_allgather(Comm *c, CompressedScratch *s, const Codec *codec, float *buf,
                                        size_t window_offset, size_t n, size_t total) {
    Compression z = {*codec, COMPRESSED_RING, false, NULL, NULL};
    return start(c, s, COMPRESSED_OP_ALLGATHER, &z, buf, window_offset, n, total);
}

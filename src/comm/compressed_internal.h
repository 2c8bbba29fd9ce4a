/* compressed_internal.h: the state behind compressed.h, shared by its
 * files only: the scratch of one operation, the ring's coding buffers and
 * the exchange's chunk table and buffers. */
#ifndef BS_COMM_COMPRESSED_INTERNAL_H
#define BS_COMM_COMPRESSED_INTERNAL_H

#include <stdint.h>

#include "comm/comm_internal.h"
#include "comm/compressed.h"

struct RingCoding {
    const Codec *codec;
    float *residual; /* indexed like the ring pass's buf; NULL: none */
    bool average;    /* divide [scale_offset, +scale_count) of buf by N at the end */
    size_t scale_offset, scale_count;
    uint8_t *bytes;  /* 2 buffers of `capacity` bytes per segment */
    size_t capacity, allocated;
    uint8_t *send[RING_MAX_SEGMENTS], *recv[RING_MAX_SEGMENTS];
    /* the receive posted for each segment: where it goes, and whether it is added */
    size_t pending_offset[RING_MAX_SEGMENTS], pending_length[RING_MAX_SEGMENTS];
    bool pending_add[RING_MAX_SEGMENTS];
};

/* DeepSpeed-style compressed all-reduce / reduce-scatter (compressed_exchange.c). */
typedef struct {
    Comm *comm;
    const Codec *codec;
    float *buf;
    bool average, allreduce;
    float *residual, *server_residual;
    int tag, phase;
    /* per group rank: its chunk (relative to buf), the bytes of one encoding
     * of it, and where that encoding sits in send and gather */
    size_t *offset, *length, *unit_bytes, *unit_offset;
    int ranks_capacity;
    uint8_t *send;   /* this rank's encoding of every chunk (worker) */
    uint8_t *recv;   /* every rank's encoding of this rank's chunk, N units */
    uint8_t *gather; /* every server's encoding of its chunk */
    float *dense;    /* this rank's chunk, summed */
    size_t send_capacity, gather_capacity, recv_capacity, dense_capacity;
    MPI_Request *requests;
    int num_requests;
} Exchange;

struct CompressedScratch {
    Codec codec; /* the operation's own copy */
    bool busy;
    RingCoding ring;
    Exchange exchange;
};

/* compressed_ring.c */
void compressed_ring_start(CommOp *op, CompressedScratch *s, RingKind kind, const Compression *z, float *buf,
                           size_t window_offset, size_t n, size_t total);
size_t compressed_ring_bytes(const Comm *comm, RingKind kind, const Codec *codec, size_t window_offset, size_t n,
                             size_t total);
void compressed_ring_free(RingCoding *rc);

/* compressed_exchange.c */
void compressed_exchange_start(CommOp *op, CompressedScratch *s, const Compression *z, bool allreduce, float *buf,
                               size_t window_offset, size_t n, size_t total);
size_t compressed_exchange_bytes(const Comm *comm, bool allreduce, const Codec *codec, size_t window_offset, size_t n,
                                 size_t total);
void compressed_exchange_free(Exchange *x);

/* compressed.c: marks the scratch free again (called by the progress functions) */
void compressed_scratch_release(CompressedScratch *s);

#endif

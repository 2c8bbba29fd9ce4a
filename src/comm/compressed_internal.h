/* compressed_internal.h: the state behind compressed.h, shared by its
 * files only: the scratch of one operation, the ring's coding buffers, the
 * exchange's chunk table and buffers, and the qgZ reduce-scatter's. */
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

/* ZeRO++ qgZ reduce-scatter (compressed_qgz.c). The group is a grid of
 * M nodes x L local indices; "slot" s = l * M + b names the rank at node b,
 * local index l (the order the intra-node step sends in: the M slots of one
 * local index are one contiguous message). */
typedef struct {
    Comm *comm;
    const Codec *codec;
    float *buf;
    bool average;
    int tag, phase;
    int nodes, locals;  /* M, L */
    int me;             /* this rank's slot */
    int *rank_at;       /* per slot: its group rank */
    size_t *offset, *length;            /* per slot: its final chunk, relative to buf */
    size_t *unit_offset, *unit_bytes;   /* per slot: its unit in send1 (the reordered tensor) */
    size_t *partial_offset;             /* per node b: chunk (b, my local index) in partial */
    size_t row_bytes;   /* the units of my local index: what each node peer sends me */
    uint8_t *send1;     /* round 1: every slot's unit of this rank's input, in slot order */
    uint8_t *recv1;     /* L messages of row_bytes: the node peers' units of my local index */
    float *partial;     /* the node's sums of my local index's M chunks */
    uint8_t *send2;     /* round 2: those sums encoded, laid out as one message of row_bytes */
    uint8_t *recv2;     /* M units of my own chunk, one per node */
    size_t send1_capacity, recv1_capacity, send2_capacity, recv2_capacity, partial_capacity;
    MPI_Request *requests;
    int num_requests, ranks_capacity;
} Qgz;

struct CompressedScratch {
    Codec codec; /* the operation's own copy */
    bool busy;
    RingCoding ring;
    Exchange exchange;
    Qgz qgz;
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

/* compressed_qgz.c */
void compressed_qgz_start(CommOp *op, CompressedScratch *s, const Compression *z, float *buf, size_t window_offset,
                          size_t n, size_t total);
size_t compressed_qgz_bytes(const Comm *comm, const Codec *codec, size_t window_offset, size_t n, size_t total);
size_t compressed_qgz_scratch_bytes(const Qgz *q);
void compressed_qgz_free(Qgz *q);

/* compressed.c: marks the scratch free again (called by the progress functions) */
void compressed_scratch_release(CompressedScratch *s);
/* p, or a new block in its place (its contents not kept) when it holds fewer
 * than `need` bytes; never NULL. *capacity: the bytes it holds. */
void *compressed_grow(void *p, size_t *capacity, size_t need);

#endif

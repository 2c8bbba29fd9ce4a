/* comm_internal.h: the structures behind comm.h, shared by the files of
 * comm/ only (group set-up, the ring engine, the operation front end). */
#ifndef BS_COMM_INTERNAL_H
#define BS_COMM_INTERNAL_H

#include <mpi.h>

#include "comm/comm.h"
#include "core/trace.h"

#define RING_MAX_SEGMENTS 64
#define RING_SEGMENT_BYTES (512 * 1024)
#define OP_TAG_SLOTS 128 /* tags per group: slot * RING_MAX_SEGMENTS + segment */

struct Comm {
    MPI_Comm mpi;
    int rank, size, world_rank;
    CommAlgo algo;
    double timeout_s;
    char name[64];
    /* nodes (real or emulated) for the hierarchical algorithm */
    Comm *node;  /* the ranks of this rank's node */
    Comm *cross; /* the ranks with this rank's local index, one per node */
    int node_index, num_nodes, local_index, local_size;
    bool uniform_nodes;
    int *hier_part; /* part index of each group rank under the hierarchical order */
    int *rank_local, *rank_node; /* local index and node index of each group rank */
    int ranks_per_node; /* 0: detected */
    unsigned op_sequence; /* operations started, for tags */
    CommStats stats;
    CommOp *free_ops; /* finished operations kept for reuse (with their buffers) */
    Trace *trace;
    const char *hosts; /* every world rank's host name, COMM_HOST_CHARS each, for error messages (the world's
                          own copy, shared by its groups) */
};

#define COMM_HOST_CHARS 64

/* comm_fatal.c: makes bs_die end a job without MPI_Abort (called once MPI is
 * up); answers a failed rank's notice while this one waits in a collective,
 * every COMM_FATAL_POLL_S at most. */
void comm_fatal_install(void);
void comm_fatal_poll(void);
#define COMM_FATAL_POLL_S 0.05

/* One ring pass (reduce-scatter and/or all-gather, or a broadcast chain) on
 * one group, segment by segment. */
typedef struct {
    int step; /* index of the step this segment is in */
    MPI_Request send, recv;
    bool send_active, recv_active, done;
} RingSegment;

typedef enum { RING_REDUCE_SCATTER, RING_ALLGATHER, RING_ALLREDUCE, RING_BROADCAST } RingKind;

/* A ring pass whose hops carry codec-encoded segments instead of floats
 * (compressed_ring.c): reduce steps encode the partial sum (with error
 * feedback), the first all-gather step encodes the owner's chunk and the
 * owner keeps the decoded values, later all-gather steps forward the bytes
 * received. Two byte buffers per segment, swapped when forwarding. */
typedef struct RingCoding RingCoding;

typedef struct {
    Comm *comm;
    RingKind kind;
    float *buf;
    size_t *chunk_offset, *chunk_length; /* per group rank, relative to buf */
    size_t chunk_capacity;               /* allocated entries in the two arrays */
    int root;                            /* broadcast */
    int segments, steps, tag;
    bool started, finished;
    float *tmp; /* reduce-scatter receive buffer: segments x largest segment */
    size_t tmp_capacity;
    RingSegment seg[RING_MAX_SEGMENTS];
    uint64_t bytes_sent;
    RingCoding *coding; /* NULL: floats move as floats */
} RingPass;

#define OP_MAX_PHASES 3

struct CommOp {
    Comm *comm;
    const char *what; /* "all-reduce", ... */
    double start_time;
    size_t payload_bytes;
    /* MPI's own algorithm */
    bool uses_mpi;
    MPI_Request request;
    int *counts, *displs;
    size_t counts_capacity;
    float *move_from, *move_to; /* reduce-scatter result to copy into place */
    size_t move_count;
    float *scratch; /* MPI reduce-scatter receive buffer (MPI_IN_PLACE trips MPICH's memcpy checks) */
    size_t scratch_capacity;
    uint64_t mpi_bytes; /* what a ring would send, for accounting */
    /* ring phases */
    RingPass phase[OP_MAX_PHASES];
    int num_phases, current_phase;
    CommOp *next_free;
    /* compressed collectives (compressed*.c): when set, progress advances the
     * operation instead of the above (true: complete) */
    bool (*progress)(CommOp *op);
    void *progress_state;
    uint64_t extra_bytes;        /* sent by progress's own messages */
    uint64_t uncompressed_bytes; /* what the fp32 ring would send (0: the bytes sent) */
};

/* ring.c */
void ring_setup(RingPass *r, Comm *comm, RingKind kind, float *buf, int tag);
void ring_set_chunk(RingPass *r, int group_rank, size_t offset, size_t length);
void ring_set_even_chunks(RingPass *r, size_t n);
/* Posts the first messages; call once the data in buf is ready. */
void ring_start(RingPass *r);
/* Advances; returns true when this rank's part is complete. */
bool ring_progress(RingPass *r);
/* World rank this pass is waiting on (for timeout messages), or -1. */
int ring_waiting_on(const RingPass *r);
void ring_release(RingPass *r);
/* Segments each chunk is cut into when the largest chunk has this many floats. */
int ring_segment_count(size_t largest_chunk);

/* ring.c calls these for a pass with coding set (compressed_ring.c) */
void ring_coding_prepare(RingPass *r, size_t largest_segment);
/* gather_step: -1 on a reduce step, else the index of the all-gather step */
void ring_coding_post(RingPass *r, int j, int gather_step, size_t soff, size_t slen, size_t roff, size_t rlen,
                      int left, int right, int tag);
void ring_coding_received(RingPass *r, int j);

/* collective.c, for the compressed collectives */
CommOp *comm_op_new(Comm *comm, const char *what, size_t bytes);
RingPass *comm_op_add_ring(CommOp *op, Comm *group, RingKind kind, float *buf, int tag);
/* Chunk of group rank i = window ∩ its part of [0, total) (flat ring order). */
void comm_ring_window_chunks(RingPass *r, const Comm *comm, size_t window_offset, size_t n, size_t total);
/* window ∩ the part of group rank `rank`, relative to the window start. */
void comm_window_part(const Comm *comm, size_t window_offset, size_t n, size_t total, int rank, size_t *rel,
                      size_t *count);
void comm_op_start_rings(CommOp *op);
/* op->counts and op->displs hold at least n entries each. */
void comm_op_ensure_counts(CommOp *op, int n);
/* Advances the ring phases in order; true when the last one is complete. */
bool comm_op_advance_rings(CommOp *op);

/* comm.c */
void comm_check(int rc, const Comm *comm, const char *what);
void comm_timeout(Comm *comm, const char *what, size_t bytes, int waiting_on);
int comm_next_tag(Comm *comm);
/* Part q of [0, total) cut into `parts` near-equal contiguous parts. */
void part_range(size_t total, int parts, int q, size_t *offset, size_t *count);

#endif

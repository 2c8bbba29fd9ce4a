/* comm.h: process groups and collectives over MPI. The only layer that
 * includes <mpi.h>; everything else sees opaque handles.
 *
 * Collectives sum float arrays in place. Each has three algorithms:
 *   mpi           MPI's own (MPI_Iallreduce, MPI_Ireduce_scatter, ...): the baseline
 *   ring          written on MPI point-to-point: bandwidth-optimal ring, each
 *                 chunk cut into segments that move independently, so the
 *                 sum of one segment overlaps the transfer of the next
 *   hierarchical  ring reduce-scatter inside a node, ring all-reduce across
 *                 nodes among ranks with the same local index, ring
 *                 all-gather inside the node
 * Non-blocking: comm_start_* returns an operation that advances only when
 * comm_test/comm_wait is called on it (a progress engine polled from the
 * backward pass; no extra thread competes with compute for the cores).
 * Every wait gives up after the group's timeout with a message naming the
 * operation and the rank waited on, and aborts the whole job.
 *
 * Partitions: reduce-scatter and all-gather work on a window of an index
 * space [0, total) that the group partitions among its ranks
 * (comm_partition); a rank ends with (or contributes) window ∩ its part.
 * The part order is rank order, except hierarchical, which orders parts by
 * local index first so that each node step moves one contiguous block. */
#ifndef BS_COMM_COMM_H
#define BS_COMM_COMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct Comm Comm;
typedef struct CommOp CommOp;

typedef enum { COMM_ALGO_MPI, COMM_ALGO_RING, COMM_ALGO_HIERARCHICAL } CommAlgo;

typedef struct {
    uint64_t bytes_sent;   /* by this rank, payload only */
    uint64_t uncompressed_bytes; /* what the same operations would send as fp32 (compressed.h); = bytes_sent
                                    when nothing is compressed */
    double wait_seconds;   /* time the caller spent blocked in comm_wait (exposed) */
    double busy_seconds;   /* sum over operations of start -> observed completion */
    uint64_t operations;
} CommStats;

/* Starts MPI (safe without mpirun: a world of one; argc and argv may be
 * NULL) unless it runs already. From then on a fatal error (bs_die) ends the
 * job without MPI_Abort, printed once when every rank fails alike
 * (comm_fatal.c), and a lone process that exits finalizes MPI. A command
 * calls it before reading its flags, so that a bad flag under mpirun is one
 * line. comm_stop finalizes MPI where no comm_init followed (--help). */
void comm_start(int *argc, char ***argv);
void comm_stop(void);
/* Starts MPI (comm_start) and returns the world
 * group. ranks_per_node > 0 emulates nodes of that many consecutive ranks;
 * 0 detects them (MPI_Comm_split_type SHARED). */
Comm *comm_init(int *argc, char ***argv, CommAlgo algo, int ranks_per_node, double timeout_s, const char *name);
/* Sub-group of the ranks that pass the same color, ordered by key; every
 * rank of the parent calls it; a negative color joins no group (NULL). */
Comm *comm_split(Comm *parent, int color, int key, const char *name);
void comm_free(Comm *comm);
void comm_finalize(Comm *world);
/* Ends every process of the job now with status code (after a message). */
void comm_abort(Comm *comm, int code);

int comm_rank(const Comm *comm);
int comm_size(const Comm *comm);
int comm_world_rank(const Comm *comm);
CommAlgo comm_algo(const Comm *comm);
void comm_set_algo(Comm *comm, CommAlgo algo);
int comm_num_nodes(const Comm *comm);
/* The ranks of this rank's node (real or emulated), as a group of their own
 * owned by comm (ZeRO++'s hpZ gathers inside it). */
Comm *comm_node_group(Comm *comm);
bool comm_parse_algo(const char *name, CommAlgo *out);
const char *comm_algo_name(CommAlgo algo);

/* The part of [0, total) owned by `rank` under this group's partition. */
void comm_partition(const Comm *comm, size_t total, int rank, size_t *offset, size_t *count);

/* Non-blocking collectives on floats (sum). buf stays owned by the caller and
 * must not be touched until the operation completes. */
CommOp *comm_start_allreduce(Comm *comm, float *buf, size_t n);
/* Reduce-scatter of the window [window_offset, +n) of [0, total): buf holds
 * the window; afterwards buf holds the summed values of window ∩ own part at
 * their place (the rest of buf is unspecified). */
CommOp *comm_start_reduce_scatter(Comm *comm, float *buf, size_t window_offset, size_t n, size_t total);
/* All-gather of the window: each rank's window ∩ own part is sent to all. */
CommOp *comm_start_allgather(Comm *comm, float *buf, size_t window_offset, size_t n, size_t total);
CommOp *comm_start_broadcast(Comm *comm, float *buf, size_t n, int root);
/* Point-to-point (pipeline stages): n floats to / from group rank `peer`. */
CommOp *comm_start_send(Comm *comm, const float *buf, size_t n, int peer, int tag);
CommOp *comm_start_recv(Comm *comm, float *buf, size_t n, int peer, int tag);
/* MPI's own all-gather of one block of n floats per rank into all (size * n,
 * rank order), and reduce-scatter of all (size * n) leaving the sum of every
 * rank's block `rank` in block. */
CommOp *comm_start_allgather_blocks(Comm *comm, const float *block, size_t n, float *all);
CommOp *comm_start_reduce_scatter_blocks(Comm *comm, const float *all, float *block, size_t n);
/* All-to-all (alltoall.c; expert parallelism): this rank sends send_counts[r]
 * elements of elem_bytes each to group rank r and receives recv_counts[r]
 * from it, both buffers holding the blocks in rank order without gaps (MPI's
 * own algorithm). Bytes sent to other ranks are counted. counts and buffers
 * stay owned by the caller until the operation completes. */
CommOp *comm_start_alltoallv(Comm *comm, const void *send, const size_t *send_counts, void *recv,
                             const size_t *recv_counts, size_t elem_bytes);
/* recv (size x n) = block r of every rank's send (size x n), blocking. */
void comm_alltoall_sizes(Comm *comm, const size_t *send, size_t *recv, int n);
/* Advances the operation; true (and the operation is freed) when complete. */
bool comm_test(CommOp *op);
/* Blocks until complete (then frees it). `what` names it in a timeout message. */
void comm_wait(CommOp *op);

/* Blocking conveniences. */
void comm_allreduce(Comm *comm, float *buf, size_t n);
void comm_reduce_scatter(Comm *comm, float *buf, size_t window_offset, size_t n, size_t total);
void comm_allgather(Comm *comm, float *buf, size_t window_offset, size_t n, size_t total);
void comm_broadcast(Comm *comm, float *buf, size_t n, int root);
/* Small exact helpers, always MPI's own algorithm, with the timeout. */
void comm_allreduce_double(Comm *comm, double *values, int n);
void comm_allreduce_max_double(Comm *comm, double *values, int n);
void comm_broadcast_bytes(Comm *comm, void *data, size_t bytes, int root);
/* Gathers `bytes` from every rank into out (size * bytes) on root. */
void comm_gather_bytes(Comm *comm, const void *data, size_t bytes, void *out, int root);
/* Gathers `bytes` from every rank into out (size * bytes) on every rank, in rank order. */
void comm_allgather_bytes(Comm *comm, const void *data, size_t bytes, void *out);
void comm_barrier(Comm *comm);
/* Gathers n floats from every rank (n may differ) into out on root, in rank
 * order; counts (size entries, may be NULL) receives each rank's n on root. */
void comm_gatherv_floats(Comm *comm, const float *data, size_t n, float *out, size_t *counts, int root);
/* Concatenates every rank's text (in rank order, joined by `sep`) on root;
 * returns it there (caller frees) and NULL elsewhere. */
char *comm_gather_text(Comm *comm, const char *text, const char *sep, int root);

/* Record each collective as an interval (NULL: stop recording). */
typedef struct Trace Trace;
void comm_set_trace(Comm *comm, Trace *trace);

CommStats comm_stats(const Comm *comm);
void comm_reset_stats(Comm *comm);

#endif

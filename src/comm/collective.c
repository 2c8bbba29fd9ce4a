/* collective.c: the operation front end: starts each collective with the
 * group's algorithm (MPI's non-blocking collectives, one ring pass, or the
 * three hierarchical passes), advances it on demand, enforces the timeout
 * and keeps the byte and time accounts. */
#include <stdlib.h>
#include <string.h>

#include "comm/comm_internal.h"
#include "core/error.h"
#include "core/range.h"
#include "core/timer.h"

static CommOp *op_new(Comm *c, const char *what, size_t bytes) {
    CommOp *op = c->free_ops;
    if (op) c->free_ops = op->next_free;
    else op = bs_calloc(1, sizeof *op);
    op->comm = c;
    op->what = what;
    op->payload_bytes = bytes;
    op->start_time = bs_now();
    op->uses_mpi = false;
    op->move_count = 0;
    op->mpi_bytes = 0;
    op->num_phases = op->current_phase = 0;
    op->next_free = NULL;
    op->progress = NULL;
    op->progress_state = NULL;
    op->extra_bytes = op->uncompressed_bytes = 0;
    return op;
}

static void op_recycle(CommOp *op) {
    Comm *c = op->comm;
    op->next_free = c->free_ops;
    c->free_ops = op;
}

static void ensure_counts(CommOp *op, int n) {
    if (op->counts_capacity >= (size_t)n) return;
    free(op->counts);
    free(op->displs);
    op->counts = bs_malloc(sizeof(int) * (size_t)n);
    op->displs = bs_malloc(sizeof(int) * (size_t)n);
    op->counts_capacity = (size_t)n;
}

static RingPass *add_phase(CommOp *op, Comm *group, RingKind kind, float *buf, int tag) {
    RingPass *r = &op->phase[op->num_phases++];
    ring_setup(r, group, kind, buf, tag);
    return r;
}

/* window ∩ [a, a+len) relative to the window start (0 when empty). */
static void intersect(size_t window_offset, size_t n, size_t a, size_t len, size_t *rel, size_t *count) {
    const Range window = range_make(window_offset, n), part = range_intersect(window, range_make(a, len));
    *rel = range_empty(part) ? 0 : range_offset_in(part, window);
    *count = part.count;
}

/* The block of parts of local index l: parts l*nodes .. l*nodes + nodes-1. */
static void local_block(const Comm *c, size_t total, int l, size_t *offset, size_t *count) {
    size_t first_off, first_cnt, last_off, last_cnt;
    part_range(total, c->size, l * c->num_nodes, &first_off, &first_cnt);
    part_range(total, c->size, l * c->num_nodes + c->num_nodes - 1, &last_off, &last_cnt);
    *offset = first_off;
    *count = last_off + last_cnt - first_off;
}

static void start_first_phase(CommOp *op) {
    if (op->num_phases > 0) ring_start(&op->phase[0]);
}

CommOp *comm_op_new(Comm *c, const char *what, size_t bytes) { return op_new(c, what, bytes); }
RingPass *comm_op_add_ring(CommOp *op, Comm *group, RingKind kind, float *buf, int tag) {
    return add_phase(op, group, kind, buf, tag);
}
void comm_op_start_rings(CommOp *op) { start_first_phase(op); }
void comm_op_ensure_counts(CommOp *op, int n) { ensure_counts(op, n); }

CommOp *comm_start_allreduce(Comm *c, float *buf, size_t n) {
    CommOp *op = op_new(c, "all-reduce", n * sizeof(float));
    if (c->size == 1) return op;
    if (c->algo == COMM_ALGO_MPI) {
        op->uses_mpi = true;
        op->mpi_bytes = (uint64_t)(2.0 * (c->size - 1) / c->size * (double)n * sizeof(float));
        comm_check(MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, c->mpi, &op->request), c,
                   "all-reduce");
        return op;
    }
    int tag = comm_next_tag(c);
    if (c->algo == COMM_ALGO_RING) {
        ring_set_even_chunks(add_phase(op, c, RING_ALLREDUCE, buf, tag), n);
    } else {
        RingPass *rs = add_phase(op, c->node, RING_REDUCE_SCATTER, buf, tag);
        ring_set_even_chunks(rs, n);
        size_t my_off = rs->chunk_offset[c->node->rank], my_len = rs->chunk_length[c->node->rank];
        ring_set_even_chunks(add_phase(op, c->cross, RING_ALLREDUCE, buf + my_off, tag), my_len);
        ring_set_even_chunks(add_phase(op, c->node, RING_ALLGATHER, buf, tag), n);
    }
    start_first_phase(op);
    return op;
}

/* Chunk of every group rank for a flat (ring) reduce-scatter or all-gather. */
static void set_window_chunks(RingPass *r, const Comm *c, size_t window_offset, size_t n, size_t total) {
    for (int i = 0; i < c->size; i++) {
        size_t off, cnt, rel, len;
        comm_partition(c, total, i, &off, &cnt);
        intersect(window_offset, n, off, cnt, &rel, &len);
        ring_set_chunk(r, i, rel, len);
    }
}

void comm_ring_window_chunks(RingPass *r, const Comm *c, size_t window_offset, size_t n, size_t total) {
    set_window_chunks(r, c, window_offset, n, total);
}

void comm_window_part(const Comm *c, size_t window_offset, size_t n, size_t total, int rank, size_t *rel,
                      size_t *count) {
    size_t off, cnt;
    comm_partition(c, total, rank, &off, &cnt);
    intersect(window_offset, n, off, cnt, rel, count);
}

/* Hierarchical: node pass over local blocks, cross pass over the parts of
 * this rank's block. */
static void set_block_chunks(RingPass *r, const Comm *c, size_t window_offset, size_t n, size_t total) {
    for (int l = 0; l < c->local_size; l++) {
        size_t off, cnt, rel, len;
        local_block(c, total, l, &off, &cnt);
        intersect(window_offset, n, off, cnt, &rel, &len);
        ring_set_chunk(r, l, rel, len);
    }
}

static void set_part_chunks_in_block(RingPass *r, const Comm *c, size_t window_offset, size_t n, size_t total,
                                     size_t block_rel) {
    for (int m = 0; m < c->num_nodes; m++) {
        size_t off, cnt, rel, len;
        part_range(total, c->size, c->local_index * c->num_nodes + m, &off, &cnt);
        intersect(window_offset, n, off, cnt, &rel, &len);
        ring_set_chunk(r, m, len ? rel - block_rel : 0, len);
    }
}

static void mpi_window_counts(CommOp *op, const Comm *c, size_t window_offset, size_t n, size_t total) {
    ensure_counts(op, c->size);
    for (int i = 0; i < c->size; i++) {
        size_t off, cnt, rel, len;
        comm_partition(c, total, i, &off, &cnt);
        intersect(window_offset, n, off, cnt, &rel, &len);
        op->counts[i] = (int)len;
        op->displs[i] = (int)rel;
    }
}

CommOp *comm_start_reduce_scatter(Comm *c, float *buf, size_t window_offset, size_t n, size_t total) {
    CommOp *op = op_new(c, "reduce-scatter", n * sizeof(float));
    if (c->size == 1) return op;
    if (c->algo == COMM_ALGO_MPI) {
        mpi_window_counts(op, c, window_offset, n, total);
        op->uses_mpi = true;
        op->mpi_bytes = (uint64_t)((double)(c->size - 1) / c->size * (double)n * sizeof(float));
        size_t mine = (size_t)op->counts[c->rank];
        if (op->scratch_capacity < mine || !op->scratch) {
            free(op->scratch);
            op->scratch = bs_malloc((mine ? mine : 1) * sizeof(float));
            op->scratch_capacity = mine;
        }
        op->move_from = op->scratch;
        op->move_to = buf + op->displs[c->rank];
        op->move_count = mine;
        comm_check(MPI_Ireduce_scatter(buf, op->scratch, op->counts, MPI_FLOAT, MPI_SUM, c->mpi, &op->request), c,
                   "reduce-scatter");
        return op;
    }
    int tag = comm_next_tag(c);
    if (c->algo == COMM_ALGO_RING) {
        set_window_chunks(add_phase(op, c, RING_REDUCE_SCATTER, buf, tag), c, window_offset, n, total);
    } else {
        RingPass *node = add_phase(op, c->node, RING_REDUCE_SCATTER, buf, tag);
        set_block_chunks(node, c, window_offset, n, total);
        size_t block_rel = node->chunk_offset[c->local_index];
        RingPass *cross = add_phase(op, c->cross, RING_REDUCE_SCATTER, buf + block_rel, tag);
        set_part_chunks_in_block(cross, c, window_offset, n, total, block_rel);
    }
    start_first_phase(op);
    return op;
}

CommOp *comm_start_allgather(Comm *c, float *buf, size_t window_offset, size_t n, size_t total) {
    CommOp *op = op_new(c, "all-gather", n * sizeof(float));
    if (c->size == 1) return op;
    if (c->algo == COMM_ALGO_MPI) {
        mpi_window_counts(op, c, window_offset, n, total);
        op->uses_mpi = true;
        op->mpi_bytes = (uint64_t)((double)(c->size - 1) / c->size * (double)n * sizeof(float));
        comm_check(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, op->counts, op->displs, MPI_FLOAT, c->mpi,
                                   &op->request),
                   c, "all-gather");
        return op;
    }
    int tag = comm_next_tag(c);
    if (c->algo == COMM_ALGO_RING) {
        set_window_chunks(add_phase(op, c, RING_ALLGATHER, buf, tag), c, window_offset, n, total);
    } else {
        size_t off, cnt, block_rel, block_len;
        local_block(c, total, c->local_index, &off, &cnt);
        intersect(window_offset, n, off, cnt, &block_rel, &block_len);
        RingPass *cross = add_phase(op, c->cross, RING_ALLGATHER, buf + block_rel, tag);
        set_part_chunks_in_block(cross, c, window_offset, n, total, block_rel);
        set_block_chunks(add_phase(op, c->node, RING_ALLGATHER, buf, tag), c, window_offset, n, total);
    }
    start_first_phase(op);
    return op;
}

CommOp *comm_start_broadcast(Comm *c, float *buf, size_t n, int root) {
    CommOp *op = op_new(c, "broadcast", n * sizeof(float));
    if (c->size == 1) return op;
    if (c->algo == COMM_ALGO_MPI) {
        op->uses_mpi = true;
        op->mpi_bytes = c->rank == root ? n * sizeof(float) : 0;
        comm_check(MPI_Ibcast(buf, (int)n, MPI_FLOAT, root, c->mpi, &op->request), c, "broadcast");
        return op;
    }
    int tag = comm_next_tag(c);
    if (c->algo == COMM_ALGO_RING) {
        RingPass *r = add_phase(op, c, RING_BROADCAST, buf, tag);
        ring_set_chunk(r, 0, 0, n);
        r->root = root;
    } else {
        int root_local = c->rank_local[root], root_node = c->rank_node[root];
        if (c->local_index == root_local) { /* across nodes among the root's local index */
            RingPass *r = add_phase(op, c->cross, RING_BROADCAST, buf, tag);
            ring_set_chunk(r, 0, 0, n);
            r->root = root_node;
        }
        RingPass *r = add_phase(op, c->node, RING_BROADCAST, buf, tag);
        ring_set_chunk(r, 0, 0, n);
        r->root = root_local;
    }
    start_first_phase(op);
    return op;
}

CommOp *comm_start_send(Comm *c, const float *buf, size_t n, int peer, int tag) {
    CommOp *op = op_new(c, "send", n * sizeof(float));
    op->uses_mpi = true;
    op->mpi_bytes = n * sizeof(float);
    comm_check(MPI_Isend(buf, (int)n, MPI_FLOAT, peer, tag, c->mpi, &op->request), c, "send");
    return op;
}

CommOp *comm_start_recv(Comm *c, float *buf, size_t n, int peer, int tag) {
    CommOp *op = op_new(c, "receive", n * sizeof(float));
    op->uses_mpi = true;
    comm_check(MPI_Irecv(buf, (int)n, MPI_FLOAT, peer, tag, c->mpi, &op->request), c, "receive");
    return op;
}

/* Blocks of n floats, one per rank: MPI's own all-gather and reduce-scatter
 * (context parallelism's key/value exchange). */
CommOp *comm_start_allgather_blocks(Comm *c, const float *block, size_t n, float *all) {
    CommOp *op = op_new(c, "all-gather", n * sizeof(float) * (size_t)c->size);
    op->uses_mpi = true;
    op->mpi_bytes = n * sizeof(float) * (size_t)(c->size - 1);
    comm_check(MPI_Iallgather(block, (int)n, MPI_FLOAT, all, (int)n, MPI_FLOAT, c->mpi, &op->request), c,
               "all-gather");
    return op;
}

CommOp *comm_start_reduce_scatter_blocks(Comm *c, const float *all, float *block, size_t n) {
    CommOp *op = op_new(c, "reduce-scatter", n * sizeof(float) * (size_t)c->size);
    op->uses_mpi = true;
    op->mpi_bytes = n * sizeof(float) * (size_t)(c->size - 1);
    comm_check(MPI_Ireduce_scatter_block(all, block, (int)n, MPI_FLOAT, MPI_SUM, c->mpi, &op->request), c,
               "reduce-scatter");
    return op;
}

bool comm_op_advance_rings(CommOp *op) {
    while (op->current_phase < op->num_phases) {
        if (!ring_progress(&op->phase[op->current_phase])) return false;
        op->current_phase++;
        if (op->current_phase < op->num_phases) ring_start(&op->phase[op->current_phase]);
    }
    return true;
}

static void complete(CommOp *op) {
    Comm *c = op->comm;
    if (op->move_count) memcpy(op->move_to, op->move_from, op->move_count * sizeof(float));
    uint64_t bytes = op->mpi_bytes + op->extra_bytes;
    for (int p = 0; p < op->num_phases; p++) bytes += op->phase[p].bytes_sent;
    c->stats.bytes_sent += bytes;
    c->stats.uncompressed_bytes += op->uncompressed_bytes ? op->uncompressed_bytes : bytes;
    double now = bs_now();
    c->stats.busy_seconds += now - op->start_time;
    c->stats.operations++;
    trace_add(c->trace, op->what, "comm", op->start_time, now);
    op_recycle(op);
}

bool comm_test(CommOp *op) {
    if (op->progress) {
        if (!op->progress(op)) return false;
    } else if (op->uses_mpi) {
        int flag;
        comm_check(MPI_Test(&op->request, &flag, MPI_STATUS_IGNORE), op->comm, op->what);
        if (!flag) return false;
    } else if (!comm_op_advance_rings(op)) {
        return false;
    }
    complete(op);
    return true;
}

void comm_wait(CommOp *op) {
    Comm *c = op->comm;
    double t0 = bs_now(), polled = t0;
    const char *what = op->what;
    size_t bytes = op->payload_bytes;
    while (!comm_test(op)) {
        double now = bs_now();
        if (now - polled > COMM_FATAL_POLL_S) { /* a rank that failed waits to hear whether this one works on */
            comm_fatal_poll();
            polled = now;
        }
        if (now - t0 > c->timeout_s) {
            int who = (!op->uses_mpi && op->current_phase < op->num_phases)
                          ? ring_waiting_on(&op->phase[op->current_phase])
                          : -1;
            comm_timeout(c, what, bytes, who);
        }
    }
    c->stats.wait_seconds += bs_now() - t0;
}

void comm_allreduce(Comm *c, float *buf, size_t n) { comm_wait(comm_start_allreduce(c, buf, n)); }
void comm_reduce_scatter(Comm *c, float *buf, size_t window_offset, size_t n, size_t total) {
    comm_wait(comm_start_reduce_scatter(c, buf, window_offset, n, total));
}
void comm_allgather(Comm *c, float *buf, size_t window_offset, size_t n, size_t total) {
    comm_wait(comm_start_allgather(c, buf, window_offset, n, total));
}
void comm_broadcast(Comm *c, float *buf, size_t n, int root) { comm_wait(comm_start_broadcast(c, buf, n, root)); }

/* alltoall.c: MPI's all-to-all under the group's timeout and accounts, for
 * expert parallelism's dispatch and return of rows: the counts first
 * (fixed size), then the rows (variable blocks, no padding). Displacements
 * are the running sums of the counts: blocks lie in rank order. */
#include <limits.h>
#include <stdint.h>

#include "comm/comm_internal.h"
#include "core/error.h"

_Static_assert(sizeof(size_t) == sizeof(uint64_t), "sizes travel as MPI_UINT64_T");

/* MPI's int count of n elements of elem_bytes, or a clear end. */
static int byte_count(size_t n, size_t elem_bytes, const Comm *c) {
    const size_t bytes = n * elem_bytes;
    if (bytes > INT_MAX) bs_die("all-to-all on the %s group: a block of %zu bytes is over MPI's 2 GiB", c->name, bytes);
    return (int)bytes;
}

CommOp *comm_start_alltoallv(Comm *c, const void *send, const size_t *send_counts, void *recv,
                             const size_t *recv_counts, size_t elem_bytes) {
    size_t total = 0, others = 0;
    for (int r = 0; r < c->size; r++) total += send_counts[r], others += r == c->rank ? 0 : send_counts[r];
    CommOp *op = comm_op_new(c, "all-to-all", total * elem_bytes);
    comm_op_ensure_counts(op, 2 * c->size);
    int *scount = op->counts, *rcount = op->counts + c->size, *sdispl = op->displs, *rdispl = op->displs + c->size;
    int sat = 0, rat = 0;
    for (int r = 0; r < c->size; r++) {
        scount[r] = byte_count(send_counts[r], elem_bytes, c), rcount[r] = byte_count(recv_counts[r], elem_bytes, c);
        sdispl[r] = sat, rdispl[r] = rat;
        if ((size_t)sat + (size_t)scount[r] > INT_MAX || (size_t)rat + (size_t)rcount[r] > INT_MAX)
            bs_die("all-to-all on the %s group: over MPI's 2 GiB per buffer", c->name);
        sat += scount[r], rat += rcount[r];
    }
    op->uses_mpi = true;
    op->mpi_bytes = others * elem_bytes;
    comm_check(MPI_Ialltoallv(send, scount, sdispl, MPI_BYTE, recv, rcount, rdispl, MPI_BYTE, c->mpi, &op->request),
               c, "all-to-all");
    return op;
}

void comm_alltoall_sizes(Comm *c, const size_t *send, size_t *recv, int n) {
    CommOp *op = comm_op_new(c, "all-to-all of counts", (size_t)c->size * n * sizeof(size_t));
    op->uses_mpi = true;
    op->mpi_bytes = (uint64_t)(c->size - 1) * n * sizeof(size_t);
    comm_check(MPI_Ialltoall(send, n, MPI_UINT64_T, recv, n, MPI_UINT64_T, c->mpi, &op->request), c, "all-to-all");
    comm_wait(op);
}

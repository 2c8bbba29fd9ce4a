/* test_collectives.c: every collective and algorithm against the exact
 * answer and against MPI's own, for the group sizes CTest launches (1..8
 * ranks under mpirun) and awkward lengths (0, 1, not divisible by N, and
 * large enough to be cut into many ring segments).
 *
 * Inputs are small integers, so every sum is exact in float whatever the
 * order: results must equal the expected values bit for bit. A second pass
 * with random floats compares ring and hierarchical with MPI_Allreduce within
 * float summation-order tolerance. usage: test_collectives [ranks_per_node] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "check.h"

static float value(int rank, size_t i) { return (float)((rank + 1) * (int)(i % 13) - (int)(i % 7) + rank); }

static float expected_sum(int size, size_t i) {
    float s = 0;
    for (int r = 0; r < size; r++) s += value(r, i);
    return s;
}

static void report(Comm *c, const char *what, CommAlgo algo, size_t n, int bad) {
    double b = bad;
    comm_allreduce_double(c, &b, 1);
    if (b > 0) {
        failures++;
        if (comm_rank(c) == 0)
            printf("FAIL %s %s n=%zu size=%d: %.0f wrong values\n", what, comm_algo_name(algo), n, comm_size(c), b);
    }
}

static void check_allreduce(Comm *c, CommAlgo algo, size_t n) {
    float *buf = malloc((n + 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) buf[i] = value(comm_rank(c), i);
    comm_allreduce(c, buf, n);
    int bad = 0;
    for (size_t i = 0; i < n; i++) bad += buf[i] != expected_sum(comm_size(c), i);
    report(c, "all-reduce", algo, n, bad);
    free(buf);
}

static void check_reduce_scatter_allgather(Comm *c, CommAlgo algo, size_t total, size_t woff, size_t n) {
    float *buf = malloc((n + 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) buf[i] = value(comm_rank(c), woff + i);
    comm_reduce_scatter(c, buf, woff, n, total);
    size_t off, cnt;
    comm_partition(c, total, comm_rank(c), &off, &cnt);
    int bad = 0;
    for (size_t g = off; g < off + cnt; g++)
        if (g >= woff && g < woff + n) bad += buf[g - woff] != expected_sum(comm_size(c), g);
    report(c, "reduce-scatter", algo, n, bad);
    /* all-gather: every rank fills its part with its owner's values */
    for (size_t i = 0; i < n; i++) buf[i] = -1;
    for (size_t g = off; g < off + cnt; g++)
        if (g >= woff && g < woff + n) buf[g - woff] = value(comm_rank(c), g);
    comm_allgather(c, buf, woff, n, total);
    bad = 0;
    for (int r = 0; r < comm_size(c); r++) {
        size_t o, k;
        comm_partition(c, total, r, &o, &k);
        for (size_t g = o; g < o + k; g++)
            if (g >= woff && g < woff + n) bad += buf[g - woff] != value(r, g);
    }
    report(c, "all-gather", algo, n, bad);
    free(buf);
}

static void check_broadcast(Comm *c, CommAlgo algo, size_t n, int root) {
    float *buf = malloc((n + 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) buf[i] = value(comm_rank(c), i);
    comm_broadcast(c, buf, n, root);
    int bad = 0;
    for (size_t i = 0; i < n; i++) bad += buf[i] != value(root, i);
    report(c, "broadcast", algo, n, bad);
    free(buf);
}

/* Three operations in flight at once, completed in reverse order. */
static void check_concurrent(Comm *c, CommAlgo algo, size_t n) {
    float *a = malloc((n + 1) * sizeof(float)), *b = malloc((n + 1) * sizeof(float)), *d = malloc((n + 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) a[i] = b[i] = d[i] = value(comm_rank(c), i);
    CommOp *oa = comm_start_allreduce(c, a, n);
    CommOp *ob = comm_start_reduce_scatter(c, b, 0, n, n);
    CommOp *od = comm_start_allreduce(c, d, n);
    comm_wait(od);
    comm_wait(ob);
    comm_wait(oa);
    size_t off, cnt;
    comm_partition(c, n, comm_rank(c), &off, &cnt);
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        bad += a[i] != expected_sum(comm_size(c), i) || d[i] != expected_sum(comm_size(c), i);
        if (i >= off && i < off + cnt) bad += b[i] != expected_sum(comm_size(c), i);
    }
    report(c, "concurrent ops", algo, n, bad);
    free(a), free(b), free(d);
}

/* Random floats: ring/hierarchical vs MPI's own within summation-order error. */
static void check_random_against_mpi(Comm *c, CommAlgo algo, size_t n) {
    float *x = malloc((n + 1) * sizeof(float)), *ref = malloc((n + 1) * sizeof(float));
    unsigned long long s = 1469598103934665603ULL ^ (unsigned long long)(comm_rank(c) + 1);
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        x[i] = ref[i] = (float)((double)(s >> 11) / 9007199254740992.0 * 2 - 1);
    }
    comm_set_algo(c, COMM_ALGO_MPI);
    comm_allreduce(c, ref, n);
    comm_set_algo(c, algo);
    comm_allreduce(c, x, n);
    int bad = 0;
    double tol = 4 * comm_size(c) * 1.2e-7 * comm_size(c); /* |x| <= 1: sum <= N, error <= N^2 ulp-ish */
    for (size_t i = 0; i < n; i++) bad += fabs((double)x[i] - ref[i]) > tol;
    report(c, "random all-reduce vs MPI", algo, n, bad);
    free(x), free(ref);
}

int main(int argc, char **argv) {
    int rpn = argc > 1 ? atoi(argv[1]) : 0;
    Comm *world = comm_init(&argc, &argv, COMM_ALGO_MPI, rpn, 60.0, "test");
    int N = comm_size(world);
    size_t lengths[] = {0, 1, 2, 3, 7, 64, (size_t)N - 1, (size_t)N + 1, 1000, 4099, 300001, (1u << 20) + 5};
    CommAlgo algos[] = {COMM_ALGO_MPI, COMM_ALGO_RING, COMM_ALGO_HIERARCHICAL};
    for (int a = 0; a < 3; a++) {
        comm_set_algo(world, algos[a]);
        for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++) {
            size_t n = lengths[li];
            check_allreduce(world, algos[a], n);
            check_reduce_scatter_allgather(world, algos[a], n, 0, n);
            check_reduce_scatter_allgather(world, algos[a], n, n / 3, n / 2); /* a window inside */
            check_broadcast(world, algos[a], n, N - 1);
            check_broadcast(world, algos[a], n, 0);
        }
        check_concurrent(world, algos[a], 100003);
        if (algos[a] != COMM_ALGO_MPI) check_random_against_mpi(world, algos[a], 200003);
    }
    if (comm_rank(world) == 0)
        printf("%s: %d ranks, %d nodes: %d failure(s)\n", failures ? "FAILED" : "ok", N, comm_num_nodes(world), failures);
    comm_finalize(world);
    return failures ? 1 : 0;
}

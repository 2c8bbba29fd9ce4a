/* cmd_bench.c: `batchscale bench <what>`: micro-benchmarks that the
 * benchmark scripts compare against. `gemm` times OpenBLAS sgemm on one shape
 * (the machine's matmul limit for the engine's ratios), naming the OpenBLAS
 * core that ran it; `comm` times every collective and algorithm over a range
 * of sizes under mpirun, with nccl-tests' algbw and busbw, beside MPI's own
 * in the same run; `cpu` says which kernels run here (bench_cpu.c). */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "cli/bench_cpu.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "comm/comm.h"
#include "core/error.h"
#include "core/timer.h"

static int bench_gemm(int argc, char **argv) {
    int m = 2048, n = 8192, k = 384, reps = 10, threads = 0;
    const OptionSpec specs[] = {
        {"m", OPT_INT, &m, 1, 1 << 20, "N", "rows of the output", NULL, NULL},
        {"n", OPT_INT, &n, 1, 1 << 20, "N", "columns of the output", NULL, NULL},
        {"k", OPT_INT, &k, 1, 1 << 20, "N", "inner dimension", NULL, NULL},
        {"reps", OPT_INT, &reps, 1, 1e6, "N", "timed repetitions (median reported)", NULL, NULL},
        {"threads", OPT_INT, &threads, 0, 1024, "N", "BLAS threads (0: OMP_NUM_THREADS or all)", NULL, NULL},
    };
    if (!options_parse(specs, 5, argc, argv, "usage: batchscale bench gemm [options]\n\nTimes C = A B^T (sgemm)."))
        return 0;
    if (threads > 0) omp_set_num_threads(threads);
    float *a = bs_malloc((size_t)m * k * 4), *b = bs_malloc((size_t)n * k * 4), *c = bs_malloc((size_t)m * n * 4);
    for (size_t i = 0; i < (size_t)m * k; i++) a[i] = (float)(i % 7) * 0.1f;
    for (size_t i = 0; i < (size_t)n * k; i++) b[i] = (float)(i % 5) * 0.1f;
    double *times = bs_malloc((size_t)reps * sizeof(double));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1, a, k, b, k, 0, c, n); /* warm-up */
    for (int r = 0; r < reps; r++) {
        double t0 = bs_now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1, a, k, b, k, 0, c, n);
        times[r] = bs_now() - t0;
    }
    for (int i = 0; i < reps; i++) /* insertion sort for the median */
        for (int j = i; j > 0 && times[j] < times[j - 1]; j--) {
            double t = times[j];
            times[j] = times[j - 1];
            times[j - 1] = t;
        }
    double med = times[reps / 2];
    printf("sgemm m=%d n=%d k=%d threads=%d core=%s: %.1f GFLOP/s (median of %d, %.2f ms)\n", m, n, k,
           omp_get_max_threads(), openblas_get_corename(), 2.0 * m * n * k / med / 1e9, reps, med * 1e3);
    free(a), free(b), free(c), free(times);
    return 0;
}

typedef enum { OP_ALLREDUCE, OP_REDUCE_SCATTER, OP_ALLGATHER, OP_BROADCAST, NUM_OPS } BenchOp;
static const char *const op_names[NUM_OPS] = {"all-reduce", "reduce-scatter", "all-gather", "broadcast"};

static void run_op(Comm *c, BenchOp op, float *buf, size_t n) {
    switch (op) {
    case OP_ALLREDUCE: comm_allreduce(c, buf, n); break;
    case OP_REDUCE_SCATTER: comm_reduce_scatter(c, buf, 0, n, n); break;
    case OP_ALLGATHER: comm_allgather(c, buf, 0, n, n); break;
    default: comm_broadcast(c, buf, n, 0); break;
    }
}

/* nccl-tests: busbw = algbw x 2(n-1)/n (all-reduce), (n-1)/n (reduce-scatter, all-gather), 1 (broadcast). */
static double bus_factor(BenchOp op, int n) {
    if (op == OP_ALLREDUCE) return 2.0 * (n - 1) / n;
    if (op == OP_BROADCAST) return 1.0;
    return (double)(n - 1) / n;
}

/* Median seconds of one operation, the slowest rank's time per repetition. */
static double time_op(Comm *c, BenchOp op, float *buf, size_t n, int reps) {
    double times[64];
    run_op(c, op, buf, n); /* warm-up */
    for (int r = 0; r < reps; r++) {
        comm_barrier(c);
        double t0 = bs_now();
        run_op(c, op, buf, n);
        double dt = bs_now() - t0;
        comm_allreduce_max_double(c, &dt, 1);
        times[r] = dt;
    }
    for (int i = 0; i < reps; i++)
        for (int j = i; j > 0 && times[j] < times[j - 1]; j--) {
            double t = times[j];
            times[j] = times[j - 1];
            times[j - 1] = t;
        }
    return times[reps / 2];
}

static int bench_comm(int argc, char **argv) {
    double min_kib = 4, max_mib = 256;
    int ranks_per_node = 0, reps = 9;
    const char *ops = "all-reduce,reduce-scatter,all-gather,broadcast";
    const OptionSpec specs[] = {
        {"min-kib", OPT_DOUBLE, &min_kib, 0.001, 1e9, "KIB", "smallest message", NULL, NULL},
        {"max-mib", OPT_DOUBLE, &max_mib, 0.001, 1e6, "MIB", "largest message", NULL, NULL},
        {"reps", OPT_INT, &reps, 1, 64, "N", "timed repetitions per point (median)", NULL, NULL},
        {"ops", OPT_STRING, &ops, OPT_NO_RANGE, "LIST", "comma-separated collectives", NULL, NULL},
        {"ranks-per-node", OPT_INT, &ranks_per_node, 0, 1 << 20, "N", "emulate nodes of N ranks (0: detect)", NULL, NULL},
    };
    if (!options_parse(specs, 5, argc, argv,
                       "usage: mpirun -np N batchscale bench comm [options]\n\n"
                       "Times each collective with each algorithm (mpi, ring, hierarchical); prints algbw and busbw\n"
                       "(GB/s, nccl-tests conventions) and the ratio to MPI's own at each size."))
        return 0;
    Comm *c = comm_init(&argc, &argv, COMM_ALGO_MPI, ranks_per_node, 600, "bench");
    int N = comm_size(c);
    size_t max_n = (size_t)(max_mib * 1024 * 1024 / sizeof(float));
    float *buf = bs_calloc(max_n ? max_n : 1, sizeof(float));
    if (comm_rank(c) == 0)
        printf("# %d ranks, %d node(s); algbw = bytes/time, busbw = algbw x bus factor (GB/s)\n"
               "%-15s %10s %-13s %9s %9s %9s %8s\n", N, comm_num_nodes(c), "collective", "bytes", "algorithm",
               "time_us", "algbw", "busbw", "vs_mpi");
    for (int op = 0; op < NUM_OPS; op++) {
        if (!strstr(ops, op_names[op])) continue;
        for (double bytes = min_kib * 1024; bytes <= max_mib * 1024 * 1024 * 1.0001; bytes *= 4) {
            size_t n = (size_t)(bytes / sizeof(float));
            double mpi_time = 0;
            for (int a = COMM_ALGO_MPI; a <= COMM_ALGO_HIERARCHICAL; a++) {
                comm_set_algo(c, (CommAlgo)a);
                double t = time_op(c, (BenchOp)op, buf, n, reps);
                if (a == COMM_ALGO_MPI) mpi_time = t;
                double algbw = (double)n * sizeof(float) / t / 1e9;
                if (comm_rank(c) == 0)
                    printf("%-15s %10zu %-13s %9.1f %9.3f %9.3f %7.2fx\n", op_names[op], n * sizeof(float),
                           comm_algo_name((CommAlgo)a), t * 1e6, algbw, algbw * bus_factor((BenchOp)op, N),
                           mpi_time / t);
            }
            fflush(stdout);
        }
    }
    free(buf);
    comm_finalize(c);
    return 0;
}

int cmd_bench(int argc, char **argv) {
    if (argc >= 2 && strcmp(argv[1], "gemm") == 0) return bench_gemm(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "comm") == 0) return bench_comm(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "cpu") == 0) return bench_cpu(argc - 1, argv + 1);
    if (argc >= 2 && strncmp(argv[1], "--calibrate", 11) == 0) return cmd_calibrate(argc, argv);
    fprintf(stderr, "usage: batchscale bench gemm|comm|cpu [options]\n");
    return argc >= 2 && (strcmp(argv[1], "--help") == 0) ? 0 : 2;
}

/* cmd_bench.c: `batchscale bench <what>`: micro-benchmarks that the
 * benchmark scripts compare against. `gemm` times OpenBLAS sgemm on one shape
 * (the machine's matmul limit for the engine's ratios). */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "cli/commands.h"
#include "cli/options.h"
#include "core/error.h"
#include "core/timer.h"

static int bench_gemm(int argc, char **argv) {
    int m = 2048, n = 8192, k = 384, reps = 10, threads = 0;
    const OptionSpec specs[] = {
        {"m", OPT_INT, &m, 1, 1 << 20, "N", "rows of the output"},
        {"n", OPT_INT, &n, 1, 1 << 20, "N", "columns of the output"},
        {"k", OPT_INT, &k, 1, 1 << 20, "N", "inner dimension"},
        {"reps", OPT_INT, &reps, 1, 1e6, "N", "timed repetitions (median reported)"},
        {"threads", OPT_INT, &threads, 0, 1024, "N", "BLAS threads (0: OMP_NUM_THREADS or all)"},
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
    printf("sgemm m=%d n=%d k=%d threads=%d: %.1f GFLOP/s (median of %d, %.2f ms)\n", m, n, k, omp_get_max_threads(),
           2.0 * m * n * k / med / 1e9, reps, med * 1e3);
    free(a), free(b), free(c), free(times);
    return 0;
}

int cmd_bench(int argc, char **argv) {
    if (argc >= 2 && strcmp(argv[1], "gemm") == 0) return bench_gemm(argc - 1, argv + 1);
    fprintf(stderr, "usage: batchscale bench gemm [options]\n");
    return argc >= 2 && (strcmp(argv[1], "--help") == 0) ? 0 : 2;
}

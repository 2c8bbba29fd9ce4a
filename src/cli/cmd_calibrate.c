/* cmd_calibrate.c: `batchscale bench --calibrate FILE`: measures this
 * machine as the planner sees a GPU (one process with --threads threads)
 * and writes a calibration file that `batchscale plan --calibrate FILE`
 * reads: sgemm rates over a range of sizes (the achieved fraction of peak by
 * matmul size), memory bandwidth (STREAM triad), the rate of the engine's
 * own element-wise kernels (on a CPU they are bound by arithmetic as much as
 * by memory), cores and memory.
 *
 * Under mpirun the ranks also time all-reduces with each algorithm, fitted
 * into the "collectives" object (plan/calibration.h); without it the planner
 * assumes shared memory at a quarter of the measured bandwidth and says so.
 * `--device cuda|sim` measures the device instead (calibrate_device.c). */
#include <cblas.h>
#include <jansson.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/calibrate.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "plan/calibration.h"
#include "comm/comm.h"
#include "cli/plan_config.h"
#include "core/error.h"
#include "core/io.h"
#include "core/timer.h"
#include "kernels/kernels.h"

typedef struct {
    int m, n, k;
} Shape;

/* Squares from tiny to large, then the engine's own shapes: tokens x width
 * products of a 192- and a 768-wide GPT (QKV, projection, MLP up and down). */
static const Shape SHAPES[] = {
    {32, 32, 32},      {64, 64, 64},       {128, 128, 128},   {256, 256, 256},   {512, 512, 512},
    {1024, 1024, 1024}, {2048, 2048, 2048}, {2048, 576, 192},  {2048, 192, 192},  {2048, 768, 192},
    {2048, 192, 768},  {8192, 2304, 768},  {8192, 768, 768},  {8192, 3072, 768}, {8192, 768, 3072},
};

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median seconds of C = A B^T at this shape, repeating for about `budget` s. */
static double time_sgemm(const Shape *s, double budget) {
    size_t a_n = (size_t)s->m * s->k, b_n = (size_t)s->n * s->k, c_n = (size_t)s->m * s->n;
    float *a = bs_malloc(a_n * sizeof(float)), *b = bs_malloc(b_n * sizeof(float)), *c = bs_malloc(c_n * sizeof(float));
    for (size_t i = 0; i < a_n; i++) a[i] = (float)(i % 7) * 0.1f;
    for (size_t i = 0; i < b_n; i++) b[i] = (float)(i % 5) * 0.1f;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s->m, s->n, s->k, 1, a, s->k, b, s->k, 0, c, s->n);
    double times[201];
    int reps = 0;
    double start = bs_now();
    while (reps < 201 && (reps < 5 || bs_now() - start < budget)) {
        double t0 = bs_now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s->m, s->n, s->k, 1, a, s->k, b, s->k, 0, c, s->n);
        times[reps++] = bs_now() - t0;
    }
    qsort(times, (size_t)reps, sizeof(double), compare_doubles);
    double median = times[reps / 2];
    free(a), free(b), free(c);
    return median;
}

/* STREAM triad a = b + s c over arrays much larger than the caches: best
 * bytes/s of `reps` passes, counting two reads and one write per element. */
static double triad_bandwidth(size_t n, int reps) {
    double *a = bs_malloc(n * sizeof(double)), *b = bs_malloc(n * sizeof(double)), *c = bs_malloc(n * sizeof(double));
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) a[i] = 0, b[i] = 1, c[i] = 2;
    double best = 0;
    for (int r = 0; r < reps; r++) {
        double t0 = bs_now();
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) a[i] = b[i] + 3.0 * c[i];
        double dt = bs_now() - t0;
        double rate = 3.0 * n * sizeof(double) / dt;
        if (rate > best) best = rate;
    }
    if (a[n / 2] != 7.0) bs_die("memory bandwidth check failed (triad gave %g)", a[n / 2]);
    free(a), free(b), free(c);
    return best;
}

/* Bytes per second of the engine's element-wise kernels on a demo-sized
 * block (N rows of C channels, MLP 4C): GELU and LayerNorm forward and
 * backward and a residual add, counting each tensor read or written once.
 * The best of `reps` passes. */
static double elementwise_rate(size_t N, int C, int reps) {
    size_t n = N * (size_t)C, wide = 4 * n;
    float *x = bs_malloc(wide * sizeof(float)), *y = bs_malloc(wide * sizeof(float)), *g = bs_malloc(wide * sizeof(float));
    float *w = bs_malloc((size_t)C * sizeof(float)), *b = bs_malloc((size_t)C * sizeof(float));
    float *dw = bs_calloc((size_t)C, sizeof(float)), *db = bs_calloc((size_t)C, sizeof(float));
    float *mean = bs_malloc(N * sizeof(float)), *rstd = bs_malloc(N * sizeof(float));
    for (size_t i = 0; i < wide; i++) x[i] = (float)((i % 97) - 48) * 0.02f, g[i] = 0.01f;
    for (int i = 0; i < C; i++) w[i] = 1.0f, b[i] = 0.0f;
    double bytes = calibration_elementwise_bytes(N, C);
    double best = 0;
    for (int r = 0; r < reps; r++) {
        double t0 = bs_now();
        gelu_forward(y, x, wide);
        gelu_backward(x, x, g, wide);
        layernorm_forward(y, mean, rstd, x, w, b, N, C);
        layernorm_backward(g, dw, db, y, x, w, mean, rstd, N, C);
        residual_forward(y, x, g, n);
        double rate = bytes / (bs_now() - t0);
        if (rate > best) best = rate;
    }
    free(x), free(y), free(g), free(w), free(b), free(dw), free(db), free(mean), free(rstd);
    return best;
}

size_t calibration_collective_floats(bool quick) { return ((size_t)4096 << (2 * (quick ? 4 : 8))) / sizeof(float); }

json_t *calibration_collectives(Comm *c, bool quick, const CommAlgo *algos, int n_algos, CalibrationAllreduce run,
                                void *ctx) {
    const int N = comm_size(c);
    const int k_max = quick ? 5 : 9; /* sizes 4 KiB x 4^i */
    double bytes[16], seconds[16];
    json_t *out = json_object();
    json_object_set_new(out, "ranks", json_integer(N));
    for (int a = 0; a < n_algos; a++) {
        for (int i = 0; i < k_max; i++) {
            size_t n = ((size_t)4096 << (2 * i)) / sizeof(float);
            const int reps = quick ? 3 : 7;
            double t[16];
            run(ctx, algos[a], n); /* warm-up */
            for (int r = 0; r < reps; r++) {
                comm_barrier(c);
                double t0 = bs_now();
                run(ctx, algos[a], n);
                double dt = bs_now() - t0;
                comm_allreduce_max_double(c, &dt, 1);
                t[r] = dt;
            }
            qsort(t, (size_t)reps, sizeof(double), compare_doubles);
            bytes[i] = (double)n * sizeof(float);
            seconds[i] = t[reps / 2];
        }
        CollectiveFit fit;
        if (fit_allreduce(bytes, seconds, k_max, N, &fit))
            json_object_set_new(out, comm_algo_name(algos[a]),
                                json_pack("{s:f, s:f}", "alpha_s", fit.alpha, "busbw_bytes_per_s", fit.busbw));
    }
    return out;
}

/* The host's all-reduce: buf is the context. */
typedef struct {
    Comm *comm;
    float *buf;
} HostAllreduce;

static void host_allreduce(void *ctx, CommAlgo algo, size_t n) {
    HostAllreduce *h = ctx;
    comm_set_algo(h->comm, algo);
    comm_allreduce(h->comm, h->buf, n);
}

/* Under mpirun: the all-reduce of each CPU algorithm between the ranks. Collective. */
static json_t *measure_collectives(Comm *c, bool quick) {
    const CommAlgo algos[] = {COMM_ALGO_MPI, COMM_ALGO_RING, COMM_ALGO_HIERARCHICAL};
    HostAllreduce h = {c, bs_calloc(calibration_collective_floats(quick), sizeof(float))};
    json_t *out = calibration_collectives(c, quick, algos, 3, host_allreduce, &h);
    free(h.buf);
    return out;
}

double calibration_elementwise_bytes(size_t N, int C) {
    double n = (double)N * C, wide = 4 * n;
    return 4.0 * (2.0 * wide + 3.0 * wide) /* gelu: read, write; backward: read 2, write 1 */
           + 4.0 * (2.0 * n + 4.0 * n)     /* layernorm: read, write; backward: read 2, read+write 1 */
           + 4.0 * 3.0 * n;                /* residual: read 2, write 1 */
}

json_t *calibration_root(void) {
    char host[64] = "this machine";
    gethostname(host, sizeof host - 1);
    char created[32];
    time_t now = time(NULL);
    strftime(created, sizeof created, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    json_t *root = json_pack("{s:s, s:i, s:s, s:{s:s}}", "format", CALIBRATION_FORMAT, "version", CALIBRATION_VERSION,
                             "created", created, "machine", "name", host);
    if (!root) bs_die("internal error: could not build the calibration JSON");
    return root;
}

void calibration_write(const char *path, json_t *root) {
    char *text = json_dumps(root, JSON_INDENT(2) | JSON_REAL_PRECISION(10));
    if (!text) bs_die("internal error: could not write the calibration JSON");
    size_t len = strlen(text);
    char *line = bs_malloc(len + 1);
    memcpy(line, text, len);
    line[len] = '\n';
    bs_write_file_atomic(path, line, len + 1);
    free(line);
    free(text);
}

/* The host's measurements, on the lead rank: the file's root. */
static json_t *measure_host(int threads, int ranks_per_node, bool quick, size_t *measured) {
    json_t *points = json_array();
    double budget = quick ? 0.01 : 0.25;
    for (size_t i = 0; i < sizeof SHAPES / sizeof SHAPES[0]; i++) {
        const Shape *s = &SHAPES[i];
        if (quick && (double)s->m * s->n * s->k > 1.5e9) continue;
        double rate = 2.0 * s->m * s->n * s->k / time_sgemm(s, budget);
        json_array_append_new(points, json_pack("{s:i, s:i, s:i, s:f}", "m", s->m, "n", s->n, "k", s->k, "flops_per_s", rate));
    }
    *measured = json_array_size(points);
    size_t n = quick ? (size_t)1 << 21 : (size_t)1 << 23; /* 3 x 16 or 3 x 64 MiB */
    double bandwidth = triad_bandwidth(n, quick ? 3 : 10);
    double elementwise = elementwise_rate(2048, 192, quick ? 3 : 20);
    json_t *root = calibration_root(), *machine = json_object_get(root, "machine");
    json_object_set_new(machine, "cores", json_integer(sysconf(_SC_NPROCESSORS_ONLN)));
    json_object_set_new(machine, "threads_per_rank", json_integer(threads));
    json_object_set_new(machine, "ranks_per_node", json_integer(ranks_per_node));
    json_object_set_new(machine, "memory_bytes", json_real((double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE)));
    json_object_set_new(root, "precision", json_string("fp32"));
    json_object_set_new(root, "matmul", points);
    json_object_set_new(root, "memory_bandwidth", json_pack("{s:f, s:s}", "bytes_per_s", bandwidth, "method",
                                                            "STREAM triad, best pass, 2 reads + 1 write per element"));
    json_object_set_new(root, "elementwise", json_pack("{s:f, s:s}", "bytes_per_s", elementwise, "method",
                                                       "engine GELU + LayerNorm forward/backward + residual, 2048 x 192"));
    return root;
}

int cmd_calibrate(int argc, char **argv) {
    const char *path = NULL, *device = "cpu", *precision = "fp32";
    int threads = 1, ranks_per_node = 0;
    bool quick = false;
    const OptionSpec specs[] = {
        {"calibrate", OPT_STRING, &path, OPT_NO_RANGE, "FILE", "where to write the calibration (JSON)", NULL, NULL},
        {"threads", OPT_INT, &threads, 1, 1024, "N", "threads per process (one process is one planner GPU)", NULL, NULL},
        {"ranks-per-node", OPT_INT, &ranks_per_node, 0, 4096, "N", "processes on this machine (0: cores / threads)", NULL, NULL},
        {"device", OPT_STRING, &device, OPT_NO_RANGE, "cpu|cuda|sim", "what to measure: this CPU, or the device train --device runs on", NULL, NULL},
        {"precision", OPT_STRING, &precision, OPT_NO_RANGE, "fp32|bf16", "the products' operands on a device (as train --precision)", NULL, NULL},
        {"quick", OPT_FLAG, &quick, OPT_NO_RANGE, "", "short timings (tests), less accurate", NULL, NULL},
    };
    if (!options_parse(specs, 6, argc, argv,
                       "usage: batchscale bench --calibrate FILE [options]\n\n"
                       "Measures sgemm by size and memory bandwidth (or a device's kernels and links) for\n"
                       "`batchscale plan --calibrate FILE`."))
        return 0;
    if (!path || !*path || path[0] == '-') bs_die("--calibrate needs a file name (got '%s')", path ? path : "");
    const bool on_cpu = strcmp(device, "cpu") == 0, bf16 = strcmp(precision, "bf16") == 0;
    if (!on_cpu && strcmp(device, "cuda") != 0 && strcmp(device, "sim") != 0)
        bs_die("--device must be cpu, cuda or sim (got '%s')", device);
    if (!bf16 && strcmp(precision, "fp32") != 0) bs_die("--precision must be fp32 or bf16 (got '%s')", precision);
    if (on_cpu && bf16) bs_die("--precision bf16 needs --device cuda or sim (the CPU calibration measures sgemm)");
    omp_set_num_threads(threads);
    Comm *world = comm_init(&argc, &argv, COMM_ALGO_MPI, 0, 600, "calibration");
    if (!on_cpu) {
        DeviceCalibration dc = {.kind = strcmp(device, "sim") == 0 ? DEVICE_SIM : DEVICE_CUDA, .bf16 = bf16,
                                .quick = quick, .threads = threads, .path = path};
        int rc = calibrate_device(world, &dc);
        comm_finalize(world);
        return rc;
    }
    const bool lead = comm_rank(world) == 0; /* measures the machine while the others wait */
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (ranks_per_node == 0) ranks_per_node = cores / threads > 0 ? (int)(cores / threads) : 1;
    size_t measured = 0;
    double bandwidth = 0, elementwise = 0;
    json_t *root = NULL;
    if (lead) {
        root = measure_host(threads, ranks_per_node, quick, &measured);
        bandwidth = json_real_value(json_object_get(json_object_get(root, "memory_bandwidth"), "bytes_per_s"));
        elementwise = json_real_value(json_object_get(json_object_get(root, "elementwise"), "bytes_per_s"));
    }
    comm_barrier(world); /* the other ranks join for the collectives */
    json_t *coll = comm_size(world) > 1 ? measure_collectives(world, quick) : NULL;
    if (!lead) {
        json_decref(coll);
        comm_finalize(world);
        return 0;
    }
    if (coll) json_object_set_new(root, "collectives", coll);
    calibration_write(path, root);
    json_decref(root);
    printf("calibration written to %s: sgemm %zu sizes, memory %.1f GB/s, element-wise %.1f GB/s, %d ranks x %d threads%s\n",
           path, measured, bandwidth / 1e9, elementwise / 1e9, ranks_per_node, threads,
           comm_size(world) > 1 ? ", collectives measured" : " (run under mpirun to measure collectives)");
    comm_finalize(world);
    return 0;
}

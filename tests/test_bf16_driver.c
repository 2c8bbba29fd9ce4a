/* test_bf16_driver.c: runs the bf16 kernels on files for test_bf16_torch.py
 * and times them for bench/bench_bf16.py; it checks nothing itself.
 *
 *   bf16_driver probe
 *       Prints "available|unavailable ISA AUTO": whether oneDNN can run bf16
 *       matmuls here (matmul_bf16_onednn_available), its effective ISA and
 *       the path auto picks, for the tests (tests/bf16_probe.py).
 *   bf16_driver convert IN OUT
 *       OUT (uint16 bf16) = the raw float32 array IN rounded to bf16.
 *   bf16_driver layer PATH N IC OC DIR
 *       Reads DIR/{inp,weight,bias,dout,dweight0,dbias0}.f32, converts inp and
 *       weight to bf16, runs forward then backward (dweight and dbias start
 *       from dweight0 and dbias0) and writes DIR/{out,dinp,dweight,dbias}.f32.
 *   bf16_driver bench PATH N IC OC REPS
 *       Times one layer at the current OMP_NUM_THREADS, median of REPS
 *       rounds (each round runs every pass once, in turn):
 *       bf16 forward (converting inp to bf16, as the model will), bf16
 *       backward, and the fp32 matmul_forward/backward (OpenBLAS) on the same
 *       shape. Prints one JSON object.
 * PATH: auto, onednn or widen (see matmul_bf16.h). */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/io.h"
#include "core/timer.h"
#include "kernels/bf16.h"
#include "kernels/blas_cpu.h"
#include "kernels/kernels.h"
#include "kernels/matmul_bf16.h"

static MatmulBF16Path parse_path(const char *s) {
    if (strcmp(s, "auto") == 0) return MATMUL_BF16_AUTO;
    if (strcmp(s, "onednn") == 0) {
        if (!matmul_bf16_onednn_available())
            bs_die("path onednn: oneDNN has no bf16 matmul on this CPU (ISA %s); use auto or widen",
                   matmul_bf16_cpu_isa());
        return MATMUL_BF16_ONEDNN;
    }
    if (strcmp(s, "widen") == 0) return MATMUL_BF16_WIDEN;
    bs_die("path '%s': use auto, onednn or widen", s);
}

static long positive(const char *s, const char *what) {
    char *end;
    long v = strtol(s, &end, 10);
    if (*end || v < 1) bs_die("%s '%s': give a positive integer", what, s);
    return v;
}

static void *read_exact(const char *path, size_t bytes) {
    if (bs_file_size(path) != (long long)bytes) bs_die("%s: expected %zu bytes", path, bytes);
    void *data = bs_malloc(bytes ? bytes : 1);
    FILE *f = bs_fopen(path, "rb");
    bs_fread_exact(data, bytes, f, path);
    fclose(f);
    return data;
}

static void write_all(const char *path, const void *data, size_t bytes) {
    FILE *f = bs_fopen(path, "wb");
    bs_fwrite_all(data, bytes, f, path);
    bs_fclose_synced(f, path);
}

static int cmd_convert(const char *in, const char *out) {
    long long bytes = bs_file_size(in);
    if (bytes < 0 || bytes % 4) bs_die("%s: expected a float32 array", in);
    size_t n = (size_t)bytes / 4;
    float *x = read_exact(in, n * sizeof(float));
    bf16 *h = bs_malloc(n * sizeof(bf16) + 1);
    bf16_from_floats(h, x, n);
    write_all(out, h, n * sizeof(bf16));
    free(x);
    free(h);
    return 0;
}

/* DIR/NAME.f32 of n floats */
static float *read_array(const char *dir, const char *name, size_t n) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.f32", dir, name);
    return read_exact(path, n * sizeof(float));
}

static void write_array(const char *dir, const char *name, const float *x, size_t n) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.f32", dir, name);
    write_all(path, x, n * sizeof(float));
}

static bf16 *bf16_copy(const float *x, size_t n) {
    bf16 *h = bs_malloc(n * sizeof(bf16) + 1);
    bf16_from_floats(h, x, n);
    return h;
}

static int cmd_layer(MatmulBF16Path path, size_t N, int IC, int OC, const char *dir) {
    const size_t ni = N * IC, nw = (size_t)OC * IC, no = N * OC;
    float *inp = read_array(dir, "inp", ni), *weight = read_array(dir, "weight", nw);
    float *bias = read_array(dir, "bias", (size_t)OC), *dout = read_array(dir, "dout", no);
    float *dweight = read_array(dir, "dweight0", nw), *dbias = read_array(dir, "dbias0", (size_t)OC);
    bf16 *inp16 = bf16_copy(inp, ni), *weight16 = bf16_copy(weight, nw);
    float *out = bs_malloc(no * sizeof(float)), *dinp = bs_malloc(ni * sizeof(float));
    MatmulBF16 *mm = matmul_bf16_create(path);
    matmul_bf16_forward(mm, out, inp16, weight16, bias, N, IC, OC);
    matmul_bf16_backward(mm, dinp, dweight, dbias, dout, inp16, weight16, N, IC, OC);
    write_array(dir, "out", out, no);
    write_array(dir, "dinp", dinp, ni);
    write_array(dir, "dweight", dweight, nw);
    write_array(dir, "dbias", dbias, (size_t)OC);
    printf("%s %s\n", matmul_bf16_path_name(matmul_bf16_path(mm)), matmul_bf16_last_kernel(mm));
    matmul_bf16_free(mm);
    void *all[] = {inp, weight, bias, dout, dweight, dbias, inp16, weight16, out, dinp};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
    return 0;
}

/* ---- bench ---- */

typedef struct {
    size_t N;
    int IC, OC;
    MatmulBF16 *mm;
    float *inp, *weight, *bias, *dout, *out, *dinp, *dweight, *dbias;
    bf16 *inp16, *weight16;
} Layer;

typedef void (*Pass)(Layer *l);

static void bf16_forward(Layer *l) {
    bf16_from_floats(l->inp16, l->inp, l->N * l->IC);
    matmul_bf16_forward(l->mm, l->out, l->inp16, l->weight16, l->bias, l->N, l->IC, l->OC);
}
static void bf16_backward(Layer *l) {
    matmul_bf16_backward(l->mm, l->dinp, l->dweight, l->dbias, l->dout, l->inp16, l->weight16, l->N, l->IC, l->OC);
}
static void fp32_forward(Layer *l) { matmul_forward(l->out, l->inp, l->weight, l->bias, l->N, l->IC, l->OC); }
static void fp32_backward(Layer *l) {
    matmul_backward(l->dinp, l->dweight, l->dbias, l->dout, l->inp, l->weight, l->N, l->IC, l->OC);
}

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median milliseconds of each pass over reps rounds after one warm-up
 * round; every round runs the passes in turn, so a change in the machine's
 * load hits all of them alike. */
static void time_passes(const Pass *passes, double *median_ms, int num_passes, Layer *l, int reps) {
    double *ms = bs_malloc((size_t)reps * num_passes * sizeof(double));
    for (int p = 0; p < num_passes; p++) passes[p](l);
    for (int r = 0; r < reps; r++) {
        for (int p = 0; p < num_passes; p++) {
            double t0 = bs_now();
            passes[p](l);
            ms[(size_t)p * reps + r] = (bs_now() - t0) * 1e3;
        }
    }
    for (int p = 0; p < num_passes; p++) {
        qsort(ms + (size_t)p * reps, (size_t)reps, sizeof(double), compare_doubles);
        median_ms[p] = ms[(size_t)p * reps + reps / 2];
    }
    free(ms);
}

static float *filled(size_t n, float scale) {
    float *x = bs_malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = scale * (float)((long)((i * 2654435761u) % 2001) - 1000) / 1000.0f;
    return x;
}

static int cmd_bench(MatmulBF16Path path, size_t N, int IC, int OC, int reps) {
    Layer l = {.N = N, .IC = IC, .OC = OC, .mm = matmul_bf16_create(path)};
    const size_t ni = N * IC, nw = (size_t)OC * IC, no = N * OC;
    l.inp = filled(ni, 1), l.weight = filled(nw, 0.02f), l.bias = filled((size_t)OC, 0.1f);
    l.dout = filled(no, 0.01f), l.out = filled(no, 0), l.dinp = filled(ni, 0);
    l.dweight = filled(nw, 0), l.dbias = filled((size_t)OC, 0);
    l.inp16 = bf16_copy(l.inp, ni), l.weight16 = bf16_copy(l.weight, nw);
    const Pass passes[4] = {bf16_forward, bf16_backward, fp32_forward, fp32_backward};
    double ms[4];
    time_passes(passes, ms, 4, &l, reps);
    printf("{\"path\": \"%s\", \"kernel\": \"%s\", \"threads\": %d, \"N\": %zu, \"IC\": %d, \"OC\": %d, "
           "\"bf16_fwd_ms\": %.4f, \"bf16_bwd_ms\": %.4f, \"fp32_fwd_ms\": %.4f, \"fp32_bwd_ms\": %.4f, "
           "\"primitives\": %d}\n",
           matmul_bf16_path_name(matmul_bf16_path(l.mm)), matmul_bf16_last_kernel(l.mm), omp_get_max_threads(), N, IC,
           OC, ms[0], ms[1], ms[2], ms[3], matmul_bf16_primitives_created(l.mm));
    matmul_bf16_free(l.mm);
    void *all[] = {l.inp, l.weight, l.bias, l.dout, l.out, l.dinp, l.dweight, l.dbias, l.inp16, l.weight16};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
    return 0;
}

int main(int argc, char **argv) {
    blas_ensure_cpu_kernels(argv);
    if (argc == 2 && strcmp(argv[1], "probe") == 0) {
        MatmulBF16 *mm = matmul_bf16_create(MATMUL_BF16_AUTO);
        printf("%s %s %s\n", matmul_bf16_onednn_available() ? "available" : "unavailable", matmul_bf16_cpu_isa(),
               matmul_bf16_path_name(matmul_bf16_path(mm)));
        matmul_bf16_free(mm);
        return 0;
    }
    if (argc == 4 && strcmp(argv[1], "convert") == 0) return cmd_convert(argv[2], argv[3]);
    if (argc == 7 && strcmp(argv[1], "layer") == 0)
        return cmd_layer(parse_path(argv[2]), (size_t)positive(argv[3], "N"), (int)positive(argv[4], "IC"),
                         (int)positive(argv[5], "OC"), argv[6]);
    if (argc == 7 && strcmp(argv[1], "bench") == 0)
        return cmd_bench(parse_path(argv[2]), (size_t)positive(argv[3], "N"), (int)positive(argv[4], "IC"),
                         (int)positive(argv[5], "OC"), (int)positive(argv[6], "REPS"));
    fprintf(stderr, "usage: bf16_driver probe | convert IN OUT | layer PATH N IC OC DIR | bench PATH N IC OC REPS\n");
    return 2;
}

/* test_cc_driver.c: the codecs and compressed all-reduce driven from
 * outside, for the numpy/PyTorch test (test_cc_formats.py) and the
 * benchmark (bench/bench_compress.py).
 *
 *   cc_driver codec SPEC BLOCK IN ENC DEC   encode the floats of IN (raw
 *                                           float32) into ENC, decode to DEC
 *   cc_driver fp8 IN OUT                    one e4m3 code per float (no scale)
 *   cc_driver fp8-values OUT                the 256 codes' values (float32)
 *   mpirun -np N cc_driver bench FLOATS BUCKET REPS CASES
 *       one "step" = FLOATS floats of gradient in buckets of BUCKET floats,
 *       all launched at once (as backward launches them), then waited;
 *       CASES: comma-separated codec specs, "fp32-ring" / "fp32-mpi" for the
 *       uncompressed collectives, "@exchange" after a spec for that scheme.
 *       Cases are timed in rounds (each round runs every case once), so a
 *       change of load on the machine hits all of them alike. Rank 0 prints
 *       one JSON line per case: median seconds per step (the slowest
 *       rank's), bytes sent per rank per step (the most of any rank), and
 *       errors against the exact sum (max |error| / max |sum|, RMS error /
 *       RMS sum) of one step and of the running sum of 8 steps of the same
 *       gradient with error feedback (what feedback recovers). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/compressed.h"
#include "core/error.h"
#include "core/timer.h"

static float *read_floats(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) bs_die("cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long bytes = ftell(f);
    fseek(f, 0, SEEK_SET);
    *n = (size_t)bytes / sizeof(float);
    float *x = bs_malloc((*n + 1) * sizeof(float));
    if (fread(x, sizeof(float), *n, f) != *n) bs_die("cannot read %s", path);
    fclose(f);
    return x;
}

static void write_bytes(const char *path, const void *data, size_t bytes) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, bytes, f) != bytes || fclose(f) != 0) bs_die("cannot write %s", path);
}

static int codec_mode(char **argv) {
    Codec c;
    char why[256];
    if (!codec_parse(argv[2], (size_t)atol(argv[3]), &c, why, sizeof why)) bs_die("%s", why);
    size_t n;
    float *x = read_floats(argv[4], &n), *y = bs_malloc((n + 1) * sizeof(float));
    size_t bytes = codec_encoded_bytes(&c, n);
    void *enc = bs_malloc(bytes + 1);
    codec_encode(&c, x, n, enc);
    codec_decode(&c, enc, n, y);
    write_bytes(argv[5], enc, bytes);
    write_bytes(argv[6], y, n * sizeof(float));
    free(x), free(y), free(enc);
    return 0;
}

static int fp8_values_mode(char **argv) {
    float v[256];
    for (int q = 0; q < 256; q++) v[q] = codec_fp8_to_float((uint8_t)q);
    write_bytes(argv[2], v, sizeof v);
    return 0;
}

static int fp8_mode(char **argv) {
    size_t n;
    float *x = read_floats(argv[2], &n);
    unsigned char *q = bs_malloc(n + 1);
    for (size_t i = 0; i < n; i++) q[i] = codec_fp8_from_float(x[i]);
    write_bytes(argv[3], q, n);
    free(x), free(q);
    return 0;
}

typedef struct {
    char name[64];
    bool plain;     /* uncompressed */
    CommAlgo algo;  /* plain: ring or mpi */
    Compression z;  /* compressed */
} BenchCase;

static BenchCase parse_case(const char *text) {
    BenchCase b = {0};
    snprintf(b.name, sizeof b.name, "%s", text);
    if (strncmp(text, "fp32-", 5) == 0) {
        b.plain = true;
        if (!comm_parse_algo(text + 5, &b.algo)) bs_die("unknown case %s", text);
        return b;
    }
    char spec[64], why[256];
    snprintf(spec, sizeof spec, "%s", text);
    char *at = strchr(spec, '@');
    if (at) *at = '\0';
    if (!codec_parse(spec, CODEC_DEFAULT_BLOCK, &b.z.codec, why, sizeof why)) bs_die("%s", why);
    b.z.scheme = compressed_default_scheme(&b.z.codec);
    if (at && !compressed_parse_scheme(at + 1, &b.z.scheme)) bs_die("unknown scheme in %s", text);
    return b;
}

typedef struct {
    Comm *comm;
    float *grad, *residual, *server_residual;
    size_t total, bucket;
    int buckets;
    CompressedScratch **scratch;
    CommOp **ops;
} Step;

/* One step: every bucket launched, then all waited for. */
static void run_step(Step *s, const BenchCase *b) {
    size_t server_at = 0;
    for (int k = 0; k < s->buckets; k++) {
        size_t off = (size_t)k * s->bucket, len = s->total - off < s->bucket ? s->total - off : s->bucket;
        if (b->plain) {
            s->ops[k] = comm_start_allreduce(s->comm, s->grad + off, len);
            continue;
        }
        Compression z = b->z;
        z.residual = s->residual + off;
        z.server_residual = s->server_residual + server_at;
        server_at += compressed_server_floats(s->comm, 0, len, len);
        s->ops[k] = comm_start_compressed_allreduce(s->comm, s->scratch[k], &z, s->grad + off, 0, len, len);
    }
    for (int k = 0; k < s->buckets; k++) comm_wait(s->ops[k]);
}

static void fill(Step *s, int rank) {
    for (size_t i = 0; i < s->total; i++)
        s->grad[i] = 1e-3f * sinf(0.001f * (float)i + (float)rank) * (1.0f + (float)(i % 7) / 7.0f);
}

static void reset(Step *s, int rank) {
    memset(s->residual, 0, s->total * sizeof(float));
    memset(s->server_residual, 0, s->total * sizeof(float));
    fill(s, rank);
}

/* max |got - want| / max |want| and RMS(got - want) / RMS(want). */
static void relative_errors(const double *got, const double *want, size_t n, double scale, double out[2]) {
    double max_err = 0, max_want = 0, sq_err = 0, sq_want = 0;
    for (size_t i = 0; i < n; i++) {
        double e = got[i] - scale * want[i];
        max_err = fmax(max_err, fabs(e));
        max_want = fmax(max_want, fabs(scale * want[i]));
        sq_err += e * e;
        sq_want += scale * want[i] * scale * want[i];
    }
    out[0] = max_err / max_want;
    out[1] = sqrt(sq_err / sq_want);
}

#define RUNNING_STEPS 8
#define MAX_CASES 32

/* Errors of one step and of the running sum of RUNNING_STEPS steps of the
 * same gradient (error feedback carries what one step leaves out). */
static void measure_errors(Step *s, const BenchCase *b, const double *exact, double one[2], double running[2]) {
    int rank = comm_rank(s->comm);
    double *sum = bs_calloc(s->total, sizeof(double));
    reset(s, rank);
    for (int t = 0; t < RUNNING_STEPS; t++) {
        fill(s, rank);
        run_step(s, b);
        for (size_t i = 0; i < s->total; i++) sum[i] += s->grad[i];
        if (t == 0) relative_errors(sum, exact, s->total, 1.0, one);
    }
    relative_errors(sum, exact, s->total, RUNNING_STEPS, running);
    free(sum);
}

static void sort_doubles(double *v, int n) {
    for (int i = 0; i < n; i++)
        for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
            double t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
}

static int bench_mode(int argc, char **argv) {
    Comm *c = comm_init(&argc, &argv, COMM_ALGO_RING, 0, 600.0, "bench");
    const int rank = comm_rank(c);
    Step s = {c, NULL, NULL, NULL, (size_t)atol(argv[2]), (size_t)atol(argv[3]), 0, NULL, NULL};
    int reps = atoi(argv[4]);
    if (reps < 1 || reps > 64) bs_die("REPS must be 1..64");
    s.buckets = (int)((s.total + s.bucket - 1) / s.bucket);
    s.grad = bs_malloc(s.total * sizeof(float));
    s.residual = bs_calloc(s.total, sizeof(float));
    s.server_residual = bs_calloc(s.total, sizeof(float));
    s.scratch = bs_malloc(sizeof(CompressedScratch *) * (size_t)s.buckets);
    s.ops = bs_malloc(sizeof(CommOp *) * (size_t)s.buckets);
    for (int k = 0; k < s.buckets; k++) s.scratch[k] = compressed_scratch_new();
    double *exact = bs_malloc(s.total * sizeof(double));
    fill(&s, rank);
    for (size_t i = 0; i < s.total; i++) exact[i] = s.grad[i];
    for (size_t done = 0; done < s.total; done += 1 << 24) {
        size_t len = s.total - done < (1u << 24) ? s.total - done : (1u << 24);
        comm_allreduce_double(c, exact + done, (int)len);
    }
    BenchCase cases[MAX_CASES];
    int num_cases = 0;
    for (char *tok = strtok(argv[5], ","); tok && num_cases < MAX_CASES; tok = strtok(NULL, ","))
        cases[num_cases++] = parse_case(tok);
    double one[MAX_CASES][2], running[MAX_CASES][2], times[MAX_CASES][64], bytes[MAX_CASES];
    for (int k = 0; k < num_cases; k++) { /* untimed: errors, and every buffer allocated */
        comm_set_algo(c, cases[k].plain ? cases[k].algo : COMM_ALGO_RING);
        measure_errors(&s, &cases[k], exact, one[k], running[k]);
    }
    for (int r = 0; r < reps; r++) /* rounds over all cases, so load changes hit every case alike */
        for (int k = 0; k < num_cases; k++) {
            comm_set_algo(c, cases[k].plain ? cases[k].algo : COMM_ALGO_RING);
            reset(&s, rank);
            comm_barrier(c);
            CommStats before = comm_stats(c);
            double t0 = bs_now();
            run_step(&s, &cases[k]);
            double dt = bs_now() - t0;
            bytes[k] = (double)(comm_stats(c).bytes_sent - before.bytes_sent);
            comm_allreduce_max_double(c, &dt, 1);
            comm_allreduce_max_double(c, &bytes[k], 1);
            times[k][r] = dt;
        }
    for (int k = 0; k < num_cases && rank == 0; k++) {
        sort_doubles(times[k], reps);
        printf("{\"case\": \"%s\", \"ranks\": %d, \"floats\": %zu, \"buckets\": %d, \"seconds\": %.6f, "
               "\"bytes_per_rank\": %.0f, \"max_rel_error\": %.3e, \"rms_rel_error\": %.3e, "
               "\"running_max_rel_error\": %.3e, \"running_rms_rel_error\": %.3e, \"running_steps\": %d}\n",
               cases[k].name, comm_size(c), s.total, s.buckets, times[k][reps / 2], bytes[k], one[k][0], one[k][1],
               running[k][0], running[k][1], RUNNING_STEPS);
    }
    fflush(stdout);
    for (int k = 0; k < s.buckets; k++) compressed_scratch_free(s.scratch[k]);
    free(s.grad), free(s.residual), free(s.server_residual), free(s.scratch), free(s.ops), free(exact);
    comm_finalize(c);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 7 && strcmp(argv[1], "codec") == 0) return codec_mode(argv);
    if (argc == 4 && strcmp(argv[1], "fp8") == 0) return fp8_mode(argv);
    if (argc == 3 && strcmp(argv[1], "fp8-values") == 0) return fp8_values_mode(argv);
    if (argc == 6 && strcmp(argv[1], "bench") == 0) return bench_mode(argc, argv);
    fprintf(stderr, "usage: cc_driver codec SPEC BLOCK IN ENC DEC | fp8 IN OUT | fp8-values OUT | "
                    "bench FLOATS BUCKET REPS CASES\n");
    return 2;
}

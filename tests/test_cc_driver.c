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
 *       Rank 0 prints one JSON line per case: median seconds per step (the
 *       slowest rank's), bytes sent per rank per step, and the error of one
 *       step against the exact sum (max |error| / max |sum|, and RMS error /
 *       RMS sum). */
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

static int bench_mode(int argc, char **argv) {
    Comm *c = comm_init(&argc, &argv, COMM_ALGO_RING, 0, 600.0, "bench");
    Step s = {c, NULL, NULL, NULL, (size_t)atol(argv[2]), (size_t)atol(argv[3]), 0, NULL, NULL};
    int reps = atoi(argv[4]);
    s.buckets = (int)((s.total + s.bucket - 1) / s.bucket);
    s.grad = bs_malloc(s.total * sizeof(float));
    s.residual = bs_calloc(s.total, sizeof(float));
    s.server_residual = bs_calloc(s.total, sizeof(float));
    s.scratch = bs_malloc(sizeof(CompressedScratch *) * (size_t)s.buckets);
    s.ops = bs_malloc(sizeof(CommOp *) * (size_t)s.buckets);
    for (int k = 0; k < s.buckets; k++) s.scratch[k] = compressed_scratch_new();
    double *exact = bs_malloc(s.total * sizeof(double));
    fill(&s, comm_rank(c));
    for (size_t i = 0; i < s.total; i++) exact[i] = s.grad[i];
    for (size_t done = 0; done < s.total; done += 1 << 24) {
        size_t len = s.total - done < (1u << 24) ? s.total - done : (1u << 24);
        comm_allreduce_double(c, exact + done, (int)len);
    }
    char *list = argv[5];
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
        BenchCase b = parse_case(tok);
        if (b.plain) comm_set_algo(c, b.algo);
        memset(s.residual, 0, s.total * sizeof(float));
        memset(s.server_residual, 0, s.total * sizeof(float));
        fill(&s, comm_rank(c));
        run_step(&s, &b); /* the first step: its error against the exact sum (and warm-up) */
        double max_err = 0, max_sum = 0, sq_err = 0, sq_sum = 0;
        for (size_t i = 0; i < s.total; i++) {
            double e = (double)s.grad[i] - exact[i];
            max_err = fmax(max_err, fabs(e));
            max_sum = fmax(max_sum, fabs(exact[i]));
            sq_err += e * e;
            sq_sum += exact[i] * exact[i];
        }
        double times[64];
        uint64_t bytes = 0;
        for (int r = 0; r < reps && r < 64; r++) {
            fill(&s, comm_rank(c));
            comm_barrier(c);
            CommStats before = comm_stats(c);
            double t0 = bs_now();
            run_step(&s, &b);
            double dt = bs_now() - t0;
            bytes = comm_stats(c).bytes_sent - before.bytes_sent;
            comm_allreduce_max_double(c, &dt, 1);
            times[r] = dt;
        }
        for (int i = 0; i < reps; i++) /* insertion sort for the median */
            for (int j = i; j > 0 && times[j] < times[j - 1]; j--) {
                double t = times[j];
                times[j] = times[j - 1];
                times[j - 1] = t;
            }
        double worst_bytes = (double)bytes;
        comm_allreduce_max_double(c, &worst_bytes, 1);
        if (comm_rank(c) == 0)
            printf("{\"case\": \"%s\", \"ranks\": %d, \"floats\": %zu, \"buckets\": %d, \"seconds\": %.6f, "
                   "\"bytes_per_rank\": %.0f, \"max_rel_error\": %.3e, \"rms_rel_error\": %.3e}\n",
                   b.name, comm_size(c), s.total, s.buckets, times[reps / 2], worst_bytes, max_err / max_sum,
                   sqrt(sq_err / sq_sum));
        fflush(stdout);
        if (b.plain) comm_set_algo(c, COMM_ALGO_RING);
    }
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

/* test_cc_collectives.c: the compressed collectives of comm/compressed.h
 * under mpirun (CTest runs 1..4 ranks), for every codec and scheme and
 * awkward lengths (0, 1, N-1, N+1, not divisible by N, several ring
 * segments per chunk), against the exact sum computed in double (every rank
 * regenerates every rank's inputs).
 *
 * 1. Bound: without feedback, every element of an all-reduce, of a
 *    reduce-scatter's own part (also of a window inside the index space) and
 *    of a ring all-gather is within the codec's bound for K encodings in
 *    series: K = N for the ring all-reduce (N-1 hops and the owner's final
 *    encoding), N-1 for the ring reduce-scatter, 2 for the exchange
 *    all-reduce (worker, server), 1 for the exchange reduce-scatter and the
 *    all-gather:
 *        |result - exact| <= K (rel' S + block_rel A + N abs) / (1 - K (rel' + block_rel))
 *    with S = sum over ranks of |x_r[i]|, A = sum over ranks of the largest
 *    |x_r| within K blocks of i (a hop's block may hold earlier hops' errors
 *    from neighbouring blocks), rel' = rel + (N + 1) 2^-24 (the float
 *    additions: a server sums N decoded values, a ring hop adds one),
 *    and the denominator the growth of partial sums by earlier errors. The
 *    worst ratio error/bound is printed (the bound is not vacuous).
 *    All-reduce results are the same bits on every rank.
 * 2. Error feedback (worker and server residuals, sum and mean): over 4
 *    steps, sum of results + residuals (summed over ranks) = sum of inputs,
 *    within the float rounding of the operations each element goes through
 *    (at most 3N + 4 roundings per step, each at most 2^-24 of the
 *    magnitudes involved, accumulated alongside).
 * 3. top-k results hold at most ceil(f n_p) non-zeros per chunk; top-k 1.0
 *    is exact; 1-bit results are +-s_p on each chunk.
 * 4. Bytes: what CommStats counts equals compressed_bytes_per_op, and for
 *    4 MB buffers the ratios to the fp32 ring all-reduce hold:
 *    int8 <= 27%, fp16 and bf16 50%, 1-bit <= 4%, top-k 1% <= 3%.
 * 5. Three compressed operations and a plain one in flight at once,
 *    completed in reverse order, give the results they give alone.
 * A group of one returns the input unchanged and sends nothing. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/compressed.h"
#include "test_cc_common.h"
#include "check.h"

typedef struct {
    const char *spec;
    size_t block;
    CompressedScheme scheme;
} Case;

static const Case cases[] = {
    {"fp16", 256, COMPRESSED_RING},      {"bf16", 256, COMPRESSED_RING},      {"fp8", 32, COMPRESSED_RING},
    {"int8", 256, COMPRESSED_RING},      {"int8", 7, COMPRESSED_RING},        {"none", 1, COMPRESSED_EXCHANGE},
    {"fp16", 256, COMPRESSED_EXCHANGE},  {"int8", 256, COMPRESSED_EXCHANGE},  {"topk:0.01", 1, COMPRESSED_EXCHANGE},
    {"topk:0.3", 1, COMPRESSED_EXCHANGE}, {"topk:1", 1, COMPRESSED_EXCHANGE}, {"onebit", 1, COMPRESSED_EXCHANGE},
};
#define NUM_CASES (sizeof cases / sizeof cases[0])

static Compression compression_of(const Case *k) {
    Compression z = {.scheme = k->scheme};
    char why[256];
    if (!codec_parse(k->spec, k->block, &z.codec, why, sizeof why)) {
        printf("bad case %s: %s\n", k->spec, why);
        exit(1);
    }
    return z;
}

static void report(Comm *c, bool bad, const char *fmt, const char *spec, const char *scheme, size_t n) {
    double b = bad;
    comm_allreduce_double(c, &b, 1);
    if (b > 0) {
        failures++;
        if (comm_rank(c) == 0) {
            printf("FAIL %d ranks, %s %s n=%zu: ", comm_size(c), spec, scheme, n);
            printf("%s\n", fmt);
        }
    }
}

/* Rank r's input at step t for an op over n floats. */
static void inputs(int rank, int step, size_t n, double max_abs, float *x) {
    Rng rng;
    rng_seed(&rng, 1000003u * (unsigned)(rank + 1) + 7919u * (unsigned)step + n);
    cc_fill(&rng, x, n, max_abs);
}

typedef struct {
    double *exact, *S, *A; /* per element: sum, sum of |x_r|, sum of the ranks' block amax within `reach` */
} Reference;

static Reference reference(int N, int step, size_t n, double max_abs, size_t block, int reach) {
    Reference ref = {calloc(n + 1, sizeof(double)), calloc(n + 1, sizeof(double)), calloc(n + 1, sizeof(double))};
    float *x = malloc((n + 1) * sizeof(float));
    size_t nb = n / block + 2;
    double *amax = malloc(nb * sizeof(double));
    for (int r = 0; r < N; r++) {
        inputs(r, step, n, max_abs, x);
        cc_block_maxima(x, n, block, amax);
        for (size_t i = 0; i < n; i++) {
            ref.exact[i] += x[i];
            ref.S[i] += fabs((double)x[i]);
            double m = 0;
            size_t b = i / block, last = (n - 1) / block;
            for (size_t d = b >= (size_t)reach ? b - (size_t)reach : 0; d <= b + (size_t)reach && d <= last; d++)
                m = fmax(m, amax[d]);
            ref.A[i] += m;
        }
    }
    free(x), free(amax);
    return ref;
}

static void free_reference(Reference *r) { free(r->exact), free(r->S), free(r->A); }

static double max_abs_for(const Compression *z) { return z->codec.kind == CODEC_FP16 ? 1e4 : 1e3; }

/* Every element of buf[lo, hi) within the bound of K encodings; returns the worst ratio (> 1: failure). */
static double within_bound(const Compression *z, int N, int K, const Reference *ref, const float *buf, size_t lo,
                           size_t hi) {
    CodecBound b = codec_bound(&z->codec);
    double rel = b.rel + (N + 1) * 0x1p-24, growth = 1 - K * (rel + b.block_rel), worst = 0;
    for (size_t i = lo; i < hi; i++) {
        double limit = K * (rel * ref->S[i] + b.block_rel * ref->A[i] + N * b.abs) / growth;
        double e = fabs((double)buf[i] - ref->exact[i]);
        if (e > limit) return INFINITY;
        if (limit > 0) worst = fmax(worst, e / limit);
    }
    return worst;
}

/* Rank 0's result, bit for bit, on every rank. */
static bool same_everywhere(Comm *c, const float *buf, size_t n) {
    float *root = malloc((n + 1) * sizeof(float));
    memcpy(root, buf, n * sizeof(float));
    comm_broadcast_bytes(c, root, n * sizeof(float), 0);
    bool same = memcmp(root, buf, n * sizeof(float)) == 0;
    free(root);
    return same;
}

static void check_bound_allreduce(Comm *c, CompressedScratch *s, const Case *k, size_t n, double *worst) {
    Compression z = compression_of(k);
    const int N = comm_size(c);
    int K = k->scheme == COMPRESSED_RING ? N : 2;
    Reference ref = reference(N, 0, n, max_abs_for(&z), k->block, K);
    float *buf = malloc((n + 1) * sizeof(float)), *orig = malloc((n + 1) * sizeof(float));
    inputs(comm_rank(c), 0, n, max_abs_for(&z), buf);
    memcpy(orig, buf, n * sizeof(float));
    comm_wait(comm_start_compressed_allreduce(c, s, &z, buf, 0, n, n));
    double w = within_bound(&z, N, K, &ref, buf, 0, n);
    report(c, w > 1, "all-reduce beyond the bound", k->spec, compressed_scheme_name(k->scheme), n);
    report(c, !same_everywhere(c, buf, n), "all-reduce differs between ranks", k->spec,
           compressed_scheme_name(k->scheme), n);
    if (N == 1) report(c, memcmp(buf, orig, n * sizeof(float)) != 0, "one rank changed its input", k->spec, "", n);
    *worst = fmax(*worst, w);
    free(buf), free(orig);
    free_reference(&ref);
}

/* Reduce-scatter of the window [woff, woff + n) of [0, total). */
static void check_bound_reduce_scatter(Comm *c, CompressedScratch *s, const Case *k, size_t total, size_t woff,
                                       size_t n, double *worst) {
    Compression z = compression_of(k);
    const int N = comm_size(c);
    int K = k->scheme == COMPRESSED_RING ? N - 1 : 1;
    Reference ref = reference(N, 1, n, max_abs_for(&z), k->block, K > 0 ? K : 1);
    float *buf = malloc((n + 1) * sizeof(float));
    inputs(comm_rank(c), 1, n, max_abs_for(&z), buf);
    comm_wait(comm_start_compressed_reduce_scatter(c, s, &z, buf, woff, n, total));
    size_t rel, count;
    compressed_own_chunk(c, woff, n, total, &rel, &count);
    double w = within_bound(&z, N, K > 0 ? K : 1, &ref, buf, rel, rel + count);
    report(c, w > 1, "reduce-scatter beyond the bound", k->spec, compressed_scheme_name(k->scheme), n);
    *worst = fmax(*worst, w);
    free(buf);
    free_reference(&ref);
}

/* Ring all-gather: each rank's own part encoded once by it, the same everywhere. */
static void check_allgather(Comm *c, CompressedScratch *s, const Case *k, size_t n, double *worst) {
    Compression z = compression_of(k);
    const int N = comm_size(c), me = comm_rank(c);
    float *buf = malloc((n + 1) * sizeof(float)), *x = malloc((n + 1) * sizeof(float));
    Reference ref = {calloc(n + 1, sizeof(double)), calloc(n + 1, sizeof(double)), calloc(n + 1, sizeof(double))};
    double *amax = malloc((n / k->block + 2) * sizeof(double));
    for (int r = 0; r < N; r++) { /* part r holds its owner's inputs */
        size_t off, cnt;
        comm_partition(c, n, r, &off, &cnt);
        inputs(r, 2, n, max_abs_for(&z), x);
        cc_block_maxima(x, n, k->block, amax);
        for (size_t i = off; i < off + cnt; i++) {
            ref.exact[i] = x[i];
            ref.S[i] = fabs((double)x[i]);
            ref.A[i] = cc_around(amax, n, k->block, i);
        }
        for (size_t i = 0; i < n; i++)
            if (r == me) buf[i] = i >= off && i < off + cnt ? x[i] : NAN; /* NaN: must be overwritten */
    }
    comm_wait(comm_start_compressed_allgather(c, s, &z.codec, buf, 0, n, n));
    double w = within_bound(&z, N, 1, &ref, buf, 0, n);
    report(c, w > 1, "all-gather beyond the bound", k->spec, "ring", n);
    report(c, !same_everywhere(c, buf, n), "all-gather differs between ranks", k->spec, "ring", n);
    *worst = fmax(*worst, w);
    free(buf), free(x), free(amax);
    free_reference(&ref);
}

/* Sum over the ranks of v (n doubles), in place. */
static void sum_ranks(Comm *c, double *v, size_t n) {
    for (size_t done = 0; done < n; done += 1 << 20) {
        size_t len = n - done < (1 << 20) ? n - done : (1 << 20);
        comm_allreduce_double(c, v + done, (int)len);
    }
}

/* Error feedback over STEPS steps of an all-reduce (or reduce-scatter): the
 * results plus the residuals carry every input. */
#define STEPS 4
static void check_feedback(Comm *c, CompressedScratch *s, const Case *k, bool allreduce, bool average, size_t n) {
    Compression z = compression_of(k);
    const int N = comm_size(c), me = comm_rank(c);
    size_t own_off, own_len;
    compressed_own_chunk(c, 0, n, n, &own_off, &own_len);
    float *buf = malloc((n + 1) * sizeof(float)), *x = malloc((n + 1) * sizeof(float));
    z.residual = calloc(n + 1, sizeof(float));
    z.server_residual = calloc(compressed_server_floats(c, 0, n, n) + 1, sizeof(float));
    z.average = average;
    double *want = calloc(n + 1, sizeof(double)), *got = calloc(n + 1, sizeof(double));
    double *mag = calloc(n + 1, sizeof(double)), *res = calloc(n + 1, sizeof(double));
    double scale = average ? 1.0 / N : 1.0;
    for (int t = 0; t < STEPS; t++) {
        for (int r = 0; r < N; r++) {
            inputs(r, 10 + t, n, max_abs_for(&z), x);
            for (size_t i = 0; i < n; i++) want[i] += scale * x[i], mag[i] += fabs((double)x[i]);
            if (r == me) memcpy(buf, x, n * sizeof(float));
        }
        for (size_t i = 0; i < n; i++) res[i] = fabs((double)z.residual[i]); /* before */
        if (allreduce) comm_wait(comm_start_compressed_allreduce(c, s, &z, buf, 0, n, n));
        else comm_wait(comm_start_compressed_reduce_scatter(c, s, &z, buf, 0, n, n));
        for (size_t i = 0; i < n; i++) res[i] += fabs((double)z.residual[i]); /* and after */
        for (size_t i = 0; i < own_len; i++) res[own_off + i] += 2 * fabs((double)z.server_residual[i]);
        sum_ranks(c, res, n);
        for (size_t i = 0; i < n; i++) {
            bool mine = i >= own_off && i < own_off + own_len;
            if (allreduce || mine) got[i] += buf[i];
            mag[i] += res[i] + fabs((double)buf[i]);
        }
    }
    /* the residuals left: every rank's worker residual and the server's */
    double *left = calloc(n + 1, sizeof(double));
    for (size_t i = 0; i < n; i++) left[i] = scale * z.residual[i];
    for (size_t i = 0; i < own_len; i++) left[own_off + i] += z.server_residual[i];
    sum_ranks(c, left, n);
    int bad = 0;
    double tol_factor = (3.0 * N + 4) * 0x1p-24;
    for (size_t i = 0; i < n; i++) {
        bool mine = i >= own_off && i < own_off + own_len;
        if (!allreduce && !mine) continue;
        bad += fabs(got[i] + left[i] - want[i]) > tol_factor * mag[i] + 1e-30;
    }
    char what[96];
    snprintf(what, sizeof what, "feedback invariant broken (%s%s) at %d elements", allreduce ? "all-reduce" : "reduce-scatter",
             average ? ", mean" : "", bad);
    report(c, bad > 0, what, k->spec, compressed_scheme_name(k->scheme), n);
    free(buf), free(x), free(z.residual), free(z.server_residual), free(want), free(got), free(mag), free(res), free(left);
}

/* top-k: at most ceil(f n_p) non-zeros per chunk, exact when f = 1;
 * 1-bit: one magnitude per chunk. */
static void check_sparse_and_signs(Comm *c, CompressedScratch *s, const Case *k, size_t n) {
    Compression z = compression_of(k);
    const int N = comm_size(c);
    if (z.codec.kind != CODEC_TOPK && z.codec.kind != CODEC_ONEBIT) return;
    float *buf = malloc((n + 1) * sizeof(float));
    inputs(comm_rank(c), 3, n, 1e3, buf);
    comm_wait(comm_start_compressed_allreduce(c, s, &z, buf, 0, n, n));
    bool bad = false;
    for (int p = 0; p < N && N > 1; p++) {
        size_t off, len, nonzero = 0;
        comm_partition(c, n, p, &off, &len);
        for (size_t i = off; i < off + len; i++) {
            nonzero += buf[i] != 0;
            if (z.codec.kind == CODEC_ONEBIT) bad |= fabsf(buf[i]) != fabsf(buf[off]);
        }
        if (z.codec.kind == CODEC_TOPK) bad |= nonzero > codec_topk_count(z.codec.fraction, len);
    }
    report(c, bad, z.codec.kind == CODEC_TOPK ? "too many non-zeros" : "not one magnitude per chunk", k->spec,
           "exchange", n);
    free(buf);
}

/* Bytes counted = bytes predicted; the ratios on 4 MB. */
static void check_bytes(Comm *c, CompressedScratch *s, const Case *k, size_t n) {
    Compression z = compression_of(k);
    const int N = comm_size(c);
    float *buf = calloc(n + 1, sizeof(float));
    inputs(comm_rank(c), 4, n, 1e3, buf);
    CommStats before = comm_stats(c);
    comm_wait(comm_start_compressed_allreduce(c, s, &z, buf, 0, n, n));
    CommStats after = comm_stats(c);
    uint64_t sent = after.bytes_sent - before.bytes_sent, fp32 = after.uncompressed_bytes - before.uncompressed_bytes;
    size_t predicted = compressed_bytes_per_op(c, COMPRESSED_OP_ALLREDUCE, &z.codec, k->scheme, 0, n, n);
    uint64_t ring_fp32 = (uint64_t)(2.0 * (N - 1) / N * (double)n * 4);
    report(c, sent != predicted || fp32 != ring_fp32, "bytes counted differ from the formats", k->spec,
           compressed_scheme_name(k->scheme), n);
    if (N > 1 && n >= (1 << 20)) {
        double ratio = (double)sent / (double)fp32, limit = INFINITY; /* the limits, default block size */
        switch (z.codec.kind) {
        case CODEC_INT8: limit = z.codec.block == CODEC_DEFAULT_BLOCK ? 0.27 : INFINITY; break;
        case CODEC_FP16:
        case CODEC_BF16: limit = 0.5001; break;
        case CODEC_ONEBIT: limit = 0.04; break;
        case CODEC_TOPK: limit = z.codec.fraction == 0.01 ? 0.03 : INFINITY; break;
        default: break;
        }
        double worst = ratio;
        comm_allreduce_max_double(c, &worst, 1);
        char limit_text[32] = "";
        if (isfinite(limit)) snprintf(limit_text, sizeof limit_text, " (limit %.2f%%)", 100 * limit);
        if (comm_rank(c) == 0)
            printf("bytes %-9s %-8s n=%zu: %6.2f%% of the fp32 ring all-reduce%s\n", k->spec,
                   compressed_scheme_name(k->scheme), n, 100 * worst, limit_text);
        report(c, ratio > limit, "byte ratio above the issue's limit", k->spec, compressed_scheme_name(k->scheme), n);
    }
    free(buf);
}

/* Three compressed operations and a plain all-reduce in flight at once. */
static void check_concurrent(Comm *c, size_t n) {
    const int N = comm_size(c);
    const Case *ks[3] = {&cases[3], &cases[8], &cases[11]}; /* int8 ring, top-k, 1-bit */
    CompressedScratch *s[3];
    float *alone[3], *together[4];
    for (int j = 0; j < 3; j++) {
        Compression z = compression_of(ks[j]);
        s[j] = compressed_scratch_new();
        alone[j] = malloc((n + 1) * sizeof(float));
        together[j] = malloc((n + 1) * sizeof(float));
        inputs(comm_rank(c), 20 + j, n, 1e3, alone[j]);
        memcpy(together[j], alone[j], n * sizeof(float));
        comm_wait(comm_start_compressed_allreduce(c, s[j], &z, alone[j], 0, n, n));
    }
    together[3] = malloc((n + 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) together[3][i] = (float)(comm_rank(c) + (int)(i % 5));
    Compression z[3];
    CommOp *op[4];
    for (int j = 0; j < 3; j++) {
        z[j] = compression_of(ks[j]);
        op[j] = comm_start_compressed_allreduce(c, s[j], &z[j], together[j], 0, n, n);
    }
    op[3] = comm_start_allreduce(c, together[3], n);
    for (int j = 3; j >= 0; j--) comm_wait(op[j]);
    bool bad = false;
    for (int j = 0; j < 3; j++) bad |= memcmp(alone[j], together[j], n * sizeof(float)) != 0;
    for (size_t i = 0; i < n; i++) bad |= together[3][i] != (float)(N * (N - 1) / 2 + N * (int)(i % 5));
    report(c, bad, "concurrent operations differ from alone", "int8+topk+onebit+plain", "mixed", n);
    for (int j = 0; j < 3; j++) compressed_scratch_free(s[j]), free(alone[j]), free(together[j]);
    free(together[3]);
}

int main(int argc, char **argv) {
    Comm *world = comm_init(&argc, &argv, COMM_ALGO_RING, 0, 120.0, "test");
    const int N = comm_size(world);
    size_t lengths[] = {0, 1, (size_t)N - 1, (size_t)N + 1, 1000, 4099, 300001};
    CompressedScratch *s = compressed_scratch_new();
    for (size_t c = 0; c < NUM_CASES; c++) {
        const Case *k = &cases[c];
        double worst_ar = 0, worst_rs = 0, worst_ag = 0;
        for (size_t l = 0; l < sizeof lengths / sizeof lengths[0]; l++) {
            size_t n = lengths[l];
            bool elementwise = strncmp(k->spec, "topk", 4) != 0 && strcmp(k->spec, "onebit") != 0;
            if (elementwise || strcmp(k->spec, "topk:1") == 0) {
                check_bound_allreduce(world, s, k, n, &worst_ar);
                check_bound_reduce_scatter(world, s, k, n, 0, n, &worst_rs);
                check_bound_reduce_scatter(world, s, k, n, n / 3, n / 2, &worst_rs); /* a window inside */
                if (k->scheme == COMPRESSED_RING) check_allgather(world, s, k, n, &worst_ag);
            }
            if (n <= 4099) {
                check_feedback(world, s, k, true, false, n);
                check_feedback(world, s, k, false, false, n);
            }
            check_sparse_and_signs(world, s, k, n);
        }
        check_feedback(world, s, k, true, true, 30011);
        check_bytes(world, s, k, 4099);
        check_bytes(world, s, k, (1 << 20) + 5); /* 3 ring segments per chunk at 4 ranks */
        if (comm_rank(world) == 0 && (worst_ar > 0 || worst_rs > 0))
            printf("bound %-9s %-8s worst error/bound: all-reduce %.3f, reduce-scatter %.3f, all-gather %.3f\n", k->spec,
                   compressed_scheme_name(k->scheme), worst_ar, worst_rs, worst_ag);
    }
    check_concurrent(world, 100003);
    compressed_scratch_free(s);
    if (comm_rank(world) == 0)
        printf("%s: %d ranks: %d failure(s)\n", failures ? "FAILED" : "ok", N, failures);
    comm_finalize(world);
    return failures ? 1 : 0;
}

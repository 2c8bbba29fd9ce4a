/* test_cc_qgz.c: the qgZ reduce-scatter of comm/compressed.h (ZeRO++'s
 * quantized gradients: an all-to-all inside each node, then one across
 * nodes) under mpirun, nodes emulated as runs of K consecutive ranks (argv[1],
 * comm_init's ranks_per_node). CTest runs every nodes x K with 1..4 ranks:
 * 1x1, 2x1, 1x2, 3x1, 1x3, 4x1, 2x2 and 1x4. Each rank regenerates every
 * rank's inputs and computes the exact sums in double; it places rank r at
 * node r / K, local index r % K itself.
 *
 * 1. Routing: without a codec (fp32 units) and with integer inputs, each rank
 *    ends with exactly the sum of its part of the index space, for the whole
 *    space and for a window inside it (ZeRO's buckets), and with the mean
 *    when asked: the slice reordering puts every chunk where ZeRO wants it.
 * 2. Bound (int8, blocks of 256 and of 7): element i of rank p's chunk,
 *    in the chunk's block k (the same block in both encodings, each chunk
 *    being its own unit). Per node a, with amax_r the largest |x_r| of rank
 *    r's input over the block, beta = codec_bound's block_rel (1/254: half a
 *    step of amax/127, + 8u for the scaling roundings), alpha its abs and
 *    u = 2^-24:
 *      round 1 (L > 1)  E1_a = beta sum_{r in a} amax_r + L alpha
 *      fp32 node sum    F_a  = L u (sum_{r in a} amax_r + E1_a)
 *      round 2 (M > 1)  E2_a = beta (Q_a + E1_a + F_a) + alpha, Q_a the largest
 *                       |sum_{r in a} x_r| over the block (the node sum's amax
 *                       is at most Q_a + E1_a + F_a)
 *      fp32 final sum   F    = M u sum_a (Q_a + E1_a + F_a + E2_a)
 *      |result - exact| <= sum_a (E1_a + F_a + E2_a) + F
 *    (a round over one rank is skipped: its term is 0). The bound holds for
 *    every element, the error is nonzero, and the worst error/bound is
 *    printed; where both rounds run, some element's error exceeds what round
 *    1 alone allows (the second encoding happens).
 * 3. Bytes: what CommStats counts equals compressed_bytes_per_op and the
 *    formula: rank p sends one int8 unit of every other rank's chunk (step 1
 *    the chunks of the other local indices, step 2 its own index's chunks on
 *    the other nodes), 4 ceil(len/B) + round4(len) bytes each; against the
 *    fp32 ring reduce-scatter, 4 (N-1)/N n, that is about (1 + 4/B) / 4.
 * 4. Two qgZ operations and a plain reduce-scatter in flight at once,
 *    completed in reverse order, give the results they give alone.
 * A group of one returns the input unchanged and sends nothing. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/compressed.h"
#include "test_cc_common.h"
#include "check.h"

static void report(Comm *c, bool bad, const char *what, size_t n) {
    double b = bad;
    comm_allreduce_double(c, &b, 1);
    if (b > 0) {
        failures++;
        if (comm_rank(c) == 0) printf("FAIL %d ranks, n=%zu: %s\n", comm_size(c), n, what);
    }
}

static Compression qgz_of(CodecKind kind, size_t block, bool average) {
    Compression z = {.codec = {kind, block, 0}, .scheme = COMPRESSED_QGZ, .average = average};
    return z;
}

/* Inputs: gradient-like (cc_fill: magnitudes 1e-9..1e3 in runs of 64, zeros),
 * uniform in [-1, 1] (every block's amax near 1 on every rank, so the bound
 * is approached), or integers in [-1000, 1000] (sums exact in fp32). */
typedef enum { GRADIENT, UNIFORM, INTEGERS } Inputs;
static const char *const input_names[] = {"gradient-like", "uniform"};

static void inputs(int rank, int step, size_t n, Inputs kind, float *x) {
    Rng rng;
    rng_seed(&rng, 1000003u * (unsigned)(rank + 1) + 7919u * (unsigned)step + n);
    if (kind == GRADIENT) cc_fill(&rng, x, n, 1e3);
    for (size_t i = 0; i < n && kind == UNIFORM; i++) x[i] = 2 * rng_uniform(&rng) - 1;
    for (size_t i = 0; i < n && kind == INTEGERS; i++) x[i] = (float)((int)rng_below(&rng, 2001) - 1000);
}

/* Every rank's input, in_r = all + r * n. */
static float *all_inputs(int N, int step, size_t n, Inputs kind) {
    float *all = malloc(((size_t)N * n + 1) * sizeof(float));
    for (int r = 0; r < N; r++) inputs(r, step, n, kind, all + (size_t)r * n);
    return all;
}

static void reduce_scatter(Comm *c, const Compression *z, float *buf, size_t woff, size_t n, size_t total) {
    CompressedScratch *s = compressed_scratch_new();
    comm_wait(comm_start_compressed_reduce_scatter(c, s, z, buf, woff, n, total));
    compressed_scratch_free(s);
}

/* 1. fp32 units, integer inputs: the own part holds the exact sum (or mean). */
static void check_routing(Comm *c, size_t total, size_t woff, size_t n, bool average) {
    const int N = comm_size(c), me = comm_rank(c);
    float *all = all_inputs(N, 1, n, INTEGERS), *buf = malloc((n + 1) * sizeof(float));
    memcpy(buf, all + (size_t)me * n, n * sizeof(float));
    Compression z = qgz_of(CODEC_NONE, 1, average);
    reduce_scatter(c, &z, buf, woff, n, total);
    size_t rel, count;
    compressed_own_chunk(c, woff, n, total, &rel, &count);
    bool bad = false;
    for (size_t i = rel; i < rel + count; i++) {
        double sum = 0;
        for (int r = 0; r < N; r++) sum += all[(size_t)r * n + i];
        float want = average ? (float)sum / (float)N : (float)sum;
        bad |= buf[i] != want;
    }
    if (N == 1)
        bad |= memcmp(buf, all, n * sizeof(float)) != 0;
    report(c, bad, average ? "fp32 qgZ mean is not the exact mean of the own part"
                           : "fp32 qgZ is not the exact sum of the own part", n);
    free(all), free(buf);
}

typedef struct {
    int N, K, M;            /* ranks, ranks per node, nodes */
    double beta, alpha, u;
} Grid;

/* The bound of section 2 for elements [lo, hi) (one block of the own chunk);
 * also the part of it round 1 alone allows. */
static double block_bound(const Grid *g, const float *all, size_t n, size_t lo, size_t hi, double *round1_only) {
    const int L = g->K, M = g->M;
    double bound = 0, final_mag = 0;
    *round1_only = 0;
    for (int a = 0; a < M; a++) {
        double A = 0, Q = 0;
        for (int l = 0; l < L; l++) {
            const float *x = all + (size_t)(a * L + l) * n;
            double m = 0;
            for (size_t i = lo; i < hi; i++) m = fmax(m, fabs((double)x[i]));
            A += m;
        }
        for (size_t i = lo; i < hi; i++) {
            double s = 0;
            for (int l = 0; l < L; l++) s += all[(size_t)(a * L + l) * n + i];
            Q = fmax(Q, fabs(s));
        }
        double E1 = L > 1 ? g->beta * A + L * g->alpha : 0;
        double F = L * g->u * (A + E1);
        double E2 = M > 1 ? g->beta * (Q + E1 + F) + g->alpha : 0;
        bound += E1 + F + E2;
        *round1_only += E1 + F;
        final_mag += Q + E1 + F + E2;
    }
    return bound + M * g->u * final_mag;
}

/* 2. int8: every element of the own chunk within the derived bound. */
static void check_bound(Comm *c, int K, Inputs kind, size_t block, size_t total, size_t woff, size_t n,
                        double *worst, double *largest_error) {
    const int N = comm_size(c), me = comm_rank(c);
    CodecBound cb = codec_bound(&(Codec){CODEC_INT8, block, 0});
    Grid g = {N, K, N / K, cb.block_rel, cb.abs, 0x1p-24};
    float *all = all_inputs(N, 2, n, kind), *buf = malloc((n + 1) * sizeof(float));
    memcpy(buf, all + (size_t)me * n, n * sizeof(float));
    Compression z = qgz_of(CODEC_INT8, block, false);
    reduce_scatter(c, &z, buf, woff, n, total);
    size_t rel, count;
    compressed_own_chunk(c, woff, n, total, &rel, &count);
    bool beyond = false, beyond_round1 = false;
    double max_error = 0, ratio = 0;
    for (size_t lo = rel; lo < rel + count; lo += block) {
        size_t hi = lo + block < rel + count ? lo + block : rel + count;
        double r1, bound = block_bound(&g, all, n, lo, hi, &r1);
        for (size_t i = lo; i < hi; i++) {
            double exact = 0;
            for (int r = 0; r < N; r++) exact += all[(size_t)r * n + i];
            double e = fabs((double)buf[i] - exact);
            beyond |= e > bound;
            beyond_round1 |= e > r1;
            max_error = fmax(max_error, e);
            if (bound > 0) ratio = fmax(ratio, e / bound);
        }
    }
    report(c, beyond, "int8 qgZ beyond the derived bound", n);
    comm_allreduce_max_double(c, &max_error, 1);
    comm_allreduce_max_double(c, &ratio, 1);
    double r1_exceeded = beyond_round1;
    comm_allreduce_max_double(c, &r1_exceeded, 1);
    if (N > 1 && n >= 100000) { /* enough elements for the bound to be approached */
        report(c, max_error == 0, "int8 qgZ is exact: nothing was quantized", n);
        if (kind == UNIFORM && K > 1 && N / K > 1)
            report(c, r1_exceeded == 0, "no element shows the second encoding", n);
    }
    *worst = fmax(*worst, ratio);
    *largest_error = fmax(*largest_error, max_error);
    free(all), free(buf);
}

static size_t int8_bytes(size_t len, size_t block) { return 4 * ((len + block - 1) / block) + (len + 3) / 4 * 4; }

/* 3. Bytes counted = predicted = the formula. */
static void check_bytes(Comm *c, size_t block, size_t n) {
    const int N = comm_size(c), me = comm_rank(c);
    float *buf = malloc((n + 1) * sizeof(float));
    inputs(me, 3, n, GRADIENT, buf);
    Compression z = qgz_of(CODEC_INT8, block, false);
    CommStats before = comm_stats(c);
    reduce_scatter(c, &z, buf, 0, n, n);
    CommStats after = comm_stats(c);
    uint64_t sent = after.bytes_sent - before.bytes_sent, fp32 = after.uncompressed_bytes - before.uncompressed_bytes;
    size_t formula = 0;
    for (int r = 0; r < N; r++) {
        size_t off, len;
        comm_partition(c, n, r, &off, &len);
        if (r != me) formula += int8_bytes(len, block);
    }
    size_t predicted = compressed_bytes_per_op(c, COMPRESSED_OP_REDUCE_SCATTER, &z.codec, COMPRESSED_QGZ, 0, n, n);
    uint64_t ring_fp32 = (uint64_t)((double)(N - 1) / N * (double)n * 4);
    report(c, sent != formula || predicted != formula || fp32 != ring_fp32, "bytes differ from the formula", n);
    if (N > 1 && n >= (1 << 20)) {
        double ratio = (double)sent / (double)fp32, expected = (1 + 4.0 / (double)block) / 4;
        comm_allreduce_max_double(c, &ratio, 1);
        if (me == 0)
            printf("bytes int8/%zu n=%zu: %.4f of the fp32 ring reduce-scatter (1 + 4/B) / 4 = %.4f\n", block, n, ratio,
                   expected);
        report(c, ratio > expected * 1.001, "int8 qgZ bytes above (1 + 4/B) / 4 of fp32", n);
    }
    free(buf);
}

/* 4. Two qgZ reduce-scatters and a plain one in flight at once. */
static void check_concurrent(Comm *c, size_t n) {
    const int me = comm_rank(c);
    float *alone[3], *together[3];
    Compression z[2] = {qgz_of(CODEC_INT8, 256, false), qgz_of(CODEC_INT8, 7, true)};
    CompressedScratch *s[2] = {compressed_scratch_new(), compressed_scratch_new()};
    for (int j = 0; j < 3; j++) {
        alone[j] = malloc((n + 1) * sizeof(float));
        together[j] = malloc((n + 1) * sizeof(float));
        inputs(me, 20 + j, n, j == 2 ? INTEGERS : GRADIENT, alone[j]);
        memcpy(together[j], alone[j], n * sizeof(float));
        if (j < 2) comm_wait(comm_start_compressed_reduce_scatter(c, s[j], &z[j], alone[j], 0, n, n));
        else comm_reduce_scatter(c, alone[j], 0, n, n);
    }
    CommOp *op[3];
    for (int j = 0; j < 2; j++) op[j] = comm_start_compressed_reduce_scatter(c, s[j], &z[j], together[j], 0, n, n);
    op[2] = comm_start_reduce_scatter(c, together[2], 0, n, n);
    for (int j = 2; j >= 0; j--) comm_wait(op[j]);
    size_t rel, count;
    compressed_own_chunk(c, 0, n, n, &rel, &count);
    bool bad = false;
    for (int j = 0; j < 3; j++) bad |= memcmp(alone[j] + rel, together[j] + rel, count * sizeof(float)) != 0;
    report(c, bad, "concurrent operations differ from alone", n);
    for (int j = 0; j < 3; j++) free(alone[j]), free(together[j]);
    compressed_scratch_free(s[0]), compressed_scratch_free(s[1]);
}

int main(int argc, char **argv) {
    int K = argc > 1 ? atoi(argv[1]) : 0;
    if (K < 1) {
        fprintf(stderr, "usage: test_cc_qgz RANKS_PER_NODE\n");
        return 2;
    }
    Comm *world = comm_init(&argc, &argv, COMM_ALGO_RING, K, 120.0, "test");
    const int N = comm_size(world);
    size_t lengths[] = {0, 1, (size_t)N - 1, (size_t)N + 1, 1000, 4099, 300001};
    const size_t blocks[] = {256, 7};
    double worst[2][2] = {{0, 0}, {0, 0}}, largest[2][2] = {{0, 0}, {0, 0}}; /* [inputs][block] */
    for (size_t l = 0; l < sizeof lengths / sizeof lengths[0]; l++) {
        size_t n = lengths[l];
        check_routing(world, n, 0, n, false);
        check_routing(world, n, n / 3, n / 2, false); /* a window inside, as ZeRO's buckets */
        check_routing(world, n, 0, n, true);
        for (int kind = GRADIENT; kind <= UNIFORM; kind++)
            for (int b = 0; b < 2; b++) {
                check_bound(world, K, kind, blocks[b], n, 0, n, &worst[kind][b], &largest[kind][b]);
                check_bound(world, K, kind, blocks[b], n, n / 3, n / 2, &worst[kind][b], &largest[kind][b]);
            }
    }
    check_bytes(world, 256, 4099);
    check_bytes(world, 256, (1 << 20) + 5);
    check_bytes(world, 7, (1 << 20) + 5);
    check_concurrent(world, 100003);
    if (comm_rank(world) == 0) {
        for (int kind = GRADIENT; kind <= UNIFORM; kind++)
            for (int b = 0; b < 2; b++)
                printf("bound int8/%zu %s, %d node(s) x %d: worst error/bound %.3f (largest error %.3g)\n", blocks[b],
                       input_names[kind], N / K, K, worst[kind][b], largest[kind][b]);
        printf("%s: %d ranks, %d per node: %d failure(s)\n", failures ? "FAILED" : "ok", N, K, failures);
    }
    comm_finalize(world);
    return failures ? 1 : 0;
}

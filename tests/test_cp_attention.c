/* test_cp_attention.c: context-parallel attention (ring and all-gather, zigzag
 * and contiguous splits) against the single-process kernel, forward output
 * and dq/dk/dv, on every rank's rows.
 *
 * Run under mpirun with N ranks. Every rank draws the same whole (B,T,3C)
 * input and output gradient, computes attention_forward/backward on all of
 * it (the oracle), then its own rows through context_attention_*, and
 * compares them with the oracle's rows at their true positions. The chunks
 * hold 1.5 to 3 row blocks, so whole and partial row blocks both occur. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "comm/comm.h"
#include "core/error.h"
#include "core/rng.h"
#include "kernels/kernels.h"
#include "model/context_attention.h"

enum { B = 2, C = 32, H = 4 };
#define TOLERANCE 1e-5 /* fp32: only the summation order differs (blocks, log-sum-exp merge) */

typedef struct {
    int T;
    float *qkv, *dout;       /* whole */
    float *out, *att, *dqkv; /* the oracle */
} Oracle;

static Oracle make_oracle(int T) {
    Oracle o = {T, NULL, NULL, NULL, NULL, NULL};
    size_t n3 = (size_t)B * T * 3 * C, n1 = (size_t)B * T * C;
    o.qkv = bs_malloc(sizeof(float) * n3);
    o.dout = bs_malloc(sizeof(float) * n1);
    o.out = bs_malloc(sizeof(float) * n1);
    o.dqkv = bs_malloc(sizeof(float) * n3);
    o.att = bs_malloc(sizeof(float) * (size_t)B * H * T * T);
    Rng rng;
    rng_seed(&rng, 20261201);
    for (size_t i = 0; i < n3; i++) o.qkv[i] = (float)rng_normal(&rng);
    for (size_t i = 0; i < n1; i++) o.dout[i] = (float)rng_normal(&rng);
    attention_forward(o.out, o.att, o.qkv, B, T, C, H);
    float *scratch = bs_malloc(sizeof(float) * (size_t)T * T);
    attention_backward(o.dqkv, scratch, 1, o.dout, o.qkv, o.att, B, T, C, H);
    free(scratch);
    return o;
}

static void free_oracle(Oracle *o) {
    free(o->qkv), free(o->dout), free(o->out), free(o->att), free(o->dqkv);
}

/* Rows at positions pos (t of them) of a whole (B,T,width) array. */
static void take(float *local, const float *whole, const int32_t *pos, int t, int T, int width) {
    for (int b = 0; b < B; b++)
        for (int i = 0; i < t; i++)
            memcpy(local + ((size_t)b * t + i) * width, whole + ((size_t)b * T + pos[i]) * width,
                   sizeof(float) * (size_t)width);
}

/* Largest |a - b| over n, and largest |b|. */
static double max_diff(const float *a, const float *b, size_t n, double *scale) {
    double d = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - b[i]));
        s = fmax(s, fabs((double)b[i]));
    }
    *scale = s;
    return d;
}

static void check_case(Comm *world, const Oracle *o, CpAlgo algo, CpSplit split) {
    const int N = comm_size(world), T = o->T, t = T / N;
    ContextAttention *ca = context_attention_create(world, algo, split, B, t, C, H);
    const int32_t *pos = context_attention_positions(ca);
    size_t n3 = (size_t)B * t * 3 * C, n1 = (size_t)B * t * C;
    float *qkv = bs_malloc(sizeof(float) * n3), *dout = bs_malloc(sizeof(float) * n1);
    float *want_out = bs_malloc(sizeof(float) * n1), *want_dqkv = bs_malloc(sizeof(float) * n3);
    float *out = bs_malloc(sizeof(float) * n1), *dqkv = bs_malloc(sizeof(float) * n3);
    float *att = bs_malloc(sizeof(float) * (size_t)B * H * t * T);
    take(qkv, o->qkv, pos, t, T, 3 * C);
    take(dout, o->dout, pos, t, T, C);
    take(want_out, o->out, pos, t, T, C);
    take(want_dqkv, o->dqkv, pos, t, T, 3 * C);
    context_attention_forward(ca, out, att, qkv, B, t);
    context_attention_backward(ca, dqkv, dout, qkv, out, att, B, t);
    double s_out, s_grad, d_out = max_diff(out, want_out, n1, &s_out), d_grad = max_diff(dqkv, want_dqkv, n3, &s_grad);
    double worst[2] = {d_out / fmax(1, s_out), d_grad / fmax(1, s_grad)};
    comm_allreduce_max_double(world, worst, 2);
    const char *name = algo == CP_ALGO_RING ? "ring" : "allgather";
    const char *how = split == CP_SPLIT_ZIGZAG ? "zigzag" : "contiguous";
    if (comm_rank(world) == 0)
        printf("cp %d, T %d (chunks of %d rows), %s, %s: out %.2e, dqkv %.2e (relative to max(1, |oracle|))\n", N, T,
               T / (2 * N), name, how, worst[0], worst[1]);
    CHECK(worst[0] <= TOLERANCE, "%s %s: output differs by %.3e", name, how, worst[0]);
    CHECK(worst[1] <= TOLERANCE, "%s %s: dq/dk/dv differ by %.3e", name, how, worst[1]);
    free(qkv), free(dout), free(want_out), free(want_dqkv), free(out), free(dqkv), free(att);
    context_attention_free(ca);
}

/* The split's bookkeeping: every position once, chunks ordered. */
static void check_positions(int N, CpSplit split, int T) {
    int *seen = calloc((size_t)T, sizeof(int));
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)(T / N));
    for (int r = 0; r < N; r++) {
        int chunks[2];
        context_chunks(N, r, split, chunks);
        CHECK(chunks[0] < chunks[1], "rank %d's chunks %d, %d out of order", r, chunks[0], chunks[1]);
        context_positions(N, r, split, T, pos);
        for (int i = 0; i < T / N; i++) seen[pos[i]]++;
    }
    for (int i = 0; i < T; i++) CHECK(seen[i] == 1, "position %d held %d times", i, seen[i]);
    free(seen);
    free(pos);
}

int main(int argc, char **argv) {
    Comm *world = comm_init(&argc, &argv, COMM_ALGO_MPI, 0, 120.0, "test_cp_attention");
    const int N = comm_size(world);
    const int T = 2 * N * (N == 2 ? 192 : 96); /* chunks of 3 or 1.5 row blocks */
    Oracle o = make_oracle(T);
    for (int split = 0; split < 2; split++) {
        check_positions(N, (CpSplit)split, T);
        for (int algo = 0; algo < 2; algo++) check_case(world, &o, (CpAlgo)algo, (CpSplit)split);
    }
    free_oracle(&o);
    double bad = failures;
    comm_allreduce_double(world, &bad, 1);
    if (comm_rank(world) == 0) printf("%s: %d ranks, %.0f failure(s)\n", bad ? "FAILED" : "ok", N, bad);
    comm_finalize(world);
    return bad ? 1 : 0;
}

/* test_moe_parallel.c: the MoE layer with expert parallelism
 * (parallel/moe_parallel.h) against the one-process layer (model/moe.h)
 * over all ranks' rows, under mpirun with 2 or 4 ranks, E = 8, K = 2.
 *
 * Every rank draws the same whole batch (rank r holds 24 + 8 r rows, so
 * blocks differ in size; the last rank's last rows repeat rank 0's first
 * rows, so equal scores meet at capacity cuts across ranks), runs the
 * oracle on all of it, then its own rows through the EP layer, and compares
 * with max |a - b| / max |oracle| <= 1e-5 (float32 both; only summation
 * order differs: the router gradient summed over ranks, gemm row blocks):
 * its output rows, its input gradient rows, the router gradient summed over
 * the group, its experts' gradients; the summed statistics' routed and kept
 * counts exactly (the same assignments dropped), the losses summed from
 * each rank's part; and the bytes the exchange counted against the
 * assignments that cross ranks; and that some capacity cut fell between
 * equal scores of rows on different ranks (the tie rule exercised). Cases: softmax and sigmoid
 * routers, dropless and with capacity factors that drop, selection bias. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "comm/comm.h"
#include "core/error.h"
#include "core/rng.h"
#include "model/moe.h"
#include "parallel/moe_parallel.h"

#define TOLERANCE 1e-5
enum { C = 16, F = 24, E = 8, K = 2 };

static size_t rows_of(int r) { return 24 + 8 * (size_t)r; }

static float *normal(Rng *rng, size_t n, double scale) {
    float *v = bs_malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) v[i] = (float)(scale * rng_normal(rng));
    return v;
}

/* max |a - b| / max |b|; *abs_err gets max |a - b|. */
static double rel_err(const float *a, const float *b, size_t n, double *abs_err) {
    double d = 0, s = 0;
    for (size_t i = 0; i < n; i++) d = fmax(d, fabs((double)a[i] - b[i])), s = fmax(s, fabs((double)b[i]));
    *abs_err = d;
    return d / (s > 0 ? s : 1);
}

typedef struct {
    size_t total, offset, N;
    float *x, *wr, *experts, *bias, *dout;   /* the whole batch and model */
    float *out, *dx, *dwr, *dexperts;        /* the oracle's */
    MoeStats stats;
    double aux, z;
} Oracle;

static Oracle make_oracle(const MoeConfig *cfg, int ep, int rank) {
    Oracle o = {0};
    for (int r = 0; r < ep; r++) o.offset += r < rank ? rows_of(r) : 0, o.total += rows_of(r);
    o.N = rows_of(rank);
    const size_t ne = E * moe_expert_numel(cfg);
    Rng rng;
    rng_seed(&rng, 20261217);
    o.x = normal(&rng, o.total * C, 1), o.wr = normal(&rng, (size_t)E * C, 0.5);
    o.experts = normal(&rng, ne, 0.3), o.bias = normal(&rng, E, 0.05), o.dout = normal(&rng, o.total * C, 1);
    const size_t dup = rows_of(0) / 2; /* the last rows repeat the first */
    memcpy(o.x + (o.total - dup) * C, o.x, sizeof(float) * dup * C);
    o.out = bs_malloc(sizeof(float) * o.total * C), o.dx = bs_calloc(o.total * C, sizeof(float));
    o.dwr = bs_calloc((size_t)E * C, sizeof(float)), o.dexperts = bs_calloc(ne, sizeof(float));
    MoeLayer *layer = moe_create(cfg, o.total);
    memset(&o.stats, 0, sizeof o.stats);
    moe_forward(layer, o.out, o.x, o.total, o.wr, o.experts, o.bias, &o.stats);
    moe_backward(layer, o.dx, o.dwr, o.dexperts, o.dout, o.x, o.wr, o.experts, &o.stats);
    moe_losses(cfg, &o.stats, &o.stats, &o.aux, &o.z);
    moe_free(layer);
    return o;
}

static void free_oracle(Oracle *o) {
    free(o->x), free(o->wr), free(o->experts), free(o->bias), free(o->dout);
    free(o->out), free(o->dx), free(o->dwr), free(o->dexperts);
}

/* Bytes this rank's exchange should count: an assignment of its rows to
 * another rank's expert goes out as metadata (16 bytes) and a row, and its
 * output gradient as a row; an assignment of another rank's rows to this
 * rank's experts comes back as a row, and its input gradient as a row; plus
 * the per-expert counts. Assignments from routing the whole batch. */
static double expected_bytes(const MoeConfig *cfg, const Oracle *o, int ep, int rank) {
    MoeLayer *layer = moe_create(cfg, o->total);
    MoeStats scratch;
    memset(&scratch, 0, sizeof scratch);
    moe_route(layer, o->x, o->total, o->wr, o->bias, &scratch);
    const size_t *counts = moe_dispatch_counts(layer);
    const int32_t *rows = moe_dispatch_rows(layer);
    const int local = E / ep;
    double out = 0, back = 0;
    for (int e = 0, j = 0; e < E; e++)
        for (size_t i = 0; i < counts[e]; i++, j++) {
            const bool mine = (size_t)rows[j] >= o->offset && (size_t)rows[j] < o->offset + o->N;
            out += mine && e / local != rank, back += !mine && e / local == rank;
        }
    moe_free(layer);
    const double row = sizeof(float) * C;
    return out * (16 + 2 * row) + back * 2 * row + (double)(ep - 1) * local * 8;
}

static int descending(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return (x < y) - (x > y);
}

/* Experts whose capacity cut falls between equal scores (decided by
 * position), routing the whole batch. */
static int tied_cuts(const MoeConfig *cfg, const Oracle *o) {
    MoeLayer *layer = moe_create(cfg, o->total);
    MoeStats scratch;
    memset(&scratch, 0, sizeof scratch);
    moe_route(layer, o->x, o->total, o->wr, o->bias, &scratch);
    const size_t *counts = moe_dispatch_counts(layer), cap = moe_capacity(cfg, o->total);
    float *s = bs_malloc(sizeof(float) * o->total * K);
    int ties = 0;
    for (int e = 0, at = 0; e < E; at += (int)counts[e], e++) {
        if (counts[e] <= cap) continue;
        memcpy(s, moe_dispatch_scores(layer) + at, sizeof(float) * counts[e]);
        qsort(s, counts[e], sizeof(float), descending);
        ties += s[cap - 1] == s[cap];
    }
    free(s);
    moe_free(layer);
    return ties;
}

static int check_case(Comm *world, MoeRouter router, double capacity_factor) {
    const int ep = comm_size(world), rank = comm_rank(world);
    const MoeConfig cfg = {.channels = C, .hidden = F, .experts = E, .top_k = K, .router = router,
                           .routed_scale = 1, .capacity_factor = capacity_factor, .aux_coef = 0.5, .z_coef = 0.1};
    Oracle o = make_oracle(&cfg, ep, rank);
    MoeParallel *p = moe_parallel_create(&cfg, world, o.N);
    const int first = moe_parallel_first_expert(p), local = moe_parallel_local_experts(p);
    const size_t en = moe_expert_numel(&cfg), ne_local = (size_t)local * en;
    float *out = bs_malloc(sizeof(float) * o.N * C), *dx = bs_calloc(o.N * C, sizeof(float));
    float *dwr = bs_calloc((size_t)E * C, sizeof(float)), *dexperts = bs_calloc(ne_local, sizeof(float));
    const float *x = o.x + o.offset * C, *experts = o.experts + (size_t)first * en;
    MoeStats local_stats, global;
    memset(&local_stats, 0, sizeof local_stats);
    moe_parallel_forward(p, out, x, o.N, o.wr, experts, o.bias, &local_stats);
    global = local_stats;
    comm_allreduce_double(world, (double *)&global, (int)MOE_STATS_DOUBLES);
    moe_parallel_backward(p, dx, dwr, dexperts, o.dout + o.offset * C, x, o.wr, experts, &global);
    comm_allreduce(world, dwr, (size_t)E * C); /* the router is a dense weight: summed over the group */
    double losses[2];
    moe_losses(&cfg, &local_stats, &global, &losses[0], &losses[1]);
    comm_allreduce_double(world, losses, 2);

    double abs[4], worst[8];
    worst[0] = rel_err(out, o.out + o.offset * C, o.N * C, &abs[0]);
    worst[1] = rel_err(dx, o.dx + o.offset * C, o.N * C, &abs[1]);
    worst[2] = rel_err(dwr, o.dwr, (size_t)E * C, &abs[2]);
    worst[3] = rel_err(dexperts, o.dexperts + (size_t)first * en, ne_local, &abs[3]);
    for (int i = 0; i < 4; i++) worst[4 + i] = abs[i];
    comm_allreduce_max_double(world, worst, 8);
    const double aux_err = fabs(losses[0] - o.aux) / o.aux, z_err = fabs(losses[1] - o.z) / o.z;
    const double bytes = (double)moe_parallel_bytes(p), want_bytes = expected_bytes(&cfg, &o, ep, rank);
    const MoeMetrics m = moe_metrics(&cfg, &global);
    double all_bytes[2] = {bytes, (double)o.total};
    comm_allreduce_double(world, all_bytes, 1);
    if (rank == 0)
        printf("ep %d, %s, capacity %g: dropped %.3f | out %.2e (abs %.1e), dx %.2e (%.1e), drouter %.2e (%.1e), "
               "dexperts %.2e (%.1e), aux %.1e, z %.1e | %.0f bytes over %llu moves, all ranks\n",
               ep, moe_router_name(router), capacity_factor, m.dropped_fraction, worst[0], worst[4], worst[1],
               worst[5], worst[2], worst[6], worst[3], worst[7], aux_err, z_err, all_bytes[0],
               (unsigned long long)moe_parallel_moves(p));
    const char *what[4] = {"output", "dx", "drouter", "dexperts"};
    for (int i = 0; i < 4; i++) CHECK(worst[i] <= TOLERANCE, "%s differs by %.3e", what[i], worst[i]);
    CHECK(aux_err <= TOLERANCE && z_err <= TOLERANCE, "losses differ: aux %.3e, z %.3e", aux_err, z_err);
    CHECK(!memcmp(global.routed, o.stats.routed, sizeof global.routed), "routed counts differ");
    CHECK(!memcmp(global.kept, o.stats.kept, sizeof global.kept), "kept counts differ: other rows dropped");
    CHECK(global.tokens == o.stats.tokens, "tokens %g vs %g", global.tokens, o.stats.tokens);
    CHECK((m.dropped_fraction > 0) == (capacity_factor > 0), "dropped fraction %.3f", m.dropped_fraction);
    CHECK(bytes == want_bytes, "rank %d: exchange counted %.0f bytes, the assignments make %.0f", rank, bytes,
          want_bytes);
    const int ties = tied_cuts(&cfg, &o);
    if (rank == 0 && capacity_factor > 0) printf("  capacity cuts between equal scores: %d\n", ties);
    moe_parallel_free(p);
    free(out), free(dx), free(dwr), free(dexperts);
    free_oracle(&o);
    return ties;
}

int main(int argc, char **argv) {
    Comm *world = comm_init(&argc, &argv, COMM_ALGO_MPI, 0, 120.0, "test_moe_parallel");
    check_case(world, MOE_ROUTER_SOFTMAX, 0);
    check_case(world, MOE_ROUTER_SIGMOID, 0);
    int ties = check_case(world, MOE_ROUTER_SOFTMAX, 1.0);
    ties += check_case(world, MOE_ROUTER_SIGMOID, 0.75);
    ties += check_case(world, MOE_ROUTER_SIGMOID, 0.5);
    CHECK(ties > 0, "no capacity cut fell between equal scores: the cross-rank tie rule was not exercised");
    double bad = failures;
    comm_allreduce_double(world, &bad, 1);
    if (comm_rank(world) == 0) printf("%s: %d ranks, %.0f failure(s)\n", bad ? "FAILED" : "ok", comm_size(world), bad);
    comm_finalize(world);
    return bad ? 1 : 0;
}

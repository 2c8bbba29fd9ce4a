/* test_device_moe_kernels.c: the MoE kernels (DK_MOE_*, device/moe_math.h)
 * against model/moe.c's token side on the CPU, N = 256 rows of C = 64, E = 8
 * experts, top 2, for the softmax router (normalized gates) and the sigmoid
 * router (unnormalized, scale 2.5), with a selection bias, the aux and z
 * losses at 1 and 0.1 (so their gradients show at the bound): the dispatch
 * (counts and each place's row) exactly, the routing statistics (routed and
 * kept exactly; prob per token and lse^2 within 1e-6 relative: the same
 * order of double sums, but a GPU's expf is not the host's Cephes exp, about
 * 1 ulp = 6e-8 apart per score), the gathered rows exactly, the combine, its
 * backward and the router's backward (dx and the router weight's gradient)
 * within 1e-5 of the largest magnitude.
 * `test_device_moe_kernels sim` on any machine, `cuda` on a GPU (exit 77
 * without one). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/rng.h"
#include "device_harness.h"
#include "model/moe.h"

enum { N = 256, C = 64, E = 8, K = 2, S = N * K };
static const double BOUND = 1e-5, STATS_BOUND = 1e-6;

static Rng rng;

static float *random_floats(size_t n, float scale) {
    float *x = malloc(sizeof *x * n);
    for (size_t i = 0; i < n; i++) x[i] = (2 * rng_uniform(&rng) - 1) * scale;
    return x;
}

static float *up(Harness *h, const float *x, size_t n) { return harness_upload(h, x, sizeof *x * n); }

static void expect_close(Harness *h, const char *what, const float *dev, const float *want, size_t n) {
    float *got = malloc(sizeof *got * n);
    harness_download(h, got, dev, sizeof *got * n);
    const double err = harness_relative_error(got, want, n);
    printf("%-34s relative error %.3g (bound %.0e)\n", what, err, BOUND);
    CHECK(err <= BOUND, "%s: relative error %g > %g", what, err, BOUND);
    free(got);
}

/* The dispatch and the statistics of a route against moe.c's. */
static void expect_dispatch(Harness *h, const MoeLayer *L, const MoeArgs *a, const MoeStats *want) {
    int32_t counts[E], rows[S];
    MoeStats got;
    harness_download(h, counts, a->counts, sizeof counts);
    harness_download(h, rows, a->disp_row, sizeof rows);
    harness_download(h, &got, a->stats, sizeof got);
    int same = 1;
    for (int e = 0; e < E; e++) same &= (size_t)counts[e] == moe_dispatch_counts(L)[e];
    for (int p = 0; p < S; p++) same &= rows[p] == moe_dispatch_rows(L)[p];
    CHECK(same, "dispatch: the counts or a place's row differ from moe.c's");
    double err = fabs(got.lse_sq - want->lse_sq) / want->lse_sq;
    for (int e = 0; e < E; e++) {
        same &= got.routed[e] == want->routed[e] && got.kept[e] == counts[e];
        err = fmax(err, fabs(got.prob[e] - want->prob[e]) / want->tokens);
    }
    printf("%-34s routed and kept equal %d, prob and lse^2 within %.3g\n", "dispatch statistics", same, err);
    CHECK(same && got.tokens == N && err <= STATS_BOUND, "statistics: routed/kept equal %d, error %g", same, err);
}

static MoeArgs device_args(Harness *h, const MoeConfig *cfg, const float *x, const float *router_w, const float *bias) {
    const size_t f = sizeof(float), i = sizeof(int32_t);
    MoeArgs a = {.logits = harness_alloc(h, f * N * E), .scores = harness_alloc(h, f * N * E),
                 .lse = harness_alloc(h, f * N), .slot_weight = harness_alloc(h, f * S),
                 .slot_dweight = harness_alloc(h, f * S), .rows = harness_alloc(h, f * S * C),
                 .out = harness_alloc(h, f * N * C), .dy = harness_alloc(h, f * S * C),
                 .dlogits = harness_alloc(h, f * N * E), .dx = harness_alloc(h, f * N * C),
                 .slot_expert = harness_alloc(h, i * S), .slot_pos = harness_alloc(h, i * S),
                 .disp_row = harness_alloc(h, i * S), .counts = harness_alloc(h, i * E),
                 .stats = harness_alloc(h, sizeof(MoeStats)), .x = up(h, x, N * C), .router_w = up(h, router_w, E * C),
                 .bias = up(h, bias, E), .N = N, .C = C, .E = E, .K = K, .router = (int)cfg->router,
                 .gates = (int)cfg->gates, .routed_scale = (float)cfg->routed_scale, .aux_coef = cfg->aux_coef,
                 .z_coef = cfg->z_coef};
    harness_check(h, device_zero(h->dev, h->stream, a.stats, sizeof(MoeStats)), "zero");
    return a;
}

static void launch(Harness *h, DeviceKernel k, const MoeArgs *a) {
    DeviceCall call = {.kernel = k, .a.moe = *a};
    harness_launch(h, &call);
}

static void test_token_side(Harness *h, MoeRouter router, MoeGates gates, double scale) {
    const MoeConfig cfg = {.channels = C, .hidden = 4 * C, .experts = E, .top_k = K, .router = router, .gates = gates,
                           .routed_scale = scale, .aux_coef = 1, .z_coef = 0.1}; /* losses large enough to show in the gradients */
    float *x = random_floats(N * C, 1), *router_w = random_floats(E * C, 0.3f), *bias = random_floats(E, 0.02f);
    float *y = random_floats(S * C, 1), *dout = random_floats(N * C, 1), *drows = random_floats(S * C, 1);
    float *want_out = malloc(sizeof(float) * N * C), *want_rows = malloc(sizeof(float) * S * C);
    float *want_dy = malloc(sizeof(float) * S * C), *want_dx = calloc(N * C, sizeof(float));
    float *want_dw = calloc(E * C, sizeof(float));
    MoeLayer *L = moe_create(&cfg, N);
    MoeStats stats = {0};
    moe_route(L, x, N, router_w, bias, &stats);
    moe_gather(L, want_rows, x);
    moe_combine(L, want_out, y);
    moe_combine_backward(L, want_dy, dout, y);
    moe_route_backward(L, want_dx, want_dw, drows, x, router_w, &stats);

    MoeArgs a = device_args(h, &cfg, x, router_w, bias);
    launch(h, DK_MOE_ROUTE, &a);
    launch(h, DK_MOE_DISPATCH, &a);
    printf("%s router, %s gates:\n", moe_router_name(router), moe_gates_name(gates));
    expect_dispatch(h, L, &a, &stats);
    expect_close(h, "gathered rows", a.rows, want_rows, S * C);
    a.y = up(h, y, S * C), a.dout = up(h, dout, N * C), a.drows = up(h, drows, S * C);
    launch(h, DK_MOE_COMBINE, &a);
    expect_close(h, "combine", a.out, want_out, N * C);
    launch(h, DK_MOE_COMBINE_BACKWARD, &a);
    expect_close(h, "combine backward (dy)", a.dy, want_dy, S * C);
    launch(h, DK_MOE_ROUTER_BACKWARD, &a);
    float *dx_router = harness_alloc(h, sizeof(float) * N * C), *drouter_w = harness_alloc(h, sizeof(float) * E * C);
    harness_check(h, device_zero(h->dev, h->stream, drouter_w, sizeof(float) * E * C), "zero");
    DeviceCall product = {.kernel = DK_MATMUL_BACKWARD};
    product.a.matmul = (MatmulArgs){.dinp = dx_router, .dweight = drouter_w, .dout = a.dlogits, .inp = a.x,
                                    .weight = a.router_w, .N = N, .IC = C, .OC = E};
    harness_launch(h, &product);
    a.dx_router = dx_router;
    launch(h, DK_MOE_SCATTER_BACKWARD, &a);
    expect_close(h, "router backward: dx", a.dx, want_dx, N * C);
    expect_close(h, "router backward: router weight", drouter_w, want_dw, E * C);
    moe_free(L);
    float *host[] = {x, router_w, bias, y, dout, drows, want_out, want_rows, want_dy, want_dx, want_dw};
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++) free(host[i]);
}

int main(int argc, char **argv) {
    rng_seed(&rng, 7);
    Harness h = harness_open(argc, argv, 11);
    printf("device %s\n", device_name(h.dev));
    test_token_side(&h, MOE_ROUTER_SOFTMAX, MOE_GATES_NORMALIZED, 1.0);
    test_token_side(&h, MOE_ROUTER_SIGMOID, MOE_GATES_UNNORMALIZED, 2.5);
    harness_close(&h);
    printf("%s\n", failures ? "FAILED" : "the MoE kernels agree with moe.c");
    return failures != 0;
}

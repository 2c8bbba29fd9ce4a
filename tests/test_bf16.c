/* test_bf16.c: the bf16 kernels against independent references.
 *
 * 1. float -> bf16 rounding against a reference that rounds by comparing
 *    distances in double (not by the bit trick the kernel uses), on every
 *    sign/exponent/top-mantissa pattern with the low 16 bits at ties, near
 *    ties, 0, extremes and random values (denormals, inf, NaN included);
 *    with --exhaustive on all 2^32 float patterns. bf16 -> float -> bf16 is
 *    the identity on every bf16 pattern.
 * 2. The linear layer, forward and backward, on the run's path (oneDNN bf16
 *    primitives or widened fp32), on odd shapes and across block edges
 *    (kernels.h's blocks), against
 *    (a) the exact product of the bf16-rounded inputs (double): only fp32
 *        accumulation may differ, |err| <= gamma(K+1) * sum|a b| (+|c0|),
 *        gamma(n) = n u / (1 - n u), u = 2^-24 (Higham's bound for any
 *        summation order);
 *    (b) this project's fp32 path (matmul_forward/backward on the unrounded
 *        inputs): rounding to 8 significant bits moves a value by at most
 *        u = 2^-8 of itself (half the spacing 2^-7 between 1 and the next
 *        bf16), so each product a'b' = ab (1 + d), |d| <= 2u + u^2 =
 *        2^-7 + 2^-16, and |err| <= (2^-7 + 2^-16) sum|a b| plus both
 *        accumulations; and the figure, max|err| <= 1e-2 x the
 *        largest sum|a b| (the terms' magnitude, which the rounding error
 *        scales with: the result's own can cancel to near zero, as in a
 *        1x1x1 product whose bias offsets it);
 *    dbias must equal the fp32 path's bit for bit (same fp32 dout, same
 *    order), dweight is accumulated (+=) into nonzero values.
 * 3. The primitive cache: a oneDNN primitive per (product, block shape),
 *    whatever the thread count; a shape's second call, a call at another
 *    thread count and a layer whose blocks have shapes seen before create
 *    none (and the widened path creates none).
 * 4. The same results bit for bit at 1, 2 and 3 threads, on the model's
 *    small shapes and the engine's, always (threads need not have cores).
 * 5. The _rounded calls (bf16 values kept in floats, the model's layout)
 *    give the bits of the bf16-typed calls on the same values.
 * 6. AUTO never picks oneDNN where the capability probe says it cannot run.
 *
 * usage: test_bf16 onednn|widen [--exhaustive]
 * One path per run, so each is its own CTest test. The conversion checks
 * run with widen. The onednn run exits with SKIP_CODE (CTest's
 * SKIP_RETURN_CODE) and says why where oneDNN has no bf16 matmul (oneDNN 2.6
 * below AVX-512, e.g. an AVX2-only AMD EPYC, or ONEDNN_MAX_CPU_ISA=AVX2). */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bf16.h"
#include "kernels/kernels.h"
#include "kernels/matmul_bf16.h"
#include "check.h"

enum { SKIP_CODE = 77 }; /* BS_SKIP in tests/CMakeLists.txt: CTest counts it as skipped */

static unsigned long long rng_state = 0x9E3779B97F4A7C15ULL;
static unsigned long long next_random(void) { /* xorshift64, test-local */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}
static float uniform(void) { return (float)((double)(next_random() >> 11) / 9007199254740992.0 * 2.0 - 1.0); }

static float float_of(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* ---- 1. conversion ---- */

/* The bf16 nearest to float bits u, ties to the even mantissa, found by
 * comparing the distances to the two bf16 neighbours in double. NaN is
 * returned as 0x7fc0 (callers compare NaN by class). */
static bf16 reference_round(uint32_t u) {
    float x = float_of(u);
    if (isnan(x)) return 0x7fc0;
    uint32_t below = u & 0xffff0000u; /* the neighbour toward zero */
    if (below == u) return (bf16)(u >> 16);
    double lo = fabs((double)float_of(below));
    double hi = (below & 0x7fffffffu) == 0x7f7f0000u ? ldexp(1.0, 128) /* next after the largest bf16 */
                                                      : fabs((double)float_of(below + 0x10000u));
    double ax = fabs((double)x);
    bool up = ax - lo > hi - ax || (ax - lo == hi - ax && ((below >> 16) & 1u));
    return (bf16)((below + (up ? 0x10000u : 0)) >> 16);
}

static bool same_bf16(bf16 got, bf16 want) {
    bool got_nan = (got & 0x7fffu) > 0x7f80u, want_nan = (want & 0x7fffu) > 0x7f80u;
    return got_nan || want_nan ? got_nan == want_nan : got == want;
}

/* Checks bf16_from_floats on the patterns (high << 16) | low for every high
 * and the given lows; returns the number checked. */
static size_t check_rounding(const uint16_t *lows, int num_lows) {
    const size_t n = (size_t)65536 * (size_t)num_lows;
    uint32_t *bits = malloc(n * sizeof *bits);
    bf16 *got = malloc(n * sizeof *got);
    for (uint32_t high = 0; high < 65536; high++)
        for (int l = 0; l < num_lows; l++) bits[(size_t)high * num_lows + l] = high << 16 | lows[l];
    bf16_from_floats(got, (const float *)(const void *)bits, n);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        if (!same_bf16(got[i], reference_round(bits[i]))) {
            if (bad++ < 5) fprintf(stderr, "  %08x -> %04x, want %04x\n", bits[i], got[i], reference_round(bits[i]));
        }
    }
    CHECK(bad == 0, "%zu of %zu float patterns rounded wrongly", bad, n);
    free(bits);
    free(got);
    return n;
}

static void test_conversion(bool exhaustive) {
    uint16_t lows[32] = {0x0000, 0x0001, 0x7fff, 0x8000, 0x8001, 0xfffe, 0xffff, 0x4000, 0xc000, 0x7ffe};
    int num_lows = 10;
    while (num_lows < 32) lows[num_lows++] = (uint16_t)next_random();
    size_t checked = check_rounding(lows, num_lows);
    if (exhaustive) { /* every float: 2^16 lows in chunks of 64 */
        for (int l0 = 0; l0 < 65536; l0 += 64) {
            uint16_t chunk[64];
            for (int l = 0; l < 64; l++) chunk[l] = (uint16_t)(l0 + l);
            checked += check_rounding(chunk, 64);
        }
    }
    /* bf16 -> float is exact, so back to bf16 is the identity */
    bf16 all[65536], back[65536];
    float wide[65536];
    for (int i = 0; i < 65536; i++) all[i] = (bf16)i;
    bf16_to_floats(wide, all, 65536);
    bf16_from_floats(back, wide, 65536);
    int bad = 0;
    for (int i = 0; i < 65536; i++) bad += !same_bf16(back[i], all[i]) || ((back[i] & 0x7fffu) > 0x7f80u && (back[i] >> 15) != (all[i] >> 15));
    CHECK(bad == 0, "%d bf16 patterns do not survive bf16 -> float -> bf16", bad);
    /* ties to even both ways, and overflow past the largest bf16 (3.3895e38) */
    float rounded[3] = {1.00390625f, 1.01171875f, -3.4e38f}, want[3] = {1.0f, 1.015625f, -INFINITY};
    bf16_round_floats(rounded, rounded, 3);
    for (int i = 0; i < 3; i++) CHECK(rounded[i] == want[i], "bf16_round_floats[%d] = %g, want %g", i, rounded[i], want[i]);
    printf("conversion: %zu float patterns rounded as the reference%s\n", checked, exhaustive ? " (all 2^32)" : "");
}

/* ---- 2. the linear layer ---- */

typedef struct {
    size_t N;
    int IC, OC;
} Shape;

/* Random fp32 data and its bf16 copies. */
typedef struct {
    Shape s;
    float *inp, *weight, *bias, *dout, *dweight0, *dbias0;
    bf16 *inp16, *weight16;
} Problem;

static float *random_floats(size_t n) {
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++) x[i] = uniform();
    return x;
}

static bf16 *to_bf16(const float *x, size_t n) {
    bf16 *h = malloc(n * sizeof *h);
    bf16_from_floats(h, x, n);
    return h;
}

static Problem make_problem(Shape s) {
    Problem p = {.s = s};
    p.inp = random_floats(s.N * s.IC);
    p.weight = random_floats((size_t)s.OC * s.IC);
    p.bias = random_floats((size_t)s.OC);
    p.dout = random_floats(s.N * s.OC);
    p.dweight0 = random_floats((size_t)s.OC * s.IC);
    p.dbias0 = random_floats((size_t)s.OC);
    p.inp16 = to_bf16(p.inp, s.N * s.IC);
    p.weight16 = to_bf16(p.weight, (size_t)s.OC * s.IC);
    return p;
}

static void free_problem(Problem *p) {
    void *all[] = {p->inp, p->weight, p->bias, p->dout, p->dweight0, p->dbias0, p->inp16, p->weight16};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
}

typedef struct {
    float *out, *dinp, *dweight, *dbias;
} Results;

static Results alloc_results(const Problem *p) {
    Shape s = p->s;
    Results r = {malloc(s.N * s.OC * sizeof(float)), malloc(s.N * s.IC * sizeof(float)),
                 malloc((size_t)s.OC * s.IC * sizeof(float)), malloc((size_t)s.OC * sizeof(float))};
    memcpy(r.dweight, p->dweight0, (size_t)s.OC * s.IC * sizeof(float));
    memcpy(r.dbias, p->dbias0, (size_t)s.OC * sizeof(float));
    return r;
}

static void free_results(Results *r) {
    free(r->out);
    free(r->dinp);
    free(r->dweight);
    free(r->dbias);
}

static void run_bf16(MatmulBF16 *mm, const Problem *p, Results *r) {
    Shape s = p->s;
    matmul_bf16_forward(mm, r->out, p->inp16, p->weight16, p->bias, s.N, s.IC, s.OC);
    matmul_bf16_backward(mm, r->dinp, r->dweight, r->dbias, p->dout, p->inp16, p->weight16, s.N, s.IC, s.OC);
}

static void run_fp32(const Problem *p, Results *r) {
    Shape s = p->s;
    matmul_forward(r->out, p->inp, p->weight, p->bias, s.N, s.IC, s.OC);
    matmul_backward(r->dinp, r->dweight, r->dbias, p->dout, p->inp, p->weight, s.N, s.IC, s.OC);
}

static double gamma_of(int n) {
    double u = ldexp(1.0, -24);
    return n * u / (1 - n * u);
}

/* One product's element: sum_k a[k] b[k] (+ c0) over a with stride sa and b
 * with stride sb, in double, on the values as given and rounded to bf16. */
typedef struct {
    double exact, abs;         /* inputs as given */
    double exact16, abs16;     /* inputs rounded to bf16 */
} Dot;

static float round16(float x) { return bf16_to_float(bf16_from_float(x)); }

static Dot dot(const float *a, size_t sa, const float *b, size_t sb, size_t K, double c0) {
    Dot d = {c0, fabs(c0), c0, fabs(c0)};
    for (size_t k = 0; k < K; k++) {
        double x = a[k * sa], y = b[k * sb];
        double x16 = round16(a[k * sa]), y16 = round16(b[k * sb]);
        d.exact += x * y;
        d.abs += fabs(x * y);
        d.exact16 += x16 * y16;
        d.abs16 += fabs(x16 * y16);
    }
    return d;
}

/* Error statistics of one output tensor. */
typedef struct {
    const char *name;
    int K; /* length of the dot products */
    size_t violations16, violations32, count;
    double max_err32, max_terms; /* largest |bf16 - fp32|, largest sum|a b| */
} Check;

static void check_element(Check *c, float bf16_result, float fp32_result, Dot d) {
    /* (a) bf16-rounded inputs, fp32 accumulation */
    double tol16 = gamma_of(c->K + 1) * d.abs16 + ldexp(d.abs16, -40);
    if (fabs(bf16_result - d.exact16) > tol16 && c->violations16++ < 3)
        fprintf(stderr, "  %s: |%.9g - %.9g| > %.3g\n", c->name, bf16_result, d.exact16, tol16);
    /* (b) against the fp32 path on the unrounded inputs */
    double tol32 = (ldexp(1.0, -7) + ldexp(1.0, -16)) * d.abs + gamma_of(c->K + 1) * (d.abs + d.abs16);
    double err32 = fabs((double)bf16_result - fp32_result);
    if (err32 > tol32 && c->violations32++ < 3)
        fprintf(stderr, "  %s: |%.9g - fp32 %.9g| > %.3g\n", c->name, bf16_result, fp32_result, tol32);
    c->max_err32 = fmax(c->max_err32, err32);
    c->max_terms = fmax(c->max_terms, d.abs);
    c->count++;
}

static void report(const Check *c, Shape s, const char *path) {
    double rel = c->max_terms > 0 ? c->max_err32 / c->max_terms : 0;
    CHECK(c->violations16 == 0, "%s %s %zux%dx%d: %zu of %zu beyond the fp32-accumulation bound", path, c->name,
           s.N, s.IC, s.OC, c->violations16, c->count);
    CHECK(c->violations32 == 0, "%s %s %zux%dx%d: %zu of %zu beyond the bf16 rounding bound vs fp32", path,
           c->name, s.N, s.IC, s.OC, c->violations32, c->count);
    CHECK(rel <= 1e-2, "%s %s %zux%dx%d: max|err| / max sum|ab| = %.3g > 1e-2", path, c->name, s.N, s.IC, s.OC,
           rel);
    printf("  %-8s max|bf16 - fp32| / max sum|ab| = %.2e\n", c->name, rel);
}

static void test_layer(MatmulBF16Path path, Shape s) {
    MatmulBF16 *mm = matmul_bf16_create(path);
    Problem p = make_problem(s);
    Results got = alloc_results(&p), ref = alloc_results(&p);
    run_bf16(mm, &p, &got);
    run_fp32(&p, &ref);
    const char *name = matmul_bf16_path_name(matmul_bf16_path(mm));
    printf("%s %zux%dx%d (%s):\n", name, s.N, s.IC, s.OC, matmul_bf16_last_kernel(mm));
    const size_t IC = (size_t)s.IC, OC = (size_t)s.OC;

    Check out = {.name = "out", .K = s.IC};
    for (size_t i = 0; i < s.N; i++)
        for (size_t o = 0; o < OC; o++)
            check_element(&out, got.out[i * OC + o], ref.out[i * OC + o],
                          dot(p.inp + i * IC, 1, p.weight + o * IC, 1, IC, p.bias[o]));
    report(&out, s, name);

    Check dinp = {.name = "dinp", .K = s.OC};
    for (size_t i = 0; i < s.N; i++)
        for (size_t c = 0; c < IC; c++)
            check_element(&dinp, got.dinp[i * IC + c], ref.dinp[i * IC + c],
                          dot(p.dout + i * OC, 1, p.weight + c, IC, OC, 0));
    report(&dinp, s, name);

    Check dweight = {.name = "dweight", .K = (int)s.N};
    for (size_t o = 0; o < OC; o++)
        for (size_t c = 0; c < IC; c++)
            check_element(&dweight, got.dweight[o * IC + c], ref.dweight[o * IC + c],
                          dot(p.dout + o, OC, p.inp + c, IC, s.N, p.dweight0[o * IC + c]));
    report(&dweight, s, name);

    CHECK(memcmp(got.dbias, ref.dbias, OC * sizeof(float)) == 0, "%s dbias differs from the fp32 path", name);
    free_results(&got);
    free_results(&ref);
    free_problem(&p);
    matmul_bf16_free(mm);
}

/* ---- 3. the primitive cache ---- */

static void test_cache(MatmulBF16Path path) {
    MatmulBF16 *mm = matmul_bf16_create(path);
    const int per = matmul_bf16_path(mm) == MATMUL_BF16_ONEDNN; /* primitives per new block shape */
    /* a and b fit in one block per product; c has full and tail blocks in all three products (2 row blocks + 44
     * rows, 2 dweight blocks + 2 output channels: kernels.h); d's forward and dinp blocks are c's (3 row blocks +
     * 44 rows, same IC and OC), its dweight blocks are not (their K is N) */
    const size_t R = MATMUL_ROW_BLOCK;
    const int D = MATMUL_DWEIGHT_BLOCK;
    Shape a = {33, 40, 24}, b = {8, 24, 40}, c = {2 * R + 44, 40, 2 * D + 2}, d = {3 * R + 44, 40, 2 * D + 2};
    Problem pa = make_problem(a), pb = make_problem(b), pc = make_problem(c), pd = make_problem(d);
    Results ra = alloc_results(&pa), rb = alloc_results(&pb), rc = alloc_results(&pc), rd = alloc_results(&pd);
#define EXPECT_CREATED(n, what)                                                                                   \
    CHECK(matmul_bf16_primitives_created(mm) == (n) * per, "%s: %d primitives, want %d", what,                 \
           matmul_bf16_primitives_created(mm), (n) * per)
    EXPECT_CREATED(0, "a new cache");
    run_bf16(mm, &pa, &ra);
    EXPECT_CREATED(3, "first use of a shape (forward, dinp, dweight)");
    run_bf16(mm, &pa, &ra);
    EXPECT_CREATED(3, "second use of a shape");
    run_bf16(mm, &pb, &rb);
    EXPECT_CREATED(6, "a second shape");
    matmul_bf16_forward(mm, ra.out, pa.inp16, pa.weight16, NULL, a.N, a.IC, a.OC);
    EXPECT_CREATED(7, "forward without bias");
    matmul_bf16_backward(mm, NULL, ra.dweight, NULL, pa.dout, pa.inp16, pa.weight16, a.N, a.IC, a.OC);
    EXPECT_CREATED(7, "backward without dinp and dbias");
    omp_set_num_threads(1); /* not part of the key: every block is planned for one thread */
    run_bf16(mm, &pa, &ra);
    omp_set_num_threads(3);
    run_bf16(mm, &pa, &ra);
    EXPECT_CREATED(7, "a shape at 1 and 3 threads");
    omp_set_num_threads(omp_get_num_procs());
    run_bf16(mm, &pc, &rc);
    EXPECT_CREATED(13, "full and tail blocks of three products");
    run_bf16(mm, &pd, &rd);
    EXPECT_CREATED(15, "a shape sharing its forward and dinp blocks");
#undef EXPECT_CREATED
    printf("cache (%s): %d primitives for 4 shapes x 3 products (2 with tail blocks), 1 without bias, 1 shape at "
           "other thread counts\n",
           matmul_bf16_path_name(matmul_bf16_path(mm)), matmul_bf16_primitives_created(mm));
    Results *all[] = {&ra, &rb, &rc, &rd};
    Problem *problems[] = {&pa, &pb, &pc, &pd};
    for (int i = 0; i < 4; i++) {
        free_results(all[i]);
        free_problem(problems[i]);
    }
    matmul_bf16_free(mm);
}

/* ---- 4. thread counts ---- */

/* One shape at 1 thread, then at 2 and 3 (more threads than cores is fine:
 * the claim is about the thread count, not the cores), from the same start. */
static void test_threads_shape(MatmulBF16 *mm, Shape s) {
    Problem p = make_problem(s);
    Results r[3] = {alloc_results(&p), alloc_results(&p), alloc_results(&p)};
    for (int t = 0; t < 3; t++) {
        omp_set_num_threads(t + 1);
        run_bf16(mm, &p, &r[t]);
    }
    omp_set_num_threads(omp_get_num_procs());
    const char *name = matmul_bf16_path_name(matmul_bf16_path(mm));
    for (int t = 1; t < 3; t++) {
        CHECK(memcmp(r[0].out, r[t].out, s.N * s.OC * sizeof(float)) == 0, "%s %zux%dx%d: out differs at 1 and %d "
              "threads", name, s.N, s.IC, s.OC, t + 1);
        CHECK(memcmp(r[0].dinp, r[t].dinp, s.N * s.IC * sizeof(float)) == 0, "%s %zux%dx%d: dinp differs at 1 and %d "
              "threads", name, s.N, s.IC, s.OC, t + 1);
        CHECK(memcmp(r[0].dweight, r[t].dweight, (size_t)s.OC * s.IC * sizeof(float)) == 0,
              "%s %zux%dx%d: dweight differs at 1 and %d threads", name, s.N, s.IC, s.OC, t + 1);
        CHECK(memcmp(r[0].dbias, r[t].dbias, (size_t)s.OC * sizeof(float)) == 0,
              "%s %zux%dx%d: dbias differs at 1 and %d threads", name, s.N, s.IC, s.OC, t + 1);
    }
    printf("threads (%s) %zux%dx%d: 1, 2 and 3 threads give the same bits\n", name, s.N, s.IC, s.OC);
    for (int t = 0; t < 3; t++) free_results(&r[t]);
    free_problem(&p);
}

static void test_threads(MatmulBF16Path path) {
    /* the model's small shapes, one with full and tail blocks in every product, and the engine benchmark's qkv
     * layer */
    const Shape shapes[] = {{17, 31, 47},
                            {64, 1536, 100},
                            {512, 64, 192},
                            {MATMUL_ROW_BLOCK + 44, 40, MATMUL_DWEIGHT_BLOCK + 2},
                            {2048, 384, 1152}};
    MatmulBF16 *mm = matmul_bf16_create(path);
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) test_threads_shape(mm, shapes[i]);
    matmul_bf16_free(mm);
}

/* ---- 5. bf16 values in floats ---- */

static float *rounded_copy(const float *x, size_t n) {
    float *r = malloc(n * sizeof *r);
    bf16_round_floats(r, x, n);
    return r;
}

static void test_rounded(MatmulBF16Path path, Shape s) {
    MatmulBF16 *mm = matmul_bf16_create(path);
    Problem p = make_problem(s);
    Results typed = alloc_results(&p), floats = alloc_results(&p);
    float *inp = rounded_copy(p.inp, s.N * s.IC), *weight = rounded_copy(p.weight, (size_t)s.OC * s.IC);
    float *dout = rounded_copy(p.dout, s.N * s.OC);
    run_bf16(mm, &p, &typed);
    matmul_bf16_forward_rounded(mm, floats.out, inp, weight, p.bias, s.N, s.IC, s.OC);
    matmul_bf16_backward_rounded(mm, floats.dinp, floats.dweight, dout, inp, weight, s.N, s.IC, s.OC);
    const char *name = matmul_bf16_path_name(matmul_bf16_path(mm));
    CHECK(memcmp(typed.out, floats.out, s.N * s.OC * sizeof(float)) == 0, "%s rounded: out differs", name);
    CHECK(memcmp(typed.dinp, floats.dinp, s.N * s.IC * sizeof(float)) == 0, "%s rounded: dinp differs", name);
    CHECK(memcmp(typed.dweight, floats.dweight, (size_t)s.OC * s.IC * sizeof(float)) == 0,
           "%s rounded: dweight differs", name);
    printf("rounded (%s) %zux%dx%d: the bits of the bf16-typed calls\n", name, s.N, s.IC, s.OC);
    free(inp);
    free(weight);
    free(dout);
    free_results(&typed);
    free_results(&floats);
    free_problem(&p);
    matmul_bf16_free(mm);
}

/* ---- 6. AUTO ---- */

static void test_auto(bool onednn_available) {
    MatmulBF16 *mm = matmul_bf16_create(MATMUL_BF16_AUTO);
    MatmulBF16Path picked = matmul_bf16_path(mm);
    CHECK(onednn_available || picked == MATMUL_BF16_WIDEN, "auto picked %s where oneDNN has no bf16 matmul",
          matmul_bf16_path_name(picked));
    printf("auto: %s (oneDNN ISA %s: bf16 matmul %s, bf16 arithmetic %s)\n", matmul_bf16_path_name(picked),
           matmul_bf16_cpu_isa(), onednn_available ? "available" : "unavailable",
           matmul_bf16_cpu_has_bf16() ? "yes" : "no");
    matmul_bf16_free(mm);
}

int main(int argc, char **argv) {
    const bool onednn = argc > 1 && strcmp(argv[1], "onednn") == 0, widen = argc > 1 && strcmp(argv[1], "widen") == 0;
    const bool exhaustive = argc > 2 && strcmp(argv[2], "--exhaustive") == 0;
    if ((!onednn && !widen) || argc > 3 || (argc == 3 && !exhaustive)) {
        fprintf(stderr, "usage: test_bf16 onednn|widen [--exhaustive]\n");
        return 2;
    }
    const bool available = matmul_bf16_onednn_available();
    if (onednn && !available) {
        printf("SKIP: oneDNN (effective ISA %s) has no bf16 matmul below AVX-512: the onednn path cannot run on "
               "this CPU; the widen path is tested by bf16_kernels\n",
               matmul_bf16_cpu_isa());
        return SKIP_CODE;
    }
    const MatmulBF16Path path = onednn ? MATMUL_BF16_ONEDNN : MATMUL_BF16_WIDEN;
    if (widen) {
        test_conversion(exhaustive);
        test_auto(available);
    }
    const Shape shapes[] = {{1, 1, 1}, {1, 64, 3}, {3, 1, 7}, {17, 31, 47}, {100, 129, 65}, {64, 1536, 100},
                            {128, 384, 384}, {512, 64, 192}, {512, 256, 64}, {512, 64, 320},
                            {MATMUL_ROW_BLOCK + 44, 40, MATMUL_DWEIGHT_BLOCK + 2}}; /* the last: full and tail blocks */
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) test_layer(path, shapes[i]);
    test_cache(path);
    test_threads(path);
    test_rounded(path, shapes[3]);
    test_rounded(path, shapes[6]);
    test_rounded(path, shapes[10]);
    if (failures) {
        fprintf(stderr, "%d failures\n", failures);
        return 1;
    }
    printf("all bf16 kernel checks on the %s path passed\n", matmul_bf16_path_name(path));
    return 0;
}

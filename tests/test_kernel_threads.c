/* test_kernel_threads.c: the fp32 kernels give the same bits at 1, 2 and 3
 * OpenMP threads, on the model's own shapes (small, odd, and across the
 * matmul's block edges), and the blocked linear layer is right: each product
 * is within the worst-case fp32 summation bound of a double-precision
 * product computed here by the definition.
 *
 * Why several shapes: OpenBLAS's edge tiles sum K in another order than its
 * inner tiles, and which tile covers an element depends on how the matrix is
 * cut; a large shape can pass where a small one does not. Runs on one core
 * too (3 threads on 1 core still cut the work in 3). Prints the OpenBLAS
 * kernel in use, since that is what decides the bits. */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernels/blas_cpu.h"
#include "kernels/kernels.h"

static const int THREADS[] = {1, 2, 3};
enum { NUM_THREADS = sizeof THREADS / sizeof THREADS[0] };

static float *random_floats(size_t n, uint64_t *state) {
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++) {
        *state = *state * 6364136223846793005ULL + 1442695040888963407ULL;
        x[i] = (float)((*state >> 40) / 16777216.0 - 0.5);
    }
    return x;
}

static float *copy_of(const float *x, size_t n) {
    float *c = malloc(n * sizeof *c);
    memcpy(c, x, n * sizeof *c);
    return c;
}

/* max over elements of |got - ref| / sum_k |a_k b_k|, with ref and the
 * magnitudes in double: C (M,N) = A (M,K) B (K,N) + C0, given as strided
 * row-major reads so one routine checks all three products. */
typedef struct {
    const float *a, *b, *c0; /* c0 may be NULL */
    size_t a_row, a_k, b_k, b_col; /* strides: A[m,k] = a[m*a_row + k*a_k], B[k,n] = b[k*b_k + n*b_col] */
    size_t M, N, K;
} Product;

static double worst_error(const Product *p, const float *got) {
    double worst = 0;
    for (size_t m = 0; m < p->M; m++)
        for (size_t n = 0; n < p->N; n++) {
            double sum = p->c0 ? p->c0[m * p->N + n] : 0, mag = p->c0 ? fabs(p->c0[m * p->N + n]) : 0;
            for (size_t k = 0; k < p->K; k++) {
                double t = (double)p->a[m * p->a_row + k * p->a_k] * p->b[k * p->b_k + n * p->b_col];
                sum += t;
                mag += fabs(t);
            }
            double e = mag > 0 ? fabs(got[m * p->N + n] - sum) / mag : fabs(got[m * p->N + n] - sum);
            if (e > worst) worst = e;
        }
    return worst;
}

/* The worst-case relative error of a K-term fp32 sum (plus one addend):
 * gamma_{K+1} = (K+1)u / (1 - (K+1)u), u = 2^-24 (Higham, Accuracy and
 * Stability of Numerical Algorithms, eq. 3.4). Any summation order meets it. */
static double sum_bound(size_t K) {
    const double ku = (double)(K + 1) * 0x1p-24;
    return ku / (1 - ku);
}

/* the double reference costs N*IC*OC multiply-adds per product: skipped above this */
enum { REFERENCE_MAX_WORK = 120000000 };

/* out = inp @ weight^T + bias (bias as the addend of every row), dinp = dout @ weight,
 * dweight = dweight0 + dout^T @ inp, each against the definition in double */
static void check_against_reference(size_t N, int IC, int OC, const float *inp, const float *weight,
                                    const float *bias, const float *dout, const float *dweight0, const float *out,
                                    const float *dinp, const float *dweight) {
    float *bias_rows = malloc(N * OC * sizeof(float));
    for (size_t i = 0; i < N; i++) memcpy(bias_rows + i * OC, bias, (size_t)OC * sizeof(float));
    Product fwd = {inp, weight, bias_rows, IC, 1, 1, IC, N, OC, IC};
    Product di = {dout, weight, NULL, OC, 1, IC, 1, N, IC, OC};
    Product dw = {dout, inp, dweight0, 1, OC, IC, 1, OC, IC, N};
    double e_out = worst_error(&fwd, out), e_dinp = worst_error(&di, dinp), e_dw = worst_error(&dw, dweight);
    CHECK(e_out <= sum_bound(IC), "%zux%dx%d: out error %.2e > bound %.2e", N, IC, OC, e_out, sum_bound(IC));
    CHECK(e_dinp <= sum_bound(OC), "%zux%dx%d: dinp error %.2e > bound %.2e", N, IC, OC, e_dinp, sum_bound(OC));
    CHECK(e_dw <= sum_bound(N), "%zux%dx%d: dweight error %.2e > bound %.2e", N, IC, OC, e_dw, sum_bound(N));
    printf("linear %5zux%4dx%4d: same bits at 1/2/3 threads; error / sum|ab|: out %.1e, dinp %.1e, dweight %.1e "
           "(bounds %.1e %.1e %.1e)\n", N, IC, OC, e_out, e_dinp, e_dw, sum_bound(IC), sum_bound(OC), sum_bound(N));
    free(bias_rows);
}

static void test_linear(size_t N, int IC, int OC) {
    uint64_t rng = 42 + N * 7919 + (size_t)IC * 31 + (size_t)OC;
    float *inp = random_floats(N * IC, &rng), *weight = random_floats((size_t)OC * IC, &rng);
    float *bias = random_floats((size_t)OC, &rng), *dout = random_floats(N * OC, &rng);
    float *dweight0 = random_floats((size_t)OC * IC, &rng), *dbias0 = random_floats((size_t)OC, &rng);
    float *out[NUM_THREADS], *dinp[NUM_THREADS], *dweight[NUM_THREADS], *dbias[NUM_THREADS];
    for (int t = 0; t < NUM_THREADS; t++) {
        omp_set_num_threads(THREADS[t]);
        out[t] = malloc(N * OC * sizeof(float));
        dinp[t] = malloc(N * IC * sizeof(float));
        dweight[t] = copy_of(dweight0, (size_t)OC * IC);
        dbias[t] = copy_of(dbias0, (size_t)OC);
        matmul_forward(out[t], inp, weight, bias, N, IC, OC);
        matmul_backward(dinp[t], dweight[t], dbias[t], dout, inp, weight, N, IC, OC);
    }
    for (int t = 1; t < NUM_THREADS; t++) {
        CHECK(memcmp(out[0], out[t], N * OC * sizeof(float)) == 0, "%zux%dx%d: out differs at 1 and %d threads", N,
              IC, OC, THREADS[t]);
        CHECK(memcmp(dinp[0], dinp[t], N * IC * sizeof(float)) == 0, "%zux%dx%d: dinp differs at 1 and %d threads",
              N, IC, OC, THREADS[t]);
        CHECK(memcmp(dweight[0], dweight[t], (size_t)OC * IC * sizeof(float)) == 0,
              "%zux%dx%d: dweight differs at 1 and %d threads", N, IC, OC, THREADS[t]);
        CHECK(memcmp(dbias[0], dbias[t], (size_t)OC * sizeof(float)) == 0,
              "%zux%dx%d: dbias differs at 1 and %d threads", N, IC, OC, THREADS[t]);
    }
    if (N * IC * OC <= REFERENCE_MAX_WORK) check_against_reference(N, IC, OC, inp, weight, bias, dout, dweight0,
                                                                    out[0], dinp[0], dweight[0]);
    else printf("linear %5zux%4dx%4d: same bits at 1/2/3 threads (no double reference at this size)\n", N, IC, OC);
    for (int t = 0; t < NUM_THREADS; t++) {
        free(out[t]);
        free(dinp[t]);
        free(dweight[t]);
        free(dbias[t]);
    }
    free(inp);
    free(weight);
    free(bias);
    free(dout);
    free(dweight0);
    free(dbias0);
}

/* attention forward and backward, and layernorm, at the three thread counts */
static void test_attention(int B, int T, int C, int H) {
    uint64_t rng = 7 + (uint64_t)B * T * C * H;
    const size_t n = (size_t)B * T * C, natt = (size_t)B * H * T * T;
    float *qkv = random_floats(3 * n, &rng), *dout = random_floats(n, &rng);
    float *out[NUM_THREADS], *att[NUM_THREADS], *dqkv[NUM_THREADS];
    float *scratch = malloc((size_t)THREADS[NUM_THREADS - 1] * T * T * sizeof(float));
    for (int t = 0; t < NUM_THREADS; t++) {
        omp_set_num_threads(THREADS[t]);
        out[t] = malloc(n * sizeof(float));
        att[t] = malloc(natt * sizeof(float));
        dqkv[t] = malloc(3 * n * sizeof(float));
        attention_forward(out[t], att[t], qkv, B, T, C, H);
        attention_backward(dqkv[t], scratch, THREADS[NUM_THREADS - 1], dout, qkv, att[t], B, T, C, H);
    }
    for (int t = 1; t < NUM_THREADS; t++) {
        CHECK(memcmp(out[0], out[t], n * sizeof(float)) == 0, "attention B%d T%d C%d H%d: out differs at %d threads",
              B, T, C, H, THREADS[t]);
        CHECK(memcmp(dqkv[0], dqkv[t], 3 * n * sizeof(float)) == 0,
              "attention B%d T%d C%d H%d: dqkv differs at %d threads", B, T, C, H, THREADS[t]);
    }
    printf("attention B%d T%d C%d H%d: same bits at 1/2/3 threads\n", B, T, C, H);
    for (int t = 0; t < NUM_THREADS; t++) {
        free(out[t]);
        free(att[t]);
        free(dqkv[t]);
    }
    free(scratch);
    free(qkv);
    free(dout);
}

static void test_layernorm(size_t N, int C) {
    uint64_t rng = 99 + N * C;
    float *inp = random_floats(N * C, &rng), *w = random_floats((size_t)C, &rng), *b = random_floats((size_t)C, &rng);
    float *dout = random_floats(N * C, &rng);
    float *res[NUM_THREADS][3];
    for (int t = 0; t < NUM_THREADS; t++) {
        omp_set_num_threads(THREADS[t]);
        float *out = malloc(N * C * sizeof(float)), *mean = malloc(N * sizeof(float)), *rstd = malloc(N * sizeof(float));
        res[t][0] = calloc(N * C, sizeof(float));
        res[t][1] = calloc((size_t)C, sizeof(float));
        res[t][2] = calloc((size_t)C, sizeof(float));
        layernorm_forward(out, mean, rstd, inp, w, b, N, C);
        layernorm_backward(res[t][0], res[t][1], res[t][2], dout, inp, w, mean, rstd, N, C);
        free(out);
        free(mean);
        free(rstd);
    }
    for (int t = 1; t < NUM_THREADS; t++)
        CHECK(memcmp(res[0][0], res[t][0], N * C * sizeof(float)) == 0 &&
                  memcmp(res[0][1], res[t][1], (size_t)C * sizeof(float)) == 0 &&
                  memcmp(res[0][2], res[t][2], (size_t)C * sizeof(float)) == 0,
              "layernorm %zux%d: gradients differ at %d threads", N, C, THREADS[t]);
    printf("layernorm %zux%d: same bits at 1/2/3 threads\n", N, C);
    for (int t = 0; t < NUM_THREADS; t++)
        for (int k = 0; k < 3; k++) free(res[t][k]);
    free(inp);
    free(w);
    free(b);
    free(dout);
}

int main(int argc, char **argv) {
    (void)argc;
    blas_ensure_cpu_kernels(argv);
    printf("OpenBLAS kernel: %s (OPENBLAS_CORETYPE=%s); blocks: %d rows, %d output channels\n",
           openblas_get_corename(), getenv("OPENBLAS_CORETYPE") ? getenv("OPENBLAS_CORETYPE") : "unset",
           MATMUL_ROW_BLOCK, MATMUL_DWEIGHT_BLOCK);
    /* (N, IC, OC): tiny and odd; the test models' layers (B*T = 64..256 rows, C = 32..64);
     * across the block edges (N and OC not multiples of the blocks); the engine benchmark's qkv */
    const size_t shapes[][3] = {{1, 1, 1},     {3, 1, 7},      {17, 31, 47},    {64, 32, 96},  {64, 128, 32},
                                {128, 96, 32}, {256, 64, 257}, {64, 1536, 100}, {512, 64, 192}, {1100, 96, 700},
                                {2048, 384, 1152}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        test_linear(shapes[i][0], (int)shapes[i][1], (int)shapes[i][2]);
    test_attention(2, 32, 32, 2);
    test_attention(3, 96, 64, 4);
    test_attention(1, 256, 384, 6);
    test_layernorm(64, 32);
    test_layernorm(2048, 384);
    omp_set_num_threads(omp_get_num_procs());
    if (failures) {
        fprintf(stderr, "%d failures\n", failures);
        return 1;
    }
    printf("all kernel thread checks passed\n");
    return 0;
}

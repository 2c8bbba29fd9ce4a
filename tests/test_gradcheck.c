/* test_gradcheck.c: finite-difference gradient checks of every kernel, in
 * double precision. The kernel sources are compiled into this test with
 * BS_REAL_DOUBLE (see src/kernels/real.h), so the code checked is the code
 * that trains, with float replaced by double.
 *
 * For each kernel: a random input x and random weights w define the scalar
 * L(x) = sum(forward(x) * w); backward with dout = w must equal central
 * differences (L(x + h e_i) - L(x - h e_i)) / 2h, h = 1e-5, within 1e-6
 * relative to the largest gradient (truncation error is O(h^2) = 1e-10). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "check.h"

static unsigned long long rng_state = 88172645463325252ULL;
static double uniform(void) { /* xorshift64, test-local */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}
/* Every buffer of the test is kept here and freed at the end (for LeakSanitizer). */
static void *owned[256];
static int num_owned = 0;
static void *keep(void *p) {
    if (num_owned < 256) owned[num_owned++] = p;
    return p;
}
#define malloc(n) keep(malloc(n))
#define calloc(n, s) keep(calloc(n, s))

static double *rand_vec(size_t n, double scale) {
    double *v = malloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) v[i] = scale * uniform();
    return v;
}
static double dot(const double *a, const double *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

static void compare(const char *what, const double *analytic, const double *numeric, size_t n) {
    double max_err = 0, max_ref = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs(analytic[i] - numeric[i]);
        if (e > max_err) max_err = e;
        if (fabs(numeric[i]) > max_ref) max_ref = fabs(numeric[i]);
    }
    double rel = max_err / (max_ref > 0 ? max_ref : 1);
    int ok = rel < 1e-6 && max_ref > 0;
    printf("%s %-28s rel err %.2e (max |grad| %.2e)\n", ok ? "ok  " : "FAIL", what, rel, max_ref);
    if (!ok) failures++;
}

/* A kernel under test: evaluates L for the current parameter values. */
typedef double (*LossFn)(void *ctx);

static void numeric_grad(LossFn f, void *ctx, double *x, size_t n, double *out) {
    const double h = 1e-5;
    for (size_t i = 0; i < n; i++) {
        double saved = x[i];
        x[i] = saved + h;
        double lp = f(ctx);
        x[i] = saved - h;
        double lm = f(ctx);
        x[i] = saved;
        out[i] = (lp - lm) / (2 * h);
    }
}

/* ---- layernorm ---- */
typedef struct { size_t N; int C; double *x, *w, *b, *out, *mean, *rstd, *dout; } LnCtx;
static double ln_loss(void *p) {
    LnCtx *c = p;
    layernorm_forward(c->out, c->mean, c->rstd, c->x, c->w, c->b, c->N, c->C);
    return dot(c->out, c->dout, c->N * c->C);
}
static void check_layernorm(void) {
    LnCtx c = {.N = 5, .C = 7};
    size_t n = c.N * c.C;
    c.x = rand_vec(n, 2.0), c.w = rand_vec(c.C, 1.0), c.b = rand_vec(c.C, 1.0), c.dout = rand_vec(n, 1.0);
    c.out = malloc(n * 8), c.mean = malloc(c.N * 8), c.rstd = malloc(c.N * 8);
    double *dx = calloc(n, 8), *dw = calloc(c.C, 8), *db = calloc(c.C, 8), *num = malloc(n * 8);
    ln_loss(&c);
    layernorm_backward(dx, dw, db, c.dout, c.x, c.w, c.mean, c.rstd, c.N, c.C);
    numeric_grad(ln_loss, &c, c.x, n, num);
    compare("layernorm dinp", dx, num, n);
    numeric_grad(ln_loss, &c, c.w, c.C, num);
    compare("layernorm dweight", dw, num, c.C);
    numeric_grad(ln_loss, &c, c.b, c.C, num);
    compare("layernorm dbias", db, num, c.C);
}

/* ---- matmul ---- */
typedef struct { size_t N; int IC, OC; double *x, *w, *b, *out, *dout; } MmCtx;
static double mm_loss(void *p) {
    MmCtx *c = p;
    matmul_forward(c->out, c->x, c->w, c->b, c->N, c->IC, c->OC);
    return dot(c->out, c->dout, c->N * c->OC);
}
static void check_matmul(void) {
    MmCtx c = {.N = 6, .IC = 5, .OC = 9};
    c.x = rand_vec(c.N * c.IC, 1), c.w = rand_vec((size_t)c.OC * c.IC, 1), c.b = rand_vec(c.OC, 1);
    c.dout = rand_vec(c.N * c.OC, 1), c.out = malloc(c.N * c.OC * 8);
    double *dx = malloc(c.N * c.IC * 8), *dw = calloc((size_t)c.OC * c.IC, 8), *db = calloc(c.OC, 8);
    double *num = malloc((size_t)c.OC * c.IC * 8 + c.N * c.IC * 8);
    matmul_backward(dx, dw, db, c.dout, c.x, c.w, c.N, c.IC, c.OC);
    numeric_grad(mm_loss, &c, c.x, c.N * c.IC, num);
    compare("matmul dinp", dx, num, c.N * c.IC);
    numeric_grad(mm_loss, &c, c.w, (size_t)c.OC * c.IC, num);
    compare("matmul dweight", dw, num, (size_t)c.OC * c.IC);
    numeric_grad(mm_loss, &c, c.b, c.OC, num);
    compare("matmul dbias", db, num, c.OC);
}

/* ---- attention ---- */
typedef struct { int B, T, C, H; double *qkv, *out, *att, *dout; } AttCtx;
static double att_loss(void *p) {
    AttCtx *c = p;
    attention_forward(c->out, c->att, c->qkv, c->B, c->T, c->C, c->H);
    return dot(c->out, c->dout, (size_t)c->B * c->T * c->C);
}
static void check_attention(int B, int T, int C, int H) {
    AttCtx c = {.B = B, .T = T, .C = C, .H = H};
    size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C;
    c.qkv = rand_vec(nq, 1.5), c.dout = rand_vec(no, 1), c.out = malloc(no * 8);
    c.att = malloc((size_t)B * H * T * T * 8);
    double *dqkv = malloc(nq * 8), *num = malloc(nq * 8);
    int slots = 2;
    double *scratch = malloc((size_t)slots * T * T * 8);
    att_loss(&c);
    attention_backward(dqkv, scratch, slots, c.dout, c.qkv, c.att, B, T, C, H);
    numeric_grad(att_loss, &c, c.qkv, nq, num);
    char label[64];
    snprintf(label, sizeof label, "attention dqkv T=%d H=%d", T, H);
    compare(label, dqkv, num, nq);
}

/* ---- gelu ---- */
typedef struct { size_t N; double *x, *out, *dout; } GeluCtx;
static double gelu_loss(void *p) {
    GeluCtx *c = p;
    gelu_forward(c->out, c->x, c->N);
    return dot(c->out, c->dout, c->N);
}
static void check_gelu(void) {
    GeluCtx c = {.N = 40};
    c.x = rand_vec(c.N, 4), c.dout = rand_vec(c.N, 1), c.out = malloc(c.N * 8);
    double *dx = malloc(c.N * 8), *num = malloc(c.N * 8);
    gelu_backward(dx, c.x, c.dout, c.N);
    numeric_grad(gelu_loss, &c, c.x, c.N, num);
    compare("gelu dinp", dx, num, c.N);
}

/* ---- softmax cross-entropy (fused) ---- */
typedef struct { size_t N; int V, Vp; double *logits, *work, *losses; int32_t *targets; } XentCtx;
static double xent_loss(void *p) {
    XentCtx *c = p;
    memcpy(c->work, c->logits, c->N * c->Vp * 8);
    return softmax_xent_forward_backward(c->work, c->losses, c->targets, c->N, c->V, c->Vp, 0) / (double)c->N;
}
static void check_softmax_xent(void) {
    XentCtx c = {.N = 4, .V = 11, .Vp = 16};
    size_t n = c.N * c.Vp;
    c.logits = rand_vec(n, 3), c.work = malloc(n * 8), c.losses = malloc(c.N * 8);
    c.targets = malloc(c.N * sizeof(int32_t));
    for (size_t i = 0; i < c.N; i++) c.targets[i] = (int32_t)(i * 3 % c.V);
    double *grad = malloc(n * 8), *num = malloc(n * 8);
    memcpy(grad, c.logits, n * 8);
    softmax_xent_forward_backward(grad, c.losses, c.targets, c.N, c.V, c.Vp, 1.0 / (double)c.N);
    numeric_grad(xent_loss, &c, c.logits, n, num);
    compare("softmax-xent dlogits", grad, num, n);
    for (size_t i = 0; i < c.N; i++)
        for (int j = c.V; j < c.Vp; j++)
            if (grad[i * c.Vp + j] != 0) { printf("FAIL padded logit gradient not 0\n"); failures++; }
}

/* ---- encoder ---- */
typedef struct { int B, T, C; int32_t *tokens; double *wte, *wpe, *out, *dout; } EncCtx;
static double enc_loss(void *p) {
    EncCtx *c = p;
    encoder_forward(c->out, c->tokens, c->wte, c->wpe, NULL, 0, 4, c->B, c->T, c->C);
    return dot(c->out, c->dout, (size_t)c->B * c->T * c->C);
}
static void check_encoder(void) {
    EncCtx c = {.B = 2, .T = 5, .C = 3};
    int V = 4;
    c.tokens = malloc(10 * sizeof(int32_t));
    for (int i = 0; i < 10; i++) c.tokens[i] = i % 3; /* repeated tokens, token 3 unused */
    c.wte = rand_vec((size_t)V * c.C, 1), c.wpe = rand_vec((size_t)c.T * c.C, 1);
    c.dout = rand_vec(30, 1), c.out = malloc(30 * 8);
    double *dwte = calloc((size_t)V * c.C, 8), *dwpe = calloc((size_t)c.T * c.C, 8), *num = malloc(64 * 8);
    encoder_backward(dwte, dwpe, c.dout, c.tokens, NULL, 0, V, c.B, c.T, c.C);
    numeric_grad(enc_loss, &c, c.wte, (size_t)3 * c.C, num); /* rows of used tokens */
    compare("encoder dwte", dwte, num, (size_t)3 * c.C);
    numeric_grad(enc_loss, &c, c.wpe, (size_t)c.T * c.C, num);
    compare("encoder dwpe", dwpe, num, (size_t)c.T * c.C);
}

int main(void) {
    check_layernorm();
    check_matmul();
    check_attention(2, 5, 8, 2);
    check_attention(1, 70, 6, 3); /* crosses the 64-row attention block */
    check_attention(1, 1, 4, 1);
    check_gelu();
    check_softmax_xent();
    check_encoder();
    for (int i = 0; i < num_owned; i++) free(owned[i]);
    if (failures) printf("%d gradient check(s) FAILED\n", failures);
    else printf("all gradient checks passed\n");
    return failures ? 1 : 0;
}

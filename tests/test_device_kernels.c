/* test_device_kernels.c: every device kernel against its CPU counterpart
 * (kernels/kernels.h, optim/) at the test model's shapes (L4 H4 C64 T64,
 * micro-batch 4, a padded vocabulary). `test_device_kernels sim` runs the
 * CUDA kernels' arithmetic on the host (CI); `test_device_kernels cuda` runs
 * the kernels themselves (skipped, exit 77, without a GPU).
 *
 * fp32: each output within 1e-5 of the CPU's, relative to the output's
 * largest magnitude (the sums run in other orders; an elementwise relative
 * bound would fail on outputs that cancel to near 0). bf16 products: each
 * element within the bound of its operands' bf16 rounding (below). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/rng.h"
#include "device_harness.h"
#include "kernels/bf16.h"
#include "kernels/kernels.h"
#include "optim/adamw.h"
#include "optim/grad_norm.h"

enum { B = 4, T = 64, C = 64, H = 4, V = 250, VP = 256, N = B * T };
static const double FP32_BOUND = 1e-5;

static Rng rng;

/* The test's host buffers, freed together at the end (host_free_all). */
enum { HOST_MAX = 256 };
static void *host_buffers[HOST_MAX];
static int host_count;

static void *host_alloc(size_t n) {
    void *p = malloc(n);
    if (!p || host_count == HOST_MAX) {
        printf("FAIL: host_alloc(%zu)\n", n);
        exit(1);
    }
    return host_buffers[host_count++] = p;
}

static void host_free_all(void) {
    while (host_count > 0) free(host_buffers[--host_count]);
}

static float *random_floats(size_t n, float scale) {
    float *x = host_alloc(sizeof *x * n);
    for (size_t i = 0; i < n; i++) x[i] = (2 * rng_uniform(&rng) - 1) * scale;
    return x;
}

/* The device buffer dev (n floats) against want. */
static void expect_close(Harness *h, const char *what, const float *dev, const float *want, size_t n) {
    float *got = malloc(sizeof *got * n);
    harness_download(h, got, dev, sizeof *got * n);
    double err = harness_relative_error(got, want, n);
    printf("%-28s relative error %.3g (bound %.0e)\n", what, err, FP32_BOUND);
    CHECK(err <= FP32_BOUND, "%s: relative error %g > %g", what, err, FP32_BOUND);
    free(got);
}

static float *up(Harness *h, const float *x, size_t n) { return harness_upload(h, x, sizeof *x * n); }

/* documents: each row starts new ones at two positions */
static void document_starts(int32_t doc_start[N]) {
    for (int b = 0; b < B; b++)
        for (int t = 0, start = 0; t < T; t++) {
            if (t == 11 + 7 * b || t == 40 - b) start = t;
            doc_start[b * T + t] = start;
        }
}

/* docs: positions restart at each document's start (as gpt.c's packed documents) */
static void test_encoder(Harness *h, int docs) {
    int32_t tokens[N], doc_start[N], positions[N];
    document_starts(doc_start);
    for (int i = 0; i < N; i++) positions[i] = i % T - doc_start[i];
    for (int i = 0; i < N; i++) tokens[i] = (int32_t)rng_below(&rng, i % 7 ? V : 3); /* repeats too */
    float *wte = random_floats((size_t)V * C, 1), *wpe = random_floats((size_t)T * C, 1);
    float *out = host_alloc(sizeof *out * N * C), *dout = random_floats((size_t)N * C, 1);
    float *dwte = random_floats((size_t)V * C, 1), *dwpe = random_floats((size_t)T * C, 1);
    DeviceCall call = {.kernel = DK_ENCODER_FORWARD};
    call.a.encoder = (EncoderArgs){harness_alloc(h, sizeof(float) * N * C), up(h, dwte, (size_t)V * C),
                                   up(h, dwpe, (size_t)T * C), up(h, wte, (size_t)V * C), up(h, wpe, (size_t)T * C),
                                   up(h, dout, (size_t)N * C), harness_upload(h, tokens, sizeof tokens),
                                   docs ? harness_upload(h, doc_start, sizeof doc_start) : NULL, NULL, B, T, C, V};
    harness_launch(h, &call);
    encoder_forward(out, tokens, wte, wpe, docs ? positions : NULL, 0, V, B, T, C);
    expect_close(h, docs ? "encoder forward docs" : "encoder forward", call.a.encoder.out, out, (size_t)N * C);
    call.kernel = DK_ENCODER_BACKWARD;
    harness_launch(h, &call);
    encoder_backward(dwte, dwpe, dout, tokens, docs ? positions : NULL, 0, V, B, T, C);
    expect_close(h, docs ? "encoder backward docs dwte" : "encoder backward dwte", call.a.encoder.dwte, dwte, (size_t)V * C);
    expect_close(h, docs ? "encoder backward docs dwpe" : "encoder backward dwpe", call.a.encoder.dwpe, dwpe, (size_t)T * C);
}

static void test_layernorm(Harness *h) {
    float *inp = random_floats((size_t)N * C, 2), *w = random_floats(C, 1), *b = random_floats(C, 1);
    float *out = host_alloc(sizeof *out * N * C), mean[N], rstd[N], *dout = random_floats((size_t)N * C, 1);
    float *dinp = random_floats((size_t)N * C, 1), *dw = random_floats(C, 1), *db = random_floats(C, 1);
    DeviceCall call = {.kernel = DK_LAYERNORM_FORWARD};
    call.a.layernorm = (LayernormArgs){harness_alloc(h, sizeof(float) * N * C), harness_alloc(h, sizeof mean),
                                       harness_alloc(h, sizeof rstd), up(h, dinp, (size_t)N * C), up(h, dw, C),
                                       up(h, db, C), up(h, inp, (size_t)N * C), up(h, w, C), up(h, b, C),
                                       up(h, dout, (size_t)N * C), N, C};
    harness_launch(h, &call);
    layernorm_forward(out, mean, rstd, inp, w, b, N, C);
    expect_close(h, "layernorm forward", call.a.layernorm.out, out, (size_t)N * C);
    expect_close(h, "layernorm forward mean", call.a.layernorm.mean, mean, N);
    expect_close(h, "layernorm forward rstd", call.a.layernorm.rstd, rstd, N);
    call.kernel = DK_LAYERNORM_BACKWARD;
    harness_launch(h, &call);
    layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
    expect_close(h, "layernorm backward dinp", call.a.layernorm.dinp, dinp, (size_t)N * C);
    expect_close(h, "layernorm backward dweight", call.a.layernorm.dweight, dw, C);
    expect_close(h, "layernorm backward dbias", call.a.layernorm.dbias, db, C);
}

static void test_elementwise(Harness *h) {
    const size_t n = (size_t)N * 4 * C;
    float *x = random_floats(n, 4), *y = random_floats(n, 1), *want = host_alloc(sizeof *want * n);
    DeviceCall call = {.kernel = DK_GELU_FORWARD};
    call.a.elementwise = (ElementwiseArgs){harness_alloc(h, sizeof(float) * n), up(h, x, n), up(h, y, n), n};
    harness_launch(h, &call);
    gelu_forward(want, x, n);
    expect_close(h, "gelu forward", call.a.elementwise.out, want, n);
    call.kernel = DK_GELU_BACKWARD;
    harness_launch(h, &call);
    gelu_backward(want, x, y, n);
    expect_close(h, "gelu backward", call.a.elementwise.out, want, n);
    call.kernel = DK_RESIDUAL_FORWARD;
    harness_launch(h, &call);
    residual_forward(want, x, y, n);
    expect_close(h, "residual forward", call.a.elementwise.out, want, n);
}

/* docs: attention inside documents (document_starts), or plain causal */
static void test_attention(Harness *h, int docs) {
    const size_t nqkv = (size_t)N * 3 * C, natt = (size_t)B * H * T * T;
    int32_t doc_start[N];
    document_starts(doc_start);
    float *qkv = random_floats(nqkv, 1), *dout = random_floats((size_t)N * C, 1);
    float *out = host_alloc(sizeof *out * N * C), *att = host_alloc(sizeof *att * natt);
    float *dqkv = host_alloc(sizeof *dqkv * nqkv), *scratch = host_alloc(sizeof *scratch * T * T);
    DeviceCall call = {.kernel = DK_ATTENTION_FORWARD};
    call.a.attention = (AttentionArgs){harness_alloc(h, sizeof(float) * N * C), harness_alloc(h, sizeof(float) * natt),
                                       harness_alloc(h, sizeof(float) * nqkv), harness_alloc(h, sizeof(float) * natt),
                                       up(h, qkv, nqkv), up(h, dout, (size_t)N * C),
                                       docs ? harness_upload(h, doc_start, sizeof doc_start) : NULL, B, T, C, H};
    harness_launch(h, &call);
    attention_forward_docs(out, att, qkv, docs ? doc_start : NULL, B, T, C, H);
    expect_close(h, docs ? "attention forward docs" : "attention forward", call.a.attention.out, out, (size_t)N * C);
    expect_close(h, docs ? "attention forward docs P" : "attention forward P", call.a.attention.att, att, natt);
    call.kernel = DK_ATTENTION_BACKWARD;
    harness_launch(h, &call);
    attention_backward(dqkv, scratch, 1, dout, qkv, att, B, T, C, H);
    expect_close(h, docs ? "attention backward docs" : "attention backward", call.a.attention.dqkv, dqkv, nqkv);
}

static void test_softmax_xent(Harness *h) {
    int32_t targets[N];
    for (int i = 0; i < N; i++) targets[i] = i % 9 == 4 ? -1 : (int32_t)rng_below(&rng, V);
    float *logits = random_floats((size_t)N * VP, 3), losses[N];
    DeviceCall call = {.kernel = DK_SOFTMAX_XENT};
    call.a.xent = (XentArgs){up(h, logits, (size_t)N * VP), harness_alloc(h, sizeof losses),
                             harness_upload(h, targets, sizeof targets), N, V, VP, 1.0f / N};
    harness_launch(h, &call);
    softmax_xent_forward_backward(logits, losses, targets, N, V, VP, 1.0f / N);
    expect_close(h, "softmax xent losses", call.a.xent.losses, losses, N);
    expect_close(h, "softmax xent dlogits", call.a.xent.logits, logits, (size_t)N * VP);
}

/* out = inp weight^T + bias, then its backward (dinp written, dweight and dbias +=) */
static void test_matmul(Harness *h, int IC, int OC) {
    const size_t ni = (size_t)N * IC, no = (size_t)N * OC, nw = (size_t)OC * IC;
    float *inp = random_floats(ni, 1), *w = random_floats(nw, 0.2f), *bias = random_floats(OC, 1);
    float *dout = random_floats(no, 1), *dw = random_floats(nw, 1), *db = random_floats(OC, 1);
    float *out = host_alloc(sizeof *out * no), *dinp = host_alloc(sizeof *dinp * ni);
    DeviceCall call = {.kernel = DK_MATMUL_FORWARD};
    call.a.matmul = (MatmulArgs){.out = harness_alloc(h, sizeof(float) * no), .dinp = harness_alloc(h, sizeof(float) * ni),
                                 .dweight = up(h, dw, nw), .dbias = up(h, db, OC), .inp = up(h, inp, ni), .weight = up(h, w, nw),
                                 .bias = up(h, bias, OC), .dout = up(h, dout, no), .N = N, .IC = IC, .OC = OC};
    harness_launch(h, &call);
    matmul_forward(out, inp, w, bias, N, IC, OC);
    char what[64];
    snprintf(what, sizeof what, "matmul forward %dx%d", IC, OC);
    expect_close(h, what, call.a.matmul.out, out, no);
    call.kernel = DK_MATMUL_BACKWARD;
    harness_launch(h, &call);
    matmul_backward(dinp, dw, db, dout, inp, w, N, IC, OC);
    snprintf(what, sizeof what, "matmul backward dinp %dx%d", IC, OC);
    expect_close(h, what, call.a.matmul.dinp, dinp, ni);
    snprintf(what, sizeof what, "matmul backward dweight %dx%d", IC, OC);
    expect_close(h, what, call.a.matmul.dweight, dw, nw);
    snprintf(what, sizeof what, "matmul backward dbias %dx%d", IC, OC);
    expect_close(h, what, call.a.matmul.dbias, db, OC);
}

/* The fc layer's GELU epilogue: pre_gelu the product plus bias, out its GELU,
 * against matmul_forward then gelu_forward (kernels.h). On a GPU an OC that
 * is a multiple of 8 runs cuBLASLt's GELU_AUX_BIAS epilogue, any other the
 * product then the GELU kernel. */
static void test_matmul_gelu(Harness *h, int IC, int OC) {
    const size_t ni = (size_t)N * IC, no = (size_t)N * OC, nw = (size_t)OC * IC;
    float *inp = random_floats(ni, 1), *w = random_floats(nw, 0.2f), *bias = random_floats(OC, 1);
    float *pre = host_alloc(sizeof *pre * no), *out = host_alloc(sizeof *out * no);
    DeviceCall call = {.kernel = DK_MATMUL_FORWARD};
    call.a.matmul = (MatmulArgs){.out = harness_alloc(h, sizeof(float) * no), .pre_gelu = harness_alloc(h, sizeof(float) * no),
                                 .inp = up(h, inp, ni), .weight = up(h, w, nw), .bias = up(h, bias, OC), .N = N, .IC = IC, .OC = OC};
    harness_launch(h, &call);
    matmul_forward(pre, inp, w, bias, N, IC, OC);
    gelu_forward(out, pre, no);
    char what[64];
    snprintf(what, sizeof what, "matmul+gelu pre %dx%d", IC, OC);
    expect_close(h, what, call.a.matmul.pre_gelu, pre, no);
    snprintf(what, sizeof what, "matmul+gelu out %dx%d", IC, OC);
    expect_close(h, what, call.a.matmul.out, out, no);
}

/* bf16 operands: each output within its rounding bound of the fp32 product
 * of the unrounded operands. A bf16 rounding moves a value by at most 2^-9
 * of itself, so a product x w by at most (2^-8 + 2^-18) |x w|; summed over
 * k: sum_k |x_k w_k| (2^-8 + 2^-18), plus the fp32 bound for the order. */
static void test_matmul_bf16(Harness *h, int IC, int OC) {
    const size_t ni = (size_t)N * IC, no = (size_t)N * OC, nw = (size_t)OC * IC;
    float *inp = random_floats(ni, 1), *w = random_floats(nw, 0.2f), *out = host_alloc(sizeof *out * no);
    float *got = host_alloc(sizeof *got * no);
    bf16 *inp16 = host_alloc(sizeof *inp16 * ni), *w16 = host_alloc(sizeof *w16 * nw);
    bf16_from_floats(inp16, inp, ni);
    bf16_from_floats(w16, w, nw);
    DeviceCall call = {.kernel = DK_MATMUL_FORWARD};
    call.a.matmul = (MatmulArgs){.out = harness_alloc(h, sizeof(float) * no), .inp_bf16 = harness_upload(h, inp16, sizeof *inp16 * ni),
                                 .weight_bf16 = harness_upload(h, w16, sizeof *w16 * nw), .N = N, .IC = IC, .OC = OC};
    harness_launch(h, &call);
    matmul_forward(out, inp, w, NULL, N, IC, OC);
    harness_download(h, got, call.a.matmul.out, sizeof *got * no);
    int bad = 0;
    double worst = 0;
    for (int i = 0; i < N; i++)
        for (int o = 0; o < OC; o++) {
            double mag = 0;
            for (int k = 0; k < IC; k++) mag += fabs((double)inp[(size_t)i * IC + k] * w[(size_t)o * IC + k]);
            double bound = mag * (0x1p-8 + 0x1p-18) + FP32_BOUND * mag, err = fabs(got[(size_t)i * OC + o] - out[(size_t)i * OC + o]);
            worst = mag > 0 && err / bound > worst ? err / bound : worst;
            bad += !(err <= bound);
        }
    printf("matmul forward bf16 %dx%-8d worst error / bound %.3g\n", IC, OC, worst);
    CHECK(bad == 0, "matmul bf16 %dx%d: %d outputs beyond their rounding bound", IC, OC, bad);
}

/* bf16 operands in backward: dinp and dweight from the bf16 dout, input and
 * weight (exact in fp32, so the fp32 backward of the widened operands is the
 * reference, within the fp32 bound for the order), dbias from the fp32 dout. */
static void test_matmul_backward_bf16(Harness *h, int IC, int OC) {
    const size_t ni = (size_t)N * IC, no = (size_t)N * OC, nw = (size_t)OC * IC;
    float *inp = random_floats(ni, 1), *w = random_floats(nw, 0.2f), *dout = random_floats(no, 1);
    float *dw = random_floats(nw, 1), *db = random_floats(OC, 1), *dinp = host_alloc(sizeof *dinp * ni);
    bf16 *inp16 = host_alloc(sizeof *inp16 * ni), *w16 = host_alloc(sizeof *w16 * nw), *dout16 = host_alloc(sizeof *dout16 * no);
    bf16_from_floats(inp16, inp, ni);
    bf16_from_floats(w16, w, nw);
    bf16_from_floats(dout16, dout, no);
    DeviceCall call = {.kernel = DK_MATMUL_BACKWARD};
    call.a.matmul = (MatmulArgs){.dinp = harness_alloc(h, sizeof(float) * ni), .dweight = up(h, dw, nw), .dbias = up(h, db, OC),
                                 .dout = up(h, dout, no), .inp_bf16 = harness_upload(h, inp16, sizeof *inp16 * ni),
                                 .weight_bf16 = harness_upload(h, w16, sizeof *w16 * nw),
                                 .dout_bf16 = harness_upload(h, dout16, sizeof *dout16 * no), .N = N, .IC = IC, .OC = OC};
    harness_launch(h, &call);
    bias_backward(db, dout, N, OC);
    bf16_to_floats(inp, inp16, ni);
    bf16_to_floats(w, w16, nw);
    bf16_to_floats(dout, dout16, no);
    matmul_backward(dinp, dw, NULL, dout, inp, w, N, IC, OC);
    char what[64];
    snprintf(what, sizeof what, "matmul bwd bf16 dinp %dx%d", IC, OC);
    expect_close(h, what, call.a.matmul.dinp, dinp, ni);
    snprintf(what, sizeof what, "matmul bwd bf16 dweight %dx%d", IC, OC);
    expect_close(h, what, call.a.matmul.dweight, dw, nw);
    snprintf(what, sizeof what, "matmul bwd bf16 dbias %dx%d", IC, OC);
    expect_close(h, what, call.a.matmul.dbias, db, OC);
}

/* bf16 rounding (NaN and infinities among the values): the floats as kernels/bf16.h rounds them, the bits as it
 * converts them, in place too. */
static void test_bf16_round(Harness *h) {
    const size_t n = 5000;
    float *x = random_floats(n, 100), *want = host_alloc(sizeof *want * n), *got = host_alloc(sizeof *got * n);
    x[7] = NAN, x[8] = INFINITY, x[9] = -INFINITY, x[10] = 0x1.00ff8p0f; /* a tie: nearest even */
    bf16 *want16 = host_alloc(sizeof *want16 * n), *got16 = host_alloc(sizeof *got16 * n);
    bf16_round_floats(want, x, n);
    bf16_from_floats(want16, x, n);
    DeviceCall call = {.kernel = DK_BF16_ROUND};
    call.a.round = (Bf16RoundArgs){harness_alloc(h, sizeof(float) * n), harness_alloc(h, sizeof(bf16) * n), up(h, x, n), n};
    harness_launch(h, &call);
    harness_download(h, got, call.a.round.out, sizeof *got * n);
    harness_download(h, got16, call.a.round.out_bf16, sizeof *got16 * n);
    const int floats = memcmp(got, want, sizeof *got * n) == 0, bits = memcmp(got16, want16, sizeof *got16 * n) == 0;
    call.a.round.out = (float *)call.a.round.inp; /* in place */
    call.a.round.out_bf16 = NULL;
    harness_launch(h, &call);
    harness_download(h, got, call.a.round.out, sizeof *got * n);
    const int in_place = memcmp(got, want, sizeof *got * n) == 0;
    printf("bf16 round                    floats %s, bits %s, in place %s\n", floats ? "equal" : "DIFFER",
           bits ? "equal" : "DIFFER", in_place ? "equal" : "DIFFER");
    CHECK(floats && bits && in_place, "bf16 rounding differs from kernels/bf16.h");
}

static void test_adamw(Harness *h) {
    const size_t n = 10000;
    float *p = random_floats(n, 1), *g = random_floats(n, 1), *m = random_floats(n, 0.1f), *v = random_floats(n, 0.01f);
    for (size_t i = 0; i < n; i++) v[i] *= v[i]; /* a second moment is >= 0 */
    AdamWStep s = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f, .grad_scale = 0.5f, .step = 3};
    const AdamWSegment whole = {0, 0, (int64_t)n, 1}; /* one decaying tensor (test_device_adamw: many) */
    DeviceCall call = {.kernel = DK_ADAMW};
    const AdamWStepScalars v1 = {s.grad_scale, s.lr / (1.0f - powf(s.beta1, (float)s.step)),
                                 sqrtf(1.0f - powf(s.beta2, (float)s.step)), 1.0f - s.lr * s.weight_decay};
    call.a.adamw = (AdamWArgs){up(h, p, n), up(h, m, n), up(h, v, n), harness_alloc(h, sizeof(bf16) * n), up(h, g, n),
                               harness_upload(h, &whole, sizeof whole), 1, n, 0, 0, 0, s.beta1, s.beta2, s.eps, v1, NULL};
    harness_launch(h, &call);
    adamw_update(p, g, m, v, n, &s);
    expect_close(h, "adamw params", call.a.adamw.params, p, n);
    expect_close(h, "adamw m", call.a.adamw.m, m, n);
    expect_close(h, "adamw v", call.a.adamw.v, v, n);
    float *got = host_alloc(sizeof *got * n);
    bf16 *got16 = host_alloc(sizeof *got16 * n);
    harness_download(h, got, call.a.adamw.params, sizeof *got * n);
    harness_download(h, got16, call.a.adamw.params_bf16, sizeof *got16 * n);
    size_t differ = 0;
    for (size_t i = 0; i < n; i++) differ += got16[i] != bf16_from_float(got[i]);
    printf("adamw bf16 refresh            %zu of %zu differ from bf16(param)\n", differ, n);
    CHECK(differ == 0, "adamw: %zu bf16 copies are not the rounding of their parameter", differ);
}

static void test_sums(Harness *h) {
    const int64_t offsets[] = {0, 10, 10, 3000, 20000};
    const int tensors = 4;
    float *x = random_floats(20000, 3);
    float want[4], got[4];
    double sums[4];
    DeviceCall call = {.kernel = DK_SUM_OF_SQUARES};
    call.a.sumsq = (SumSquaresArgs){harness_alloc(h, sizeof sums), up(h, x, 20000), harness_upload(h, offsets, sizeof offsets), tensors};
    harness_launch(h, &call);
    harness_download(h, sums, call.a.sumsq.sums, sizeof sums);
    for (int t = 0; t < tensors; t++) {
        want[t] = (float)sum_of_squares(x + offsets[t], (size_t)(offsets[t + 1] - offsets[t]));
        got[t] = (float)sums[t];
    }
    double err = harness_relative_error(got, want, (size_t)tensors);
    printf("%-28s relative error %.3g (bound %.0e)\n", "per-tensor sums of squares", err, FP32_BOUND);
    CHECK(err <= FP32_BOUND && sums[1] == 0, "sums of squares: relative error %g, empty tensor %g", err, sums[1]);
    int32_t flag;
    DeviceCall nf = {.kernel = DK_NONFINITE};
    nf.a.nonfinite = (NonfiniteArgs){harness_alloc(h, sizeof flag), call.a.sumsq.x, 20000};
    const float poison[] = {INFINITY, -INFINITY, NAN};
    for (int i = -1; i < 3; i++) {
        if (i >= 0) harness_check(h, device_copy(h->dev, h->stream, (float *)call.a.sumsq.x + 777 * (i + 1), &poison[i], sizeof(float), COPY_HOST_TO_DEVICE), "poison");
        harness_launch(h, &nf);
        harness_download(h, &flag, nf.a.nonfinite.flag, sizeof flag);
        CHECK(flag == (i >= 0), "nonfinite flag %d after %d poisoned values", flag, i + 1);
    }
}

int main(int argc, char **argv) {
    rng_seed(&rng, 42);
    Harness h = harness_open(argc, argv, 7);
    printf("device %s\n", device_name(h.dev));
    test_encoder(&h, 0);
    test_encoder(&h, 1);
    test_layernorm(&h);
    test_elementwise(&h);
    test_attention(&h, 0);
    test_attention(&h, 1);
    test_softmax_xent(&h);
    test_matmul(&h, C, 3 * C);
    test_matmul(&h, 4 * C, C);
    test_matmul_bf16(&h, C, 4 * C);
    test_matmul_gelu(&h, C, 4 * C);
    test_matmul_gelu(&h, C, 4 * C + 4);
    test_matmul_backward_bf16(&h, C, 4 * C);
    test_matmul_backward_bf16(&h, 4 * C, C);
    test_bf16_round(&h);
    test_adamw(&h);
    test_sums(&h);
    harness_close(&h);
    host_free_all();
    printf("%s\n", failures ? "FAILED" : "all kernels agree");
    return failures != 0;
}

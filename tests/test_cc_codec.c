/* test_cc_codec.c: the codecs of comm/codec.h on one process.
 *
 * 1. --grad-compression parsing: every valid spec, and one-line errors for
 *    unknown codecs, fractions outside (0, 1] and a block of 0.
 * 2. Round trip of each elementwise codec (fp16, bf16, fp8, int8) for block
 *    sizes 1..4096 and awkward lengths: every element within the documented
 *    bound (codec_bound, computed in double), and the bound not vacuous (the
 *    worst element uses at least a quarter of it); encoded sizes equal the
 *    formats' formulas; a NaN or inf in a block shows in the decoded block.
 * 3. fp8 e4m3: every encoding is the nearest of the 253 finite codes (ties to
 *    the even code), found by brute force, and decodes are exact.
 * 4. top-k: exactly k = ceil(f n) entries, indices ascending, the kept values
 *    exact and none smaller in magnitude than a dropped one, ties taken in
 *    index order.
 * 5. 1-bit: decoded = +-||x||/sqrt(n) by sign (x >= 0 -> +), and the error
 *    identity ||e||^2 = 2||x||^2 - 2 s ||x||_1.
 * 6. Error feedback, every codec: over 100 steps (a fixed gradient with noise), sum of what was sent plus
 *    the final residual equals the sum of the inputs, within the float
 *    rounding of the two additions per step (accumulated in double, the
 *    bound computed alongside); and for top-k 1% the error of the running sum
 *    with feedback stays below half of the error without it. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/codec.h"
#include "core/rng.h"
#include "test_cc_common.h"
#include "check.h"
#include "cli/subject_flags.h"

static Codec codec_of(const char *spec, size_t block) {
    Codec c;
    char why[256];
    if (!codec_parse(spec, block, &c, why, sizeof why)) {
        printf("FAIL: cannot parse '%s': %s\n", spec, why);
        exit(1);
    }
    return c;
}

static void test_parse(void) {
    const char *good[] = {"none", "fp16", "bf16", "fp8", "int8", "topk:0.01", "topk:1", "topk:1e-3", "onebit"};
    const CodecKind kinds[] = {CODEC_NONE, CODEC_FP16, CODEC_BF16, CODEC_FP8, CODEC_INT8,
                               CODEC_TOPK, CODEC_TOPK, CODEC_TOPK, CODEC_ONEBIT};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        Codec c = codec_of(good[i], 64);
        CHECK(c.kind == kinds[i] && c.block == 64, "parse %s", good[i]);
        char text[64];
        codec_format(&c, text, sizeof text);
        Codec again = codec_of(text, 64);
        CHECK(again.kind == c.kind && again.fraction == c.fraction, "format round trip of %s gave %s", good[i], text);
    }
    CHECK(codec_of("topk:0.01", 1).fraction == 0.01, "topk fraction");
    const char *bad[] = {"topk:0", "topk:1.5", "topk:-0.1", "topk:", "topk:abc", "topk:0.5x", "topk:nan", "int4", "",
                         "TOPK:0.1", "topk", "fp32"};
    for (int named = 0; named < 2; named++) { /* the library's reason alone, then with cli/'s flag names */
        if (named) cli_name_subjects();
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            Codec c;
            char why[256] = "";
            bool ok = codec_parse(bad[i], 256, &c, why, sizeof why);
            CHECK(!ok && strstr(why, "the gradient codec") && strstr(why, bad[i]) && !strchr(why, '\n') &&
                      (named ? strstr(why, "(flags: --grad-compression)") != NULL : strstr(why, "--") == NULL),
                  "bad spec '%s' accepted or unclear: %s", bad[i], why);
        }
    }
    Codec c;
    char why[256] = "";
    CHECK(!codec_parse("int8", 0, &c, why, sizeof why) && strstr(why, "compression block must be at least 1") &&
              strstr(why, "(flags: --compression-block)"),
          "block 0: %s", why);
    printf("parse: %s\n", why);
    CHECK(codec_parse("topk:0.5", 1, &c, why, sizeof why), "topk:0.5 with block 1");
}

/* Encoded size from the formats (codec.h's table), independently of codec.c. */
static size_t expected_bytes(const Codec *c, size_t n) {
    size_t r4 = (2 * n + 3) / 4 * 4, blocks = (n + c->block - 1) / c->block;
    switch (c->kind) {
    case CODEC_NONE: return 4 * n;
    case CODEC_FP16:
    case CODEC_BF16: return r4;
    case CODEC_FP8:
    case CODEC_INT8: return 4 * blocks + (n + 3) / 4 * 4;
    case CODEC_TOPK: return 8 * (size_t)ceil(c->fraction * (double)n);
    case CODEC_ONEBIT: return n ? 4 + ((n + 7) / 8 + 3) / 4 * 4 : 0;
    }
    return 0;
}

static void test_round_trip(void) {
    const char *specs[] = {"none", "fp16", "bf16", "fp8", "int8"};
    const size_t blocks[] = {1, 3, 32, 256, 4096};
    const size_t lengths[] = {0, 1, 2, 7, 255, 256, 257, 1000, 65537};
    Rng rng;
    rng_seed(&rng, 7);
    for (size_t s = 0; s < 5; s++)
        for (size_t b = 0; b < 5; b++) {
            Codec c = codec_of(specs[s], blocks[b]);
            CodecBound bound = codec_bound(&c);
            double worst = 0; /* largest error / bound over the lengths */
            for (size_t l = 0; l < sizeof lengths / sizeof lengths[0]; l++) {
                size_t n = lengths[l], bytes = codec_encoded_bytes(&c, n);
                CHECK(bytes == expected_bytes(&c, n) && bytes % 4 == 0, "%s block %zu n %zu: %zu bytes", specs[s],
                      blocks[b], n, bytes);
                float *x = malloc((n + 1) * sizeof(float)), *y = malloc((n + 1) * sizeof(float));
                unsigned char *enc = malloc(bytes + 4);
                cc_fill(&rng, x, n, 6e4);
                if (n > 300) x[300] = 1e-32f; /* a block below the scales' resolution (with block 1) */
                codec_encode(&c, x, n, enc);
                codec_decode(&c, enc, n, y);
                int bad = 0;
                for (size_t blk = 0; blk * c.block < n; blk++) {
                    size_t lo = blk * c.block, hi = lo + c.block < n ? lo + c.block : n;
                    double amax = 0;
                    for (size_t i = lo; i < hi; i++) amax = fmax(amax, fabs((double)x[i]));
                    for (size_t i = lo; i < hi; i++) {
                        double e = fabs((double)y[i] - x[i]);
                        double limit = bound.rel * fabs((double)x[i]) + bound.block_rel * amax + bound.abs;
                        if (e > limit) bad++;
                        if (limit > 0 && e / limit > worst) worst = e / limit;
                    }
                }
                CHECK(bad == 0, "%s block %zu n %zu: %d elements beyond the bound", specs[s], blocks[b], n, bad);
                /* decode_add adds exactly the decoded values */
                memcpy(y, x, n * sizeof(float));
                codec_decode_add(&c, enc, n, y);
                float *z = malloc((n + 1) * sizeof(float));
                codec_decode(&c, enc, n, z);
                int add_bad = 0; /* rounding of the sum, or of the product a fused multiply-add skips */
                for (size_t i = 0; i < n; i++)
                    add_bad += fabs((double)y[i] - ((double)x[i] + z[i])) >
                               0x1p-24 * (fabs((double)x[i] + z[i]) + fabs((double)z[i])) + 0x1p-149;
                CHECK(add_bad == 0, "%s decode_add", specs[s]);
                free(x), free(y), free(z), free(enc);
            }
            if (c.kind != CODEC_NONE && blocks[b] > 1) /* blocks of 1 are exact but for float rounding */
                CHECK(worst > 0.25 && worst <= 1, "%s block %zu: worst error uses %.3f of the bound", specs[s],
                      blocks[b], worst);
            if (b == 3) printf("round trip %-5s block %4zu: worst error = %.6f of the bound\n", specs[s], blocks[b], worst);
        }
    /* non-finite values: seen in the output, never rescaled into finite ones */
    float x[8] = {1, 2, NAN, 4, 1, 2, 3, INFINITY}, y[8];
    unsigned char enc[64];
    for (int s = 3; s <= 4; s++) {
        Codec c = codec_of(specs[s], 4);
        codec_encode(&c, x, 8, enc);
        codec_decode(&c, enc, 8, y);
        for (int i = 0; i < 8; i++) CHECK(isnan(y[i]), "%s: element %d of a non-finite block is %g", specs[s], i, y[i]);
    }
    Codec h = codec_of("fp16", 1);
    float big[2] = {70000.0f, -1e30f};
    codec_encode(&h, big, 2, enc);
    codec_decode(&h, enc, 2, y);
    CHECK(isinf(y[0]) && y[0] > 0 && isinf(y[1]) && y[1] < 0, "fp16 overflow gives %g %g", y[0], y[1]);
}

static void test_fp8_nearest(void) {
    float value[256];
    for (int q = 0; q < 256; q++) value[q] = codec_fp8_to_float((uint8_t)q);
    /* decoding from the definition: subnormals m 2^-9, normals (1 + m/8) 2^(e-7), 0x7f NaN */
    int bad_decode = 0;
    for (int q = 0; q < 128; q++) {
        int e = q >> 3, m = q & 7;
        double want = e == 0 ? m * pow(2, -9) : (1 + m / 8.0) * pow(2, e - 7);
        if (q == 0x7f) bad_decode += !isnan(value[q]);
        else bad_decode += value[q] != (float)want || value[q | 0x80] != -(float)want;
    }
    CHECK(bad_decode == 0, "fp8 decode: %d codes wrong", bad_decode);
    Rng rng;
    rng_seed(&rng, 3);
    int bad = 0, tested = 0;
    for (int t = 0; t < 200000; t++) {
        float x;
        if (t < 4 * 126) { /* each midpoint between neighbouring codes, and just either side of it */
            int q = t / 4;
            float mid = 0.5f * (value[q] + value[q + 1]);
            x = t % 4 == 0 ? mid : t % 4 == 1 ? nextafterf(mid, 0) : t % 4 == 2 ? nextafterf(mid, 1000) : -mid;
        } else {
            x = (float)((rng_uniform(&rng) * 2 - 1) * pow(2, -12 + 20 * (double)rng_uniform(&rng)));
        }
        if (fabsf(x) >= 464) continue;
        double best_err = INFINITY;
        for (int q = 0; q < 256; q++)
            if ((q & 0x7f) != 0x7f) best_err = fmin(best_err, fabs((double)value[q] - x));
        float want = NAN;
        for (int q = 0; q < 256; q++) /* of two nearest codes, the even one */
            if ((q & 0x7f) != 0x7f && fabs((double)value[q] - x) == best_err && (isnan(want) || (q & 1) == 0))
                want = value[q];
        bad += value[codec_fp8_from_float(x)] != want;
        tested++;
    }
    printf("fp8: %d values encoded to the nearest code (brute force)\n", tested);
    CHECK(bad == 0, "fp8: %d encodings not the nearest code", bad);
    CHECK(codec_fp8_from_float(1000.0f) == 0x7e && codec_fp8_from_float(-500.0f) == 0xfe, "fp8 saturates to 448");
    CHECK(codec_fp8_from_float(NAN) == 0x7f || codec_fp8_from_float(NAN) == 0xff, "fp8 NaN");
}

static void test_topk(void) {
    const double fractions[] = {0.001, 0.01, 0.1, 0.5, 1.0};
    const size_t lengths[] = {1, 2, 10, 1001, 100003};
    Rng rng;
    rng_seed(&rng, 11);
    for (size_t f = 0; f < 5; f++)
        for (size_t l = 0; l < 5; l++) {
            size_t n = lengths[l], k = (size_t)ceil(fractions[f] * (double)n);
            Codec c = {CODEC_TOPK, 1, fractions[f]};
            CHECK(codec_topk_count(c.fraction, n) == k && codec_encoded_bytes(&c, n) == 8 * k, "top-k %g of %zu",
                  c.fraction, n);
            float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float));
            uint32_t *enc = malloc(8 * k + 8);
            for (int ties = 0; ties < 2; ties++) {
                if (ties) /* many equal magnitudes: the k-th is shared by thousands */
                    for (size_t i = 0; i < n; i++) x[i] = (float)((int)rng_below(&rng, 4) - 2) + 0.5f;
                else cc_fill(&rng, x, n, 1e30);
                codec_encode(&c, x, n, enc);
                const float *val = (const float *)(enc + k);
                int bad = 0;
                double min_kept = INFINITY, max_dropped = 0;
                char *kept = calloc(n, 1);
                for (size_t j = 0; j < k; j++) {
                    bad += enc[j] >= n || (j > 0 && enc[j] <= enc[j - 1]) || val[j] != x[enc[j]];
                    if (enc[j] < n) kept[enc[j]] = 1, min_kept = fmin(min_kept, fabs(x[enc[j]]));
                }
                size_t last_kept_tie = 0, first_dropped_tie = n;
                for (size_t i = 0; i < n; i++) {
                    if (!kept[i]) max_dropped = fmax(max_dropped, fabs(x[i]));
                    if (fabs(x[i]) == min_kept) {
                        if (kept[i]) last_kept_tie = i;
                        else if (first_dropped_tie == n) first_dropped_tie = i;
                    }
                }
                CHECK(bad == 0 && min_kept >= max_dropped, "top-k %g of %zu (ties %d): %d bad entries, kept %g < %g",
                      c.fraction, n, ties, bad, min_kept, max_dropped);
                CHECK(k == n || last_kept_tie < first_dropped_tie, "top-k ties not in index order (n %zu)", n);
                codec_decode(&c, enc, n, y);
                int wrong = 0;
                for (size_t i = 0; i < n; i++) wrong += y[i] != (kept[i] ? x[i] : 0.0f);
                CHECK(wrong == 0, "top-k decode: %d wrong", wrong);
                free(kept);
            }
            free(x), free(y), free(enc);
        }
}

static void test_onebit(void) {
    const size_t lengths[] = {1, 7, 8, 9, 1000, 1 << 20};
    Rng rng;
    rng_seed(&rng, 5);
    Codec c = {CODEC_ONEBIT, 1, 1};
    for (size_t l = 0; l < 6; l++) {
        size_t n = lengths[l];
        float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float));
        unsigned char *enc = malloc(codec_encoded_bytes(&c, n));
        cc_fill(&rng, x, n, 1e30);
        x[0] = -0.0f; /* DeepSpeed: sign(x) + 1 > 0, so zeros (either sign) send +s */
        codec_encode(&c, x, n, enc);
        codec_decode(&c, enc, n, y);
        double sq = 0, l1 = 0, err_sq = 0;
        for (size_t i = 0; i < n; i++) sq += (double)x[i] * x[i], l1 += fabs((double)x[i]);
        double s = sqrt(sq / (double)n);
        int bad = 0;
        for (size_t i = 0; i < n; i++) {
            bad += fabs((double)y[i] - (x[i] >= 0 ? s : -s)) > 1e-6 * s;
            err_sq += ((double)y[i] - x[i]) * ((double)y[i] - x[i]);
        }
        CHECK(bad == 0, "1-bit n %zu: %d values not +-%g", n, bad, s);
        double identity = 2 * sq - 2 * s * l1;
        CHECK(fabs(err_sq - identity) <= 1e-5 * sq, "1-bit n %zu: |e|^2 %g vs identity %g", n, err_sq, identity);
        if (n == (1 << 20))
            CHECK(codec_encoded_bytes(&c, n) <= 0.032 * 4 * n, "1-bit bytes %zu", codec_encoded_bytes(&c, n));
        free(x), free(y), free(enc);
    }
}

/* Over `steps` steps of inputs that are one fixed gradient g times (1 + 10%
 * noise), as successive gradients are: |sum sent + residual - sum inputs|
 * per element against the rounding of the two float operations per step;
 * returns ||sum sent - sum inputs|| / ||sum inputs|| (the running sum's error). */
static double feedback_run(const Codec *c, size_t n, int steps, bool feedback, int *bad) {
    Rng rng;
    rng_seed(&rng, 99);
    float *x = malloc(n * sizeof(float)), *g = malloc(n * sizeof(float)), *res = calloc(n, sizeof(float));
    double *sum_in = calloc(n, sizeof(double)), *sum_out = calloc(n, sizeof(double)), *tol = calloc(n, sizeof(double));
    unsigned char *enc = malloc(codec_encoded_bytes(c, n) + 4);
    cc_fill(&rng, g, n, 5e4);
    for (int t = 0; t < steps; t++) {
        for (size_t i = 0; i < n; i++) x[i] = g[i] * (float)(1 + 0.1 * rng_normal(&rng));
        for (size_t i = 0; i < n; i++) {
            sum_in[i] += x[i];
            tol[i] += 0x1p-24 * (fabs((double)x[i] + res[i]) * 2 + fabs((double)res[i]));
        }
        codec_encode_feedback(c, x, feedback ? res : NULL, n, enc);
        for (size_t i = 0; i < n; i++) {
            sum_out[i] += x[i];
            tol[i] += 0x1p-24 * fabs((double)res[i]);
        }
    }
    double err = 0, norm = 0;
    *bad = 0;
    for (size_t i = 0; i < n; i++) {
        if (feedback) *bad += fabs(sum_out[i] + res[i] - sum_in[i]) > tol[i] * 1.0001 + 1e-300;
        err += (sum_out[i] - sum_in[i]) * (sum_out[i] - sum_in[i]);
        norm += sum_in[i] * sum_in[i];
    }
    free(x), free(g), free(res), free(sum_in), free(sum_out), free(tol), free(enc);
    return sqrt(err / norm);
}

static void test_feedback(void) {
    const char *specs[] = {"fp16", "bf16", "fp8", "int8", "topk:0.01", "topk:0.1", "onebit"};
    for (size_t s = 0; s < sizeof specs / sizeof specs[0]; s++) {
        Codec c = codec_of(specs[s], 32);
        int bad;
        double with = feedback_run(&c, 10007, 100, true, &bad);
        CHECK(bad == 0, "%s: feedback invariant broken at %d elements", specs[s], bad);
        int unused;
        double without = feedback_run(&c, 10007, 100, false, &unused);
        printf("feedback %-9s running-sum error after 100 steps: %.3g with feedback, %.3g without\n", specs[s], with,
               without);
        if (c.kind == CODEC_TOPK && c.fraction == 0.01)
            CHECK(with < 0.5 * without, "top-k 1%%: feedback does not help (%g vs %g)", with, without);
    }
}

int main(void) {
    test_parse();
    test_round_trip();
    test_fp8_nearest();
    test_topk();
    test_onebit();
    test_feedback();
    printf("%s: %d failure(s)\n", failures ? "FAILED" : "ok", failures);
    return failures ? 1 : 0;
}

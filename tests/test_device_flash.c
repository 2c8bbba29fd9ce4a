/* test_device_flash.c: the fused attention kernels (DK_FLASH_*,
 * device/flash_math.h) against the unfused device kernel
 * (DK_ATTENTION_*), the CPU's (kernels.h attention_forward_docs and
 * attention_backward) and the log-sum-exp of the scores computed here in
 * double: plain causal and inside documents, T a multiple of the tile and
 * not, and context-parallel blocks (a rank's two chunks against each
 * rank's key/value block, merged by log-sum-exp) against the whole
 * sequence. `test_device_flash sim` runs the kernels' arithmetic on the
 * host; `cuda` the CUDA kernels (skipped, exit 77, without a GPU).
 * `test_device_flash sim --io IN OUT B T C H` runs the fused forward and
 * backward on IN (qkv then dout, float32) and writes out then dqkv to OUT,
 * for the PyTorch peer (test_flash_torch.py).
 *
 * Bound: each output within 1e-5 of the reference relative to the output's
 * largest magnitude, as test_device_kernels (the sums run in other orders:
 * the online softmax rescales per tile of 32 keys; a few float roundings
 * of values below that magnitude). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/rng.h"
#include "device_harness.h"
#include "device/flash_math.h"
#include "kernels/kernels.h"
#include "model/context_attention.h"

enum { B = 2, C = 64, H = 4, HS = C / H, MAX_T = 128 };
static const double BOUND = 1e-5;

static Rng rng;

static void expect_close(const char *what, int T, int docs, const float *got, const float *want, size_t n) {
    double err = harness_relative_error(got, want, n);
    printf("%-34s T %3d%s relative error %.3g (bound %.0e)\n", what, T, docs ? " docs" : "     ", err, BOUND);
    CHECK(err <= BOUND, "%s T %d docs %d: relative error %g > %g", what, T, docs, err, BOUND);
}

static float *random_floats(size_t n) {
    float *x = malloc(sizeof *x * n);
    for (size_t i = 0; i < n; i++) x[i] = 2 * rng_uniform(&rng) - 1;
    return x;
}

/* documents: each row starts new ones at two positions (docs 0: one document) */
static void document_starts(int32_t *doc_start, int T, int docs) {
    for (int b = 0; b < B; b++)
        for (int t = 0, start = 0; t < T; t++) {
            if (docs && (t == 11 + 7 * b || t == T / 2 + 3 - b)) start = t;
            doc_start[b * T + t] = start;
        }
}

static void download(Harness *h, float *host, const void *dev, size_t n) { harness_download(h, host, dev, sizeof(float) * n); }

/* dev (bytes) = host, the copy done before it returns (host may be reused) */
static void put(Harness *h, void *dev, const void *host, size_t bytes) {
    harness_check(h, device_copy(h->dev, h->stream, dev, host, bytes, COPY_HOST_TO_DEVICE), "copy in");
    harness_check(h, device_stream_sync(h->dev, h->stream), "sync");
}

/* The fused call over the whole sequence of qkv (B,T,3C) on the device. */
static FlashArgs whole_sequence(Harness *h, float *qkv_d, float *dqkv_d, const float *dout_d, const int32_t *doc_d, int T) {
    return flash_self_attention(harness_alloc(h, sizeof(float) * B * T * C), harness_alloc(h, sizeof(float) * B * H * T),
                                dqkv_d, qkv_d, dout_d, doc_d, B, T, C, H);
}

/* lse of query (b,h,i) by its definition, in double: log sum over the keys it sees of exp(q.k / sqrt(hs)) */
static void reference_lse(double *lse, const float *qkv, const int32_t *doc_start, int T) {
    for (int b = 0; b < B; b++)
        for (int hd = 0; hd < H; hd++)
            for (int i = 0; i < T; i++) {
                const float *q = qkv + ((size_t)b * T + i) * 3 * C + hd * HS;
                double m = -INFINITY, s[MAX_T], sum = 0;
                for (int j = doc_start[b * T + i]; j <= i; j++) {
                    const float *k = qkv + ((size_t)b * T + j) * 3 * C + C + hd * HS;
                    double dot = 0;
                    for (int c = 0; c < HS; c++) dot += (double)q[c] * k[c];
                    s[j] = dot / sqrt((double)HS);
                    m = s[j] > m ? s[j] : m;
                }
                for (int j = doc_start[b * T + i]; j <= i; j++) sum += exp(s[j] - m);
                lse[((size_t)b * H + hd) * T + i] = m + log(sum);
            }
}

static void check_lse(Harness *h, const FlashArgs *a, const float *qkv, const int32_t *doc_start, int T, int docs) {
    const size_t n = (size_t)B * H * T;
    double *want = malloc(sizeof *want * n), err = 0;
    float *got = malloc(sizeof *got * n);
    reference_lse(want, qkv, doc_start, T);
    download(h, got, a->lse, n);
    for (size_t i = 0; i < n; i++) err = fmax(err, fabs(got[i] - want[i]) / fmax(1.0, fabs(want[i])));
    printf("%-34s T %3d%s error %.3g (bound %.0e of max(1, |lse|))\n", "fused lse vs double", T, docs ? " docs" : "     ", err, BOUND);
    CHECK(err <= BOUND, "lse T %d docs %d: error %g", T, docs, err);
    free(want);
    free(got);
}

/* Fused forward and backward against the unfused device kernel and the CPU's. */
static void test_whole(Harness *h, int T, int docs) {
    const size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, natt = (size_t)B * H * T * T;
    float *qkv = random_floats(nqkv), *dout = random_floats(nout), *out = malloc(sizeof *out * nout);
    float *att = malloc(sizeof *att * natt), *dqkv = malloc(sizeof *dqkv * nqkv), *scratch = malloc(sizeof *scratch * T * T);
    float *got = malloc(sizeof *got * nqkv), *unfused = malloc(sizeof *unfused * nqkv);
    int32_t *doc_start = malloc(sizeof *doc_start * B * T);
    document_starts(doc_start, T, docs);
    attention_forward_docs(out, att, qkv, doc_start, B, T, C, H);
    attention_backward(dqkv, scratch, 1, dout, qkv, att, B, T, C, H);
    float *qkv_d = harness_upload(h, qkv, sizeof(float) * nqkv), *dout_d = harness_upload(h, dout, sizeof(float) * nout);
    const int32_t *doc_d = docs ? harness_upload(h, doc_start, sizeof *doc_start * B * T) : NULL;
    DeviceCall plain = {.kernel = DK_ATTENTION_FORWARD};
    plain.a.attention = (AttentionArgs){harness_alloc(h, sizeof(float) * nout), harness_alloc(h, sizeof(float) * natt),
                                        harness_alloc(h, sizeof(float) * nqkv), harness_alloc(h, sizeof(float) * natt),
                                        qkv_d, dout_d, doc_d, B, T, C, H};
    harness_launch(h, &plain);
    plain.kernel = DK_ATTENTION_BACKWARD;
    harness_launch(h, &plain);
    DeviceCall fused = {.kernel = DK_FLASH_FORWARD};
    fused.a.flash = whole_sequence(h, qkv_d, harness_alloc(h, sizeof(float) * nqkv), dout_d, doc_d, T);
    harness_launch(h, &fused);
    fused.kernel = DK_FLASH_BACKWARD;
    harness_launch(h, &fused);
    download(h, got, fused.a.flash.out, nout);
    download(h, unfused, plain.a.attention.out, nout);
    expect_close("fused forward vs cpu", T, docs, got, out, nout);
    expect_close("fused forward vs unfused device", T, docs, got, unfused, nout);
    check_lse(h, &fused.a.flash, qkv, doc_start, T, docs);
    download(h, got, fused.a.flash.dq, nqkv);
    download(h, unfused, plain.a.attention.dqkv, nqkv);
    expect_close("fused dq dk dv vs cpu", T, docs, got, dqkv, nqkv);
    expect_close("fused dq dk dv vs unfused device", T, docs, got, unfused, nqkv);
    void *dev[] = {qkv_d, dout_d, (void *)doc_d, plain.a.attention.out, plain.a.attention.att, plain.a.attention.dqkv,
                   plain.a.attention.scratch, fused.a.flash.out, fused.a.flash.lse, fused.a.flash.dq};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        if (dev[i]) device_free(h->dev, dev[i]);
    free(qkv), free(dout), free(out), free(att), free(dqkv), free(scratch), free(got), free(unfused), free(doc_start);
}

/* One rank of a context-parallel group of `ranks` on a sequence of T:
 * its chunks' positions, and rows of a (B,T,width) array taken at them or
 * added back. */
typedef struct {
    int t, pos[MAX_T];
} Shard;

static Shard shard_of(int ranks, int rank, int T) {
    Shard s = {.t = T / ranks};
    int chunks[2], c = T / (2 * ranks);
    context_chunks(ranks, rank, CP_SPLIT_ZIGZAG, chunks);
    for (int i = 0; i < s.t; i++) s.pos[i] = chunks[i / c] * c + i % c;
    return s;
}

/* dst (B,t,n) = columns [col, col + n) of src (B,T,width) at the shard's rows (add: dst's rows into src's) */
static void take_rows(float *dst, float *src, const Shard *s, int T, int width, int col, int n, int add) {
    for (int b = 0; b < B; b++)
        for (int i = 0; i < s->t; i++) {
            float *whole = src + ((size_t)b * T + s->pos[i]) * width + col, *part = dst + ((size_t)b * s->t + i) * n;
            for (int c = 0; c < n; c++)
                if (add) whole[c] += part[c];
                else part[c] = whole[c];
        }
}

/* The device arrays of one rank: its queries and their gradients, the key/value block in hand and its gradient. */
typedef struct {
    float *qkv, *dq, *dout, *out, *lse, *part_out, *part_lse, *kv, *dkv;
    int32_t *q_pos, *k_pos, *doc;
} RankBuffers;

static FlashArgs block_call(const RankBuffers *d, float *out, float *lse, int t) {
    return (FlashArgs){.out = out, .lse = lse, .dq = d->dq, .dk = d->dkv, .dv = d->dkv + C, .q = d->qkv, .k = d->kv,
                       .v = d->kv + C, .dout = d->dout, .q_pos = d->q_pos, .k_pos = d->k_pos, .doc_start = d->doc,
                       .B = B, .Tq = t, .Tk = t, .C = C, .H = H, .q_stride = 3 * C, .kv_stride = 2 * C, .accumulate = 1};
}

/* Rank `rank`'s forward (every block, merged) and backward (dq into dqkv; each block's dk, dv added to dqkv). */
static void cp_rank(Harness *h, const RankBuffers *d, int ranks, int rank, int T, float *qkv, float *dout,
                    const int32_t *doc_start, float *out, float *dqkv) {
    const Shard me = shard_of(ranks, rank, T);
    const int t = me.t;
    float *rows = malloc(sizeof *rows * B * t * 3 * C);
    int32_t doc[B * MAX_T];
    for (int b = 0; b < B; b++)
        for (int i = 0; i < t; i++) doc[b * t + i] = doc_start[b * T + me.pos[i]];
    take_rows(rows, qkv, &me, T, 3 * C, 0, 3 * C, 0);
    put(h, d->qkv, rows, sizeof(float) * B * t * 3 * C);
    take_rows(rows, dout, &me, T, C, 0, C, 0);
    put(h, d->dout, rows, sizeof(float) * B * t * C);
    put(h, d->q_pos, me.pos, sizeof(int32_t) * t);
    put(h, d->doc, doc, sizeof(int32_t) * B * t);
    harness_check(h, device_zero(h->dev, h->stream, d->dq, sizeof(float) * B * t * 3 * C), "zero dq");
    for (int pass = 0; pass < 2; pass++)
        for (int step = 0; step < ranks; step++) { /* the ring's order: this rank's block first */
            const Shard other = shard_of(ranks, (rank + step) % ranks, T);
            take_rows(rows, qkv, &other, T, 3 * C, C, 2 * C, 0);
            put(h, d->kv, rows, sizeof(float) * B * t * 2 * C);
            put(h, d->k_pos, other.pos, sizeof(int32_t) * t);
            DeviceCall call = {.kernel = pass ? DK_FLASH_BACKWARD : DK_FLASH_FORWARD};
            call.a.flash = block_call(d, step && !pass ? d->part_out : d->out, step && !pass ? d->part_lse : d->lse, t);
            harness_launch(h, &call);
            if (!pass && step) {
                DeviceCall merge = {.kernel = DK_FLASH_MERGE, .a.flash_merge = {d->out, d->lse, d->part_out, d->part_lse, B, t, C, H}};
                harness_launch(h, &merge);
            }
            if (!pass) continue;
            download(h, rows, d->dkv, (size_t)B * t * 2 * C);
            harness_check(h, device_zero(h->dev, h->stream, d->dkv, sizeof(float) * B * t * 2 * C), "zero dkv");
            take_rows(rows, dqkv, &other, T, 3 * C, C, 2 * C, 1);
        }
    download(h, rows, d->out, (size_t)B * t * C);
    take_rows(rows, out, &me, T, C, 0, C, 1);
    download(h, rows, d->dq, (size_t)B * t * 3 * C);
    for (int r = 0; r < B * t; r++) memmove(rows + (size_t)r * C, rows + (size_t)r * 3 * C, sizeof *rows * C); /* dq's rows only */
    take_rows(rows, dqkv, &me, T, 3 * C, 0, C, 1);
    free(rows);
}

/* Context parallelism over `ranks`: every rank's output and dq, and the dk, dv its blocks gathered, against the whole sequence. */
static void test_context_parallel(Harness *h, int ranks, int T, int docs) {
    const size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, natt = (size_t)B * H * T * T;
    const int t = T / ranks;
    float *qkv = random_floats(nqkv), *dout = random_floats(nout), *out = malloc(sizeof *out * nout);
    float *att = malloc(sizeof *att * natt), *dqkv = malloc(sizeof *dqkv * nqkv), *scratch = malloc(sizeof *scratch * T * T);
    float *cp_out = calloc(nout, sizeof *cp_out), *cp_dqkv = calloc(nqkv, sizeof *cp_dqkv);
    int32_t *doc_start = malloc(sizeof *doc_start * B * T);
    document_starts(doc_start, T, docs);
    attention_forward_docs(out, att, qkv, doc_start, B, T, C, H);
    attention_backward(dqkv, scratch, 1, dout, qkv, att, B, T, C, H);
    const size_t bytes[] = {3 * C, 3 * C, C, C, H, C, H, 2 * C, 2 * C};
    RankBuffers d;
    float **slot[] = {&d.qkv, &d.dq, &d.dout, &d.out, &d.lse, &d.part_out, &d.part_lse, &d.kv, &d.dkv};
    for (int i = 0; i < 9; i++) *slot[i] = harness_alloc(h, sizeof(float) * B * t * bytes[i]);
    d.q_pos = harness_alloc(h, sizeof(int32_t) * t), d.k_pos = harness_alloc(h, sizeof(int32_t) * t);
    d.doc = harness_alloc(h, sizeof(int32_t) * B * t);
    harness_check(h, device_zero(h->dev, h->stream, d.dkv, sizeof(float) * B * t * 2 * C), "zero dkv");
    for (int rank = 0; rank < ranks; rank++) cp_rank(h, &d, ranks, rank, T, qkv, dout, doc_start, cp_out, cp_dqkv);
    char what[64];
    snprintf(what, sizeof what, "cp %d ranks merged out vs cpu", ranks);
    expect_close(what, T, docs, cp_out, out, nout);
    snprintf(what, sizeof what, "cp %d ranks dq dk dv vs cpu", ranks);
    expect_close(what, T, docs, cp_dqkv, dqkv, nqkv);
    for (int i = 0; i < 9; i++) device_free(h->dev, *slot[i]);
    device_free(h->dev, d.q_pos), device_free(h->dev, d.k_pos), device_free(h->dev, d.doc);
    free(qkv), free(dout), free(out), free(att), free(dqkv), free(scratch), free(cp_out), free(cp_dqkv), free(doc_start);
}

/* --io IN OUT B T C H: fused forward and backward of IN's qkv (B,T,3C) and dout (B,T,C); OUT gets out then dqkv. */
static int run_io(Harness *h, char **argv) {
    const int b = atoi(argv[4]), T = atoi(argv[5]), c = atoi(argv[6]), heads = atoi(argv[7]);
    const size_t nqkv = (size_t)b * T * 3 * c, nout = (size_t)b * T * c;
    float *buf = malloc(sizeof *buf * (nqkv + nout));
    FILE *in = fopen(argv[2], "rb"), *out = fopen(argv[3], "wb");
    if (!buf || !in || !out || fread(buf, sizeof *buf, nqkv + nout, in) != nqkv + nout) {
        printf("FAIL: --io: cannot read %s or write %s\n", argv[2], argv[3]);
        if (in) fclose(in);
        if (out) fclose(out);
        free(buf);
        return 1;
    }
    float *qkv_d = harness_upload(h, buf, sizeof *buf * nqkv), *dqkv_d = harness_alloc(h, sizeof *buf * nqkv);
    DeviceCall call = {.kernel = DK_FLASH_FORWARD};
    call.a.flash = flash_self_attention(harness_alloc(h, sizeof *buf * nout), harness_alloc(h, sizeof *buf * b * heads * T),
                                        dqkv_d, qkv_d, harness_upload(h, buf + nqkv, sizeof *buf * nout), NULL, b, T, c, heads);
    harness_launch(h, &call);
    call.kernel = DK_FLASH_BACKWARD;
    harness_launch(h, &call);
    download(h, buf, call.a.flash.out, nout);
    download(h, buf + nout, dqkv_d, nqkv);
    int ok = fwrite(buf, sizeof *buf, nqkv + nout, out) == nqkv + nout;
    fclose(in);
    ok &= fclose(out) == 0;
    free(buf);
    return ok ? 0 : 1;
}

int main(int argc, char **argv) {
    rng_seed(&rng, 45);
    Harness h = harness_open(argc, argv, 11);
    if (argc == 9 && strcmp(argv[2], "--io") == 0) {
        int rc = run_io(&h, argv + 1);
        harness_close(&h);
        return rc;
    }
    printf("device %s\n", device_name(h.dev));
    for (int docs = 0; docs < 2; docs++) {
        test_whole(&h, 64, docs);  /* two tiles */
        test_whole(&h, 50, docs);  /* a tile cut short */
        test_whole(&h, 128, docs); /* four tiles */
        test_context_parallel(&h, 2, 128, docs);
        test_context_parallel(&h, 4, 128, docs); /* chunks of 16 rows: tiles span both chunks */
    }
    harness_close(&h);
    printf("%s\n", failures ? "FAILED" : "fused attention agrees");
    return failures != 0;
}

/* test_plan_dense_blocks.c: the planner's price of one dense transformer
 * block (layer_compute: products, fused attention, element-wise work)
 * against whole blocks measured on one H200 by bench/gpu_dense_layer.py
 * (tests/data/h200_dense_blocks.tsv; its header says how): llm-foundry's
 * MPT blocks at the MosaicML rows' shapes (eager PyTorch, FlashAttention-2)
 * and torchtitan's Llama 3 8B block at the Trainy H200 rows' (BF16 and
 * torchao-style FP8, eager and compiled). Each block is priced on the h200
 * preset, one GPU, its micro-batch, no recomputation. Checked:
 *   - the planner's block is never faster than the measured one (graph
 *     replay, and the compiled Llama blocks): its sustained fraction S is
 *     the slack of a full training run (other GPUs, full-node power,
 *     communication kernels beside compute), which one isolated GPU does
 *     not pay;
 *   - the products: the kernels the profiler names as products within 20%
 *     of the shape curve without S (gemm x 3 x S: the curve alone). The
 *     curve's level is the H100's MAMF; this 700 W H200 ran the dense layers
 *     at about 0.9 of it in isolation (round 13), and the curve's shape
 *     leaves up to 10% per product (the target): 20% is both;
 *   - the element-wise work (norms, activations, residuals: all that is
 *     neither a product nor attention, MPT blocks) no slower than its price
 *     at HBM bandwidth (twice the bytes a layer keeps forward, four times
 *     backward) and within 20% of it;
 *   - an eager MPT block within 5% of its graph replay: at these
 *     micro-batches the host is not the bottleneck of an eager dense block,
 *     which is why the planner has no host term for one.
 *   - the head dimension: MPT-30B's 112 (mpt-30b_mb14) against 128
 *     (mpt-70b_mb8), both 64 heads at 2,048 tokens: FlashAttention-2's rate
 *     per useful FLOP at 112 over its rate at 128, the planner's within 10%
 *     (the per-term target, as the products') of the measured (0.83: the 112
 *     runs the 128 kernel, fa2_kernel_head_dim; a share linear between 64 and
 *     128 gave 0.98).
 * The attention ratio (FlashAttention-2 measured in the block over the
 * planner's flash2) is printed, not otherwise checked: it is below 1 (the kernel of
 * 2026 is faster than the planner's flash2, which the published 2023-25
 * runs bear out: docs/PLANNER.md, "Whole blocks measured on an H200").
 * Usage: test_plan_dense_blocks h200_dense_blocks.tsv */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "plan/compute.h"
#include "plan/layout.h"
#include "plan/presets.h"

#define MAX_BLOCKS 32

typedef struct {
    char config[40], kind[8], precision[8];
    int hidden, heads, kv_heads, ffn, seq, micro_batch;
    double eager, graph, graph_r1, fwd, gemm, attention, other, compile; /* seconds; compile < 0: not run */
} MeasuredBlock;

static double ms_or_absent(const char *s) { return strcmp(s, "NA") == 0 ? -1.0 : atof(s) / 1e3; }

static int read_blocks(const char *path, MeasuredBlock *b) {
    FILE *f = fopen(path, "r");
    CHECK(f != NULL, "cannot open %s", path);
    if (!f) return 0;
    char line[512];
    int n = 0;
    while (fgets(line, sizeof line, f) && n < MAX_BLOCKS) {
        if (line[0] == '#' || line[0] == '\n') continue;
        MeasuredBlock *r = &b[n];
        char c[8][16];
        int kernels;
        if (sscanf(line, "%39s %7s %d %d %d %d %d %d %7s %15s %15s %15s %15s %d %15s %15s %15s %15s", r->config,
                   r->kind, &r->hidden, &r->heads, &r->kv_heads, &r->ffn, &r->seq, &r->micro_batch, r->precision, c[0],
                   c[1], c[2], c[3], &kernels, c[4], c[5], c[6], c[7]) != 18) {
            CHECK(0, "%s: unreadable row: %s", path, line);
            continue;
        }
        r->eager = ms_or_absent(c[0]), r->graph = ms_or_absent(c[1]), r->graph_r1 = ms_or_absent(c[2]);
        r->fwd = ms_or_absent(c[3]), r->gemm = ms_or_absent(c[4]), r->attention = ms_or_absent(c[5]);
        r->other = ms_or_absent(c[6]), r->compile = ms_or_absent(c[7]);
        n++;
    }
    fclose(f);
    return n;
}

/* The block as the validation rows describe it: mpt() (GPT style, vocabulary
 * 50368) or the llama3-8b preset, torchao's FP8 linears under fp8. */
static ModelShape block_shape(const MeasuredBlock *b) {
    ModelPreset p;
    model_preset(strcmp(b->kind, "mpt") == 0 ? "gpt3-175b" : "llama3-8b", &p);
    ModelShape m = p.shape;
    m.layers = 1, m.hidden = b->hidden, m.heads = b->heads, m.kv_heads = b->kv_heads, m.ffn = b->ffn;
    m.seq_len = b->seq;
    if (strcmp(b->kind, "mpt") == 0) m.vocab = 50368, m.vocab_multiple = 1;
    m.fp8_linears = FP8_TORCHAO;
    return m;
}

static void check_block(const Hardware *hw, const MeasuredBlock *b) {
    ModelShape m = block_shape(b);
    Layout l = layout_default();
    l.tp = l.pp = l.dp = l.cp = 1, l.micro_batch = b->micro_batch, l.recompute = RECOMPUTE_NONE;
    Precision p = strcmp(b->precision, "fp8") == 0 ? PREC_FP8 : PREC_BF16;
    LayerCompute c = layer_compute(&m, &l, hw, p, ATTN_FLASH2);
    double planned = c.forward + c.backward, curve = 3.0 * c.gemm * SUSTAINED_FRACTION;
    double elementwise = 3.0 * c.elementwise, attention = c.attention + c.attention_backward;
    double fastest = b->compile > 0 ? fmin(b->graph, b->compile) : b->graph;
    char compiled[32] = "";
    if (b->compile > 0) snprintf(compiled, sizeof compiled, ", compiled %.2f", b->compile * 1e3);
    printf("%-16s planner %6.2f ms; measured: graph %6.2f (first run %6.2f), eager %6.2f%s: %.3f of the planner; "
           "products %.3f of the curve, attention %.2f of the planner's", b->config, planned * 1e3, b->graph * 1e3,
           b->graph_r1 * 1e3, b->eager * 1e3, compiled, fastest / planned, b->gemm / curve, b->attention / attention);
    if (strcmp(b->kind, "mpt") == 0) printf(", element-wise %.2f", b->other / elementwise);
    printf("\n");
    CHECK(fastest <= planned, "%s: the planner's block (%.2f ms) is faster than measured (%.2f ms)", b->config,
          planned * 1e3, fastest * 1e3);
    CHECK(fabs(b->gemm / curve - 1.0) <= 0.20, "%s: products %.2f ms, curve %.2f ms", b->config, b->gemm * 1e3,
          curve * 1e3);
    if (strcmp(b->kind, "mpt") != 0) return; /* the eager FP8 casts are not element-wise work as the planner's */
    CHECK(b->other <= elementwise && b->other >= 0.8 * elementwise, "%s: element-wise %.2f ms, planner %.2f ms",
          b->config, b->other * 1e3, elementwise * 1e3);
    CHECK(fabs(b->eager / b->graph - 1.0) <= 0.05, "%s: eager %.2f ms, graph %.2f ms: the host shows", b->config,
          b->eager * 1e3, b->graph * 1e3);
}

static const MeasuredBlock *find_block(const MeasuredBlock *b, int n, const char *config) {
    for (int i = 0; i < n; i++)
        if (strcmp(b[i].config, config) == 0) return &b[i];
    CHECK(0, "no block %s in the measurement", config);
    return NULL;
}

/* Fused attention's rate per useful FLOP (causal forward and backward: in
 * proportion to heads x head dimension x tokens x sequence) at one block's
 * shape, measured and planned, over the same at another's. */
static void check_head_dim(const Hardware *hw, const MeasuredBlock *narrow, const MeasuredBlock *wide) {
    if (!narrow || !wide) return;
    double rate[2][2]; /* [block][measured, planned] */
    const MeasuredBlock *pair[2] = {narrow, wide};
    for (int i = 0; i < 2; i++) {
        const MeasuredBlock *b = pair[i];
        ModelShape m = block_shape(b);
        Layout l = layout_default();
        l.tp = l.pp = l.dp = l.cp = 1, l.micro_batch = b->micro_batch, l.recompute = RECOMPUTE_NONE;
        LayerCompute c = layer_compute(&m, &l, hw, PREC_BF16, ATTN_FLASH2);
        double work = (double)b->hidden * b->micro_batch * b->seq * b->seq; /* heads x head dimension = hidden */
        rate[i][0] = work / b->attention, rate[i][1] = work / (c.attention + c.attention_backward);
    }
    double measured = rate[0][0] / rate[1][0], planned = rate[0][1] / rate[1][1];
    printf("attention per useful FLOP, %s over %s: measured %.3f, planner %.3f\n", narrow->config, wide->config,
           measured, planned);
    CHECK(fabs(planned / measured - 1.0) <= 0.10, "head dimension: planner %.3f, measured %.3f", planned, measured);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s h200_dense_blocks.tsv\n", argv[0]);
        return 2;
    }
    static MeasuredBlock blocks[MAX_BLOCKS];
    int n = read_blocks(argv[1], blocks);
    CHECK(n >= 13, "%s: %d blocks, expected the 13 bench/gpu_dense_layer.py measures", argv[1], n);
    Hardware h200;
    CHECK(hardware_preset("h200", &h200), "h200 preset");
    for (int i = 0; i < n; i++) check_block(&h200, &blocks[i]);
    check_head_dim(&h200, find_block(blocks, n, "mpt-30b_mb14"), find_block(blocks, n, "mpt-70b_mb8"));
    if (failures) {
        printf("%d check(s) failed\n", failures);
        return 1;
    }
    printf("the planner's dense blocks meet the H200 measurement\n");
    return 0;
}

/* test_fp8_driver.c: the FP8 formats, quantization, linear layer and
 * delayed scaling, driven from tests/test_fp8.py over raw float32 files.
 *   cast FMT sat|plain IN OUT        codes (u8) of IN's floats
 *   values FMT OUT                    the 256 codes' values (f32)
 *   quantize FMT BR BC SCALE ROWS COLS IN OUT
 *                                     dequantized values (f32), then the stats as text on stdout
 *   linear RECIPE N IC OC X W G OUT   RECIPE delayed:SX:SW:SG or block; writes out, dinp, dweight (f32)
 *   scaling HISTORY ALGO MARGIN FMT IN OUT
 *                                     IN: amax per step (f32); OUT: the scale used at each step, then the
 *                                     scale after the last update (model/fp8_scaling.h, one tensor)
 * FMT is e4m3 or e5m2. Exits non-zero with a message on bad use. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kernels/fp8.h"
#include "kernels/matmul_fp8.h"
#include "model/fp8_scaling.h"

static Fp8Format format_arg(const char *s) {
    if (strcmp(s, "e4m3") == 0) return FP8_E4M3;
    if (strcmp(s, "e5m2") == 0) return FP8_E5M2;
    bs_die("format must be e4m3 or e5m2 (got '%s')", s);
}

static float *read_floats(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) bs_die("cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long bytes = ftell(f);
    fseek(f, 0, SEEK_SET);
    *n = (size_t)bytes / sizeof(float);
    float *x = bs_malloc((*n ? *n : 1) * sizeof(float));
    if (fread(x, sizeof(float), *n, f) != *n) bs_die("short read of %s", path);
    fclose(f);
    return x;
}

static void write_bytes(const char *path, const void *data, size_t bytes) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, bytes, f) != bytes) bs_die("cannot write %s", path);
    fclose(f);
}

static int cmd_cast(char **argv) {
    Fp8Format fmt = format_arg(argv[0]);
    bool sat = strcmp(argv[1], "sat") == 0;
    size_t n;
    float *x = read_floats(argv[2], &n);
    uint8_t *q = bs_malloc(n ? n : 1);
    for (size_t i = 0; i < n; i++) q[i] = fp8_cast(x[i], fmt, sat);
    write_bytes(argv[3], q, n);
    free(x);
    free(q);
    return 0;
}

static int cmd_values(char **argv) {
    Fp8Format fmt = format_arg(argv[0]);
    float v[256];
    for (int i = 0; i < 256; i++) v[i] = fp8_value((uint8_t)i, fmt);
    write_bytes(argv[1], v, sizeof v);
    return 0;
}

static int cmd_quantize(char **argv) {
    Fp8Quant q = {format_arg(argv[0]), atoi(argv[1]), atoi(argv[2]), strtof(argv[3], NULL)};
    size_t rows = (size_t)atol(argv[4]), cols = (size_t)atol(argv[5]), n;
    float *x = read_floats(argv[6], &n);
    if (n != rows * cols) bs_die("%s holds %zu floats, not %zu x %zu", argv[6], n, rows, cols);
    float *y = bs_malloc(n * sizeof(float));
    Fp8Stats st = {0};
    fp8_quantize(y, NULL, x, rows, cols, &q, &st);
    write_bytes(argv[7], y, n * sizeof(float));
    printf("values %llu nonzero %llu underflow %llu overflow %llu amax %.9g\n", (unsigned long long)st.values,
           (unsigned long long)st.nonzero, (unsigned long long)st.underflow, (unsigned long long)st.overflow,
           (double)st.amax);
    free(x);
    free(y);
    return 0;
}

/* delayed:SX:SW:SG (per-tensor scales, E4M3 X and W, E5M2 G) or block (E4M3 everywhere) */
static void recipe_operands(const char *recipe, Fp8Operand *x, Fp8Operand *w, Fp8Operand *g) {
    float sx, sw, sg;
    if (strcmp(recipe, "block") == 0) {
        *x = *w = *g = (Fp8Operand){FP8_E4M3, FP8_SCALING_BLOCKS, 0, NULL};
    } else if (sscanf(recipe, "delayed:%f:%f:%f", &sx, &sw, &sg) == 3) {
        *x = (Fp8Operand){FP8_E4M3, FP8_SCALING_TENSOR, sx, NULL};
        *w = (Fp8Operand){FP8_E4M3, FP8_SCALING_TENSOR, sw, NULL};
        *g = (Fp8Operand){FP8_E5M2, FP8_SCALING_TENSOR, sg, NULL};
    } else {
        bs_die("recipe must be block or delayed:SX:SW:SG (got '%s')", recipe);
    }
}

static int cmd_linear(char **argv) {
    Fp8Operand x, w, g;
    recipe_operands(argv[0], &x, &w, &g);
    size_t N = (size_t)atol(argv[1]), IC = (size_t)atol(argv[2]), OC = (size_t)atol(argv[3]), nx, nw, ng;
    float *X = read_floats(argv[4], &nx), *W = read_floats(argv[5], &nw), *G = read_floats(argv[6], &ng);
    if (nx != N * IC || nw != OC * IC || ng != N * OC) bs_die("linear: operand sizes do not match N IC OC");
    float *out = bs_malloc(N * OC * sizeof(float)), *dinp = bs_malloc(N * IC * sizeof(float));
    float *dweight = bs_calloc(OC * IC, sizeof(float));
    Fp8Matmul *mm = fp8_matmul_create();
    fp8_linear_forward(mm, out, X, &x, W, &w, NULL, N, (int)IC, (int)OC);
    fp8_linear_backward(mm, dinp, dweight, G, &g, X, &x, W, &w, N, (int)IC, (int)OC);
    fp8_matmul_free(mm);
    FILE *f = fopen(argv[7], "wb");
    if (!f) bs_die("cannot write %s", argv[7]);
    fwrite(out, sizeof(float), N * OC, f);
    fwrite(dinp, sizeof(float), N * IC, f);
    fwrite(dweight, sizeof(float), OC * IC, f);
    fclose(f);
    free(X), free(W), free(G), free(out), free(dinp), free(dweight);
    return 0;
}

static int cmd_scaling(char **argv) {
    Fp8Options o = {FP8_RECIPE_DELAYED, atoi(argv[0]), FP8_AMAX_MAX, atoi(argv[2])};
    if (strcmp(argv[1], "most_recent") == 0) o.amax_algo = FP8_AMAX_MOST_RECENT;
    else if (strcmp(argv[1], "max") != 0) bs_die("algo must be max or most_recent (got '%s')", argv[1]);
    Fp8Format fmt = format_arg(argv[3]);
    size_t steps;
    float *amax = read_floats(argv[4], &steps);
    float *scales = bs_malloc((steps + 1) * sizeof(float));
    Fp8State *s = fp8_scaling_create(&o, 1);
    const int kind = fmt == FP8_E4M3 ? FP8_INPUT : FP8_GRAD; /* delayed: e4m3 forward, e5m2 backward */
    for (size_t t = 0; t < steps; t++) {
        fp8_scaling_begin_step(s);
        Fp8Operand op = fp8_scaling_operand(s, 0, kind);
        scales[t] = op.scale;
        op.stats->amax = amax[t]; /* what a forward or backward would have recorded */
        fp8_scaling_update(s, NULL, NULL);
    }
    scales[steps] = fp8_scaling_operand(s, 0, kind).scale;
    fp8_scaling_free(s);
    write_bytes(argv[5], scales, (steps + 1) * sizeof(float));
    free(amax);
    free(scales);
    return 0;
}

int main(int argc, char **argv) {
    static const struct {
        const char *name;
        int args;
        int (*run)(char **);
    } cmds[] = {{"cast", 4, cmd_cast}, {"values", 2, cmd_values}, {"quantize", 8, cmd_quantize},
                {"linear", 8, cmd_linear}, {"scaling", 6, cmd_scaling}};
    for (size_t i = 0; argc >= 2 && i < sizeof cmds / sizeof cmds[0]; i++)
        if (strcmp(argv[1], cmds[i].name) == 0) {
            if (argc != cmds[i].args + 2) bs_die("fp8_driver %s takes %d arguments", cmds[i].name, cmds[i].args);
            return cmds[i].run(argv + 2);
        }
    bs_die("usage: fp8_driver cast|values|quantize|linear|scaling ... (see tests/test_fp8_driver.c)");
}

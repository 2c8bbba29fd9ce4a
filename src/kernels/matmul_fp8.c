/* matmul_fp8.c: the FP8 linear layer on this CPU (see matmul_fp8.h): each
 * operand quantized and dequantized into a scratch slot, then matmul.c. */
#include "kernels/matmul_fp8.h"

#include <stdlib.h>

#include "core/error.h"
#include "kernels/kernels.h"

enum { SLOT_X, SLOT_W, SLOT_G, NUM_SLOTS };

struct Fp8Matmul {
    float *slot[NUM_SLOTS];
    size_t slot_floats[NUM_SLOTS];
};

Fp8Matmul *fp8_matmul_create(void) { return bs_calloc(1, sizeof(Fp8Matmul)); }

void fp8_matmul_free(Fp8Matmul *mm) {
    if (!mm) return;
    for (int s = 0; s < NUM_SLOTS; s++) free(mm->slot[s]);
    free(mm);
}

/* The roles' block shapes (see the table in matmul_fp8.h). */
typedef enum { ALONG_ROWS, ALONG_COLS, TILES } Role;

/* The dequantized FP8 values of src (rows, cols) in a slot. */
static const float *quantized(Fp8Matmul *mm, int slot, const float *src, size_t rows, size_t cols,
                              const Fp8Operand *op, Role role) {
    const size_t n = rows * cols;
    if (n > mm->slot_floats[slot]) {
        free(mm->slot[slot]);
        mm->slot[slot] = bs_malloc(n * sizeof(float));
        mm->slot_floats[slot] = n;
    }
    Fp8Quant q = {op->format, 0, 0, op->scale};
    if (op->scaling == FP8_SCALING_BLOCKS) {
        q.block_rows = role == ALONG_ROWS ? 1 : FP8_BLOCK;
        q.block_cols = role == ALONG_COLS ? 1 : FP8_BLOCK;
        q.scale = 0;
    }
    fp8_quantize(mm->slot[slot], NULL, src, rows, cols, &q, op->stats);
    return mm->slot[slot];
}

/* the same operand, not counted again */
static Fp8Operand uncounted(const Fp8Operand *op) {
    Fp8Operand o = *op;
    o.stats = NULL;
    return o;
}

void fp8_linear_forward(Fp8Matmul *mm, float *out, const float *inp, const Fp8Operand *x, const float *weight,
                        const Fp8Operand *w, const float *bias, size_t N, int IC, int OC) {
    if (N == 0) return;
    const float *xq = quantized(mm, SLOT_X, inp, N, (size_t)IC, x, ALONG_ROWS);
    const float *wq = quantized(mm, SLOT_W, weight, (size_t)OC, (size_t)IC, w, TILES);
    matmul_forward(out, xq, wq, bias, N, IC, OC);
}

void fp8_linear_backward(Fp8Matmul *mm, float *dinp, float *dweight, const float *dout, const Fp8Operand *g,
                         const float *inp, const Fp8Operand *x, const float *weight, const Fp8Operand *w, size_t N,
                         int IC, int OC) {
    if (N == 0) return;
    Fp8Operand g_again = uncounted(g), x_again = uncounted(x), w_again = uncounted(w);
    const Fp8Operand *g_wgrad = g;
    if (dinp) {
        const float *gq = quantized(mm, SLOT_G, dout, N, (size_t)OC, g, ALONG_ROWS);
        const float *wq = quantized(mm, SLOT_W, weight, (size_t)OC, (size_t)IC, &w_again, TILES);
        matmul_backward(dinp, NULL, NULL, gq, NULL, wq, N, IC, OC);
        g_wgrad = &g_again;
    }
    if (dweight) {
        /* per-tensor scaling: the dgrad product's values again; blocks run along N here */
        const float *gq = dinp && g->scaling == FP8_SCALING_TENSOR
                              ? mm->slot[SLOT_G]
                              : quantized(mm, SLOT_G, dout, N, (size_t)OC, g_wgrad, ALONG_COLS);
        const float *xq = quantized(mm, SLOT_X, inp, N, (size_t)IC, &x_again, ALONG_COLS);
        matmul_backward(NULL, dweight, NULL, gq, xq, NULL, N, IC, OC);
    }
}

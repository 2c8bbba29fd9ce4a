/* fp8_math.h: the arithmetic of the FP8 quantize kernel (DK_FP8_QUANTIZE),
 * compiled into the CUDA kernel (nvcc: host and device) and sim's loop, so
 * CI checks the GPU's codes, scales and statistics bit for bit against the
 * CPU's emulation (kernels/fp8.h). What the GPU alone runs is how the work
 * is cut (one thread block per tile, its reductions); the formulas are these.
 *
 * - An element: code = cast(x s) saturating (kernels/minifloat.h's rounding,
 *   the one the CPU uses), counted as fp8_quantize counts it (non-zero,
 *   flushed to zero, saturated; amax ignoring NaN); its value code * (1/s).
 * - A block's scale: 2^floor(log2(fmax / amax)), 1 where amax is 0 or not
 *   finite (fp8_block_scale's).
 * - Tiles: the operand (rows, cols) cut into tiles of (block_rows,
 *   block_cols) for the block recipe (a tile is a block: its amax gives its
 *   scale), or of FM_TILE x FM_TILE under one per-tensor scale.
 * - Where the GEMM finds a block's 1/s (cuBLASLt's scale tensors, as
 *   PyTorch's torch._scaled_mm checks them before it hands them to
 *   cuBLASLt): the operand as the product reads it is (M, K) with K
 *   contiguous (codes (rows, cols) K = cols, or with transpose the codes
 *   (cols, rows), K = rows). 1x128 blocks
 *   (CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F): scale (K/128, M), M
 *   contiguous ("outer-dim-major"); 128x128 blocks (BLK128x128_32F): scale
 *   (M/128, K/128), K/128 contiguous, rows padded to a multiple of 4 floats
 *   (16 bytes). Per tensor: one value. */
#ifndef BS_DEVICE_FP8_MATH_H
#define BS_DEVICE_FP8_MATH_H

#include <stddef.h>

#include "device/device_kernels.h"
#include "device/kernel_math.h"
#include "kernels/minifloat.h"

#define FM_TILE 128  /* a per-tensor tile's side */
#define FM_BLOCK 128 /* the block recipe's block side (kernels/fp8.h's FP8_BLOCK) */

/* The statistics of the elements one worker quantized. */
typedef struct {
    unsigned long long nonzero, underflow, overflow;
    float amax;
} FmCounts;

BS_HD float fm_max(int e5m2) { return e5m2 ? 57344.0f : 448.0f; }

/* The saturating cast of the format (host code: a kernel gets it by value). */
static inline MiniFormat fm_format(int e5m2) {
    MiniFormat f = e5m2 ? MINI_E5M2_SAT : MINI_E4M3_SAT;
    return f;
}

/* A block's power-of-two scale for its amax (kernels/fp8.h). */
BS_HD float fm_block_scale(float amax, float fmax) {
    if (!(amax > 0) || !isfinite(amax)) return 1.0f;
    const float s = fmax / amax;
    if (!isfinite(s)) return 0x1p127f;
    return mini_bits_float(mini_float_bits(s) & 0xff800000u);
}

/* One element's code, counted in c. */
BS_HD uint8_t fm_quantize(float x, float s, float fmax, const MiniFormat *f, FmCounts *c) {
    const float y = x * s;
    const uint8_t code = (uint8_t)mini_from_float(y, f);
    c->amax = fmaxf(c->amax, fabsf(x));
    c->nonzero += x != 0;
    c->underflow += x != 0 && (code & 0x7f) == 0;
    c->overflow += fabsf(y) > fmax;
    return code;
}

/* A code's value under its block's 1/s. */
BS_HD float fm_value(uint8_t code, float scale_inv, const MiniFormat *f) {
    return mini_to_float(code, f) * scale_inv;
}

/* How an operand is tiled and where its scales go. */
typedef struct {
    int rows, cols, tile_rows, tile_cols, blocks, transpose;
} FmTiling;

BS_HD FmTiling fm_tiling(const DeviceFp8Layout *l) {
    const int blocks = l->block_rows > 0 && l->block_cols > 0;
    FmTiling t = {l->rows, l->cols, blocks ? l->block_rows : FM_TILE, blocks ? l->block_cols : FM_TILE, blocks,
                  l->transpose};
    return t;
}

BS_HD int fm_tiles_across(const FmTiling *t) { return (t->cols + t->tile_cols - 1) / t->tile_cols; }

BS_HD size_t fm_tiles(const FmTiling *t) {
    return (size_t)((t->rows + t->tile_rows - 1) / t->tile_rows) * (size_t)fm_tiles_across(t);
}

BS_HD size_t fm_round4(size_t n) { return (n + 3) / 4 * 4; }

/* The scale grid as the product reads it: m blocks by k blocks, and whether a block spans one row of M (1x128). */
typedef struct {
    size_t m_blocks, k_blocks;
    int vector;
} FmGrid;

BS_HD FmGrid fm_grid(const FmTiling *t) {
    const size_t down = (size_t)((t->rows + t->tile_rows - 1) / t->tile_rows), across = (size_t)fm_tiles_across(t);
    const int m_side = t->transpose ? t->tile_cols : t->tile_rows;
    FmGrid g = {t->transpose ? across : down, t->transpose ? down : across, m_side == 1};
    return g;
}

/* The number of floats of the scale tensor (see above). */
BS_HD size_t fm_scale_count(const FmTiling *t) {
    if (!t->blocks) return 1;
    const FmGrid g = fm_grid(t);
    return g.vector ? g.k_blocks * g.m_blocks : g.m_blocks * fm_round4(g.k_blocks);
}

/* Where tile (tile_row, tile_col)'s 1/s goes. */
BS_HD size_t fm_scale_index(const FmTiling *t, size_t tile_row, size_t tile_col) {
    if (!t->blocks) return 0;
    const FmGrid g = fm_grid(t);
    const size_t m = t->transpose ? tile_col : tile_row, k = t->transpose ? tile_row : tile_col;
    return g.vector ? k * g.m_blocks + m : m * fm_round4(g.k_blocks) + k;
}

/* Where element (r, c)'s code goes: (rows, cols), or (cols, rows) transposed. */
BS_HD size_t fm_code_index(const FmTiling *t, int r, int c) {
    return t->transpose ? (size_t)c * t->rows + r : (size_t)r * t->cols + c;
}

/* Where the 1/s of element (m, k) of an operand, as a product reads it ((m, k), k contiguous), sits. */
BS_HD size_t fm_scale_of(const FmTiling *t, int m, int k) {
    const int r = t->transpose ? k : m, c = t->transpose ? m : k;
    return fm_scale_index(t, (size_t)(r / t->tile_rows), (size_t)(c / t->tile_cols));
}

/* out (i, j) (at j m + i) of the plain product: the dequantized codes' dot product in k order, then beta out and bias. */
BS_HD void fm_product(const Fp8ProductArgs *p, const MiniFormat *fa, const MiniFormat *fb, int i, int j) {
    const FmTiling ta = fm_tiling(&p->la), tb = fm_tiling(&p->lb);
    const uint8_t *a = p->a + (size_t)i * p->k, *b = p->b + (size_t)j * p->k;
    float acc = 0;
    for (int k = 0; k < p->k; k++)
        acc += fm_value(a[k], p->a_scale_inv[fm_scale_of(&ta, i, k)], fa) *
               fm_value(b[k], p->b_scale_inv[fm_scale_of(&tb, j, k)], fb);
    float *out = p->out + (size_t)j * p->m + i;
    if (p->bias) acc += p->bias[i];
    *out = p->beta != 0 ? p->beta * *out + acc : acc;
}

#endif

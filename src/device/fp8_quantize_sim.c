/* fp8_quantize_sim.c: sim's FP8 quantize and plain product kernels
 * (DK_FP8_QUANTIZE, DK_FP8_PRODUCT): fp8_math.h's arithmetic in the CUDA
 * kernels' order of work, one tile after another (a tile's amax, its scale,
 * then its elements), the statistics summed as the CUDA kernel's atomics do. */
#include "device/fp8_math.h"
#include "device/sim_kernels.h"

static float source(const Fp8QuantizeArgs *a, size_t i) {
    return a->src_bf16 ? km_bf16_to_float(a->src_bf16[i]) : a->src[i];
}

/* One tile: its block scale (or the tensor's), its codes, its counts. */
static void quantize_tile(const Fp8QuantizeArgs *a, const FmTiling *t, const MiniFormat *f, size_t tile,
                          FmCounts *c) {
    const int across = fm_tiles_across(t);
    const size_t tr = tile / (size_t)across, tc = tile % (size_t)across;
    const int r0 = (int)tr * t->tile_rows, c0 = (int)tc * t->tile_cols;
    const int r1 = r0 + t->tile_rows < t->rows ? r0 + t->tile_rows : t->rows;
    const int c1 = c0 + t->tile_cols < t->cols ? c0 + t->tile_cols : t->cols;
    const float fmax = fm_max(a->layout.e5m2);
    float s = a->scale;
    if (t->blocks) {
        float amax = 0;
        for (int r = r0; r < r1; r++)
            for (int col = c0; col < c1; col++) amax = fmaxf(amax, fabsf(source(a, (size_t)r * t->cols + col)));
        s = fm_block_scale(amax, fmax);
    }
    for (int r = r0; r < r1; r++)
        for (int col = c0; col < c1; col++)
            a->codes[fm_code_index(t, r, col)] = fm_quantize(source(a, (size_t)r * t->cols + col), s, fmax, f, c);
    if (t->blocks || tile == 0) a->scale_inv[fm_scale_index(t, tr, tc)] = 1.0f / s;
}

void sim_fp8_quantize(const Fp8QuantizeArgs *a) {
    const FmTiling t = fm_tiling(&a->layout);
    const MiniFormat f = fm_format(a->layout.e5m2);
    const size_t tiles = t.rows > 0 && t.cols > 0 ? fm_tiles(&t) : 0;
    DeviceFp8Stats *st = a->stats;
    for (size_t tile = 0; tile < tiles; tile++) {
        FmCounts c = {0, 0, 0, 0};
        quantize_tile(a, &t, &f, tile, &c);
        if (!st) continue;
        st->nonzero += c.nonzero;
        st->underflow += c.underflow;
        st->overflow += c.overflow;
        st->amax = fmaxf(st->amax, c.amax);
    }
    if (st) st->values += (uint64_t)t.rows * (uint64_t)t.cols;
}

void sim_fp8_product(const Fp8ProductArgs *p) {
    const MiniFormat fa = fm_format(p->la.e5m2), fb = fm_format(p->lb.e5m2);
    for (int j = 0; j < p->n; j++)
        for (int i = 0; i < p->m; i++) fm_product(p, &fa, &fb, i, j);
}

/* attention_kernels.c: kernel generation, head dimension and window terms
 * of fused attention (see attention_kernels.h). */
#include "plan/attention_kernels.h"

#include <math.h>

/* The sequence lengths of the FlashAttention papers' benchmarks. */
static const double LENGTH[] = {512, 1024, 2048, 4096, 8192, 16384};
#define LENGTHS ((int)(sizeof LENGTH / sizeof LENGTH[0]))

/* num / den at `block` tokens, interpolated in log length between the
 * benchmark lengths and held beyond the ends. */
static double ratio_at_length(const double *num, const double *den, double block) {
    if (block <= LENGTH[0]) return num[0] / den[0];
    for (int i = 1; i < LENGTHS; i++) {
        if (block <= LENGTH[i]) {
            double w = log(block / LENGTH[i - 1]) / log(LENGTH[i] / LENGTH[i - 1]);
            return (1 - w) * num[i - 1] / den[i - 1] + w * num[i] / den[i];
        }
    }
    return num[LENGTHS - 1] / den[LENGTHS - 1];
}

/* Shah et al. 2024 (FlashAttention-3), figure 5, forward on H100 80GB SXM5,
 * causal, the bars' printed labels in TFLOP/s at 512 ... 16K tokens. */
static const double FA3_D128[] = {292, 423, 521, 579, 602, 616}, FA2_D128[] = {191, 260, 298, 319, 333, 335};
static const double FA3_D64[] = {197, 265, 371, 420, 460, 473};

/* FlashAttention-2's forward rate over FlashAttention-3's at head dimension
 * 128, causal (figure 5(d): 0.65 at 512, 0.57 at 2K, 0.54 from 16K on); the
 * panel without the mask gives the same within 0.03 (362 / 625 = 0.58 at
 * 2K, 370 / 648 = 0.57 at 16K). Its backward keeps the forward's ratio (322
 * against 370 TFLOP/s at 16K, 0.87, as FlashAttention-3's 561 against 648),
 * so the one share scales both. */
double flash2_share(double block) { return ratio_at_length(FA2_D128, FA3_D128, block); }

/* Least-squares fits (in log rate, the level free) of L / (L + c) to the
 * measured forward + backward rates: cuDNN 9.19 on H200, 238, 341, 421,
 * 484, 524, 560, 548 TFLOP/s at 512 ... 32K tokens (1.3% rms; the earlier
 * 220, fitted to FlashAttention-3's forward alone, put 512 tokens at 0.71 of
 * 16K where forward and backward measure 0.42: the backward ramps more
 * slowly than the forward, 0.61 of its rate at 512 and 0.92 at 16K);
 * FlashAttention-2 (torch's flash backend) 162 ... 316 TFLOP/s, c = 510
 * (2.0% rms). */
#define HOPPER_HALF_LENGTH 710.0
#define FA2_HALF_LENGTH 510.0

double flash_half_length(bool fa3) { return fa3 ? HOPPER_HALF_LENGTH : FA2_HALF_LENGTH; }

/* Rate at head dimension 64 over 128, causal:
 *   FlashAttention-3 (figure 5(b) over 5(d)): 197 / 292 = 0.67 at 512 ...
 *     473 / 616 = 0.77 at 16K, by block length;
 *   FlashAttention-2 (Dao 2023, figure 4(c) and (d), forward + backward on
 *     A100): 171 against 189 TFLOP/s at 16K tokens, 0.905 (88 / 99 = 0.89 at
 *     512, 140 / 155 = 0.90 at 2K; on H100, FlashAttention-3's figure 5(b)
 *     and (d) give FlashAttention-2 299 / 335 = 0.89 at 16K, 0.88-0.94). */
#define FA2_HEAD_DIM_64_SHARE (171.0 / 189.0)

double head_dim_share(double d, bool fa3, double block) {
    double at64 = fa3 ? ratio_at_length(FA3_D64, FA3_D128, block) : FA2_HEAD_DIM_64_SHARE;
    if (d >= 128) return 1.0;
    if (d <= 64) return at64;
    return at64 + (1.0 - at64) * (d - 64) / 64.0;
}

/* Dao-AILab/flash-attention, csrc/flash_attn/flash_api.cpp (v2.x):
 * head_size_rounded = head_size <= 192 ? round_multiple(head_size, 32) : 256,
 * the size the kernel is dispatched by (src/static_switch.h, HEADDIM_SWITCH:
 * kHeadDim 32, 64, 96, 128 for HEADDIM <= each, above 128 by version among
 * 160, 192, 224 and 256; this function follows head_size_rounded). PyTorch's
 * SDPA flash backend is a copy of these kernels with the same rounding
 * (aten/src/ATen/native/transformers/cuda/flash_attn/flash_api.cpp). */
double fa2_kernel_head_dim(double d) {
    if (d > 192) return 256.0;
    return d <= 32 ? 32.0 : 32.0 * ceil(d / 32.0);
}

double window_fraction(double s, double window) {
    if (window <= 0 || window >= s) return 0.5;
    return window / s - window * window / (2.0 * s * s);
}

/* attention_kernels.c: kernel generation, head dimension and window terms
 * of fused attention (see attention_kernels.h). */
#include "plan/attention_kernels.h"

#include <math.h>

/* Dao 2023 (FlashAttention-2), figure 4(c), attention forward + backward on
 * A100 80GB, causal, head dimension 64, the bars' printed labels:
 * FlashAttention Triton 59, 75, 79, 76, 79, 67 against FlashAttention-2 88,
 * 119, 140, 156, 165, 171 TFLOP/s at 512, 1K, 2K, 4K, 8K, 16K tokens (the
 * paper's text: FlashAttention-2 is 1.3-2.5x faster than FlashAttention in
 * Triton). Interpolated in log length, held beyond the ends. */
double triton_share(double block) {
    static const double length[] = {512, 1024, 2048, 4096, 8192, 16384};
    static const double triton[] = {59, 75, 79, 76, 79, 67}, fa2[] = {88, 119, 140, 156, 165, 171};
    const int n = (int)(sizeof length / sizeof length[0]);
    if (block <= length[0]) return triton[0] / fa2[0];
    for (int i = 1; i < n; i++) {
        if (block <= length[i]) {
            double w = log(block / length[i - 1]) / log(length[i] / length[i - 1]);
            return (1 - w) * triton[i - 1] / fa2[i - 1] + w * triton[i] / fa2[i];
        }
    }
    return triton[n - 1] / fa2[n - 1];
}

/* Rate at head dimension 64 over 128, causal:
 *   FlashAttention-2 (Dao 2023, figure 4(c) and (d), forward + backward on
 *     A100): 171 against 189 TFLOP/s at 16K tokens, 0.905 (88 / 99 = 0.89 at
 *     512, 140 / 155 = 0.90 at 2K);
 *   FlashAttention-3 (Shah et al. 2024, figure 5(b) and (d), forward on
 *     H100): 475 against 616 TFLOP/s at 16K tokens, 0.771. */
#define FA2_HEAD_DIM_64_SHARE (171.0 / 189.0)
#define FA3_HEAD_DIM_64_SHARE (475.0 / 616.0)

double head_dim_share(double d, bool fa3) {
    double at64 = fa3 ? FA3_HEAD_DIM_64_SHARE : FA2_HEAD_DIM_64_SHARE;
    if (d >= 128) return 1.0;
    if (d <= 64) return at64;
    return at64 + (1.0 - at64) * (d - 64) / 64.0;
}

double window_fraction(double s, double window) {
    if (window <= 0 || window >= s) return 0.5;
    return window / s - window * window / (2.0 * s * s);
}

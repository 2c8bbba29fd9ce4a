/* attention_kernels.c: head dimension and window terms of fused attention (see attention_kernels.h). */
#include "plan/attention_kernels.h"

#include <math.h>

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

/* gemm_model.c: tile-and-wave rate of one matmul (see gemm_model.h).
 *
 * For tiles of tm x tn on s SMs, with t = ceil(m/tm) ceil(n/tn) tiles:
 *   time = ceil(t / s) x (2 tm tn k / (eta P / s) + tm tn e_out / (B / s) + L)
 * at least the roofline's e_in (mk + kn) / B + e_out mn / B, where P is the
 * peak, B the HBM bandwidth, L the per-tile latency and eta the main loop's
 * fraction of peak, chosen so that the measured best shape reaches MAMF;
 * and no rate above MAMF. */
#include "plan/gemm_model.h"

#include <math.h>

/* The tile shapes a Hopper/Ampere library chooses among (CUTLASS and
 * cuBLAS's 128x256, 128x128 and 64x128 for 16-bit and 8-bit inputs). */
static const double TILES[][2] = {{128, 256}, {128, 128}, {64, 128}};

static double output_bytes(Precision p) { return p == PREC_FP32 ? 4.0 : 2.0; } /* FP8 writes BF16 */

static double mamf(const Hardware *hw, Precision p) {
    return p == PREC_FP8 && hw->peak_fp8 > 0 && hw->gemm_efficiency_fp8 > 0 ? hw->gemm_efficiency_fp8
                                                                           : hw->gemm_efficiency;
}

/* One tile shape's time: main-loop seconds at eta = 1 (divided by eta when
 * it is less) and the fixed seconds, summed over its waves. */
static void tile_parts(const Hardware *hw, Precision p, double latency, int tile, double m, double n, double k,
                       double *main_loop, double *fixed) {
    double sms = hw->sms, tm = TILES[tile][0], tn = TILES[tile][1];
    double waves = ceil(ceil(m / tm) * ceil(n / tn) / sms);
    *main_loop = waves * 2.0 * tm * tn * k / (hardware_peak(hw, p) / sms);
    *fixed = waves * (tm * tn * output_bytes(p) / (hw->hbm_bw / sms) + latency);
}

#define N_TILES ((int)(sizeof(TILES) / sizeof(TILES[0])))

static double tiled_seconds(const Hardware *hw, Precision p, double latency, double eta, double m, double n,
                            double k) {
    double best = INFINITY;
    for (int i = 0; i < N_TILES; i++) {
        double main_loop, fixed;
        tile_parts(hw, p, latency, i, m, n, k, &main_loop, &fixed);
        best = fmin(best, main_loop / eta + fixed);
    }
    double roofline = (precision_operand_bytes(p) * (m * k + k * n) + output_bytes(p) * m * n) / hw->hbm_bw;
    return fmax(best, roofline);
}

/* Main-loop efficiency that puts the measured best shape at MAMF. Each
 * tile's time falls with eta, so the fastest tiling first reaches the
 * measured time at the smallest of the tiles' own solutions. */
static double main_loop_efficiency(const Hardware *hw, Precision p, double latency) {
    const double *s = hw->mamf_shape[p == PREC_FP8 && hw->peak_fp8 > 0 ? 1 : 0];
    double target = 2.0 * s[0] * s[1] * s[2] / (mamf(hw, p) * hardware_peak(hw, p));
    double eta = 1.0;
    for (int i = 0; i < N_TILES; i++) {
        double main_loop, fixed;
        tile_parts(hw, p, latency, i, s[0], s[1], s[2], &main_loop, &fixed);
        if (target > fixed) eta = fmin(eta, main_loop / (target - fixed));
    }
    return eta;
}

double gemm_model_rate_at(const Hardware *hw, Precision p, double m, double n, double k, double tile_latency) {
    if (m <= 0 || n <= 0 || k <= 0) return 0.0;
    double eta = main_loop_efficiency(hw, p, tile_latency);
    double rate = 2.0 * m * n * k / tiled_seconds(hw, p, tile_latency, eta, m, n, k);
    return fmin(rate, mamf(hw, p) * hardware_peak(hw, p));
}

double gemm_model_rate(const Hardware *hw, Precision p, double m, double n, double k) {
    return gemm_model_rate_at(hw, p, m, n, k, GEMM_TILE_LATENCY);
}

double gemm_model_shape_factor(const Hardware *hw, Precision p, double m, double n, double k) {
    return gemm_model_rate(hw, p, m, n, k) / (mamf(hw, p) * hardware_peak(hw, p));
}

/* hardware.c: precision names and per-precision peaks (see hardware.h). */
#include "plan/hardware.h"

#include <string.h>

static const char *const PRECISION_NAMES[] = {"bf16", "fp8", "fp32"};
static const char *const ALGO_NAMES[] = {"ring", "tree", "hierarchical", "mpi", "in-network"};

const char *precision_name(Precision p) { return PRECISION_NAMES[p]; }
const char *algo_name(CollectiveAlgo a) { return ALGO_NAMES[a]; }

bool precision_parse(const char *s, Precision *out) {
    for (int i = 0; i < 3; i++)
        if (strcmp(s, PRECISION_NAMES[i]) == 0) {
            *out = (Precision)i;
            return true;
        }
    return false;
}

bool algo_parse(const char *s, CollectiveAlgo *out) {
    for (int i = 0; i < ALGO_IN_NETWORK; i++) /* calibration files name the measured ones */
        if (strcmp(s, ALGO_NAMES[i]) == 0) {
            *out = (CollectiveAlgo)i;
            return true;
        }
    return false;
}

double hardware_peak(const Hardware *hw, Precision p) {
    if (p == PREC_FP32) return hw->peak_fp32;
    if (p == PREC_FP8 && hw->peak_fp8 > 0) return hw->peak_fp8;
    return hw->peak_bf16;
}

int precision_operand_bytes(Precision p) { return p == PREC_FP32 ? 4 : p == PREC_FP8 ? 1 : 2; }
/* FP8 training keeps activations for backward in BF16. */
int precision_activation_bytes(Precision p) { return p == PREC_FP32 ? 4 : 2; }

double hardware_share_cores(Hardware *hw) {
    double threads = (double)hw->gpus_per_node * hw->threads_per_gpu;
    if (hw->cpu_cores <= 0 || hw->threads_per_gpu <= 0 || threads <= hw->cpu_cores) return 1.0;
    double share = hw->cpu_cores / threads;
    for (int i = 0; i < hw->n_gemm; i++) hw->gemm[i].flops_per_s *= share;
    hw->peak_fp32 *= share;
    hw->peak_bf16 *= share;
    hw->peak_fp8 *= share;
    hw->hbm_bw *= share;
    hw->elementwise_bw *= share;
    hw->nvlink_bw *= share;
    hw->net_bw *= share;
    hw->nvlink_latency /= share;
    hw->net_latency /= share;
    for (int a = 0; a < ALGO_COUNT; a++) {
        hw->coll[a].busbw *= share;
        hw->coll[a].alpha /= share;
    }
    return share;
}

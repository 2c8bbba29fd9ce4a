/* gemm_model.h: the rate of one matmul on a GPU, from its shape.
 *
 * A GPU matmul kernel cuts C (m x n) into output tiles of tm x tn and runs
 * them in waves of one tile per streaming multiprocessor (NVIDIA, "Matrix
 * Multiplication Background User's Guide": tile and wave quantization).
 * One tile costs its main loop, 2 tm tn k FLOPs at the SM's share of the
 * main-loop rate, plus a fixed part that does not shrink with k: writing the
 * tile (tm tn output bytes at the SM's share of HBM bandwidth) and a start-up
 * latency (filling the operand pipeline, the epilogue's synchronisation). So
 * a matmul of short k, or of few tiles (small or tensor-parallel-split m and
 * n), reaches a lower fraction of peak than a large one. The kernel library
 * picks the tile shape; the model takes the fastest of the usual three. The
 * main-loop rate is set so that the best shape Stas Bekman's mamf-finder
 * found on each GPU reaches its measured MAMF (hardware.h), and no shape is
 * faster than moving its operands once through HBM (the roofline).
 *
 * No shape is faster than the measured MAMF itself: the curve is capped
 * there (the main-loop rate is fitted with the fixed part included, so
 * without the cap shapes with more k per tile than the MAMF shape came out
 * above it: H200 FP8 at 1574 TFLOP/s, against a MAMF of 1452 and 1171-1222
 * measured).
 *
 * The one constant, the per-tile latency, is fitted to this project's own
 * measurement of cuBLAS on one H200 (tests/data/h200_cublas_gemm.tsv, made
 * by bench/gpu_kernels.py: 269 BF16 and 269 FP8 products in two sweeps,
 * timed from CUDA graphs so that short products are not timed by the host):
 * the validation models' per-GPU linear layers at their tensor-parallel
 * splits (forward, input and weight gradients), MoE experts, a k ramp and
 * DeepGEMM's shapes. 0.4 us leaves a level-fitted spread of 4.4% (BF16) and
 * 5.5% (FP8) over them, the dense layers 2.2% and 2.7%, every dense layer
 * within 7.8% (tested in plan_kernels_measured, which also checks that
 * 0.4 us is the least-variance fit). The earlier 1.5 us, fitted to
 * DeepGEMM's published H800 FP8 table (deepseek-ai/DeepGEMM README,
 * m = 4096), leaves 7.3% and 6.6% there:
 * DeepGEMM's fine-grained scaling makes its k ramp steeper than cuBLAS's
 * (at k = 512, 0.43 of its best against cuBLAS FP8's 0.62). Hopper and
 * Ampere only: on the B200 the measured MAMF at k = 3072 leaves no room for
 * these fixed costs (its tiles are larger and its epilogues overlap the
 * next tile's main loop), so the B200 keeps the plain roofline
 * (compute.h). */
#ifndef BS_PLAN_GEMM_MODEL_H
#define BS_PLAN_GEMM_MODEL_H

#include "plan/hardware.h"

#define GEMM_TILE_LATENCY 0.4e-6

/* FLOP/s of one (m x k) by (k x n) product on an unshared GPU (hw->sms > 0),
 * before the sustained fraction (compute.h). */
double gemm_model_rate(const Hardware *hw, Precision p, double m, double n, double k);

/* The same with another per-tile latency (seconds): what the fit is checked with. */
double gemm_model_rate_at(const Hardware *hw, Precision p, double m, double n, double k, double tile_latency);

/* The same product's fraction of the precision's best measured rate (MAMF),
 * 1 at the best shape: what the shape costs. */
double gemm_model_shape_factor(const Hardware *hw, Precision p, double m, double n, double k);

#endif

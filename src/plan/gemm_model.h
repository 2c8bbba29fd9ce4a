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
 * The one constant, the per-tile latency, is fitted to DeepGEMM's published
 * H800 FP8 table (deepseek-ai/DeepGEMM README, "Normal GEMMs for dense
 * models", m = 4096: 590 ... 1358 TFLOP/s as k goes 512 ... 16384, a ramp
 * the write and latency terms make): 1.5 us reproduces its six
 * training-sized rows within 4% (mean 1.7%; tested in plan_formulas; 1 us
 * gives a mean of 2.7%, 2 us 4.4%). Hopper and Ampere only: on the B200 the
 * measured MAMF at k = 3072 leaves no room for these fixed costs (its tiles
 * are larger and its epilogues overlap the next tile's main loop), so the
 * B200 keeps the plain roofline (compute.h). */
#ifndef BS_PLAN_GEMM_MODEL_H
#define BS_PLAN_GEMM_MODEL_H

#include "plan/hardware.h"

#define GEMM_TILE_LATENCY 1.5e-6

/* FLOP/s of one (m x k) by (k x n) product on an unshared GPU (hw->sms > 0),
 * before the sustained fraction (compute.h). */
double gemm_model_rate(const Hardware *hw, Precision p, double m, double n, double k);

/* The same product's fraction of the precision's best measured rate (MAMF),
 * 1 at the best shape: what the shape costs. */
double gemm_model_shape_factor(const Hardware *hw, Precision p, double m, double n, double k);

#endif

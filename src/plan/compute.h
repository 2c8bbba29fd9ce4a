/* compute.h: how long one GPU computes one layer for one micro-batch, and
 * what achieved fraction of peak that implies.
 *
 * A matmul runs at the rate its per-GPU shape allows (gemm_model.h: tiles,
 * waves and the fixed cost of each tile, from the measured MAMF) times the
 * sustained fraction below; GPUs without the tile model (sms = 0) take
 * flops / (peak x MAMF x S) plus the time to move the operands through HBM. Element-wise work (norms, activations, softmax, dropout,
 * residuals) is memory-bound: its traffic is taken proportional to the
 * activation bytes a layer stores (memory.h). Measured matmul rates from a
 * calibration file replace the roofline. Communication is in comms.h. */
#ifndef BS_PLAN_COMPUTE_H
#define BS_PLAN_COMPUTE_H

#include "plan/attention_kernels.h" /* flash2_share, the fused kernels' other terms */
#include "plan/hardware.h"
#include "plan/layout.h"
#include "plan/model.h"

/* Bytes of HBM traffic per stored activation byte in a forward pass: each is
 * written once and read about once more by fused element-wise kernels
 * (Megatron's bias-GeLU, bias-dropout-add, scale-mask-softmax); backward
 * moves twice the forward traffic. A physical estimate, not fitted. */
#define ELEMENTWISE_TRAFFIC 2.0

/* Fraction of the matmul shape model's rate (gemm_model.h: the measured
 * MAMF at its best shape, less what this shape costs) and of the attention
 * rate that a training framework's kernels sustain: clocks under sustained
 * full-node power, gaps between kernels. The planner's one fitted constant:
 * the two-digit value that puts the median error of the calibration half of
 * docs/PLANNER.md's validation table closest to zero (never per row).
 * Measured calibration rates are used as they are. */
#define SUSTAINED_FRACTION 0.82

/* A fused attention backward runs 2.5 times the forward FLOPs (five
 * matmuls against two: the scores are recomputed) at 0.87 of the forward
 * rate: FlashAttention-2, cuDNN and FlashAttention-3 all show that ratio on
 * H100 at head dimension 128 and 16K tokens (backward 322, 516, 561
 * against forward 370, 595, 648 TFLOP/s; Shah et al. 2024, FlashAttention-3,
 * figures 5 and 6, which count backward FLOPs as 2.5 x forward). So the
 * backward of fused attention takes 2.5 / 0.87 of its forward time, not the
 * 2 x of a matmul. Materialized attention keeps its scores: 2 x. */
#define FLASH_BACKWARD_FLOPS 2.5
#define FLASH_BACKWARD_RATE 0.87

/* Seconds for `count` independent (m x k) by (k x n) products. */
double gemm_time(const Hardware *hw, Precision p, double m, double n, double k, double count);

/* Forward seconds of each linear layer of a block (its backward runs two
 * products of the same size: input gradient and weight gradient). */
typedef struct {
    double qkv, proj, up, down; /* QKV, attention output, MLP in (gate and up), MLP out */
    double shared;              /* MoE shared experts, in and out (DeepSeekMoE; 0 without) */
} LinearTimes;

typedef struct {
    double gemm, attention, elementwise; /* forward parts */
    LinearTimes linear;                  /* gemm, by layer (without the MoE router) */
    double attention_backward;           /* the attention core's backward */
    double forward, backward, recompute; /* seconds per micro-batch */
} LayerCompute;

/* One transformer block on one GPU of the layout, one micro-batch. */
LayerCompute layer_compute(const ModelShape *m, const Layout *l, const Hardware *hw, Precision p, AttentionImpl a);
/* The output layer and loss (last stage), forward + backward. */
double head_compute(const ModelShape *m, const Layout *l, const Hardware *hw, Precision p);
/* What the MTP modules add to the last stage beside their blocks, forward + backward: each one's
 * projection (a linear layer of T x 2h x h/t) and one more pass of the output layer and loss. */
double mtp_extra_compute(const ModelShape *m, const Layout *l, const Hardware *hw, Precision p);
/* The optimizer step over `params` parameters held by this GPU (memory-bound:
 * reads and writes weights, gradients and Adam state). */
double optimizer_time(const Hardware *hw, Precision p, double params);

#endif

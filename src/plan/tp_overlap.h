/* tp_overlap.h: the exposed time of one block's tensor-parallel collectives
 * per micro-batch, without and with Transformer Engine's userbuffer overlap
 * (Megatron's --tp-comm-overlap, NeMo's ub_tp_comm_overlap; `--tp-overlap
 * on`, which needs sequence parallelism, as Megatron-Bridge requires).
 *
 * Off: every collective is exposed: two all-reduces (or all-gather and
 * reduce-scatter pairs) of e T h forward, two backward, two more with full
 * recomputation.
 *
 * On: each collective is paired with a GEMM of the same layer, as
 * Megatron-Bridge's userbuffer configurations for H100 set them
 * (`userbuffers_{bf16,fp8}_h100_h8192_tp4_mbs1_seqlen8192` in
 * megatron/bridge/training/comm_overlap.py; TE's CommOverlap methods):
 *   forward  the all-gather before QKV and MLP-in: ring exchange, the GEMM
 *            run on one of t chunks while the next arrives (t - 1 hops of
 *            c / (t - 1) beside GEMM chunks of g / t);
 *            the reduce-scatter after the attention output and MLP-out:
 *            "pipeline", the GEMM split in 4 (num_splits = 4), each chunk's
 *            reduce-scatter beside the next chunk's GEMM, the last exposed;
 *   backward the all-gather of the output gradient before the attention
 *            output's and MLP-out's input-gradient GEMM: ring exchange;
 *            QKV's and MLP-in's "bulk" overlaps: the all-gather of the
 *            (sequence-sharded) input beside the input-gradient GEMM and
 *            the reduce-scatter of the input gradient beside the
 *            weight-gradient GEMM (two more collectives than without
 *            overlap, where the planner keeps the gathered input).
 * The pipelined reduce-scatter's GEMM runs on the SMs its communication
 * kernel leaves (set_sm_margin: 24 SMs for the attention output, 16 for
 * MLP-out: TP_OVERLAP_RS_SMS on average), so it takes SMs / (SMs - 20) of
 * its time (1.18x on the H100's 132). Elsewhere a hidden second costs
 * OVERLAP_INTERFERENCE (comms.h), which the configurations' SM budgets
 * bracket (1 SM for the ring exchanges, 2-24 for the bulk overlaps, which
 * share the GPU with the GEMM without a margin). The output layer's
 * collectives stay exposed. */
#ifndef BS_PLAN_TP_OVERLAP_H
#define BS_PLAN_TP_OVERLAP_H

#include "plan/compute.h"
#include "plan/layout.h"

/* GEMM splits of the pipelined reduce-scatter (userbuffers' num_splits). */
#define TP_OVERLAP_SPLITS 4
/* SMs the pipelined reduce-scatter takes from its GEMM (the mean of 24 and
 * 16 in the H100 configurations). */
#define TP_OVERLAP_RS_SMS 20.0

/* Exposed seconds per block and micro-batch; `half` is one all-gather (or
 * reduce-scatter) of the block's e T h activations over the TP group; `sms`
 * the GPU's streaming multiprocessors (0: unknown, the margin is priced as
 * OVERLAP_INTERFERENCE). */
double tp_exposed(const Layout *l, double half, const LinearTimes *g, int sms);

#endif

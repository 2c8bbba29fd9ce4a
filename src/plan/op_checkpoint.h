/* op_checkpoint.h: torchtitan's per-op selective activation checkpointing
 * (--recompute op; its ac mode "selective" with selective_ac_option "op").
 *
 * Every transformer block runs under torch.utils.checkpoint with a policy
 * that saves the outputs of the ops in a save list and recomputes every
 * other op in backward (torchtitan/parallelisms/parallelize_llama.py,
 * _save_list and _custom_policy, the version of end 2024): aten.mm except
 * every second one (a per-block counter; the 2nd, 4th, ... mm are
 * recomputed), the flash and memory-efficient SDPA kernels, and the
 * reduce-scatter of tensor parallelism. So a block keeps its input (the
 * checkpoint's), the outputs of its 1st, 3rd, 5th, ... matmul and the
 * attention output with its log-sum-exp; backward first re-runs the
 * element-wise ops (norms, rotary, activations, residual adds) and the
 * even-numbered matmuls. Float8 linears (torchao, --precision fp8) call
 * torch._scaled_mm (torchao/float8/float8_python_api.py,
 * addmm_float8_unwrapped), which is not in the list: under FP8 every linear
 * output is recomputed and only the attention output is kept. With tensor
 * parallelism the all-gathers before the column-parallel matmuls are
 * recomputed too; they are not priced. Dense blocks, fused
 * attention only (plan.c checks). With tensor parallelism the kept matmul
 * outputs are counted as their 1/t shards (the list's reduce-scatter keeps
 * the row-parallel outputs sharded; no row uses op with TP). */
#ifndef BS_PLAN_OP_CHECKPOINT_H
#define BS_PLAN_OP_CHECKPOINT_H

#include <stdbool.h>

#include "plan/hardware.h"
#include "plan/layout.h"
#include "plan/model.h"

#define OP_MAX_MATMULS 8

/* One forward matmul of a block, per token and GPU: output width n over
 * inner dimension k; a row-parallel one (wo, w2) sums partial outputs of
 * the full width, which sequence parallelism reduce-scatters. */
typedef struct {
    double n, k;
    bool row_parallel;
} BlockMatmul;

/* The block's forward matmuls in the order torchtitan's Llama block calls
 * them (wq, wk, wv, wo, then w1, w3, w2 for SwiGLU; up, down for GELU),
 * tensor-parallel widths; returns how many. */
int block_matmuls(const ModelShape *m, const Layout *l, BlockMatmul out[OP_MAX_MATMULS]);
/* Whether the policy saves matmul `index` (0-based) under precision p. */
bool op_checkpoint_saves(int index, Precision p);
/* Activation bytes one block keeps for backward, per micro-batch and GPU. */
double op_checkpoint_kept_bytes(const ModelShape *m, const Layout *l, Precision p);
/* Forward FLOPs per token and block that backward recomputes (the matmuls
 * it does not save; tp = 1). */
double op_checkpoint_recomputed_flops(const ModelShape *m, Precision p);

#endif

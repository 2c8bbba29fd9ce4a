/* compute.c: per-layer compute time (see compute.h).
 *
 * Matmuls of one block on one GPU, T = b s / cp local tokens, t = tp:
 *   QKV    T x (q + 2 kv)/t x h        output  T x h x q/t   (q = heads x head dim)
 *   MLP    T x f/t x h (twice for SwiGLU's gate and up), then T x h x f/t;
 *          MoE: per local expert (experts/ep of them), T' top-k ep / experts rows
 *          of f/etp (T' = T etp / t: the tokens of the rank's etp group);
 *          shared experts: one MLP of shared x f/t on all T rows
 *   scores per local head: T x s x d and T x d x s (FULL: all of it; CAUSAL:
 *          half; FLASH: half the FLOPs at the fused kernel's efficiency).
 * Backward is twice the forward (two matmuls per forward one), fused
 * attention's 2.5 / 0.87 of its forward (compute.h). Selective
 * recomputation repeats the score computation, full recomputation the whole
 * forward, op recomputation (torchtitan's) the element-wise work and the
 * matmuls its policy does not save. */
#include "plan/compute.h"

#include <math.h>

#include "plan/attention_kernels.h"
#include "plan/gemm_model.h"
#include "plan/memory.h"
#include "plan/op_checkpoint.h"

/* log of the harmonic mean of a matmul's dimensions: the size measure that
 * measured rates are interpolated in. */
static double log_size(double m, double n, double k) { return log(3.0 / (1.0 / m + 1.0 / n + 1.0 / k)); }
static double point_log_size(const GemmPoint *g) { return log_size(g->m, g->n, g->k); }

/* Measured rate at this size: log-linear interpolation between the nearest
 * measured sizes, clamped at the measured ends. */
static double measured_rate(const Hardware *hw, double m, double n, double k) {
    double x = log_size(m, n, k);
    int lo = -1, hi = -1;
    for (int i = 0; i < hw->n_gemm; i++) {
        double xi = point_log_size(&hw->gemm[i]);
        if (xi <= x && (lo < 0 || xi > point_log_size(&hw->gemm[lo]))) lo = i;
        if (xi >= x && (hi < 0 || xi < point_log_size(&hw->gemm[hi]))) hi = i;
    }
    if (lo < 0) return hw->gemm[hi].flops_per_s;
    if (hi < 0 || hi == lo) return hw->gemm[lo].flops_per_s;
    double x0 = point_log_size(&hw->gemm[lo]), x1 = point_log_size(&hw->gemm[hi]);
    double w = x1 > x0 ? (x - x0) / (x1 - x0) : 0.0;
    return exp((1 - w) * log(hw->gemm[lo].flops_per_s) + w * log(hw->gemm[hi].flops_per_s));
}

double gemm_time(const Hardware *hw, Precision p, double m, double n, double k, double count) {
    if (m <= 0 || n <= 0 || k <= 0 || count <= 0) return 0.0;
    double flops = 2.0 * m * n * k * count;
    if (hw->n_gemm > 0) return flops / measured_rate(hw, m, n, k);
    if (hw->sms > 0) return count * 2.0 * m * n * k / (SUSTAINED_FRACTION * gemm_model_rate(hw, p, m, n, k));
    double bytes = precision_operand_bytes(p) * (m * k + k * n + m * n) * count;
    return flops / (hardware_peak(hw, p) * hw->gemm_efficiency * SUSTAINED_FRACTION) + bytes / hw->hbm_bw;
}

/* A fused kernel's rate for blocks of `block` tokens at head dimension d:
 * the preset's fraction of peak on the block-length curve, times the
 * kernel generation's share (FlashAttention-2's of the Hopper kernels')
 * and the head dimension's (attention_kernels.h); FlashAttention-2's kernels
 * compute at their next compiled head dimension (fa2_kernel_head_dim). A
 * calibration's measured rate is used as it is. */
static double fused_rate(const Hardware *hw, Precision p, AttentionImpl a, double block, double T, double s, double d) {
    if (hw->attention_flops > 0) return hw->attention_flops;
    if (hw->n_gemm > 0) return measured_rate(hw, T, s, d);
    double rate = hardware_peak(hw, p) * hw->attention_efficiency * SUSTAINED_FRACTION * block /
                  (block + flash_half_length(hw->attention_fa3));
    bool fa3_kernel = a == ATTN_FLASH && hw->attention_fa3;
    if (a == ATTN_FLASH2 && hw->attention_fa3) rate *= flash2_share(block);
    if (a == ATTN_FLASH2) {
        double computed = fa2_kernel_head_dim(d);
        return rate * head_dim_share(computed, false, block) * d / computed;
    }
    return rate * head_dim_share(d, fa3_kernel, block);
}

/* FP8 training (Transformer Engine's default recipes) runs the linear layers
 * in FP8 and the attention core in BF16. Fused kernels compute the causal
 * half of the scores, or on the windowed layers (model.h) the window's
 * share of them, on blocks no longer than the window. */
static double attention_time(const ModelShape *m, const Layout *l, const Hardware *hw, Precision matmul, AttentionImpl a) {
    Precision p = matmul == PREC_FP8 ? PREC_BF16 : matmul;
    double T = (double)l->micro_batch * m->seq_len / l->cp, s = m->seq_len, d = model_head_dim(m);
    double heads = (double)m->heads / l->tp;
    double flops = 4.0 * T * s * d * heads;
    if (attention_is_fused(a)) {
        /* with context parallelism the zigzag split leaves each rank two
         * chunks of s / (2 cp) queries: the kernel runs on blocks that long */
        double block = l->cp > 1 ? s / (2.0 * l->cp) : s;
        double windowed = model_window_share(m), w = m->attention_window;
        double time = (1.0 - windowed) * 0.5 * flops / fused_rate(hw, p, a, block, T, s, d);
        if (windowed > 0)
            time += windowed * window_fraction(s, w) * flops / fused_rate(hw, p, a, fmin(block, w), T, s, d);
        return time;
    }
    double part = a == ATTN_CAUSAL ? 0.5 : 1.0;
    return part * (gemm_time(hw, p, T, s, d, heads) + gemm_time(hw, p, T, d, s, heads));
}

/* FP8 (Transformer Engine's recipes): before each linear layer's forward
 * product its input is cast to FP8 together with its transpose (for the
 * weight-gradient product) by one fused kernel that also takes the amax for
 * the scaling factor (cast_transpose: read 2 bytes, write 1 + 1 per
 * element), and before the backward products the output gradient is;
 * memory-bound, at the element-wise rate. The weights' FP8 copies are made
 * once per step (cached over micro-batches: TE's is_first_microbatch), not
 * counted. Bytes per micro-batch. */
#define FP8_CAST_BYTES 4.0
/* Under delayed scaling Transformer Engine's LayerNormLinear has the norm
 * write its output in FP8 (the cast fused into the norm: `ln_out` of dtype
 * uint8 at NVIDIA/TransformerEngine commit 0004dbd, layernorm_linear.py; TE
 * 2's normalization.cpp: "Always used fused kernel for FP8 delayed
 * scaling") and transposes it in the backward for the weight gradient
 * (`tex.fp8_transpose`: read 1, write 1); no separate cast kernel. */
#define FP8_TRANSPOSE_BYTES 2.0

/* The cast of `count` inputs of rows x k: its own kernel before the forward
 * product, or, written in FP8 by the norm, a transpose in the backward. */
static void add_input_cast(double rows, double k, double count, bool norm_writes_fp8, double *forward,
                           double *backward) {
    if (norm_writes_fp8) *backward += FP8_TRANSPOSE_BYTES * count * rows * k;
    else *forward += FP8_CAST_BYTES * count * rows * k;
}

/* The cast of `count` output gradients of rows x n before the backward products. */
static void add_grad_cast(double rows, double n, double count, double *backward) {
    *backward += FP8_CAST_BYTES * count * rows * n;
}

/* FP8 casts of one layer, bytes per micro-batch. Transformer Engine's FC1
 * is one matmul of gate and up (Megatron-core's linear_fc1 doubles its
 * output width for a gated unit: megatron/core/transformer/mlp.py, commit
 * 8503f75; TEGroupedMLP's likewise), so its input is cast once; torchao's
 * w1 and w3 are two Float8Linears, each casting it. */
static void fp8_casts(const ModelShape *m, double T, double rows, double local_experts, double t, double et,
                      double *forward, double *backward) {
    double h = m->hidden, q = model_q_dim(m), kv = model_kv_dim(m), f = m->ffn;
    double up = m->act == ACT_SWIGLU ? 2.0 : 1.0, fc1_inputs = m->fp8_linears == FP8_TORCHAO ? up : 1.0;
    /* a MoE layer's router needs the norm's output in BF16: its norm is not fused into FC1 */
    bool delayed = m->fp8_linears == FP8_TE_DELAYED, dense = !model_is_moe(m);
    add_input_cast(T, h, 1, delayed, forward, backward);
    add_grad_cast(T, (q + 2.0 * kv) / t, 1, backward);
    add_input_cast(T, q / t, 1, false, forward, backward);
    add_grad_cast(T, h, 1, backward);
    add_input_cast(rows, h, fc1_inputs * local_experts, delayed && dense, forward, backward);
    add_grad_cast(rows, f / et, up * local_experts, backward);
    add_input_cast(rows, f / et, local_experts, false, forward, backward);
    add_grad_cast(rows, h, local_experts, backward);
    double shared_f = dense ? 0.0 : m->shared_experts * f / t;
    if (shared_f > 0) {
        add_input_cast(T, h, fc1_inputs, false, forward, backward);
        add_grad_cast(T, shared_f, up, backward);
        add_input_cast(T, shared_f, 1, false, forward, backward);
        add_grad_cast(T, h, 1, backward);
    }
}

/* torchtitan's per-op checkpointing (op_checkpoint.h): backward first
 * re-runs the block's element-wise forward work and the matmuls the policy
 * does not save (under FP8 all of them, with their input casts). */
static double op_recompute_time(const ModelShape *m, const Layout *l, const Hardware *hw, Precision p,
                                const LayerCompute *c, double cast_forward_seconds) {
    double T = (double)l->micro_batch * m->seq_len / l->cp, time = c->elementwise;
    BlockMatmul mm[OP_MAX_MATMULS];
    int n = block_matmuls(m, l, mm);
    for (int i = 0; i < n; i++)
        if (!op_checkpoint_saves(i, p)) time += gemm_time(hw, p, T, mm[i].n, mm[i].k, 1);
    return time + (p == PREC_FP8 ? cast_forward_seconds : 0.0);
}

LayerCompute layer_compute(const ModelShape *m, const Layout *l, const Hardware *hw, Precision p, AttentionImpl a) {
    LayerCompute c = {0};
    double T = (double)l->micro_batch * m->seq_len / l->cp, t = l->tp;
    double h = m->hidden, q = model_q_dim(m), kv = model_kv_dim(m), f = m->ffn;
    /* MoE: the T x top-k routed tokens spread over the experts/ep experts this
     * GPU holds, one product per expert of T x top-k x ep / experts rows, times
     * the imbalance on the busiest rank (the slowest rank sets the step) */
    double local_experts = model_is_moe(m) ? (double)m->experts / l->ep : 1.0;
    double et = model_is_moe(m) ? layout_expert_tp(l) : t, routed_T = T * et / t;
    double rows = (model_is_moe(m) ? routed_T * m->top_k * model_moe_imbalance(m) : T) / local_experts;
    double up = m->act == ACT_SWIGLU ? 2.0 : 1.0;
    c.linear.qkv = gemm_time(hw, p, T, (q + 2.0 * kv) / t, h, 1);
    c.linear.proj = gemm_time(hw, p, T, h, q / t, 1);
    c.linear.up = gemm_time(hw, p, rows, f / et, h, up * local_experts);
    c.linear.down = gemm_time(hw, p, rows, h, f / et, local_experts);
    double shared_f = model_is_moe(m) ? m->shared_experts * f / t : 0.0;
    c.linear.shared = gemm_time(hw, p, T, shared_f, h, up) + gemm_time(hw, p, T, h, shared_f, 1);
    c.gemm = c.linear.qkv + c.linear.proj + c.linear.up + c.linear.down + c.linear.shared;
    if (model_is_moe(m)) c.gemm += gemm_time(hw, p, T, m->experts, h, 1);
    c.attention = attention_time(m, l, hw, p, a);
    /* the element-wise work follows the tensors a layer writes: those it
     * keeps, and a MoE layer's expert output where it is not kept (the
     * combine reads it either way); under FP8 as written in BF16, the FP8
     * copies the linear layers keep (memory.h) being the casts' writes,
     * priced below */
    Precision written = p == PREC_FP8 ? PREC_BF16 : p;
    double stored = activation_bytes_per_layer(m, l, a, written, RECOMPUTE_NONE);
    double unkept = m->moe_probs_in_activation ? moe_routed_output_bytes(m, l, p) : 0.0;
    double elementwise_bw = hw->elementwise_bw > 0 ? hw->elementwise_bw : hw->hbm_bw;
    c.elementwise = ELEMENTWISE_TRAFFIC * (stored + unkept) / elementwise_bw;
    double cast_forward = 0.0, cast_backward = 0.0;
    if (p == PREC_FP8) fp8_casts(m, T, rows, local_experts, t, et, &cast_forward, &cast_backward);
    c.forward = c.gemm + c.attention + c.elementwise + cast_forward / elementwise_bw;
    double backward_ratio = hw->attention_backward_ratio > 0 ? hw->attention_backward_ratio
                                                              : FLASH_BACKWARD_FLOPS / FLASH_BACKWARD_RATE;
    c.attention_backward = (attention_is_fused(a) ? backward_ratio : 2.0) * c.attention;
    c.backward = 2.0 * (c.gemm + c.elementwise) + c.attention_backward + cast_backward / elementwise_bw;
    if (l->recompute == RECOMPUTE_FULL) c.recompute = c.forward;
    if (l->recompute == RECOMPUTE_SELECTIVE && !attention_is_fused(a)) {
        double scores = stored - activation_bytes_per_layer(m, l, a, written, RECOMPUTE_SELECTIVE);
        c.recompute = c.attention + ELEMENTWISE_TRAFFIC * scores / elementwise_bw;
    }
    if (l->recompute == RECOMPUTE_OP) c.recompute = op_recompute_time(m, l, hw, p, &c, cast_forward / elementwise_bw);
    return c;
}

double head_compute(const ModelShape *m, const Layout *l, const Hardware *hw, Precision p) {
    if (p == PREC_FP8) p = PREC_BF16; /* the output layer stays in BF16 (Megatron's is not a TE layer) */
    double T = (double)l->micro_batch * m->seq_len / l->cp;
    double V = model_padded_vocab(m) / (double)l->tp;
    double logits_bytes = T * V * (precision_activation_bytes(p) + 4.0);
    /* forward matmul, two backward matmuls, softmax + loss read and write the logits twice */
    return 3.0 * gemm_time(hw, p, T, V, m->hidden, 1) + 4.0 * logits_bytes / hw->hbm_bw;
}

double mtp_extra_compute(const ModelShape *m, const Layout *l, const Hardware *hw, Precision p) {
    if (m->mtp_layers < 1) return 0.0;
    double T = (double)l->micro_batch * m->seq_len / l->cp;
    double projection = 3.0 * gemm_time(hw, p, T, m->hidden / (double)l->tp, 2.0 * m->hidden, 1);
    return m->mtp_layers * (projection + head_compute(m, l, hw, p));
}

double optimizer_time(const Hardware *hw, Precision p, double params) {
    /* read weights, gradient, master weights, two moments; write all but the gradient */
    double bytes = p == PREC_FP32 ? 4.0 * (4 + 3) : 2 + 2 + 12 + 2 + 12;
    return params * bytes / hw->hbm_bw;
}

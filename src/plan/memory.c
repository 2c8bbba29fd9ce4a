/* memory.c: per-GPU memory of one pipeline stage (see memory.h).
 *
 * Activations per layer and micro-batch, with e bytes per element, T = b s /
 * cp local tokens, t = tp, masks of one byte (Korthikanti et al. 2022, whose
 * GPT case e = 2, kv = h, f = 4h gives s b h (34 + 5 a s / h)):
 *   outside the TP regions (divided by t only with sequence parallelism):
 *     inputs of the two norms, of the QKV and of the first MLP matmul 4 e T h,
 *     plus two dropout masks 2 T h;
 *   inside (divided by t): Q e T q, K and V 2 e T kv, attention output e T q
 *     (q = heads x head dim, h unless the model says otherwise),
 *     MLP e T f per stored intermediate (2 for GELU: its input and output;
 *     3 for SwiGLU: gate, up, product), times top-k plus the shared experts
 *     for MoE, and the top-k routed copies of the tokens e T k h (the
 *     experts' input), with as much again for their output unless the
 *     routing probabilities scale the activation (memory.h);
 *   scores, materialized kernels only: a/t heads x T x s (FULL) or half of
 *     that (CAUSAL): softmax output e, with dropout also its mask and output.
 * Under FP8 a linear layer keeps its input for the weight gradient as the
 * FP8 copy it cast for the forward product, g = 1 byte an element (the
 * inputs of the QKV, FC1, FC2 and expert matmuls), and the attention output,
 * which the fused kernel keeps in BF16 for its own backward, once more as the
 * projection's FP8 copy (linear_input_bytes, memory.h).
 * Selective recomputation drops the scores; full recomputation keeps only
 * the layer input e T h (divided by t with sequence parallelism); op
 * recomputation what torchtitan's policy saves (op_checkpoint.h). */
#include "plan/memory.h"

#include <math.h>

#include "plan/op_checkpoint.h"

StateBytes state_bytes(Precision p) {
    StateBytes b = {2, 2, 12};
    if (p == PREC_FP32) b = (StateBytes){4, 4, 8};
    return b;
}

void zero_states(double params, int shards, int stage, StateBytes b, double *weights, double *grads, double *optimizer) {
    double n = shards > 0 ? shards : 1;
    *weights = params * b.weights / (stage >= 3 ? n : 1.0);
    *grads = params * b.grads / (stage >= 2 ? n : 1.0);
    *optimizer = params * b.optimizer / (stage >= 1 ? n : 1.0);
}

double linear_input_bytes(const ModelShape *m, Precision p) {
    return p == PREC_FP8 && m->fp8_linears != FP8_TORCHAO ? 1.0 : precision_activation_bytes(p);
}

double activation_bytes_per_layer(const ModelShape *m, const Layout *l, AttentionImpl a, Precision p, Recompute r) {
    double e = precision_activation_bytes(p), g = linear_input_bytes(m, p), t = l->tp;
    double T = (double)l->micro_batch * m->seq_len / l->cp;
    double h = m->hidden, q = model_q_dim(m), kv = model_kv_dim(m), f = m->ffn;
    double outside_divisor = l->sequence_parallel ? t : 1.0;
    if (r == RECOMPUTE_FULL) return e * T * h / outside_divisor;
    if (r == RECOMPUTE_OP) return op_checkpoint_kept_bytes(m, l, p);
    /* the two norms' inputs, then the QKV and FC1 inputs (the norms' outputs) */
    double outside = 2.0 * e * T * h + 2.0 * g * T * h + (m->dropout ? 2.0 * T * h : 0.0);
    double experts = model_is_moe(m) ? m->top_k + m->shared_experts : 1.0;
    /* GELU: its input and its output (FC2's input); SwiGLU: gate, up, product (FC2's input) */
    double mlp = ((m->act == ACT_SWIGLU ? 2.0 : 1.0) * e + g) * T * f * experts;
    /* MoE (Megatron's all-to-all token dispatcher): the routed copies of the
     * tokens, top-k per token, are the experts' input (kept for the weight
     * gradient) and, where the routing probabilities scale them at the
     * combine, their output (kept for the probabilities' gradient; not with
     * --moe-probs activation, moe_routed_output_bytes) */
    double output_copy = m->moe_probs_in_activation ? 0.0 : e;
    double routed = model_is_moe(m) ? (g + output_copy) * T * m->top_k * h : 0.0;
    /* the attention output: the projection's input, which a fused kernel also keeps for its backward */
    double output = attention_is_fused(a) ? e * T * q + (g < e ? g * T * q : 0.0) : g * T * q;
    double inside = e * T * q + 2.0 * e * T * kv + output + mlp + routed;
    double scores = 0.0;
    if (!attention_is_fused(a) && r == RECOMPUTE_NONE) {
        double elems = (m->heads * T * m->seq_len) * (a == ATTN_CAUSAL ? 0.5 : 1.0);
        scores = elems * (m->dropout ? 2.0 * e + 1.0 : e);
    }
    if (attention_is_fused(a)) scores = 4.0 * m->heads * T; /* fp32 log-sum-exp per row */
    return outside / outside_divisor + (inside + scores) / t;
}

double moe_routed_output_bytes(const ModelShape *m, const Layout *l, Precision p) {
    if (!model_is_moe(m)) return 0.0;
    double T = (double)l->micro_batch * m->seq_len / l->cp;
    return precision_activation_bytes(p) * T * m->top_k * m->hidden / l->tp;
}

double in_flight_micro_batches(const Layout *l, int stage, int micro_batches) {
    double p = l->pp, m = micro_batches;
    /* Megatron-core's combined 1F1B (moe_comm.h) runs one more forward ahead
     * of the backward it is paired with: one more in the warm-up */
    double more = l->ep > 1 && l->ep_overlap == EP_OVERLAP_COMBINED_1F1B ? 1.0 : 0.0;
    if (l->pp == 1) return fmin(1.0 + more, m);
    if (l->schedule == SCHEDULE_GPIPE) return m;
    double held = p - stage;
    if (l->schedule == SCHEDULE_INTERLEAVED && l->virtual_stages > 1) {
        double v = l->virtual_stages;
        held = (2.0 * (p - stage - 1) + (v - 1) * p + 1 + more) / v;
    }
    return fmin(held, m);
}

/* Blocks a stage holds: its decoder layers, and on the last the MTP modules' blocks. */
static int stage_blocks(const ModelShape *m, const StageShape *s) { return s->layers + (s->last ? m->mtp_layers : 0); }

void stage_params(const ModelShape *m, const Layout *l, const StageShape *s, double *dense, double *expert) {
    double d = stage_blocks(m, s) * model_layer_dense_params(m);
    if (s->first) d += model_embedding_params(m);
    if (s->last) {
        d += model_head_params(m) + m->mtp_layers * model_mtp_extra_params(m);
        /* A tied output layer lives on the last stage too when it is not the first. */
        if (m->tied_embeddings && !s->first) d += (double)m->vocab * m->hidden;
    }
    *dense = d / l->tp;
    *expert = stage_blocks(m, s) * model_layer_expert_params(m) /
              (model_is_moe(m) ? (double)layout_expert_tp(l) * l->ep : (double)l->tp);
}

MemoryBreakdown stage_memory(const ModelShape *m, const Layout *l, AttentionImpl a, Precision p, const StageShape *s,
                             double capacity, double reserve) {
    MemoryBreakdown mb = {0};
    StateBytes b = state_bytes(p);
    double dense, expert, w, g, o;
    stage_params(m, l, s, &dense, &expert);
    int shards = l->dp * l->cp;
    zero_states(dense, shards, l->zero, b, &mb.weights, &mb.grads, &mb.optimizer);
    if (expert > 0) {
        int expert_shards = model_is_moe(m) ? layout_expert_dp(l) : shards;
        zero_states(expert, expert_shards > 0 ? expert_shards : 1, l->zero, b, &w, &g, &o);
        mb.weights += w, mb.grads += g, mb.optimizer += o;
    }
    double kept = activation_bytes_per_layer(m, l, a, p, l->recompute);
    int blocks = stage_blocks(m, s);
    mb.activations = s->in_flight * blocks * kept;
    if (l->recompute == RECOMPUTE_FULL && blocks > 0) /* one layer re-materialized during backward */
        mb.activations += activation_bytes_per_layer(m, l, a, p, RECOMPUTE_NONE);
    if (l->recompute == RECOMPUTE_OP && blocks > 0) /* one layer's recomputed part, during its backward */
        mb.activations += activation_bytes_per_layer(m, l, a, p, RECOMPUTE_NONE) - kept;
    if (s->last) { /* the main output layer's logits and each MTP module's */
        double tokens = (double)l->micro_batch * m->seq_len / l->cp;
        mb.logits = (1 + m->mtp_layers) * tokens * model_padded_vocab(m) / l->tp * (precision_activation_bytes(p) + 4.0);
    }
    if (l->zero >= 3 && blocks > 0)
        mb.transient = 2.0 * (model_layer_dense_params(m) / l->tp +
                              model_layer_expert_params(m) / (model_is_moe(m) ? (double)layout_expert_tp(l) * l->ep : l->tp)) *
                       b.weights;
    mb.reserve = reserve;
    mb.capacity = capacity;
    mb.total = mb.weights + mb.grads + mb.optimizer + mb.activations + mb.logits + mb.transient + mb.reserve;
    return mb;
}

/* model.c: parameter counts and FLOPs of a transformer shape (see model.h).
 *
 * Per block (hidden h, query width q = heads * head_dim, kv width k =
 * kv_heads * head_dim, MLP width f; q = h unless the head dimension is given):
 *   attention  Q and output h*q each, K and V h*k each;
 *   MLP        2 h f (GELU) or 3 h f (SwiGLU: gate, up, down), per expert
 *              (MoE: the routed experts, plus the shared experts of DeepSeekMoE,
 *              which count with the dense parameters: every EP rank holds them);
 *   norms      2 per block (LayerNorm: weight and bias, RMSNorm: weight);
 *   biases     GPT-2 style: qkv (q + 2k), output h, MLP f + h per expert. */
#include "plan/model.h"

#include "plan/op_checkpoint.h"
#include "core/reason.h"

#include <stdio.h>

int model_head_dim(const ModelShape *m) { return m->head_dim > 0 ? m->head_dim : m->hidden / m->heads; }
int model_q_dim(const ModelShape *m) { return m->heads * model_head_dim(m); }
int model_kv_dim(const ModelShape *m) { return m->kv_heads * model_head_dim(m); }
bool model_is_moe(const ModelShape *m) { return m->experts > 1; }
double model_moe_imbalance(const ModelShape *m) {
    return model_is_moe(m) && m->moe_imbalance > 1.0 ? m->moe_imbalance : 1.0;
}

int model_padded_vocab(const ModelShape *m) {
    int q = m->vocab_multiple > 1 ? m->vocab_multiple : 1;
    return (m->vocab + q - 1) / q * q;
}

bool model_check(const ModelShape *m, char *why, size_t n) {
    if (m->layers < 1 || m->hidden < 1 || m->heads < 1 || m->vocab < 2 || m->seq_len < 1 || m->ffn < 1) {
        return bs_reason(why, n, "layers hidden heads ffn vocab seq_len model", "the model needs its layers, width, heads, MLP width, vocabulary and sequence length >= 1 (or a named model)");
    }
    if (m->head_dim <= 0 && m->hidden % m->heads) {
        return bs_reason(why, n, "heads hidden", "%d attention heads do not divide the width %d: choose heads that divide the width", m->heads, m->hidden);
    }
    if (m->kv_heads < 1 || m->heads % m->kv_heads) {
        return bs_reason(why, n, "kv_heads heads", "%d key-value heads must divide the %d attention heads (grouped-query attention)", m->kv_heads, m->heads);
    }
    if (model_is_moe(m) && (m->top_k < 1 || m->top_k > m->experts)) {
        return bs_reason(why, n, "top_k experts", "%d experts per token must be between 1 and the %d experts", m->top_k, m->experts);
    }
    if ((m->shared_experts > 0 || m->moe_device_limit > 0 || m->moe_node_limit > 0) && !model_is_moe(m)) {
        return bs_reason(why, n, "shared_experts moe_device_limit moe_node_limit experts", "shared experts and device or node limits of the routing need a mixture-of-experts model (more than 1 expert)");
    }
    if (m->moe_probs_in_activation && !model_is_moe(m)) {
        return bs_reason(why, n, "moe_probs experts", "the router probabilities applied in the activation need a mixture-of-experts model (more than 1 expert)");
    }
    if (m->shared_experts < 0 || m->moe_device_limit < 0 || m->moe_node_limit < 0) {
        return bs_reason(why, n, "shared_experts moe_device_limit moe_node_limit", "the shared experts and the routing's device and node limits must be >= 0");
    }
    if (m->mtp_layers < 0) {
        return bs_reason(why, n, "mtp_layers", "%d multi-token prediction layers: must be >= 0", m->mtp_layers);
    }
    if (m->attention_window < 0 || m->window_layers < 0 || m->window_layers > m->layers ||
        (m->window_layers > 0 && m->attention_window == 0)) {
        return bs_reason(why, n, "attention_window window_layers layers", "the attention window must be >= 0 and the windowed layers between 0 and the %d layers (they need a window)",
                         m->layers);
    }
    return true;
}

static int experts_or_one(const ModelShape *m) { return model_is_moe(m) ? m->experts : 1; }
static int routed_experts(const ModelShape *m) { return model_is_moe(m) ? m->top_k : 1; }
static int active_experts(const ModelShape *m) { return routed_experts(m) + (model_is_moe(m) ? m->shared_experts : 0); }
static double norm_params(const ModelShape *m) { return m->norm == NORM_LAYERNORM ? 2.0 * m->hidden : m->hidden; }

double model_mlp_params_one_expert(const ModelShape *m) {
    double h = m->hidden, f = m->ffn;
    double w = (m->act == ACT_SWIGLU ? 3.0 : 2.0) * h * f;
    return w + (m->bias ? f * (m->act == ACT_SWIGLU ? 2.0 : 1.0) + h : 0.0);
}

double model_layer_dense_params(const ModelShape *m) {
    double h = m->hidden, q = model_q_dim(m), k = model_kv_dim(m);
    double attn = 2.0 * h * q + 2.0 * h * k + (m->bias ? q + 2.0 * k + h : 0.0);
    double router = model_is_moe(m) ? h * m->experts : 0.0;
    double shared = model_is_moe(m) ? m->shared_experts * model_mlp_params_one_expert(m) : 0.0;
    return attn + 2.0 * norm_params(m) + router + shared;
}

double model_layer_expert_params(const ModelShape *m) { return experts_or_one(m) * model_mlp_params_one_expert(m); }

double model_embedding_params(const ModelShape *m) {
    return (double)m->vocab * m->hidden + (m->learned_positions ? (double)m->seq_len * m->hidden : 0.0);
}

double model_head_params(const ModelShape *m) {
    return norm_params(m) + (m->tied_embeddings ? 0.0 : (double)m->vocab * m->hidden);
}

double model_mtp_extra_params(const ModelShape *m) { return 2.0 * m->hidden * (double)m->hidden + 3.0 * norm_params(m); }

double model_params(const ModelShape *m) {
    double block = model_layer_dense_params(m) + model_layer_expert_params(m);
    return m->layers * block + model_embedding_params(m) + model_head_params(m) +
           m->mtp_layers * (block + model_mtp_extra_params(m));
}

double model_active_params(const ModelShape *m) {
    double block = model_layer_dense_params(m) + routed_experts(m) * model_mlp_params_one_expert(m);
    return m->layers * block + model_embedding_params(m) + model_head_params(m) +
           m->mtp_layers * (block + model_mtp_extra_params(m));
}

double model_window_share(const ModelShape *m) {
    return m->attention_window > 0 && m->layers > 0 ? (double)m->window_layers / m->layers : 0.0;
}

double model_attention_core_flops(const ModelShape *m) {
    double keys = m->seq_len, w = model_window_share(m);
    if (w > 0 && m->attention_window < m->seq_len) keys = (1 - w) * m->seq_len + w * m->attention_window;
    return 4.0 * keys * (double)model_q_dim(m);
}

double model_layer_flops(const ModelShape *m) {
    double h = m->hidden, q = model_q_dim(m), k = model_kv_dim(m), f = m->ffn;
    double proj = 2.0 * (2.0 * h * q + 2.0 * h * k);
    double mlp = 2.0 * (m->act == ACT_SWIGLU ? 3.0 : 2.0) * h * f * active_experts(m);
    double router = model_is_moe(m) ? 2.0 * h * m->experts : 0.0;
    return proj + mlp + router + model_attention_core_flops(m);
}

double model_head_flops(const ModelShape *m) { return 2.0 * m->hidden * (double)model_padded_vocab(m); }
double model_mtp_projection_flops(const ModelShape *m) { return 2.0 * 2.0 * m->hidden * (double)m->hidden; }

double model_train_flops_per_token(const ModelShape *m, Recompute r) {
    double layer = model_layer_flops(m), blocks = m->layers + m->mtp_layers;
    double mtp = m->mtp_layers * (model_head_flops(m) + model_mtp_projection_flops(m));
    double per_token = 3.0 * (blocks * layer + model_head_flops(m) + mtp);
    if (r == RECOMPUTE_FULL) per_token += blocks * layer;
    if (r == RECOMPUTE_SELECTIVE) per_token += blocks * model_attention_core_flops(m);
    if (r == RECOMPUTE_OP) per_token += blocks * op_checkpoint_recomputed_flops(m, PREC_BF16);
    return per_token;
}

double megatron_params(double l, double h, double V, double s) {
    return 12.0 * l * h * h * (1.0 + 13.0 / (12.0 * h) + (V + s) / (12.0 * l * h));
}

double megatron_flops_per_iteration(double B, double s, double l, double h, double V, bool recompute) {
    if (recompute) return 96.0 * B * s * l * h * h * (1.0 + s / (6.0 * h) + V / (16.0 * l * h));
    return 72.0 * B * s * l * h * h * (1.0 + s / (6.0 * h) + V / (12.0 * l * h));
}

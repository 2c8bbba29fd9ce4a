/* kernel_rows.h: the kernels whose CUDA form gives one thread one row (an
 * attention query or key row) or one column (a parameter gradient summed
 * over the rows), written once for both sides: each CUDA thread calls the
 * function with its index, and sim calls it for every index in turn. Sums
 * run in a fixed order, so the GPU's results are deterministic (no atomics)
 * and equal sim's up to the compilers' rounding. */
#ifndef BS_DEVICE_KERNEL_ROWS_H
#define BS_DEVICE_KERNEL_ROWS_H

#include "device/device_kernels.h"
#include "device/kernel_math.h"

/* Where row index idx = (b H + h) T + i of an attention kernel points. */
typedef struct {
    int b, h, i, hs, C3;
    float scale; /* 1 / sqrt(head size) */
} AttentionRow;

BS_HD AttentionRow km_attention_row(const AttentionArgs *a, int idx) {
    AttentionRow r;
    r.i = idx % a->T;
    r.h = idx / a->T % a->H;
    r.b = idx / (a->T * a->H);
    r.hs = a->C / a->H;
    r.C3 = 3 * a->C;
    r.scale = 1.0f / sqrtf((float)r.hs);
    return r;
}

/* row j of q (part 0), k (1) or v (2) of this row's batch and head */
BS_HD const float *km_qkv(const AttentionArgs *a, const AttentionRow *r, int j, int part) {
    return a->qkv + ((size_t)r->b * a->T + j) * r->C3 + part * a->C + r->h * r->hs;
}

/* Forward of one query row: P's row (0 outside the keys it sees) and its output. */
BS_HD void km_attention_forward_row(const AttentionArgs *a, int idx) {
    const AttentionRow r = km_attention_row(a, idx);
    const int i = r.i, s = a->doc_start ? a->doc_start[r.b * a->T + i] : 0;
    const float *q = km_qkv(a, &r, i, 0);
    float *p = a->att + (size_t)idx * a->T, m = -INFINITY, sum = 0;
    for (int j = s; j <= i; j++) {
        const float *k = km_qkv(a, &r, j, 1);
        float dot = 0;
        for (int c = 0; c < r.hs; c++) dot += q[c] * k[c];
        p[j] = dot * r.scale;
        m = p[j] > m ? p[j] : m;
    }
    for (int j = s; j <= i; j++) sum += p[j] = km_exp_shifted(p[j], m);
    const float inv = 1.0f / sum;
    for (int j = 0; j < a->T; j++) p[j] = j >= s && j <= i ? p[j] * inv : 0.0f;
    float *o = a->out + ((size_t)r.b * a->T + i) * a->C + r.h * r.hs;
    for (int c = 0; c < r.hs; c++) {
        float acc = 0;
        for (int j = s; j <= i; j++) acc += p[j] * km_qkv(a, &r, j, 2)[c];
        o[c] = acc;
    }
}

/* Backward of one query row: dS's row into scratch (0 where P is 0) and dq (written). */
BS_HD void km_attention_dq_row(const AttentionArgs *a, int idx) {
    const AttentionRow r = km_attention_row(a, idx);
    const int i = r.i;
    const float *p = a->att + (size_t)idx * a->T, *d = a->dout + ((size_t)r.b * a->T + i) * a->C + r.h * r.hs;
    float *ds = a->scratch + (size_t)idx * a->T, dot = 0;
    for (int j = 0; j <= i; j++) {
        const float *v = km_qkv(a, &r, j, 2);
        float dp = 0;
        for (int c = 0; c < r.hs; c++) dp += d[c] * v[c];
        ds[j] = dp;
        dot += dp * p[j];
    }
    for (int j = 0; j < a->T; j++) ds[j] = j <= i ? km_softmax_grad(p[j], ds[j], dot) : 0.0f;
    float *dq = a->dqkv + ((size_t)r.b * a->T + i) * r.C3 + r.h * r.hs;
    for (int c = 0; c < r.hs; c++) {
        float acc = 0;
        for (int j = 0; j <= i; j++) acc += ds[j] * km_qkv(a, &r, j, 1)[c];
        dq[c] = acc * r.scale;
    }
}

/* Backward of one key row j (after every dS row): dk and dv (written),
 * summed over the queries i >= j in order. */
BS_HD void km_attention_dkv_row(const AttentionArgs *a, int idx) {
    const AttentionRow r = km_attention_row(a, idx);
    const int j = r.i, T = a->T;
    const size_t head = (size_t)(idx - j) * T; /* (b H + h) T T */
    float *dk = a->dqkv + ((size_t)r.b * T + j) * r.C3 + a->C + r.h * r.hs, *dv = dk + a->C;
    for (int c = 0; c < r.hs; c++) {
        float acck = 0, accv = 0;
        for (int i = j; i < T; i++) {
            acck += a->scratch[head + (size_t)i * T + j] * km_qkv(a, &r, i, 0)[c];
            accv += a->att[head + (size_t)i * T + j] * a->dout[((size_t)r.b * T + i) * a->C + r.h * r.hs + c];
        }
        dk[c] = acck * r.scale;
        dv[c] = accv;
    }
}

/* Element i of GELU forward, GELU backward or the residual sum. */
BS_HD void km_elementwise(DeviceKernel k, const ElementwiseArgs *a, size_t i) {
    a->out[i] = k == DK_GELU_FORWARD    ? km_gelu(a->a[i])
                : k == DK_GELU_BACKWARD ? km_gelu_backward(a->a[i], a->b[i])
                                        : a->a[i] + a->b[i];
}

/* Element i rounded to bf16: as a float and as its bits. */
BS_HD void km_bf16_round_element(const Bf16RoundArgs *a, size_t i) {
    const uint16_t h = km_bf16(a->inp[i]);
    if (a->out) a->out[i] = km_bf16_to_float(h);
    if (a->out_bf16) a->out_bf16[i] = h;
}

/* Element i widened from bf16. */
BS_HD void km_bf16_widen_element(const Bf16WidenArgs *a, size_t i) { a->out[i] = km_bf16_to_float(a->in[i]); }

/* Element i of the fused residual add. */
BS_HD void km_residual_element(const ResidualLayernormArgs *a, size_t i) { a->residual[i] = a->a[i] + a->b[i]; }

/* Row r's position: the one given, else t, or t - its document's start. */
BS_HD size_t km_position(const EncoderArgs *a, size_t r) {
    if (a->positions) return (size_t)a->positions[r];
    const size_t t = r % a->T;
    return a->doc_start ? t - (size_t)a->doc_start[r] : t;
}

/* Element i of the encoder's output (B,T,C): a token outside [0, V) adds
 * no embedding row (as kernels.h's encoder outside its vocabulary range). */
BS_HD void km_encoder_forward_element(const EncoderArgs *a, size_t i) {
    const size_t r = i / a->C, c = i % a->C;
    const int token = a->tokens[r];
    const float pe = a->wpe[km_position(a, r) * a->C + c];
    a->out[i] = token >= 0 && token < a->V ? a->wte[(size_t)token * a->C + c] + pe : pe;
}

/* Channel c of the embeddings' gradients: rows added in order, so two
 * tokens hitting one row never race. */
BS_HD void km_encoder_backward_column(const EncoderArgs *a, int c) {
    for (int r = 0; r < a->B * a->T; r++) {
        const int token = a->tokens[r];
        float d = a->dout[(size_t)r * a->C + c];
        if (token >= 0 && token < a->V) a->dwte[(size_t)token * a->C + c] += d;
        a->dwpe[km_position(a, (size_t)r) * a->C + c] += d;
    }
}

/* Channel c of LayerNorm's weight and bias gradients, rows in order. */
BS_HD void km_layernorm_params_column(const LayernormArgs *a, int c) {
    for (int i = 0; i < a->N; i++) {
        float d = a->dout[(size_t)i * a->C + c];
        a->dweight[c] += (a->inp[(size_t)i * a->C + c] - a->mean[i]) * a->rstd[i] * d;
        a->dbias[c] += d;
    }
}

/* Output channel c of a linear layer's bias gradient, rows in order. */
BS_HD void km_bias_column(float *dbias, const float *dout, int N, int OC, int c) {
    for (int i = 0; i < N; i++) dbias[c] += dout[(size_t)i * OC + c];
}

#endif

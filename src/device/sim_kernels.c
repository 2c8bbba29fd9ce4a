/* sim_kernels.c: sim's kernels (sim_kernels.h). Reductions run in a plain
 * sequential order here; the CUDA kernels cut them into blocks and warps,
 * which is what only a GPU checks. */
#include "device/sim_kernels.h"

#include <stdlib.h>
#include <string.h>

#include "device/adamw_math.h"
#include "device/kernel_math.h"
#include "device/kernel_rows.h"
#include "kernels/kernels.h"

static void sim_encoder_forward(const EncoderArgs *a) {
    for (size_t i = 0; i < (size_t)a->B * a->T * a->C; i++) km_encoder_forward_element(a, i);
}

static void sim_encoder_backward(const EncoderArgs *a) {
    for (int c = 0; c < a->C; c++) km_encoder_backward_column(a, c);
}

static void sim_layernorm_row(const LayernormArgs *a, int i) {
    const float *x = a->inp + (size_t)i * a->C;
    float m = 0, v = 0;
    for (int c = 0; c < a->C; c++) m += x[c];
    m /= a->C;
    for (int c = 0; c < a->C; c++) v += (x[c] - m) * (x[c] - m);
    float s = km_ln_rstd(v / a->C);
    for (int c = 0; c < a->C; c++) a->out[(size_t)i * a->C + c] = km_ln_out(x[c], m, s, a->weight[c], a->bias[c]);
    a->mean[i] = m;
    a->rstd[i] = s;
}

static void sim_layernorm_forward(const LayernormArgs *a) {
    for (int i = 0; i < a->N; i++) sim_layernorm_row(a, i);
}

/* each row's residual sum, then its layernorm */
static void sim_residual_layernorm(const ResidualLayernormArgs *a) {
    const size_t C = (size_t)a->ln.C;
    for (int i = 0; i < a->ln.N; i++) {
        for (size_t c = 0; c < C; c++) km_residual_element(a, (size_t)i * C + c);
        sim_layernorm_row(&a->ln, i);
    }
}

static void sim_layernorm_backward(const LayernormArgs *a) {
    for (int i = 0; a->dinp && i < a->N; i++) {
        const float *d = a->dout + (size_t)i * a->C, *x = a->inp + (size_t)i * a->C;
        float m = a->mean[i], s = a->rstd[i], dmean = 0, dnorm_mean = 0;
        for (int c = 0; c < a->C; c++) {
            float norm = (x[c] - m) * s, dnorm = a->weight[c] * d[c];
            dmean += dnorm;
            dnorm_mean += dnorm * norm;
        }
        dmean /= a->C;
        dnorm_mean /= a->C;
        for (int c = 0; c < a->C; c++)
            a->dinp[(size_t)i * a->C + c] += km_ln_dinp((x[c] - m) * s, a->weight[c] * d[c], dmean, dnorm_mean, s);
    }
    for (int c = 0; a->dweight && c < a->C; c++) km_layernorm_params_column(a, c);
}

static void sim_elementwise(DeviceKernel k, const ElementwiseArgs *a) {
    for (size_t i = 0; i < a->n; i++) km_elementwise(k, a, i);
}

/* every query row, then (backward) every key row */
static void sim_attention(DeviceKernel k, const AttentionArgs *a) {
    const int rows = a->B * a->H * a->T;
    for (int idx = 0; idx < rows; idx++)
        if (k == DK_ATTENTION_FORWARD) km_attention_forward_row(a, idx);
        else km_attention_dq_row(a, idx);
    for (int idx = 0; idx < rows && k == DK_ATTENTION_BACKWARD; idx++) km_attention_dkv_row(a, idx);
}

static void sim_softmax_xent(const XentArgs *a) {
    for (int i = 0; i < a->N; i++) {
        float *row = a->logits + (size_t)i * a->Vp;
        const int target = a->targets[i];
        if (target < 0) {
            a->losses[i] = 0;
            if (a->dloss != 0) memset(row, 0, sizeof(float) * (size_t)a->Vp);
            continue;
        }
        float m = row[0], sum = 0;
        for (int j = 1; j < a->V; j++) m = row[j] > m ? row[j] : m;
        for (int j = 0; j < a->V; j++) sum += km_exp_shifted(row[j], m);
        a->losses[i] = km_xent_loss(sum, row[target], m);
        if (a->dloss == 0) continue;
        const float s = a->dloss / sum;
        for (int j = 0; j < a->Vp; j++) row[j] = j < a->V ? km_exp_shifted(row[j], m) * s : 0.0f;
        row[target] -= a->dloss;
    }
}

static float *sim_widen(const uint16_t *h, size_t n) {
    float *f = malloc(sizeof *f * n);
    for (size_t i = 0; f && i < n; i++) f[i] = km_bf16_to_float(h[i]);
    return f;
}

/* bf16 backward: dbias from the fp32 dout, the products from the bf16 operands widened (exact), as
 * matmul_bf16.h's widening path */
static void sim_matmul_backward_bf16(const MatmulArgs *a) {
    if (a->dbias) bias_backward(a->dbias, a->dout, (size_t)a->N, a->OC);
    float *dout = sim_widen(a->dout_bf16, (size_t)a->N * a->OC), *inp = sim_widen(a->inp_bf16, (size_t)a->N * a->IC);
    float *w = sim_widen(a->weight_bf16, (size_t)a->OC * a->IC);
    if (dout && inp && w) matmul_backward(a->dinp, a->dweight, NULL, dout, inp, w, (size_t)a->N, a->IC, a->OC);
    free(dout);
    free(inp);
    free(w);
}

static void sim_matmul(DeviceKernel k, const MatmulArgs *a) {
    if (k == DK_MATMUL_BACKWARD && a->dout_bf16) {
        sim_matmul_backward_bf16(a);
        return;
    }
    if (k == DK_MATMUL_BACKWARD) {
        matmul_backward(a->dinp, a->dweight, a->dbias, a->dout, a->inp, a->weight, (size_t)a->N, a->IC, a->OC);
        return;
    }
    float *out = a->pre_gelu ? a->pre_gelu : a->out;
    if (!a->inp_bf16) {
        matmul_forward(out, a->inp, a->weight, a->bias, (size_t)a->N, a->IC, a->OC);
    } else {
        float *inp = sim_widen(a->inp_bf16, (size_t)a->N * a->IC), *w = sim_widen(a->weight_bf16, (size_t)a->OC * a->IC);
        if (inp && w) matmul_forward(out, inp, w, a->bias, (size_t)a->N, a->IC, a->OC);
        free(inp);
        free(w);
    }
    if (a->pre_gelu) /* the GELU epilogue */
        for (size_t i = 0; i < (size_t)a->N * a->OC; i++) a->out[i] = km_gelu(a->pre_gelu[i]);
}

/* As the CUDA kernel's blocks: each finds its first segment, its elements walk on from there. */
static void sim_adamw(const AdamWArgs *a) {
    enum { BLOCK = 256 };
    for (size_t start = 0; start < a->n; start += BLOCK) {
        int s = km_adamw_segment_of(a, start);
        for (size_t i = start; i < a->n && i < start + BLOCK; i++) km_adamw_element(a, s = km_adamw_walk(a, s, i), i);
    }
}

static void sim_sum_of_squares(const SumSquaresArgs *a) {
    for (int t = 0; t < a->tensors; t++) {
        double s = 0;
        for (int64_t i = a->offsets[t]; i < a->offsets[t + 1]; i++) s += (double)a->x[i] * a->x[i];
        a->sums[t] = s;
    }
}

static void sim_nonfinite(const NonfiniteArgs *a) {
    int32_t flag = 0;
    for (size_t i = 0; i < a->n; i++) flag |= km_nonfinite(a->x[i]);
    *a->flag = flag;
}

static void sim_bf16_round(const Bf16RoundArgs *a) {
    for (size_t i = 0; i < a->n; i++) km_bf16_round_element(a, i);
}

static void sim_bf16_widen(const Bf16WidenArgs *a) {
    for (size_t i = 0; i < a->n; i++) km_bf16_widen_element(a, i);
}

void sim_run_kernel(const DeviceCall *c) {
    switch (c->kernel) {
    case DK_ENCODER_FORWARD: sim_encoder_forward(&c->a.encoder); break;
    case DK_ENCODER_BACKWARD: sim_encoder_backward(&c->a.encoder); break;
    case DK_LAYERNORM_FORWARD: sim_layernorm_forward(&c->a.layernorm); break;
    case DK_LAYERNORM_BACKWARD: sim_layernorm_backward(&c->a.layernorm); break;
    case DK_GELU_FORWARD:
    case DK_GELU_BACKWARD:
    case DK_RESIDUAL_FORWARD: sim_elementwise(c->kernel, &c->a.elementwise); break;
    case DK_ATTENTION_FORWARD:
    case DK_ATTENTION_BACKWARD: sim_attention(c->kernel, &c->a.attention); break;
    case DK_SOFTMAX_XENT: sim_softmax_xent(&c->a.xent); break;
    case DK_MATMUL_FORWARD:
    case DK_MATMUL_BACKWARD: sim_matmul(c->kernel, &c->a.matmul); break;
    case DK_ADAMW: sim_adamw(&c->a.adamw); break;
    case DK_SUM_OF_SQUARES: sim_sum_of_squares(&c->a.sumsq); break;
    case DK_NONFINITE: sim_nonfinite(&c->a.nonfinite); break;
    case DK_FLASH_FORWARD:
    case DK_FLASH_BACKWARD:
    case DK_FLASH_MERGE: sim_flash(c); break;
    case DK_CLASSIFIER: sim_classifier(&c->a.xent); break;
    case DK_BF16_ROUND: sim_bf16_round(&c->a.round); break;
    case DK_FP8_LINEAR_FORWARD:
    case DK_FP8_LINEAR_BACKWARD: sim_fp8_linear(c); break;
    case DK_FP8_QUANTIZE: sim_fp8_quantize(&c->a.fp8_quantize); break;
    case DK_FP8_PRODUCT: sim_fp8_product(&c->a.fp8_product); break;
    case DK_BF16_WIDEN: sim_bf16_widen(&c->a.widen); break;
    case DK_RESIDUAL_LAYERNORM_FORWARD: sim_residual_layernorm(&c->a.residual_ln); break;
    case DK_MOE_ROUTE:
    case DK_MOE_DISPATCH:
    case DK_MOE_COMBINE:
    case DK_MOE_COMBINE_BACKWARD:
    case DK_MOE_ROUTER_BACKWARD:
    case DK_MOE_SCATTER_BACKWARD: sim_moe(c); break;
    case DK_COUNT: break;
    }
}

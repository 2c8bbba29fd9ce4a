/* device_kernels.h: the engine's kernels as the device seam launches them:
 * one name per kernel and its arguments (device pointers, shapes), the same
 * shapes and meanings as their CPU counterparts in kernels/kernels.h and
 * optim/. Plain C, read by the C files and by nvcc. */
#ifndef BS_DEVICE_DEVICE_KERNELS_H
#define BS_DEVICE_DEVICE_KERNELS_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    DK_ENCODER_FORWARD,
    DK_ENCODER_BACKWARD,
    DK_LAYERNORM_FORWARD,
    DK_LAYERNORM_BACKWARD,
    DK_GELU_FORWARD,
    DK_GELU_BACKWARD,
    DK_RESIDUAL_FORWARD,
    DK_ATTENTION_FORWARD,
    DK_ATTENTION_BACKWARD,
    DK_SOFTMAX_XENT,
    DK_MATMUL_FORWARD,
    DK_MATMUL_BACKWARD,
    DK_ADAMW, /* fused over a table of segments (AdamWArgs; adamw_math.h) */
    DK_SUM_OF_SQUARES,
    DK_NONFINITE,
    DK_FLASH_FORWARD,  /* fused attention (flash_math.h) */
    DK_FLASH_BACKWARD,
    DK_FLASH_MERGE,
    DK_CLASSIFIER, /* softmax_xent_forward_backward fused (XentArgs; classifier_math.h) */
    DK_BF16_ROUND,
    DK_FP8_LINEAR_FORWARD, /* kernels/matmul_fp8.h's layer on FP8 operands (Fp8LinearArgs) */
    DK_FP8_LINEAR_BACKWARD,
    DK_FP8_QUANTIZE, /* an operand to FP8 codes and scales (Fp8QuantizeArgs; fp8_math.h) */
    DK_FP8_PRODUCT,  /* the fp32 product of two quantized operands (Fp8ProductArgs; fp8_math.h) */
    DK_BF16_WIDEN,               /* bf16 bits to floats (Bf16WidenArgs) */
    DK_RESIDUAL_LAYERNORM_FORWARD, /* the residual add and the layernorm after it in one pass (ResidualLayernormArgs) */
    DK_MOE_ROUTE,    /* the MoE kernels (MoeArgs; moe_math.h) */
    DK_MOE_DISPATCH,
    DK_MOE_COMBINE,
    DK_MOE_COMBINE_BACKWARD,
    DK_MOE_ROUTER_BACKWARD,
    DK_MOE_SCATTER_BACKWARD,
    DK_COUNT
} DeviceKernel;

/* encoder_forward / encoder_backward over the whole vocabulary (tokens (B,T);
 * one outside [0, V) adds no row and gets no gradient, as in kernels.h).
 * Token (b,t)'s position is positions[b T + t] where given (context
 * parallelism: the local rows' true positions), else t, or t - doc_start[b T
 * + t] (packed documents restart theirs). */
typedef struct {
    float *out, *dwte, *dwpe;       /* out (forward); dwte (V,C) +=, dwpe (T,C) += (backward) */
    const float *wte, *wpe, *dout;  /* forward's tables; backward's incoming gradient */
    const int32_t *tokens;          /* (B,T) */
    const int32_t *doc_start;       /* (B,T) or NULL */
    const int32_t *positions;       /* (B,T) or NULL */
    int B, T, C, V;
} EncoderArgs;

/* layernorm_forward / layernorm_backward: out, mean, rstd written; dinp, dweight, dbias +=
 * (backward: dinp NULL leaves out the input's gradient, dweight NULL the parameters', dbias with them) */
typedef struct {
    float *out, *mean, *rstd, *dinp, *dweight, *dbias;
    const float *inp, *weight, *bias, *dout;
    int N, C;
} LayernormArgs;

/* gelu (out = gelu(inp); backward writes dinp = gelu'(inp) dout), residual (out = a + b) */
typedef struct {
    float *out;
    const float *a, *b; /* gelu: a = inp, b = dout (backward) */
    size_t n;
} ElementwiseArgs;

/* attention_forward_docs / attention_backward. doc_start (B,T) may be NULL
 * (plain causal); scratch (B,H,T,T) holds dS in backward. */
typedef struct {
    float *out, *att, *dqkv, *scratch;
    const float *qkv, *dout;
    const int32_t *doc_start;
    int B, T, C, H;
} AttentionArgs;

/* softmax_xent_forward_backward: losses (N) written; with dloss != 0 the
 * logits (N,Vp) become their gradient */
typedef struct {
    float *logits, *losses;
    const int32_t *targets;
    int N, V, Vp;
    float dloss;
} XentArgs;

/* matmul_forward (out = inp weight^T + bias) / matmul_backward (dinp
 * written, dweight and dbias +=; each may be NULL). With inp_bf16 and
 * weight_bf16 set, forward multiplies those bf16 operands (fp32
 * accumulation) instead of inp and weight; backward with dout_bf16 set too
 * multiplies dout_bf16 (dout rounded) by weight_bf16 and inp_bf16, while
 * dbias sums the fp32 dout (as kernels/matmul_bf16.h). Forward with
 * pre_gelu set is the fc layer's GELU epilogue: pre_gelu = the product plus
 * bias, out = gelu of it (km_gelu; cuBLASLt's GELU_AUX_BIAS epilogue). */
typedef struct {
    float *out, *dinp, *dweight, *dbias, *pre_gelu;
    const float *inp, *weight, *bias, *dout;
    const uint16_t *inp_bf16, *weight_bf16, *dout_bf16;
    int N, IC, OC;
} MatmulArgs;

/* The step's values of AdamW: step_size = lr / (1 - beta1^t), decay = 1 - lr
 * wd (taken only where a segment decays, else 1), bias2_sqrt = sqrt(1 -
 * beta2^t), grad_scale the gradient's factor; computed by the host. */
typedef struct {
    float grad_scale, step_size, bias2_sqrt, decay;
} AdamWStepScalars;

/* One piece of the fused AdamW's work (adamw_table.h): count parameters
 * from offset (an index into the layout: params, m, v, grads, params_bf16
 * less their shifts), numbered from first in the launch's element order;
 * decays picks the step's decay. */
typedef struct {
    int64_t offset, first, count;
    int32_t decays;
} AdamWSegment;

/* adamw_update on every parameter of segs (nsegs, on the device, in order
 * of first, non-empty, numbering [0, n)) in one launch; params_bf16 (NULL:
 * none, else the whole layout's) gets the bf16 rounding of each updated
 * parameter. params, grads and m, v hold the layout from param_shift,
 * grad_shift and state_shift (a part holding the update range only: the
 * range's start; else 0). With step (not NULL) the step's values come from
 * device memory instead of scalars, written there before the launch (a graph
 * replays the launch unchanged). */
typedef struct {
    float *params, *m, *v;
    uint16_t *params_bf16;
    const float *grads;
    const AdamWSegment *segs;
    int nsegs;
    size_t n;
    int64_t param_shift, grad_shift, state_shift;
    float beta1, beta2, eps;
    AdamWStepScalars scalars;
    const AdamWStepScalars *step;
} AdamWArgs;

/* sums (tensors) = sum of x[offsets[i] .. offsets[i + 1])^2, in double;
 * offsets (tensors + 1) lives on the device */
typedef struct {
    double *sums;
    const float *x;
    const int64_t *offsets;
    int tensors;
} SumSquaresArgs;

/* *flag (an int on the device) = 1 if any of x (n) is NaN or infinite, else 0 */
typedef struct {
    int32_t *flag;
    const float *x;
    size_t n;
} NonfiniteArgs;

/* Fused causal attention (FlashAttention-2; flash_math.h): the Tq query
 * rows of q against the Tk key/value rows of k and v, per (batch, head),
 * never the (Tq,Tk) matrix. Rows sit q_stride (q, dq) or kv_stride (k, v,
 * dk, dv) floats apart, C apart in out and dout: qkv (B,T,3C) gives q, k, v
 * at offsets 0, C, 2C with strides 3C; a context-parallel key/value block
 * (B,t,2C) gives k, v at 0, C with stride 2C. Query i sees key j when
 * k_pos[j] <= q_pos[i] and k_pos[j] >= doc_start[b Tq + i] (positions NULL:
 * the row index; doc_start NULL: 0). Forward writes out (B,Tq,C), the
 * softmax over the keys of this call, and lse (B,H,Tq), the log of its
 * denominator (-inf where no key is seen); blocks of keys merge by
 * DK_FLASH_MERGE. Backward reads the final out and lse and writes dq, dk,
 * dv (or adds to them with accumulate). */
typedef struct {
    float *out, *lse, *dq, *dk, *dv;
    const float *q, *k, *v, *dout;
    const int32_t *q_pos, *k_pos, *doc_start;
    int B, Tq, Tk, C, H, q_stride, kv_stride, accumulate;
} FlashArgs;

/* (out, lse) (B,T,C), (B,H,T) becomes the log-sum-exp merge of itself and
 * (part_out, part_lse): the softmax over both blocks' keys. */
typedef struct {
    float *out, *lse;
    const float *part_out, *part_lse;
    int B, T, C, H;
} FlashMergeArgs;
/* bf16 rounding (nearest even) of inp (n): out (may be inp, or NULL) gets
 * the rounded values as floats, out_bf16 (or NULL) their bf16 bits */
typedef struct {
    float *out;
    uint16_t *out_bf16;
    const float *inp;
    size_t n;
} Bf16RoundArgs;

/* out (n floats) = the bf16 values in (n), exactly */
typedef struct {
    float *out;
    const uint16_t *in;
    size_t n;
} Bf16WidenArgs;

/* The residual add fused with the layernorm that reads its sum: residual =
 * a + b, then ln over it (ln.inp is residual) as DK_LAYERNORM_FORWARD, each
 * row in one pass: the same bits as the two kernels one after the other.
 * Its backward is DK_LAYERNORM_BACKWARD's one pass: the residual's gradient
 * goes to a and b unchanged, so dinp += adds the layernorm's input gradient
 * to it where it lies (the residual add needs no pass of its own). */
typedef struct {
    LayernormArgs ln;
    float *residual;
    const float *a, *b;
} ResidualLayernormArgs;

/* FP8 statistics of one tensor on the device, kernels/fp8.h's Fp8Stats:
 * counts added to, amax the larger. */
typedef struct {
    uint64_t values, nonzero, underflow, overflow;
    float amax;
} DeviceFp8Stats;

/* One operand of an FP8 product, in E4M3 (e5m2 0) or E5M2 (e5m2 1): with a
 * per-tensor scale (blocks 0: codes = cast(x * scale) saturating) or the
 * block recipe's power-of-two scales per block (blocks 1: 1x128 along the
 * product's reduction, 128x128 for the weight; kernels/matmul_fp8.h); its
 * statistics added to stats (NULL: not counted). */
typedef struct {
    int e5m2, blocks;
    float scale;
    DeviceFp8Stats *stats;
} DeviceFp8Operand;

/* fp8_linear_forward (out = fp8(inp) fp8(weight)^T + bias, fp32
 * accumulation; bias may be NULL) / fp8_linear_backward (dinp written,
 * dweight +=, each may be NULL; dbias (or NULL) += the fp32 dout's column
 * sums), the operands x (inp), w (weight), g (dout) quantized by their
 * DeviceFp8Operand. Forward counts x and w, backward g (kernels/matmul_fp8.h).
 * weight_bf16 (or NULL): the weight's bf16 bits, read instead of weight (bf16
 * outside FP8: the products' weights are the bf16 copy's, as gpt.c's). */
typedef struct {
    float *out, *dinp, *dweight, *dbias;
    const float *inp, *weight, *bias, *dout;
    const uint16_t *weight_bf16;
    DeviceFp8Operand x, w, g;
    int N, IC, OC;
} Fp8LinearArgs;

/* An FP8 operand (rows, cols) as its quantize kernel writes it: codes
 * (rows, cols), or (cols, rows) with transpose, so that a product reads it
 * with its reduction contiguous; per-tensor scale (block_rows = block_cols =
 * 0) or one power-of-two scale per (block_rows, block_cols) block. */
typedef struct {
    int rows, cols, block_rows, block_cols, transpose, e5m2;
} DeviceFp8Layout;

/* codes (layout) = cast(x * scale) saturating of src (or src_bf16 widened),
 * scale_inv (fp8_math.h's scale tensor) = each block's 1/scale, the
 * statistics added to stats (NULL: not counted); as kernels/fp8.h's
 * fp8_quantize, bit for bit. */
typedef struct {
    uint8_t *codes;
    float *scale_inv;
    DeviceFp8Stats *stats;
    const float *src;
    const uint16_t *src_bf16;
    DeviceFp8Layout layout;
    float scale;
} Fp8QuantizeArgs;

/* out (n, m) row-major = beta out + a (m, k) b (n, k)^T + bias (m; NULL:
 * none): each code's value times its block's 1/scale, summed in fp32 in k
 * order (beta 0: out not read). a and b are DK_FP8_QUANTIZE's codes and
 * scales; their layouts' transposed shapes are (m, k) and (n, k). The plain
 * product cuBLASLt's FP8 GEMM replaces where it has an algorithm. */
typedef struct {
    float *out;
    const uint8_t *a, *b;
    const float *a_scale_inv, *b_scale_inv, *bias;
    DeviceFp8Layout la, lb;
    int m, n, k;
    float beta;
} Fp8ProductArgs;

/* The MoE layer's token side (model/moe.h's definitions, dropless) over N
 * rows of C channels, E experts, top K; stats holds model/moe.h's MoeStats
 * (doubles at the DK_MOE_STAT_* offsets). DK_MOE_ROUTE: logits, scores (N,E),
 * lse (N), slot_expert and slot_weight (N K) from x, router_w (E,C), bias (E
 * or NULL). DK_MOE_DISPATCH: counts (E), slot_pos (N K), disp_row (N K) and
 * stats +=; then rows (N K, C) = x's rows in dispatch order. DK_MOE_COMBINE:
 * out (N,C) = sum_k w_k y[place], written. DK_MOE_COMBINE_BACKWARD: dy (N K,
 * C) and slot_dweight (N K) from dout. DK_MOE_ROUTER_BACKWARD: dlogits (N,E)
 * with the losses' gradients (aux_coef, z_coef, stats). DK_MOE_SCATTER_BACKWARD:
 * dx (N,C) = dx_router + each row's drows, written. */
enum { DK_MOE_MAX_EXPERTS = 256 };
enum { DK_MOE_SOFTMAX, DK_MOE_SIGMOID };                           /* MoeRouter's order */
enum { DK_MOE_NORMALIZED, DK_MOE_UNNORMALIZED, DK_MOE_PRE_SOFTMAX }; /* MoeGates' order */
enum {
    DK_MOE_STAT_TOKENS = 0,
    DK_MOE_STAT_LSE_SQ = 1,
    DK_MOE_STAT_ROUTED = 2,
    DK_MOE_STAT_PROB = 2 + DK_MOE_MAX_EXPERTS,
    DK_MOE_STAT_KEPT = 2 + 2 * DK_MOE_MAX_EXPERTS,
    DK_MOE_STATS = 2 + 3 * DK_MOE_MAX_EXPERTS
};
typedef struct {
    float *logits, *scores, *lse, *slot_weight, *slot_dweight, *rows, *out, *dy, *dlogits, *dx;
    int32_t *slot_expert, *slot_pos, *disp_row, *counts;
    double *stats;
    const float *x, *router_w, *bias, *y, *dout, *drows, *dx_router;
    int N, C, E, K, router, gates;
    float routed_scale;
    double aux_coef, z_coef;
} MoeArgs;

typedef struct {
    DeviceKernel kernel;
    union {
        EncoderArgs encoder;
        LayernormArgs layernorm;
        ElementwiseArgs elementwise;
        AttentionArgs attention;
        XentArgs xent;
        MatmulArgs matmul;
        AdamWArgs adamw;
        SumSquaresArgs sumsq;
        NonfiniteArgs nonfinite;
        FlashArgs flash;
        FlashMergeArgs flash_merge;
        Bf16RoundArgs round;
        Fp8LinearArgs fp8;
        Fp8QuantizeArgs fp8_quantize;
        Fp8ProductArgs fp8_product;
        Bf16WidenArgs widen;
        ResidualLayernormArgs residual_ln;
        MoeArgs moe;
    } a;
} DeviceCall;

#endif

/* kernel_math.h: the per-element arithmetic of the device kernels, one
 * function per formula, compiled into both the CUDA kernels (nvcc: host and
 * device) and sim's host loops, so CI checks each CUDA kernel's arithmetic
 * against kernels/kernels.h. What the GPU alone runs is how the work is cut
 * (blocks, warps, shared-memory reductions); the formulas are these. */
#ifndef BS_DEVICE_KERNEL_MATH_H
#define BS_DEVICE_KERNEL_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define BS_HD static __host__ __device__ inline
#else
#define BS_HD static inline
#endif

#define KM_GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define KM_GELU_A 0.044715f
#define KM_LN_EPS 1e-5f

/* GPT-2's tanh GELU as x sigmoid(2u), u = sqrt(2/pi)(x + 0.044715 x^3) */
BS_HD float km_gelu(float x) {
    float u = KM_GELU_K * (x + KM_GELU_A * x * x * x);
    return x / (1.0f + expf(-2.0f * u));
}

/* d gelu / dx times dout: s + 2 x s (1 - s) u', s = sigmoid(2u) */
BS_HD float km_gelu_backward(float x, float dout) {
    float u = KM_GELU_K * (x + KM_GELU_A * x * x * x);
    float du = KM_GELU_K * (1.0f + 3.0f * KM_GELU_A * x * x);
    float s = 1.0f / (1.0f + expf(-2.0f * u));
    return (s + 2.0f * x * s * (1.0f - s) * du) * dout;
}

/* 1 / sqrt(variance + eps) of a row */
BS_HD float km_ln_rstd(float variance) { return 1.0f / sqrtf(variance + KM_LN_EPS); }

/* one normalized, scaled and shifted element */
BS_HD float km_ln_out(float x, float mean, float rstd, float weight, float bias) {
    return (x - mean) * rstd * weight + bias;
}

/* the input gradient of one element from its row's two means */
BS_HD float km_ln_dinp(float norm, float dnorm, float dnorm_mean, float dnorm_norm_mean, float rstd) {
    return (dnorm - dnorm_mean - norm * dnorm_norm_mean) * rstd;
}

/* one attention probability before normalisation */
BS_HD float km_exp_shifted(float x, float max) { return expf(x - max); }

/* the softmax backward of one score: P (dP - rowsum(dP P)) */
BS_HD float km_softmax_grad(float p, float dp, float dot) { return p * (dp - dot); }

/* one row's loss: log(sum exp(x - max)) - (x_target - max) */
BS_HD float km_xent_loss(float sum, float target_logit, float max) { return logf(sum) - (target_logit - max); }

/* The AdamW update of one parameter (as optim/adamw.c): moments updated in
 * place, the new parameter returned. */
BS_HD float km_adamw(float p, float g, float *m, float *v, float beta1, float beta2, float eps, float grad_scale,
                     float step_size, float decay, float bias2_sqrt) {
    g *= grad_scale;
    float mi = beta1 * *m + (1.0f - beta1) * g;
    float vi = beta2 * *v + (1.0f - beta2) * g * g;
    *m = mi;
    *v = vi;
    return p * decay - step_size * mi / (sqrtf(vi) / bias2_sqrt + eps);
}

/* float -> bf16, nearest even, NaN kept a NaN (as kernels/bf16.h) */
BS_HD uint16_t km_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    uint32_t nan = (u >> 16) | 0x0040u;
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

BS_HD float km_bf16_to_float(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* NaN or infinite: x - x is NaN exactly then */
BS_HD int km_nonfinite(float x) { return (x - x) != 0.0f; }

#endif

/* attention_kernels.h: what a fused attention kernel's time depends on
 * beyond the GPU preset's rate, the block-length curve and the kernel
 * generation (flash2_share, compute.h): the head dimension and a sliding
 * window's share of the scores. Published figures, sources beside each
 * number in attention_kernels.c. */
#ifndef BS_PLAN_ATTENTION_KERNELS_H
#define BS_PLAN_ATTENTION_KERNELS_H

#include <stdbool.h>

/* A fused kernel's rate at head dimension d over its rate at 128: 1 from
 * 128 up, `share at 64` at 64 and below, linear between. FlashAttention-2's
 * kernels (A100, flash2) and the Hopper kernels of 2024
 * (FlashAttention-3, cuDNN: fa3 true) have their own share at 64. */
double head_dim_share(double d, bool fa3);

/* The fraction of the s x s scores a causal kernel computes when each
 * query sees at most the `window` keys before it (min(window, position)
 * of them, summed as the causal half is: W/s - W^2/2s^2); 0.5, the causal
 * half, without a window (window <= 0 or >= s). */
double window_fraction(double s, double window);

#endif

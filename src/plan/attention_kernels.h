/* attention_kernels.h: what a fused attention kernel's time depends on
 * beyond the GPU preset's rate and the block-length curve (compute.h): the
 * kernel's generation, the head dimension and a sliding window's share of
 * the scores. Published figures, the sources beside each number in
 * attention_kernels.c. */
#ifndef BS_PLAN_ATTENTION_KERNELS_H
#define BS_PLAN_ATTENTION_KERNELS_H

#include <stdbool.h>

/* Fused attention reaches less of its peak on short blocks: a fraction
 * L / (L + half length) of it for blocks of L queries and keys. The half
 * length is the kernel generation's, fitted to the forward plus backward
 * rate (2.5 x the forward FLOPs) measured on one H200 through PyTorch's
 * scaled_dot_product_attention, causal, head dimension 128, 512 ... 32K
 * tokens (tests/data/h200_sdpa_attention.tsv, bench/gpu_kernels.py): the
 * Hopper kernels (cuDNN's: fa3 true) 710 tokens, FlashAttention-2's 510. */
double flash_half_length(bool fa3);

/* Fused attention of FlashAttention-2's generation (--attention flash2: the
 * kernels of 2023, before FlashAttention-3 and cuDNN's Hopper kernels) on a
 * GPU whose fused-attention rate is FlashAttention-3's (Hopper:
 * Hardware.attention_fa3) runs at this share of it, for blocks of `block`
 * tokens (0.54-0.65). Elsewhere (A100, whose preset is FlashAttention-2's
 * level) flash2 is flash. */
double flash2_share(double block);

/* A fused kernel's rate at head dimension d over its rate at 128: 1 from
 * 128 up, the share at 64 at 64 and below, linear between. The Hopper
 * kernels of 2024 (FlashAttention-3, cuDNN: fa3 true) have a share at 64
 * that grows with the block length (0.67-0.77); FlashAttention-2's kernels
 * (A100, flash2) one share (0.905). */
double head_dim_share(double d, bool fa3, double block);

/* The head dimension FlashAttention-2's kernels (--attention flash2) compute
 * at for queries and keys of head dimension d: the kernels are compiled for
 * multiples of 32 up to 192 and for 256, and a head dimension between runs
 * the next one up, its padding computed and discarded (112 runs at 128). So
 * such a kernel's useful rate is its rate at that dimension times d over it. */
double fa2_kernel_head_dim(double d);

/* The fraction of the s x s scores a causal kernel computes when each
 * query sees at most the `window` keys before it (min(window, position)
 * of them, summed as the causal half is: W/s - W^2/2s^2); 0.5, the causal
 * half, without a window (window <= 0 or >= s). */
double window_fraction(double s, double window);

#endif

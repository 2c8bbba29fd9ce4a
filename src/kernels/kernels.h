/* kernels.h: forward and backward of every op the GPT uses.
 *
 * Shapes are in the comments; every tensor is a flat row-major array.
 * N = B*T rows, C channels, OC/IC output/input channels, H heads, Vp the
 * padded vocabulary. Backward functions accumulate (+=) into parameter
 * gradients and into input gradients unless the comment says "writes".
 * Reductions over rows are done per column in a fixed order, so results do
 * not depend on the number of OpenMP threads. Kernels know nothing about
 * ranks or the model; they are compiled in double for the gradient checks
 * (see real.h). */
#ifndef BS_KERNELS_KERNELS_H
#define BS_KERNELS_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/real.h"

/* out (B,T,C) = wte[tokens] + wpe[t] */
void encoder_forward(real *out, const int32_t *tokens, const real *wte, const real *wpe, int B, int T, int C);
/* dwte (Vp,C) +=, dwpe (maxT,C) += from dout (B,T,C) */
void encoder_backward(real *dwte, real *dwpe, const real *dout, const int32_t *tokens, int B, int T, int C);

/* out (N,C), mean (N), rstd (N) = layernorm(inp (N,C)) * weight (C) + bias (C), eps 1e-5 */
void layernorm_forward(real *out, real *mean, real *rstd, const real *inp, const real *weight,
                       const real *bias, size_t N, int C);
/* dinp (N,C) +=, dweight (C) +=, dbias (C) += */
void layernorm_backward(real *dinp, real *dweight, real *dbias, const real *dout, const real *inp,
                        const real *weight, const real *mean, const real *rstd, size_t N, int C);

/* out (N,OC) = inp (N,IC) @ weight (OC,IC)^T + bias (OC); bias may be NULL */
void matmul_forward(real *out, const real *inp, const real *weight, const real *bias, size_t N, int IC, int OC);
/* writes dinp (N,IC) (skipped if NULL); dweight (OC,IC) +=, dbias (OC) += (dbias may be NULL) */
void matmul_backward(real *dinp, real *dweight, real *dbias, const real *dout, const real *inp,
                     const real *weight, size_t N, int IC, int OC);

/* Causal multi-head self-attention. qkv (B,T,3C) holds q, k, v side by side.
 * out (B,T,C); att (B,H,T,T) keeps the softmax probabilities for backward
 * (entries above the diagonal are 0). */
void attention_forward(real *out, real *att, const real *qkv, int B, int T, int C, int H);
/* writes dqkv (B,T,3C) from dout (B,T,C). scratch holds scratch_slots * T*T
 * reals; at most scratch_slots threads work at once, one slot each. */
void attention_backward(real *dqkv, real *scratch, int scratch_slots, const real *dout, const real *qkv,
                        const real *att, int B, int T, int C, int H);

/* out (N) = gelu(inp) with the tanh approximation; backward writes dinp */
void gelu_forward(real *out, const real *inp, size_t N);
void gelu_backward(real *dinp, const real *inp, const real *dout, size_t N);

/* out (N) = a + b */
void residual_forward(real *out, const real *a, const real *b, size_t N);

/* Softmax cross-entropy over the first V of Vp logits per row, fused with its
 * backward. losses (N) = -log softmax(logits)[target]. If dloss != 0 the
 * logits (N,Vp) are overwritten with their gradient (softmax - onehot) * dloss
 * (0 in the padded columns). Returns the sum of the N losses (in double). */
double softmax_xent_forward_backward(real *logits, real *losses, const int32_t *targets, size_t N, int V,
                                     int Vp, real dloss);

#endif

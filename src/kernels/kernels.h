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

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/real.h"

/* out (B,T,C) = wte[token - v_begin] + wpe[pos(b,t)], pos(b,t) = positions[b T + t]
 * ((B,T): a context-parallel rank's tokens keep their true positions, packed
 * documents restart at 0) or t when positions is NULL. wte holds the rows of tokens [v_begin, v_end) (a
 * vocabulary shard, or all of it); other tokens add 0. wpe may be NULL
 * (positions added elsewhere). */
void encoder_forward(real *out, const int32_t *tokens, const real *wte, const real *wpe, const int32_t *positions,
                     int v_begin, int v_end, int B, int T, int C);
/* dwte (rows v_begin..v_end) +=, dwpe (maxT,C) += (if not NULL) from dout (B,T,C) */
void encoder_backward(real *dwte, real *dwpe, const real *dout, const int32_t *tokens, const int32_t *positions,
                      int v_begin, int v_end, int B, int T, int C);

/* out (N,C), mean (N), rstd (N) = layernorm(inp (N,C)) * weight (C) + bias (C), eps 1e-5 */
void layernorm_forward(real *out, real *mean, real *rstd, const real *inp, const real *weight,
                       const real *bias, size_t N, int C);
/* dinp (N,C) +=, dweight (C) +=, dbias (C) += */
void layernorm_backward(real *dinp, real *dweight, real *dbias, const real *dout, const real *inp,
                        const real *weight, const real *mean, const real *rstd, size_t N, int C);
/* layernorm_backward in two parts, the same bits as the whole: the input
 * gradient dinp (N,C) +=, and the parameter gradients dweight (C) +=,
 * dbias (C) += (which need no weight) */
void layernorm_backward_input(real *dinp, const real *dout, const real *inp, const real *weight, const real *mean,
                              const real *rstd, size_t N, int C);
void layernorm_backward_params(real *dweight, real *dbias, const real *dout, const real *inp, const real *mean,
                               const real *rstd, size_t N, int C);

/* The fixed work blocks of the linear layer (matmul.c): out and dinp in
 * blocks of MATMUL_ROW_BLOCK rows, dweight in blocks of MATMUL_DWEIGHT_BLOCK
 * output channels; each block is one single-threaded gemm, so the bits do
 * not depend on the thread count. The bf16 layer uses the same blocks. */
/* Sizes measured on the engine benchmark (2048 rows, C = 384): each block
 * repacks the other operand, so smaller blocks cost more at 1 thread, and
 * fewer blocks balance worse at 2 (docs/PERFORMANCE.md, Determinism). */
enum { MATMUL_ROW_BLOCK = 1024, MATMUL_DWEIGHT_BLOCK = 384 };

/* out (N,OC) = inp (N,IC) @ weight (OC,IC)^T + bias (OC); bias may be NULL */
void matmul_forward(real *out, const real *inp, const real *weight, const real *bias, size_t N, int IC, int OC);
/* The same into columns of a wider out: row i of out starts ldo elements
 * after row i-1 (a slice of the columns of a larger product, same bits as in
 * the whole product per row block); bias (OC) may be NULL */
void matmul_forward_columns(real *out, size_t ldo, const real *inp, const real *weight, const real *bias, size_t N,
                            int IC, int OC);
/* dinp (N,IC) = dout (N,OC; row i ldd elements after row i-1) @ weight
 * (OC,IC), added to dinp when accumulate: a product whose sum over the output
 * channels is cut into slices, one call per slice */
void matmul_backward_input_columns(real *dinp, const real *dout, size_t ldd, const real *weight, size_t N, int IC,
                                   int OC, bool accumulate);
/* writes dinp (N,IC); dweight (OC,IC) +=, dbias (OC) +=. Each of the three
 * may be NULL (skipped), so the input and weight gradients can be computed
 * by separate calls, with the same bits as one call (weight is read only for
 * dinp, inp only for dweight) */
void matmul_backward(real *dinp, real *dweight, real *dbias, const real *dout, const real *inp,
                     const real *weight, size_t N, int IC, int OC);

/* dbias (OC) += column sums of dout (N,OC), each column summed in row order */
void bias_backward(real *dbias, const real *dout, size_t N, int OC);

/* Causal multi-head self-attention. qkv (B,T,3C) holds q, k, v side by side.
 * out (B,T,C); att (B,H,T,T) keeps the softmax probabilities for backward
 * (entries above the diagonal are 0). */
void attention_forward(real *out, real *att, const real *qkv, int B, int T, int C, int H);
/* The same within documents: query (b, i) sees keys doc_start[b T + i] .. i
 * (doc_start <= i; packed sequences whose documents must not see each
 * other). attention_backward is the same for both (P is 0 where masked). */
void attention_forward_docs(real *out, real *att, const real *qkv, const int32_t *doc_start, int B, int T, int C,
                            int H);
/* writes dqkv (B,T,3C) from dout (B,T,C). scratch holds scratch_slots * T*T
 * reals; at most scratch_slots threads work at once, one slot each. */
void attention_backward(real *dqkv, real *scratch, int scratch_slots, const real *dout, const real *qkv,
                        const real *att, int B, int T, int C, int H);

/* Attention of a rank's rows of the sequence against one block of keys and
 * values at a time (context parallelism; attention_blocks.c). The sequence of
 * T tokens is cut into chunks of t/2 rows; the rank's t rows are chunks
 * q_chunks[0] < q_chunks[1] (global chunk numbers), a key/value block kv
 * (B,t,2C: k then v per row) holds another rank's two chunks kv_chunks[0] <
 * kv_chunks[1]. Forward: begin, one forward per block (any order), finish;
 * att (B,H,t,T) then holds the probabilities at their global key positions
 * (0 above the diagonal). Backward: delta (B,H,t) = rowsum(dout * out) once,
 * then per block dqkv's q part (+=) and the block's dkv (+=). row_max,
 * row_sum (B,H,t) are the running statistics; scratch holds slots *
 * attention_blocks_scratch_floats reals, one slot per working thread. poll
 * (NULL: none) is called by the calling thread between its row blocks, so a
 * caller can advance communication in flight while the block is computed. */
enum { ATTENTION_ROW_BLOCK = 64 };
typedef struct {
    int B, t, C, H; /* batch, local rows, channels and heads of this shard */
    int T;          /* the whole sequence: att's columns */
    int q_chunks[2];
} AttentionRows;
typedef struct {
    void (*fn)(void *ctx);
    void *ctx;
} AttentionPoll;
size_t attention_blocks_scratch_floats(int t, int C, int H);
void attention_blocks_begin(real *out, real *row_max, real *row_sum, const AttentionRows *r);
void attention_blocks_forward(real *out, real *row_max, real *row_sum, real *att, const real *qkv, const real *kv,
                              const int kv_chunks[2], const AttentionRows *r, real *scratch, int slots,
                              const AttentionPoll *poll);
void attention_blocks_finish(real *out, const real *row_max, const real *row_sum, real *att, const AttentionRows *r);
void attention_blocks_delta(real *delta, const real *dout, const real *out, const AttentionRows *r);
void attention_blocks_backward(real *dqkv, real *dkv, const real *dout, const real *qkv, const real *kv,
                               const real *att, const real *delta, const int kv_chunks[2], const AttentionRows *r,
                               real *scratch, int slots, const AttentionPoll *poll);

/* out (N) = gelu(inp) with the tanh approximation; backward writes dinp */
void gelu_forward(real *out, const real *inp, size_t N);
void gelu_backward(real *dinp, const real *inp, const real *dout, size_t N);

/* out (N) = a + b */
void residual_forward(real *out, const real *a, const real *b, size_t N);

/* Softmax cross-entropy over the first V of Vp logits per row, fused with its
 * backward. losses (N) = -log softmax(logits)[target]. If dloss != 0 the
 * logits (N,Vp) are overwritten with their gradient (softmax - onehot) * dloss
 * (0 in the padded columns). A negative target is not counted: its loss and
 * gradient are 0. Returns the sum of the N losses (in double). */
double softmax_xent_forward_backward(real *logits, real *losses, const int32_t *targets, size_t N, int V,
                                     int Vp, real dloss);

/* Vocabulary-parallel softmax cross-entropy (Megatron): each shard holds
 * logits (N,Vl) for the vocabulary columns [v_begin, v_begin + Vl), of which
 * the first V_valid are real tokens. Between the phases the caller takes the
 * maximum of row_max, then the sum of row_sum and target_logit, over shards.
 * Phase 1: row_max (N) = max of the valid local logits (-inf if none). */
void xent_shard_max(const real *logits, double *row_max, size_t N, int V_valid, int Vl);
/* Phase 2 (row_max global): logits become exp(logit - max); row_sum (N) their
 * sum over valid columns; target_logit (N) = target's logit - max if this shard
 * holds the target, else 0. */
void xent_shard_exp(real *logits, const double *row_max, double *row_sum, double *target_logit,
                    const int32_t *targets, int v_begin, size_t N, int V_valid, int Vl);
/* Phase 3 (sums global): losses (N) = log(sum) - target_logit; with dloss != 0
 * the logits become their gradient (softmax - onehot) x dloss, 0 in padding.
 * Returns the sum of the N losses. */
double xent_shard_finish(real *logits, real *losses, const double *row_sum, const double *target_logit,
                         const int32_t *targets, int v_begin, size_t N, int V_valid, int Vl, real dloss);

#endif

/* context_attention.h: causal attention over a sequence split across the
 * ranks of a context-parallel group (CP).
 *
 * Each sequence of T tokens is cut into 2N chunks of T/2N rows; rank r of a
 * group of N keeps two of them. The zigzag split (Megatron, Transformer
 * Engine) gives rank r chunks r and 2N-1-r, so every rank has the same
 * causal work; the contiguous split gives it 2r and 2r+1 (rank N-1 then does
 * most of the work; kept to measure that). Tokens keep their true positions.
 *
 * Two algorithms move the keys and values:
 *   ring:      each rank's (B, t, 2C) key/value block travels around the
 *              group by non-blocking point-to-point, the next block in flight
 *              while the one in hand is computed; partial outputs merge by
 *              log-sum-exp. Backward runs the ring the other way: each
 *              block's keys and values and, one step behind, its gradient
 *              so far (each rank adds its share), both in flight while the
 *              next block is computed; the last hop brings it home.
 *   allgather: every block gathered at once (what Llama 3 used); backward
 *              reduce-scatters the key/value gradients.
 * Both give the single-process attention up to summation order. The group's
 * bytes and waiting are in its Comm's statistics. */
#ifndef BS_MODEL_CONTEXT_ATTENTION_H
#define BS_MODEL_CONTEXT_ATTENTION_H

#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"

typedef enum { CP_ALGO_RING, CP_ALGO_ALLGATHER } CpAlgo;
typedef enum { CP_SPLIT_ZIGZAG, CP_SPLIT_CONTIGUOUS } CpSplit;

/* The two chunks (of 2 size) rank `rank` keeps, in increasing order. */
void context_chunks(int size, int rank, CpSplit split, int chunks[2]);
/* The true position of each of the t = T / size local tokens. */
void context_positions(int size, int rank, CpSplit split, int T, int32_t *positions);
/* Local rows [0, t) of a (B, T, width) array: the rank's chunks, in order. */
void context_take_rows(int size, int rank, CpSplit split, const int32_t *whole, int32_t *local, int B, int T);

typedef struct ContextAttention ContextAttention;

/* For batches of up to B sequences of t local rows, C channels and H heads
 * (this tensor-parallel shard's). Buffers are allocated once here. */
ContextAttention *context_attention_create(Comm *group, CpAlgo algo, CpSplit split, int B, int t, int C, int H);
void context_attention_free(ContextAttention *ca);
Comm *context_attention_group(const ContextAttention *ca);
/* Bytes of its buffers (0 for NULL). */
size_t context_attention_bytes(const ContextAttention *ca);
/* The local tokens' positions (t entries). */
const int32_t *context_attention_positions(const ContextAttention *ca);

/* out (b,t,C) and att (b,H,t,T) from qkv (b,t,3C), as attention_forward. */
void context_attention_forward(ContextAttention *ca, float *out, float *att, const float *qkv, int b, int t);
/* Writes dqkv (b,t,3C) from dout (b,t,C); out and att are forward's. */
void context_attention_backward(ContextAttention *ca, float *dqkv, const float *dout, const float *qkv,
                                const float *out, const float *att, int b, int t);

#endif

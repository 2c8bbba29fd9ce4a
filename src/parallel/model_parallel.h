/* model_parallel.h: what crosses tensor- and pipeline-parallel boundaries
 * outside forward and backward: the tied output weights between the first
 * and last pipeline stages, global gradient norms that count every logical
 * parameter once, and moving the whole ("logical") model to and from one
 * rank (sampling, export, --init-from). */
#ifndef BS_PARALLEL_MODEL_PARALLEL_H
#define BS_PARALLEL_MODEL_PARALLEL_H

#include "model/gpt.h"
#include "parallel/data_parallel.h"
#include "parallel/grid.h"

/* Tied embeddings with more than one stage: the first stage sends its wte
 * (this tensor-parallel shard) to the last stage's head_wte (call on every
 * rank after each update; a collective under ZeRO-3). */
void mp_share_output_weights(const Grid *g, GPT *model, DataParallel *dp);
/* The last stage's gradient of the tied weights goes to the first stage:
 * mp_start_tied_grads on every rank at the start of a step (first stage:
 * posts the receive); mp_send_tied_grads on the last stage after its
 * backward passes; mp_wait_tied_grads on the first stage before its last
 * backward (sets model->extra_wte_grad); mp_finish_tied_grads at the end. */
typedef struct {
    CommOp *op;
    float *buf;
} TiedGrads;
void mp_start_tied_grads(const Grid *g, GPT *model, TiedGrads *t);
void mp_send_tied_grads(const Grid *g, GPT *model, TiedGrads *t);
void mp_wait_tied_grads(GPT *model, TiedGrads *t);
void mp_finish_tied_grads(TiedGrads *t);

/* This rank's part of the squared global gradient norm: its update pieces,
 * primary copies only (replicated tensors count on tensor-parallel rank 0;
 * dense ones on ep rank 0 unless the experts are sharded apart, where each
 * rank's dense pieces are its own); the caller sums it over the
 * model-parallel group (ZeRO 0: replicas are equal; then the EP group) or
 * the world (ZeRO >= 1). */
double mp_local_grad_sum_squares(const GPT *model, DataParallel *dp);
/* Whether this rank's copy of a tensor of this kind counts in such norms (the rule above). */
bool mp_counts_in_norm(const GPTConfig *cfg, const DataParallel *dp, TensorKind kind);

/* One shard of every rank written into the whole model's parameters on world
 * rank 0 (a collective over the world; out: gpt_num_params of the logical
 * config on rank 0 only, which the caller zeroes first; rank_shards: the
 * shard config of each world rank's piece, read on rank 0). */
void mp_gather_logical(const Grid *g, GPT *model, DataParallel *dp, const GPTConfig *rank_shards, float *out);
/* The same from each rank's shard `local` of layout cfg (every data-parallel
 * rank holds it whole; one copy of each is sent). */
void mp_gather_shards(const Grid *g, const GPTConfig *cfg, const float *local, const GPTConfig *rank_shards,
                      float *out);
/* Copies local [offset, offset+count) of this shard out of a logical buffer. */
void mp_copy_from_logical(const GPTConfig *cfg, const float *logical, float *dst, size_t offset, size_t count);

#endif

/* data_parallel.h: data parallelism with ZeRO stages 0-3 over one group.
 *
 * Every rank runs the same model on its own slice of the global batch; the
 * gradients are summed across the group in buckets (contiguous ranges of
 * the flat layout, a few blocks each) launched as soon as backward finishes
 * a bucket's blocks, so communication overlaps the rest of backward.
 *   stage 0  all-reduce the gradients; every rank updates every parameter.
 *   stage 1  reduce-scatter: each rank keeps the summed gradient of its part
 *            of the parameters (its shard), updates only that part with the
 *            optimizer state it alone holds, then all-gathers the parameters.
 *   stage 2  as 1, and gradients exist only for the shard: backward writes a
 *            bucket into a small reusable buffer that is reduce-scattered and
 *            added to the shard's gradient (every micro-step).
 *   stage 3  as 2, and parameters exist only for the shard: a block's
 *            parameters are all-gathered into a buffer just before forward
 *            and again before backward uses them, the next block's gather
 *            prefetched while the current one computes, released after.
 * Stages 0 and 1 communicate only on the last micro-step of an accumulation.
 * Compressed communication (comm/compressed.h), all optional:
 *   grad codec   gradient reductions carry encoded values (all-reduce at
 *                stage 0, reduce-scatter above), with this rank's error
 *                feedback residual over the whole flat buffer (plus the
 *                server residuals of the exchange all-reduce at stage 0).
 *   quant weights  stage 3 gathers parameters as block-wise int8 (ZeRO++
 *                qwZ): every rank computes with the same decoded values,
 *                the fp32 master shard stays exact.
 *   hpz          stage 3 keeps a secondary copy of the parameters sharded
 *                over the ranks of its node, filled by the forward gathers;
 *                backward gathers only inside the node (ZeRO++ hpZ). The
 *                values are the forward's, so results do not change.
 *   local        stages 0-1: no gradient reduction at all (1-bit Adam's
 *                compression stage reduces its momentum instead).
 * Expert parallelism (dp_set_expert_group) adds a second group for the
 * expert tensors: their reductions, and at stages 1-2 their shards, run over
 * it, the dense tensors' over the first; a rank's shard is then several
 * pieces (dp_piece), not one range.
 * The model sees all this through the BlockAccess interface (model/gpt.h).
 * Shards follow the group's partition (comm_partition), so a checkpoint
 * written under one stage or group size can be read under another. */
#ifndef BS_PARALLEL_DATA_PARALLEL_H
#define BS_PARALLEL_DATA_PARALLEL_H

#include <stdbool.h>
#include <stddef.h>

#include "comm/codec.h"
#include "comm/comm.h"
#include "comm/compressed.h"
#include "model/gpt.h"
#include "optim/grad_norm.h"

typedef struct {
    int zero_stage;        /* 0..3 */
    size_t bucket_floats;  /* target bucket size */
    bool overlap;          /* launch buckets during backward (else after it) */
    Codec grad_codec;      /* CODEC_NONE: exact fp32 reductions */
    CompressedScheme grad_scheme;
    bool error_feedback;   /* lossy grad codecs keep residuals */
    bool quant_weights;    /* stage 3: int8 parameter gathers (qwZ) */
    size_t quant_block;    /* elements per int8 scale */
    bool hpz;              /* stage 3: node-local secondary parameter shard (hpZ) */
    bool fp8_gather;       /* stage 3, delayed FP8: layers gathered with E4M3 weights (parallel/fp8_gather.h) */
} DPOptions;

typedef struct DataParallel DataParallel;

/* Takes a model with only cfg set and allocates what this stage keeps. */
DataParallel *dp_create(Comm *comm, GPT *model, const DPOptions *opt);
void dp_free(DataParallel *dp);
/* Expert parallelism: the expert tensors' (TK_EXPERTS) gradients are summed
 * over edp (the expert-data-parallel group) instead of the data group; the
 * rest as before. Stages 1-2 shard each over its own group: a rank updates
 * its part of every dense range under the data group's partition and its
 * part of every expert range under edp's (each EP rank's experts are other
 * tensors, so their owners are the ranks holding the same experts). Its
 * update set is then several pieces (dp_piece). Stages 0-2 without
 * compression only (dies in one line). */
void dp_set_expert_group(DataParallel *dp, Comm *edp);

/* What this rank updates, as pieces of the flat layout in ascending order:
 * one (all of it at stage 0, the shard above) unless the experts are sharded
 * over their own group. A piece's values lie packed in the update arrays
 * (the stage 2-3 shard gradient, the caller's optimizer state) from
 * `packed`, in piece order; params and grads point at its parameters and
 * (after the step's last dp_end_micro) its summed gradients. */
typedef struct {
    size_t offset, count;
    size_t packed;
    float *params, *grads;
} DPPiece;
int dp_num_pieces(const DataParallel *dp);
DPPiece dp_piece(DataParallel *dp, int k);
size_t dp_update_floats(const DataParallel *dp); /* the pieces' elements together */
/* Whether the experts are sharded over their own group (expert parallelism
 * at stages 1-2): then every rank's pieces are its own, dense ones too. */
bool dp_experts_sharded_apart(const DataParallel *dp);
/* The same for a rank with one piece (dies in one line otherwise): its
 * range, parameters and summed gradients. */
void dp_update_range(const DataParallel *dp, size_t *offset, size_t *count);
float *dp_update_params(DataParallel *dp);
float *dp_update_grads(DataParallel *dp);
/* Stages 1-2 (checkpoints): out = [offset, offset + count) of the whole
 * layout's per-parameter state, whose pieces every rank holds packed in
 * `packed` (dp_update_floats). Collective over the data group (and the
 * expert group); needs a whole layout's floats of scratch while it runs. */
void dp_gather_state(DataParallel *dp, const float *packed, size_t offset, size_t count, float *out);
/* The shard under the group's partition (what a checkpoint file holds). */
void dp_shard_range(const DataParallel *dp, size_t *offset, size_t *count);
/* Parameters of [offset, offset+count) if this rank holds them, else NULL. */
float *dp_params_at(DataParallel *dp, size_t offset, size_t count);

/* The gradient buckets (a device engine reduces the same ones): how many,
 * bucket k's flat range and blocks [first, last] (backward finishes last
 * first), and the bucket of a block (-1: absent here). */
int dp_num_buckets(const DataParallel *dp);
void dp_bucket(const DataParallel *dp, int k, size_t *offset, size_t *count, int *first_block, int *last_block);
int dp_bucket_of_block(const DataParallel *dp, int block);
/* Whether buckets are reduced as backward finishes them (else after it). */
bool dp_overlaps(const DataParallel *dp);

void dp_begin_step(DataParallel *dp);
/* Block access for one micro-step (training) or for evaluation. */
const BlockAccess *dp_micro_access(DataParallel *dp, bool last_micro);
const BlockAccess *dp_eval_access(DataParallel *dp);
/* After each micro-step's backward. */
void dp_end_micro(DataParallel *dp);
/* A split backward's input half (B): parameters only (stage 3 gathers them
 * in backward order), no gradient touched; then dp_end_input. Its weight
 * half (W) is an ordinary micro-step: dp_micro_access, dp_end_micro. */
const BlockAccess *dp_input_access(DataParallel *dp);
void dp_end_input(DataParallel *dp);
/* Sum over all ranks of the squared summed gradient (for the global norm). */
double dp_grad_sum_squares(DataParallel *dp);
/* After the optimizer step: makes every rank's parameters current. */
void dp_after_update(DataParallel *dp);
/* All ranks: writes the full parameters into out (num_params floats). */
void dp_gather_params(DataParallel *dp, float *out);

/* Measure, every micro-step, this rank's squared norm of the gradient of
 * that micro-step alone (before any reduction): the small-batch norm of the
 * gradient noise scale. Stages 2-3 take it from the bucket buffers; stages
 * 0-1 keep a copy of the accumulated gradient (one more flat buffer). */
void dp_measure_micro_norms(DataParallel *dp);
/* Sum over this step's micro-steps of those squared norms (this rank). */
double dp_micro_sum_squares(const DataParallel *dp);
/* Stage 0, micro norms on: also measure each micro-step's gradient in Adam's
 * metric (p over the whole flat buffer, copied; NULL: off), summed as above. */
void dp_measure_micro_preconditioned(DataParallel *dp, const Preconditioner *p);
double dp_micro_precond_sum_squares(const DataParallel *dp);
/* Stage 0, micro norms on: add signs[k] x micro-step k's own gradient (k = 0,
 * 1, ... in this step's order) into probe (num_params floats, which the
 * caller zeroes); NULL: off. */
void dp_set_probe(DataParallel *dp, float *probe, const float *signs);

/* Error feedback state of this rank: the worker residual (num_params
 * floats, NULL if none) and the server residuals (NULL if none). */
void dp_residuals(DataParallel *dp, float **worker, size_t *worker_count, float **server, size_t *server_count);
/* Forget what the residuals hold (after a skipped step: they may hold NaN). */
void dp_reset_residuals(DataParallel *dp);
/* Stages 0-1: reduce no gradients from now on (true) or again (false). */
void dp_set_local_gradients(DataParallel *dp, bool local);
/* Traffic of this step inside the node group (hpZ gathers), which the
 * data-parallel group's statistics do not include. */
CommStats dp_node_stats(DataParallel *dp);

/* Guard: the lowest block whose local gradient (this rank's, before any
 * reduction) was not finite during this step, or -1. */
int dp_first_nonfinite_block(const DataParallel *dp);
/* Tests: poison this rank's local gradient of `block` with a NaN on the
 * next micro-step that reduces it. */
void dp_inject_nan(DataParallel *dp, int block);

typedef struct {
    size_t param_bytes, grad_bytes, buffer_bytes; /* allocated by this rank */
} DPMemory;
DPMemory dp_memory(const DataParallel *dp);

#endif

/* optimizer.h: the one front door the trainer calls for a parameter update,
 * whatever the optimizer (AdamW, SGD, LAMB, LARS), on the contiguous range of
 * the flat parameter buffer that this rank owns (the whole buffer with one
 * process or without ZeRO; a shard that may cut tensors anywhere under ZeRO;
 * several disjoint ranges under expert parallelism with ZeRO, where dense and
 * expert tensors are sharded over different groups: optimizer_step_pieces).
 *
 * The optimizer sees the model as a list of tensors (OptimTensor): where each
 * one's trained elements lie in the flat buffer and whether weight decay
 * applies. Elements in no tensor (the padded rows of wte) are never touched.
 * LAMB and LARS need per-tensor norms: each rank adds the squares of its
 * pieces, the caller's sum_across_ranks adds these partial sums over the
 * ranks, and then every rank applies the same trust ratio to its piece.
 *
 * Deliberately not here: any knowledge of the GPT layout (the trainer builds
 * the tensor list from gpt_param_segments), MPI (the trainer passes the sum
 * as a callback), gradient clipping (the trainer passes grad_scale) and the
 * learning-rate schedule (the trainer passes lr). State arrays belong to the
 * caller, so it can shard and checkpoint them. */
#ifndef BS_OPTIM_OPTIMIZER_H
#define BS_OPTIM_OPTIMIZER_H

#include <stdbool.h>
#include <stddef.h>

/* OPTIM_ONEBIT_ADAM: 1-bit Adam (optim/onebit_adam.h). Through this front door
 * it is its warm-up, plain AdamW; the trainer runs its compression stage. */
typedef enum { OPTIM_ADAMW, OPTIM_SGD, OPTIM_LAMB, OPTIM_LARS, OPTIM_ONEBIT_ADAM } OptimizerKind;
#define OPTIM_KIND_COUNT 5

/* Most float state arrays any optimizer keeps per parameter. */
#define OPTIMIZER_MAX_STATE 2

typedef struct {
    OptimizerKind kind;
    float beta1, beta2;       /* adamw, lamb */
    float eps;                /* adamw, lamb; lars (in the trust ratio's denominator) */
    float weight_decay;       /* for tensors that decay: decoupled (adamw), coupled (sgd), in u (lamb), in the step
                                 (lars) */
    float momentum;           /* sgd (0: plain SGD), lars */
    float dampening;          /* sgd */
    bool nesterov;            /* sgd */
    float lars_eta;           /* lars trust coefficient, about 1e-3 */
    bool lamb_clamp;          /* lamb: clamp the trust ratio to [0.01, 10] as DeepSpeed does (default off) */
} OptimizerConfig;

/* One tensor as the optimizer sees it: its trained elements
 * [offset, offset + count) of the flat buffer. Tensors are listed in buffer
 * order and do not overlap; gaps between them are left alone. */
typedef struct {
    size_t offset, count;
    bool decays;
} OptimTensor;

/* The range [offset, offset + count) of the flat buffer this rank updates.
 * params[i], grads[i] and state[k][i] all hold flat element offset + i, so
 * they may point into full buffers (params + offset) or into shard-sized ones. */
typedef struct {
    size_t offset, count;
    float *params;
    const float *grads;
    float *state[OPTIMIZER_MAX_STATE]; /* optimizer_state_arrays(kind) arrays, zero before step 1 */
} OptimizerShard;

typedef struct {
    float lr;         /* this step's learning rate (schedule and batch scaling applied) */
    float grad_scale; /* gradient multiplier, e.g. the clipping coefficient */
    long step;        /* 1-based count of updates, for bias correction and SGD's first step */
} OptimizerStep;

/* Adds values[0..n) elementwise over all data-parallel ranks, in place
 * (MPI_Allreduce with MPI_SUM on doubles). Every rank calls it with the same n. */
typedef void (*SumAcrossRanks)(void *ctx, double *values, int n);

typedef struct {
    OptimizerConfig cfg;
    OptimTensor *tensors;
    int num_tensors;
    double *sums; /* optimizer_num_sums() doubles: the per-tensor norms of a step */
} Optimizer;

/* "adamw", "sgd", "lamb", "lars" or "onebit-adam"; false with a one-line reason naming
 * --optimizer otherwise. */
bool optimizer_kind_parse(const char *name, OptimizerKind *kind, char *why, size_t why_size);
const char *optimizer_kind_name(OptimizerKind kind);
/* Floats of state per parameter: adamw 2 (m, v), sgd 1 (momentum buffer),
 * lamb 2 (m, v), lars 1 (velocity), onebit-adam 2 (m, v). */
int optimizer_state_arrays(OptimizerKind kind);

void optimizer_init(Optimizer *opt, const OptimizerConfig *cfg, const OptimTensor *tensors, int num_tensors);
void optimizer_free(Optimizer *opt);
/* Doubles summed across ranks per step: 2 per tensor for lamb and lars
 * (tensor t's sum of squared weights at [2t], its other norm at [2t+1]), 0 otherwise. */
int optimizer_num_sums(const Optimizer *opt);

/* One update of the shard: the norms phase, then sum_across_ranks(ctx, sums,
 * optimizer_num_sums()) once if that count is not 0 and the callback is not
 * NULL (NULL: one process owns every element), then the update phase. */
void optimizer_step(Optimizer *opt, const OptimizerShard *shard, const OptimizerStep *step,
                    SumAcrossRanks sum_across_ranks, void *ctx);
/* The same for a rank that owns several disjoint ranges (ascending): the
 * norms phase over all of them, one sum across ranks, then their updates. */
void optimizer_step_pieces(Optimizer *opt, const OptimizerShard *pieces, int num_pieces, const OptimizerStep *step,
                           SumAcrossRanks sum_across_ranks, void *ctx);

/* The two phases of optimizer_step, for callers that simulate several ranks
 * in one process. The norms phase ADDS this shard's partial sums into
 * sums[0..optimizer_num_sums()) (LAMB also updates its moments here); the
 * update phase reads the sums over all ranks. Call each exactly once per step. */
void optimizer_norms_phase(const Optimizer *opt, const OptimizerShard *shard, const OptimizerStep *step, double *sums);
void optimizer_update_phase(const Optimizer *opt, const OptimizerShard *shard, const OptimizerStep *step,
                            const double *sums);

#endif

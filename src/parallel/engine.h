/* engine.h: the parallel engine: one model trained over the process grid
 * (tensor x context x pipeline x data parallelism, ZeRO 0-3, virtual
 * pipeline stages) behind five calls:
 *
 *   engine_create            grid, this rank's model chunks (each a block of
 *                            the flat layout with its own data-parallel
 *                            shard), initialisation, optimizer state,
 *                            tied weights, bf16 copies
 *   engine_forward_backward  one step's micro-batches through the pipeline
 *                            schedule (an action list per rank), gradients
 *                            reduced as backward finishes each bucket
 *   engine_grad_norm         the global gradient norm, each logical
 *                            parameter counted once
 *   engine_update            the optimizer on this rank's ranges, then every
 *                            rank's parameters made current (ZeRO gathers,
 *                            tied output weights, bf16 copies)
 *   engine_gather_model      the whole model on rank 0 (sampling, export)
 *
 * A rank owns `chunks` groups of layers: with v virtual stages, pipeline
 * rank r holds virtual stages r, r + p, ..., r + (v-1)p (Megatron's
 * interleaving); chunk c is virtual stage c p + r, a model shard of a
 * p v -stage split. Everything above the engine (checkpoints, guards,
 * reports) sees chunks only as (model config, flat range, state) triples.
 *
 * Context parallelism (cp > 1) splits each sequence over the cp ranks of a
 * replica: the engine loads whole sequences through the caller's PipeLoad
 * and keeps this rank's chunks of them (context_attention.h); the loss sum it
 * returns is over this rank's tokens. */
#ifndef BS_PARALLEL_ENGINE_H
#define BS_PARALLEL_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "comm/comm.h"
#include "comm/device_comm.h"
#include "device/device.h"
#include "model/gpt.h"
#include "optim/optimizer.h"
#include "parallel/data_parallel.h"
#include "parallel/grid.h"
#include "parallel/pipeline.h"

typedef struct {
    int tp, pp, dp;            /* dp 0: world / (tp cp pp) */
    int cp;                    /* context parallel ranks per replica (0 or 1: none) */
    int ep;                    /* MoE expert parallel ranks inside dp (0 or 1: none; parallel/grid.h) */
    CpAlgo cp_algo;
    CpSplit cp_split;
    int virtual_stages;        /* v >= 1: layer groups per pipeline rank */
    const int *stage_layers;   /* layers per pipeline stage (pp entries), NULL: even */
    PipeSchedule schedule;
    int micro_batch, seq_len;
    DPOptions data_parallel;   /* ZeRO stage, buckets, compression */
    OptimizerConfig optimizer;
    uint64_t seed;             /* initialisation */
    const char *init_from;     /* a model file to start from (llm.c or safetensors), or NULL */
    double upcycle_noise;      /* a dense init_from into an MoE model: each expert's perturbation (moe_upcycle.h) */
    bool bf16;
    MatmulBF16Path bf16_path;
    bool measure_micro_norms;  /* noise scale: every micro-step's local gradient norm */
    bool doc_mask;             /* attention inside documents, which start at doc_separator (model/gpt.h) */
    int32_t doc_separator;
    const Fp8Options *fp8;     /* --precision fp8: the transformer layers' linear layers in FP8 (NULL: off) */
    double outlier_scale;      /* tests: LayerNorm 1's gain of channel 0 times this at initialisation (0: off) */
    /* LoRA (the whole model's lora_rank > 0): chunks train only the adapters,
     * the base (from init_from, or seeded) is frozen on every rank */
    float lora_alpha;          /* the branch's scale is alpha / rank */
    float lora_dropout;        /* on the branches' input in training, masks keyed by the data and the step (lora.h) */
    const char *lora_init;     /* the adapters from a peft adapter file (NULL: A Kaiming-uniform, B zero) */
    bool on_device;            /* the step on a device (parallel/engine_device.h), not the CPU */
    DeviceKind device;         /* which, when on_device */
    size_t sim_memory;         /* --device sim: the simulated device's bytes (0: no limit) */
    int fused_attention;       /* on a device: 1 the fused attention kernels, 0 the unfused, -1 the device model's default */
    bool bf16_activations;     /* on a device in bf16: the layers' activations kept in bf16 (model/acts_bf16_device.h) */
    bool cuda_graphs;          /* on a device: micro-batches and updates replayed from graphs (model/step_graphs.h) */
    GpuCommKind gpu_comm;      /* on a device over several ranks: how device buffers move between them */
    bool skip_pipe_wait;       /* tests: on a device, pipeline receives not waited for (pipeline_device.h) */
} EngineConfig;

/* One model chunk of this rank: a shard of the flat layout with its own
 * data-parallel shard, optimizer and state over the range it updates. */
typedef struct {
    GPT model;
    DataParallel *dp;
    int virtual_stage;
    size_t update_offset, update_count; /* the range it updates; with several pieces (expert parallelism at
                                           ZeRO 1-2, dp_piece) the first one's offset and all their elements */
    Optimizer opt;
    float *state[OPTIMIZER_MAX_STATE];
    OptimizerShard *pieces; /* what the optimizer updates: each piece's parameters, gradients and state */
    int num_pieces;
    bool *tensor_primary; /* per optimizer tensor: counted in norms on this rank */
} EngineChunk;

typedef struct Engine Engine;

/* Dies with one line naming the flag if the layout is impossible. */
Engine *engine_create(Comm *world, const GPTConfig *whole, const EngineConfig *cfg);
void engine_free(Engine *e);

typedef struct {
    double loss_sum;           /* this rank's share of the step's token losses (0 off the loss ranks) */
    double busy, idle;         /* seconds computing / waiting for a pipeline neighbour */
    int max_live;              /* activation sets alive at once */
    double micro_sum_squares;  /* noise scale: sum of the micro-steps' squared local gradient norms */
    double bubble_theory;      /* the schedule's closed-form idle share, from this rank's seconds per action */
    double bubble_simulated;   /* the worst stage's idle share with each stage's measured seconds per action */
} EngineStepStats;

/* One step: m micro-batches of this replica through the pipeline schedule;
 * dloss is d(mean loss)/d(token loss). Gradients end reduced (summed over
 * data-parallel replicas) in each chunk's update range. Collective. */
EngineStepStats engine_forward_backward(Engine *e, int m, float dloss, PipeLoad load, void *ctx);
/* The squared global gradient norm (every rank gets the same value). Collective. */
double engine_grad_sum_squares(Engine *e);
/* The optimizer step on every chunk's range with learning rate lr, the
 * gradients scaled by grad_scale (clipping), then parameters made current
 * everywhere. Collective. */
void engine_update(Engine *e, double lr, float grad_scale);
/* After an update made elsewhere (1-bit Adam): parameters current everywhere. */
void engine_after_update(Engine *e);
/* The whole model's parameters on world rank 0 (out: gpt_num_params of the
 * logical config, rank 0 only; with LoRA the layout holding the base and
 * the adapters, GPT_PART_ALL). Collective. */
void engine_gather_model(Engine *e, float *out);
/* Forward only of m micro-batches of which the first `counted` count: this
 * rank's loss sum (0 off the loss ranks). Collective. */
double engine_evaluate(Engine *e, int m, int counted, PipeLoad load, void *ctx);

/* What the layers above read. */
const Grid *engine_grid(const Engine *e);
int engine_num_chunks(const Engine *e);
EngineChunk *engine_chunk(Engine *e, int c);
/* Chunk c's model configuration (its shard), without refreshing its host state. */
const GPTConfig *engine_chunk_config(const Engine *e, int c);
/* The logical layers [first, first + count) of virtual stage vs (p v of them). */
void engine_stage_layers(const Engine *e, int vs, int *first, int *count);
int engine_virtual_stages(const Engine *e); /* p v */
long engine_optimizer_step(const Engine *e);
void engine_set_optimizer_step(Engine *e, long step);
uint64_t engine_base_hash(const Engine *e); /* LoRA: the frozen base's hash (model/lora.h; 0 without LoRA) */
/* Chunk c's gradient over the range it updates, as reduced by the last engine_forward_backward. */
float *engine_reduced_gradients(Engine *e, int c);
/* This rank's optimizer state: `arrays` floats per element each chunk updates. */
size_t engine_optimizer_state_bytes(const Engine *e, int arrays);
/* Guard: the first non-finite forward layer and gradient block (global
 * numbers, -1: none) this rank saw in the last step. */
int engine_first_nonfinite_layer(const Engine *e);
int engine_first_nonfinite_block(const Engine *e);
/* Tests: a NaN into the local gradient of a global block on this rank's next step. */
void engine_inject_nan(Engine *e, int block);
/* --device cuda|sim (false on the CPU): each tensor's (gpt_param_segments'
 * order, chunk after chunk) gradient and parameter sums of squares, computed on the device; the
 * bytes copied from the device to the host since it opened. */
bool engine_device_tensor_norms(Engine *e, double *grads, double *params);
bool engine_device_traffic(const Engine *e, uint64_t *bytes_to_host);
/* --device cuda|sim (false on the CPU): the most device memory this rank held at once, in bytes (device_memory_peak). */
bool engine_device_memory_peak(const Engine *e, size_t *bytes);
/* How device buffers move between ranks ("host" or "nccl", every group alike), NULL on the CPU or one rank. */
const char *engine_device_comm(const Engine *e);
DPMemory engine_memory(const Engine *e);
/* This rank's activation memory: the pipeline's sets and the context-attention buffers. */
size_t engine_activation_bytes(const Engine *e);
CommStats engine_comm_stats(const Engine *e); /* this step's data-parallel traffic */
/* fp8 mode: the last training step's FP8 statistics per tensor kind
 * (model/fp8_scaling.h), summed over every rank (a collective); zeros
 * without fp8 */
void engine_fp8_stats(Engine *e, Fp8Stats out[FP8_KINDS]);
CommStats engine_context_stats(const Engine *e); /* this step's context-parallel traffic (zero without cp) */
CommStats engine_expert_stats(const Engine *e);  /* this step's expert-parallel all-to-alls (zero without ep) */
void engine_set_trace(Engine *e, Trace *trace);
/* 1-bit Adam's compression stage: no gradient reduction (true) or again (false). */
void engine_set_local_gradients(Engine *e, bool local);
/* Tied output weights: after parameters were replaced (resume). Collective. */
void engine_share_output_weights(Engine *e);

/* A chunk's data-parallel buffers and shards (engine_chunk.c; data_parallel.h says what each is). */
float *engine_chunk_update_params(EngineChunk *ch); /* the parameters of the range it updates */
float *engine_chunk_update_grads(EngineChunk *ch);  /* their gradient, as reduced */
float *engine_chunk_params_at(EngineChunk *ch, size_t offset, size_t count); /* NULL: not held (ZeRO-3) */
void engine_chunk_shard_range(const EngineChunk *ch, size_t *offset, size_t *count);
int engine_chunk_num_pieces(const EngineChunk *ch);
DPPiece engine_chunk_piece(const EngineChunk *ch, int k);
bool engine_chunk_experts_sharded_apart(const EngineChunk *ch);
void engine_chunk_gather_state(EngineChunk *ch, const float *packed, size_t offset, size_t count, float *out);
/* Whether this rank's copy of a tensor of that kind counts in norms (model_parallel.h). */
bool engine_chunk_counts_in_norm(const EngineChunk *ch, TensorKind kind);
void engine_chunk_residuals(EngineChunk *ch, float **worker, size_t *worker_count, float **server,
                            size_t *server_count);
void engine_chunk_reset_residuals(EngineChunk *ch);
void engine_chunk_measure_micro_preconditioned(EngineChunk *ch, const Preconditioner *p);
double engine_chunk_micro_precond_sum_squares(const EngineChunk *ch);
void engine_chunk_set_probe(EngineChunk *ch, float *probe, const float *signs);

#endif

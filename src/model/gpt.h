/* gpt.h: the GPT-2 model: configuration, parameter layout, forward and
 * backward over the kernels.
 *
 * Parameters live in one flat float buffer laid out block by block:
 *   [embeddings: wte (Vp,C), wpe (maxT,C)] [layer 0] ... [layer L-1] [lnf w, b]
 * and each layer block holds ln1w ln1b qkvw qkvb attprojw attprojb ln2w ln2b
 * fcw fcb fcprojw fcprojb. A block is one contiguous range, so a gradient
 * bucket or a ZeRO shard is a range of this buffer. Gradients use the same
 * layout. Linear weights are (out, in) as in PyTorch and llm.c. The output
 * layer is tied to wte. Rows Vp > V of wte are padding: zero, never read by
 * the loss, never updated.
 *
 * A config can also describe one rank's part of the model (its "shard"):
 * tensor parallelism (Megatron) splits attention heads, MLP columns and the
 * vocabulary tp_size ways (qkv and fc column-parallel, attproj and fcproj
 * row-parallel, LayerNorms and the row-parallel biases replicated); a
 * pipeline stage holds a contiguous range of layers, the embeddings on the
 * first stage and the final LayerNorm on the last. With more than one stage
 * the last one reads the tied output weights from head_wte, a copy the caller
 * keeps current, and accumulates their gradient into head_dwte, which the
 * caller adds to the first stage's (extra_wte_grad). The local flat buffer then holds only the
 * shard's tensors with their local shapes, block by block in the same order,
 * and gpt_shard_runs maps it onto the whole model's ("logical") layout. The
 * shard's forward and backward do the tensor-parallel all-reduces through
 * the model's tp group; the pipeline's sends and receives are the caller's. */
#ifndef BS_MODEL_GPT_H
#define BS_MODEL_GPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"
#include "kernels/matmul_bf16.h"
#include "model/context_attention.h"
#include "model/fp8_scaling.h"
#include "model/frozen_embedding.h"
#include "model/frozen_linear.h"
#include "model/lora.h"
#include "model/moe.h"

/* Which tensors a flat buffer holds: all of them, or (LoRA: the base frozen,
 * only the adapters trained) the base model's or the adapters' alone. A part
 * keeps the block structure; the other part's tensors have no elements. */
typedef enum { GPT_PART_ALL, GPT_PART_BASE, GPT_PART_ADAPTERS, GPT_PART_BASE_FP32 } GPTPart;
/* GPT_PART_BASE_FP32: the base without the four linear weight matrices
 * of each layer and wte, which a low-precision frozen base keeps apart
 * (model/frozen_linear.h, model/frozen_embedding.h). */

/* Activation recomputation, as Megatron-LM's --recompute-granularity
 * defines it (Korthikanti et al. 2022): NONE keeps every activation for
 * backward; SELECTIVE drops each layer's attention probabilities (the
 * T x T softmax, the "attention core") and recomputes them in backward from
 * the q, k, v it keeps; FULL keeps only each layer's input and reruns the
 * whole layer's forward in backward. Either runs the same arithmetic, so
 * gradients are bitwise those of NONE. */
typedef enum { GPT_RECOMPUTE_NONE, GPT_RECOMPUTE_SELECTIVE, GPT_RECOMPUTE_FULL } GPTRecompute;

typedef struct {
    int max_seq_len; /* T max (rows of wpe) */
    int vocab_size;  /* V */
    int padded_vocab_size; /* Vp: V rounded up to a multiple of 128 */
    int num_layers;  /* L */
    int num_heads;   /* H */
    int channels;    /* C */
    /* this rank's shard; all zero means the whole model */
    int tp_size, tp_rank;  /* tensor parallel */
    int pp_size, pp_rank;  /* pipeline stage */
    int first_layer, stage_layers; /* the stage's layers: [first_layer, first_layer + stage_layers) */
    int cp_size;           /* context parallel: each sequence split this many ways (0 or 1: not) */
    int ep_size, ep_rank;  /* expert parallel (MoE): this shard holds experts [ep_rank E/ep, +E/ep) (0: all) */
    /* LoRA adapters (model/lora.h): rank r (0: none) on the linear layers in
     * lora_targets (a mask of 1 << LORA_TARGET_*) */
    int lora_rank, lora_targets;
    BaseWeights base_weights; /* how the frozen base's linear weights are stored (fp32, bf16, int8) */
    GPTPart part; /* which tensors the flat buffer holds */
    /* Mixture of Experts (model/moe.h): experts > 1 makes the MLP of every
     * moe_every-th layer (layer l when (l + 1) % moe_every == 0; 0 or 1:
     * every layer) an MoE layer (router + experts instead of fc/fcproj); the
     * other layers keep the dense MLP. experts 0 or 1: dense */
    int experts, moe_top_k, moe_ffn; /* moe_ffn: each expert's hidden width (0: 4C) */
    int moe_every;
    int moe_router;                  /* MoeRouter */
    int moe_gates;                   /* MoeGates: how the chosen scores become combine weights */
    double moe_routed_scale;         /* every routed gate's factor (DeepSeek-V3's routed_scaling_factor; 0: 1) */
    double capacity_factor;          /* 0: dropless */
    double moe_aux_coef, moe_z_coef, moe_bias_update;
    int recompute; /* GPTRecompute: which activations training sets keep (gpt_acts_create) */
} GPTConfig;

/* The shard's coordinates with defaults filled in. */
int gpt_tp_size(const GPTConfig *cfg);
int gpt_tp_rank(const GPTConfig *cfg);
int gpt_first_layer(const GPTConfig *cfg);
int gpt_stage_layers(const GPTConfig *cfg);
int gpt_cp_size(const GPTConfig *cfg);
int gpt_ep_size(const GPTConfig *cfg); /* 1 unless expert-parallel */
bool gpt_has_encoder(const GPTConfig *cfg);    /* first pipeline stage */
bool gpt_has_head(const GPTConfig *cfg);       /* last pipeline stage: final LayerNorm, logits, loss */
bool gpt_has_embeddings(const GPTConfig *cfg); /* in the flat buffer: the first stage */
/* The same model, whole (no shard). */
GPTConfig gpt_logical_config(const GPTConfig *cfg);
/* Sets the shard; false with a one-line reason if it is impossible (heads,
 * channels or vocabulary not divisible by tp_size, a stage without layers). */
bool gpt_set_shard(GPTConfig *cfg, int tp_size, int tp_rank, int pp_size, int pp_rank, int first_layer,
                   int stage_layers, char *why, size_t why_size);

/* Tensor kinds, in llm.c's model-file order, then the LoRA adapters (per
 * layer, after the layer's base tensors in its block): A (r, in) and B
 * (out, r) of each target linear layer. */
typedef enum {
    TK_WTE, TK_WPE,
    TK_LN1W, TK_LN1B, TK_QKVW, TK_QKVB, TK_ATTPROJW, TK_ATTPROJB,
    TK_LN2W, TK_LN2B, TK_FCW, TK_FCB, TK_FCPROJW, TK_FCPROJB,
    TK_LNFW, TK_LNFB,
    TK_QKV_LORA_A, TK_QKV_LORA_B, TK_ATTPROJ_LORA_A, TK_ATTPROJ_LORA_B,
    TK_FC_LORA_A, TK_FC_LORA_B, TK_FCPROJ_LORA_A, TK_FCPROJ_LORA_B,
    TK_ROUTER, TK_EXPERTS,
    TK_COUNT
} TensorKind;

#define TK_FIRST_LAYER_KIND TK_LN1W
#define TK_LAST_LAYER_KIND TK_FCPROJB /* the base model's per-layer kinds */
#define TK_BASE_COUNT TK_QKV_LORA_A   /* kinds [0, TK_BASE_COUNT): the base model (model files) */
#define TK_FIRST_ADAPTER_KIND TK_QKV_LORA_A
#define TK_LAST_ADAPTER_KIND TK_FCPROJ_LORA_B
/* MoE layers (gpt_layer_is_moe): the router (E, C) and the E experts, one
 * block of moe_expert_numel floats each (fc (F,C), fcb (F), fcproj (C,F),
 * fcprojb (C)), in the layer's block after ln2b where the dense MLP's
 * tensors (then of 0 elements) would be. In a dense layer they have 0. So
 * with --moe-every N > 1 layer blocks have two sizes: offsets are prefix sums
 * over the layers (gpt_layer_tensor_numel, gpt_tensor_offset). */
#define TK_FIRST_MOE_KIND TK_ROUTER
#define TK_LAST_MOE_KIND TK_EXPERTS

int gpt_padded_vocab(int vocab_size);
/* Fills padded_vocab_size and returns true if the config is valid; else
 * writes a one-line reason naming the flag to change and returns false. */
bool gpt_config_check(GPTConfig *cfg, char *why, size_t why_size);

const char *gpt_tensor_name(TensorKind k);
bool gpt_tensor_is_per_layer(TensorKind k); /* base layer kinds and adapters */
bool gpt_tensor_is_adapter(TensorKind k);
bool gpt_is_moe(const GPTConfig *cfg); /* experts > 1 */
/* Whether layer (global index) has the MoE MLP: gpt_is_moe and (layer + 1) % moe_every == 0. */
bool gpt_layer_is_moe(const GPTConfig *cfg, int layer);
/* MoE layers among layers [0, layer) (gpt_moe_layers_before(cfg, num_layers): all of them). */
int gpt_moe_layers_before(const GPTConfig *cfg, int layer);
/* The MoE layer's configuration of the model (valid when gpt_is_moe). */
MoeConfig gpt_moe_config(const GPTConfig *cfg);
/* The same shape with only one part's tensors in the flat buffer. */
GPTConfig gpt_part_config(const GPTConfig *cfg, GPTPart part);
/* Copies every tensor the two configs (the same shard, different parts) both hold from src to dst. */
void gpt_copy_tensors(const GPTConfig *from, const float *src, const GPTConfig *to, float *dst);
/* The whole model's tensors of `part`, from a buffer in that part's layout
 * (src) to their places in the layout holding every tensor (dst). */
void gpt_copy_part(const GPTConfig *all, GPTPart part, const float *src, float *dst);
/* Weight decay applies to matrices and embeddings, not biases or LayerNorm. */
bool gpt_tensor_decays(TensorKind k);
/* One layer's elements of a per-layer kind in a layer that holds it (0 if no
 * layer of the model does), the tensor's for the others. */
size_t gpt_tensor_numel(const GPTConfig *cfg, TensorKind k);
/* Layer `layer`'s elements of k: 0 for the MLP kinds the layer lacks (the
 * dense ones in an MoE layer, the MoE ones in a dense layer). */
size_t gpt_layer_tensor_numel(const GPTConfig *cfg, TensorKind k, int layer);
size_t gpt_tensor_offset(const GPTConfig *cfg, TensorKind k, int layer); /* layer ignored if not per-layer */
size_t gpt_num_params(const GPTConfig *cfg); /* floats in the flat buffer, padding included */
size_t gpt_num_trained_params(const GPTConfig *cfg); /* without the padded wte rows */

/* Blocks: 0 = embeddings, 1..L = layers, L+1 = final LayerNorm (global
 * numbers; a shard holds some of them, the others have count 0). */
int gpt_num_blocks(const GPTConfig *cfg);
bool gpt_block_present(const GPTConfig *cfg, int block);
void gpt_block_range(const GPTConfig *cfg, int block, size_t *offset, size_t *count);

/* A run of the local flat buffer and where it lies in the logical layout.
 * `primary` marks the one copy of each logical element: tensors replicated
 * over tensor-parallel ranks count on rank 0 only, and over expert-parallel
 * ranks (all but the experts) on ep rank 0. */
typedef struct {
    size_t local, logical, count;
    bool primary;
} ShardRun;
int gpt_max_shard_runs(const GPTConfig *cfg);
/* Runs in increasing local (and logical) order, adjacent runs merged. */
int gpt_shard_runs(const GPTConfig *cfg, ShardRun *out, int capacity);
/* The same runs in a new array (the caller frees it); *n gets their number. */
ShardRun *gpt_shard_runs_alloc(const GPTConfig *cfg, int *n);
/* Whether this rank's copy of a tensor counts in global sums (norms). */
bool gpt_tensor_primary(const GPTConfig *cfg, TensorKind k);
/* Elements of this shard's tensor that are trained: all of it, except wte,
 * whose rows beyond the vocabulary are padding. */
size_t gpt_tensor_trained(const GPTConfig *cfg, TensorKind k);

/* A contiguous run of one tensor, for optimizers that treat tensors apart. */
typedef struct {
    size_t offset, count;
    TensorKind kind;
    int layer;
} ParamSegment;
/* Every tensor in buffer order; returns the count (at most gpt_max_segments). */
int gpt_max_segments(const GPTConfig *cfg);
int gpt_param_segments(const GPTConfig *cfg, ParamSegment *out, int capacity);

/* Pointers to one layer's tensors (layer: its global index), from the start
 * of its block (params or grads). */
typedef struct {
    float *ln1w, *ln1b, *qkvw, *qkvb, *attprojw, *attprojb;
    float *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb;
    float *lora_a[4], *lora_b[4]; /* per target (qkv, attproj, fc, fcproj); NULL where absent */
    float *router, *experts;      /* MoE layers; NULL in a dense layer */
} LayerTensors;
/* Tensors of the part cfg holds are set, the others NULL. */
LayerTensors gpt_layer_tensors(const GPTConfig *cfg, float *block, int layer);

/* Expert parallelism's MoE layer, seen from the model (parallel/ fills it
 * in: parallel/moe_hooks.h): the experts of a layer live on other ranks, so
 * the model hands the whole micro-batch's rows (N = b t, each sequence its
 * own capacity group) to `forward` and `backward` instead of running
 * moe_forward per sequence. `create` makes one layer's state for one
 * activation set (up to max_rows rows), `destroy` frees it. */
typedef struct {
    void *(*create)(void *ctx, size_t max_rows, size_t seq_len);
    void (*destroy)(void *state);
    void (*forward)(void *state, float *out, const float *x, size_t N, const float *router_w, const float *experts,
                    const float *bias, MoeStats *stats);
    void (*backward)(void *state, float *dx, float *drouter_w, float *dexperts, const float *dout, const float *x,
                     const float *router_w, const float *experts, const MoeStats *global, double aux_coef,
                     double z_coef);
    void *ctx;
} MoeExpertHooks;

typedef struct {
    GPTConfig cfg;
    size_t num_params;
    float *params; /* the full flat buffer, or NULL when another owner provides blocks (ZeRO-3) */
    float *grads;  /* likewise (NULL under ZeRO-2/3) */
    Comm *tp;      /* the tensor-parallel group (NULL: none) */
    /* context parallelism (cfg.cp_size > 1): attention over the group's
     * split sequence, and the local tokens' true positions; forward and
     * backward take t = the local rows (seq_len / cp_size) */
    ContextAttention *context;
    /* packed documents (SFT data): attention stays inside the document a
     * token belongs to, documents starting at this token id (-1: off) */
    int32_t doc_separator;
    /* last pipeline stage without the embeddings: the tied output weights */
    float *head_wte, *head_dwte; /* (Vp/tp, C) */
    /* first stage: a gradient for wte to add in the next backward (from the last stage) */
    const float *extra_wte_grad;
    /* guard: the first layer (global index) whose output was not finite in a
     * forward since the caller last set it to -1 */
    int first_nonfinite_layer;
    /* bf16 compute: every matmul takes bf16 weights and bf16 inputs and
     * accumulates in fp32; LayerNorm, softmax, GELU, the loss, the master
     * weights, gradients and optimizer state stay fp32 */
    bool bf16;
    float *bf16_params; /* the parameters with their matrices rounded to bf16 (gpt_refresh_bf16) */
    MatmulBF16 *bf16_matmul; /* bf16 mode: the products (oneDNN primitives, or fp32 sgemm on the bf16 values) */
    /* fp8 mode (not NULL): the four linear layers of every transformer layer
     * run in FP8 through model/fp8_scaling.h with these scales (site 4 x local
     * layer + qkv, attproj, fc, fcproj); the rest, the head included, in bf16
     * (with bf16 on) or fp32 */
    Fp8State *fp8;
    /* LoRA (cfg.part == GPT_PART_ADAPTERS): params and grads hold the
     * adapters; the frozen base model (its BASE part, no gradient) lives here */
    float *frozen;
    FrozenLinear *frozen_linear; /* --base-weights bf16|int8|nf4: the base's linear weights, apart from frozen */
    FrozenEmbedding *frozen_wte; /* and then wte in bf16, apart from frozen */
    float *linear_scratch;       /* one block of a linear weight's or of wte's rows in fp32 (frozen_matrix.h) */
    float lora_scale; /* alpha / r */
    float lora_dropout;  /* dropout on the branches' input in training (lora.h: a mask from the data) */
    uint64_t lora_seed;  /* the mask's seed */
    long lora_step;      /* the mask's step: the optimizer steps taken (the caller sets it before each step) */
    /* MoE (gpt_is_moe). The aux and z losses are over the tokens of the
     * micro-step's DATA-PARALLEL batch: every MoE layer's statistics
     * (MoeStats) are summed over moe_dp (one all-reduce per layer per
     * training micro-batch; NULL: this process alone) before its backward,
     * and capacity is counted per sequence (each of the b sequences is its
     * own capacity group: ceil(t K / E x factor) rows per expert; under
     * expert parallelism too, through moe_ep), so one
     * process at micro-batch m x dp is the oracle of dp ranks at micro-batch
     * m. Each micro-step's aux + z losses enter the objective times
     * moe_loss_weight (1 / the step's micro-steps: their mean), beside the
     * language-model loss, which forward alone returns. */
    Comm *moe_dp;
    const MoeExpertHooks *moe_ep; /* expert parallelism (cfg.ep_size > 1): the MoE layers through these; NULL: here */
    double moe_loss_weight;
    /* per stage layer, dense ones included (whose rows stay zero): */
    float *moe_bias;     /* (stage layers, E): loss-free balancing's selection bias, state (not trained) */
    MoeStats *moe_step;  /* (stage layers): the training micro-steps' summed statistics since the caller zeroed them */
    double moe_aux, moe_z; /* the aux and z losses those micro-steps added, weighted, summed over layers */
} GPT;

/* Allocates both flat buffers (zeroed), and the frozen base for an adapters-only config. */
void gpt_create(GPT *model, const GPTConfig *cfg);
enum { GPT_ALLOC_PARAMS = 1, GPT_ALLOC_GRADS = 2 };
/* Allocates only the buffers named in alloc (flags above). */
void gpt_create_with(GPT *model, const GPTConfig *cfg, int alloc);
void gpt_free(GPT *model);
/* LoRA: the frozen base in the BASE part's layout (out: gpt_num_params of
 * it), and back from such a buffer into the model's storage (quantizing the
 * linear weights with --base-weights bf16|int8). */
void gpt_frozen_base(const GPT *model, float *out);
void gpt_set_frozen_base(GPT *model, const float *base);
size_t gpt_frozen_bytes(const GPT *model); /* what the frozen base occupies (0 without LoRA) */
/* The layout of model->frozen: the base part, without the linear weights when frozen_linear keeps them. */
GPTConfig gpt_frozen_config(const GPTConfig *cfg);
/* A whole model holding base and adapters (GPT_PART_ALL): W += s B A in
 * every adapted layer (the adapters stay as they are; in lora.c). */
void gpt_merge_adapters(GPT *model);
/* GPT-2 initialisation: N(0, 0.02), residual projections N(0, 0.02/sqrt(2L)),
 * biases 0, LayerNorm weights 1; padded rows 0. */
void gpt_init_weights(GPT *model, uint64_t seed);
/* The same values for the local range [offset, offset+count) only, into dst
 * (a ZeRO-3 shard); a shard gets its elements of the whole model's values. */
void gpt_init_range(const GPTConfig *cfg, uint64_t seed, float *dst, size_t offset, size_t count);
void gpt_zero_grads(GPT *model);
/* MoE: zeroes moe_step, moe_aux and moe_z (before a step's micro-steps). */
void gpt_moe_begin_step(GPT *model);
/* Rounds to bf16, in place, the matrices (wte, qkvw, attprojw, fcw, fcprojw)
 * of one block of parameters laid out as the model's. */
void gpt_round_block_matrices(const GPTConfig *cfg, float *block_base, int block);
/* bf16 mode: turns it on (allocating the copy if the model holds its
 * parameters, and the matmuls on path: see matmul_bf16.h) and refreshes the copy from the fp32 masters: call after every
 * change of model->params (init, load, update) and of head_wte. */
void gpt_enable_bf16(GPT *model, MatmulBF16Path path);
void gpt_refresh_bf16(GPT *model);
/* fp8 mode: turns it on with scales for the shard's layers (call once). */
void gpt_enable_fp8(GPT *model, const Fp8Options *options);

/* Activations for a (B, T) batch shape, allocated once; forward may run any
 * b <= B, t <= T. With context parallelism T is the local rows and each
 * layer's attention probabilities span the whole sequence (T x cp_size).
 * With cfg->recompute a set keeps only part of each layer's activations
 * (GPTRecompute) and one shared copy of the rest, which forward and then
 * backward (recomputing) refill layer by layer. */
typedef struct {
    int B, T;
    int scratch_slots;
    float *memory;  /* all activations in one allocation */
    size_t layer_stride;
    float *shared_layer;  /* recomputation: the activations no layer keeps, one layer's (GPTRecompute) */
    float *shared_memory; /* shared_layer's allocation when this set owns it */
    float *encoded, *layers, *lnf, *lnf_mean, *lnf_rstd, *logits, *losses, *proj_out;
    float *grad_memory; /* backward scratch in one allocation */
    float *dresidual, *dln, *datty, *dqkv, *dfch, *att_scratch;
    double *row_stats; /* tensor-parallel softmax: per-row max, sum, target logit */
    float *dround;     /* bf16 mode: a rounded copy of a gradient that also flows on in fp32 (N,C) */
    float *stash;        /* split sets only: what gpt_backward_weight needs from gpt_backward_input */
    size_t stashed_rows; /* rows gpt_backward_input kept for gpt_backward_weight (0: none pending) */
    int32_t *doc_start;  /* (B,T): the first position of each token's document (model->doc_separator >= 0) */
    int32_t *positions;  /* (B,T): each token's position for the encoder (context parallelism, packed documents) */
    float *lora_scratch; /* LoRA: lora.h's LoraScratch */
    uint64_t *lora_row_keys; /* LoRA dropout: each token's key (B,T), set by a training forward */
    bool lora_dropout_on;    /* the last forward trained with dropout: backward uses the same masks */
    MoeLayer **moe;      /* MoE: (stage layers, B) layers, one per sequence (capacity groups) */
    size_t moe_layers;   /* their number */
    void **moe_ep;       /* expert parallelism: (stage layers) hook states, made at first use */
    const MoeExpertHooks *moe_ep_hooks; /* what made them */
    MoeStats *moe_stats; /* MoE: per stage layer, the last forward's statistics (data-parallel sums in training) */
    bool doc_masked;     /* the last forward masked attention by document (doc_start holds the starts) */
} GPTActs;

void gpt_acts_create(GPTActs *acts, const GPTConfig *cfg, int B, int T, bool for_training);
void gpt_acts_free(GPTActs *acts);
/* Makes dst use src's backward scratch and recomputed layer (freeing its
 * own): one backward runs at a time, and no call leaves the recomputed
 * layer's contents for a later one, so pipeline slots can share them (with
 * recomputation a stage holds one layer's recomputed activations, not one
 * per micro-batch in flight). src must outlive dst. */
void gpt_acts_share_backward(GPTActs *dst, const GPTActs *src);
size_t gpt_acts_bytes(const GPTConfig *cfg, int B, int T, bool for_training);
/* A training set for the split backward (gpt_backward_input, later
 * gpt_backward_weight) with its stash: the fp32 output gradient of every
 * linear layer and LayerNorm of the stage (6 per layer, the final LayerNorm's)
 * and the residual gradient at the encoder; the head's dlogits stay in the
 * logits. The stash is the set's own (gpt_acts_share_backward leaves it), so B
 * of other micro-batches may run between this set's B and its W. */
void gpt_acts_create_split(GPTActs *acts, const GPTConfig *cfg, int B, int T);
/* What a split set adds to gpt_acts_bytes(cfg, B, T, true): its stash, per
 * layer B*T*(4C + 4C/tp + 3C/tp) floats, plus B*T*C for the head and for the
 * encoder where the stage has them. */
size_t gpt_acts_stash_bytes(const GPTConfig *cfg, int B, int T);

/* Where forward and backward find each block's parameters and put its
 * gradients. NULL means the model's own flat buffers. Data parallelism uses it
 * to launch a bucket's reduction as soon as backward finishes the bucket's
 * blocks, and ZeRO-3 to gather a block's parameters just before use.
 * Forward uses blocks 0, 1..L, L+1 in that order; backward L+1, L, ..., 1, 0
 * (block 0, the embeddings, also at its start: the output layer is tied). */
typedef struct {
    float *(*params)(void *ctx, int block);     /* the block's parameters, block layout */
    void (*params_done)(void *ctx, int block);  /* not needed again in this pass */
    float *(*grads)(void *ctx, int block);      /* where to accumulate its gradients */
    void (*grads_done)(void *ctx, int block);   /* its gradients are final for this micro-step */
    void *ctx;
} BlockAccess;

/* Forward pass over tokens (b,t). With targets, the per-token losses are
 * written to acts->losses and their sum is returned (double); with
 * dloss != 0 the logits are replaced by their gradient for backward (dloss is
 * d(total loss)/d(token loss), usually 1/tokens in the global batch).
 * Without targets the logits are left for sampling and 0 is returned.
 * A pipeline stage without the encoder reads its input from gpt_stage_input
 * (inputs may then be NULL); a stage without the head leaves its output in
 * gpt_stage_output and returns 0 (targets ignored). */
double gpt_forward(GPT *model, GPTActs *acts, const int32_t *inputs, const int32_t *targets, int b, int t,
                   float dloss, const BlockAccess *access);

/* The pipeline stage's activation input (b,t,C) and output (b,t,C). */
float *gpt_stage_input(const GPTConfig *cfg, GPTActs *acts);
float *gpt_stage_output(const GPTConfig *cfg, GPTActs *acts);
/* Gradient with respect to the stage's output (written by the caller before
 * backward on a stage without the head) and, after backward, with respect to
 * its input (to send to the previous stage). */
float *gpt_stage_grad(GPTActs *acts);

/* Backward after gpt_forward(..., dloss != 0); accumulates (+=) gradients. */
void gpt_backward(GPT *model, GPTActs *acts, const int32_t *inputs, int b, int t, const BlockAccess *access);

/* gpt_backward in two passes, for schedules that defer the weight gradients
 * (ZB-H1), on a set from gpt_acts_create_split. B: the activation gradients
 * only, through access->params/params_done and the tensor-parallel
 * all-reduces, down to gpt_stage_grad (valid until the next B on a set that
 * shares this one's scratch); it never calls access->grads and touches no
 * gradient buffer. W, later, on the same set (its activations untouched
 * since, inputs the same tokens) with the same (b,t): every parameter
 * gradient of that micro-batch from what B kept, blocks L+1,
 * L..1, 0 through access->grads/grads_done (block 0 also first when the
 * output layer is tied), extra_wte_grad as gpt_backward takes it; it reads
 * no parameters and communicates nothing. B then W accumulates the bits of
 * gpt_backward, and B(m0) B(m1) W(m0) W(m1) those of backward m0 then m1. */
void gpt_backward_input(GPT *model, GPTActs *acts, const int32_t *inputs, int b, int t, const BlockAccess *access);
void gpt_backward_weight(GPT *model, GPTActs *acts, const int32_t *inputs, int b, int t, const BlockAccess *access);

/* FLOPs per trained token of the whole model: 6 x params (an MoE layer's
 * active ones: K of its E experts; the router's and capacity's work not
 * counted) + 12 x L x C x T
 * (attention counted in full, as in the PaLM/nanoGPT convention, though the
 * kernel skips the masked half). */
double gpt_flops_per_token(const GPTConfig *cfg, int seq_len);

#endif

/* gpt_device.h: the GPT-2 training step on a device (device/device.h):
 * forward, backward, the gradient's per-tensor sums of squares and AdamW,
 * with parameters, gradients and both moments in flat device buffers at the
 * CPU layout's offsets (gpt_tensor_offset), so ranges, checkpoints and
 * resharding read them as they read the CPU's. The activations are one
 * device allocation made when the state first arrives (gpt_device_set_state,
 * after the options that shape them); nothing is allocated inside a step.
 * Token batches go in on a copy stream, which the compute stream waits for
 * through an event, with each token's document start when documents are
 * masked (attention inside the document, as gpt.h's doc_separator). A step
 * returns only its token losses and each layer's non-finite flag to the host;
 * the state stays on the device until gpt_device_get_state. For now
 * every layer of a dense model in fp32 or bf16 on one process, a pipeline
 * stage of it, or a tensor parallel shard of it in fp32 (gpt_device_set_tensor_group, gpt_device_tp.h),
 * each sequence's rows split over a context group (gpt_device_set_context_group,
 * gpt_device_cp.h); MoE layers dropless in the whole model (model/moe_device.h;
 * no expert parallelism, capacity factor or LoRA: refused with a
 * reason). Errors: -1 (or NULL) and the reason in reason / device_error. */
#ifndef BS_MODEL_GPT_DEVICE_H
#define BS_MODEL_GPT_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "comm/device_comm.h"
#include "device/device.h"
#include "model/context_attention.h"
#include "model/gpt.h"
#include "optim/adamw.h"

typedef struct GPTDevice GPTDevice;
typedef struct MoeDevice MoeDevice;

/* Tests of what sim catches: the step leaves out one event wait (the
 * compute stream's on the token upload, or on the tensor group's sums) or
 * one initialisation (the gradients' zeroing), or (with graphs) the update's
 * graph captures the learning rate and the other step values by value, not
 * from device memory. */
enum { GPT_DEVICE_SKIP_TOKEN_WAIT = 1, GPT_DEVICE_SKIP_GRAD_ZERO = 2, GPT_DEVICE_SKIP_TP_WAIT = 4,
       GPT_DEVICE_GRAPH_STEP_BY_VALUE = 8 };

/* Micro-batches of B sequences of T tokens; debug: the flags above (0: none). */
GPTDevice *gpt_device_create(Device *dev, const GPTConfig *cfg, int B, int T, int debug, char *reason,
                             size_t reason_size);
void gpt_device_free(GPTDevice *g);
/* Tensor parallelism (a shard config, gpt_tp_size > 1; before
 * gpt_device_set_state): comm is the tensor group's (created on
 * gpt_device_compute_stream, kept by the caller). -1 with the reason in
 * device_error when the device has no room. */
int gpt_device_set_tensor_group(GPTDevice *g, DeviceComm *comm);
/* Expert parallelism (an MoE shard config, gpt_ep_size > 1; before the first
 * step): this rank's experts compute the EP group's rows, moved over comm
 * (the group's device collectives, on gpt_device_compute_stream) with their
 * counts over ep_group (moe_device_exchange.h); both kept by the caller. */
void gpt_device_set_expert_group(GPTDevice *g, Comm *ep_group, DeviceComm *comm);
/* Context parallelism (gpt_cp_size > 1; B and T of gpt_device_create are
 * the local rows): comm is the context group's (rank of size, algorithm and
 * split as the CPU's, gpt_device_cp.h), kept by the caller. -1 with the
 * reason in reason (the unfused attention, no room). */
int gpt_device_set_context_group(GPTDevice *g, DeviceComm *comm, int size, int rank, CpAlgo algo, CpSplit split,
                                 char *reason, size_t reason_size);
/* bf16 compute, as gpt.h's bf16 mode (before gpt_device_set_state): every
 * product takes bf16 operands with fp32 accumulation: the weights from a
 * bf16 copy of every parameter at the layout's offsets (refreshed by the
 * fused AdamW), each input rounded, dout rounded for the products and kept in
 * fp32 for the bias gradient; the encoder reads wte rounded. The fp32
 * parameters stay the masters. -1 with the reason in device_error when the
 * device has no room. */
int gpt_device_enable_bf16(GPTDevice *g);
/* bf16 activation storage (after gpt_device_enable_bf16, before
 * gpt_device_set_state; model/acts_bf16_device.h): what each layer's
 * products read as bf16 kept as bf16 (bitwise the same training), the
 * layers sharing one fp32 copy of those buffers; statistics, softmax, loss
 * and sums stay fp32. -1 with the reason (no bf16 products, FP8, full
 * recomputation, or no room). */
int gpt_device_enable_bf16_activations(GPTDevice *g, char *reason, size_t reason_size);
/* fp8 compute (--precision fp8, either recipe; before any step, after
 * gpt_device_enable_bf16 for bf16 outside FP8): the four
 * linear layers of every transformer layer through DK_FP8_LINEAR_* with
 * the scales of fp8 (the host's state, site 4 x layer + linear as gpt.c's,
 * kept by the caller), the rest in fp32 or bf16. Each step's statistics (amax and
 * counts per tensor) are summed on the device between
 * gpt_device_fp8_begin_step and gpt_device_fp8_end_step, which adds them to
 * fp8's record; fp8_scaling_update then updates the scales on the host.
 * -1 with the reason in device_error. */
int gpt_device_enable_fp8(GPTDevice *g, Fp8State *fp8);
int gpt_device_fp8_begin_step(GPTDevice *g);
/* Graphs (model/step_graphs.h): each training micro-batch and each AdamW
 * update replayed from a captured graph (not with fp8: its scales are the
 * host's, passed by value). -1 with the reason in device_error. */
int gpt_device_enable_graphs(GPTDevice *g);
int gpt_device_fp8_end_step(GPTDevice *g);
/* Data parallelism at ZeRO >= 1: the range [offset, +count) of the flat
 * layout this rank updates (default: all). The moments and the gradients
 * cross to and from the host as that range only (packed), AdamW updates only
 * it and the sums of squares count only it (each rank's part, as the CPU's shards).
 * The moments are kept for that range only (allocated by gpt_device_set_state). */
int gpt_device_set_update_range(GPTDevice *g, size_t offset, size_t count);
/* Expert parallelism at ZeRO 1-2: several such ranges (the CPU's dp_piece:
 * from offset, count floats, packed in the host's moments from packed), in
 * ascending order, all this rank's own. AdamW updates them only and the sums
 * of squares count them only (every tensor's, the dense ones on every ep
 * rank: each rank's pieces are its own, as the CPU's); the moments cross to and from the host as the packed pieces, but the
 * device keeps them whole-layout sized (not saving their memory yet), and the
 * gradient whole (not with gpt_device_keep_grad_part or _param_part). */
typedef struct {
    size_t offset, count, packed;
} GPTDevicePiece;
int gpt_device_set_update_pieces(GPTDevice *g, const GPTDevicePiece *pieces, int n);
/* count floats of the gradient from flat offset to the host (grads). */
int gpt_device_get_grads(GPTDevice *g, size_t offset, size_t count, float *grads);
/* Data parallelism: where backward writes each block's gradient (a
 * gpt_block_range block's floats from its first; grads NULL or returning
 * NULL: the flat buffer) and the word that backward has queued a block's last
 * gradient work on the compute stream (the final LayerNorm L + 1 first, down
 * to the embeddings 0, whose gradient the classifier starts in forward).
 * Called on the host while the step queues its work; NULL: no hooks. */
typedef struct {
    float *(*grads)(void *ctx, int block);
    void (*grads_done)(void *ctx, int block);
    void *ctx;
} GPTDeviceGradHooks;
void gpt_device_set_grad_hooks(GPTDevice *g, const GPTDeviceGradHooks *hooks);
/* ZeRO 2 (before gpt_device_set_state, which allocates it; backward then
 * writes through the hooks): the flat gradient buffer keeps only the update
 * range, so gpt_device_array(GPT_DEVICE_GRADS) is the range's first float
 * and gpt_device_first_nonfinite_block / gpt_device_poison_grad are not for
 * it (the hooks' buffers are checked instead). */
void gpt_device_keep_grad_part(GPTDevice *g);
/* ZeRO 3: where each block's parameters are for one use (forward: the
 * embeddings, layers 1..L, the final LayerNorm, the embeddings again for the
 * classifier; training's backward then L + 1 down to 1), each use ended by
 * params_done once its work is queued on the compute stream; NULL hooks: the
 * flat buffer. With gpt_device_keep_param_part (before gpt_device_set_state)
 * the flat buffer keeps the update range only: set_state, get_state and
 * gpt_device_array(GPT_DEVICE_PARAMS) then hold that range. fp32 only (the
 * bf16 copies are of the whole flat buffer). */
typedef struct {
    float *(*params)(void *ctx, int block);
    void (*params_done)(void *ctx, int block);
    void *ctx;
} GPTDeviceParamHooks;
void gpt_device_set_param_hooks(GPTDevice *g, const GPTDeviceParamHooks *hooks);
void gpt_device_keep_param_part(GPTDevice *g);
/* The state from the host (params: gpt_num_params floats; m and v: the
 * update range's; NULL: zeros), and back (grads, m and v: the update range's;
 * any NULL is skipped). */
int gpt_device_set_state(GPTDevice *g, const float *params, const float *m, const float *v);
int gpt_device_get_state(GPTDevice *g, float *params, float *grads, float *m, float *v);
int gpt_device_zero_grads(GPTDevice *g);
/* Attention stays inside documents starting at this token id (-1: off, the default). */
void gpt_device_set_doc_separator(GPTDevice *g, int32_t separator);
/* Attention through the fused kernels (FlashAttention-2, device/flash_math.h:
 * the default where a head has at most FLASH_MAX_HEAD channels) or the
 * unfused ones that keep the (T,T) probabilities; -1 with the reason in
 * reason for fused attention on wider heads. */
int gpt_device_set_fused_attention(GPTDevice *g, bool fused, char *reason, size_t reason_size);
/* One micro-batch forward and backward: the gradients += d(dloss x sum of
 * token losses); *loss_sum = the sum of its token losses (masked targets
 * < 0 count 0). inputs and targets (B T) are read before it returns. */
int gpt_device_step(GPTDevice *g, const int32_t *inputs, const int32_t *targets, float dloss, double *loss_sum);
/* The first layer whose output was not finite in the last
 * gpt_device_step's forward, -1 if none (the step copies one flag per
 * layer back with its losses). */
int gpt_device_nonfinite_layer(const GPTDevice *g);
/* The gradient's sum of squares (every tensor, summed in layout order;
 * under tensor parallelism the replicated tensors count on tensor rank 0
 * alone, gpt_tensor_primary, so that the group's sum counts each once). */
int gpt_device_grad_sum_squares(GPTDevice *g, double *out);
/* The tensors of the layout (gpt_param_segments' order), and each one's sum
 * of squares of the gradients or the parameters, computed on the device
 * (only the sums come back; 0 for a replicated tensor off tensor rank 0, as above). */
typedef enum { GPT_DEVICE_GRADS, GPT_DEVICE_PARAMS } GPTDeviceArray;
int gpt_device_num_tensors(const GPTDevice *g);
int gpt_device_tensor_sum_squares(GPTDevice *g, GPTDeviceArray which, double *per_tensor);
/* The first block (gpt_block_range: 0 the embeddings, L + 1 the final
 * LayerNorm), in backward's order from the head down, whose gradient holds a
 * non-finite value, or -1: *block. */
int gpt_device_first_nonfinite_block(GPTDevice *g, int *block);
/* Tests of the guard (--debug-inject-fault nan): the first gradient of
 * block becomes NaN. */
int gpt_device_poison_grad(GPTDevice *g, int block);
/* The compute stream (collectives order their work after it) and the
 * device's flat gradients or parameters (collectives write them in place). */
DeviceStream *gpt_device_compute_stream(const GPTDevice *g);
const GPTConfig *gpt_device_config(const GPTDevice *g);
/* The update range (gpt_device_set_update_range). */
void gpt_device_update_range(const GPTDevice *g, size_t *offset, size_t *count);
float *gpt_device_array(const GPTDevice *g, GPTDeviceArray which);
/* After the parameters changed on the device outside AdamW (an all-gather):
 * their bf16 copies again. */
int gpt_device_params_changed(GPTDevice *g);
/* Pipeline stages (cfg a stage of gpt_set_shard: its layers, the encoder on
 * the first, the head on the last; parallel/pipeline_device.c drives them).
 * Activation set `set` (made at first use, kept) is the one the calls below
 * and gpt_device_step use from now on (set 0: the one made at creation). */
int gpt_device_use_acts(GPTDevice *g, int set);
/* The set's input (B T C: a stage without the encoder receives it here before
 * its forward), output (a stage without the head sends it after its
 * forward) and the gradient: of the output before backward on a stage
 * without the head (received here), of the input after it (sent back). */
float *gpt_device_stage_input(const GPTDevice *g);
float *gpt_device_stage_output(const GPTDevice *g);
float *gpt_device_stage_grad(const GPTDevice *g);
/* gpt_device_step's forward (losses and flags to the host: the head's loss
 * sum, 0 elsewhere) and, later, its backward (queued, not waited for). */
int gpt_device_stage_forward(GPTDevice *g, const int32_t *inputs, const int32_t *targets, float dloss, double *loss_sum);
int gpt_device_stage_backward(GPTDevice *g);
/* The split backward (zbh1), as gpt.h's gpt_backward_input / _weight: B
 * (the input's gradient, the stage's parameter gradients left out) and,
 * later on the same set, W (they are added, from what B kept in the set's
 * stash). Only after gpt_device_enable_split_backward (before the first
 * stage step: every set then carves each layer's stash, eleven B T C
 * floats; not with full recomputation); -1 otherwise. */
int gpt_device_enable_split_backward(GPTDevice *g);
int gpt_device_stage_backward_input(GPTDevice *g);
int gpt_device_stage_backward_weight(GPTDevice *g);
/* The last stage's copy of the tied output weights (GPT_DEVICE_PARAMS, kept
 * current by the caller) and their gradient (GPT_DEVICE_GRADS, zeroed with
 * the gradients, which the caller adds to the first stage's wte); NULL on a
 * stage that holds the embeddings. A tensor-parallel shard's copy is its
 * rows of the vocabulary (the first stage's shard), the gradient its rows of
 * the whole one the head computes. */
float *gpt_device_head_wte(const GPTDevice *g, GPTDeviceArray which);
/* After the head's copy changed: its bf16 bits again (bf16 mode) and, on a tensor-parallel shard, the whole
 * vocabulary gathered from the tensor group's copies (collective over it); queued on the compute stream. */
int gpt_device_head_changed(GPTDevice *g);
/* AdamW on every tensor's part in the update range, all in one launch (weight decay where gpt_tensor_decays), s->weight_decay the rate. */
int gpt_device_adamw(GPTDevice *g, const AdamWStep *s);

/* The MoE layers (model/moe_device.h: the step's biases, loss weight and statistics), NULL in a dense model. */
MoeDevice *gpt_device_moe(const GPTDevice *g);

#endif

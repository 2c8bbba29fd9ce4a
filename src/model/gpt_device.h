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
 * the whole dense model in fp32 or bf16, or a pipeline stage of it
 * (no tensor/context parallelism, MoE or LoRA: refused with a
 * reason). Errors: -1 (or NULL) and the reason in reason / device_error. */
#ifndef BS_MODEL_GPT_DEVICE_H
#define BS_MODEL_GPT_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "device/device.h"
#include "model/gpt.h"
#include "optim/adamw.h"

typedef struct GPTDevice GPTDevice;

/* Tests of what sim catches: the step leaves out one event wait (the
 * compute stream's on the token upload) or one initialisation (the
 * gradients' zeroing). */
enum { GPT_DEVICE_SKIP_TOKEN_WAIT = 1, GPT_DEVICE_SKIP_GRAD_ZERO = 2 };

/* Micro-batches of B sequences of T tokens; debug: the flags above (0: none). */
GPTDevice *gpt_device_create(Device *dev, const GPTConfig *cfg, int B, int T, int debug, char *reason,
                             size_t reason_size);
void gpt_device_free(GPTDevice *g);
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
int gpt_device_fp8_end_step(GPTDevice *g);
/* Data parallelism at ZeRO >= 1: the range [offset, +count) of the flat
 * layout this rank updates (default: all). The moments and the gradients
 * cross to and from the host as that range only (packed), AdamW updates only
 * it and the sums of squares count only it (each rank's part, as the CPU's shards). */
int gpt_device_set_update_range(GPTDevice *g, size_t offset, size_t count);
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
/* The gradient's sum of squares (every tensor, summed in layout order). */
int gpt_device_grad_sum_squares(GPTDevice *g, double *out);
/* The tensors of the layout (gpt_param_segments' order), and each one's sum
 * of squares of the gradients or the parameters, computed on the device
 * (only the sums come back). */
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
/* The last stage's copy of the tied output weights (GPT_DEVICE_PARAMS, kept
 * current by the caller) and their gradient (GPT_DEVICE_GRADS, zeroed with
 * the gradients, which the caller adds to the first stage's wte); NULL on a
 * stage that holds the embeddings. */
float *gpt_device_head_wte(const GPTDevice *g, GPTDeviceArray which);
/* AdamW on every tensor's part in the update range, all in one launch (weight decay where gpt_tensor_decays), s->weight_decay the rate. */
int gpt_device_adamw(GPTDevice *g, const AdamWStep *s);

#endif

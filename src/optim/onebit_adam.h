/* onebit_adam.h: the arithmetic of 1-bit Adam (Tang et al. 2021, "1-bit
 * Adam: Communication Efficient Large-Scale Training with Adam's Convergence
 * Speed"; DeepSpeed's OnebitAdam) on contiguous ranges. The communication is
 * comm/compressed.h's exchange all-reduce with the 1-bit codec; this file
 * knows nothing of ranks.
 *
 * Steps 1..freeze_step (warm-up): plain Adam on the all-reduced gradient,
 * exactly adamw_update (same arithmetic, so the same bits).
 * Steps after freeze_step (compression stage): v is frozen; each rank
 *   1. updates its local momentum from its own, unreduced gradient over the
 *      whole buffer:  m = b1 m + (1 - b1) g_local          (local_momentum)
 *   2. replaces m by the mean over ranks of the compressed momenta: the
 *      exchange all-reduce with codec onebit, average on, the rank's worker
 *      residual (whole buffer) and server residual (its chunk): every rank
 *      then holds the same m;
 *   3. updates its parameters with that m and the frozen v:
 *      p = p (1 - lr wd) - lr m_hat / (sqrt(v_hat) + eps)    (apply)
 *      m_hat = m / (1 - b1^t), v_hat = v / (1 - b2^freeze_step): Adam's bias
 *      corrections, the variance's frozen with v (DeepSpeed applies none; we
 *      keep them so that the warm-up is this project's AdamW bit for bit and
 *      the compression stage continues it without a jump).
 * Elements whose frozen v is exactly 0 (no gradient in the whole warm-up,
 * e.g. embeddings of tokens never seen) are not moved by the momentum: 1-bit
 * cannot send a zero, and +-s / eps would throw them far (DeepSpeed asks the
 * user for a mask of them; here it is implied by v). Decay still applies.
 *
 * The gradient is not all-reduced in the compression stage, so the trainer
 * cannot clip by the global norm there; local_scale carries what scaling
 * it wants. Deliberately not here: checkpoints, the exchange itself, the
 * learning-rate schedule. */
#ifndef BS_OPTIM_ONEBIT_ADAM_H
#define BS_OPTIM_ONEBIT_ADAM_H

#include <stdbool.h>
#include <stddef.h>

typedef struct {
    float lr;
    float beta1, beta2, eps;
    float weight_decay; /* decoupled; the caller passes 0 for tensors that do not decay */
    float grad_scale;   /* warm-up: gradients are multiplied by this first (clipping) */
    long step;          /* 1-based */
    long freeze_step;   /* >= 1: the last step of plain Adam */
} OnebitAdamStep;

/* True when this step compresses the momentum (step > freeze_step). */
bool onebit_adam_compressing(const OnebitAdamStep *s);

/* Warm-up step on the reduced gradient: exactly adamw_update. */
void onebit_adam_warmup(float *params, const float *grads, float *m, float *v, size_t n, const OnebitAdamStep *s);

/* Compression stage, before the exchange: m = b1 m + (1 - b1) local_scale g
 * over the rank's whole buffer, g its own gradient. When each rank's gradient
 * is its share of a sum over the group (the trainer's loss is the mean over
 * the global batch), pass local_scale = group size (times any clip factor):
 * the mean over ranks of the local momenta is then the momentum of the
 * global gradient. */
void onebit_adam_local_momentum(float *m, const float *grads, size_t n, float beta1, float local_scale);

/* Compression stage, after the exchange: the update of a range (the whole
 * buffer, or a ZeRO shard: m, v and params all hold the same elements). */
void onebit_adam_apply(float *params, const float *m, const float *v, size_t n, const OnebitAdamStep *s);

#endif

/* compression.h: compressed communication in the trainer: the data-parallel
 * options from the flags (--grad-compression, --compression-block,
 * --compression-scheme, --no-error-feedback, --zero-quant-weights,
 * --zero-quant-grads, --zero-hpz), 1-bit Adam's compression stage
 * (--optimizer onebit-adam --freeze-step S) and the error-feedback residuals
 * a checkpoint keeps.
 *
 * qgZ (--zero-quant-grads, ZeRO 1-3) is ZeRO++'s quantized gradients: every
 * gradient reduce-scatter runs the qgz scheme of comm/compressed.h (int8
 * all-to-all inside the node, int8 all-to-all across nodes, blocks of
 * --compression-block), with no error-feedback residual, as in ZeRO++.
 *
 * 1-bit Adam here (Tang et al. 2021; DeepSpeed's OnebitAdam, extended to
 * ZeRO stage 1): steps 1..S are AdamW on the exactly all-reduced gradient
 * (the optimizer front door); from step S+1 no gradient is reduced: every
 * rank folds its own gradient (times the group size: the loss is the mean
 * over the global batch) into a momentum over the whole flat buffer, the
 * momenta are averaged by the exchange all-reduce with the 1-bit codec and
 * worker and server error feedback, and each rank applies that momentum with
 * the variance frozen at step S to the parameters it updates (all of them,
 * or its ZeRO-1 shard, after which the parameters are all-gathered as
 * usual). Under ZeRO-1 the full momentum is gathered from the shards once,
 * at the first compressed step (or the first after a resume); its shard is
 * copied back into the optimizer state after each step, which is what
 * checkpoints hold. The global gradient norm is not known in the
 * compression stage, so there is no clipping there; the reported grad_norm
 * is the root mean square over ranks of each rank's own estimate of the
 * global gradient (group size x its gradient). */
#ifndef BS_TRAIN_COMPRESSION_H
#define BS_TRAIN_COMPRESSION_H

#include "ckpt/ckpt_extra.h"
#include "parallel/data_parallel.h"
#include "train/trainer_state.h"

/* Fills the compression fields of the data-parallel options; dies with one
 * line naming the flag on a bad value or combination. */
void compression_dp_options(const TrainConfig *cfg, DPOptions *opt);
/* After the optimizer is set up: checks and allocates 1-bit Adam's state. */
void onebit_setup(Trainer *tr);
void compression_free(Trainer *tr);

/* True when the next optimizer step is in 1-bit Adam's compression stage. */
bool onebit_compressing(const Trainer *tr);
/* The compression stage's squared gradient norm (see above). Collective. */
double onebit_grad_sum_squares(Trainer *tr);
/* The compression stage's update (momentum exchange and apply). Collective. */
void onebit_update(Trainer *tr, double lr);

/* This rank's error-feedback residuals (gradient codec and 1-bit Adam) as
 * checkpoint arrays, and the label they are valid for. Returns the count. */
int compression_feedback_arrays(Trainer *tr, int workers, CkptExtraArray *arrays, char *label, size_t label_size);
/* Forgets every residual (after a skipped step, whose reduction may have
 * left NaN in them; or on resuming under another layout). */
void compression_reset_feedback(Trainer *tr);

#endif

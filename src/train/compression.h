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
 * global gradient (group size x its gradient).
 *
 * A feature (train/feature.h): compression_feature, always on (the
 * data-parallel options, the residuals in checkpoints); with --optimizer
 * onebit-adam its update path. */
#ifndef BS_TRAIN_COMPRESSION_H
#define BS_TRAIN_COMPRESSION_H

#include "train/feature.h"

extern const Feature compression_feature;

/* Gradient compression: the flag-combination rules of this area, run by train_config_check in its order (the first broken
 * one is reported): false with a one-line reason. */
bool compression_check_config(const TrainConfig *c, char *why, size_t n);

#endif

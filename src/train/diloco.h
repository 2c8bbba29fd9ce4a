/* diloco.h: low-communication data parallelism: DiLoCo (Douillard et al.
 * 2023), FedAvg (McMahan et al. 2017) and FedProx (Li et al. 2020)
 * (--local-steps H --outer-optimizer nesterov|sgd|avg --outer-lr
 * --outer-momentum --prox-mu).
 *
 * Each data-parallel replica is a worker: its gradients are never reduced;
 * it takes H inner optimizer steps (--optimizer, its own state kept across
 * windows) on the mean loss of its own share of each global batch. After
 * every H-th step the pseudo-gradient delta = global - local weights is
 * averaged over the workers (an all-reduce, or the --grad-compression codec
 * with error feedback), the global weights take one outer step
 * (optim/outer_optimizer.h) and every worker restarts from them. FedProx adds
 * mu/2 |w - global|^2 to the inner loss. Each rank holds its (tensor or
 * pipeline) shard's global weights and outer momentum; ZeRO 0 only (every
 * worker keeps its own optimizer state), one model chunk, no context
 * parallelism (its ranks must reduce their partial gradients every step).
 *
 * Checkpoints: the manifest's parameters are the global weights; each rank's
 * extra file keeps its local weights, inner optimizer state, outer momentum
 * and residuals, so a resume inside a window continues bit for bit (another
 * layout restarts the window from the global weights, with a warning).
 *
 * A feature (train/feature.h): diloco_feature, with its own update path. */
#ifndef BS_TRAIN_DILOCO_H
#define BS_TRAIN_DILOCO_H

#include "train/feature.h"

extern const Feature diloco_feature; /* on with --local-steps H */

/* DiLoCo / FedAvg: the flag-combination rules of this area, run by train_config_check in its order (the first broken
 * one is reported): false with a one-line reason. */
bool diloco_check_config(const TrainConfig *c, char *why, size_t n);

#endif

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
 * layout restarts the window from the global weights, with a warning). */
#ifndef BS_TRAIN_DILOCO_H
#define BS_TRAIN_DILOCO_H

#include <stdbool.h>

#include "ckpt/ckpt.h"
#include "ckpt/ckpt_extra.h"
#include "train/trainer_state.h"

#define DILOCO_ARRAYS 6 /* extra arrays a rank may keep */

/* After the engine: checks the combination (one line naming the flag) and
 * takes the global weights from the initial ones. */
void diloco_setup(Trainer *tr);
void diloco_free(Trainer *tr);
/* The factor on d(loss)/d(token loss): each worker's mean loss is over its
 * share of the global batch (the data-parallel size). */
float diloco_loss_scale(const Trainer *tr);
/* The squared gradient norm the guard and the metrics see: the mean over
 * the workers of each one's own (kept for its clipping). Collective. */
double diloco_grad_sum_squares(Trainer *tr);
/* --local-steps-jitter: whether this worker sits out optimizer step `step`
 * (1-based): it has taken its H - j inner steps of the window already. Its
 * forward and backward still run (the ranks step in lockstep), the update
 * does not, and the window's average weighs it by the steps it took. */
bool diloco_idle(const Trainer *tr, long step);
/* FedProx: grads += mu (local - global), before the inner step. */
void diloco_prox(Trainer *tr);
/* After the inner step of optimizer step `step`: the outer step at the end
 * of a window. Collective over the data-parallel group. */
void diloco_after_step(Trainer *tr, long step);

/* Checkpoints: the global weights in the parameters while they are written. */
void diloco_before_save(Trainer *tr);
void diloco_after_save(Trainer *tr);
/* This rank's arrays and the label they are valid for with `workers`
 * workers (this run's dp size, or a checkpoint's); returns the count. */
int diloco_arrays(Trainer *tr, int workers, CkptExtraArray *arrays, char *label, size_t label_size);
/* Elastic shrink (fewer workers than the checkpoint's, the same model split,
 * no codec): worker i takes over the old worker i's window (local weights,
 * inner optimizer state, the common outer momentum), and the workers beyond
 * the new count are lost, their window's pseudo-gradients discarded. The
 * checkpoint rank whose state this rank takes, or -1 when that does not apply. */
int diloco_survivor_source(const Trainer *tr, const CkptManifest *m);
/* After a resume read the parameters (the global weights) and, if restored,
 * the arrays: the local weights back in place. */
void diloco_after_resume(Trainer *tr, bool restored);

#endif

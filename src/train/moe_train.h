/* moe_train.h: the trainer's side of Mixture-of-Experts models: the skewed
 * router start (tests), loss-free balancing's bias update after each step,
 * the step's MoE metrics, and the bias in checkpoints.
 *
 * The selection bias (E floats per layer, model/gpt.h's moe_bias) is model
 * state, not trained: after every step that updates, bias_i += u x
 * sign(mean load - load_i) (DeepSeek-V3) with the loads routed over the
 * step's micro-batches and the data-parallel group, which every rank holds
 * alike (the statistics are all-reduced in forward), so the bias stays
 * identical on every rank without communication.
 *
 * Checkpoints: moe_bias.bin beside the rank files, written by world rank 0:
 *   "BSMOEB01" 8 bytes, u32 layers, u32 experts, then layers x experts
 *   floats (layer by layer)
 * read on every rank at resume; a checkpoint of another MoE shape (or of
 * a dense model, which has no such file) is refused in one line. */
#ifndef BS_TRAIN_MOE_TRAIN_H
#define BS_TRAIN_MOE_TRAIN_H

#include "train/trainer_state.h"

/* --moe-skew F: every layer's selection bias of expert 0 starts at F, a
 * skewed router start (before any resume, which replaces it). */
void moe_train_setup(Trainer *tr);
/* After the step's update (updated: false for a skipped step, which keeps
 * the bias): the bias update and the step's metrics into tr->moe. */
void moe_train_end_step(Trainer *tr, bool updated);
void moe_ckpt_save(const Trainer *tr, const char *dir);
void moe_ckpt_resume(Trainer *tr, const char *dir);

#endif

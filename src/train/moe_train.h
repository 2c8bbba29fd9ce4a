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
 * Under pipeline parallelism each stage updates its own layers' bias; the
 * metrics (one entry per MoE layer, in model order) and the aux and z losses
 * (summed over every layer) are summed over the pipeline group, so every
 * rank reports the whole model's.
 *
 * Checkpoints: moe_bias.bin beside the rank files, written by world rank 0
 * after gathering every stage's layers:
 *   "BSMOEB01" 8 bytes, u32 layers, u32 experts, then layers x experts
 *   floats (layer by layer; the dense layers of --moe-every N > 1 zero)
 * read on every rank at resume (each takes its stage's layers); a checkpoint
 * of another MoE shape (or of a dense model, which has no such file) is
 * refused in one line. The bias goes into and comes from model files as
 * h.N.mlp.gate.e_score_correction_bias (model/safetensors_moe.h).
 *
 * A feature (train/feature.h): moe_feature, always on (a dense run refuses an
 * MoE checkpoint); --debug-moe-skew F starts every MoE layer's router row of expert
 * 0 multiplied by F (tests). */
#ifndef BS_TRAIN_MOE_TRAIN_H
#define BS_TRAIN_MOE_TRAIN_H

#include "train/feature.h"

extern const Feature moe_feature;

/* The file alone (ckpt export and import): (layers, E) floats; reading
 * returns a new array (NULL: no such file; dies if damaged). */
void moe_bias_file_write(const char *dir, int layers, int experts, const float *bias);
float *moe_bias_file_read(const char *dir, int *layers, int *experts);
/* A checkpoint's bias into a whole MoE model (ckpt export, sample); dies in one line if absent or misshapen. */
void moe_bias_file_load(const char *dir, GPT *model);

/* Mixture of Experts: the flag-combination rules of this area, run by train_config_check in its order (the first broken
 * one is reported): false with a one-line reason. */
bool moe_check_config(const TrainConfig *c, char *why, size_t n);

#endif

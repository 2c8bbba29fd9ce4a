/* train_ckpt.h: saving and restoring the trainer through ckpt/ under any
 * data-parallel layout: each rank writes its shard of parameters and
 * optimizer state; on resume each rank reads whatever ranges it now owns. */
#ifndef BS_TRAIN_TRAIN_CKPT_H
#define BS_TRAIN_TRAIN_CKPT_H

#include "train/trainer_state.h"

void train_save(Trainer *tr);
void train_resume(Trainer *tr);

/* Reads local [offset, offset+count) of the model shard `cfg` (the whole
 * model: gpt_logical_config) into params and/or state from a checkpoint
 * written under any layout. */
typedef struct CkptManifest CkptManifest;
void train_ckpt_read(const char *dir, const CkptManifest *m, const GPTConfig *cfg, size_t offset, size_t count,
                     float *params, float *const *state);

#endif

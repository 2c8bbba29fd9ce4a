/* train_ckpt.h: saving and restoring the trainer through ckpt/ under any
 * data-parallel layout: each rank writes its shard of parameters and
 * optimizer state; on resume each rank reads whatever ranges it now owns. */
#ifndef BS_TRAIN_TRAIN_CKPT_H
#define BS_TRAIN_TRAIN_CKPT_H

#include "train/trainer_state.h"

/* Writes a checkpoint of the current state (collective); returns the seconds
 * training stalled for it. With --async-ckpt the state is copied aside and
 * written by a background thread; train_save_poll (every step) commits it
 * once every rank's file is complete, train_save_finish waits for it. */
double train_save(Trainer *tr);
void train_save_poll(Trainer *tr);
void train_save_finish(Trainer *tr);
void train_save_free(Trainer *tr);
void train_resume(Trainer *tr);

/* Reads local [offset, offset+count) of the model shard `cfg` (the whole
 * model: gpt_logical_config) into params and/or state from a checkpoint
 * written under any layout. */
typedef struct CkptManifest CkptManifest;
void train_ckpt_read(const char *dir, const CkptManifest *m, const GPTConfig *cfg, size_t offset, size_t count,
                     float *params, float *const *state);

#endif

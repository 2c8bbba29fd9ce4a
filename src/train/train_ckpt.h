/* train_ckpt.h: saving and restoring the trainer through ckpt/ under any
 * data-parallel layout: each rank writes its shard of parameters and
 * optimizer state; on resume each rank reads whatever ranges it now owns. */
#ifndef BS_TRAIN_TRAIN_CKPT_H
#define BS_TRAIN_TRAIN_CKPT_H

#include "train/trainer_state.h"

void train_save(Trainer *tr);
void train_resume(Trainer *tr);

#endif

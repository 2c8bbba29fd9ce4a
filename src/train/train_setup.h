/* train_setup.h: building the trainer's state from its configuration
 * (validated again here for callers other than the command line; every
 * error one line naming the flag, before any training work) and freeing it. */
#ifndef BS_TRAIN_TRAIN_SETUP_H
#define BS_TRAIN_TRAIN_SETUP_H

#include "train/trainer_state.h"

void train_setup(Trainer *tr, const TrainConfig *cfg, Comm *world);
void train_teardown(Trainer *tr);

#endif

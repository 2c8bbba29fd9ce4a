/* trainer.h: the training job: configuration and the step loop.
 *
 * One optimizer step consumes one global batch of sequences:
 *   global_batch = micro_batch x accumulation_steps x data_parallel_size.
 * The loss is the mean over every token of the global batch, so the update
 * is the one a single process would compute on the whole batch. */
#ifndef BS_TRAIN_TRAINER_H
#define BS_TRAIN_TRAINER_H

#include <stdbool.h>

#include "comm/comm.h"
#include "train/train_config.h"

/* Runs the whole job on the processes of `world`; returns the exit status. */
int train_run(const TrainConfig *cfg, Comm *world);

#endif

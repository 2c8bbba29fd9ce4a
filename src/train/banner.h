/* banner.h: the job's opening lines on rank 0 (layout, model, batch,
 * schedule, optimizer, precision, data parallelism and per-rank memory,
 * compression, data). It reads the whole trainer because it describes all
 * of it; what is said while training runs is train/report.h's. */
#ifndef BS_TRAIN_BANNER_H
#define BS_TRAIN_BANNER_H

#include "train/trainer_state.h"

/* Collective where there is more than one stage or tensor-parallel rank
 * (each rank's layers are gathered); prints on rank 0 unless --quiet. */
void banner_print(const Trainer *tr);

#endif

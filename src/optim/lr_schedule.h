/* lr_schedule.h: learning rate as a function of training progress: linear
 * warm-up, then cosine decay to a floor. Progress is measured in any unit
 * (steps or tokens), the same for `warmup` and `total`. */
#ifndef BS_OPTIM_LR_SCHEDULE_H
#define BS_OPTIM_LR_SCHEDULE_H

typedef struct {
    double max_lr, min_lr;
    double warmup; /* progress at which warm-up ends */
    double total;  /* progress at which the decay reaches min_lr */
} LrSchedule;

/* lr for the update that brings progress to `pos` (pos > 0):
 * pos <= warmup: max_lr * pos / warmup;
 * after: min_lr + (max_lr - min_lr) * 0.5 (1 + cos(pi * (pos - warmup) / (total - warmup))),
 * held at min_lr beyond total. */
double lr_at(const LrSchedule *s, double pos);

#endif

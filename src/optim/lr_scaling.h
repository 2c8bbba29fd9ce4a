/* lr_scaling.h: the learning rate tied to the batch size (--lr-scaling with
 * --base-batch): lr = base_lr x k (linear rule, Goyal et al. 2017) or
 * base_lr x sqrt(k) (square-root rule), for k = current batch / base batch,
 * applied every step as the batch changes. Deliberately not here: warm-up
 * and decay (lr_schedule.h; measure them in tokens so a changing batch does
 * not distort them). */
#ifndef BS_OPTIM_LR_SCALING_H
#define BS_OPTIM_LR_SCALING_H

#include <stdbool.h>
#include <stddef.h>

typedef enum { LR_SCALING_NONE, LR_SCALING_LINEAR, LR_SCALING_SQRT } LrScaling;

/* "none", "linear" or "sqrt"; false with a one-line reason naming --lr-scaling. */
bool lr_scaling_parse(const char *name, LrScaling *rule, char *why, size_t why_size);
/* The multiplier of the base learning rate at `batch` sequences: 1, k or
 * sqrt(k) with k = batch / base_batch (both > 0). */
double lr_scaling_factor(LrScaling rule, long batch, long base_batch);

#endif

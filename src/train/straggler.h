/* straggler.h: stragglers from the ranks' compute times of a step: the
 * median, and the rank named when it is slower than the median by more than
 * a threshold. Pure arithmetic: gathering the times is the caller's. */
#ifndef BS_TRAIN_STRAGGLER_H
#define BS_TRAIN_STRAGGLER_H

/* The lower median of n times (with two ranks, the faster); scratch holds n
 * doubles. */
double straggler_median(const double *times, int n, double *scratch);
/* The slowest rank whose time exceeds median x (1 + threshold), or -1. */
int straggler_find(const double *times, int n, double median, double threshold);

#endif

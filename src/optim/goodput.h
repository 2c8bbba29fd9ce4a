/* goodput.h: the batch that maximises goodput (Pollux, Qiao et al. OSDI 2021):
 *
 *     goodput(B) = throughput(B) x efficiency(B)
 *     throughput(B) = B / seconds_per_step(B)              (sequences per second)
 *     efficiency(B) = (B_noise + B_0) / (B_noise + B)      (progress per sequence, relative to B_0)
 *
 * efficiency is McCandlish et al.'s: a step at batch B makes the progress of
 * (1 + B_noise / B)^-1 noise-free steps, so per sequence it is worth
 * 1 / (B_noise + B), normalised to 1 at the base batch B_0. B_0 only scales
 * goodput; it does not move the best batch.
 *
 * seconds_per_step(B): measured on this run for batch sizes tried (an EMA of
 * the step times at that size), predicted for the others from a least-squares
 * fit of t = a + b B over the tried sizes (each counted once); with
 * fitted_times (--goodput-time-fit) the fit for every size, tried or not, so
 * one size's timing scatter cannot flip a choice between neighbours: a is the
 * step's fixed cost (the optimizer over all parameters, the gradient
 * all-reduce, per-step overheads), b the per-sequence cost of forward and
 * backward. The fit is constrained to a >= 0 (a negative fixed cost from
 * noisy timings would make the smallest batch look free). With a > 0,
 * goodput over a continuous B peaks at sqrt(a B_noise / b); the choice here
 * is the best of the candidates MIN..MAX on multiples of the granule
 * (micro_batch x data-parallel ranks).
 *
 * Exploration: until two batch sizes are measured the fit has one point, so
 * the first decision moves to twice the current batch (within MAX, or to
 * MIN/the next granule below when the current one is MAX). A line given
 * from outside (--goodput-time-model) is recorded at MIN and MAX before the
 * first step, so nothing is explored.
 *
 * Deliberately not here: the timing of steps, the noise-scale estimator, when
 * decisions are taken (the trainer's). */
#ifndef BS_OPTIM_GOODPUT_H
#define BS_OPTIM_GOODPUT_H

#include <stdbool.h>

#define GOODPUT_MAX_SIZES 32  /* batch sizes remembered (each an EMA) */
#define GOODPUT_EMA 0.8       /* weight of the past in a size's step-time EMA */
#define GOODPUT_STATE_WORDS (1 + 3 * GOODPUT_MAX_SIZES) /* goodput_pack */

typedef struct {
    long batch;     /* sequences */
    double seconds; /* EMA of seconds per step at that batch */
    long steps;     /* steps measured */
} GoodputSize;

typedef struct {
    long min, max, granule, base; /* candidates: multiples of granule in [min, max]; base: B_0 */
    bool fitted_times;            /* seconds per step from the fit for tried sizes too (--goodput-time-fit) */
    int sizes;
    GoodputSize size[GOODPUT_MAX_SIZES];
} Goodput;

/* min and max are rounded to the granule (min up, max down); base is B_0. */
void goodput_init(Goodput *g, long min, long max, long granule, long base);
/* One step's time at batch `batch`; ignored when the table is full of other sizes or seconds <= 0. */
void goodput_record(Goodput *g, long batch, double seconds);
/* t = a + b B fitted over the measured sizes (a >= 0); false with fewer than two sizes. */
bool goodput_fit(const Goodput *g, double *a, double *b);
/* Seconds per step at `batch`: measured if tried (unless fitted_times), else fitted; NaN when neither. */
double goodput_step_seconds(const Goodput *g, long batch);
double goodput_efficiency(double b_noise, long base, long batch);
/* The batch for the next steps; `current` when b_noise is not a positive
 * number. *goodput and *efficiency: the chosen batch's (NaN if unknown). */
long goodput_choose(const Goodput *g, double b_noise, long current, double *goodput, double *efficiency);

/* The table as doubles (GOODPUT_STATE_WORDS) for checkpoints, and back. */
void goodput_pack(const Goodput *g, double *words);
bool goodput_unpack(Goodput *g, const double *words);

#endif

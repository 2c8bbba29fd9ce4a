/* noise_curve.h: a noise scale that changes as the loss falls, given as a
 * curve, for the goodput policy (--goodput-noise-curve, train/estimators.h).
 *
 * The curve is what `batch-sweep --along` measures: the critical batch of
 * each stretch of training between two losses, B_k = (E_min(L_k) -
 * E_min(L_k-1)) / (S_min(L_k) - S_min(L_k-1)), McCandlish et al.'s model
 * reading E_min as the integral of the noise scale over S_min. Written as
 * "TO:B" pairs with the losses decreasing,
 *
 *     2.8:9.5,2.6:12,2.45:15.2,2.3:19
 *
 * meaning "9.5 sequences until the loss falls to 2.8, then 12 until it falls
 * to 2.6, ...". The noise scale at loss L is the B of the first pair whose
 * loss is below L; below the last pair's loss the last B holds. Piecewise
 * constant, as the sweep measures it: no interpolation between stretches.
 *
 * Deliberately not here: which loss the trainer reads (the decision step's
 * training loss, estimators.c) and the policy (optim/goodput.h). */
#ifndef BS_OPTIM_NOISE_CURVE_H
#define BS_OPTIM_NOISE_CURVE_H

#include <stdbool.h>
#include <stddef.h>

#define NOISE_CURVE_MAX 16

typedef struct {
    int count;
    double loss[NOISE_CURVE_MAX];  /* decreasing, > 0 */
    double scale[NOISE_CURVE_MAX]; /* sequences, > 0: the noise scale until the loss reaches loss[k] */
} NoiseCurve;

/* Parses "TO:B,TO:B,..."; false with the reason in `why` (no flag name: the caller adds it). */
bool noise_curve_parse(const char *text, NoiseCurve *c, char *why, size_t n);
/* The noise scale at `loss`; NaN for a loss that is not a finite number. */
double noise_curve_at(const NoiseCurve *c, double loss);

#endif
